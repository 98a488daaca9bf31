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


# -- every read command of the CLI, enumerated from the click group -----------------------------

# Each command of the group is classified here; a new command fails
# test_every_command_is_classified until it is. Read commands take the ledger and must work on
# read-only media with no key file; their arguments are filled from the session's ids.
READ_COMMANDS: dict[str, list[str]] = {
    "verify": ["--no-update", "--json"],
    "log": ["--json"],
    "show": ["1", "--json"],
    "query": ["--json"],
    "why": ["{object}", "--json"],
    "export": ["{out}/bundle"],
    "roots": ["--json"],
    "root show": ["{root}", "--json"],
    "root diff": ["{root}", "{root}", "--json"],
    "selfmodel show": ["--json"],
    "branch list": ["--json"],
    "branch show": ["{branch}", "--json"],
    "branch diff": ["{branch}", "--json"],
    "branch divergence": ["{branch}", "--json"],
    "prove": ["--index", "1", "--json"],
    "tiles": ["{out}/tiles", "--json"],
    "receipts": ["--json"],
    "report": ["{out}/report.html", "--json"],
    "vkey": ["--json"],
    "key list": ["--json"],
    "gc": ["--dry-run", "--json"],
    "cascade": ["{object}", "--dry-run", "--json"],
    "restore": ["{object}", "--reason", "r", "--cascade", "--dry-run", "--json"],
    "witness list": ["--json"],
    "witness log-vkey": ["--json"],
}
WRITE_COMMANDS = {
    "append", "import", "init", "checkpoint", "snapshot", "rebuild", "falsify", "mark-stale",
    "selfmodel record", "branch create", "branch close", "branch discard", "branch archive",
    "branch merge", "publish", "import-bundle", "rotate-key", "key add", "key revoke",
    "witness add", "witness remove",
    "witness submit", "mcp", "mcp token add", "mcp token revoke",
}  # fmt: skip
# The token commands read and write the MCP server's token file beside the ledger, not the ledger.
NO_LEDGER_COMMANDS = {
    "audit", "bench", "demo", "witness init", "witness follow", "witness serve", "mcp token list",
}  # fmt: skip


def all_commands() -> set[str]:
    import click

    from memroot.cli.main import load_all_commands

    load_all_commands()
    names: set[str] = set()

    def walk(group: click.Group, prefix: str) -> None:
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                if command.invoke_without_command:  # a group that is a command itself (mcp)
                    names.add(f"{prefix}{name}")
                walk(command, f"{prefix}{name} ")
            else:
                names.add(f"{prefix}{name}")

    walk(cli, "")
    return names


def test_every_command_is_classified() -> None:
    """Each CLI command is a read, a write or a no-ledger command: a new one must be sorted."""
    declared = set(READ_COMMANDS) | WRITE_COMMANDS | NO_LEDGER_COMMANDS
    assert all_commands() == declared
    assert not set(READ_COMMANDS) & WRITE_COMMANDS


@pytest.fixture
def session_ledger(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A ledger with objects, a root, a SelfModel, a branch, a falsification and a receipt."""
    import memroot as facade

    path = tmp_path / "ro" / "agent.ledger"
    path.parent.mkdir()
    examples = Path(__file__).resolve().parents[2] / "examples" / "events.jsonl"
    assert memroot(path, "init", "--origin", ORIGIN).exit_code == 0
    assert memroot(path, "import", str(examples)).exit_code == 0
    assert memroot(path, "snapshot").exit_code == 0
    model = tmp_path / "agent.json"
    model.write_text(json.dumps({"agent_id": "a", "identity": {"name": "A"}, "capabilities": []}))
    assert memroot(path, "selfmodel", "record", str(model)).exit_code == 0
    objects = json.loads(memroot(path, "query", "--json").stdout)
    oid = objects[0]["id"]
    assert memroot(path, "falsify", oid, "--reason", "wrong").exit_code == 0
    created = memroot(path, "branch", "create", "--type", "PLANNING", "--purpose", "p", "--json")
    branch = json.loads(created.stdout)["branch_id"]
    with facade.open(path) as mem:
        mem.recall(text="tea", receipt="run-1")
    roots = json.loads(memroot(path, "roots", "--json").stdout)
    root = roots[0]["memory_root"]
    return path, {"object": oid, "branch": branch, "root": root}


def test_every_read_command_works_on_read_only_media_without_a_key(
    session_ledger: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """Every read command of the group, on a read-only directory with no key: exit 0, no write."""
    path, ids = session_ledger
    key = Path(f"{path}.key")
    key.rename(tmp_path / "kept.key")  # the key is elsewhere: reading never needs it
    out = tmp_path / "out"
    out.mkdir()
    before = digest(path)
    listing = sorted(p.name for p in path.parent.iterdir())
    with read_only_directory(path.parent):
        for name, args in READ_COMMANDS.items():
            filled = [a.format(out=out, **ids) for a in args]
            result = memroot(path, *name.split(), *filled)
            assert "Traceback" not in result.output, (name, result.output)
            assert result.exit_code == 0, (name, result.output)
    assert digest(path) == before and side_files(path) == []
    assert sorted(p.name for p in path.parent.iterdir()) == listing
    assert (out / "bundle" / "manifest.json").exists() and (out / "report.html").exists()


def test_vkey_reads_the_ledger_not_the_key_file(
    session_ledger: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """`vkey` prints the ledger's own key with no key file (a ledger restored from a bundle)."""
    path, _ = session_ledger
    vkey = memroot(path, "vkey").stdout.strip()
    assert memroot(path, "export", str(tmp_path / "b")).exit_code == 0
    restored = tmp_path / "restored.ledger"
    imported = memroot(restored, "import-bundle", str(tmp_path / "b"), "--vkey", vkey)
    assert imported.exit_code == 0, imported.output
    assert not Path(f"{restored}.key").exists()
    result = memroot(restored, "vkey", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["vkey"] == vkey
    other = tmp_path / "other.ledger"
    assert memroot(other, "init", "--origin", ORIGIN).exit_code == 0
    Path(f"{path}.key").write_bytes(Path(f"{other}.key").read_bytes())  # a wrong key beside it
    assert memroot(path, "vkey").stdout.strip() == vkey
