"""A FALSIFY citing an evidence event that does not exist has one outcome everywhere.

A writer without the hooks (in its own process) appends a ``FALSIFY`` of a live fact whose
``evidence_ids`` names no event of the branch. It is not a valid operation (docs/FORMAT.md
§3.1): the falsification layer refuses it (the event is not one the branch saw), and so does
the memory model, so every replay skips and records it. Before, the memory model applied it:
``recall`` dropped the fact while ``Memory.state`` said live. Now both serve it live, ``why``
and ``query`` agree, verify passes with a note, and a rebuild gives the same tables.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner, Result

import memroot
from memroot.cli.main import cli

_BARE_FALSIFY = r"""
import sys
from memroot.ledger.entries import OpInput
from memroot.ledger.ledger import Ledger
with Ledger.open(sys.argv[1], hooks=()) as bare:
    bare.append(OpInput(
        op_type="FALSIFY", actor_id="mallory", actor_type="HUMAN_USER", namespace_id="alice",
        policy_version="p/1", target_id=sys.argv[2], target_type="memory_object",
        payload={"reason": "no such evidence", "evidence_ids": [sys.argv[3]]},
    ))
"""

_TABLES = ("mem_objects", "mem_skipped", "fz_states", "fz_skipped", "fz_unapplied", "mem_gated")


def run(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def _tables(path: Path) -> dict[str, list[str]]:
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {
            t: sorted(map(repr, db.execute(f"SELECT * FROM {t}"))) for t in _TABLES if t in names
        }
    finally:
        db.close()


def _bare_falsify(tmp_path: Path, evidence: str | None) -> tuple[Path, str]:
    """A live fact, then a bare FALSIFY of it (another process) citing ``evidence`` (None:
    the fact's own event)."""
    path = tmp_path / "m.ledger"
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        ev = mem.record(content="I take my tea without sugar")
        tea = mem.remember("Alice takes tea without sugar", evidence=[ev.id]).id
    done = subprocess.run(
        [sys.executable, "-c", _BARE_FALSIFY, str(path), tea, evidence or ev.id],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return path, tea


@pytest.fixture
def falsified_without_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A live fact, then a bare FALSIFY of it citing a made-up event (another process)."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    return _bare_falsify(tmp_path, str(uuid.uuid4()))


def test_recall_and_state_agree_on_a_falsify_citing_no_event(
    falsified_without_evidence: tuple[Path, str],
) -> None:
    path, tea = falsified_without_evidence
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        assert mem.state(tea) == "live"
        assert [r.object.id for r in mem.recall()] == [tea]
    r = run(path, "query", "--namespace", "alice")
    assert r.exit_code == 0 and tea in r.stdout, r.output
    r = run(path, "why", tea)
    assert r.exit_code == 0 and "states: live (never falsified" in r.stdout, r.output
    r = run(path, "verify")
    assert r.exit_code == 0, r.output


def test_every_replay_skips_a_falsify_citing_no_event(
    falsified_without_evidence: tuple[Path, str], cmd: Any
) -> None:
    path, tea = falsified_without_evidence
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        assert [r.object.id for r in mem.recall()] == [tea]  # the hooks folded the entry
    stored = _tables(path)
    skipped = [row for t in ("mem_skipped", "fz_skipped") for row in stored[t]]
    assert len(skipped) == 2, stored  # one skip row per layer, for the same entry
    assert all("'FALSIFY'" in row for row in skipped)
    assert not any(tea in row for row in stored["fz_states"])
    rebuilt = cmd.json_at(path, "rebuild")
    assert rebuilt["identical"] is True
    assert _tables(path) == stored
    report = cmd.json_at(path, "verify", "--no-update")
    assert report["ok"]


def test_recall_right_after_a_valid_bare_falsify_is_no_false_alarm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A valid FALSIFY appended without the hooks: the first read after it is ``recall``
    (before, its completeness check found the map's state leaf unexplained, since only
    ``state``/``why`` folded the falsification layer first, and refused an honest ledger)."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    path, tea = _bare_falsify(tmp_path, None)
    r = run(path, "query", "--namespace", "alice")
    assert r.exit_code == 0 and tea not in r.stdout, r.output
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        assert mem.recall() == []
        assert mem.state(tea) == "falsified"
