"""The dependency index: what cites what, kept at append and equal to a replay from the log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger.entries import EventInput
from memroot.ledger.ledger import Ledger
from memroot.memory_root import Roots, RootsHook, SelfModel, StaticSelfModel
from memroot.memory_root.branches import BranchRegistry, create_branch
from memroot.memory_root.falsify import Falsifier, FalsifyHook
from memroot.memory_root.falsify.deps import EVENT, OBJECT, ROOT, SELFMODEL, SUMMARY, ItemRef
from memroot.memory_root.falsify.replay import TABLES, rebuild
from memroot.projections import requests as rq
from memroot.projections.builtins import MemoryStateDigest, builtin_projections
from memroot.projections.hook import MemoryHook
from memroot.projections.registry import Registry

AGENT = rq.Actor("agent-7", "AI_AGENT", "ns")


def _ledger(tmp_path: Path, name: str, *, registry: Registry | None = None) -> Ledger:
    hooks: list[Any] = [
        BranchRegistry(),
        MemoryHook(),
        FalsifyHook(registry),
        RootsHook(registry, selfmodel_hooks=[StaticSelfModel(SelfModel("agent-7"))]),
    ]
    return Ledger.init(tmp_path / name, origin=f"example.org/{name}", hooks=hooks)


def _event(ledger: Ledger, text: str = "e", branch: str = "main") -> str:
    e = EventInput(
        stream="s",
        actor_id="u",
        actor_type="HUMAN_USER",
        role="USER",
        content=text,
        namespace_id="ns",
    )
    return ledger.append(e, branch=branch).id


def _obj(ledger: Ledger, evidence: list[str], kind: str = "FACT", branch: str = "main") -> str:
    epistemic, source = (
        ("INFERRED", "SYSTEM_INFERRED") if kind == "SUMMARY" else ("OBSERVED", "USER_STATED")
    )
    op = rq.assert_object(AGENT, kind, epistemic, source, evidence, "v")
    return ledger.append(op, branch=branch).id


def _tables(ledger: Ledger) -> dict[str, list[Any]]:
    db = ledger.store.db
    return {
        t: db.execute(f"SELECT {', '.join(c)} FROM {t} ORDER BY {', '.join(c)}").fetchall()
        for t, c in TABLES
    }


@pytest.fixture(autouse=True)
def _trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))


def test_every_kind_of_citation_is_indexed(tmp_path: Path) -> None:
    """Objects cite evidence events, SUMMARY objects what they summarise, supported objects
    their support; roots cite their parent; SelfModels their root; a branch's first root
    cites the parent's root at the fork."""
    with _ledger(tmp_path, "a.ledger") as ledger:
        f = Falsifier(ledger)
        roots = Roots(ledger)
        e1, e2 = _event(ledger), _event(ledger)
        o1 = _obj(ledger, [e1, e2])
        o2 = _obj(ledger, [e1])
        ledger.append(rq.relate(AGENT, "SUPPORTS", o1, o2, 0.5))
        s = _obj(ledger, [e1], "SUMMARY")
        ledger.append(rq.summary_created(AGENT, s, [o1, o2], (0, 1), "daily"))
        r1 = roots.snapshot().record.root.hex()
        sm1 = roots.selfmodel()
        assert sm1 is not None
        _event(ledger)
        r2 = roots.snapshot().record.root.hex()
        create_branch(ledger, branch_type="SIMULATION", purpose="p", actor_id="a", branch_id="b1")
        _event(ledger, branch="b1")
        rb = roots.snapshot("b1").record.root.hex()

        assert f.dependencies(o1) == sorted(
            [ItemRef(EVENT, e1), ItemRef(EVENT, e2)], key=ItemRef.key
        )
        assert ItemRef(OBJECT, o1) in f.dependencies(o2)
        assert set(f.dependencies(s)) >= {ItemRef(OBJECT, o1), ItemRef(OBJECT, o2)}
        assert f.dependencies(r2) == [ItemRef(ROOT, r1)]
        assert f.dependencies(sm1.record.selfmodel_root.hex()) == [ItemRef(ROOT, r1)]
        assert f.dependencies(rb, "b1") == [ItemRef(ROOT, r2)]
        assert ItemRef(ROOT, rb) not in f.dependents(r2), "main does not see the branch"
        assert ItemRef(ROOT, rb) in f.dependents(r2, "b1")
        assert {ItemRef(OBJECT, o2), ItemRef(OBJECT, s)} <= set(f.dependents(o1))


