"""A ledger written by memroot before roots v2 (main at 2d251c6, ``memroot demo`` plus two
snapshots): its v1 roots keep verifying, and the next snapshot is a v2 root on top of them.

The fixture ``tests/fixtures/v1-roots.ledger`` holds two v1 roots (SNAPSHOT entries 7 and 11)
and two memory objects; its key (``v1-roots.ledger.key``) lets the test append to a copy.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli

FIXTURE = Path(__file__).parent.parent / "fixtures" / "v1-roots.ledger"
EVENT = {
    "kind": "event",
    "stream": "s1",
    "role": "ASSISTANT",
    "actor_id": "agent",
    "actor_type": "AI_AGENT",
    "namespace_id": "default",
    "content": "after the v1 roots",
}


def memroot(ledger: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(ledger), *args], catch_exceptions=False)


@pytest.fixture
def old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    path = tmp_path / "v1.ledger"
    shutil.copy(FIXTURE, path)
    shutil.copy(FIXTURE.with_name(FIXTURE.name + ".key"), tmp_path / "v1.ledger.key")
    (tmp_path / "v1.ledger.key").chmod(0o600)  # git keeps no mode bits but x
    return path


def _roots(path: Path) -> list[tuple[int, int, bytes | None, bytes | None]]:
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        cols = {r[1] for r in db.execute("PRAGMA table_info(memory_roots)")}
        m = "map" if "map" in cols else "NULL"
        return [
            (int(s), int(v), None if p is None else bytes(p), None if x is None else bytes(x))
            for s, v, p, x in db.execute(
                f"SELECT seq, v, parent, {m} FROM memory_roots ORDER BY seq"
            )
        ]
    finally:
        db.close()


def test_v1_roots_of_an_old_ledger_verify(old: Path):
    """Step 8 replays the v1 roots of a ledger written before v2 (retired rules included)."""
    assert [(s, v) for s, v, _, _ in _roots(old)] == [(7, 1), (11, 1)]
    r = memroot(old, "verify")
    assert r.exit_code == 0, r.output
    assert "OK" in r.output


def test_the_next_snapshot_is_v3_on_top_of_the_v1_chain(old: Path):
    """A new snapshot of an old ledger is a v3 root whose parent is its last v1 root; the
    map is folded from the whole log once; verify and rebuild agree with it."""
    before = _roots(old)
    r = memroot(old, "append", json.dumps(EVENT))
    assert r.exit_code == 0, r.output
    r = memroot(old, "snapshot")
    assert r.exit_code == 0, r.output
    after = _roots(old)
    assert after[:2] == [(s, v, p, None) for s, v, p, _ in before]
    _, v, parent, map_root = after[-1]
    assert v == 3 and map_root is not None and len(map_root) == 32
    db = apsw.Connection(str(old), flags=apsw.SQLITE_OPEN_READONLY)
    last_v1 = bytes(db.execute("SELECT root FROM memory_roots WHERE seq = 11").fetchone()[0])
    n_objects = db.execute("SELECT count(DISTINCT id) FROM mem_objects").fetchone()[0]
    db.close()
    assert parent == last_v1
    assert n_objects >= 1
    r = memroot(old, "verify")
    assert r.exit_code == 0, r.output
    r = memroot(old, "rebuild")
    assert r.exit_code == 0, r.output
    assert _roots(old) == after
    r = memroot(old, "verify")
    assert r.exit_code == 0, r.output
