"""The memory model on branches: a branch folds over its parent frozen at the fork (RFC-0012)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.backends.store import Store
from memroot.ledger.entries import EventInput, OpInput, new_uuid, now_us
from memroot.ledger.errors import NotFoundError, RefusedError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import audit
from memroot.projections import requests as rq
from memroot.projections.backends import SqlState
from memroot.projections.digest import state_digest
from memroot.projections.epistemic import RetrievalMode
from memroot.projections.hook import MemoryHook, sync
from memroot.projections.query import (
    MAX_LIMIT,
    Query,
    edges_of,
    get_entity,
    get_object,
    object_history,
    query,
)
from memroot.projections.replay import MemoryReplayCheck, rebuild
from memroot.projections.rules import RuleError

AGENT = rq.Actor("agent", "AI_AGENT", "ns")


def fork(ledger: Ledger, name: str, parent: str = "main", btype: str = "SIMULATION") -> str:
    """Create a branch at the ledger layer (no branch policy hook needed here)."""
    op = OpInput(
        op_type="BRANCH_CREATE",
        actor_id="u",
        actor_type="HUMAN_USER",
        namespace_id="ns",
        policy_version="p/1",
        payload={"branch_id": name, "branch_type": btype, "purpose": "what if"},
    )
    ledger.fork(op, parent=parent, genesis={"branch_type": btype})
    return name


class Clock:
    def __init__(self) -> None:
        self._n = count(now_us() + 10**9, 1_000)

    def __call__(self) -> int:
        return next(self._n)


def event(tick: Clock, text: str = "hello", ns: str = "ns") -> EventInput:
    return EventInput(
        stream="s",
        actor_id="alice",
        actor_type="HUMAN_USER",
        role="USER",
        content=text,
        namespace_id=ns,
        id=new_uuid(),
        ts=tick(),
    )


@pytest.fixture
def led(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger.init(tmp_path / "m.ledger", hooks=[MemoryHook()])
    ledger.store.db.execute("PRAGMA synchronous=OFF")
    try:
        yield ledger
    finally:
        ledger.close()


def _assert(led: Ledger, tick: Clock, evidence: list[str], branch: str = "main", **kw: Any) -> str:
    kw.setdefault("epistemic_type", "OBSERVED")
    op = rq.assert_object(
        AGENT,
        kw.pop("object_type", "FACT"),
        kw.pop("epistemic_type"),
        "USER_STATED",
        evidence,
        kw.pop("value", "a fact"),
        ts=tick(),
        **kw,
    )
    return led.append(op, branch=branch).id


def test_branch_mutation_writes_branch_versions_and_leaves_the_parent_untouched(led: Ledger):
    """Reinforcing and deprecating an inherited object creates branch-local versions only."""
    tick = Clock()
    e = led.append(event(tick)).id
    x = _assert(led, tick, [e])
    db = led.store.db
    main_before = state_digest(db)
    b = fork(led, "sim")
    led.append(rq.reinforce(AGENT, x, "used", 0.05, 0.95, 0.55, "chat", ts=tick()), branch=b)
    led.append(rq.deprecate(AGENT, x, "wrong in this world", ts=tick()), branch=b)
    assert state_digest(db) == main_before
    mine, theirs = get_object(db, x, branch=b), get_object(db, x)
    assert (mine.lifecycle_state, mine.confidence, mine.version) == ("DEPRECATED", 0.95, 3)
    assert (theirs.lifecycle_state, theirs.confidence, theirs.version) == ("ACTIVE", 0.9, 1)
    assert mine.branch == b and theirs.branch == "main"
    assert [v.branch for v in object_history(db, x, branch=b)] == ["main", b, b]
    assert [v.version for v in object_history(db, x)] == [1]


def test_later_parent_changes_are_invisible_in_the_branch(led: Ledger):
    """Objects, mutations, erasures and entity merges in the parent after the fork stay out."""
    tick = Clock()
    e1, e2 = led.append(event(tick)).id, led.append(event(tick)).id
    x = _assert(led, tick, [e1])
    a = led.append(rq.entity_create(AGENT, "PERSON", "Alice", ts=tick())).id
    a2 = led.append(rq.entity_create(AGENT, "PERSON", "A.", ts=tick())).id
    b = fork(led, "sim")
    db = led.store.db
    frozen = {r.object.id: r.object for r in query(db, Query(branch=b, mode=RetrievalMode.AUDIT))}
    y = _assert(led, tick, [e2])
    led.append(rq.penalty(AGENT, x, "wrong", 0.1, 0.8, "r", ts=tick()))
    led.append(rq.entity_merge(AGENT, a, a2, ts=tick()))
    led.append(rq.tombstone(AGENT, e1, "gdpr", "p", "DEPRECATE", ts=tick()))
    seen = {r.object.id: r.object for r in query(db, Query(branch=b, mode=RetrievalMode.AUDIT))}
    assert seen == frozen and y not in seen
    assert get_object(db, x).lifecycle_state == "DEPRECATED"
    assert get_object(db, x, branch=b).lifecycle_state == "ACTIVE"
    assert get_entity(db, a2, branch=b).merged_into is None
    assert get_entity(db, a2).merged_into == a
    state = SqlState(db)
    assert state.event(b, e1) is not None and state.event(b, e1).erased_by is None
    assert state.event("main", e1).erased_by is not None
    with pytest.raises(NotFoundError):
        get_object(db, y, branch=b)


def test_a_branch_validates_against_its_view(led: Ledger):
    """A branch cannot cite a parent event or use a parent object created after the fork."""
    tick = Clock()
    e1 = led.append(event(tick)).id
    b = fork(led, "sim")
    late = led.append(event(tick)).id
    y = _assert(led, tick, [late])
    with pytest.raises(RuleError, match="evidence event"):
        _assert(led, tick, [late], branch=b)
    with pytest.raises(RuleError, match="does not exist"):
        led.append(rq.deprecate(AGENT, y, "r", ts=tick()), branch=b)
    z = _assert(led, tick, [e1], branch=b)
    assert get_object(led.store.db, z, branch=b).evidence_ids == (e1,)
    with pytest.raises(NotFoundError):
        get_object(led.store.db, z)


def test_namespace_policy_is_inherited_frozen_and_not_changed_in_a_branch(led: Ledger):
    """A policy created in main after the fork does not bind the branch; a branch cannot
    change policy itself."""
    tick = Clock()
    e1 = led.append(event(tick)).id
    b = fork(led, "sim")
    owner = rq.Actor("owner", "HUMAN_USER", "ns")
    led.append(rq.namespace_create(owner, "PERSONAL", ts=tick()))
    with pytest.raises(RuleError, match="lacks ASSERT"):
        _assert(led, tick, [e1])
    _assert(led, tick, [e1], branch=b)  # the branch sees ns without a policy, as at the fork
    with pytest.raises(RuleError, match="namespace policy"):
        led.append(rq.namespace_create(owner, "PERSONAL", ts=tick()), branch=b)


def test_a_branch_cannot_erase_a_parent_event(led: Ledger):
    """TOMBSTONE in a branch of an event seen through the fork is refused; nothing changes."""
    tick = Clock()
    e1 = led.append(event(tick)).id
    b = fork(led, "sim")
    size = led.size(b)
    with pytest.raises(RefusedError):
        led.append(rq.tombstone(AGENT, e1, "r", "p", ts=tick()), branch=b)
    assert led.size(b) == size and led.content(1) == "hello"


def test_branches_of_branches_see_each_level_frozen(led: Ledger):
    """A grandchild sees its parent at its fork and the grandparent at the parent's fork."""
    tick = Clock()
    e = led.append(event(tick)).id
    x = _assert(led, tick, [e])
    b = fork(led, "plan", btype="PLANNING")
    led.append(rq.reinforce(AGENT, x, "s", 0.05, 0.95, 0.55, "c", ts=tick()), branch=b)
    y = _assert(led, tick, [e], branch=b)
    c = fork(led, "sim2", parent=b)
    led.append(rq.deprecate(AGENT, y, "r", ts=tick()), branch=b)
    led.append(rq.penalty(AGENT, x, "s", 0.2, 0.7, "r", ts=tick()))
    z = _assert(led, tick, [e], branch=c)
    db = led.store.db
    assert get_object(db, x, branch=c).confidence == 0.95
    assert get_object(db, y, branch=c).lifecycle_state == "ACTIVE"
    assert get_object(db, y, branch=b).lifecycle_state == "DEPRECATED"
    assert get_object(db, x).confidence == 0.7
    ids = {r.object.id for r in query(db, Query(branch=c, mode=RetrievalMode.AUDIT))}
    assert ids == {x, y, z}
    with pytest.raises(NotFoundError):
        get_object(db, z, branch=b)


