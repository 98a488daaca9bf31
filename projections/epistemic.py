"""The RFC-0003 epistemic model: starting confidence, transitions and retrieval filtering.

Starting confidence by epistemic type x source type ("-" = combination not allowed):

    ============  ===========  =================  ===============  =================  ===========
                  USER_STATED  USER_DEMONSTRATED  SYSTEM_INFERRED  EXTERNAL_DOCUMENT  TOOL_OUTPUT
    ============  ===========  =================  ===============  =================  ===========
    OBSERVED      .90          .85                -                .75                .80
    ASSERTED      .80          .75                .60              .65                .70
    INFERRED      -            .60                .55              .50                .55
    HYPOTHETICAL  .35          -                  .25              .30                -
    UNVERIFIED    -            -                  .20              .25                .30
    ============  ===========  =================  ===============  =================  ===========

CONDITIONAL and the IMPORTED source type have no default: such an ASSERT states its confidence.
No object starts DEPRECATED. Allowed transitions: UNVERIFIED -> ASSERTED, ASSERTED -> OBSERVED,
INFERRED -> ASSERTED, HYPOTHETICAL -> ASSERTED, CONDITIONAL -> ASSERTED, any -> DEPRECATED;
nothing leaves DEPRECATED.

Retrieval modes: DEFAULT applies the RFC-0003 filter (OBSERVED and ASSERTED; INFERRED with a
flag; HYPOTHETICAL only ACTIVE ones in a SIMULATION branch, flagged; CONDITIONAL only when its
condition is TRUE; DEPRECATED never; UNVERIFIED only above confidence 0.30) to ACTIVE objects.
EXPLICIT returns what the caller's filters name, epistemic types unfiltered but flagged. AUDIT
returns everything, every lifecycle state included.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from memroot.ledger.vocab import EpistemicType, LifecycleState, SourceType
from memroot.projections import rules
from memroot.projections.rules import RuleError

__all__ = [
    "CONDITION_STATES",
    "CONFIDENCE_MATRIX",
    "DEFAULT_ALWAYS",
    "TRANSITIONS",
    "UNVERIFIED_THRESHOLD",
    "RetrievalMode",
    "check_transition",
    "default_visible",
    "flags_for",
    "starting_confidence",
]

_E = EpistemicType
_S = SourceType
_COLUMNS: Final = (
    _S.USER_STATED,
    _S.USER_DEMONSTRATED,
    _S.SYSTEM_INFERRED,
    _S.EXTERNAL_DOCUMENT,
    _S.TOOL_OUTPUT,
)
_ROWS: Final[dict[EpistemicType, tuple[float | None, ...]]] = {
    _E.OBSERVED: (0.90, 0.85, None, 0.75, 0.80),
    _E.ASSERTED: (0.80, 0.75, 0.60, 0.65, 0.70),
    _E.INFERRED: (None, 0.60, 0.55, 0.50, 0.55),
    _E.HYPOTHETICAL: (0.35, None, 0.25, 0.30, None),
    _E.UNVERIFIED: (None, None, 0.20, 0.25, 0.30),
}

CONFIDENCE_MATRIX: Final[Mapping[tuple[str, str], float | None]] = {
    (e.value, s.value): v for e, row in _ROWS.items() for s, v in zip(_COLUMNS, row, strict=True)
}
"""(epistemic type, source type) -> starting confidence; None is a "-" (refused)."""

TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    _E.UNVERIFIED.value: frozenset({_E.ASSERTED.value, _E.DEPRECATED.value}),
    _E.ASSERTED.value: frozenset({_E.OBSERVED.value, _E.DEPRECATED.value}),
    _E.INFERRED.value: frozenset({_E.ASSERTED.value, _E.DEPRECATED.value}),
    _E.HYPOTHETICAL.value: frozenset({_E.ASSERTED.value, _E.DEPRECATED.value}),
    _E.CONDITIONAL.value: frozenset({_E.ASSERTED.value, _E.DEPRECATED.value}),
    _E.OBSERVED.value: frozenset({_E.DEPRECATED.value}),
    _E.DEPRECATED.value: frozenset(),
}
"""Epistemic type -> the types it may become."""

UNVERIFIED_THRESHOLD: Final = 0.30
"""DEFAULT retrieval returns UNVERIFIED objects only when confidence is above this."""

DEFAULT_ALWAYS: Final = frozenset({_E.OBSERVED.value, _E.ASSERTED.value, _E.INFERRED.value})
"""Epistemic types DEFAULT retrieval returns without a further condition (INFERRED flagged)."""

CONDITION_STATES: Final = ("TRUE", "FALSE", "UNKNOWN")
"""States of a CONDITIONAL object's condition; a new condition starts UNKNOWN."""

