"""Ledgers written before writer keys keep verifying unchanged (issue 24, point 4).

``tests/fixtures/migration-2d251c6`` was written by memroot at 2d251c6: a genesis key, a
branch, a rotation (see its README). This version verifies it with the genesis (root) vkey
alone, reads it, appends to it with its current key, and can add a writer key to it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

FIXTURE = Path(__file__).parents[1] / "fixtures" / "migration-2d251c6"


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A copy of the old ledger and its key files."""
    for f in FIXTURE.iterdir():
        if f.name != "README.md":
            shutil.copy2(f, tmp_path / f.name)
    (tmp_path / "old.ledger.key").chmod(0o600)
    return tmp_path / "old.ledger"


def _root(old: Path) -> str:
    return (old.parent / "root.vkey").read_text().strip()


def test_old_ledger_verifies_with_its_genesis_vkey(old: Path, cmd: Any) -> None:
    """verify --vkey GENESIS passes, following the old rotation on main and the branch."""
    report = cmd.json_at(old, "verify", "--vkey", _root(old), "--no-update")
    assert report["ok"] and report["entries"] == 8 and report["checkpoints"] == 5
    assert cmd.ok(cmd.at(old, "vkey")).stdout.strip() == _root(old)
    rows = cmd.json_at(old, "key", "list")
    assert [r["vkey"] for r in rows] == [
        _root(old),
        (old.parent / "rotated.vkey").read_text().strip(),
    ]


def test_old_ledger_takes_appends_and_writer_keys(old: Path, cmd: Any) -> None:
    """The old ledger appends with its key, refuses its retired key, and takes a writer key."""
    event = json.dumps(cmd.EVENT)
    cmd.ok(cmd.at(old, "append", event))
    retired = old.parent / "old.ledger.key.51f45049.retired"
    retired.chmod(0o600)
    assert cmd.run("-l", str(old), "--key", str(retired), "append", event).exit_code == 5
    writer = old.parent / "w.key"
    cmd.json_at(old, "key", "add", "--name", "host-b", "--out", str(writer))
    cmd.ok(cmd.run("-l", str(old), "--key", str(writer), "append", event))
    report = cmd.json_at(old, "verify", "--vkey", _root(old), "--no-update")
    assert report["ok"], report
