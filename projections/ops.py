"""RFC-0002 operation payloads: which fields each operation carries, and their validation.

The ledger validates an operation's envelope (actor, namespace, target, policy_version); this
module validates its ``payload`` against the schema of its operation type (``SCHEMAS``):
required fields present, types and enumerations right, scores in [0, 1], ids well-formed, and
no unknown field (a typo is refused rather than silently ignored). Whether referenced ids exist
and are in the right state is the engine's job (``memroot.projections.engine``).

Fields beyond RFC-0002's list are optional and documented in docs/memory.md: ASSERT takes
``structured_value``, ``valid_from``, ``valid_to``, ``entity_ids``, ``condition`` and
``imported`` (an object a branch merge brings in, docs/branches.md); RELATE
takes ``relation_label`` (required for RELATES_TO), ``valid_from`` and ``valid_to``;
CONTRADICTION_NOTED takes ``confidence``; TOMBSTONE takes ``on_dependents``; DEPRECATE,
ARCHIVE, DECAY_APPLIED, REINFORCE and PENALTY take ``evidence_ids`` (the events that motivated
them: their provenance, ``memroot.projections.gated``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.entries import check_uuid
from memroot.ledger.errors import ValidationError
from memroot.ledger.vocab import (
    EdgeType,
    EntityType,
    EpistemicType,
    MemoryType,
    NamespaceType,
    OpType,
    Permission,
    SourceType,
)
from memroot.projections.epistemic import CONDITION_STATES

__all__ = [
    "MAX_TEXT",
    "MAX_VALUE",
    "ON_DEPENDENTS",
    "SCHEMAS",
    "Field",
    "validate_payload",
]

MAX_TEXT: Final = 4096
MAX_VALUE: Final = 256 * 1024
MAX_IDS: Final = 10_000
_MAX_TS: Final = 2**63 - 1
_UUID_RE: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")

ON_DEPENDENTS: Final = ("DEPRECATE", "ARCHIVE", "KEEP")
"""What a TOMBSTONE does to ACTIVE objects citing the erased event (docs/memory.md)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One payload field: its name, kind, whether it must be present, and a kind argument.

    Kinds: ``text`` (non-empty string, ``arg`` = max length), ``name`` (a ``text`` that
    names something: no control characters), ``names`` (a list of them), ``uuid``, ``uuids`` (list,
    ``arg`` = minimum length), ``enum`` (``arg`` = the tuple of allowed strings), ``unit``
    (number in [0, 1]), ``unit?`` (``unit`` or null; the key must still be present),
    ``nonneg`` (number >= 0), ``texts`` (list of non-empty strings), ``ts`` (integer
    microseconds), ``json`` (any JSON value), ``condition`` ({text, state?}), ``window``
    ({from, to} in microseconds), ``imported`` ({branch, object_id, asserted_by}).
    """

    name: str
    kind: str
    required: bool = True
    arg: Any = None


def _arg(kind: str, arg: Any) -> Any:
    # Enumerations become tuples of their values once, not on every check.
    if kind == "enum":
        return tuple(str(m.value) if isinstance(m, StrEnum) else str(m) for m in arg)
    return arg


def _f(name: str, kind: str, arg: Any = None) -> Field:
    return Field(name, kind, True, _arg(kind, arg))


def _o(name: str, kind: str, arg: Any = None) -> Field:
    return Field(name, kind, False, _arg(kind, arg))


SCHEMAS: Final[Mapping[str, tuple[Field, ...]]] = {
    OpType.ASSERT: (
        _f("object_type", "enum", MemoryType),
        _f("epistemic_type", "enum", EpistemicType),
        _f("source_type", "enum", SourceType),
        _f("evidence_ids", "uuids", 1),
        _f("value", "text", MAX_VALUE),
        _f("confidence", "unit?"),
        _f("salience", "unit"),
        _o("structured_value", "json"),
        _o("valid_from", "ts"),
        _o("valid_to", "ts"),
        _o("entity_ids", "uuids", 0),
        _o("condition", "condition"),
        _o("imported", "imported"),
    ),
    OpType.DEPRECATE: (
        _f("reason", "text", MAX_TEXT),
        _f("deprecated_by", "name", MAX_TEXT),
        _o("evidence_ids", "uuids", 0),
    ),
    OpType.SUPERSEDE: (_f("new_object_id", "uuid"), _f("reason", "text", MAX_TEXT)),
    OpType.ARCHIVE: (
        _f("reason", "text", MAX_TEXT),
        _f("policy_ref", "name", MAX_TEXT),
        _o("evidence_ids", "uuids", 0),
    ),
    OpType.TOMBSTONE: (
        _f("target_event_id", "uuid"),
        _f("reason", "text", MAX_TEXT),
        _f("policy_ref", "name", MAX_TEXT),
        _o("on_dependents", "enum", ON_DEPENDENTS),
    ),
    OpType.EPISTEMIC_TRANSITION: (
        _f("from_type", "enum", EpistemicType),
        _f("to_type", "enum", EpistemicType),
        _f("reason", "text", MAX_TEXT),
        _f("evidence_ids", "uuids", 0),
    ),
    OpType.CONTRADICTION_NOTED: (
        _f("object_id_a", "uuid"),
        _f("object_id_b", "uuid"),
        _f("conflict_description", "text", MAX_TEXT),
        _o("confidence", "unit"),
    ),
    OpType.DECAY_APPLIED: (
        _f("decay_delta", "nonneg"),
        _f("new_salience", "unit"),
        _f("new_confidence", "unit"),
        _f("decay_profile_ref", "name", MAX_TEXT),
        _o("evidence_ids", "uuids", 0),
    ),
    OpType.REINFORCE: (
        _f("signal_type", "name", MAX_TEXT),
        _f("delta", "nonneg"),
        _f("new_confidence", "unit"),
        _f("new_salience", "unit"),
        _f("signal_source", "name", MAX_TEXT),
        _o("evidence_ids", "uuids", 0),
    ),
    OpType.PENALTY: (
        _f("signal_type", "name", MAX_TEXT),
        _f("delta", "nonneg"),
        _f("new_confidence", "unit"),
        _f("reason", "text", MAX_TEXT),
        _o("evidence_ids", "uuids", 0),
    ),
    OpType.RELATE: (
        _f("edge_type", "enum", EdgeType),
        _f("source_id", "uuid"),
        _f("target_id", "uuid"),
        _f("confidence", "unit"),
        _o("relation_label", "name", MAX_TEXT),
        _o("valid_from", "ts"),
        _o("valid_to", "ts"),
    ),
    OpType.ENTITY_CREATE: (
        _f("entity_type", "enum", EntityType),
        _f("canonical_name", "name", MAX_TEXT),
        _f("aliases", "names"),
    ),
    OpType.ENTITY_MERGE: (
        _f("primary_entity_id", "uuid"),
        _f("merged_entity_id", "uuid"),
        _f("alias_list", "names"),
    ),
    OpType.SUMMARY_CREATED: (
        _f("object_ids_summarised", "uuids", 1),
        _f("time_window", "window"),
        _f("summary_type", "name", MAX_TEXT),
    ),
    OpType.DEDUP_RESOLVED: (
        _f("primary_id", "uuid"),
        _f("merged_ids", "uuids", 1),
        _f("resolution_strategy", "name", MAX_TEXT),
    ),
    OpType.NAMESPACE_CREATE: (_f("namespace_type", "enum", NamespaceType),),
    OpType.GRANT: (_f("actor_id", "name", MAX_TEXT), _f("permission", "enum", Permission)),
    OpType.REVOKE: (_f("actor_id", "name", MAX_TEXT), _f("permission", "enum", Permission)),
    # SPEC 7 states; memory_root.falsify checks these payloads in full (docs/FORMAT.md §8).
    OpType.FALSIFY: (_f("reason", "text", MAX_TEXT), _o("evidence_ids", "uuids", 0)),
    OpType.MARK_STALE: (_f("reason", "text", MAX_TEXT), _o("evidence_ids", "uuids", 0)),
    OpType.RESTORE: (
        _f("reason", "text", MAX_TEXT),
        _o("evidence_ids", "uuids", 0),
        _o("cascade", "json"),
    ),
    OpType.CASCADE: (
        _f("max_depth", "json"),
        _f("max_items", "json"),
        _f("kinds", "json"),
        _o("reason", "text", MAX_TEXT),
        _f("touched", "json"),
        _f("beyond", "json"),
        _f("resnapshots", "json"),
    ),
}
"""Operation type -> its payload fields (RFC-0002, plus the optional fields above)."""


def _bad(op: str, name: str, what: str) -> ValidationError:
    return ValidationError(f"{op} payload.{name} {what}", field=f"payload.{name}")


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _json_ok(value: Any, depth: int = 0) -> bool:
    if depth > 32:
        return False
    if value is None or type(value) in (str, bool, int):
        return True
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is list:
        return all(_json_ok(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _json_ok(v, depth + 1) for k, v in value.items())
    return False


def _text(op: str, f: Field, value: Any) -> Any:
    if type(value) is not str or not value or len(value) > f.arg:
        raise _bad(op, f.name, f"must be a non-empty string of at most {f.arg} characters")
    return value


_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Control characters: refused in names (they would forge lines of the CLI's output)."""


