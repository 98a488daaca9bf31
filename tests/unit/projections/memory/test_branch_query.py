"""Reads in a branch, at a conversation anchor, and ranked for a git branch."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.entries import EventInput, OpInput, new_uuid, now_us
from memroot.ledger.errors import NotFoundError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.projections import requests as rq
from memroot.projections.anchors import ConversationTree, ancestor_path_in, visible
from memroot.projections.digest import state_digest
from memroot.projections.epistemic import RetrievalMode
from memroot.projections.gitctx import GitContext, GitContextHook, branch_score
from memroot.projections.hook import MemoryHook
from memroot.projections.query import PAGE, Query, edges_of, entity_members, query
from memroot.projections.rules import RuleError

AGENT = rq.Actor("agent", "AI_AGENT", "ns")


class World:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.db = ledger.store.db
        self._t = count(now_us() + 10**9, 1_000)

    def tick(self) -> int:
        return next(self._t)

    def event(self, parent: str | None = None, branch: str = "main", text: str = "hi") -> str:
        ev = EventInput(
            stream="s",
            actor_id="alice",
            actor_type="HUMAN_USER",
            role="USER",
            content=text,
            namespace_id="ns",
            parent_event_id=parent,
            ts=self.tick(),
        )
        return self.ledger.append(ev, branch=branch).id

    def fact(
        self,
        evidence: list[str],
        *,
        branch: str = "main",
        epistemic: str = "OBSERVED",
        git: dict[str, str] | None = None,
        salience: float = 0.5,
        **kw: Any,
    ) -> str:
        op = rq.assert_object(
            AGENT,
            "FACT",
            epistemic,
            "USER_STATED",
            evidence,
            "v",
            salience=salience,
            ts=self.tick(),
            **kw,
        )
        if git is not None:
            op = dataclasses.replace(op, context={"git": git})
        return self.ledger.append(op, branch=branch).id

    def fork(self, name: str, btype: str, parent: str = "main") -> str:
        op = OpInput(
            op_type="BRANCH_CREATE",
            actor_id="u",
            actor_type="HUMAN_USER",
            namespace_id="ns",
            policy_version="p/1",
            payload={"branch_id": name, "branch_type": btype, "purpose": "p"},
        )
        self.ledger.fork(op, parent=parent, genesis={"branch_type": btype})
        return name

    def ids(self, **kw: Any) -> list[str]:
        return [r.object.id for r in query(self.db, Query(**kw))]


@pytest.fixture
def w(tmp_path: Path) -> Iterator[World]:
    hooks = [ConversationTree(), GitContextHook(), MemoryHook()]
    ledger = Ledger.init(tmp_path / "q.ledger", hooks=hooks)
    ledger.store.db.execute("PRAGMA synchronous=OFF")
    try:
        yield World(ledger)
    finally:
        ledger.close()


# -- branches ------------------------------------------------------------------------------------


def test_hypothetical_objects_appear_flagged_in_simulation_default_reads(w: World):
    """ACTIVE HYPOTHETICAL objects are in a SIMULATION branch's DEFAULT reads, flagged;
    PLANNING branches and main leave them out of DEFAULT and flag them in EXPLICIT."""
    e = w.event()
    inherited = w.fact([e], epistemic="HYPOTHETICAL")
    sim, plan = w.fork("sim", "SIMULATION"), w.fork("plan", "PLANNING")
    local = w.fact([e], branch=sim, epistemic="HYPOTHETICAL")
    dropped = w.fact([e], branch=sim, epistemic="HYPOTHETICAL")
    w.ledger.append(rq.deprecate(AGENT, dropped, "abandoned", ts=w.tick()), branch=sim)
    plain = w.fact([e], branch=sim)
    results = {r.object.id: r.flags for r in query(w.db, Query(branch=sim))}
    assert results == {local: ("HYPOTHETICAL",), inherited: ("HYPOTHETICAL",), plain: ()}
    assert w.ids(branch=plan) == []
    assert w.ids() == []
    explicit = query(w.db, Query(branch=plan, mode=RetrievalMode.EXPLICIT))
    assert [(r.object.id, r.flags) for r in explicit] == [(inherited, ("HYPOTHETICAL",))]


def test_branch_reads_cover_entities_edges_and_namespaces(w: World):
    """Entity filters, edges and entity members read the branch's view too."""
    e = w.event()
    a = w.ledger.append(rq.entity_create(AGENT, "PERSON", "Alice", ts=w.tick())).id
    a2 = w.ledger.append(rq.entity_create(AGENT, "PERSON", "Al", ts=w.tick())).id
    x = w.fact([e], entity_ids=[a])
    sim = w.fork("sim", "SIMULATION")
    w.ledger.append(rq.entity_merge(AGENT, a, a2, ts=w.tick()), branch=sim)
    y = w.fact([e], branch=sim, entity_ids=[a2])
    z = w.fact([e], entity_ids=[a])
    assert sorted(entity_members(w.db, a, branch=sim)) == sorted([a, a2])
    assert entity_members(w.db, a) == [a]
    assert set(w.ids(branch=sim, entity=a)) == {x, y}
    assert set(w.ids(entity=a)) == {x, z}
    about = {e.target_id for e in edges_of(w.db, y, branch=sim, types=("ABOUT_ENTITY",))}
    assert about == {a}  # references resolve to the primary the branch merged into
    with pytest.raises(NotFoundError):
        query(w.db, Query(branch="nope"))