def test_roots_depend_on_objects_their_projections_read(tmp_path: Path) -> None:
    """A root is built on an object when one of its projections read an entry naming it in
    its range (ASSERT, read by epistemic-distribution), not for an entry none reads
    (SUMMARY_CREATED); its summary items come with it; a later root only through its parent."""
    with _ledger(tmp_path, "a.ledger") as ledger:
        f = Falsifier(ledger)
        roots = Roots(ledger)
        e = _event(ledger)
        o = _obj(ledger, [e])
        r1 = roots.snapshot().record.root.hex()
        s = _obj(ledger, [e], "SUMMARY")
        ledger.append(rq.summary_created(AGENT, s, [o], (0, 1), "daily"))
        r2 = roots.snapshot().record.root.hex()
        deps = f.dependents(o)
        assert ItemRef(ROOT, r1) in deps and ItemRef(ROOT, r2) not in deps
        items = {d.id for d in deps if d.kind == SUMMARY}
        assert f"{r1}:epistemic-distribution:OBSERVED" in items
        assert f"{r1}:lifecycle-counts:ACTIVE" in items
        assert not any(i.startswith(r1 + ":failure-motifs") for i in items)
        assert ItemRef(ROOT, r2) in f.dependents(r1)
        assert ItemRef(ROOT, r1) in f.dependents(f"{r1}:lifecycle-counts:ACTIVE")


def test_a_memory_state_root_depends_on_every_object_it_sees(tmp_path: Path) -> None:
    """With the memory-state projection a root is built on every object of its branch up
    to its high-water, not only those created in its range."""
    registry = Registry([*builtin_projections(), MemoryStateDigest()])
    with _ledger(tmp_path, "a.ledger", registry=registry) as ledger:
        f = Falsifier(ledger)
        roots = Roots(ledger)
        o = _obj(ledger, [_event(ledger)])
        roots.snapshot()
        _event(ledger)
        r2 = roots.snapshot().record.root.hex()
        later = _obj(ledger, [_event(ledger)])
        deps = f.dependents(o)
        assert ItemRef(ROOT, r2) in deps
        assert ItemRef(SUMMARY, f"{r2}:memory-state:digest") in deps
        assert ItemRef(ROOT, r2) not in f.dependents(later)


_steps = st.lists(
    st.sampled_from(["event", "fact", "summary", "support", "snapshot", "selfmodel"]),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=_steps)
def test_the_index_kept_at_append_equals_a_rebuild_from_the_log(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str]
) -> None:
    """For any mix of entries, the tables the hook kept equal the tables rebuilt by replay."""
    tmp = tmp_path_factory.mktemp("idx")
    with _ledger(tmp, "h.ledger") as ledger:
        roots = Roots(ledger)
        events = [_event(ledger)]
        objs: list[str] = []
        for step in steps:
            if step == "event":
                events.append(_event(ledger))
            elif step == "fact":
                objs.append(_obj(ledger, events[-2:]))
            elif step == "summary" and objs:
                s = _obj(ledger, events[-1:], "SUMMARY")
                ledger.append(rq.summary_created(AGENT, s, objs[-3:], (0, 1), "daily"))
                objs.append(s)
            elif step == "support" and len(objs) >= 2:
                ledger.append(rq.relate(AGENT, "SUPPORTS", objs[-2], objs[-1], 0.5))
            elif step == "snapshot":
                roots.snapshot()
            elif step == "selfmodel":
                roots.record_selfmodel(SelfModel("agent-7"))
        kept = _tables(ledger)
        rebuild(ledger)
        assert _tables(ledger) == kept
        assert all(kept[t] is not None for t in kept)
        assert (SELFMODEL in {r[0] for r in kept["fz_items"]}) == (
            "snapshot" in steps or "selfmodel" in steps
        )
