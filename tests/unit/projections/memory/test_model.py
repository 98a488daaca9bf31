"""RFC-0001 values: round trip through serialisation and schema validation of every field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger.entries import new_uuid
from memroot.ledger.errors import ValidationError
from memroot.ledger.vocab import (
    EdgeType,
    EntityType,
    EpistemicType,
    LifecycleState,
    MemoryType,
    SourceType,
)
from memroot.projections import requests as rq
from memroot.projections.model import Edge, Entity, MemoryObject
from memroot.projections.query import edges_of, get_entity

OBJECT_REQUIRED = (
    "id",
    "type",
    "version",
    "epistemic_type",
    "source_type",
    "evidence_ids",
    "asserted_by",
    "valid_from",
    "created_at",
    "last_modified_at",
    "lifecycle_state",
    "confidence",
    "salience",
    "namespace_id",
    "value",
)
OBJECT_ENUMS = {
    "type": MemoryType,
    "epistemic_type": EpistemicType,
    "source_type": SourceType,
    "lifecycle_state": LifecycleState,
}
EDGE_REQUIRED = (
    "id",
    "type",
    "source_id",
    "target_id",
    "created_at",
    "created_by",
    "confidence",
    "valid_from",
)
ENTITY_REQUIRED = (
    "id",
    "type",
    "canonical_name",
    "aliases",
    "namespace_id",
    "created_at",
    "last_seen_at",
)


def sample_object(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": new_uuid(),
        "type": "FACT",
        "version": 1,
        "epistemic_type": "OBSERVED",
        "source_type": "USER_STATED",
        "evidence_ids": [new_uuid()],
        "asserted_by": "agent",
        "valid_from": 10,
        "valid_to": None,
        "created_at": 10,
        "last_modified_at": 10,
        "lifecycle_state": "ACTIVE",
        "superseded_by": None,
        "confidence": 0.9,
        "salience": 0.5,
        "namespace_id": "ns",
        "value": "v",
        "structured_value": None,
    }
    d.update(over)
    return d


def roundtrip(value: Any) -> Any:
    return json.loads(json.dumps(value.to_dict()))


def test_events_to_objects_serialise_and_deserialise_identically(world: Any) -> None:
    """Objects derived from events survive serialise -> deserialise as identical values."""
    ids = []
    for t in MemoryType:
        ids.append(world.assert_(f"a {t}", type_=t, structured_value={"k": [1, "x", None]}))
    ids.append(
        world.assert_(
            "if it rains",
            epistemic="CONDITIONAL",
            confidence=0.4,
            condition=("it rains", "TRUE"),
            valid_to=2_000_000_000_000_000,
        )
    )
    old = world.assert_("old", type_="FACT")
    new = world.assert_("new", type_="FACT")
    world.op(rq.supersede(world.agent, old, new, "newer"))
    ids += [old, new]
    for object_id in ids:
        obj = world.get(object_id)
        again = MemoryObject.from_dict(roundtrip(obj))
        assert again == obj
        assert again.to_dict() == obj.to_dict()
        for edge in edges_of(world.db, object_id):
            assert Edge.from_dict(roundtrip(edge)) == edge
    assert world.get(old).superseded_by == new


def test_entities_round_trip(world: Any) -> None:
    """Entities (with aliases, and merged ones) serialise and deserialise identically."""
    a = world.op(rq.entity_create(world.agent, "PERSON", "Alice", ["Al", "A."])).id
    b = world.op(rq.entity_create(world.agent, "PERSON", "Alice Smith", ["Ali"])).id
    world.op(rq.entity_merge(world.agent, a, b, ["Ms Smith"]))
    for entity_id in (a, b):
        ent = get_entity(world.db, entity_id)
        assert Entity.from_dict(roundtrip(ent)) == ent


@settings(max_examples=60, deadline=None)
@given(
    type_=st.sampled_from(list(MemoryType)),
    epi=st.sampled_from(list(EpistemicType)),
    src=st.sampled_from(list(SourceType)),
    conf=st.floats(0, 1),
    sal=st.floats(0, 1),
    version=st.integers(1, 10_000),
    value=st.text(max_size=50),
    structured=st.recursive(
        st.none() | st.integers(-10, 10) | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
        max_leaves=8,
    ),
)
def test_any_valid_object_round_trips(
    type_: str,
    epi: str,
    src: str,
    conf: float,
    sal: float,
    version: int,
    value: str,
    structured: Any,
) -> None:
    """Every schema-valid object survives to_dict -> JSON -> from_dict unchanged."""
    obj = MemoryObject.from_dict(
        sample_object(
            type=type_,
            epistemic_type=epi,
            source_type=src,
            confidence=conf,
            salience=sal,
            version=version,
            value=value,
            structured_value=structured,
        )
    )
    assert MemoryObject.from_dict(roundtrip(obj)) == obj


@pytest.mark.parametrize("name", OBJECT_REQUIRED)
def test_object_missing_required_field_is_named(name: str) -> None:
    """Every RFC-0001 required field is required; the error names it."""
    d = sample_object()
    del d[name]
    with pytest.raises(ValidationError) as e:
        MemoryObject.from_dict(d)
    assert e.value.field == name


@pytest.mark.parametrize("name", sorted(OBJECT_ENUMS))
def test_object_enumerations_accept_every_value_and_nothing_else(name: str) -> None:
    """Each enumerated field accepts exactly its enumeration's values."""
    for member in OBJECT_ENUMS[name]:
        over: dict[str, Any] = {name: member.value}
        if name == "lifecycle_state" and member == LifecycleState.SUPERSEDED:
            over["superseded_by"] = new_uuid()
        assert getattr(MemoryObject.from_dict(sample_object(**over)), name) == member.value
    for bad in ("", "fact", "UNKNOWN", 3):
        with pytest.raises(ValidationError) as e:
            MemoryObject.from_dict(sample_object(**{name: bad}))
        assert e.value.field == name


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"confidence": 1.01}, "confidence"),
        ({"confidence": -0.1}, "confidence"),
        ({"confidence": float("nan")}, "confidence"),
        ({"confidence": True}, "confidence"),
        ({"salience": 2}, "salience"),
        ({"salience": "0.5"}, "salience"),
        ({"version": 0}, "version"),
        ({"version": 1.0}, "version"),
        ({"evidence_ids": []}, "evidence_ids"),
        ({"evidence_ids": ["not-a-uuid"]}, "evidence_ids[0]"),
        ({"evidence_ids": "abc"}, "evidence_ids"),
        ({"id": "ABC"}, "id"),
        ({"valid_from": -1}, "valid_from"),
        ({"valid_to": 5}, "valid_to"),
        ({"last_modified_at": 5}, "last_modified_at"),
        ({"asserted_by": ""}, "asserted_by"),
        ({"value": 7}, "value"),
        ({"lifecycle_state": "SUPERSEDED"}, "superseded_by"),
        ({"superseded_by": "0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6b"}, "superseded_by"),
        ({"condition": "x"}, "condition_state"),
        ({"condition": "x", "condition_state": "MAYBE"}, "condition_state"),
        ({"state": "dead"}, "state"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_object_bad_values_are_refused_by_field(over: dict[str, Any], field: str) -> None:
    """Out-of-range scores, bad ids, inconsistent fields and unknown keys name the field."""
    with pytest.raises(ValidationError) as e:
        MemoryObject.from_dict(sample_object(**over))
    assert e.value.field == field


def sample_edge(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": new_uuid(),
        "type": "SUPPORTS",
        "source_id": new_uuid(),
        "target_id": new_uuid(),
        "created_at": 1,
        "created_by": "a",
        "confidence": 0.5,
        "valid_from": 1,
    }
    d.update(over)
    return d


@pytest.mark.parametrize("name", EDGE_REQUIRED)
def test_edge_missing_required_field_is_named(name: str) -> None:
    """Every RFC-0001 section 9 edge field is required; the error names it."""
    d = sample_edge()
    del d[name]
    with pytest.raises(ValidationError) as e:
        Edge.from_dict(d)
    assert e.value.field == name


def test_edge_types_and_relation_label() -> None:
    """Every edge type is accepted; RELATES_TO needs a relation_label; others are refused."""
    for t in EdgeType:
        label = "near" if t == EdgeType.RELATES_TO else None
        assert Edge.from_dict(sample_edge(type=t.value, relation_label=label)).type == t
    with pytest.raises(ValidationError) as e:
        Edge.from_dict(sample_edge(type="RELATES_TO"))
    assert e.value.field == "relation_label"
    with pytest.raises(ValidationError) as e:
        Edge.from_dict(sample_edge(type="LIKES"))
    assert e.value.field == "type"


def sample_entity(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": new_uuid(),
        "type": "PERSON",
        "canonical_name": "Alice",
        "aliases": ["Al"],
        "namespace_id": "ns",
        "created_at": 1,
        "last_seen_at": 2,
    }
    d.update(over)
    return d


@pytest.mark.parametrize("name", ENTITY_REQUIRED)
def test_entity_missing_required_field_is_named(name: str) -> None:
    """Every RFC-0001 section 10 entity field is required; the error names it."""
    d = sample_entity()
    del d[name]
    with pytest.raises(ValidationError) as e:
        Entity.from_dict(d)
    assert e.value.field == name


def test_entity_types() -> None:
    """Entity types are exactly RFC-0001's seven; aliases must be strings."""
    for t in EntityType:
        assert Entity.from_dict(sample_entity(type=t.value)).type == t
    for over, field in (
        ({"type": "ANIMAL"}, "type"),
        ({"aliases": [1]}, "aliases"),
        ({"last_seen_at": 0}, "last_seen_at"),
    ):
        with pytest.raises(ValidationError) as e:
            Entity.from_dict(sample_entity(**over))
        assert e.value.field == field
