"""SQLite ledgers with nodes keyed by level keep working, and migrate (FORMAT.md 4).

``tests/fixtures/migration-f32173a`` was written by memroot at f32173a (schema version 1:
every complete node of level >= 1 stored, keyed by level), ``migration-670e031`` by main at
670e031 (version 2: levels >= 2, keyed by level). This version reads each as it is (no reader
reads a level-1 row), prints the proofs that memroot printed, and a writer's open migrates it
in one transaction: the level-1 rows are deleted, the others keyed by the tree size that
completes them, and the schema version becomes 3, every other row unchanged. An interrupted
migration leaves the file whole.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest

from memroot.ledger import merkle
from memroot.ledger.backends.store import (
    NODE_MIN_LEVEL,
    SCHEMA_VERSION,
    SQLITE_SCHEMA_VERSION,
    Store,
)
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import verify_path

FIXTURES = Path(__file__).parents[1] / "fixtures"
TABLES = ("meta", "branches", "entries", "event_ids", "checkpoints")
# fixture directory: (schema version, level-1 rows)
OLD: dict[str, tuple[int, int]] = {"migration-f32173a": (1, 17), "migration-670e031": (2, 0)}


@pytest.fixture(params=sorted(OLD))
def old(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A copy of an old ledger and its key."""
    for f in (FIXTURES / request.param).iterdir():
        if f.name != "README.md":
            shutil.copy2(f, tmp_path / f.name)
    (tmp_path / "old.ledger.key").chmod(0o600)
    (tmp_path / "fixture").write_text(request.param)
    return tmp_path / "old.ledger"


def _old(old: Path) -> tuple[int, int]:
    """The old file's schema version and level-1 rows."""
    return OLD[(old.parent / "fixture").read_text()]


def _node(k: int, version: Any) -> tuple[int, int, int]:
    """``(branch, level, index)`` of a ``nodes`` key as the file's version keys it."""
    if version == SQLITE_SCHEMA_VERSION:  # by the tree size that completes it
        level = k & 63
        return k >> 48, level, (((k >> 6) & ((1 << 42) - 1)) >> level) - 1
    return k >> 48, (k >> 42) & 63, k & ((1 << 42) - 1)


def _rows(path: Path) -> dict[str, list[Any]]:
    """Every row of the ledger's tables, read without memroot (nodes apart, by level)."""
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        out = {t: db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in TABLES}
        nodes = db.execute("SELECT k, h FROM nodes ORDER BY k").fetchall()
        version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        db.close()
    out["meta"] = [r for r in out["meta"] if r[0] != "schema_version"]
    named = sorted((*_node(k, version), h) for k, h in nodes)
    out["low nodes"] = [r for r in named if r[1] < NODE_MIN_LEVEL]
    out["nodes"] = [r for r in named if r[1] >= NODE_MIN_LEVEL]
    return out


def _version(path: Path) -> Any:
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        db.close()


def _vkey(old: Path) -> str:
    return (old.parent / "root.vkey").read_text().strip()


def _proofs(old: Path) -> dict[str, Any]:
    return json.loads((old.parent / "proofs.json").read_text())  # type: ignore[no-any-return]


def _proofs_match(old: Path, cmd: Any) -> None:
    """The proofs this version prints are those the old memroot printed."""
    proofs = _proofs(old)
    for index, text in proofs["inclusion"].items():
        assert cmd.json_at(old, "prove", "--index", index)["tlog_proof"] == text
    assert cmd.json_at(old, "prove", "--consistency", "5", "28") == proofs["consistency_5_28"]


def test_the_old_file_holds_level_1_rows(old: Path) -> None:
    """The fixture is what it says: its version, with its level-1 rows of both branches."""
    version, low = _old(old)
    assert _version(old) == version and version in (SCHEMA_VERSION, 2)
    assert len(_rows(old)["low nodes"]) == low
    assert {r[0] for r in _rows(old)["nodes"]} == {1, 2}  # nodes of both branches