_UNFLAGGED: Final = frozenset({_E.OBSERVED.value, _E.ASSERTED.value})


class RetrievalMode(StrEnum):
    """RFC-0003 retrieval modes."""

    DEFAULT = "DEFAULT"
    EXPLICIT = "EXPLICIT"
    AUDIT = "AUDIT"


def starting_confidence(epistemic_type: str, source_type: str) -> float | None:
    """Return the RFC-0003 starting confidence, or None when the matrix has no default.

    None means the combination is allowed but the ASSERT must state its confidence
    (CONDITIONAL objects, IMPORTED sources).

    Raises:
        RuleError: for a "-" combination, and for an object that would start DEPRECATED.
    """
    if epistemic_type == _E.DEPRECATED:
        raise RuleError(
            rules.STARTING_CONFIDENCE,
            "no object starts DEPRECATED; assert it, "
            "then apply an EPISTEMIC_TRANSITION to DEPRECATED",
        )
    key = (epistemic_type, source_type)
    if key not in CONFIDENCE_MATRIX:
        return None
    value = CONFIDENCE_MATRIX[key]
    if value is None:
        raise RuleError(
            rules.STARTING_CONFIDENCE,
            f"{epistemic_type} from a {source_type} source is not allowed",
        )
    return value


def check_transition(object_id: str, current: str, target: str) -> None:
    """Refuse an epistemic transition RFC-0003 does not allow.

    Raises:
        RuleError: naming the object, both types and what the current type allows.
    """
    allowed = TRANSITIONS.get(current, frozenset())
    if target in allowed:
        return
    hint = (
        f"{current} may only become {' or '.join(sorted(allowed))}"
        if allowed
        else f"nothing leaves {current}"
    )
    raise RuleError(
        rules.EPISTEMIC_TRANSITION,
        f"object {object_id} cannot go from {current} to {target} ({hint})",
    )


def default_visible(
    epistemic_type: str,
    confidence: float,
    lifecycle_state: str,
    condition_state: str | None,
    *,
    simulation: bool = False,
) -> bool:
    """Return True when DEFAULT retrieval returns an object with these fields (RFC-0003).

    ``simulation`` is True for reads inside a SIMULATION branch, where ACTIVE HYPOTHETICAL
    objects are returned (flagged).
    """
    if lifecycle_state != LifecycleState.ACTIVE:
        return False
    if epistemic_type in DEFAULT_ALWAYS:
        return True
    if epistemic_type == _E.UNVERIFIED:
        return confidence > UNVERIFIED_THRESHOLD
    if epistemic_type == _E.CONDITIONAL:
        return condition_state == "TRUE"
    if epistemic_type == _E.HYPOTHETICAL:
        return simulation
    return False


def flags_for(epistemic_type: str, *, conflict: bool, evidence_erased: bool) -> tuple[str, ...]:
    """Return the flags a retrieval result carries.

    Every epistemic type other than OBSERVED and ASSERTED is a flag of its own name (so
    INFERRED results say INFERRED); ``CONFLICT`` marks an object with a CONTRADICTS edge and
    ``EVIDENCE_ERASED`` one whose evidence content was erased by a TOMBSTONE.
    """
    out: list[str] = []
    if epistemic_type not in _UNFLAGGED:
        out.append(epistemic_type)
    if conflict:
        out.append("CONFLICT")
    if evidence_erased:
        out.append("EVIDENCE_ERASED")
    return tuple(out)
