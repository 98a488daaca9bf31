"""Step 9's replay holds a bounded number of objects: spilling them changes no digest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import apsw
import pytest

from memroot.bench import gen_history
from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.ledger import Ledger
from memroot.ledger.strict import relaxed
from memroot.ledger.verify import AuditReport, audit
from memroot.memory_root import stack as hooks
from memroot.projections import replay
from memroot.projections.digest import state_digest
from memroot.projections.gated import gated_digest


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger of 3,000 requests, one in ten a memory operation of every common kind."""
    from click.testing import CliRunner

    from memroot.cli.main import cli

    tmp = tmp_path_factory.mktemp("bounded")
    path, src = tmp / "mixed.ledger", tmp / "mixed.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in gen_history.lines("mixed", 3000)))
    for args in (["init"], ["import", str(src)]):
        r = CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)
        assert r.exit_code == 0, r.output
    return path


@pytest.fixture(scope="module")
def erased(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mixed history, then TOMBSTONEs of cited events (dependents deprecated or
    archived): erasures look up citing objects after objects and edges were let go."""
    from click.testing import CliRunner

    from memroot.cli.main import cli
    from memroot.projections import requests as rq

    tmp = tmp_path_factory.mktemp("erased")
    path, src = tmp / "erased.ledger", tmp / "erased.jsonl"
    lines = gen_history.lines("mixed", 3000, seed=7)
    cited = [x["id"] for x in lines if x["kind"] == "event" and "id" in x]
    agent = rq.Actor("agent-1", "AI_AGENT", "bench")
    out: list[dict[str, Any]] = list(lines)
    for k, eid in enumerate(cited[5::9]):
        mode = "DEPRECATE" if k % 2 else "ARCHIVE"
        out.append(gen_history._op(rq.tombstone(agent, eid, "gdpr", "p/1", mode)))
    src.write_text("".join(json.dumps(x) + "\n" for x in out))
    for args in (["init"], ["import", str(src)]):
        r = CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)
        assert r.exit_code == 0, r.output
    with Ledger.open(path, readonly=True) as led:
        n = led.store.db.execute("SELECT count(*) FROM mem_events WHERE erased_by IS NOT NULL")
        assert n.fetchall()[0][0] > 10
    return path


def _replayed(path: Path, held: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    monkeypatch.setattr(replay, "_OBJECTS_HELD", held)
    with relaxed(), Ledger.open(path, readonly=True, strict=False) as led:
        check = replay.MemoryReplayCheck(led.path, ledger=led)
        report = AuditReport()
        for e in led.entries(branch=CANONICAL_BRANCH):
            check.feed(CANONICAL_BRANCH, e, report)
        state = check.state
        assert isinstance(state, replay._BoundedMemState)
        state.finish()
        out = (state_digest(check.db), gated_digest(check.db, CANONICAL_BRANCH), state.spilled)
        check.db.execute("COMMIT")
        return out


@pytest.mark.parametrize("history", ["mixed", "erased"])
def test_spilled_objects_replay_to_the_same_state(
    history: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Objects and edges let go and read back (at most 2 objects held) give the digests of
    holding them all."""
    path: Path = request.getfixturevalue(history)
    whole = _replayed(path, 10**9, monkeypatch)
    spilled = _replayed(path, 2, monkeypatch)
    assert whole[2] is False and spilled[2] is True
    assert spilled[:2] == whole[:2]
    with Ledger.open(path, readonly=True) as led:
        assert state_digest(led.store.db) == whole[0]  # and both are the stored state


def _audit(path: Path) -> AuditReport:
    with relaxed(), Ledger.open(path, readonly=True, strict=False) as led, led.store.read():
        return audit(led.store, origin=led.origin, checks=hooks.replay_checks(led, share=True))


def test_verify_with_spilled_replay(
    mixed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All the steps and checks hold with a replay that spills; a tampered row still fails."""
    monkeypatch.setattr(replay, "_OBJECTS_HELD", 2)
    report = _audit(mixed)
    assert report.ok, [str(f) for f in report.findings]
    bad = tmp_path / "bad.ledger"
    shutil.copy(mixed, bad)
    db = apsw.Connection(str(bad))
    db.execute("UPDATE mem_objects SET confidence = 0.123 WHERE rid = 5")
    db.close()
    found = [f for f in _audit(bad).findings if f.severity == "error"]
    assert [f.step for f in found] == [9]
    assert "mem_objects" in found[0].message and "confidence" in found[0].message


def test_rebuild_with_spilled_objects_is_identical(
    mixed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rebuild`` folds in the same bounded state: the digests come back identical."""
    copy = tmp_path / "copy.ledger"
    shutil.copy(mixed, copy)
    shutil.copy(mixed.with_name(mixed.name + ".key"), copy.with_name(copy.name + ".key"))
    monkeypatch.setattr(replay, "_OBJECTS_HELD", 2)
    with Ledger.open(copy) as led:
        report = replay.rebuild(led)
    assert report.identical is True
    assert report.objects > 2
