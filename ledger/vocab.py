"""The enumerations of memroot's data model (RFC-0001/0002/0003/0004/0012, ../shared/RFC-FACTS.md).

They live in the ledger layer because the ledger validates entries at append and every layer
above reads the same names. Values are the exact strings stored in entries.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from memroot.ledger.errors import ValidationError

__all__ = [
    "ActorType",
    "BranchType",
    "EdgeType",
    "EntityType",
    "EpistemicType",
    "LifecycleState",
    "MemoryType",
    "NamespaceType",
    "OpType",
    "Permission",
    "Role",
    "SourceType",
    "canonical",
]


def canonical(value: object, allowed: Iterable[str], name: str) -> str:
    """Return the canonical spelling of an enumeration value a caller gave in any case.

    The one case rule (README "Names and case"): a value memroot takes as a parameter (a CLI
    option, a facade or library argument) matches without regard to case and is written in
    its canonical upper-case form; an entry given whole as JSON is stored as signed, so it
    must already be canonical.

    Raises:
        ValidationError: ``value`` is not a string, or none of ``allowed`` (all are listed),
            naming the parameter ``name``.
    """
    names = [str(a) for a in allowed]
    if isinstance(value, str):
        for a in names:
            if a.upper() == value.upper():
                return a
    raise ValidationError(f"{name} {value!r} is not one of {', '.join(names)}", field=name)


class ActorType(StrEnum):
    """RFC-0001 section 5: who produced an event or operation."""

    HUMAN_USER = "HUMAN_USER"
    SYSTEM_PROCESS = "SYSTEM_PROCESS"
    AI_AGENT = "AI_AGENT"
    EXTERNAL_CONNECTOR = "EXTERNAL_CONNECTOR"


class Role(StrEnum):
    """RFC-0001 section 6: the conversational role of an event's content."""

    USER = "USER"
    ASSISTANT = "ASSISTANT"
    TOOL = "TOOL"
    SYSTEM = "SYSTEM"
    ORGANISER = "ORGANISER"
    PARTICIPANT = "PARTICIPANT"


class MemoryType(StrEnum):
    """RFC-0001 section 4: the six memory object types."""

    FACT = "FACT"
    PREFERENCE = "PREFERENCE"
    DECISION = "DECISION"
    TASK = "TASK"
    SUMMARY = "SUMMARY"
    INTENT = "INTENT"


class SourceType(StrEnum):
    """RFC-0001 section 7: where a memory object's content came from."""

    USER_STATED = "USER_STATED"
    USER_DEMONSTRATED = "USER_DEMONSTRATED"
    SYSTEM_INFERRED = "SYSTEM_INFERRED"
    EXTERNAL_DOCUMENT = "EXTERNAL_DOCUMENT"
    TOOL_OUTPUT = "TOOL_OUTPUT"
    IMPORTED = "IMPORTED"


class LifecycleState(StrEnum):
    """RFC-0001 section 8. There is no DELETE state."""

    ACTIVE = "ACTIVE"
    DEPRECATED = "DEPRECATED"
    SUPERSEDED = "SUPERSEDED"
    ARCHIVED = "ARCHIVED"


class EdgeType(StrEnum):
    """RFC-0001 section 9: typed edges of the memory graph."""

    DERIVED_FROM = "DERIVED_FROM"
    SUPERSEDES = "SUPERSEDES"
    CONTRADICTS = "CONTRADICTS"
    SUPPORTS = "SUPPORTS"
    RELATES_TO = "RELATES_TO"
    ABOUT_ENTITY = "ABOUT_ENTITY"


class EntityType(StrEnum):
    """RFC-0001 section 10: entity kinds."""

    PERSON = "PERSON"
    PLACE = "PLACE"
    ORGANISATION = "ORGANISATION"
    PROJECT = "PROJECT"
    CONCEPT = "CONCEPT"
    TOOL = "TOOL"
    OTHER = "OTHER"


