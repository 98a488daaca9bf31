"""FALSIFY / MARK_STALE / RESTORE (SPEC 7): one item's state, nothing else, refusals, replay."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.errors import NotFoundError, RefusedError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import verify_path
from memroot.memory_root import Roots, RootsHook, SelfModel, StaticSelfModel
from memroot.memory_root.branches import BranchRegistry, create_branch
from memroot.memory_root.falsify import Falsifier, FalsifyHook
from memroot.memory_root.falsify.deps import OBJECT, ROOT, SELFMODEL, SUMMARY, ItemRef
from memroot.memory_root.falsify.replay import TABLES, FalsifyReplayCheck, rebuild
from memroot.projections import requests as rq
from memroot.projections.hook import MemoryHook
from memroot.projections.query import get_object, object_history
from memroot.projections.rules import RuleError

AGENT = rq.Actor("agent-7", "AI_AGENT", "ns")


class World:
    """A ledger with the memory model, falsification and roots (SelfModel at every root)."""

    def __init__(self, tmp_path: Path, name: str = "w.ledger", *, branches: bool = False) -> None:
        hooks: list[Any] = [BranchRegistry()] if branches else []
        hooks += [
            MemoryHook(),
            FalsifyHook(),
            RootsHook(selfmodel_hooks=[StaticSelfModel(SelfModel("agent-7"))]),
        ]
        self.path = tmp_path / name
        self.ledger = Ledger.init(self.path, origin=f"example.org/{name}", hooks=hooks)
        self.roots = Roots(self.ledger)
        self.f = Falsifier(self.ledger)
        self.ev = self.event("tea without sugar")

    def event(self, text: str, branch: str = "main") -> str:
        e = EventInput(
            stream="s",
            actor_id="alice",
            actor_type="HUMAN_USER",
            role="USER",
            content=text,
            namespace_id="ns",
        )
        return self.ledger.append(e, branch=branch).id

    def obj(self, value: str = "v", *, epistemic: str = "OBSERVED", branch: str = "main") -> str:
        op = rq.assert_object(AGENT, "FACT", epistemic, "USER_STATED", [self.ev], value)
        return self.ledger.append(op, branch=branch).id

    def summary(self, of: list[str]) -> str:
        op = rq.assert_object(AGENT, "SUMMARY", "INFERRED", "SYSTEM_INFERRED", [self.ev], "sum")
        sid = self.ledger.append(op).id
        self.ledger.append(rq.summary_created(AGENT, sid, of, (0, 1), "daily"))
        return sid

    def snap(self, branch: str = "main") -> str:
        return self.roots.snapshot(branch).record.root.hex()

    def selfmodel(self, branch: str = "main") -> str:
        sm = self.roots.selfmodel(branch)
        assert sm is not None
        return sm.record.selfmodel_root.hex()

    def size(self) -> int:
        return self.ledger.size()

    def tables(self) -> dict[str, list[Any]]:
        db = self.ledger.store.db
        return {
            t: db.execute(f"SELECT {', '.join(c)} FROM {t} ORDER BY {', '.join(c)}").fetchall()
            for t, c in TABLES
        }


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh World; closed at teardown."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    w = World(tmp_path)
    yield w
    w.ledger.close()


def _verify(w: World) -> Any:
    return verify_path(w.path, checks=[FalsifyReplayCheck(w.path)])


def test_falsify_flips_only_that_object_and_no_dependent(world: World) -> None:
    """FALSIFY of an object makes it falsified and leaves every dependent, and its own
    version and fields, as they were."""
    w = world
    o1, o2 = w.obj("one"), w.obj("two")
    s = w.summary([o1])
    root = w.snap()
    sm = w.selfmodel()
    before = get_object(w.ledger.store.db, o1)
    assert {d.id for d in w.f.dependents(o1)} >= {s, root}
    w.f.falsify(o1, "the source was retracted", [w.ev])
    after = get_object(w.ledger.store.db, o1)
    assert w.f.state(o1) == "falsified" and after.state == "falsified"
    assert (after.version, after.last_modified_at, after.value, after.confidence) == (
        before.version,
        before.last_modified_at,
        before.value,
        before.confidence,
    )
    for other in (o2, s, root, sm):
        assert w.f.state(other) == "live"
    assert get_object(w.ledger.store.db, s).state == "live"
    assert w.roots.get(root).state == "live"


@pytest.mark.parametrize("kind", [ROOT, SUMMARY, SELFMODEL])
def test_falsify_a_root_a_summary_item_and_a_selfmodel(world: World, kind: str) -> None:
    """Roots, summary items (ROOT:projection:key) and SelfModels are falsified by their id;
    a root's stored record shows its state."""
    w = world
    w.ledger.append(rq_violation())
    root = w.snap()
    ids = {
        ROOT: root,
        SUMMARY: f"{root}:failure-motifs:TITLE_MISMATCH",
        SELFMODEL: w.selfmodel(),
    }
    a = w.f.falsify(ids[kind], "wrong")
    assert w.f.resolve(ids[kind]) == ItemRef(kind, ids[kind])
    assert w.f.state(ids[kind]) == "falsified"
    assert w.roots.get(root).state == ("falsified" if kind == ROOT else "live")
    body = w.ledger.entry(a.seq).body
    assert (body["target_type"], body["target_id"]) == (kind, ids[kind])


