"""The RFC-0001 section 8 lifecycle state machine, exactly.

    ACTIVE ──────┬──────► DEPRECATED
                 ├──────► SUPERSEDED (by a newer version of the same fact)
                 └──────► ARCHIVED (retained but excluded from default retrieval)
    DEPRECATED ──────────► ARCHIVED

Nothing else: no transition leaves SUPERSEDED or ARCHIVED, nothing returns to ACTIVE, and there
is no DELETE state (deletion is DEPRECATED/ARCHIVED plus a TOMBSTONE of the evidence).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from memroot.ledger.vocab import LifecycleState
from memroot.projections.rules import LIFECYCLE, RuleError

__all__ = ["TRANSITIONS", "check_lifecycle", "is_allowed"]

_A, _D, _S, _R = (
    LifecycleState.ACTIVE,
    LifecycleState.DEPRECATED,
    LifecycleState.SUPERSEDED,
    LifecycleState.ARCHIVED,
)

TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    _A.value: frozenset({_D.value, _S.value, _R.value}),
    _D.value: frozenset({_R.value}),
    _S.value: frozenset(),
    _R.value: frozenset(),
}
"""Lifecycle state -> the states it may move to."""


def is_allowed(current: str, target: str) -> bool:
    """Return True when RFC-0001 allows moving from ``current`` to ``target``."""
    return target in TRANSITIONS.get(current, frozenset())


def check_lifecycle(object_id: str, current: str, target: str) -> None:
    """Refuse a lifecycle move that RFC-0001 section 8 does not allow.

    Raises:
        RuleError: naming the object, both states and what the current state allows.
    """
    if is_allowed(current, target):
        return
    allowed = sorted(TRANSITIONS.get(current, frozenset()))
    hint = (
        f"{current} may only become {' or '.join(allowed)}"
        if allowed
        else (f"nothing leaves {current}")
    )
    raise RuleError(LIFECYCLE, f"object {object_id} cannot go from {current} to {target} ({hint})")