def _digests(db: Any, ledger: Ledger) -> dict[str, bytes]:
    return {b.name: state_digest(db, branch=b.name) for b in ledger.store.branches()}


def _step9(path: Path) -> list[str]:
    store = Store(path, readonly=True)
    try:
        report = audit(store, origin=str(store.meta("origin")), checks=[MemoryReplayCheck(path)])
    finally:
        store.close()
    return [str(f) for f in report.findings if f.step == 9 and f.severity == "error"]


# -- differential: a branch equals a ledger that never forked -----------------------------------


@dataclass
class _Branch:
    events: list[str] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    own_events: list[str] = field(default_factory=list)


@dataclass
class _Log:
    """Every attempted input with its branch and whether it was accepted; fork positions."""

    items: list[tuple[str, EventInput | OpInput, bool]] = field(default_factory=list)
    forks: dict[str, tuple[str, int]] = field(default_factory=dict)  # child -> (parent, index)

    def lineage(self, branch: str) -> list[tuple[EventInput | OpInput, bool]]:
        """Inputs a ledger that never forked would need to hold ``branch``'s state: the
        branch's own, and each ancestor's up to where the level below forked from it."""
        limits: dict[str, int | None] = {branch: None}
        cur = branch
        while cur in self.forks:
            parent, at = self.forks[cur]
            limits[parent] = at
            cur = parent
        return [
            (item, ok)
            for i, (b, item, ok) in enumerate(self.items)
            if b in limits and (limits[b] is None or i < (limits[b] or 0))
        ]


