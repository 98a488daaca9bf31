"""The memory model's public API in one place (RFC-0001/0002/0003/0004 derived from the ledger).

    from memroot.projections.memory import MemoryHook, Query, query, why, state_digest

- Writing: install ``MemoryHook`` on a ``Ledger``; every ``append`` of an event or RFC-0002
  operation is then validated and folded into the derived tables in the same transaction.
- Reading: ``query`` / ``Query`` / ``Result``, ``get_object``, ``object_history``,
  ``get_entity``, ``resolve_entity``, ``edges_of``; all take ``as_of``. ``why`` for an object's
  proven history. ``sync`` folds entries appended without the hook.
- Cache maintenance: ``rebuild`` (drop and replay), ``state_digest`` (canonical digest of the
  derived state, also as of an earlier entry), ``MemoryReplayCheck`` (verifier step 9).
- Rules: ``RuleError`` / ``PermissionRefused`` (the refusals), ``starting_confidence``,
  ``check_transition``, ``check_lifecycle``, ``validate_payload``.
"""

from __future__ import annotations

from memroot.projections.digest import Difference, first_difference, state_digest
from memroot.projections.epistemic import RetrievalMode, check_transition, starting_confidence
from memroot.projections.hook import MemoryHook, sync
from memroot.projections.lifecycle import check_lifecycle
from memroot.projections.model import Edge, Entity, EventRef, Grant, MemoryObject, Namespace
from memroot.projections.ops import validate_payload
from memroot.projections.query import (
    Query,
    Result,
    edges_of,
    entity_members,
    get_entity,
    get_object,
    object_history,
    query,
    resolve_entity,
)
from memroot.projections.replay import MemoryReplayCheck, RebuildReport, rebuild, replay
from memroot.projections.rules import PermissionRefused, RuleError
from memroot.projections.why import EvidenceStep, OperationStep, Why, why

__all__ = [
    "Difference",
    "Edge",
    "Entity",
    "EventRef",
    "EvidenceStep",
    "Grant",
    "MemoryHook",
    "MemoryObject",
    "MemoryReplayCheck",
    "Namespace",
    "OperationStep",
    "PermissionRefused",
    "Query",
    "RebuildReport",
    "Result",
    "RetrievalMode",
    "RuleError",
    "Why",
    "check_lifecycle",
    "check_transition",
    "edges_of",
    "entity_members",
    "first_difference",
    "get_entity",
    "get_object",
    "object_history",
    "query",
    "rebuild",
    "replay",
    "resolve_entity",
    "starting_confidence",
    "state_digest",
    "sync",
    "validate_payload",
    "why",
]
