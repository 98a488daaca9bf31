"""The memory_root format (SPEC "Normative formats" 6, docs/FORMAT.md §6): pure functions.

A snapshot fixes a high-water mark on one branch and commits to every projection's rule and
summary (version 1) and, from version 2 (docs/FORMAT.md §6.13), to the memory map's root
(§6.12) too: the v2 preimage has one more key, ``map``, and is hashed under
``memroot/root/v2``; from version 3 (§6.16) ``projections`` is the hash of the list
(``list_digest``) and the preimage is hashed under ``memroot/root/v3``. This memroot writes
v3 roots; v1 and v2 roots keep verifying::

    rule_digest    = SHA-256("memroot/rule/v1"    || 0x00 || cbor({id, version, params}))
    summary_digest = SHA-256("memroot/summary/v1" || 0x00 || summary_bytes)
    memory_root    = SHA-256("memroot/root/v1"    || 0x00 || cbor({v, branch, parent,
                         high_water: {seq, entry_hash, tree_size, tree_root},
                         projections: [{id, rule, digest, count}, ...]}))

``projections`` is sorted by id; ``parent`` is the previous root of the branch (null for the
first). The ``SNAPSHOT`` entry's payload is exactly the preimage map plus ``memory_root``, so
an auditor recomputes the root from the payload alone and the Merkle tree proves the entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NewType

from memroot.ledger import encoding
from memroot.ledger.errors import ValidationError
from memroot.ledger.hashing import HASH_SIZE, EntryHash, TreeRoot, domain_hash
from memroot.projections.projection import (
    PROJECTION_ID_RE,
    Projection,
    RuleDigest,
    Summary,
    SummaryDigest,
    rule_digest,
)

__all__ = [
    "PROJECTIONS_TAG",
    "ROOT_TAG",
    "ROOT_V2_TAG",
    "ROOT_V3_TAG",
    "ROOT_VERSION",
    "ROOT_VERSIONS",
    "HighWater",
    "MemoryRoot",
    "ProjectionDigest",
    "RootPreimage",
    "compute_root",
    "list_digest",
    "projection_digest",
]

ROOT_TAG: Final = "memroot/root/v1"
ROOT_V2_TAG: Final = "memroot/root/v2"
ROOT_V3_TAG: Final = "memroot/root/v3"
PROJECTIONS_TAG: Final = "memroot/projections/v1"
"""Tag of a v3 root's ``projections``: the hash of the projection list (FORMAT §6.16)."""
ROOT_VERSION: Final = 3
"""The version this memroot writes (FORMAT §6.16). v1 and v2 roots are still read and
verified; the writer refuses to append any other version. A v3 entry holds its projection
list by its hash: the falsification layer's dependency index (``memory_root.falsify.deps``)
takes the list from the root's stored records, checked against that hash."""
ROOT_VERSIONS: Final = (1, 2, 3)
_TAGS: Final = {1: ROOT_TAG, 2: ROOT_V2_TAG, 3: ROOT_V3_TAG}

MemoryRoot = NewType("MemoryRoot", bytes)
"""SHA-256 with tag ``memroot/root/v<v>`` over a root's canonical preimage."""


def _bad(message: str, field: str) -> ValidationError:
    return ValidationError(
        f"SNAPSHOT payload: {message}", field=f"payload.{field}" if field else "payload"
    )


def _hash32(value: Any, field: str) -> bytes:
    if type(value) is not bytes or len(value) != HASH_SIZE:
        raise _bad(f"{field} must be a {HASH_SIZE}-byte string", field)
    return value


def _uint(value: Any, field: str) -> int:
    if type(value) is not int or value < 0:
        raise _bad(f"{field} must be a non-negative integer", field)
    return value


def _exact_keys(obj: Any, keys: frozenset[str], field: str) -> Mapping[str, Any]:
    what = field or "the payload"
    if type(obj) is not dict:
        raise _bad(f"{what} must be a map", field)
    if set(obj) != keys:
        raise _bad(f"{what} must have exactly the keys {', '.join(sorted(keys))}", field)
    return obj


@dataclass(frozen=True, slots=True)
class HighWater:
    """The last entry a snapshot covers: its seq and hash, and the tree that ends with it.

    Raises:
        ValueError: if ``tree_size != seq + 1`` or a hash is not 32 bytes.
    """

    seq: int
    entry_hash: EntryHash
    tree_size: int
    tree_root: TreeRoot

    def __post_init__(self) -> None:
        if self.seq < 0 or self.tree_size != self.seq + 1:
            raise ValueError(
                f"high-water tree_size {self.tree_size} must be seq + 1 ({self.seq + 1})"
            )
        if len(self.entry_hash) != HASH_SIZE or len(self.tree_root) != HASH_SIZE:
            raise ValueError("high-water hashes must be 32 bytes")

    def to_cbor(self) -> dict[str, Any]:
        """Return the ``high_water`` map of the preimage."""
        return {
            "seq": self.seq,
            "entry_hash": self.entry_hash,
            "tree_size": self.tree_size,
            "tree_root": self.tree_root,
        }

    @classmethod
    def from_cbor(cls, obj: Any) -> HighWater:
        """Parse a ``high_water`` map.

        Raises:
            ValidationError: naming the malformed field.
        """
        m = _exact_keys(
            obj, frozenset({"seq", "entry_hash", "tree_size", "tree_root"}), "high_water"
        )
        seq = _uint(m["seq"], "high_water.seq")
        size = _uint(m["tree_size"], "high_water.tree_size")
        if size != seq + 1:
            raise _bad("high_water.tree_size must be high_water.seq + 1", "high_water.tree_size")
        return cls(
            seq,
            EntryHash(_hash32(m["entry_hash"], "high_water.entry_hash")),
            size,
            TreeRoot(_hash32(m["tree_root"], "high_water.tree_root")),
        )