def rq_violation(motif: str = "TITLE_MISMATCH") -> OpInput:
    return OpInput(
        op_type="VIOLATION_RECORDED",
        actor_id="verifier-1",
        actor_type="SYSTEM_PROCESS",
        namespace_id="ns",
        payload={"motif": motif, "source": "QCD article"},
        policy_version="policy/1",
    )


def test_mark_stale_restore_and_the_full_history(world: World) -> None:
    """MARK_STALE then FALSIFY then RESTORE: every change is kept, in order, with its
    operation, actor, reason and evidence; RESTORE brings the item back to live."""
    w = world
    o = w.obj()
    w.f.mark_stale(o, "built on an old source", actor="reviewer")
    w.f.falsify(o, "confirmed wrong", [w.ev])
    w.f.restore(o, "the retraction was withdrawn")
    assert w.f.state(o) == "live"
    h = w.f.history(o)
    assert [(c.op, c.state, c.actor_id, c.reason, c.evidence) for c in h] == [
        ("MARK_STALE", "stale", "reviewer", "built on an old source", ()),
        ("FALSIFY", "falsified", "operator", "confirmed wrong", (w.ev,)),
        ("RESTORE", "live", "operator", "the retraction was withdrawn", ()),
    ]
    states = [v.state for v in object_history(w.ledger.store.db, o)]
    assert states == ["live", "stale", "falsified", "live"]
    why = w.f.why(o)
    assert [c.seq for c, _ in why.history] == [c.seq for c in h]
    assert all(hh == w.ledger.entry(c.seq).hash for c, hh in why.history)


def _refused(w: World, call: Any, error: type[Exception], match: str) -> None:
    size = w.size()
    tables = w.tables()
    with pytest.raises(error, match=match):
        call()
    assert w.size() == size
    assert w.tables() == tables


def test_bad_requests_are_refused_and_write_nothing(world: World) -> None:
    """Unknown ids, a falsified item falsified again, a live item restored, a stale or
    falsified item marked stale, unknown evidence and an empty reason: refused, nothing
    written."""
    w = world
    o = w.obj()
    root = w.snap()
    w.f.falsify(o, "wrong")
    unknown_obj = "0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6b"
    _refused(
        w, lambda: w.f.falsify(unknown_obj, "x"), RefusedError, "does not exist|no memory_object"
    )
    _refused(w, lambda: w.f.falsify("ab" * 32, "x"), NotFoundError, "starts with")
    _refused(
        w, lambda: w.f.falsify(f"{root}:failure-motifs:NOPE", "x"), NotFoundError, "no summary_item"
    )
    _refused(w, lambda: w.f.falsify(o, "again"), RuleError, "already falsified")
    _refused(w, lambda: w.f.restore(root, "x"), RuleError, "is live")
    _refused(w, lambda: w.f.mark_stale(o, "x"), RuleError, "only a live item")
    _refused(w, lambda: w.f.falsify(root, "x", [unknown_obj]), NotFoundError, "evidence event")
    _refused(w, lambda: w.f.falsify(root, ""), ValidationError, "reason")


def test_evidence_appended_earlier_in_the_same_batch_is_found(world: World) -> None:
    """One batch: the event that shows an object false, then the FALSIFY citing it."""
    w = world
    o = w.obj("Alice takes sugar")
    said = EventInput(
        stream="s",
        actor_id="alice",
        actor_type="HUMAN_USER",
        role="USER",
        content="no sugar, ever",
        namespace_id="ns",
        id="01900000-0000-7000-8000-0000000000aa",
    )
    falsify = OpInput(
        op_type="FALSIFY",
        actor_id="alice",
        actor_type="HUMAN_USER",
        namespace_id="ns",
        payload={"reason": "she said so", "evidence_ids": [said.id]},
        policy_version="p/1",
        target_id=o,
        target_type=OBJECT,
    )
    made = w.ledger.append_batch([said, falsify])
    assert [a.type for a in made[:2]] == ["EVENT", "FALSIFY"]
    assert w.f.state(o) == "falsified"
    # cited before it is appended (a later entry of the batch), it is still unknown
    size = w.size()
    later = dataclasses.replace(said, id="01900000-0000-7000-8000-0000000000bb")
    early = dataclasses.replace(
        falsify,
        op_type="RESTORE",
        payload={"reason": "r", "evidence_ids": [later.id]},
    )
    with pytest.raises(NotFoundError, match="evidence event"):
        w.ledger.append_batch([early, later])
    assert w.size() == size
    assert _verify(w).ok


