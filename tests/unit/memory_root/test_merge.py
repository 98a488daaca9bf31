"""Selective merge (RFC-0012 section 8), divergence (section 9) and branch diff."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.backends.store import Store
from memroot.ledger.entries import EventInput, OpInput, _library_op, now_us
from memroot.ledger.errors import NotFoundError, RefusedError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import audit
from memroot.memory_root.branches import BranchRegistry, close_branch, create_branch
from memroot.memory_root.divergence import WARN_ABOVE, diff_branch, divergence
from memroot.memory_root.merge import conflict_key, merge_branch
from memroot.projections import requests as rq
from memroot.projections.digest import state_digest
from memroot.projections.epistemic import RetrievalMode
from memroot.projections.hook import MemoryHook
from memroot.projections.query import Query, edges_of, get_object, query
from memroot.projections.replay import MemoryReplayCheck, rebuild
from memroot.projections.rules import PermissionRefused

NS = "team"
ADMIN = rq.Actor("admin", "HUMAN_USER", NS)
AGENT = rq.Actor("sim-agent", "AI_AGENT", NS)
PAIRS = 50


class World:
    """A ledger with the branch and memory hooks and a namespace with a policy."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.db = ledger.store.db
        self._t = count(now_us() + 10**9, 1_000)
        self.append(rq.namespace_create(ADMIN, "PROJECT"))
        for who, perms in (
            ("admin", ("WRITE", "ASSERT", "DEPRECATE", "READ")),
            ("sim-agent", ("WRITE", "ASSERT", "DEPRECATE", "READ")),
            ("bob", ("WRITE", "ASSERT")),
        ):
            for perm in perms:
                self.append(rq.grant(ADMIN, who, perm))

    def tick(self) -> int:
        return next(self._t)

    def append(self, item: Any, branch: str = "main") -> str:
        if item.ts is None:
            item = dataclasses.replace(item, ts=self.tick())
        return self.ledger.append(item, branch=branch).id

    def event(self, branch: str = "main") -> str:
        return self.append(
            EventInput(
                stream="s",
                actor_id="sim-agent",
                actor_type="AI_AGENT",
                role="USER",
                content="said",
                namespace_id=NS,
            ),
            branch,
        )

    def entity(self, name: str, branch: str = "main") -> str:
        return self.append(rq.entity_create(AGENT, "PERSON", name), branch)

    def obj(
        self,
        branch: str = "main",
        *,
        type_: str = "FACT",
        sv: Any = None,
        about: tuple[str, ...] = (),
        value: str = "v",
        epistemic: str = "ASSERTED",
        by: rq.Actor = AGENT,
    ) -> str:
        return self.append(
            rq.assert_object(
                by,
                type_,
                epistemic,
                "USER_STATED",
                [self.event(branch)],
                value,
                structured_value=sv,
                entity_ids=about,
            ),
            branch,
        )

    def branch(self, btype: str = "SIMULATION", parent: str = "main") -> str:
        _, genesis = create_branch(
            self.ledger, branch_type=btype, purpose="what if", actor_id="admin", parent=parent
        )
        return genesis.branch

    def sizes(self) -> tuple[int, ...]:
        return tuple(b.size for b in self.ledger.store.branches())


@pytest.fixture
def w(tmp_path: Path) -> Iterator[World]:
    ledger = Ledger.init(tmp_path / "m.ledger", hooks=[BranchRegistry(), MemoryHook()])
    ledger.store.db.execute("PRAGMA synchronous=OFF")
    try:
        yield World(ledger)
    finally:
        ledger.close()


def _step9(path: Path) -> list[str]:
    store = Store(path, readonly=True)
    try:
        report = audit(store, origin=str(store.meta("origin")), checks=[MemoryReplayCheck(path)])
    finally:
        store.close()
    return [str(f) for f in report.findings if f.severity == "error"]


