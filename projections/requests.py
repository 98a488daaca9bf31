"""Typed constructors of RFC-0002 operation requests, so callers need not spell payloads.

    agent = Actor("agent-7", "AI_AGENT", namespace_id="alice")
    ledger.append(requests.assert_object(agent, "PREFERENCE", "OBSERVED", "USER_STATED",
                                         [event_id], "Alice takes tea without sugar"))

Each function returns an ``OpInput`` whose payload matches ``memroot.projections.ops.SCHEMAS``; the
memory hook validates it again at append, against the state. Enumerations may be given as
``memroot.ledger.vocab`` members or as their strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from memroot.ledger.entries import OpInput
from memroot.ledger.vocab import OpType

__all__ = [
    "DEFAULT_POLICY",
    "Actor",
    "archive",
    "assert_object",
    "contradiction",
    "decay",
    "dedup_resolved",
    "deprecate",
    "entity_create",
    "entity_merge",
    "grant",
    "namespace_create",
    "penalty",
    "reinforce",
    "relate",
    "revoke",
    "summary_created",
    "supersede",
    "tombstone",
    "transition",
]

DEFAULT_POLICY: Final = "memroot/1"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who records operations, in which namespace, under which policy version."""

    actor_id: str
    actor_type: str = "AI_AGENT"
    namespace_id: str = "default"
    policy_version: str = DEFAULT_POLICY


def _op(
    by: Actor,
    op_type: OpType,
    payload: dict[str, Any],
    *,
    target_id: str | None = None,
    target_type: str | None = None,
    ts: int | None = None,
    evidence_ids: Sequence[str] = (),
) -> OpInput:
    if evidence_ids:
        # The events that motivated a lifecycle change: its provenance (projections.gated).
        payload = {**payload, "evidence_ids": list(evidence_ids)}
    return OpInput(
        op_type=op_type.value,
        actor_id=by.actor_id,
        actor_type=by.actor_type,
        namespace_id=by.namespace_id,
        payload=payload,
        policy_version=by.policy_version,
        target_id=target_id,
        target_type=target_type,
        ts=ts,
    )


def assert_object(
    by: Actor,
    object_type: str,
    epistemic_type: str,
    source_type: str,
    evidence_ids: Sequence[str],
    value: str,
    *,
    confidence: float | None = None,
    salience: float = 0.5,
    object_id: str | None = None,
    structured_value: Any = None,
    valid_from: int | None = None,
    valid_to: int | None = None,
    entity_ids: Sequence[str] = (),
    condition: tuple[str, str] | None = None,
    ts: int | None = None,
) -> OpInput:
    """ASSERT a new memory object in ``by.namespace_id`` (confidence None: RFC-0003 default).

    Raises:
        ValidationError: if the envelope is malformed (the payload is checked at append).
    """
    payload: dict[str, Any] = {
        "object_type": str(object_type),
        "epistemic_type": str(epistemic_type),
        "source_type": str(source_type),
        "evidence_ids": list(evidence_ids),
        "value": value,
        "confidence": confidence,
        "salience": salience,
    }
    for name, v in (
        ("structured_value", structured_value),
        ("valid_from", valid_from),
        ("valid_to", valid_to),
    ):
        if v is not None:
            payload[name] = v
    if entity_ids:
        payload["entity_ids"] = list(entity_ids)
    if condition is not None:
        payload["condition"] = {"text": condition[0], "state": condition[1]}
    return _op(by, OpType.ASSERT, payload, target_id=object_id, ts=ts)


def deprecate(
    by: Actor,
    object_id: str,
    reason: str,
    deprecated_by: str | None = None,
    *,
    ts: int | None = None,
    evidence_ids: Sequence[str] = (),
) -> OpInput:
    """DEPRECATE an ACTIVE object."""
    return _op(
        by,
        OpType.DEPRECATE,
        {"reason": reason, "deprecated_by": deprecated_by or by.actor_id},
        target_id=object_id,
        ts=ts,
        evidence_ids=evidence_ids,
    )