def _random_op(
    rng: random.Random, db: Any, b: str, st: _Branch, tick: Clock
) -> EventInput | OpInput:
    r = rng.random()
    if r < 0.25 or not st.events:
        return event(tick, f"m{rng.randrange(10**6)}")
    if r < 0.45 or not st.objects:
        k = rng.choice([1, 1, 2])
        ev = rng.sample(st.events, min(k, len(st.events)))
        epi = rng.choice(["OBSERVED", "ASSERTED", "HYPOTHETICAL"])
        ents = rng.sample(st.entities, 1) if st.entities and rng.random() < 0.3 else []
        return rq.assert_object(
            AGENT,
            "FACT",
            epi,
            "USER_STATED",
            ev,
            f"v{rng.randrange(100)}",
            entity_ids=ents,
            ts=tick(),
            salience=0.5,
        )
    if r < 0.52:
        return rq.entity_create(AGENT, "PERSON", f"P{rng.randrange(100)}", ts=tick())
    oid = rng.choice(st.objects)
    try:
        o = get_object(db, oid, branch=b)
    except NotFoundError:
        return rq.deprecate(AGENT, oid, "missing", ts=tick())
    kind = rng.randrange(9)
    if kind == 0:
        c = min(1.0, round(o.confidence + 0.05, 6))
        s = min(1.0, round(o.salience + 0.05, 6))
        return rq.reinforce(AGENT, oid, "use", 0.05, c, s, "t", ts=tick())
    if kind == 1:
        c = max(0.0, round(o.confidence - 0.05, 6))
        return rq.penalty(AGENT, oid, "wrong", 0.05, c, "r", ts=tick())
    if kind == 2:
        return rq.deprecate(AGENT, oid, "r", ts=tick())
    if kind == 3:
        return rq.transition(AGENT, oid, o.epistemic_type, "ASSERTED", "checked", ts=tick())
    if kind == 4 and len(st.objects) > 1:
        other = rng.choice(st.objects)
        return rq.supersede(AGENT, oid, other, "newer", ts=tick())
    if kind == 5 and len(st.objects) > 1:
        return rq.contradiction(AGENT, oid, rng.choice(st.objects), "clash", ts=tick())
    if kind == 6 and st.entities:
        return rq.relate(AGENT, "ABOUT_ENTITY", oid, rng.choice(st.entities), 0.8, ts=tick())
    if kind == 7 and len(st.entities) > 1:
        p, m = rng.sample(st.entities, 2)
        return rq.entity_merge(AGENT, p, m, ts=tick())
    if kind == 8 and st.own_events:
        return rq.tombstone(
            AGENT,
            rng.choice(st.own_events),
            "r",
            "p",
            rng.choice(["DEPRECATE", "ARCHIVE"]),
            ts=tick(),
        )
    return rq.archive(AGENT, oid, "old", "policy", ts=tick())