def test_namespace_policy_is_changed_in_main_only(w: World):
    """docs/branches.md: a branch inherits namespace policy at the fork; a REVOKE (or any
    policy operation) appended in a branch is refused, nothing written, and the grant it
    aimed at still holds there; a REVOKE in main ends it in main (the fork keeps its policy
    as of the fork)."""
    admin = rq.Actor("agent", "AI_AGENT", "team")
    w.ledger.append(rq.namespace_create(admin, "PROJECT", ts=w.tick()))
    w.ledger.append(rq.grant(admin, "reader", "READ", ts=w.tick()))
    w.ledger.append(rq.grant(admin, "agent", "ASSERT", ts=w.tick()))
    fact = rq.assert_object(admin, "FACT", "OBSERVED", "USER_STATED", [w.event()], "v")
    x = w.ledger.append(dataclasses.replace(fact, ts=w.tick())).id
    sim = w.fork("sim", "SIMULATION")
    size = w.ledger.size(sim)
    for policy in (
        rq.revoke(admin, "reader", "READ", ts=w.tick()),
        rq.grant(admin, "other", "READ", ts=w.tick()),
        rq.namespace_create(rq.Actor("agent", "AI_AGENT", "new-ns"), "PROJECT", ts=w.tick()),
    ):
        with pytest.raises(RuleError, match="change policy in main"):
            w.ledger.append(policy, branch=sim)
    assert w.ledger.size(sim) == size
    assert w.ids(branch=sim, actor="reader") == [x]
    w.ledger.append(rq.revoke(admin, "reader", "READ", ts=w.tick()))
    assert w.ids(actor="reader") == []
    assert w.ids(branch=sim, actor="reader") == [x]


# -- anchors -------------------------------------------------------------------------------------


def test_anchor_reads_only_objects_derived_from_the_anchor_path(w: World):
    """An edit makes siblings b and c: reading at b hides what came from c, and back."""
    r = w.event()
    a = w.event(r)
    b, c = w.event(a, text="moving to Chengdu"), w.event(a, text="moving to Hangzhou")
    x = w.fact([r])
    y = w.fact([a, b])
    z = w.fact([c])
    mixed = w.fact([b, c])
    before = state_digest(w.db)
    assert set(w.ids(anchor=b)) == {x, y}
    assert set(w.ids(anchor=c)) == {x, z}
    assert set(w.ids(anchor=r)) == {x}
    assert set(w.ids()) == {x, y, z, mixed}  # no anchor: no conversation filter
    assert state_digest(w.db) == before  # switching anchors stores nothing
    with pytest.raises(NotFoundError, match="anchor"):
        query(w.db, Query(anchor=new_uuid()))
    with pytest.raises(ValidationError):
        Query(anchor="not-a-uuid")