@dataclass(frozen=True, slots=True)
class ProjectionDigest:
    """One item of a root's ``projections`` list: ``{id, rule, digest, count}``."""

    id: str
    rule: RuleDigest
    digest: SummaryDigest
    count: int

    def to_cbor(self) -> dict[str, Any]:
        """Return the item as it appears in the preimage."""
        return {"id": self.id, "rule": self.rule, "digest": self.digest, "count": self.count}

    @classmethod
    def from_cbor(cls, obj: Any, i: int) -> ProjectionDigest:
        """Parse item ``i`` of a ``projections`` list.

        Raises:
            ValidationError: naming the malformed field.
        """
        where = f"projections[{i}]"
        m = _exact_keys(obj, frozenset({"id", "rule", "digest", "count"}), where)
        pid = m["id"]
        if type(pid) is not str or not PROJECTION_ID_RE.match(pid):
            raise _bad(f"{where}.id is not a projection id", f"{where}.id")
        return cls(
            pid,
            RuleDigest(_hash32(m["rule"], f"{where}.rule")),
            SummaryDigest(_hash32(m["digest"], f"{where}.digest")),
            _uint(m["count"], f"{where}.count"),
        )


def projection_digest(projection: Projection, summary: Summary) -> ProjectionDigest:
    """Return the preimage item of one projection's summary."""
    return ProjectionDigest(projection.id, rule_digest(projection), summary.digest, summary.count)


def list_digest(items: Sequence[ProjectionDigest]) -> bytes:
    """Return ``SHA-256("memroot/projections/v1" || 0x00 || cbor([{id, rule, digest, count}]))``.

    What a v3 root's ``projections`` holds (docs/FORMAT.md §6.16): the list, sorted by id,
    committed by one hash.
    """
    return domain_hash(PROJECTIONS_TAG, encoding.encode([p.to_cbor() for p in items]))


_PAYLOAD_KEYS: Final = frozenset(
    {"v", "branch", "parent", "high_water", "projections", "memory_root"}
)
_PAYLOAD_KEYS_V2: Final = _PAYLOAD_KEYS | {"map"}


