"""Disk full and read-only storage: clear errors, and nothing corrupted or half written.

Disk full is simulated without privileges in two ways: SQLite's ``PRAGMA max_page_count`` caps
the ledger file through the store's own connection (SQLite then reports SQLITE_FULL, exactly as
on a full disk), and ``RLIMIT_FSIZE`` in a child process caps every file it writes (with
SIGXFSZ ignored, writes past the cap fail with EFBIG), which also covers the bundle and tile
files. Read-only files use a read-only open; the chmod variant is skipped when running as root,
because root ignores file permissions.
"""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.bundle.export import export_bundle
from memroot.ledger.errors import StorageError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import audit

ORIGIN = "example.org/storage-test"


def verifies(path: Path) -> bool:
    with Ledger.open(path) as ledger:
        return audit(ledger.store, origin=ORIGIN, vkeys=[ledger.vkey()]).ok


@pytest.fixture
def ledger_path(tmp_path: Path, make_ledger: Any) -> Path:
    return make_ledger(tmp_path, 200, origin=ORIGIN)


def test_disk_full_refuses_the_append_and_keeps_the_ledger(ledger_path: Path, inputs: Any) -> None:
    """A batch that does not fit fails with 'disk full'; nothing of it lands; appends resume."""
    with Ledger.open(ledger_path) as ledger:
        size, root = ledger.size(), ledger.root()
        pages = ledger.store.db.execute("PRAGMA page_count").fetchone()[0]
        ledger.store.db.execute(f"PRAGMA max_page_count = {pages + 2}")
        with pytest.raises(StorageError, match="disk full"):
            ledger.append_batch(inputs.mixed(2000, seed=1))
        assert (ledger.size(), ledger.root()) == (size, root)
        with pytest.raises(StorageError, match="disk full"), ledger.bulk():
            for i in range(100):
                ledger.append_batch(inputs.mixed(50, seed=10 + i))
        assert ledger.size() == size
        ledger.store.db.execute("PRAGMA max_page_count = 1073741823")
        ledger.append_batch(inputs.mixed(20, seed=2))
        ledger.checkpoint()
        assert ledger.size() == size + 20
    assert verifies(ledger_path)


def _capped(limit: int) -> None:
    """Run in the child before exec: cap file sizes, and fail writes instead of dying."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def memroot_capped(limit: int, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the memroot CLI in a child whose files cannot grow past ``limit`` bytes."""
    return subprocess.run(
        [sys.executable, "-c", "from memroot.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: _capped(limit),
    )


def test_export_to_a_full_disk_leaves_no_bundle(tmp_path: Path, make_ledger: Any) -> None:
    """An export that runs out of space exits 4 naming the problem, and leaves nothing behind."""
    ledger_path = make_ledger(tmp_path, 2000, origin=ORIGIN)
    out = tmp_path / "bundle"
    # The cap lets the CLI's open write the hooks' tables (a WAL of ~300 KB with the map's
    # two node tables) and not the bundle.
    result = memroot_capped(340_000, "-l", str(ledger_path), "export", str(out), "--no-sign")
    assert result.returncode == 4, result.stderr
    assert "cannot write the bundle" in result.stderr and "File too large" in result.stderr
    assert not out.exists()
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".bundle")] == []
    assert verifies(ledger_path)


def test_import_onto_a_full_disk_changes_nothing(tmp_path: Path, ledger_path: Path) -> None:
    """An import whose write-ahead log cannot grow fails as a whole; the ledger still verifies."""
    with Ledger.open(ledger_path) as ledger:
        size, root = ledger.size(), ledger.root()
    event = {
        "kind": "event",
        "stream": "s",
        "actor_id": "a",
        "actor_type": "AI_AGENT",
        "role": "TOOL",
        "namespace_id": "ns",
    }
    lines = [json.dumps({**event, "content": f"{i} " + "y" * 2000}) for i in range(300)]
    (tmp_path / "big.jsonl").write_text("\n".join(lines) + "\n")
    limit = ledger_path.stat().st_size + 200_000
    result = memroot_capped(limit, "-l", str(ledger_path), "import", str(tmp_path / "big.jsonl"))
    assert result.returncode == 4, result.stderr
    assert "error:" in result.stderr and "Traceback" not in result.stderr
    with Ledger.open(ledger_path) as ledger:
        assert (ledger.size(), ledger.root()) == (size, root)
    assert verifies(ledger_path)


def test_read_only_open_refuses_writes_but_reads_and_exports(
    tmp_path: Path, make_ledger: Any, inputs: Any
) -> None:
    """A read-only ledger refuses appends with 'read-only'; checkpoint and export serve the
    head checkpoint, which already covers every entry (each append was sealed)."""
    ledger_path = make_ledger(tmp_path, 50, origin=ORIGIN, checkpoint=False)
    with Ledger.open(ledger_path, readonly=True) as ledger:
        size = ledger.size()
        notes = ledger.checkpoints()
        with pytest.raises(StorageError, match="read-only"):
            ledger.append(inputs.event(random.Random(1), 0))
        assert ledger.checkpoint().checkpoint.size == size
        export_bundle(ledger, tmp_path / "signed")
        export_bundle(ledger, tmp_path / "unsigned", sign=False)
        assert ledger.size() == size and ledger.checkpoints() == notes
    assert verifies(ledger_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions (chmod 0444)")
def test_read_only_file_and_directory(tmp_path: Path, ledger_path: Path, inputs: Any) -> None:
    """With the file 0444 and its directory 0555, appends fail clearly and change nothing."""
    directory = ledger_path.parent
    with Ledger.open(ledger_path) as ledger:
        size = ledger.size()
    for p in directory.iterdir():
        p.chmod(0o444)
    directory.chmod(0o555)
    try:
        with pytest.raises(StorageError), Ledger.open(ledger_path) as ledger:
            ledger.append(inputs.event(random.Random(1), 0))
    finally:
        directory.chmod(0o755)
        for p in directory.iterdir():
            p.chmod(0o600)
    with Ledger.open(ledger_path) as ledger:
        assert ledger.size() == size
    assert verifies(ledger_path)
