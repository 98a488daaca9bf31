"""The memory model's reference rules: evidence, identity, erasure, entities, graph, batches."""

from __future__ import annotations

from typing import Any

import pytest

from memroot.ledger.entries import EventInput, OpInput, _library_op, new_uuid
from memroot.ledger.errors import RefusedError, ValidationError
from memroot.projections import requests as rq
from memroot.projections import rules
from memroot.projections.query import Query, edges_of, entity_members, get_entity, query
from memroot.projections.rules import RuleError


def test_evidence_must_exist(world: Any) -> None:
    """An ASSERT citing an unknown event is refused and writes nothing."""
    snap = world.snapshot()
    with pytest.raises(RuleError) as e:
        world.assert_(evidence=[new_uuid()])
    assert e.value.rule == rules.EVIDENCE
    assert world.snapshot() == snap


def test_object_ids_are_never_reused(world: Any) -> None:
    """An ASSERT or ENTITY_CREATE with an id already used by an object or entity is refused."""
    oid = world.assert_()
    with pytest.raises(RuleError) as e:
        world.assert_(object_id=oid)
    assert e.value.rule == rules.IDENTITY
    with pytest.raises(RuleError) as e:
        world.op(rq.entity_create(world.agent, "PERSON", "X", entity_id=oid))
    assert e.value.rule == rules.IDENTITY


def test_assert_records_every_rfc_0001_field(world: Any) -> None:
    """A new object carries asserter, times, namespace, value, evidence and DERIVED_FROM edges."""
    ev1, ev2 = world.event("a"), world.event("b")
    ts = world.tick()
    op = rq.assert_object(
        world.agent,
        "DECISION",
        "ASSERTED",
        "USER_STATED",
        [ev1, ev2],
        "use Postgres",
        salience=0.8,
        structured_value={"db": "pg"},
        valid_from=ts - 5,
        valid_to=ts + 5,
        ts=ts,
    )
    oid = world.op(op).id
    o = world.get(oid)
    assert (o.type, o.version, o.asserted_by, o.namespace_id) == ("DECISION", 1, "agent-7", "ns")
    assert (o.created_at, o.last_modified_at, o.valid_from, o.valid_to) == (ts, ts, ts - 5, ts + 5)
    assert o.evidence_ids == (ev1, ev2) and o.structured_value == {"db": "pg"}
    assert {(e.type, e.target_id) for e in edges_of(world.db, oid)} == {
        ("DERIVED_FROM", ev1),
        ("DERIVED_FROM", ev2),
    }


def test_events_of_the_same_batch_can_be_evidence(world: Any) -> None:
    """An event and the ASSERT citing it can land in one batch."""
    ev_id = new_uuid()
    event = EventInput(
        stream="s",
        actor_id="u",
        actor_type="HUMAN_USER",
        role="USER",
        content="hello",
        namespace_id="ns",
        id=ev_id,
    )
    op = rq.assert_object(world.agent, "FACT", "OBSERVED", "USER_STATED", [ev_id], "greeted")
    out = world.ledger.append_batch([event, op])
    assert world.get(out[1].id).evidence_ids == (ev_id,)


def test_a_refused_entry_rolls_back_its_whole_batch(world: Any) -> None:
    """One refused operation in a batch leaves the ledger and the derived state untouched."""
    snap = world.snapshot()
    good = EventInput(
        stream="s",
        actor_id="u",
        actor_type="HUMAN_USER",
        role="USER",
        content="x",
        namespace_id="ns",
    )
    bad = rq.deprecate(world.agent, new_uuid(), "no such object")
    with pytest.raises(RuleError):
        world.ledger.append_batch([good, bad])
    assert world.snapshot() == snap
    world.ledger.append_batch([good])  # the store is still consistent afterwards
    assert world.snapshot()[0] == snap[0] + 1


# -- erasure --------------------------------------------------------------------------------


def test_tombstone_of_active_evidence_needs_on_dependents(world: Any) -> None:
    """Erasing evidence of ACTIVE objects is refused unless the request says what happens."""
    ev = world.event("my card is 4111")
    oid = world.assert_(evidence=[ev])
    snap = world.snapshot()
    with pytest.raises(RuleError) as e:
        world.op(rq.tombstone(world.agent, ev, "gdpr", "art-17"))
    assert e.value.rule == rules.TOMBSTONE_DEPENDENTS and oid in str(e.value)
    assert world.snapshot() == snap
    seq = world.ledger.find_event(ev)[1]
    assert world.ledger.content(seq) == "my card is 4111"


