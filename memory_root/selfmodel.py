"""SelfModel snapshots: an agent's identity and capability claims, tied to its memory_root.

A SelfModel says who the agent is and what it claims it can do; a memory_root says what it
has done and learned. A ``SELFMODEL_SNAPSHOT`` operation records a SelfModel *body* that cites
the latest live memory_root of its branch, and its own root::

    selfmodel_root = SHA-256("memroot/selfmodel/v1" || 0x00 || cbor(body))
    body = {"v": 1, "agent_id": str, "branch": str, "identity": {str: str},
            "capabilities": [{"name": str, "claim": str, "evidence": [str, ...]}, ...],
            "memory_root": bytes(32) | null}

``capabilities`` is sorted by name (names unique) and ``evidence`` is always present (maybe
empty), so one meaning has one encoding. Because the body contains ``memory_root``, the
selfmodel_root changes whenever the memory_root does: an auditor can go from "the agent
claims X" to "what the agent had done when it claimed X". The payload of the operation is
``{"body": body, "selfmodel_root": bytes(32)}``.

SelfModel hooks (entry-point group ``memroot.selfmodel``) are called after each snapshot
with the new live root, inside the snapshot's append transaction; a hook that returns a
``SelfModel`` gets a ``SELFMODEL_SNAPSHOT`` citing that root appended right after it.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from memroot.ledger import encoding
from memroot.ledger.errors import ValidationError
from memroot.ledger.hashing import HASH_SIZE, domain_hash
from memroot.memory_root.root import MemoryRoot

if TYPE_CHECKING:
    from memroot.memory_root.records import RootRecord

__all__ = [
    "SELFMODEL_GROUP",
    "SELFMODEL_TAG",
    "SELFMODEL_VERSION",
    "Capability",
    "SelfModel",
    "SelfModelHook",
    "StaticSelfModel",
    "load_selfmodel_hooks",
    "parse_selfmodel_payload",
    "selfmodel_payload",
    "selfmodel_root",
]

SELFMODEL_TAG: Final = "memroot/selfmodel/v1"
SELFMODEL_VERSION: Final = 1
SELFMODEL_GROUP: Final = "memroot.selfmodel"
_MAX_TEXT: Final = 4096
_MAX_ITEMS: Final = 1000


def _text(value: Any, where: str) -> str:
    if type(value) is not str or not value or len(value) > _MAX_TEXT:
        raise ValidationError(
            f"SelfModel {where} must be a non-empty string of at most {_MAX_TEXT} characters",
            field=where,
        )
    return value


@dataclass(frozen=True, slots=True)
class Capability:
    """One capability claim, with optional evidence references (benchmarks, roots, runs).

    Raises:
        ValidationError: if a field is empty, too long or not text.
    """

    name: str
    claim: str
    evidence: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _text(self.name, "capabilities.name")
        _text(self.claim, "capabilities.claim")
        if len(self.evidence) > _MAX_ITEMS:
            raise ValidationError("too many evidence items", field="capabilities.evidence")
        for e in self.evidence:
            _text(e, "capabilities.evidence")

    def to_cbor(self) -> dict[str, Any]:
        """Return the capability as it appears in a body."""
        return {"name": self.name, "claim": self.claim, "evidence": list(self.evidence)}


@dataclass(frozen=True, slots=True)
class SelfModel:
    """An agent's identity and capability claims (without the root it will cite).

    Raises:
        ValidationError: for an empty agent id, non-text identity values, or two
            capabilities with the same name.
    """

    agent_id: str
    identity: Mapping[str, str] = field(default_factory=dict)
    capabilities: tuple[Capability, ...] = ()

    def __post_init__(self) -> None:
        _text(self.agent_id, "agent_id")
        if len(self.identity) > _MAX_ITEMS or len(self.capabilities) > _MAX_ITEMS:
            raise ValidationError(
                "a SelfModel holds at most 1000 identity fields and capabilities", field="identity"
            )
        for k, v in self.identity.items():
            _text(k, "identity")
            _text(v, f"identity.{k}")
        names = [c.name for c in self.capabilities]
        if len(set(names)) != len(names):
            raise ValidationError("capability names must be unique", field="capabilities")

    def body(self, memory_root: bytes | None, branch: str) -> dict[str, Any]:
        """Return the canonical body citing ``memory_root`` on ``branch``."""
        return {
            "v": SELFMODEL_VERSION,
            "agent_id": self.agent_id,
            "branch": branch,
            "identity": dict(self.identity),
            "capabilities": [c.to_cbor() for c in sorted(self.capabilities, key=lambda c: c.name)],
            "memory_root": memory_root,
        }

    @classmethod
    def from_json(cls, obj: Any) -> SelfModel:
        """Build a SelfModel from ``{"agent_id", "identity", "capabilities"}`` (as JSON gives).

        Raises:
            ValidationError: naming the malformed field.
        """
        if type(obj) is not dict:
            raise ValidationError("a SelfModel must be a JSON object")
        extra = sorted(set(obj) - {"agent_id", "identity", "capabilities"})
        if extra:
            raise ValidationError(f"unknown SelfModel field {extra[0]!r}", field=extra[0])
        identity = obj.get("identity", {})
        caps = obj.get("capabilities", [])
        if type(identity) is not dict:
            raise ValidationError("SelfModel identity must be an object", field="identity")
        if type(caps) is not list or not all(type(c) is dict for c in caps):
            raise ValidationError(
                "SelfModel capabilities must be a list of objects", field="capabilities"
            )
        out = []
        for c in caps:
            extra = sorted(set(c) - {"name", "claim", "evidence"})
            if extra:
                raise ValidationError(
                    f"unknown capability field {extra[0]!r}", field=f"capabilities.{extra[0]}"
                )
            ev = c.get("evidence", [])
            if type(ev) is not list:
                raise ValidationError(
                    "capability evidence must be a list", field="capabilities.evidence"
                )
            out.append(Capability(c.get("name"), c.get("claim"), tuple(ev)))
        return cls(_text(obj.get("agent_id"), "agent_id"), identity, tuple(out))


def selfmodel_root(body: Mapping[str, Any]) -> bytes:
    """Return ``SHA-256("memroot/selfmodel/v1" || 0x00 || cbor(body))``.

    Raises:
        TypeError, ValueError: if the body holds a value outside the CBOR data model.
    """
    return domain_hash(SELFMODEL_TAG, encoding.encode(dict(body)))


def selfmodel_payload(model: SelfModel, memory_root: bytes | None, branch: str) -> dict[str, Any]:
    """Return the ``SELFMODEL_SNAPSHOT`` payload ``{"body", "selfmodel_root"}``."""
    body = model.body(memory_root, branch)
    return {"body": body, "selfmodel_root": selfmodel_root(body)}


def parse_selfmodel_payload(payload: Any) -> tuple[SelfModel, MemoryRoot | None, str, bytes]:
    """Parse and check a ``SELFMODEL_SNAPSHOT`` payload.

    Returns the model, the cited memory_root, the branch named in the body, and the
    selfmodel_root (checked against the body).

    Raises:
        ValidationError: naming the malformed field, or if ``selfmodel_root`` does not match
            the body, or the body is not in canonical form (capabilities unsorted, ...).
    """
    if type(payload) is not dict or set(payload) != {"body", "selfmodel_root"}:
        raise ValidationError(
            "SELFMODEL_SNAPSHOT payload must be {body, selfmodel_root}", field="payload"
        )
    body = payload["body"]
    keys = {"v", "agent_id", "branch", "identity", "capabilities", "memory_root"}
    if type(body) is not dict or set(body) != keys:
        raise ValidationError(
            f"SelfModel body must have exactly the keys {sorted(keys)}", field="payload.body"
        )
    if body["v"] != SELFMODEL_VERSION or type(body["v"]) is not int:
        raise ValidationError(
            f"unsupported SelfModel version {body['v']!r}", field="payload.body.v"
        )
    branch = _text(body["branch"], "payload.body.branch")
    cited = body["memory_root"]
    if cited is not None and (type(cited) is not bytes or len(cited) != HASH_SIZE):
        raise ValidationError(
            "SelfModel memory_root must be 32 bytes or null", field="payload.body.memory_root"
        )
    caps = body["capabilities"]
    if type(caps) is not list or not all(
        type(c) is dict and set(c) == {"name", "claim", "evidence"} and type(c["evidence"]) is list
        for c in caps
    ):
        raise ValidationError(
            "SelfModel capabilities must be [{name, claim, evidence}]",
            field="payload.body.capabilities",
        )
    if type(body["identity"]) is not dict:
        raise ValidationError("SelfModel identity must be a map", field="payload.body.identity")
    model = SelfModel(
        body["agent_id"],
        body["identity"],
        tuple(Capability(c["name"], c["claim"], tuple(c["evidence"])) for c in caps),
    )
    root = MemoryRoot(cited) if cited is not None else None
    if model.body(root, branch) != body:
        raise ValidationError(
            "SelfModel body is not canonical (capabilities must be sorted by name)",
            field="payload.body.capabilities",
        )
    claimed = payload["selfmodel_root"]
    if claimed != selfmodel_root(body):
        raise ValidationError(
            "selfmodel_root does not match the body", field="payload.selfmodel_root"
        )
    return model, root, branch, claimed


class SelfModelHook(Protocol):
    """Told about every new live memory_root; may answer with a SelfModel to record."""

    def on_root(self, root: RootRecord) -> SelfModel | None:
        """Return the SelfModel to record citing ``root``, or None to record nothing.

        Runs inside the snapshot's append transaction: raising refuses the snapshot. It must
        not write to the ledger itself.
        """


@dataclass(frozen=True, slots=True)
class StaticSelfModel:
    """The simplest SelfModel hook: record the same identity and claims at every root.

    The body still changes at every root (it cites the new memory_root), so the sequence of
    selfmodel_roots traces which behaviour history each claim was made against.
    """

    model: SelfModel

    def on_root(self, root: RootRecord) -> SelfModel | None:
        """Return the fixed model."""
        return self.model


def load_selfmodel_hooks(group: str = SELFMODEL_GROUP) -> list[SelfModelHook]:
    """Load the SelfModel hooks declared in the entry-point ``group``, sorted by name.

    An entry point names a hook object, or a class or callable with no arguments returning
    one.

    Raises:
        TypeError: naming the entry point whose object has no ``on_root``.
        ImportError: if its module cannot be imported.
    """
    out: list[SelfModelHook] = []
    for ep in sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name):
        obj = ep.load()
        if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "on_root")):
            obj = obj()
        if not callable(getattr(obj, "on_root", None)):
            raise TypeError(f"entry point {ep.name!r} in {group} is not a SelfModel hook")
        out.append(obj)
    return out
