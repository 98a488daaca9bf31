"""The memory map's tree math (docs/FORMAT.md §6.12): keys, hashes, roots, paths, one copy.

Pure functions and frozen values, no storage. ``memroot.memory_root.state_map`` builds,
updates and proves maps with them, and the offline checker of proof files
(``memroot.ledger.bundle.proof_file``, which sits below memory_root) checks paths with them:
both run this one copy of the rules, at the auditor's level.

Two levels of one tree shape. The *namespace tree* maps ``namespace_key(ns)`` to the root of
that namespace's *item tree*, which maps ``item_key(kind, id)`` to ``value_hash(state)``.
Both are binary sparse Merkle trees over 256-bit keys (bits read most significant first)
with the leaf shortcut of the Jellyfish Merkle tree::

    EMPTY           = SHA-256("memroot/map/empty/v1" || 0x00)
    leaf(key, v)    = SHA-256("memroot/map/leaf/v1"  || 0x00 || key || v)
    node(l, r)      = SHA-256("memroot/map/node/v1"  || 0x00 || l || r)
    namespace_key   = SHA-256("memroot/map/ns/v1"    || 0x00 || utf8(namespace))
    item_key        = SHA-256("memroot/map/item/v1"  || 0x00 || cbor([kind, id]))
    value_hash      = SHA-256("memroot/map/value/v1" || 0x00 || cbor(state))

    H(S, d) = EMPTY if S is empty; leaf(k, v) if S = {(k, v)}; else node(H(S0), H(S1))

The two hot loops, a path's walk down stored nodes (``descend``) and a path's check
(``path_root``), have a native counterpart (``memroot._native.map_descend``,
``map_path_root``); these are the reference, and the native ones are tested equal to them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NewType

from memroot.ledger import encoding
from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.errors import IntegrityError, ProofError
from memroot.ledger.hashing import HASH_SIZE, domain_hash

__all__ = [
    "EMPTY",
    "EMPTY_TAG",
    "ITEM_TAG",
    "KEY_BITS",
    "LEAF_TAG",
    "NODE_TAG",
    "NS_TAG",
    "VALUE_TAG",
    "Inner",
    "Leaf",
    "MapHash",
    "MapKey",
    "MapProof",
    "Node",
    "NodeRow",
    "bit",
    "build",
    "check_hash",
    "check_rows_into",
    "descend",
    "descend_all",
    "item_key",
    "leaf_hash",
    "namespace_key",
    "node_from_row",
    "node_hash",
    "path_root",
    "root_of",
    "row_of",
    "tree_root",
    "value_hash",
    "value_hash_of",
    "verify_absent",
    "verify_included",
]

EMPTY_TAG: Final = "memroot/map/empty/v1"
LEAF_TAG: Final = "memroot/map/leaf/v1"
NODE_TAG: Final = "memroot/map/node/v1"
NS_TAG: Final = "memroot/map/ns/v1"
ITEM_TAG: Final = "memroot/map/item/v1"
VALUE_TAG: Final = "memroot/map/value/v1"
KEY_BITS: Final = 256

MapKey = NewType("MapKey", bytes)
"""A 32-byte key of either tree (``namespace_key`` or ``item_key``)."""
MapHash = NewType("MapHash", bytes)
"""The hash of a subtree: ``EMPTY``, a leaf hash or a node hash."""

EMPTY: Final = MapHash(domain_hash(EMPTY_TAG, b""))


def namespace_key(namespace: str) -> MapKey:
    """Return the key of a namespace in the namespace tree."""
    return MapKey(domain_hash(NS_TAG, namespace.encode("utf-8")))


def item_key(kind: str, item_id: str) -> MapKey:
    """Return the key of an item (``kind`` as FORMAT.md §6.12 lists, and its id).

    Raises:
        TypeError: if ``kind`` or ``item_id`` is not text.
    """
    if type(kind) is not str or type(item_id) is not str:
        raise TypeError("an item's kind and id must be text")
    return MapKey(domain_hash(ITEM_TAG, encoding.encode([kind, item_id])))


def value_hash_of(state_cbor: bytes) -> bytes:
    """Return the value hash over a state's canonical CBOR bytes, exactly as given."""
    return domain_hash(VALUE_TAG, state_cbor)


