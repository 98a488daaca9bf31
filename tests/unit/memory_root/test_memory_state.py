"""The opt-in memory-state projection: a root commits to the digest of derived memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memroot.ledger.entries import EventInput
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import verify_path
from memroot.memory_root import Roots, RootsHook
from memroot.memory_root.replay import RootsReplayCheck
from memroot.projections import requests as rq
from memroot.projections.builtins import MemoryStateDigest, builtin_projections
from memroot.projections.digest import state_digest
from memroot.projections.hook import MemoryHook
from memroot.projections.registry import Registry

Make = Callable[..., tuple[Ledger, Roots]]
AGENT = rq.Actor("agent-7", "AI_AGENT", "ns")


def _event(i: int) -> EventInput:
    return EventInput(
        stream="s",
        actor_id="alice",
        actor_type="HUMAN_USER",
        role="USER",
        content=f"fact {i}",
        namespace_id="ns",
    )


def _hooks() -> list[Any]:
    registry = Registry([*builtin_projections(), MemoryStateDigest()])
    return [MemoryHook(), RootsHook(registry)]


def _believe(ledger: Ledger, i: int) -> None:
    ev = ledger.append(_event(i)).id
    ledger.append(rq.assert_object(AGENT, "FACT", "OBSERVED", "USER_STATED", [ev], f"v{i}"))


def test_a_root_commits_to_the_memory_state_as_of_its_high_water(mr_make: Make):
    """The summary is the state digest as of the high-water, even after memory moves on."""
    ledger, roots = mr_make(hooks=_hooks(), every=5)
    for i in range(4):
        _believe(ledger, i)
    rec = roots.snapshot().record
    value = next(s for s in roots.show(rec.root).summaries if s.id == "memory-state").value
    db = ledger.store.db
    assert value == {"digest": state_digest(db, as_of=rec.high_water.seq)}
    _believe(ledger, 9)
    assert state_digest(db) != value["digest"]
    assert roots.compute(hw_seq=rec.high_water.seq).root() == rec.root
    later = roots.snapshot().record
    assert later.root != rec.root
    report = verify_path(ledger.path, checks=[RootsReplayCheck(ledger.path, _hooks()[1].registry)])
    assert report.ok, [str(f) for f in report.findings]


def test_without_derived_tables_the_memory_state_cannot_be_replayed(mr_make: Make):
    """An auditor lacking the memory tables reports the root as not replayable (step 8)."""
    ledger, roots = mr_make(hooks=_hooks(), every=100)
    _believe(ledger, 1)
    rec = roots.snapshot().record
    report = verify_path(ledger.path, checks=[RootsReplayCheck(None, _hooks()[1].registry)])
    assert [(f.step, f.seq) for f in report.findings] == [(8, rec.seq)]
    # v3: without memory-state no list of what it replays hashes to the root's projections
    assert "payload.projections" in report.findings[0].message