def _name(op: str, f: Field, value: Any) -> Any:
    _text(op, f, value)
    if _CONTROL.search(value):
        raise _bad(op, f.name, "must not contain control characters")
    return value


def _names(op: str, f: Field, value: Any) -> Any:
    out = _texts(op, f, value)
    if any(_CONTROL.search(v) for v in out):
        raise _bad(op, f.name, "must not contain control characters")
    return out


def _uuid(op: str, f: Field, value: Any) -> Any:
    if type(value) is str and _UUID_RE.match(value):
        return value
    return check_uuid(value, f"payload.{f.name}")  # raises, naming the field


def _uuids(op: str, f: Field, value: Any) -> Any:
    if type(value) is not list or not f.arg <= len(value) <= MAX_IDS:
        raise _bad(op, f.name, f"must be a list of {f.arg} to {MAX_IDS} UUIDs")
    match = _UUID_RE.match
    for i, v in enumerate(value):
        if type(v) is not str or not match(v):
            check_uuid(v, f"payload.{f.name}[{i}]")  # raises, naming the element
    ids = tuple(value)
    if len(set(ids)) != len(ids):
        raise _bad(op, f.name, "lists an id more than once")
    return ids


def _enum(op: str, f: Field, value: Any) -> Any:
    if type(value) is not str or value not in f.arg:
        raise _bad(op, f.name, f"{value!r} is not one of {', '.join(f.arg)}")
    return value