@dataclass(frozen=True, slots=True)
class RootPreimage:
    """Everything a memory_root commits to; ``root()`` hashes it.

    ``v`` is 1 (no map, ``map_root`` None), 2 (``map_root`` the memory map's root at the
    high-water, docs/FORMAT.md §6.13) or 3 (as 2, the projection list committed by one hash,
    ``list_digest``, §6.16). A v3 preimage parsed from a ``SNAPSHOT`` payload knows only
    that hash (``projections_digest``, ``projections`` empty): ``with_projections`` attaches
    the list once one that hashes to it is known (replayed or stored).

    Raises:
        ValueError: if projections are not sorted by id or an id repeats, parent or the map
            root is not 32 bytes, ``map_root`` does not go with ``v``, or a
            ``projections_digest`` is given for another version.
    """

    branch: str
    parent: MemoryRoot | None
    high_water: HighWater
    projections: tuple[ProjectionDigest, ...]
    v: int = 1
    map_root: bytes | None = None
    projections_digest: bytes | None = None

    def __post_init__(self) -> None:
        ids = [p.id for p in self.projections]
        if ids != sorted(set(ids)):
            raise ValueError("projections must be sorted by id with no id twice")
        if self.parent is not None and len(self.parent) != HASH_SIZE:
            raise ValueError("parent must be a 32-byte memory_root or None")
        if self.v not in ROOT_VERSIONS:
            raise ValueError(f"root version must be one of {ROOT_VERSIONS}, not {self.v!r}")
        if (self.v >= 2) != (self.map_root is not None):
            raise ValueError("a v2 or v3 root has a map root and a v1 root none")
        if self.map_root is not None and len(self.map_root) != HASH_SIZE:
            raise ValueError("the map root must be 32 bytes")
        if self.projections_digest is not None and (
            self.v != 3 or len(self.projections_digest) != HASH_SIZE
        ):
            raise ValueError("only a v3 root has a 32-byte projections digest")

    @property
    def listed(self) -> bytes:
        """The hash of the projection list (a v3 root's ``projections``)."""
        if self.projections_digest is not None:
            return self.projections_digest
        return list_digest(self.projections)

    @property
    def list_known(self) -> bool:
        """False for a v3 preimage whose projection list is known by its hash only."""
        return self.projections_digest is None or self.projections_digest == list_digest(
            self.projections
        )

    def with_projections(self, items: Sequence[ProjectionDigest]) -> RootPreimage:
        """Return this preimage with its projection list ``items`` (same root).

        Raises:
            ValueError: if ``items`` does not hash to a v3 root's ``projections``, or is not
                this v1/v2 preimage's own list.
        """
        items = tuple(items)
        if self.v != 3:
            if items != self.projections:
                raise ValueError("a v1/v2 preimage carries its own projection list")
            return self
        if list_digest(items) != self.listed:
            raise ValueError("the projection list does not hash to the root's projections")
        return RootPreimage(self.branch, self.parent, self.high_water, items, 3, self.map_root)

    def to_cbor(self) -> dict[str, Any]:
        """Return the preimage map (without ``memory_root``)."""
        out: dict[str, Any] = {
            "v": self.v,
            "branch": self.branch,
            "parent": self.parent,
            "high_water": self.high_water.to_cbor(),
            "projections": (
                self.listed if self.v == 3 else [p.to_cbor() for p in self.projections]
            ),
        }
        if self.v >= 2:
            out["map"] = self.map_root
        return out

    def preimage(self) -> bytes:
        """Return ``cbor(preimage map)``: the bytes after the tag in the root's hash."""
        return encoding.encode(self.to_cbor())

    def root(self) -> MemoryRoot:
        """Return ``SHA-256("memroot/root/v<v>" || 0x00 || preimage)``."""
        return MemoryRoot(domain_hash(_TAGS[self.v], self.preimage()))

    def payload(self) -> dict[str, Any]:
        """Return the ``SNAPSHOT`` operation payload: the preimage map plus ``memory_root``."""
        return {**self.to_cbor(), "memory_root": self.root()}

    @classmethod
    def from_payload(cls, payload: Any) -> tuple[RootPreimage, MemoryRoot]:
        """Parse a ``SNAPSHOT`` payload into its preimage and the root it claims.

        The claimed root is returned as found; compare it with ``preimage.root()``.

        Raises:
            ValidationError: naming the malformed or unknown field.
        """
        v = payload.get("v") if type(payload) is dict else None
        if type(v) is not int or v not in ROOT_VERSIONS:
            if type(payload) is not dict or "v" not in payload:
                _exact_keys(payload, _PAYLOAD_KEYS_V2, "")
            raise _bad(
                f"unsupported root version {v!r} (this memroot reads 1, 2 and 3, writes "
                f"{ROOT_VERSION})",
                "v",
            )
        m = _exact_keys(payload, _PAYLOAD_KEYS_V2 if v >= 2 else _PAYLOAD_KEYS, "")
        if type(m["branch"]) is not str:
            raise _bad("branch must be a text string", "branch")
        parent = None if m["parent"] is None else MemoryRoot(_hash32(m["parent"], "parent"))
        if v == 3:
            pre = cls(
                m["branch"],
                parent,
                HighWater.from_cbor(m["high_water"]),
                (),
                3,
                _hash32(m["map"], "map"),
                _hash32(m["projections"], "projections"),
            )
            return pre, MemoryRoot(_hash32(m["memory_root"], "memory_root"))
        items = m["projections"]
        if type(items) is not list:
            raise _bad("projections must be a list", "projections")
        digests = tuple(ProjectionDigest.from_cbor(x, i) for i, x in enumerate(items))
        ids = [d.id for d in digests]
        if ids != sorted(set(ids)):
            raise _bad("projections must be sorted by id with no id twice", "projections")
        map_root = _hash32(m["map"], "map") if v == 2 else None  # v3 returned above
        pre = cls(m["branch"], parent, HighWater.from_cbor(m["high_water"]), digests, v, map_root)
        return pre, MemoryRoot(_hash32(m["memory_root"], "memory_root"))


def compute_root(
    branch: str,
    parent: MemoryRoot | None,
    high_water: HighWater,
    summaries: Sequence[tuple[Projection, Summary]],
    map_root: bytes | None = None,
    v: int | None = None,
) -> RootPreimage:
    """Return the preimage of a root from each projection's summary (any order).

    With ``map_root`` a root of version ``v`` (default: ``ROOT_VERSION``, the version this
    memroot writes; 2 for docs/FORMAT.md §6.13's vectors), else a v1 root.

    Raises:
        ValueError: if two projections share an id, or ``v`` does not go with ``map_root``.
    """
    items = sorted((projection_digest(p, s) for p, s in summaries), key=lambda d: d.id)
    if v is None:
        v = 1 if map_root is None else ROOT_VERSION
    return RootPreimage(branch, parent, high_water, tuple(items), v, map_root)
