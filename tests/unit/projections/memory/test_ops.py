"""RFC-0002 payload schemas: every required field, enumeration and kind is checked."""

from __future__ import annotations

from typing import Any

import pytest

from memroot.ledger.entries import OpInput
from memroot.ledger.errors import ValidationError
from memroot.projections.ops import SCHEMAS, validate_payload

U1, U2 = "0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6b", "0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6c"

SAMPLES: dict[str, dict[str, Any]] = {
    "ASSERT": {
        "object_type": "FACT",
        "epistemic_type": "OBSERVED",
        "source_type": "USER_STATED",
        "evidence_ids": [U1],
        "value": "v",
        "confidence": None,
        "salience": 0.5,
    },
    "DEPRECATE": {"reason": "r", "deprecated_by": "a"},
    "SUPERSEDE": {"new_object_id": U1, "reason": "r"},
    "ARCHIVE": {"reason": "r", "policy_ref": "p"},
    "TOMBSTONE": {"target_event_id": U1, "reason": "r", "policy_ref": "p"},
    "EPISTEMIC_TRANSITION": {
        "from_type": "UNVERIFIED",
        "to_type": "ASSERTED",
        "reason": "r",
        "evidence_ids": [],
    },
    "CONTRADICTION_NOTED": {"object_id_a": U1, "object_id_b": U2, "conflict_description": "d"},
    "DECAY_APPLIED": {
        "decay_delta": 0.1,
        "new_salience": 0.4,
        "new_confidence": 0.8,
        "decay_profile_ref": "exp",
    },
    "REINFORCE": {
        "signal_type": "use",
        "delta": 0.1,
        "new_confidence": 0.9,
        "new_salience": 0.6,
        "signal_source": "retrieval",
    },
    "PENALTY": {"signal_type": "wrong", "delta": 0.1, "new_confidence": 0.7, "reason": "r"},
    "RELATE": {"edge_type": "SUPPORTS", "source_id": U1, "target_id": U2, "confidence": 0.5},
    "ENTITY_CREATE": {"entity_type": "PERSON", "canonical_name": "Alice", "aliases": []},
    "ENTITY_MERGE": {"primary_entity_id": U1, "merged_entity_id": U2, "alias_list": []},
    "SUMMARY_CREATED": {
        "object_ids_summarised": [U1],
        "time_window": {"from": 1, "to": 2},
        "summary_type": "daily",
    },
    "DEDUP_RESOLVED": {"primary_id": U1, "merged_ids": [U2], "resolution_strategy": "keep"},
    "NAMESPACE_CREATE": {"namespace_type": "PERSONAL"},
    "GRANT": {"actor_id": "bob", "permission": "READ"},
    "REVOKE": {"actor_id": "bob", "permission": "READ"},
    "FALSIFY": {"reason": "r", "evidence_ids": [U1]},
    "MARK_STALE": {"reason": "r"},
    "RESTORE": {"reason": "r"},
    "CASCADE": {
        "max_depth": 1,
        "max_items": 1,
        "kinds": ["memory_object"],
        "touched": [],
        "beyond": {"count": 0, "digest": "00", "items": []},
        "resnapshots": [],
    },
}

# A wrong value for each field kind (with the kind's own type wrong or out of range).
BAD_BY_KIND: dict[str, list[Any]] = {
    "text": ["", 3, "x" * 300_000],
    "name": ["", 3, "x" * 5_000, "a\nb", "\x1b[2J"],
    "names": ["a", [1], [""], ["ok", "a\rb"]],
    "uuid": ["abc", 1, U1.upper()],
    "uuids": ["abc", ["abc"], [U1, U1]],
    "enum": ["nope", 1],
    "unit": [1.5, -0.01, "0.5", True, float("inf")],
    "unit?": [1.5, "x"],
    "nonneg": [-1, "1", float("nan")],
    "texts": ["a", [1], [""]],
    "ts": [-1, 1.5, "1"],
    "json": [b"bytes", {"a": float("nan")}, {1: 2}],
    "condition": ["x", {"state": "TRUE"}, {"text": "t", "state": "MAYBE"}, {"text": "t", "x": 1}],
    "window": [{"from": 2, "to": 1}, {"from": 1}, [1, 2]],
    "imported": [
        "x",
        {"branch": "b", "object_id": U1},
        {"branch": "", "object_id": U1, "asserted_by": "a"},
        {"branch": "b", "object_id": "nope", "asserted_by": "a"},
    ],
}


def test_every_operation_has_a_sample() -> None:
    """The samples cover every schema, and each sample is valid."""
    assert set(SAMPLES) == {str(k) for k in SCHEMAS}
    for op, payload in SAMPLES.items():
        validate_payload(op, payload)


@pytest.mark.parametrize(
    ("op", "name"),
    [(str(op), f.name) for op, fields in SCHEMAS.items() for f in fields if f.required],
)
def test_missing_required_payload_field_is_named(op: str, name: str) -> None:
    """Every RFC-0002 payload field of every operation is required; the error names it."""
    payload = dict(SAMPLES[op])
    del payload[name]
    with pytest.raises(ValidationError) as e:
        validate_payload(op, payload)
    assert e.value.field == f"payload.{name}"
    assert op in str(e.value) and "required" in str(e.value)


@pytest.mark.parametrize(
    ("op", "name", "kind", "bad"),
    [
        (str(op), f.name, f.kind, bad)
        for op, fields in SCHEMAS.items()
        for f in fields
        for bad in BAD_BY_KIND[f.kind]
    ],
)
def test_bad_payload_values_are_refused_by_field(op: str, name: str, kind: str, bad: Any) -> None:
    """Wrong types, values outside enumerations and out-of-range numbers name the field."""
    payload = {**SAMPLES[op], name: bad}
    with pytest.raises(ValidationError) as e:
        validate_payload(op, payload)
    field = e.value.field or ""
    assert field == f"payload.{name}" or field.startswith(f"payload.{name}["), kind


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_unknown_payload_field_is_refused(op: str) -> None:
    """A typo in a payload is refused rather than silently ignored."""
    with pytest.raises(ValidationError) as e:
        validate_payload(op, {**SAMPLES[op], "confidnce": 0.5})
    assert e.value.field == "payload.confidnce"


def test_assert_confidence_key_is_required_but_may_be_null() -> None:
    """ASSERT must state confidence; null asks for the RFC-0003 default."""
    assert validate_payload("ASSERT", SAMPLES["ASSERT"])["confidence"] is None
    assert validate_payload("ASSERT", {**SAMPLES["ASSERT"], "confidence": 1})["confidence"] == 1.0


@pytest.mark.parametrize(
    ("op", "name", "value"),
    [
        (str(op), f.name, str(v))
        for op, fields in SCHEMAS.items()
        for f in fields
        if f.kind == "enum"
        for v in f.arg
    ],
)
def test_enumerations_accept_each_of_their_values(op: str, name: str, value: str) -> None:
    """Every member of each enumeration a payload field names is accepted."""
    assert validate_payload(op, {**SAMPLES[op], name: value})[name] == value


def test_malformed_operation_writes_nothing(world: Any) -> None:
    """A payload the schema refuses leaves the ledger and the derived state as they were."""
    before = world.snapshot()
    bad = OpInput(
        op_type="ASSERT",
        actor_id="a",
        actor_type="AI_AGENT",
        namespace_id="ns",
        payload={**SAMPLES["ASSERT"], "salience": 7},
        policy_version="p",
    )
    with pytest.raises(ValidationError) as e:
        world.append(bad)
    assert e.value.field == "payload.salience"
    assert world.snapshot() == before