def _unit(op: str, f: Field, value: Any) -> Any:
    if value is None and f.kind == "unit?":
        return None
    if type(value) not in (int, float) or not 0 <= value <= 1:  # NaN fails the range test
        raise _bad(op, f.name, f"must be a number in [0, 1], got {value!r}")
    return float(value)


def _nonneg(op: str, f: Field, value: Any) -> Any:
    if not _number(value) or type(value) is bool or value < 0:
        raise _bad(op, f.name, f"must be a number >= 0, got {value!r}")
    return float(value)


def _texts(op: str, f: Field, value: Any) -> Any:
    if (
        type(value) is not list
        or len(value) > MAX_IDS
        or any(type(v) is not str or not v or len(v) > MAX_TEXT for v in value)
    ):
        raise _bad(op, f.name, "must be a list of non-empty strings")
    return tuple(value)


def _ts(op: str, f: Field, value: Any) -> Any:
    if type(value) is not int or not 0 <= value <= _MAX_TS:
        raise _bad(op, f.name, "must be an integer count of microseconds since the epoch")
    return value


def _json(op: str, f: Field, value: Any) -> Any:
    if not _json_ok(value):
        raise _bad(op, f.name, "must be a JSON value (no bytes, NaN or Infinity)")
    return value


def _condition(op: str, f: Field, value: Any) -> Any:
    if type(value) is not dict or set(value) - {"text", "state"} or "text" not in value:
        raise _bad(op, f.name, "must be an object {text, state?}")
    text = value["text"]
    if type(text) is not str or not text or len(text) > MAX_TEXT:
        raise _bad(op, f.name, "text must be a non-empty string")
    state = value.get("state", "UNKNOWN")
    if state not in CONDITION_STATES:
        raise _bad(op, f.name, f"state {state!r} is not one of {', '.join(CONDITION_STATES)}")
    return (text, str(state))


