"""The RFC-0001 data model as frozen values: memory objects, edges, entities, namespaces.

Every value here is derived from ledger entries (RFC-0001 C1) and never stored another way.
``to_dict`` gives the serialised form (JSON-ready: timestamps are integers of microseconds
since the Unix epoch, UTC; lists for arrays); ``from_dict`` is its strict inverse and is the
schema validator: a missing required field, a wrong type, a value outside an enumeration or
a score outside [0, 1] raises ``ValidationError`` naming the field.

Besides the RFC-0001 fields every value records where it lives and which ledger entry produced
this version of it: ``branch`` and ``seq``. Memory objects also carry ``condition`` and
``condition_state`` (what a CONDITIONAL object depends on; RFC-0003 retrieval returns it only
when the condition is TRUE) and ``state`` (``live``, ``stale`` or ``falsified``, SPEC 7; set
only by the falsification operations of a later layer, ``live`` until then).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Final

from memroot.ledger.entries import CANONICAL_BRANCH, check_uuid
from memroot.ledger.errors import ValidationError
from memroot.ledger.vocab import (
    EdgeType,
    EntityType,
    EpistemicType,
    LifecycleState,
    MemoryType,
    NamespaceType,
    Permission,
    SourceType,
)
from memroot.projections.epistemic import CONDITION_STATES

__all__ = [
    "FALSIFICATION_STATES",
    "Edge",
    "Entity",
    "EventRef",
    "Grant",
    "MemoryObject",
    "Namespace",
    "evolve",
]

FALSIFICATION_STATES: Final = ("live", "stale", "falsified")
_MAX_TS: Final = 2**63 - 1


# -- field checks ------------------------------------------------------------------------------


def _need(d: Mapping[str, Any], name: str) -> Any:
    if name not in d or d[name] is None:
        raise ValidationError(f"missing required field {name!r}", field=name)
    return d[name]


def _str(d: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = _need(d, name) if required else d.get(name)
    if value is None:
        return None
    if type(value) is not str or not value:
        raise ValidationError(f"{name} must be a non-empty string, got {value!r}", field=name)
    return value


def _uuid(d: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = _need(d, name) if required else d.get(name)
    return None if value is None else check_uuid(value, name)


def _enum(d: Mapping[str, Any], name: str, enum: type[StrEnum]) -> str:
    value = _need(d, name)
    try:
        return enum(value).value
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise ValidationError(f"{name} {value!r} is not one of {allowed}", field=name) from None


def _int(d: Mapping[str, Any], name: str, *, required: bool = True, low: int = 0) -> int | None:
    value = _need(d, name) if required else d.get(name)
    if value is None:
        return None
    if type(value) is not int or not low <= value <= _MAX_TS:
        raise ValidationError(f"{name} must be an integer >= {low}, got {value!r}", field=name)
    return value


def _unit(d: Mapping[str, Any], name: str) -> float:
    value = _need(d, name)
    if type(value) not in (int, float) or not math.isfinite(value) or not 0 <= value <= 1:
        raise ValidationError(f"{name} must be a number in [0, 1], got {value!r}", field=name)
    return float(value)


def _ids(d: Mapping[str, Any], name: str, *, at_least: int) -> tuple[str, ...]:
    value = _need(d, name)
    if type(value) not in (list, tuple):
        raise ValidationError(f"{name} must be a list of UUIDs", field=name)
    if len(value) < at_least:
        raise ValidationError(f"{name} needs at least {at_least} id(s)", field=name)
    return tuple(check_uuid(v, f"{name}[{i}]") for i, v in enumerate(value))


def _strs(d: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = _need(d, name)
    if type(value) not in (list, tuple) or any(type(v) is not str or not v for v in value):
        raise ValidationError(f"{name} must be a list of non-empty strings", field=name)
    return tuple(value)


def _no_extra(d: Mapping[str, Any], cls: type[Any]) -> None:
    names = {f.name for f in fields(cls)}
    extra = sorted(set(d) - names)
    if extra:
        raise ValidationError(f"unknown field {extra[0]!r} in a {cls.__name__}", field=extra[0])


def _choice(
    d: Mapping[str, Any], name: str, allowed: tuple[str, ...], default: str | None
) -> str | None:
    value = d.get(name, default)
    if value is None:
        return None
    if value not in allowed:
        raise ValidationError(f"{name} {value!r} is not one of {', '.join(allowed)}", field=name)
    return str(value)


def _plain(value: Any) -> Any:
    """Return ``value`` with tuples as lists (the JSON-ready form)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


# -- values ---------------------------------------------------------------------------------


_FIELDS: dict[type[Any], tuple[str, ...]] = {}