@dataclasses.dataclass
class Scenario:
    branch: str
    pairs: list[tuple[str, str]]  # (branch object, conflicting canonical object)
    controls: list[str]  # branch objects without a conflict
    bystanders: list[str]  # canonical objects that look alike but do not conflict


def _scenario(w: World) -> Scenario:
    """50 conflicting pairs (40 FACT entity+attribute, 5 TASK, 5 INTENT) and look-alikes."""
    people = [w.entity(f"person {i}") for i in range(40)]
    bystanders = [w.obj(sv={"attribute": "city"}, about=(people[i],)) for i in range(5)]
    b = w.branch()
    pairs_b = [w.obj(b, sv={"attribute": "city"}, about=(p,), value="Hangzhou") for p in people]
    pairs_b += [w.obj(b, type_="TASK", sv={"task_id": f"t{i}"}) for i in range(5)]
    pairs_b += [w.obj(b, type_="INTENT", sv={"intent_id": f"i{i}"}) for i in range(5)]
    controls = [
        w.obj(b, sv={"attribute": "employer"}, about=(people[0],)),
        w.obj(b, sv={"note": "no attribute"}, about=(people[1],)),
        w.obj(b, type_="PREFERENCE", sv={"attribute": "city"}, about=(people[2],)),
        w.obj(b, type_="TASK", sv={"task_id": "only-in-branch"}),
    ]
    pairs_c = [
        w.obj(
            sv={"attribute": "city"},
            about=(p,),
            value="Chengdu",
            by=rq.Actor("bob", "HUMAN_USER", NS),
        )
        for p in people
    ]
    pairs_c += [
        w.obj(type_="TASK", sv={"task_id": f"t{i}"}, by=rq.Actor("bob", "HUMAN_USER", NS))
        for i in range(5)
    ]
    pairs_c += [
        w.obj(type_="INTENT", sv={"intent_id": f"i{i}"}, by=rq.Actor("bob", "HUMAN_USER", NS))
        for i in range(5)
    ]
    # Look-alikes created after the fork that do not conflict: another attribute, another
    # entity set, and a deprecated object with the same key.
    bystanders.append(w.obj(sv={"attribute": "employer"}, about=(people[3],)))
    bystanders.append(w.obj(sv={"attribute": "city"}, about=(people[3], people[4])))
    gone = w.obj(sv={"attribute": "employer"}, about=(people[0],))
    w.append(rq.deprecate(ADMIN, gone, "stale"))
    bystanders.append(gone)
    return Scenario(b, list(zip(pairs_b, pairs_c, strict=True)), controls, bystanders)


def _merge_payload(w: World, seq: int) -> dict[str, Any]:
    entry = w.ledger.entry(seq)
    assert entry.type == "BRANCH_MERGE"
    return dict(entry.body["payload"])