def value_hash(state: Any) -> bytes:
    """Return the hash a leaf holds for an item's state (a CBOR value).

    Raises:
        TypeError, ValueError: if ``state`` is outside the CBOR data model.
    """
    return value_hash_of(encoding.encode(state))


def check_hash(value: bytes, what: str) -> None:
    """Raise ValueError naming ``what`` unless ``value`` is 32 bytes."""
    if type(value) is not bytes or len(value) != HASH_SIZE:
        raise ValueError(f"{what} must be {HASH_SIZE} bytes")


def leaf_hash(key: bytes, value: bytes) -> MapHash:
    """Return ``SHA-256("memroot/map/leaf/v1" || 0x00 || key || value)``.

    Raises:
        ValueError: if ``key`` or ``value`` is not 32 bytes.
    """
    check_hash(key, "a map key")
    check_hash(value, "a map value")
    return MapHash(domain_hash(LEAF_TAG, key + value))


def node_hash(left: bytes, right: bytes) -> MapHash:
    """Return ``SHA-256("memroot/map/node/v1" || 0x00 || left || right)``."""
    return MapHash(domain_hash(NODE_TAG, left + right))


def bit(key: bytes, depth: int) -> int:
    """Return bit ``depth`` of ``key``, most significant bit of byte 0 first."""
    return (key[depth >> 3] >> (7 - (depth & 7))) & 1


