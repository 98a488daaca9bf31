"""What an operation handler is handed: the ``Op`` it folds and the engine's ``Rules``.

The engine (``memroot.projections.engine``) dispatches each operation entry to a handler,
``handler(engine, op)``; the handlers of the state operations (``memroot.projections.states``)
and the gated run of the lifecycle changes (``memroot.projections.gated``) live in modules of
their own, below the engine. They see the engine through ``Rules``, the part of it they call,
so that they import neither it nor each other back: the engine imports them, never the reverse.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from memroot.ledger.entries import Entry
from memroot.ledger.errors import ValidationError
from memroot.projections.ops import validate_payload

if TYPE_CHECKING:
    from memroot.projections.backends import StateStore
    from memroot.projections.model import MemoryObject

__all__ = ["Op", "Rules"]


@dataclass(slots=True)
class Op:
    """An operation entry as the handlers see it: envelope, validated payload, position.

    Internal and short-lived (one per folded entry), so not frozen: construction is cheaper.
    """

    op_type: str
    id: str
    seq: int
    ts: int
    branch: str
    actor_id: str
    actor_type: str
    namespace_id: str
    target_id: str | None
    target_type: str | None
    p: Mapping[str, Any]

    @classmethod
    def from_entry(cls, entry: Entry) -> Op:
        """Read an operation entry and validate its payload.

        Raises:
            ValidationError: if the payload does not match its operation's schema.
        """
        b = entry.body
        payload = b.get("payload")
        if not isinstance(payload, dict):
            raise ValidationError(f"{entry.type} payload must be an object", field="payload")
        return cls(
            entry.type,
            b["id"],
            entry.seq,
            entry.ts,
            entry.branch,
            b["actor_id"],
            b["actor_type"],
            b["namespace_id"],
            b.get("target_id"),
            b.get("target_type"),
            validate_payload(entry.type, payload),
        )


class Rules(Protocol):
    """The engine as a handler below it uses it (``memroot.projections.engine.Engine``)."""

    state: StateStore

    def __init__(self, state: StateStore) -> None:
        """Fold entries into ``state`` (a handler runs again over another store this way)."""

    def _object(self, op: Op, object_id: str, what: str) -> MemoryObject:
        """Return the object ``op`` names as its ``what``.

        Raises:
            RuleError: if it does not exist on ``op``'s branch.
        """

    def _evidence(self, op: Op, event_ids: Iterable[str]) -> None:
        """Check ``event_ids`` as the evidence of ``op``.

        Raises:
            RuleError: if an event does not exist, was erased or may not be read by the actor.
        """
