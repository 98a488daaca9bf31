"""RFC-0001 section 8: the lifecycle state machine, exhaustively, and versions per mutation."""

from __future__ import annotations

from typing import Any

import pytest

from memroot.ledger.vocab import LifecycleState
from memroot.projections import requests as rq
from memroot.projections import rules
from memroot.projections.lifecycle import is_allowed
from memroot.projections.query import edges_of, object_history
from memroot.projections.rules import RuleError

A, D, S, R = "ACTIVE", "DEPRECATED", "SUPERSEDED", "ARCHIVED"
# RFC-0001 section 8, as written: ACTIVE -> DEPRECATED | SUPERSEDED | ARCHIVED;
# DEPRECATED -> ARCHIVED. Nothing else.
RFC_ALLOWED = {(A, D), (A, S), (A, R), (D, R)}


@pytest.mark.parametrize("current", list(LifecycleState))
@pytest.mark.parametrize("target", list(LifecycleState))
def test_state_machine_is_exactly_rfc_0001(current: str, target: str) -> None:
    """is_allowed admits exactly the four transitions of RFC-0001 section 8."""
    assert is_allowed(current, target) == ((current, target) in RFC_ALLOWED)


def in_state(world: Any, state: str) -> str:
    """Return the id of a FACT brought into ``state`` by real operations."""
    oid = world.assert_("subject")
    if state == D:
        world.op(rq.deprecate(world.agent, oid, "stale"))
    elif state == S:
        world.op(rq.supersede(world.agent, oid, world.assert_("newer"), "newer"))
    elif state == R:
        world.op(rq.archive(world.agent, oid, "retention", "p-1"))
    assert world.get(oid).lifecycle_state == state
    return oid


def move(world: Any, oid: str, target: str) -> None:
    if target == D:
        world.op(rq.deprecate(world.agent, oid, "stale"))
    elif target == S:
        world.op(rq.supersede(world.agent, oid, world.assert_("replacement"), "newer"))
    else:
        world.op(rq.archive(world.agent, oid, "retention", "p-1"))


@pytest.mark.parametrize("current", [A, D, S, R])
@pytest.mark.parametrize("target", [D, S, R])
def test_lifecycle_operations_follow_the_state_machine(
    world: Any, current: str, target: str
) -> None:
    """DEPRECATE, SUPERSEDE, ARCHIVE succeed exactly where RFC-0001 allows, else write nothing."""
    oid = in_state(world, current)
    before = world.get(oid)
    if (current, target) in RFC_ALLOWED:
        move(world, oid, target)
        after = world.get(oid)
        assert after.lifecycle_state == target
        assert after.version == before.version + 1
        assert after.seq == world.ledger.size() - 1
    else:
        if target == S:
            new = world.assert_("replacement")
            op = rq.supersede(world.agent, oid, new, "newer")
        else:
            op = (
                rq.deprecate(world.agent, oid, "x")
                if target == D
                else rq.archive(world.agent, oid, "x", "p")
            )
        snap = world.snapshot()
        with pytest.raises(RuleError) as e:
            world.op(op)
        assert e.value.rule == rules.LIFECYCLE
        assert current in str(e.value) and oid in str(e.value)
        assert world.snapshot() == snap
        assert world.get(oid) == before


def test_version_grows_by_one_per_mutation_and_versions_chain(world: Any) -> None:
    """Every mutation makes version + 1; each version's row ends where the next begins."""
    oid = world.assert_("tea", epistemic="ASSERTED", source="USER_STATED", salience=0.5)
    a = world.agent
    world.op(rq.reinforce(a, oid, "use", 0.1, 0.9, 0.6, "retrieval"))
    world.op(rq.penalty(a, oid, "wrong", 0.2, 0.7, "contradicted"))
    world.op(rq.decay(a, oid, 0.1, 0.5, 0.65, "exp"))
    world.op(rq.transition(a, oid, "ASSERTED", "OBSERVED", "seen", [world.event()]))
    world.op(rq.deprecate(a, oid, "stale"))
    world.op(rq.archive(a, oid, "retention", "p"))
    versions = object_history(world.db, oid)
    assert [v.version for v in versions] == list(range(1, 8))
    rows = world.db.execute(
        "SELECT vfrom, vto FROM mem_objects WHERE id = ? ORDER BY vfrom", (oid,)
    ).fetchall()
    assert all(rows[i][1] == rows[i + 1][0] for i in range(len(rows) - 1))
    assert rows[-1][1] is None
    assert versions[-1].created_at == versions[0].created_at
    assert versions[-1].last_modified_at > versions[0].last_modified_at


def test_supersede_sets_superseded_by_and_links_supersedes(world: Any) -> None:
    """SUPERSEDE marks the old object, points it at the new one and adds new SUPERSEDES old."""
    old, new = world.assert_("Alice lives in Paris"), world.assert_("Alice lives in Rome")
    world.op(rq.supersede(world.agent, old, new, "moved"))
    o = world.get(old)
    assert (o.lifecycle_state, o.superseded_by, o.version) == (S, new, 2)
    assert o.valid_to is not None and o.valid_to >= o.valid_from
    assert world.get(new).version == 1
    sup = [e for e in edges_of(world.db, old) if e.type == "SUPERSEDES"]
    assert [(e.source_id, e.target_id) for e in sup] == [(new, old)]


@pytest.mark.parametrize("case", ["self", "new_not_active", "other_type", "missing"])
def test_supersede_refusals(world: Any, case: str) -> None:
    """SUPERSEDE needs a distinct, existing, ACTIVE replacement of the same type."""
    old = world.assert_("x", type_="FACT")
    if case == "self":
        new = old
    elif case == "new_not_active":
        new = world.assert_("y")
        world.op(rq.deprecate(world.agent, new, "no"))
    elif case == "other_type":
        new = world.assert_("y", type_="PREFERENCE")
    else:
        from memroot.ledger.entries import new_uuid

        new = new_uuid()
    snap = world.snapshot()
    with pytest.raises(RuleError) as e:
        world.op(rq.supersede(world.agent, old, new, "r"))
    assert e.value.rule in (rules.LIFECYCLE, rules.REFERENCE)
    assert world.snapshot() == snap


def test_dedup_resolved_supersedes_the_merged_objects(world: Any) -> None:
    """DEDUP_RESOLVED makes each merged object SUPERSEDED by the primary, with an edge each."""
    p, m1, m2 = (world.assert_(v) for v in ("tea", "tea!", "tea."))
    world.op(rq.dedup_resolved(world.agent, p, [m1, m2], "keep-oldest"))
    for m in (m1, m2):
        o = world.get(m)
        assert (o.lifecycle_state, o.superseded_by) == (S, p)
    assert world.get(p).lifecycle_state == A
    sup = {(e.source_id, e.target_id) for e in edges_of(world.db, p) if e.type == "SUPERSEDES"}
    assert sup == {(p, m1), (p, m2)}


def test_operations_on_missing_objects_name_the_reference_rule(world: Any) -> None:
    """Mutating an object that does not exist is refused as a bad reference."""
    from memroot.ledger.entries import new_uuid

    with pytest.raises(RuleError) as e:
        world.op(rq.deprecate(world.agent, new_uuid(), "x"))
    assert e.value.rule == rules.REFERENCE