@pytest.mark.parametrize("strategy", ["PRESERVE_BOTH", "PREFER_CANONICAL", "PREFER_BRANCH"])
def test_fifty_conflicting_pairs_per_strategy(w: World, strategy: str):
    """RFC-0012 section 12: each strategy gives exactly its outcome on 50 conflicting pairs."""
    s = _scenario(w)
    assert len(s.pairs) == PAIRS
    ids = [b for b, _ in s.pairs] + s.controls
    before = {c: get_object(w.db, c) for _, c in s.pairs}
    result = merge_branch(w.ledger, s.branch, ids, strategy=strategy, actor_id="admin")
    items = {i.object_id: i for i in result.items}
    assert list(items) == ids
    for b, c in s.pairs:
        assert items[b].conflicts_with == (c,)
    for b in s.controls:
        assert items[b].outcome == "IMPORTED" and items[b].conflicts_with == ()
    imported = {i.object_id: i.new_object_id for i in result.items if i.outcome == "IMPORTED"}
    for b, new in imported.items():
        src, got = get_object(w.db, b, branch=s.branch), get_object(w.db, str(new))
        assert got.source_type == "IMPORTED" and got.asserted_by == "sim-agent"
        assert (got.epistemic_type, got.evidence_ids) == (src.epistemic_type, src.evidence_ids)
        assert (got.value, got.structured_value, got.confidence) == (
            src.value,
            src.structured_value,
            src.confidence,
        )
    payload = _merge_payload(w, result.merge_seq)
    assert payload["conflict_resolution_policy"] == strategy
    assert payload["merge_type"] == "SELECTIVE" and payload["included_object_ids"] == ids
    assert payload["items"] == [i.to_json() for i in result.items]
    for x in s.bystanders:
        assert all(x not in i.conflicts_with for i in result.items)
    if strategy == "PRESERVE_BOTH":
        assert result.override_seq is None
        for b, c in s.pairs:
            new = imported[b]
            links = edges_of(w.db, str(new), types=("CONTRADICTS",))
            assert [(e.source_id, e.target_id) for e in links] == [(new, c)]
            assert get_object(w.db, c) == before[c]  # nothing resolved
    elif strategy == "PREFER_CANONICAL":
        assert result.override_seq is None
        assert [i.outcome for i in result.items[:PAIRS]] == ["REJECTED"] * PAIRS
        assert all(i.new_object_id is None for i in result.items[:PAIRS])
        for _, c in s.pairs:
            assert get_object(w.db, c) == before[c]
        imported_rows = query(w.db, Query(mode=RetrievalMode.AUDIT, limit=1000))
        assert sum(r.object.source_type == "IMPORTED" for r in imported_rows) == len(s.controls)
    else:
        assert result.override_seq is not None
        alert = w.ledger.entry(result.override_seq)
        assert alert.type == "MERGE_OVERRIDE" and alert.body["actor_id"] == "memroot"
        overridden = alert.body["payload"]["overridden"]
        assert [(o["branch_object_id"], o["canonical_object_id"]) for o in overridden] == s.pairs
        for b, c in s.pairs:
            assert items[b].deprecated == (c,)
            assert get_object(w.db, c).lifecycle_state == "DEPRECATED"
            assert edges_of(w.db, str(imported[b]), types=("CONTRADICTS",)) == []
    assert rebuild(w.ledger).identical is True
    assert _step9(w.ledger.path) == []


# -- refusals ------------------------------------------------------------------------------------


def test_a_merge_without_an_object_list_is_refused(w: World):
    """Full-branch merges are not permitted: an empty list is refused, nothing written."""
    b = w.branch()
    w.obj(b)
    sizes = w.sizes()
    with pytest.raises(ValidationError, match="not permitted") as e:
        merge_branch(w.ledger, b, [], actor_id="admin")
    assert e.value.field == "objects" and w.sizes() == sizes


@pytest.mark.parametrize("btype", ["COUNTERFACTUAL", "SANDBOX", "TEST"])
def test_counterfactual_sandbox_and_test_branches_never_merge(w: World, btype: str):
    """COUNTERFACTUAL, SANDBOX and TEST branches are refused, naming the type."""
    b = w.branch(btype)
    x = w.obj(b)
    sizes = w.sizes()
    with pytest.raises(RefusedError, match=f"{btype} branches never merge"):
        merge_branch(w.ledger, b, [x], actor_id="admin")
    assert w.sizes() == sizes


def test_a_hand_made_branch_merge_of_a_sandbox_is_refused(w: World):
    """The registry refuses a BRANCH_MERGE entry for a type that never merges."""
    b = w.branch("SANDBOX")
    op = OpInput(
        op_type="BRANCH_MERGE",
        actor_id="admin",
        actor_type="HUMAN_USER",
        namespace_id=NS,
        payload={"branch_id": b, "items": []},
        policy_version="p/1",
    )
    with pytest.raises(RefusedError, match="by: memroot branch merge"):
        w.ledger.append(op)  # a caller never writes one (RESERVED_OPS)
    with pytest.raises(RefusedError, match="never merges"):
        w.ledger.append(_library_op(op))  # nor does memroot's own writer, for a SANDBOX