def _raw(target_type: str, target_id: str, payload: dict[str, Any], op: str = "FALSIFY") -> OpInput:
    return OpInput(
        op_type=op,
        actor_id="mallory",
        actor_type="HUMAN_USER",
        namespace_id="system",
        payload=payload,
        policy_version="p/1",
        target_id=target_id,
        target_type=target_type,
    )


def test_malformed_state_operations_appended_directly_are_refused(world: World) -> None:
    """A raw FALSIFY with an unknown target type, a malformed id or an unknown payload
    field is refused at append, naming the field."""
    w = world
    root = w.snap()
    cases = [
        (_raw("memory_thing", root, {"reason": "r"}), "target_type"),
        (_raw(ROOT, root[:10], {"reason": "r"}), "target_id"),
        (_raw(ROOT, root, {"reason": "r", "note": 1}), "payload.note"),
        (_raw(ROOT, root, {}), "payload.reason"),
    ]
    for op, field in cases:
        size = w.size()
        with pytest.raises(ValidationError) as e:
            w.ledger.append(op)
        assert e.value.field == field
        assert w.size() == size


def test_state_is_replayed_by_verify_and_rebuild(world: World) -> None:
    """verify replays every state operation and finds the stored state equal; rebuild
    drops and replays it to the identical tables and root states."""
    w = world
    o = w.obj()
    root = w.snap()
    w.f.falsify(o, "wrong")
    w.f.mark_stale(root, "stale")
    w.f.falsify(root, "worse")
    w.f.restore(o, "fine after all")
    report = _verify(w)
    assert not report.findings, report.findings
    tables = w.tables()
    rebuild(w.ledger)
    assert w.tables() == tables
    assert w.roots.get(root).state == "falsified"


def test_stored_state_tampered_is_a_step_9_violation(world: World) -> None:
    """An edited state row, and a root's state column rolled back to live, are reported
    by verify (step 9) with branch and seq."""
    w = world
    o = w.obj()
    root = w.snap()
    a = w.f.falsify(o, "wrong")
    w.f.falsify(root, "wrong too")
    with w.ledger.store.write() as db:
        db.execute(
            "UPDATE fz_states SET state = 'stale' WHERE op = 'FALSIFY' AND kind = ?", (OBJECT,)
        )
        db.execute("UPDATE memory_roots SET state = 'live'")
    report = _verify(w)
    msgs = [(f.step, f.message.split(" ")[1], f.seq) for f in report.findings]
    assert (9, "fz_states", a.seq) in msgs
    assert any(f.step == 9 and "state of memory_root" in f.message for f in report.findings)


def test_hook_bypassed_falsify_of_an_unknown_item_is_skipped_and_noted(
    world: World, tmp_path: Path
) -> None:
    """A FALSIFY appended without the hook that the rules refuse is skipped by the stored
    state and by replay alike: a note, not a changed state."""
    w = world
    root = w.snap()
    w.ledger.close()
    with Ledger.open(w.path, hooks=()) as bare:
        bare.append(_raw(ROOT, "cd" * 32, {"reason": "forged"}))
        bare.append(_raw(ROOT, root, {"reason": "fine"}))
    w.ledger = Ledger.open(
        w.path, hooks=[MemoryHook(), FalsifyHook(), RootsHook(selfmodel_hooks=[])]
    )
    w.f = Falsifier(w.ledger)
    w.f.sync()
    assert w.f.state(root) == "falsified"
    report = _verify(w)
    assert not report.findings, report.findings
    assert any("skipped" in n.message and n.step == 9 for n in report.notes)


def test_a_branch_sees_the_parent_frozen_at_the_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A falsification in main after the fork does not reach the branch, and one made in
    the branch does not reach main (RFC-0012 isolation)."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    w = World(tmp_path, branches=True)
    try:
        o1, o2 = w.obj("one"), w.obj("two")
        create_branch(
            w.ledger, branch_type="SIMULATION", purpose="what if", actor_id="a", branch_id="sim"
        )
        w.f.falsify(o1, "wrong in main")
        w.f.falsify(o2, "wrong in the simulation", branch="sim")
        assert (w.f.state(o1), w.f.state(o2)) == ("falsified", "live")
        assert (w.f.state(o1, "sim"), w.f.state(o2, "sim")) == ("live", "falsified")
        w.f.falsify(o1, "wrong in the simulation too", branch="sim")
        assert [c.branch for c in w.f.history(o1, "sim")] == ["sim"]
        assert not _verify(w).findings
    finally:
        w.ledger.close()
