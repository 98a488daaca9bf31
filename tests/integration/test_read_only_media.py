"""Read commands on read-only media, on files that are not ledgers, and on a corrupt file.

A read command (verify, log, show, query, why, export) never changes a file it opens: a
genuine ledger on a read-only directory is read (immutable, no ``-wal``/``-shm`` made), a
file that is not a ledger is refused and left byte-identical with nothing beside it, and a
SQLite file whose pages are damaged is an integrity finding (exit 1), not a storage error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli
from memroot.ledger.errors import StorageError
from memroot.ledger.ledger import Ledger

ORIGIN = "example.org/read-only"
EVENT = {
    "kind": "event",
    "stream": "s",
    "actor_id": "alice",
    "actor_type": "HUMAN_USER",
    "role": "USER",
    "content": "I take my tea without sugar",
    "namespace_id": "alice",
}


def memroot(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def read_commands(path: Path, out: Path) -> dict[str, Result]:
    return {
        "verify": memroot(path, "verify", "--json", "--no-update"),
        "log": memroot(path, "log", "--json"),
        "show": memroot(path, "show", "1", "--json"),
        "query": memroot(path, "query", "--json"),
        "why": memroot(path, "why", "01900000-0000-7000-8000-000000000001", "--json"),
        "export": memroot(path, "export", str(out / "bundle")),
    }


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def side_files(path: Path) -> list[str]:
    return [s for s in ("-wal", "-shm", "-journal") if Path(f"{path}{s}").exists()]


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ro" / "agent.ledger"
    path.parent.mkdir()
    assert memroot(path, "init", "--origin", ORIGIN).exit_code == 0
    for i in range(5):
        assert memroot(path, "append", json.dumps({**EVENT, "content": f"m {i}"})).exit_code == 0
    assert side_files(path) == []  # the last writer closed cleanly
    return path


@contextlib.contextmanager
def read_only_directory(directory: Path) -> Iterator[None]:
    """Make ``directory`` read-only for this process: a read-only bind mount, or chmod."""
    if os.geteuid() == 0:
        mounted = subprocess.run(
            ["mount", "--bind", "-o", "ro", str(directory), str(directory)],
            capture_output=True,
            check=False,
        )
        if mounted.returncode != 0:
            pytest.skip("root without mount: cannot make a directory read-only")
        try:
            yield
        finally:
            subprocess.run(["umount", str(directory)], check=True)
        return
    directory.chmod(0o555)
    for p in directory.iterdir():
        p.chmod(0o444)
    try:
        yield
    finally:
        directory.chmod(0o755)
        for p in directory.iterdir():
            p.chmod(0o600)


def test_read_commands_work_on_a_read_only_directory(ledger: Path, tmp_path: Path) -> None:
    """verify, log, show, query, export read a ledger on read-only media; nothing is made."""
    before = digest(ledger)
    with read_only_directory(ledger.parent):
        with pytest.raises(OSError):
            (ledger.parent / "probe").write_text("x")
        results = read_commands(ledger, tmp_path)
        for name in ("verify", "log", "show", "query", "export"):
            assert results[name].exit_code == 0, (name, results[name].output)
        assert results["why"].exit_code == 3  # an unknown object, refused as usual
        assert len(json.loads(results["log"].stdout)) == 6
        assert json.loads(results["show"].stdout)["content"] == "m 0"
        with Ledger.open(ledger, readonly=True) as led:
            assert led.content(1) == "m 0"
        appended = memroot(ledger, "append", json.dumps(EVENT))
        assert appended.exit_code == 4 and "Traceback" not in appended.output
    assert side_files(ledger) == [] and digest(ledger) == before
    assert (tmp_path / "bundle" / "manifest.json").exists()


def _sqlite_file(path: Path, *, wal: bool) -> None:
    db = apsw.Connection(str(path))
    if wal:
        db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT)")
    db.execute("INSERT INTO notes(text) VALUES('not a ledger')")
    db.close()


@pytest.mark.parametrize("kind", ["empty", "sqlite", "sqlite-wal", "random-bytes"])
def test_foreign_files_are_refused_and_left_untouched(tmp_path: Path, kind: str) -> None:
    """Every read command refuses a file that is not a ledger and leaves it byte-identical."""
    path = tmp_path / "foreign.db"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "random-bytes":
        path.write_bytes(os.urandom(8192))
    else:
        _sqlite_file(path, wal=kind == "sqlite-wal")
    assert side_files(path) == []
    before = digest(path)
    for name, result in read_commands(path, tmp_path).items():
        assert result.exit_code == 4, (name, result.output)
        assert "not a memroot ledger" in result.stderr or "not a SQLite file" in result.stderr
        assert "Traceback" not in result.output
        assert digest(path) == before, name
        assert side_files(path) == [], name
    with pytest.raises(StorageError):
        Ledger.open(path)
    with pytest.raises(StorageError):
        Ledger.open(path, readonly=True)
    assert digest(path) == before and side_files(path) == []
    assert not (tmp_path / "bundle").exists()


def test_a_corrupt_sqlite_file_is_an_integrity_finding(ledger: Path, tmp_path: Path) -> None:
    """Pages overwritten in the middle of the file: verify and reads exit 1, no traceback."""
    copy = tmp_path / "corrupt.ledger"
    shutil.copy2(ledger, copy)
    data = bytearray(copy.read_bytes())
    page = 4096
    assert len(data) > 6 * page
    for p in range(2, len(data) // page):
        data[p * page : p * page + 64] = b"\xa5" * 64  # every b-tree page header after page 2
    copy.write_bytes(bytes(data))
    outcomes: dict[str, Any] = {}
    for name, result in read_commands(copy, tmp_path).items():
        outcomes[name] = result.exit_code
        assert "Traceback" not in result.output, name
    assert outcomes["verify"] == 1 and outcomes["log"] == 1 and outcomes["show"] == 1
    assert not (tmp_path / "bundle").exists()