def test_anchor_in_a_branch_sees_inherited_and_local_events(w: World):
    """The anchor may be a branch event whose path runs into the parent's events."""
    r = w.event()
    x = w.fact([r])
    sim = w.fork("sim", "SIMULATION")
    late = w.event(r)  # main, after the fork: not an anchor the branch can read at
    b = w.event(r, branch=sim)
    y = w.fact([r, b], branch=sim)
    assert set(w.ids(branch=sim, anchor=b)) == {x, y}
    with pytest.raises(NotFoundError, match="anchor"):
        query(w.db, Query(branch=sim, anchor=late))


def test_anchor_pages_past_hidden_objects(w: World):
    """With more hidden objects than a page, the anchored read still fills its limit."""
    r = w.event()
    on, off = w.event(r), w.event(r)
    keep = [w.fact([on]) for _ in range(5)]
    w.ledger.append_batch(
        [
            rq.assert_object(AGENT, "FACT", "OBSERVED", "USER_STATED", [off], "v", ts=w.tick())
            for _ in range(PAGE + 40)
        ]
    )
    assert w.ids(anchor=on, limit=3) == keep[::-1][:3]
    assert w.ids(anchor=on, limit=50) == keep[::-1]


@pytest.mark.parametrize("seed", range(3))
def test_anchor_reads_match_a_brute_force_reference(w: World, seed: int):
    """Random trees: the query's anchored results equal the objects the rule admits."""
    rng = random.Random(seed)
    events: list[str] = []
    parents: dict[str, str | None] = {}
    for _ in range(40):
        p = rng.choice(events) if events and rng.random() < 0.9 else None
        events.append(w.event(p))
        parents[events[-1]] = p
    objs = {}
    for _ in range(60):
        ev = rng.sample(events, rng.choice([1, 1, 2, 3]))
        objs[w.fact(ev)] = ev
    for anchor in rng.sample(events, 15):
        path = ancestor_path_in(parents, anchor)
        want = {o for o, ev in objs.items() if visible(ev, path)}
        assert set(w.ids(anchor=anchor, limit=100)) == want


# -- git ranking ---------------------------------------------------------------------------------


def test_git_branch_ranks_by_the_seed_score_of_the_creating_entry(w: World):
    """Objects written on the current git branch outrank others; scores are the formula's."""
    e = w.event()
    mine = w.fact([e], git={"branch": "feature/x"}, salience=0.6)
    mainline = w.fact([e], git={"branch": "main"}, salience=0.9)
    bare = w.fact([e], salience=0.7)
    other = w.fact([e], git={"branch": "feature/y"}, salience=0.5)
    assert w.ids() == [other, bare, mainline, mine]  # without: newest first, unchanged
    results = query(w.db, Query(git_branch="feature/x"))
    # 0.689 > 0.634 > 0.511 > 0.478: affinity lifts the least salient object to the top.
    assert [r.object.id for r in results] == [mine, mainline, bare, other]
    ctx = {
        mine: GitContext("feature/x", None, "current_branch"),
        mainline: GitContext("main", None, "mainline"),
        bare: None,
        other: GitContext("feature/y", None, "current_branch"),
    }
    for r in results:
        base = r.object.confidence * r.object.salience
        assert r.score == pytest.approx(branch_score(base, ctx[r.object.id], "feature/x"))
    assert all(r.score is None for r in query(w.db, Query()))
    assert w.ids(git_branch="feature/x", limit=2) == [mine, mainline]


def test_git_context_of_an_inherited_object_is_its_creating_entry(w: World):
    """A branch-local version keeps the git context of the entry that created the object."""
    e = w.event()
    x = w.fact([e], git={"branch": "feature/x"})
    y = w.fact([e], git={"branch": "feature/y"})
    sim = w.fork("sim", "SIMULATION")
    w.ledger.append(rq.reinforce(AGENT, y, "s", 0.05, 0.95, 0.55, "c", ts=w.tick()), branch=sim)
    w.ledger.append(rq.reinforce(AGENT, x, "s", 0.05, 0.95, 0.55, "c", ts=w.tick()), branch=sim)
    ranked = query(w.db, Query(branch=sim, git_branch="feature/y"))
    assert [r.object.id for r in ranked] == [y, x]
    assert ranked[0].score == pytest.approx(
        branch_score(0.95 * 0.55, GitContext("feature/y", None, "current_branch"), "feature/y")
    )