def archive(
    by: Actor,
    object_id: str,
    reason: str,
    policy_ref: str,
    *,
    ts: int | None = None,
    evidence_ids: Sequence[str] = (),
) -> OpInput:
    """ARCHIVE an ACTIVE or DEPRECATED object."""
    return _op(
        by,
        OpType.ARCHIVE,
        {"reason": reason, "policy_ref": policy_ref},
        target_id=object_id,
        ts=ts,
        evidence_ids=evidence_ids,
    )


def supersede(
    by: Actor, object_id: str, new_object_id: str, reason: str, *, ts: int | None = None
) -> OpInput:
    """SUPERSEDE ``object_id`` by the ACTIVE object ``new_object_id`` of the same type."""
    return _op(
        by,
        OpType.SUPERSEDE,
        {"new_object_id": new_object_id, "reason": reason},
        target_id=object_id,
        ts=ts,
    )


def tombstone(
    by: Actor,
    event_id: str,
    reason: str,
    policy_ref: str,
    on_dependents: str | None = None,
    *,
    ts: int | None = None,
) -> OpInput:
    """TOMBSTONE an event (erases its content); say what happens to ACTIVE dependents."""
    payload = {"target_event_id": event_id, "reason": reason, "policy_ref": policy_ref}
    if on_dependents is not None:
        payload["on_dependents"] = on_dependents
    return _op(by, OpType.TOMBSTONE, payload, target_id=event_id, target_type="EVENT", ts=ts)


def transition(
    by: Actor,
    object_id: str,
    from_type: str,
    to_type: str,
    reason: str,
    evidence_ids: Sequence[str] = (),
    *,
    ts: int | None = None,
) -> OpInput:
    """EPISTEMIC_TRANSITION of an ACTIVE object (new evidence ids are added to it)."""
    return _op(
        by,
        OpType.EPISTEMIC_TRANSITION,
        {
            "from_type": str(from_type),
            "to_type": str(to_type),
            "reason": reason,
            "evidence_ids": list(evidence_ids),
        },
        target_id=object_id,
        ts=ts,
    )


def contradiction(
    by: Actor, object_id_a: str, object_id_b: str, description: str, *, ts: int | None = None
) -> OpInput:
    """CONTRADICTION_NOTED between two objects (links CONTRADICTS; resolves nothing)."""
    return _op(
        by,
        OpType.CONTRADICTION_NOTED,
        {
            "object_id_a": object_id_a,
            "object_id_b": object_id_b,
            "conflict_description": description,
        },
        ts=ts,
    )


def decay(
    by: Actor,
    object_id: str,
    decay_delta: float,
    new_salience: float,
    new_confidence: float,
    decay_profile_ref: str,
    *,
    ts: int | None = None,
    evidence_ids: Sequence[str] = (),
) -> OpInput:
    """DECAY_APPLIED: lower salience and confidence by at most ``decay_delta`` each."""
    return _op(
        by,
        OpType.DECAY_APPLIED,
        {
            "decay_delta": decay_delta,
            "new_salience": new_salience,
            "new_confidence": new_confidence,
            "decay_profile_ref": decay_profile_ref,
        },
        target_id=object_id,
        ts=ts,
        evidence_ids=evidence_ids,
    )


def reinforce(
    by: Actor,
    object_id: str,
    signal_type: str,
    delta: float,
    new_confidence: float,
    new_salience: float,
    signal_source: str,
    *,
    ts: int | None = None,
    evidence_ids: Sequence[str] = (),
) -> OpInput:
    """REINFORCE: raise confidence and salience by at most ``delta`` each."""
    return _op(
        by,
        OpType.REINFORCE,
        {
            "signal_type": signal_type,
            "delta": delta,
            "new_confidence": new_confidence,
            "new_salience": new_salience,
            "signal_source": signal_source,
        },
        target_id=object_id,
        ts=ts,
        evidence_ids=evidence_ids,
    )


def penalty(
    by: Actor,
    object_id: str,
    signal_type: str,
    delta: float,
    new_confidence: float,
    reason: str,
    *,
    ts: int | None = None,
    evidence_ids: Sequence[str] = (),
) -> OpInput:
    """PENALTY: lower confidence by at most ``delta``."""
    return _op(
        by,
        OpType.PENALTY,
        {
            "signal_type": signal_type,
            "delta": delta,
            "new_confidence": new_confidence,
            "reason": reason,
        },
        target_id=object_id,
        ts=ts,
        evidence_ids=evidence_ids,
    )