def _split(keys: Sequence[bytes], lo: int, hi: int, depth: int) -> int:
    """Return the first index in ``keys[lo:hi]`` (sorted, one ``depth``-bit prefix) with bit 1."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if bit(keys[mid], depth):
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True, slots=True)
class Leaf:
    """A leaf: its key and value (the value hash, or a namespace's item-tree root)."""

    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class Inner:
    """An interior node: its two children's hashes."""

    left: bytes
    right: bytes


Node = Leaf | Inner

NodeRow = tuple[bool, bytes, bytes]
"""A node as the walks read it: ``(is_leaf, key or left, value or right)``, hash checked."""


def row_of(node: Node) -> NodeRow:
    """Return ``node`` as a ``NodeRow``."""
    if isinstance(node, Leaf):
        return (True, node.key, node.value)
    return (False, node.left, node.right)


def node_from_row(h: bytes, is_leaf: bool, a: bytes, b: bytes) -> Node:
    """Return the node a stored row ``(hash, leaf, a, b)`` holds, once it hashes to ``h``.

    Raises:
        IntegrityError: if the row is malformed or hashes to another hash (an edited row).
    """
    node: Node
    try:
        check_hash(a, "a node's first field")
        check_hash(b, "a node's second field")
        node, got = (Leaf(a, b), leaf_hash(a, b)) if is_leaf else (Inner(a, b), node_hash(a, b))
    except ValueError as e:
        raise IntegrityError(f"memory map node {h.hex()} is malformed: {e}") from e
    if got != h:
        raise IntegrityError(
            f"memory map node {h.hex()} was edited (its row hashes to {got.hex()})",
            expected=h.hex(),
            actual=got.hex(),
        )
    return node


def check_rows_into(rows: list[Any], known: dict[bytes, NodeRow]) -> None:
    """Check stored rows ``(hash, leaf, a, b)`` as read (``leaf`` 0 or 1); add them to ``known``.

    Nothing is added unless every row is well formed and hashes to its hash.

    Raises:
        IntegrityError: naming the first row that is malformed or edited.
    """
    if _N is not None and type(rows) is list and _N.map_rows_into(rows, known):
        return
    checked = [(bytes(h), bool(leaf), bytes(a), bytes(b)) for h, leaf, a, b in rows]
    for h, is_leaf, a, b in checked:
        if type(is_leaf) is not bool:
            raise IntegrityError(f"memory map node {h.hex()} is malformed: its leaf flag")
        node_from_row(h, is_leaf, a, b)
    for h, is_leaf, a, b in checked:
        known[h] = (is_leaf, a, b)


def build(
    keys: Sequence[bytes],
    values: Sequence[bytes],
    lo: int,
    hi: int,
    depth: int,
    out: dict[bytes, Node] | None,
) -> MapHash:
    """Return ``H`` of sorted ``keys[lo:hi]`` (one ``depth``-bit prefix); record nodes in ``out``.

    Raises:
        ValueError: if a key appears twice or a key or value is not 32 bytes.
    """
    if lo == hi:
        return EMPTY
    if hi - lo == 1:
        h = leaf_hash(keys[lo], values[lo])
        if out is not None:
            out[h] = Leaf(keys[lo], values[lo])
        return h
    if depth >= KEY_BITS:
        raise ValueError("two leaves with one key")
    mid = _split(keys, lo, hi, depth)
    left = build(keys, values, lo, mid, depth + 1, out)
    right = build(keys, values, mid, hi, depth + 1, out)
    h = node_hash(left, right)
    if out is not None:
        out[h] = Inner(left, right)
    return h


def root_of(leaves: Mapping[bytes, bytes]) -> MapHash:
    """Return the root of the tree holding exactly ``leaves`` (key -> value, 32 bytes each).

    Raises:
        ValueError: if a key or value is not 32 bytes.
    """
    keys = sorted(leaves)
    return build(keys, [leaves[k] for k in keys], 0, len(keys), 0, None)


def tree_root(pairs: Sequence[tuple[bytes, bytes]]) -> MapHash:
    """Return ``H(S, 0)`` of §6.12 for ``pairs`` sorted by key, each key once.

    Raises:
        ValueError: if the keys are not strictly increasing, or not 32 bytes.
    """
    keys = [k for k, _ in pairs]
    if any(a >= b for a, b in itertools.pairwise(keys)):
        raise ValueError("map pairs must be sorted by key, each key once")
    return build(keys, [v for _, v in pairs], 0, len(keys), 0, None)


# -- paths ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MapProof:
    """Where a key's path ends in one tree: the siblings from the root down, and the end.

    ``leaf`` is the leaf the path ends at (the key's own, or the one other leaf of the
    subtree the key would be in), or None when it ends at an empty subtree.

    Raises:
        ValueError: at construction, if there are more than 256 siblings or a hash is not
            32 bytes.
    """

    siblings: tuple[bytes, ...]
    leaf: Leaf | None

    def __post_init__(self) -> None:
        sib = self.siblings
        if _N is None or type(sib) is not tuple or not _N.map_hashes_ok(sib):
            if len(sib) > KEY_BITS:
                raise ValueError(f"a map proof has at most {KEY_BITS} siblings")
            if any(type(s) is not bytes or len(s) != HASH_SIZE for s in sib):
                raise ValueError(f"a sibling must be {HASH_SIZE} bytes")
        if self.leaf is not None:
            check_hash(self.leaf.key, "the proof's leaf key")
            check_hash(self.leaf.value, "the proof's leaf value")


def descend(
    key: bytes, h: bytes, siblings: list[bytes], known: Mapping[bytes, NodeRow]
) -> tuple[bool, bytes, Leaf | None]:
    """Walk ``key``'s path from the node ``h`` at depth ``len(siblings)`` through ``known``.

    Appends each sibling passed to ``siblings``. Returns ``(True, h, leaf)`` when the path
    ends (``h`` the end: ``EMPTY`` with ``leaf`` None, or the hash of the end ``leaf``), or
    ``(False, h, None)`` when node ``h`` is not in ``known`` (fetch it and call again).
    ``known`` holds checked nodes only (each row hashes to its key).

    Raises:
        ValueError: if ``key`` is not 32 bytes, or the path passes 256 levels.
    """
    if _N is not None and type(key) is bytes and type(h) is bytes and type(known) is dict:
        try:
            done, end, leaf = _N.map_descend(key, h, siblings, known)
        except _N.Reject:
            pass  # the reference below raises the ValueError and its message
        else:
            return done, end, None if leaf is None else Leaf(*leaf)
    check_hash(key, "a map key")
    while h != EMPTY:
        row = known.get(h)
        if row is None:
            return False, h, None
        is_leaf, a, b = row
        if is_leaf:
            return True, h, Leaf(a, b)
        depth = len(siblings)
        if depth >= KEY_BITS:
            raise ValueError(f"a map path is at most {KEY_BITS} levels deep")
        if bit(key, depth):  # bit 1 goes right: the left child is the sibling
            siblings.append(a)
            h = b
        else:
            siblings.append(b)
            h = a
    return True, EMPTY, None


def descend_all(
    keys: list[bytes],
    heads: list[bytes],
    siblings: list[list[bytes]],
    ends: list[Leaf | None],
    active: list[int],
    known: dict[bytes, NodeRow],
) -> tuple[list[int], list[bytes]]:
    """Run ``descend`` for each walk ``i`` of ``active`` (``keys[i]`` from ``heads[i]``).

    A walk that ends gets ``ends[i]``, its end leaf (or None at an empty subtree); one that
    stops at a node ``known`` lacks gets ``heads[i]`` = that node's hash. Returns those
    walks (in ``active``'s order) and the distinct hashes they wait for, sorted: the next
    read's keys, in the order of the node table's primary key.

    Raises:
        ValueError: as ``descend``.
    """
    if _N is not None and type(known) is dict:
        raw: list[Any] = ends
        try:
            waiting, missing = _N.map_descend_all(keys, heads, siblings, raw, active, known)
        except _N.Reject:
            pass  # every walk is as it was given: the reference below says why
        else:
            for i in active:
                end = raw[i]
                if type(end) is tuple:
                    ends[i] = Leaf(*end)
            return waiting, missing
    waiting = []
    for i in active:
        done, h, leaf = descend(keys[i], heads[i], siblings[i], known)
        if done:
            ends[i] = leaf
        else:
            heads[i] = h
            waiting.append(i)
    return waiting, sorted({heads[i] for i in waiting})


def path_root(key: bytes, proof: MapProof) -> MapHash:
    """Return the root ``proof`` gives for ``key``'s path (§6.12, "Proof of a key's path").

    Raises:
        ProofError: if the proof's leaf is another key that cannot sit on that path (it
            does not share the path's prefix with ``key``).
        ValueError: if ``key`` is not 32 bytes.
    """
    if _N is not None and type(key) is bytes:
        leaf = None if proof.leaf is None else (proof.leaf.key, proof.leaf.value)
        try:
            return MapHash(_N.map_path_root(key, proof.siblings, leaf))
        except _N.Reject:
            pass  # the reference below raises the ProofError and its message
    check_hash(key, "a map key")
    depth = len(proof.siblings)
    if proof.leaf is None:
        h = EMPTY
    else:
        other = proof.leaf.key
        if other != key and any(bit(other, d) != bit(key, d) for d in range(depth)):
            raise ProofError(
                f"map proof: leaf {other.hex()} cannot end the path of key {key.hex()}"
            )
        h = leaf_hash(other, proof.leaf.value)
    for d in range(depth - 1, -1, -1):
        s = proof.siblings[d]
        h = node_hash(s, h) if bit(key, d) else node_hash(h, s)
    return h


def _mismatch(what: str, root: bytes, got: bytes) -> ProofError:
    return ProofError(
        f"map proof: {what} does not give the root", expected=root.hex(), actual=got.hex()
    )


def verify_included(root: bytes, key: bytes, value: bytes, proof: MapProof) -> None:
    """Check that the tree at ``root`` maps ``key`` to ``value``.

    Raises:
        ProofError: if the proof ends elsewhere, at another value, or at another root.
    """
    if proof.leaf is None or proof.leaf.key != key or proof.leaf.value != value:
        raise ProofError(f"map proof: the path of {key.hex()} does not end at its leaf")
    got = path_root(key, proof)
    if got != root:
        raise _mismatch(f"the inclusion of {key.hex()}", root, got)


def verify_absent(root: bytes, key: bytes, proof: MapProof) -> None:
    """Check that the tree at ``root`` holds no leaf for ``key``.

    Raises:
        ProofError: if the proof ends at ``key``'s own leaf or gives another root.
    """
    if proof.leaf is not None and proof.leaf.key == key:
        raise ProofError(f"map proof: {key.hex()} is in the map")
    got = path_root(key, proof)
    if got != root:
        raise _mismatch(f"the absence of {key.hex()}", root, got)