@pytest.mark.parametrize(("mode", "state"), [("DEPRECATE", "DEPRECATED"), ("ARCHIVE", "ARCHIVED")])
def test_tombstone_moves_dependents(world: Any, mode: str, state: str) -> None:
    """on_dependents DEPRECATE/ARCHIVE moves every ACTIVE dependent and erases the content."""
    ev = world.event("secret")
    deps = [world.assert_(f"v{i}", evidence=[ev]) for i in range(3)]
    other = world.assert_("unrelated")
    world.op(rq.tombstone(world.agent, ev, "gdpr", "art-17", on_dependents=mode))
    for oid in deps:
        o = world.get(oid)
        assert (o.lifecycle_state, o.version) == (state, 2)
    assert world.get(other).lifecycle_state == "ACTIVE"
    seq = world.ledger.find_event(ev)[1]
    assert world.ledger.content(seq) is None
    erased = world.db.execute("SELECT erased_by FROM mem_events WHERE id = ?", (ev,)).fetchone()
    assert erased[0] == world.ledger.size() - 1


def test_tombstone_keep_only_when_other_evidence_remains(world: Any) -> None:
    """on_dependents KEEP is refused if an ACTIVE object would be left without evidence."""
    ev1, ev2 = world.event("a"), world.event("b")
    both = world.assert_("both", evidence=[ev1, ev2])
    only = world.assert_("only", evidence=[ev1])
    with pytest.raises(RuleError) as e:
        world.op(rq.tombstone(world.agent, ev1, "gdpr", "p", on_dependents="KEEP"))
    assert e.value.rule == rules.TOMBSTONE_DEPENDENTS and only in str(e.value)
    world.op(rq.deprecate(world.agent, only, "going"))
    world.op(rq.tombstone(world.agent, ev1, "gdpr", "p", on_dependents="KEEP"))
    assert world.get(both).lifecycle_state == "ACTIVE"
    flags = {r.object.id: r.flags for r in query(world.db, Query())}
    assert "EVIDENCE_ERASED" in flags[both]
    with pytest.raises(RuleError) as e2:
        world.assert_(evidence=[ev1])
    assert e2.value.rule == rules.EVIDENCE and "erased" in str(e2.value)


def test_tombstone_of_evidence_of_inactive_objects_needs_nothing(world: Any) -> None:
    """Only ACTIVE dependents block erasure."""
    ev = world.event()
    oid = world.assert_(evidence=[ev])
    world.op(rq.deprecate(world.agent, oid, "old"))
    world.op(rq.tombstone(world.agent, ev, "gdpr", "p"))
    assert world.get(oid).version == 2


# -- entities ---------------------------------------------------------------------------------


def test_entity_merge_carries_aliases_and_resolves_references(world: Any) -> None:
    """ENTITY_MERGE folds names into the primary; references to the merged one resolve."""
    a = world.op(rq.entity_create(world.agent, "PERSON", "Alice", ["Al"])).id
    b = world.op(rq.entity_create(world.agent, "PERSON", "Alice Smith", ["Ali", "Al"])).id
    about_b = world.assert_("likes tea", entity_ids=[b])
    world.op(rq.entity_merge(world.agent, a, b, ["Ms Smith", "Alice"]))
    primary = get_entity(world.db, a)
    assert primary.aliases == ("Al", "Alice Smith", "Ali", "Ms Smith")
    assert get_entity(world.db, b).merged_into == a
    after = world.assert_("likes cake", entity_ids=[b])  # a reference to b resolves to a
    assert [
        (e.type, e.target_id) for e in edges_of(world.db, after) if e.type == "ABOUT_ENTITY"
    ] == [("ABOUT_ENTITY", a)]
    for name in (a, b):
        found = {r.object.id for r in query(world.db, Query(entity=name))}
        assert found == {about_b, after}
    c = world.op(rq.entity_create(world.agent, "PERSON", "Boss")).id
    world.op(rq.entity_merge(world.agent, c, a))
    assert set(entity_members(world.db, b)) == {a, b, c}


@pytest.mark.parametrize("case", ["self", "merged_primary", "merged_again", "missing"])
def test_entity_merge_refusals(world: Any, case: str) -> None:
    """Merging an entity into itself, into or from a merged entity, or a missing one fails."""
    a = world.op(rq.entity_create(world.agent, "PERSON", "A")).id
    b = world.op(rq.entity_create(world.agent, "PERSON", "B")).id
    c = world.op(rq.entity_create(world.agent, "PERSON", "C")).id
    world.op(rq.entity_merge(world.agent, a, b))
    pair = {
        "self": (c, c),
        "merged_primary": (b, c),
        "merged_again": (c, b),
        "missing": (c, new_uuid()),
    }[case]
    snap = world.snapshot()
    with pytest.raises(RuleError) as e:
        world.op(rq.entity_merge(world.agent, *pair))
    assert e.value.rule in (rules.ENTITY, rules.REFERENCE)
    assert world.snapshot() == snap


def test_references_raise_last_seen_at(world: Any) -> None:
    """An object about an entity moves the entity's last_seen_at to the operation's time."""
    ent = world.op(rq.entity_create(world.agent, "PLACE", "Paris")).id
    created = get_entity(world.db, ent).last_seen_at
    world.assert_("Paris is nice", entity_ids=[ent])
    assert get_entity(world.db, ent).last_seen_at > created


# -- graph ------------------------------------------------------------------------------------