def _with_ids(item: EventInput | OpInput) -> EventInput | OpInput:
    import dataclasses

    return item if item.id is not None else dataclasses.replace(item, id=new_uuid())


def _run(tmp_path: Path, seed: int, steps: int) -> tuple[Ledger, _Log, list[str]]:
    rng = random.Random(seed)
    tick = Clock()
    ledger = Ledger.init(tmp_path / f"r{seed}.ledger", hooks=[MemoryHook()])
    ledger.store.db.execute("PRAGMA synchronous=OFF")
    db = ledger.store.db
    log = _Log()
    state = {"main": _Branch()}
    forks_at = {
        steps // 5: ("sim-a", "main"),
        steps // 2: ("sim-b", "sim-a"),
        (3 * steps) // 5: ("plan-c", "main"),
    }
    for i in range(steps):
        if i in forks_at:
            name, parent = forks_at[i]
            fork(ledger, name, parent)
            log.forks[name] = (parent, len(log.items))
            p = state[parent]
            state[name] = _Branch(list(p.events), list(p.objects), list(p.entities), [])
        b = rng.choice(sorted(state))
        st = state[b]
        item = _with_ids(_random_op(rng, db, b, st, tick))
        try:
            made = ledger.append(item, branch=b)
            ok = True
        except RefusedError:
            ok = False
        log.items.append((b, item, ok))
        if not ok:
            continue
        if isinstance(item, EventInput):
            st.events.append(made.id)
            st.own_events.append(made.id)
        elif item.op_type == "ASSERT":
            st.objects.append(item.target_id or made.id)
        elif item.op_type == "ENTITY_CREATE":
            st.entities.append(item.target_id or made.id)
    return ledger, log, sorted(state)


def _object_view(db: Any, branch: str) -> dict[str, Any]:
    out = {}
    for r in query(db, Query(branch=branch, mode=RetrievalMode.AUDIT, limit=MAX_LIMIT)):
        d = r.to_dict()
        for k in ("branch", "seq"):
            d.pop(k)
        d["history"] = [
            {k: v for k, v in h.to_dict().items() if k not in ("branch", "seq")}
            for h in object_history(db, r.object.id, branch=branch)
        ]
        d["edges"] = sorted(
            (e.id, e.type, e.source_id, e.target_id)
            for e in edges_of(db, r.object.id, branch=branch)
        )
        out[r.object.id] = d
    return out