def test_hypothetical_objects_must_be_reclassified_by_the_merging_actor(w: World):
    """HYPOTHETICAL objects are refused by name; a reclassification by someone else too;
    the merging actor's own EPISTEMIC_TRANSITION lets them through."""
    b = w.branch()
    h1, h2 = w.obj(b, epistemic="HYPOTHETICAL"), w.obj(b, epistemic="HYPOTHETICAL")
    ok = w.obj(b)
    sizes = w.sizes()
    with pytest.raises(RefusedError, match="HYPOTHETICAL") as e:
        merge_branch(w.ledger, b, [ok, h1, h2], actor_id="admin")
    assert h1 in str(e.value) and h2 in str(e.value) and ok not in str(e.value)
    assert w.sizes() == sizes
    w.append(rq.transition(AGENT, h1, "HYPOTHETICAL", "ASSERTED", "simulated it"), b)
    w.append(rq.transition(ADMIN, h2, "HYPOTHETICAL", "ASSERTED", "reviewed"), b)
    with pytest.raises(RefusedError, match="by someone other than admin") as e:
        merge_branch(w.ledger, b, [h1, h2], actor_id="admin")
    assert f"{h1} (by sim-agent)" in str(e.value) and h2 not in str(e.value)
    result = merge_branch(w.ledger, b, [h2], actor_id="admin")
    new = get_object(w.db, str(result.items[0].new_object_id))
    assert new.epistemic_type == "ASSERTED" and new.source_type == "IMPORTED"


def test_only_the_branchs_own_active_objects_merge_once(w: World):
    """Unchanged inherited, non-ACTIVE, unknown and already imported objects are refused."""
    old = w.obj()
    touched = w.obj()
    b = w.branch()
    w.append(rq.reinforce(AGENT, touched, "used", 0.05, 0.85, 0.55, "sim"), b)
    dead = w.obj(b)
    w.append(rq.deprecate(AGENT, dead, "no"), b)
    with pytest.raises(RefusedError, match="inherited from the parent and unchanged"):
        merge_branch(w.ledger, b, [old], actor_id="admin")
    with pytest.raises(RefusedError, match="not ACTIVE"):
        merge_branch(w.ledger, b, [dead], actor_id="admin")
    with pytest.raises(NotFoundError):
        merge_branch(w.ledger, b, ["01900000-0000-7000-8000-000000000000"], actor_id="admin")
    first = merge_branch(w.ledger, b, [touched], actor_id="admin")
    new = get_object(w.db, str(first.items[0].new_object_id))
    assert new.confidence == 0.85 and get_object(w.db, touched).confidence == 0.8
    with pytest.raises(RefusedError, match="already imported"):
        merge_branch(w.ledger, b, [touched], actor_id="admin")


def test_discarded_branches_do_not_merge(w: World):
    """A discarded branch is refused."""
    b = w.branch()
    x = w.obj(b)
    close_branch(w.ledger, b, action="DISCARD", reason="done", actor_id="admin")
    with pytest.raises(RefusedError, match="DISCARDED"):
        merge_branch(w.ledger, b, [x], actor_id="admin")


def test_prefer_branch_needs_admin(w: World):
    """PREFER_BRANCH without an ADMIN grant is refused naming actor and namespace."""
    s = _scenario(w)
    sizes = w.sizes()
    with pytest.raises(PermissionRefused, match="ADMIN") as e:
        merge_branch(w.ledger, s.branch, [s.pairs[0][0]], strategy="PREFER_BRANCH", actor_id="bob")
    assert e.value.actor_id == "bob" and e.value.namespace_id == NS
    assert w.sizes() == sizes


