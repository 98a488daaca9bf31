"""The Projection protocol: a deterministic fold of ledger entries into a summary (SPEC 6).

A projection is a rule an auditor can re-run: an ``id``, a ``version``, ``params``, an initial
state, ``fold(state, entry) -> state`` and ``summarize(state) -> Summary``. The triple
``{id, version, params}`` is the *rule*; its digest is committed in every memory_root, so
changing the version or any parameter changes every root built with it.

Determinism is the whole contract. A projection must not read the clock, draw random numbers,
do I/O, or let the iteration order of a dict or set reach its output. Its state is persisted,
canonically encoded, with the newest snapshot, so the next snapshot folds only the entries
after the previous high-water mark: the state must be a value of memroot's CBOR data model
(``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``, ``dict`` with text keys),
or the projection defines ``encode_state(state) -> bytes`` and ``decode_state(bytes)`` (for
instance to keep a set in memory and store it sorted). A state read back from storage (maps
in canonical key order) must fold exactly like the state that was written.

Digests (``docs/FORMAT.md §6``):

- ``rule_digest = SHA-256("memroot/rule/v1" || 0x00 || cbor({id, version, params}))``
- ``summary_digest = SHA-256("memroot/summary/v1" || 0x00 || summary_bytes)``
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NewType, Protocol

from memroot.ledger import encoding
from memroot.ledger.entries import Entry
from memroot.ledger.hashing import domain_hash

__all__ = [
    "PROJECTION_ID_RE",
    "RULE_TAG",
    "SUMMARY_TAG",
    "Projection",
    "RuleDigest",
    "StateProjection",
    "Summary",
    "SummaryDigest",
    "check_projection",
    "decode_state",
    "encode_state",
    "is_state_projection",
    "read_state",
    "rule_digest",
    "rule_preimage",
    "summary_digest",
]

RULE_TAG: Final = "memroot/rule/v1"
SUMMARY_TAG: Final = "memroot/summary/v1"
PROJECTION_ID_RE: Final = re.compile(r"[a-z0-9][a-z0-9._:/-]{0,99}\Z")

RuleDigest = NewType("RuleDigest", bytes)
"""SHA-256 with tag ``memroot/rule/v1`` over ``cbor({id, version, params})``."""
SummaryDigest = NewType("SummaryDigest", bytes)
"""SHA-256 with tag ``memroot/summary/v1`` over a summary's canonical bytes."""


@dataclass(frozen=True, slots=True)
class Summary:
    """What ``summarize`` returns: canonical CBOR bytes and the number of items they hold.

    Raises:
        TypeError: if ``data`` is not bytes or ``count`` not an int.
        ValueError: if ``count`` is negative.
    """

    data: bytes
    count: int

    def __post_init__(self) -> None:
        if type(self.data) is not bytes:
            raise TypeError(f"summary data must be bytes, got {type(self.data).__name__}")
        if type(self.count) is not int:
            raise TypeError(f"summary count must be an int, got {type(self.count).__name__}")
        if self.count < 0:
            raise ValueError(f"summary count must not be negative, got {self.count}")

    @property
    def digest(self) -> SummaryDigest:
        """Return ``summary_digest`` of the bytes."""
        return summary_digest(self.data)


class Projection(Protocol):
    """A deterministic fold over ledger entries (see the module docstring for the contract).

    ``types`` (optional, may be None) names the entry types the projection reads; the
    engine calls ``fold`` only for entries of those types, so ``fold`` must leave the state
    unchanged for any other type. It is an optimisation, not part of the rule.
    """

    @property
    def id(self) -> str:
        """Stable identifier, ``[a-z0-9][a-z0-9._:/-]{0,99}``; roots sort projections by it."""

    @property
    def version(self) -> int:
        """Rule version: bump it whenever fold or summarize would give different output."""

    @property
    def params(self) -> Mapping[str, Any]:
        """Parameters of the rule (a CBOR map with text keys); committed in the rule digest."""

    @property
    def types(self) -> frozenset[str] | None:
        """Entry types ``fold`` reads, or None for every entry."""

    def initial(self) -> Any:
        """Return a fresh initial state (a new object each call: fold may mutate it)."""

    def fold(self, state: Any, entry: Entry) -> Any:
        """Return the state after ``entry`` (may mutate and return ``state``)."""

    def summarize(self, state: Any) -> Summary:
        """Return the canonical summary bytes of ``state`` and its item count."""