def test_a_reader_serves_the_old_file_unchanged(old: Path) -> None:
    """A read-only open neither migrates nor needs the level-1 rows (it never reads them)."""
    before = _rows(old)
    with Ledger.open(old, hooks=(), readonly=True, strict=False) as ledger:
        proof = ledger.inclusion_proof(5, 28)
        consistency = ledger.consistency_proof(5, 28)
    text = _proofs(old)["inclusion"]["5"].split("\n")
    assert [base64.b64encode(h).decode() for h in proof] == text[2 : 2 + len(proof)]
    assert [base64.b64encode(h).decode() for h in consistency] == _proofs(old)["consistency_5_28"][
        "proof"
    ]
    version = _old(old)[0]
    assert _version(old) == version and _rows(old) == before
    # verify reads it as it is too: its level-1 rows are version 1's, not stray rows.
    report = verify_path(old, vkeys=[_vkey(old)], update_trusted=False)
    assert report.ok, [str(f) for f in report.findings]
    assert _version(old) == version and _rows(old) == before


def test_migration_on_a_writers_open_verifies_proves_appends(old: Path, cmd: Any) -> None:
    """Opened by a writer the file becomes version 3; it verifies, proves the same, appends."""
    before = _rows(old)
    Store(old).close()
    after = _rows(old)
    assert _version(old) == SQLITE_SCHEMA_VERSION == 3
    assert after["low nodes"] == []
    assert {t: v for t, v in after.items() if t != "low nodes"} == {
        t: v for t, v in before.items() if t != "low nodes"
    }
    report = cmd.json_at(old, "verify", "--vkey", _vkey(old), "--no-update")
    assert report["ok"] and report["entries"] == 35, report
    _proofs_match(old, cmd)
    cmd.ok(cmd.at(old, "append", json.dumps(cmd.EVENT)))
    for _ in range(3):  # completes level-1 and level-2 nodes past the migrated tree
        cmd.ok(cmd.at(old, "append", json.dumps(cmd.EVENT)))
    report = cmd.json_at(old, "verify", "--vkey", _vkey(old), "--no-update")
    assert report["ok"] and report["entries"] == 39, report
    assert _rows(old)["low nodes"] == []
    db = apsw.Connection(str(old), flags=apsw.SQLITE_OPEN_READONLY)
    try:  # the nodes past the migrated tree went in with the others, keyed by the same rule
        keys = [k for (k,) in db.execute("SELECT k FROM nodes WHERE k >> 48 = 1 ORDER BY k")]
        assert [((k >> 6) & ((1 << 42) - 1)) % (1 << (k & 63)) for k in keys] == [0] * len(keys)
        assert max(keys) >> 6 & ((1 << 42) - 1) == 32  # the level-5 node of 32 leaves, last
    finally:
        db.close()
    db = apsw.Connection(str(old), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        data = [bytes(r[0]) for r in db.execute("SELECT data FROM entries WHERE k >> 40 = 1")]
    finally:
        db.close()
    tree = merkle.CompactRange()
    tree.append_many([leaf_hash(d) for d in data])
    with Ledger.open(old, hooks=(), readonly=True, strict=False) as ledger:
        assert ledger.root(tree.size) == tree.root()  # the RFC root of the entries as stored
        for i in range(tree.size):
            proof = ledger.inclusion_proof(i, tree.size)
            merkle.verify_inclusion(leaf_hash(data[i]), i, tree.size, proof, tree.root())


def test_cli_commands_open_the_old_file(old: Path, cmd: Any) -> None:
    """`verify`, `prove` and `log` work on the old file before any migration (any order)."""
    report = cmd.json_at(old, "verify", "--vkey", _vkey(old), "--no-update")
    assert report["ok"], report
    _proofs_match(old, cmd)
    assert len(cmd.json_at(old, "log", "--limit", "100")) >= 28


_INTERRUPT = """
import os, sys
from memroot.ledger.backends import store

def die(self, key, value):
    os._exit(9)  # the nodes are rewritten, the version row not yet written: no COMMIT

store.Store.set_meta = die
store.Store(sys.argv[1])
"""


def test_an_interrupted_migration_leaves_the_file_whole(old: Path, cmd: Any) -> None:
    """A writer killed mid-migration committed nothing: the file reads, verifies, migrates."""
    before = _rows(old)
    done = subprocess.run([sys.executable, "-c", _INTERRUPT, str(old)], check=False)
    assert done.returncode == 9
    assert _version(old) == _old(old)[0] and _rows(old) == before
    report = cmd.json_at(old, "verify", "--vkey", _vkey(old), "--no-update")
    assert report["ok"], report
    _proofs_match(old, cmd)
    Store(old).close()
    assert _version(old) == 3 and _rows(old)["low nodes"] == []