def test_a_merge_lands_whole_or_not_at_all(w: World):
    """When the memory model refuses one entry (no DEPRECATE grant), nothing is written."""
    s = _scenario(w)
    w.append(rq.grant(ADMIN, "carol", "ADMIN"))
    w.append(rq.grant(ADMIN, "carol", "ASSERT"))
    sizes, digest = w.sizes(), state_digest(w.db)
    with pytest.raises(PermissionRefused, match="DEPRECATE"):
        merge_branch(
            w.ledger, s.branch, [b for b, _ in s.pairs], strategy="PREFER_BRANCH", actor_id="carol"
        )
    assert w.sizes() == sizes and state_digest(w.db) == digest


# -- what a merge carries -----------------------------------------------------------------------


def test_entities_created_in_the_branch_come_along(w: World):
    """An imported object about a branch-local entity brings the entity (same id)."""
    b = w.branch()
    ent = w.entity("Dana", b)
    x = w.obj(b, sv={"attribute": "city"}, about=(ent,))
    result = merge_branch(w.ledger, b, [x], actor_id="admin")
    assert result.entities_created == (ent,)
    new = str(result.items[0].new_object_id)
    about = [e.target_id for e in edges_of(w.db, new, types=("ABOUT_ENTITY",))]
    assert about == [ent]
    assert conflict_key(w.db, get_object(w.db, new), "main") == (
        "FACT",
        NS,
        (ent,),
        "city",
    )


def test_a_nested_branch_merges_into_its_parent_branch(w: World):
    """A SIMULATION branch of a PLANNING branch merges into the PLANNING branch only."""
    plan = w.branch("PLANNING")
    sim = w.branch("SIMULATION", parent=plan)
    x = w.obj(sim)
    main_size, main_digest = w.ledger.size(), state_digest(w.db)
    result = merge_branch(w.ledger, sim, [x], actor_id="admin")
    assert result.target == plan
    assert w.ledger.entry(result.merge_seq, plan).type == "BRANCH_MERGE"
    assert get_object(w.db, str(result.items[0].new_object_id), branch=plan).value == "v"
    assert (w.ledger.size(), state_digest(w.db)) == (main_size, main_digest)


# -- divergence and diff -------------------------------------------------------------------------


def test_divergence_counts_and_score(w: World):
    """The counts of both sides and the Jaccard distance, on a hand-computed case."""
    a, b_, c = w.obj(), w.obj(), w.obj()
    for _ in range(5):
        w.obj()
    br = w.branch()
    w.append(rq.reinforce(AGENT, a, "s", 0.05, 0.85, 0.55, "x"), br)
    w.append(rq.reinforce(AGENT, b_, "s", 0.05, 0.85, 0.55, "x"), br)
    w.obj(br)
    w.append(rq.penalty(AGENT, b_, "s", 0.05, 0.75, "r"))
    w.append(rq.penalty(AGENT, c, "s", 0.05, 0.75, "r"))
    w.obj()
    w.obj()
    d = divergence(w.ledger, br, now=123)
    assert (d.objects_at_fork, d.objects_created, d.objects_modified) == (8, 1, 2)
    assert (d.canonical_objects_created, d.canonical_objects_modified) == (2, 2)
    assert d.events_since_fork == 2 + 2  # two REINFORCE, an event and an ASSERT
    assert d.canonical_events_since_fork == 2 + 2 * 2
    # same = 8 - (2 + 2 - 1) = 5; |B| = 9, |P| = 10; 1 - 5 / (9 + 10 - 5)
    assert d.divergence_score == pytest.approx(1 - 5 / 14, abs=1e-6)
    assert d.measured_at == 123 and not d.warning
    assert d.to_json()["divergence_score"] == d.divergence_score