class StateProjection(Projection, Protocol):
    """A projection whose summary is read from derived state instead of folded.

    Its ``fold`` folds nothing (``types`` is empty); ``summarize_state`` returns the summary
    of the derived state of ``branch`` *as of* entry ``as_of``, so the result is still a
    function of the log alone (the derived state is itself a deterministic replay) and an
    auditor with the same derived tables recomputes it. The engine calls it instead of
    ``summarize``.
    """

    def summarize_state(self, db: Any, branch: str, as_of: int) -> Summary:
        """Return the summary of ``branch``'s derived state as of entry ``as_of``."""


def is_state_projection(projection: object) -> bool:
    """Return True when ``projection`` summarises derived state (``summarize_state``)."""
    return callable(getattr(projection, "summarize_state", None))


def read_state(projection: Projection, db: Any, branch: str, as_of: int) -> Summary:
    """Return a state projection's summary of ``branch`` as of entry ``as_of`` in ``db``.

    Raises:
        TypeError: if ``projection`` is not a state projection or returns no ``Summary``.
    """
    if not is_state_projection(projection):
        raise TypeError(f"projection {projection.id!r} is not a state projection")
    summary = projection.summarize_state(db, branch, as_of)  # type: ignore[attr-defined]
    if not isinstance(summary, Summary):
        raise TypeError(f"projection {projection.id!r} returned {type(summary).__name__}")
    return summary


def encode_state(projection: Projection, state: Any) -> bytes:
    """Return the canonical bytes of a projection's state (stored with the newest root).

    A projection may define ``encode_state`` / ``decode_state`` (e.g. to keep a set in
    memory); the default is canonical CBOR of the state itself.

    Raises:
        TypeError, ValueError: if the state is outside the CBOR data model.
    """
    custom = getattr(projection, "encode_state", None)
    return custom(state) if callable(custom) else encoding.encode(state)


def decode_state(projection: Projection, data: bytes) -> Any:
    """Return the state ``encode_state`` stored.

    Raises:
        DecodeError: if ``data`` is not canonical CBOR.
    """
    custom = getattr(projection, "decode_state", None)
    return custom(data) if callable(custom) else encoding.decode(data)


def rule_preimage(projection: Projection) -> bytes:
    """Return ``cbor({id, version, params})``, the bytes the rule digest covers.

    Raises:
        TypeError, ValueError: if params hold a value outside the CBOR data model.
    """
    return encoding.encode(
        {"id": projection.id, "version": projection.version, "params": dict(projection.params)}
    )


def rule_digest(projection: Projection) -> RuleDigest:
    """Return ``SHA-256("memroot/rule/v1" || 0x00 || cbor({id, version, params}))``.

    Raises:
        TypeError, ValueError: if params hold a value outside the CBOR data model.
    """
    return RuleDigest(domain_hash(RULE_TAG, rule_preimage(projection)))


def summary_digest(data: bytes) -> SummaryDigest:
    """Return ``SHA-256("memroot/summary/v1" || 0x00 || summary_bytes)``."""
    return SummaryDigest(domain_hash(SUMMARY_TAG, data))


def check_projection(projection: Projection) -> None:
    """Check that an object looks like a usable projection.

    Raises:
        TypeError: if a member is missing or of the wrong type, or params are not CBOR.
        ValueError: if the id does not match ``PROJECTION_ID_RE`` or version is negative.
    """
    for name in ("id", "version", "params", "initial", "fold", "summarize"):
        if not hasattr(projection, name):
            raise TypeError(f"{projection!r} is not a projection: it has no {name!r}")
    pid = projection.id
    if type(pid) is not str or not PROJECTION_ID_RE.match(pid):
        raise ValueError(f"projection id {pid!r} must match {PROJECTION_ID_RE.pattern}")
    if type(projection.version) is not int or projection.version < 0:
        raise ValueError(f"projection {pid}: version must be a non-negative int")
    if not isinstance(projection.params, Mapping):
        raise TypeError(f"projection {pid}: params must be a mapping")
    encoding.check(dict(projection.params))
    types = getattr(projection, "types", None)
    if types is not None and not (
        isinstance(types, frozenset) and all(type(t) is str for t in types)
    ):
        raise TypeError(f"projection {pid}: types must be a frozenset of str or None")