@pytest.mark.parametrize("seed", range(6))
def test_a_branch_holds_what_a_never_forked_ledger_would(tmp_path: Path, seed: int):
    """Random histories over main and three branches (one nested): every branch accepts and
    refuses exactly what a fresh ledger replaying its lineage does, and ends in the same state."""
    ledger, log, branches = _run(tmp_path, seed, 240)
    try:
        db = ledger.store.db
        for b in branches:
            lineage = log.lineage(b)
            with Ledger.init(tmp_path / f"ref-{seed}-{b}.ledger", hooks=[MemoryHook()]) as ref:
                for item, ok in lineage:
                    try:
                        ref.append(item)
                        got = True
                    except RefusedError:
                        got = False
                    assert got == ok, (b, item)
                assert _object_view(ref.store.db, "main") == _object_view(db, b), b
    finally:
        ledger.close()


@pytest.mark.parametrize("seed", range(3))
def test_rebuild_and_step_9_give_identical_state_with_branches(tmp_path: Path, seed: int):
    """Incremental state, rebuild (drop and replay) and verify step 9 agree on every branch."""
    ledger, _, _ = _run(tmp_path, 100 + seed, 200)
    path = ledger.path
    try:
        db = ledger.store.db
        stored = _digests(db, ledger)
        assert len(stored) == 4
        report = rebuild(ledger)
        assert report.identical is True
        assert _digests(db, ledger) == stored
    finally:
        ledger.close()
    assert _step9(path) == []


def test_step_9_names_a_tampered_branch_row(tmp_path: Path):
    """branch_row_tampered: changing a branch-local object row is found on that branch."""
    tick = Clock()
    with Ledger.init(tmp_path / "t.ledger", hooks=[MemoryHook()]) as ledger:
        e = ledger.append(event(tick)).id
        x = _assert(ledger, tick, [e])
        b = fork(ledger, "sim")
        ledger.append(rq.reinforce(AGENT, x, "s", 0.05, 0.95, 0.55, "c", ts=tick()), branch=b)
        path = ledger.path
        ledger.store.db.execute(
            "UPDATE mem_objects SET confidence = 0.99 WHERE branch = ? AND id = ?", (b, x)
        )
    found = _step9(path)
    assert len(found) == 1 and "mem_objects" in found[0] and "confidence" in found[0]


def test_stray_branch_state_is_a_step_9_finding(tmp_path: Path):
    """branch_state_planted: derived rows of a branch the ledger lacks are reported."""
    with Ledger.init(tmp_path / "p.ledger", hooks=[MemoryHook()]) as ledger:
        ledger.append(event(Clock()))
        path = ledger.path
        ledger.store.db.execute("INSERT INTO mem_heads VALUES('ghost', 3)")
    assert any("does not have" in f for f in _step9(path))


def test_entries_appended_without_the_hook_are_folded_parents_first(tmp_path: Path):
    """A branch written without the memory hook is folded at the next sync, after its parent."""
    tick = Clock()
    path = tmp_path / "n.ledger"
    with Ledger.init(path, hooks=()) as bare:
        e = bare.append(event(tick)).id
        x = bare.append(
            rq.assert_object(AGENT, "FACT", "OBSERVED", "USER_STATED", [e], "v", ts=tick())
        ).id
        b = fork(bare, "sim")
        bare.append(rq.reinforce(AGENT, x, "s", 0.05, 0.95, 0.55, "c", ts=tick()), branch=b)
    with Ledger.open(path, hooks=[MemoryHook()]) as ledger:
        assert sync(ledger) == ledger.size() + ledger.size(b)
        db = ledger.store.db
        assert get_object(db, x, branch=b).confidence == 0.95
        assert get_object(db, x).confidence == 0.9
        assert rebuild(ledger).identical is True