def test_a_divergent_merge_warns_and_goes_ahead(w: World):
    """Above 0.70 the merge carries a warning (result and BRANCH_MERGE payload) and lands."""
    w.obj()
    b = w.branch()
    xs = [w.obj(b) for _ in range(4)]
    result = merge_branch(w.ledger, b, xs[:1], actor_id="admin")
    assert result.divergence.divergence_score == pytest.approx(0.8)
    assert result.divergence.divergence_score > WARN_ABOVE
    assert result.warning is not None and "0.80" in result.warning
    assert _merge_payload(w, result.merge_seq)["divergence"]["warning"] is True
    assert result.items[0].outcome == "IMPORTED"


def test_diff_lists_created_and_modified_objects(w: World):
    """diff_branch names what the branch created and, for modified objects, what changed."""
    x = w.obj()
    b = w.branch()
    w.append(rq.reinforce(AGENT, x, "s", 0.05, 0.85, 0.55, "x"), b)
    y = w.obj(b)
    d = diff_branch(w.ledger, b)
    assert [c.id for c in d.created] == [y] and d.created[0].before is None
    [m] = d.modified
    assert m.id == x and m.before is not None and m.before.confidence == 0.8
    assert m.after.confidence == 0.85
    assert set(m.changed) == {"confidence", "salience", "version", "last_modified_at"}
    assert d.to_json()["modified"][0]["changed"] == list(m.changed)


def test_merge_needs_the_validating_hooks(tmp_path: Path):
    """A ledger opened without the memory and branch hooks cannot merge (entries unchecked)."""
    with (
        Ledger.init(tmp_path / "bare.ledger", hooks=()) as ledger,
        pytest.raises(ValueError, match="MemoryHook"),
    ):
        merge_branch(ledger, "x", ["01900000-0000-7000-8000-000000000000"], actor_id="a")


def test_the_memory_model_refuses_malformed_imports(w: World):
    """An ASSERT with payload.imported must be IMPORTED, not HYPOTHETICAL, from another branch."""
    e = w.event()
    origin = {"branch": "sim", "object_id": "01900000-0000-7000-8000-000000000000"}
    base = rq.assert_object(AGENT, "FACT", "ASSERTED", "IMPORTED", [e], "v", confidence=0.5)

    def with_(**over: Any) -> Any:
        payload = {**base.payload, **over}
        return dataclasses.replace(base, payload=payload)

    with pytest.raises(ValidationError, match="IMPORTED"):
        w.append(
            with_(
                source_type="USER_STATED", confidence=None, imported={**origin, "asserted_by": "x"}
            )
        )
    with pytest.raises(RefusedError, match="HYPOTHETICAL"):
        w.append(with_(epistemic_type="HYPOTHETICAL", imported={**origin, "asserted_by": "x"}))
    with pytest.raises(RefusedError, match="another branch"):
        w.append(with_(imported={**origin, "branch": "main", "asserted_by": "x"}))
    x = w.append(with_(imported={**origin, "asserted_by": "someone"}))
    assert get_object(w.db, x).asserted_by == "someone"


def test_prefer_branch_refusal_on_a_namespace_without_a_policy_says_one_thing(w: World):
    """Issue 16.4: PREFER_BRANCH into a namespace with no policy is refused saying the
    namespace has no policy, and never also that it has one; nothing is written."""
    lone = rq.Actor("sim-agent", "AI_AGENT", "open-ns")
    b = w.branch()
    ev = w.append(
        EventInput(
            stream="s",
            actor_id="sim-agent",
            actor_type="AI_AGENT",
            role="USER",
            content="said",
            namespace_id="open-ns",
        ),
        b,
    )
    x = w.append(rq.assert_object(lone, "FACT", "ASSERTED", "USER_STATED", [ev], "v"), b)
    sizes = w.sizes()
    with pytest.raises(PermissionRefused) as e:
        merge_branch(w.ledger, b, [x], strategy="PREFER_BRANCH", actor_id="admin")
    message = str(e.value)
    assert "has no policy" in message and "has a policy" not in message
    assert (e.value.namespace_id, e.value.permission) == ("open-ns", "ADMIN")
    assert w.sizes() == sizes
