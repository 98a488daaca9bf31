"""The refusals of the memory model: every one names the rule it enforces.

A request the memory model refuses raises a ``RuleError`` (a
``memroot.ledger.errors.RefusedError``, so
the append rolls back and the CLI exits 3). ``rule`` is a short, stable name of the rule, e.g.
``"RFC-0001 lifecycle"`` or ``"RFC-0003 starting confidence"``; the message starts with it.
Bad payload fields raise ``memroot.ledger.errors.ValidationError`` naming the field instead.
"""

from __future__ import annotations

from typing import Final

from memroot.ledger.errors import RefusedError

__all__ = [
    "ENTITY",
    "EPISTEMIC_TRANSITION",
    "EVIDENCE",
    "GRAPH",
    "IDENTITY",
    "LIFECYCLE",
    "MERGE",
    "NAMESPACE_POLICY",
    "REFERENCE",
    "SCORING",
    "STARTING_CONFIDENCE",
    "TOMBSTONE_DEPENDENTS",
    "PermissionRefused",
    "RuleError",
]

LIFECYCLE: Final = "RFC-0001 lifecycle"
IDENTITY: Final = "RFC-0001 stable identity"
EVIDENCE: Final = "RFC-0001 evidence"
GRAPH: Final = "RFC-0001 graph"
ENTITY: Final = "RFC-0001 entity"
REFERENCE: Final = "RFC-0002 reference"
STARTING_CONFIDENCE: Final = "RFC-0003 starting confidence"
EPISTEMIC_TRANSITION: Final = "RFC-0003 epistemic transition"
SCORING: Final = "RFC-0003 scoring"
NAMESPACE_POLICY: Final = "RFC-0004 namespace policy"
TOMBSTONE_DEPENDENTS: Final = "memroot erasure of evidence"
MERGE: Final = "RFC-0012 merge"


class RuleError(RefusedError):
    """A well-formed operation that breaks a rule of the memory model; nothing was written.

    Attributes:
        rule: the name of the rule broken (one of the constants of this module).
    """

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule


class PermissionRefused(RuleError):
    """An actor without the permission a namespace's policy requires (RFC-0004, default deny).

    Attributes:
        actor_id: who asked.
        namespace_id: the namespace whose policy refused.
        permission: the permission that was missing.
    """

    def __init__(self, actor_id: str, namespace_id: str, permission: str, what: str) -> None:
        super().__init__(
            NAMESPACE_POLICY,
            f"actor {actor_id!r} lacks {permission} on namespace {namespace_id!r} ({what}); "
            "the namespace has a policy, so everything not granted is denied",
        )
        self.actor_id = actor_id
        self.namespace_id = namespace_id
        self.permission = permission