def relate(
    by: Actor,
    edge_type: str,
    source_id: str,
    target_id: str,
    confidence: float = 1.0,
    relation_label: str | None = None,
    *,
    ts: int | None = None,
) -> OpInput:
    """RELATE two nodes with a SUPPORTS, RELATES_TO (labelled) or ABOUT_ENTITY edge."""
    payload: dict[str, Any] = {
        "edge_type": str(edge_type),
        "source_id": source_id,
        "target_id": target_id,
        "confidence": confidence,
    }
    if relation_label is not None:
        payload["relation_label"] = relation_label
    return _op(by, OpType.RELATE, payload, ts=ts)


def entity_create(
    by: Actor,
    entity_type: str,
    canonical_name: str,
    aliases: Sequence[str] = (),
    entity_id: str | None = None,
    *,
    ts: int | None = None,
) -> OpInput:
    """ENTITY_CREATE in ``by.namespace_id``."""
    return _op(
        by,
        OpType.ENTITY_CREATE,
        {
            "entity_type": str(entity_type),
            "canonical_name": canonical_name,
            "aliases": list(aliases),
        },
        target_id=entity_id,
        target_type=None,
        ts=ts,
    )


def entity_merge(
    by: Actor,
    primary_entity_id: str,
    merged_entity_id: str,
    alias_list: Sequence[str] = (),
    *,
    ts: int | None = None,
) -> OpInput:
    """ENTITY_MERGE ``merged_entity_id`` into ``primary_entity_id`` (aliases carried over)."""
    return _op(
        by,
        OpType.ENTITY_MERGE,
        {
            "primary_entity_id": primary_entity_id,
            "merged_entity_id": merged_entity_id,
            "alias_list": list(alias_list),
        },
        ts=ts,
    )


def summary_created(
    by: Actor,
    summary_id: str,
    object_ids: Sequence[str],
    time_window: tuple[int, int],
    summary_type: str,
    *,
    ts: int | None = None,
) -> OpInput:
    """SUMMARY_CREATED: link an ACTIVE SUMMARY object to the objects it summarises."""
    return _op(
        by,
        OpType.SUMMARY_CREATED,
        {
            "object_ids_summarised": list(object_ids),
            "time_window": {"from": time_window[0], "to": time_window[1]},
            "summary_type": summary_type,
        },
        target_id=summary_id,
        ts=ts,
    )


def dedup_resolved(
    by: Actor,
    primary_id: str,
    merged_ids: Sequence[str],
    resolution_strategy: str,
    *,
    ts: int | None = None,
) -> OpInput:
    """DEDUP_RESOLVED: the merged objects become SUPERSEDED by the primary."""
    return _op(
        by,
        OpType.DEDUP_RESOLVED,
        {
            "primary_id": primary_id,
            "merged_ids": list(merged_ids),
            "resolution_strategy": resolution_strategy,
        },
        ts=ts,
    )


def namespace_create(by: Actor, namespace_type: str, *, ts: int | None = None) -> OpInput:
    """NAMESPACE_CREATE ``by.namespace_id`` (a policy; ``by`` becomes its first ADMIN)."""
    return _op(by, OpType.NAMESPACE_CREATE, {"namespace_type": str(namespace_type)}, ts=ts)


def grant(by: Actor, actor_id: str, permission: str, *, ts: int | None = None) -> OpInput:
    """GRANT ``permission`` on ``by.namespace_id`` to ``actor_id`` (``by`` needs ADMIN)."""
    return _op(by, OpType.GRANT, {"actor_id": actor_id, "permission": str(permission)}, ts=ts)


def revoke(by: Actor, actor_id: str, permission: str, *, ts: int | None = None) -> OpInput:
    """REVOKE ``permission`` on ``by.namespace_id`` from ``actor_id`` (``by`` needs ADMIN)."""
    return _op(by, OpType.REVOKE, {"actor_id": actor_id, "permission": str(permission)}, ts=ts)