@pytest.mark.parametrize("edge_type", ["DERIVED_FROM", "SUPERSEDES", "CONTRADICTS"])
def test_relate_refuses_edges_owned_by_other_operations(world: Any, edge_type: str) -> None:
    """DERIVED_FROM, SUPERSEDES and CONTRADICTS come from their own operations, not RELATE."""
    a, b = world.assert_("a"), world.assert_("b")
    with pytest.raises(RuleError) as e:
        world.op(rq.relate(world.agent, edge_type, a, b))
    assert e.value.rule == rules.GRAPH


def test_relate_edges(world: Any) -> None:
    """SUPPORTS links objects, ABOUT_ENTITY object to entity, RELATES_TO carries a label."""
    a, b = world.assert_("a"), world.assert_("b")
    ent = world.op(rq.entity_create(world.agent, "CONCEPT", "tea")).id
    world.op(rq.relate(world.agent, "SUPPORTS", a, b, 0.7))
    world.op(rq.relate(world.agent, "ABOUT_ENTITY", a, ent))
    world.op(rq.relate(world.agent, "RELATES_TO", ent, b, 0.4, "mentioned_in"))
    got = {
        (e.type, e.source_id, e.target_id, e.confidence, e.relation_label)
        for e in edges_of(world.db, a) + edges_of(world.db, b)
    }
    assert ("SUPPORTS", a, b, 0.7, None) in got
    assert ("ABOUT_ENTITY", a, ent, 1.0, None) in got
    assert ("RELATES_TO", ent, b, 0.4, "mentioned_in") in got
    with pytest.raises(ValidationError):
        world.op(rq.relate(world.agent, "RELATES_TO", a, b))
    with pytest.raises(RuleError):
        world.op(rq.relate(world.agent, "SUPPORTS", a, a))
    with pytest.raises(RuleError):
        world.op(rq.relate(world.agent, "ABOUT_ENTITY", a, b))


def test_summary_created_links_a_summary_to_what_it_summarises(world: Any) -> None:
    """SUMMARY_CREATED needs an ACTIVE SUMMARY target and links it to each summarised object."""
    a, b = world.assert_("a"), world.assert_("b")
    summary = world.assert_("a and b", type_="SUMMARY")
    world.op(rq.summary_created(world.agent, summary, [a, b], (0, 10), "daily"))
    assert {
        (e.relation_label, e.target_id)
        for e in edges_of(world.db, summary)
        if e.type == "RELATES_TO"
    } == {("SUMMARISES", a), ("SUMMARISES", b)}
    with pytest.raises(RuleError) as e:
        world.op(rq.summary_created(world.agent, a, [b], (0, 10), "daily"))
    assert e.value.rule == rules.REFERENCE


def test_operations_the_memory_model_does_not_own_pass_through(world: Any) -> None:
    """INTEGRITY_CHECK and other layers' operations are recorded without memory validation."""
    snap = world.snapshot()
    world.op(
        _library_op(
            OpInput(
                op_type="INTEGRITY_CHECK",
                actor_id="memroot",
                actor_type="SYSTEM_PROCESS",
                namespace_id="system",
                payload={"anything": [1, 2]},
                policy_version="p",
                ts=world.tick(),  # World.append would copy the op (dropping the library mark)
            )
        )
    )
    assert world.snapshot()[1:] == snap[1:]


def test_target_type_must_match_the_operation(world: Any) -> None:
    """A target_type that names the wrong kind of thing is refused."""
    oid = world.assert_()
    op = OpInput(
        op_type="DEPRECATE",
        actor_id="a",
        actor_type="AI_AGENT",
        namespace_id="ns",
        payload={"reason": "r", "deprecated_by": "a"},
        policy_version="p",
        target_id=oid,
        target_type="ENTITY",
    )
    with pytest.raises(ValidationError) as e:
        world.op(op)
    assert e.value.field == "target_type"
    with pytest.raises(RefusedError):
        world.op(
            OpInput(
                op_type="DEPRECATE",
                actor_id="a",
                actor_type="AI_AGENT",
                namespace_id="ns",
                payload={"reason": "r", "deprecated_by": "a"},
                policy_version="p",
            )
        )


def test_derived_ids_are_uuidv8_of_the_operation_id() -> None:
    """Edge ids are SHA-256("memroot/derived-id/v1" 0x00 "<op id>/<n>") as a UUIDv8."""
    import uuid

    from memroot.ledger.hashing import domain_hash
    from memroot.projections.engine import derived_id

    for op_id, n in (("0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6b", 0), (new_uuid(), 7)):
        raw = bytearray(domain_hash("memroot/derived-id/v1", f"{op_id}/{n}".encode())[:16])
        raw[6] = (raw[6] & 0x0F) | 0x80
        raw[8] = (raw[8] & 0x3F) | 0x80
        expected = uuid.UUID(bytes=bytes(raw))
        got = uuid.UUID(derived_id(op_id, n))
        assert got == expected and got.version == 8 and got.variant == uuid.RFC_4122
        assert str(got) == derived_id(op_id, n)  # canonical lowercase text