class EpistemicType(StrEnum):
    """RFC-0003: how a memory object is known."""

    OBSERVED = "OBSERVED"
    ASSERTED = "ASSERTED"
    INFERRED = "INFERRED"
    HYPOTHETICAL = "HYPOTHETICAL"
    CONDITIONAL = "CONDITIONAL"
    DEPRECATED = "DEPRECATED"
    UNVERIFIED = "UNVERIFIED"


class NamespaceType(StrEnum):
    """RFC-0004: namespace kinds."""

    PERSONAL = "PERSONAL"
    PROJECT = "PROJECT"
    ORGANISATION = "ORGANISATION"
    AGENT = "AGENT"
    SYSTEM = "SYSTEM"
    SANDBOX = "SANDBOX"


class Permission(StrEnum):
    """RFC-0004: namespace permissions (not hierarchical, default deny)."""

    READ = "READ"
    WRITE = "WRITE"
    ASSERT = "ASSERT"
    DEPRECATE = "DEPRECATE"
    ADMIN = "ADMIN"


class BranchType(StrEnum):
    """RFC-0012: branch kinds."""

    CANONICAL = "CANONICAL"
    SIMULATION = "SIMULATION"
    COUNTERFACTUAL = "COUNTERFACTUAL"
    PLANNING = "PLANNING"
    SANDBOX = "SANDBOX"
    TEST = "TEST"


class OpType(StrEnum):
    """Operation types: RFC-0002's list plus memroot's own (snapshots, states, audit records)."""

    # RFC-0002
    ASSERT = "ASSERT"
    DEPRECATE = "DEPRECATE"
    SUPERSEDE = "SUPERSEDE"
    ARCHIVE = "ARCHIVE"
    TOMBSTONE = "TOMBSTONE"
    EPISTEMIC_TRANSITION = "EPISTEMIC_TRANSITION"
    CONTRADICTION_NOTED = "CONTRADICTION_NOTED"
    DECAY_APPLIED = "DECAY_APPLIED"
    REINFORCE = "REINFORCE"
    PENALTY = "PENALTY"
    RELATE = "RELATE"
    ENTITY_CREATE = "ENTITY_CREATE"
    ENTITY_MERGE = "ENTITY_MERGE"
    SUMMARY_CREATED = "SUMMARY_CREATED"
    DEDUP_RESOLVED = "DEDUP_RESOLVED"
    INTEGRITY_CHECK = "INTEGRITY_CHECK"
    BRANCH_CREATE = "BRANCH_CREATE"
    BRANCH_CLOSE = "BRANCH_CLOSE"
    BRANCH_MERGE = "BRANCH_MERGE"
    BRANCH_POLICY = "BRANCH_POLICY"
    # RFC-0004 namespaces
    NAMESPACE_CREATE = "NAMESPACE_CREATE"
    GRANT = "GRANT"
    REVOKE = "REVOKE"
    # memroot: roots, states, audit records
    SNAPSHOT = "SNAPSHOT"
    FALSIFY = "FALSIFY"
    MARK_STALE = "MARK_STALE"
    RESTORE = "RESTORE"
    CASCADE = "CASCADE"
    SELFMODEL_SNAPSHOT = "SELFMODEL_SNAPSHOT"
    VIOLATION_RECORDED = "VIOLATION_RECORDED"
    CORRECTION_APPLIED = "CORRECTION_APPLIED"
    MERGE_OVERRIDE = "MERGE_OVERRIDE"
    KEY_ROTATE = "KEY_ROTATE"
    # memroot: writer keys under the root key (docs/FORMAT.md section 7.5)
    KEY_ADD = "KEY_ADD"
    KEY_REVOKE = "KEY_REVOKE"
    # memroot: which memories a run was handed (docs/FORMAT.md section 10)
    READ_RECEIPT = "READ_RECEIPT"