def evolve(value: Any, **changes: Any) -> Any:
    """Return a copy of a frozen value with ``changes`` applied (``dataclasses.replace``, faster).

    It runs the value's ``__post_init__`` checks like the constructor does; the engine calls it
    for every mutation, where ``dataclasses.replace`` costs several times more.

    Raises:
        ValueError: if the new value breaks the type's invariants.
        TypeError: for a field name the type does not have.
    """
    cls = type(value)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    if not changes.keys() <= set(names):
        raise TypeError(f"{cls.__name__} has no field {sorted(set(changes) - set(names))[0]!r}")
    new = object.__new__(cls)
    put = object.__setattr__
    for name in names:
        put(new, name, changes[name] if name in changes else getattr(value, name))
    post = getattr(new, "__post_init__", None)
    if post is not None:
        post()
    return new


@dataclass(frozen=True, slots=True)
class MemoryObject:
    """One version of an RFC-0001 memory object (section 4), plus memroot's bookkeeping.

    ``version`` starts at 1 and grows by one with every mutation; ``seq`` is the ledger entry
    that produced this version on ``branch``.
    """

    id: str
    type: str
    version: int
    epistemic_type: str
    source_type: str
    evidence_ids: tuple[str, ...]
    asserted_by: str
    valid_from: int
    valid_to: int | None
    created_at: int
    last_modified_at: int
    lifecycle_state: str
    superseded_by: str | None
    confidence: float
    salience: float
    namespace_id: str
    value: str
    structured_value: Any = None
    condition: str | None = None
    condition_state: str | None = None
    state: str = "live"
    branch: str = CANONICAL_BRANCH
    seq: int = 0

    def __post_init__(self) -> None:
        # Cheap invariants only: this runs for every version the engine creates.
        if self.version < 1 or not self.evidence_ids:
            raise ValueError(f"object {self.id}: version >= 1 and at least one evidence id")
        if not (0.0 <= self.confidence <= 1.0 and 0.0 <= self.salience <= 1.0):
            raise ValueError(f"object {self.id}: confidence and salience must be in [0, 1]")

    def to_dict(self) -> dict[str, Any]:
        """Return the serialised (JSON-ready) form."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MemoryObject:
        """Validate a serialised object against the RFC-0001 schema and return it.

        Raises:
            ValidationError: naming the first missing, unknown or invalid field.
        """
        if not isinstance(d, Mapping):
            raise ValidationError("a memory object must be a JSON object")
        _no_extra(d, cls)
        lifecycle = _enum(d, "lifecycle_state", LifecycleState)
        superseded_by = _uuid(d, "superseded_by", required=False)
        if (lifecycle == LifecycleState.SUPERSEDED) != (superseded_by is not None):
            raise ValidationError(
                "superseded_by is set exactly when lifecycle_state is SUPERSEDED",
                field="superseded_by",
            )
        valid_from = _int(d, "valid_from")
        valid_to = _int(d, "valid_to", required=False)
        created_at = _int(d, "created_at")
        last_modified_at = _int(d, "last_modified_at")
        assert valid_from is not None and created_at is not None and last_modified_at is not None
        if valid_to is not None and valid_to < valid_from:
            raise ValidationError("valid_to is before valid_from", field="valid_to")
        if last_modified_at < created_at:
            raise ValidationError("last_modified_at is before created_at", field="last_modified_at")
        epistemic = _enum(d, "epistemic_type", EpistemicType)
        condition = _str(d, "condition", required=False)
        condition_state = _choice(d, "condition_state", CONDITION_STATES, None)
        if (condition is None) != (condition_state is None):
            raise ValidationError(
                "condition and condition_state go together", field="condition_state"
            )
        value = d.get("value")
        if type(value) is not str:
            raise ValidationError(
                "missing required field 'value'" if value is None else "value must be a string",
                field="value",
            )
        version = _int(d, "version", low=1)
        seq = _int(d, "seq", required=False)
        assert version is not None
        return cls(
            id=str(_uuid(d, "id")),
            type=_enum(d, "type", MemoryType),
            version=version,
            epistemic_type=epistemic,
            source_type=_enum(d, "source_type", SourceType),
            evidence_ids=_ids(d, "evidence_ids", at_least=1),
            asserted_by=str(_str(d, "asserted_by")),
            valid_from=valid_from,
            valid_to=valid_to,
            created_at=created_at,
            last_modified_at=last_modified_at,
            lifecycle_state=lifecycle,
            superseded_by=superseded_by,
            confidence=_unit(d, "confidence"),
            salience=_unit(d, "salience"),
            namespace_id=str(_str(d, "namespace_id")),
            value=value,
            structured_value=d.get("structured_value"),
            condition=condition,
            condition_state=condition_state,
            state=str(_choice(d, "state", FALSIFICATION_STATES, "live")),
            branch=str(_str(d, "branch", required=False) or CANONICAL_BRANCH),
            seq=seq or 0,
        )


@dataclass(frozen=True, slots=True)
class Edge:
    """An RFC-0001 section 9 graph edge; ``seq`` is the entry that created this version."""

    id: str
    type: str
    source_id: str
    target_id: str
    created_at: int
    created_by: str
    confidence: float
    valid_from: int
    valid_to: int | None = None
    relation_label: str | None = None
    branch: str = CANONICAL_BRANCH
    seq: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the serialised (JSON-ready) form."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Edge:
        """Validate a serialised edge and return it.

        Raises:
            ValidationError: naming the first missing, unknown or invalid field.
        """
        if not isinstance(d, Mapping):
            raise ValidationError("an edge must be a JSON object")
        _no_extra(d, cls)
        edge_type = _enum(d, "type", EdgeType)
        label = _str(d, "relation_label", required=False)
        if edge_type == EdgeType.RELATES_TO and label is None:
            raise ValidationError(
                "a RELATES_TO edge needs a relation_label", field="relation_label"
            )
        valid_from = _int(d, "valid_from")
        valid_to = _int(d, "valid_to", required=False)
        assert valid_from is not None
        if valid_to is not None and valid_to < valid_from:
            raise ValidationError("valid_to is before valid_from", field="valid_to")
        return cls(
            id=str(_uuid(d, "id")),
            type=edge_type,
            source_id=str(_uuid(d, "source_id")),
            target_id=str(_uuid(d, "target_id")),
            created_at=int(_int(d, "created_at") or 0),
            created_by=str(_str(d, "created_by")),
            confidence=_unit(d, "confidence"),
            valid_from=valid_from,
            valid_to=valid_to,
            relation_label=label,
            branch=str(_str(d, "branch", required=False) or CANONICAL_BRANCH),
            seq=_int(d, "seq", required=False) or 0,
        )


@dataclass(frozen=True, slots=True)
class Entity:
    """An RFC-0001 section 10 entity; ``merged_into`` is set once ENTITY_MERGE folded it."""

    id: str
    type: str
    canonical_name: str
    aliases: tuple[str, ...]
    namespace_id: str
    created_at: int
    last_seen_at: int
    merged_into: str | None = None
    branch: str = CANONICAL_BRANCH
    seq: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the serialised (JSON-ready) form."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Entity:
        """Validate a serialised entity and return it.

        Raises:
            ValidationError: naming the first missing, unknown or invalid field.
        """
        if not isinstance(d, Mapping):
            raise ValidationError("an entity must be a JSON object")
        _no_extra(d, cls)
        created_at = _int(d, "created_at")
        last_seen_at = _int(d, "last_seen_at")
        assert created_at is not None and last_seen_at is not None
        if last_seen_at < created_at:
            raise ValidationError("last_seen_at is before created_at", field="last_seen_at")
        return cls(
            id=str(_uuid(d, "id")),
            type=_enum(d, "type", EntityType),
            canonical_name=str(_str(d, "canonical_name")),
            aliases=_strs(d, "aliases"),
            namespace_id=str(_str(d, "namespace_id")),
            created_at=created_at,
            last_seen_at=last_seen_at,
            merged_into=_uuid(d, "merged_into", required=False),
            branch=str(_str(d, "branch", required=False) or CANONICAL_BRANCH),
            seq=_int(d, "seq", required=False) or 0,
        )


@dataclass(frozen=True, slots=True)
class EventRef:
    """What the memory model keeps of an event: where it is and whether it was erased."""

    id: str
    branch: str
    seq: int
    ts: int
    namespace_id: str
    actor_id: str
    erased_by: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the serialised (JSON-ready) form."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def row(self) -> tuple[str, str, int, int, str, str, int | None]:
        """Return the ``mem_events`` row (columns in table order)."""
        return (
            self.id,
            self.branch,
            self.seq,
            self.ts,
            self.namespace_id,
            self.actor_id,
            self.erased_by,
        )


@dataclass(frozen=True, slots=True)
class Namespace:
    """An RFC-0004 namespace with a policy (created by NAMESPACE_CREATE)."""

    id: str
    type: str
    created_by: str
    created_at: int
    branch: str = CANONICAL_BRANCH
    seq: int = 0

    def __post_init__(self) -> None:
        NamespaceType(self.type)

    def to_dict(self) -> dict[str, Any]:
        """Return the serialised (JSON-ready) form."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class Grant:
    """An RFC-0004 permission of one actor on one namespace (GRANT, REVOKE)."""

    namespace_id: str
    actor_id: str
    permission: str
    granted_by: str
    branch: str = CANONICAL_BRANCH
    seq: int = 0

    def __post_init__(self) -> None:
        Permission(self.permission)

    def to_dict(self) -> dict[str, Any]:
        """Return the serialised (JSON-ready) form."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
