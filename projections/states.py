"""A memory object's falsification state (SPEC 7), folded by the memory model.

Every memory object has a ``state``: ``live``, ``stale`` or ``falsified``. Only four operations
change it, and they change nothing else (not the version, not ``last_modified_at``): the new
row is opened at the operation's seq so as-of reads see the state the object had then.

- ``FALSIFY`` (``target_type`` ``memory_object``): the object becomes ``falsified``; refused if
  it already is.
- ``MARK_STALE``: a ``live`` object becomes ``stale``; refused otherwise.
- ``RESTORE``: a ``stale`` or ``falsified`` object becomes ``live``; refused if it is live.
- ``CASCADE``: every ``live`` object listed in ``payload.touched`` (``{"type":
  "memory_object", "id"}``) becomes ``stale``.

The same operations name memory roots, summary items and SelfModel snapshots too
(``target_type`` ``memory_root``, ``summary_item``, ``selfmodel``): those belong to the
memory_root layer (``memroot.memory_root.falsify``), which also validates every payload in full,
and pass through here. ``SCHEMAS`` in ``memroot.projections.ops`` checks the payload fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from memroot.ledger.entries import check_uuid
from memroot.ledger.errors import NotFoundError
from memroot.ledger.vocab import OpType
from memroot.projections.handlers import Op, Rules
from memroot.projections.model import MemoryObject, evolve
from memroot.projections.rules import RuleError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "FALSIFICATION",
    "OBJECT_TARGET",
    "STATE_HANDLERS",
    "check_state_change",
    "unseen_evidence",
]

FALSIFICATION: Final = "SPEC 7 falsification state"
"""The rule name of every refusal here (``RuleError.rule``)."""

OBJECT_TARGET: Final = "memory_object"
"""The ``target_type`` naming a memory object in the state operations."""

_LIVE: Final = "live"
_STALE: Final = "stale"
_FALSIFIED: Final = "falsified"


def check_state_change(op_type: str, what: str, current: str) -> str:
    """Return the state ``op_type`` gives an item now in state ``current``, or refuse.

    The one statement of the transitions, shared with the memory_root layer: FALSIFY from
    live or stale; MARK_STALE from live; RESTORE from stale or falsified.

    Raises:
        RuleError: if the operation does not apply to an item in that state.
    """
    if op_type == OpType.FALSIFY:
        if current == _FALSIFIED:
            raise RuleError(FALSIFICATION, f"{what} is already falsified")
        return _FALSIFIED
    if op_type == OpType.MARK_STALE:
        if current != _LIVE:
            hint = "; RESTORE it first" if current == _FALSIFIED else ""
            raise RuleError(
                FALSIFICATION, f"{what} is {current}, only a live item can be marked stale{hint}"
            )
        return _STALE
    if op_type == OpType.RESTORE:
        if current == _LIVE:
            raise RuleError(FALSIFICATION, f"{what} is live: there is nothing to restore")
        return _LIVE
    raise ValueError(f"{op_type} is not FALSIFY, MARK_STALE or RESTORE")


def _put_state(eng: Rules, op: Op, obj: MemoryObject, state: str) -> None:
    # Not Engine._mutate: the state is SPEC 7's, so the version and last_modified_at stay.
    eng.state.put_object(evolve(obj, seq=op.seq, branch=op.branch, state=state), new=False)


def _state_op(eng: Rules, op: Op) -> None:
    if op.target_type != OBJECT_TARGET:
        return
    if op.target_id is None:
        return  # the memory_root layer refuses it, naming the field
    object_id = check_uuid(op.target_id, "target_id")
    obj = eng._object(op, object_id, "target")
    _cited_events_exist(eng, op)
    _put_state(eng, op, obj, check_state_change(op.op_type, f"object {object_id}", obj.state))


def _cited_events_exist(eng: Rules, op: Op) -> None:
    """Refuse a state operation whose ``evidence_ids`` names an event its branch never saw.

    The falsification layer refuses it too (``memroot.memory_root.falsify``): with both rules
    alike, an entry appended without the hooks is skipped by both layers and every replay
    (docs/FORMAT.md §3.1), and ``recall`` and ``Memory.state`` give the same answer. Only the
    event's existence in the branch's view before the operation counts, as there, and the
    refusal is the same (``NotFoundError``, the same words).
    """
    evidence: Any = op.p.get("evidence_ids")
    for event_id in evidence if isinstance(evidence, list | tuple) else ():
        if type(event_id) is str and eng.state.event(op.branch, event_id) is None:
            raise unseen_evidence(event_id, op.branch)


def unseen_evidence(event_id: str, branch: str) -> NotFoundError:
    """Return the refusal of a cited evidence event the branch had not seen before the entry.

    One wording for both layers that refuse it (this one and ``memroot.memory_root.falsify``).
    """
    return NotFoundError(
        f"evidence event {event_id} is not an event branch {branch!r} saw before this entry"
    )


def _cascade(eng: Rules, op: Op) -> None:
    touched: Any = op.p.get("touched")
    for t in touched if type(touched) is list else ():
        if type(t) is not dict or t.get("type") != OBJECT_TARGET or type(t.get("id")) is not str:
            continue
        obj = eng.state.obj(op.branch, t["id"])
        if obj is not None and obj.state == _LIVE:
            _put_state(eng, op, obj, _STALE)


STATE_HANDLERS: Final[dict[str, Callable[[Rules, Op], None]]] = {
    OpType.FALSIFY: _state_op,
    OpType.MARK_STALE: _state_op,
    OpType.RESTORE: _state_op,
    OpType.CASCADE: _cascade,
}
"""The handlers ``memroot.projections.engine.HANDLERS`` takes in for the state operations."""