def _window(op: str, f: Field, value: Any) -> Any:
    if type(value) is not dict or set(value) != {"from", "to"}:
        raise _bad(op, f.name, "must be an object {from, to} (microseconds)")
    lo, hi = value["from"], value["to"]
    if type(lo) is not int or type(hi) is not int or not 0 <= lo <= hi <= _MAX_TS:
        raise _bad(op, f.name, "needs integer microseconds with 0 <= from <= to")
    return (lo, hi)


def _imported(op: str, f: Field, value: Any) -> Any:
    if type(value) is not dict or set(value) != {"branch", "object_id", "asserted_by"}:
        raise _bad(op, f.name, "must be an object {branch, object_id, asserted_by}")
    branch, by = value["branch"], value["asserted_by"]
    for name, text in (("branch", branch), ("asserted_by", by)):
        if type(text) is not str or not text or len(text) > MAX_TEXT:
            raise _bad(op, f.name, f"{name} must be a non-empty string")
    object_id = value["object_id"]
    if type(object_id) is not str or not _UUID_RE.match(object_id):
        raise _bad(op, f.name, "object_id must be a lowercase UUID")
    return (branch, object_id, by)


_CHECKS: Final[dict[str, Callable[[str, Field, Any], Any]]] = {
    "text": _text,
    "name": _name,
    "names": _names,
    "uuid": _uuid,
    "uuids": _uuids,
    "enum": _enum,
    "unit": _unit,
    "unit?": _unit,
    "nonneg": _nonneg,
    "texts": _texts,
    "ts": _ts,
    "json": _json,
    "condition": _condition,
    "window": _window,
    "imported": _imported,
}
_PLAN: Final = {
    op: (frozenset(f.name for f in fields), tuple((f, _CHECKS[f.kind]) for f in fields))
    for op, fields in SCHEMAS.items()
}
_NATIVE_PLAN: Final[dict[str, Any]] = (
    {}
    if _N is None
    else {
        op: _N.PayloadPlan([(f.name, f.kind, f.required, f.arg) for f in fields])
        for op, fields in SCHEMAS.items()
    }
)
"""The native core's copy of each schema (``PayloadPlan``): it checks a payload in one call
and returns what the reference does, or ``Reject`` and the reference runs."""


def validate_payload(op_type: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Validate an operation's payload against ``SCHEMAS`` and return it normalised.

    Lists of ids and strings come back as tuples, numbers as floats, a condition as
    ``(text, state)``, a time window as ``(from, to)`` and an import as ``(branch, object_id,
    asserted_by)``; absent optional fields as None.

    Raises:
        ValidationError: naming the operation and the first missing, unknown or bad field.
        KeyError: if ``op_type`` has no schema (a programming mistake).
    """
    names, plan = _PLAN[op_type]
    native = _NATIVE_PLAN.get(op_type)
    if native is not None and _N is not None:
        try:
            return native.validate(payload)  # type: ignore[no-any-return]
        except _N.Reject:
            pass  # the reference raises, or accepts a field the core does not check
    if not names.issuperset(payload):
        extra = sorted(set(payload) - names)[0]
        raise _bad(
            op_type, extra, f"is not a field of {op_type} (it takes {', '.join(sorted(names))})"
        )
    out: dict[str, Any] = {}
    get = payload.get
    for f, check in plan:
        value = get(f.name)
        if value is None and (f.kind != "unit?" or f.name not in payload):
            if f.required:
                raise _bad(op_type, f.name, "is required")
            out[f.name] = None
            continue
        out[f.name] = check(op_type, f, value)
    return out
