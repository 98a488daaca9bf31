"""The memory map (docs/FORMAT.md §6.12): a sparse Merkle tree of memory state, pure math.

Two levels of one tree shape. The *namespace tree* maps ``namespace_key(ns)`` to the root of
that namespace's *item tree*, which maps ``item_key(kind, id)`` to ``value_hash(state)``. So
one namespace's items are one subtree (a contiguous range of the map): proving a namespace is
proving one leaf of the namespace tree and handing over the items that rebuild its value.

Both trees are binary sparse Merkle trees over 256-bit keys (bits read most significant
first) with the leaf shortcut of the Jellyfish Merkle tree: a subtree holding no key hashes to
``EMPTY``, a subtree holding one key hashes to that key's leaf (wherever it sits), and any
other subtree to the node of its two halves::

    EMPTY           = SHA-256("memroot/map/empty/v1" || 0x00)
    leaf(key, v)    = SHA-256("memroot/map/leaf/v1"  || 0x00 || key || v)
    node(l, r)      = SHA-256("memroot/map/node/v1"  || 0x00 || l || r)
    namespace_key   = SHA-256("memroot/map/ns/v1"    || 0x00 || utf8(namespace))
    item_key        = SHA-256("memroot/map/item/v1"  || 0x00 || cbor([kind, id]))
    value_hash      = SHA-256("memroot/map/value/v1" || 0x00 || cbor(state))

The root of a key set is therefore a function of the set alone (never of the order it was
built in), and a path is as long as the prefix its key shares with its nearest neighbour
(about log2 n for hashed keys). Updates read and write only the nodes on the changed paths
(``update`` over a ``NodeSource``); unchanged subtrees are shared by hash.

Nothing here reads a database: storage passes nodes in (``NodeSource``) and takes the new
ones out (``Update.nodes``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NewType, Protocol

from memroot.ledger import encoding
from memroot.ledger.errors import IntegrityError
from memroot.ledger.hashing import HASH_SIZE, domain_hash

__all__ = [
    "EMPTY",
    "KEY_BITS",
    "LEAF_TAG",
    "NODE_TAG",
    "Inner",
    "Leaf",
    "MapHash",
    "MapKey",
    "MapProof",
    "NamespaceProof",
    "Node",
    "NodeSource",
    "Update",
    "item_key",
    "leaf_hash",
    "leaves_of",
    "lookup",
    "map_root",
    "namespace_key",
    "node_hash",
    "proof_root",
    "prove",
    "prove_namespace",
    "root_of",
    "update",
    "update_map",
    "value_hash",
    "verify_absent",
    "verify_included",
    "verify_namespace",
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


def value_hash(state: Any) -> bytes:
    """Return the hash a leaf holds for an item's state (a CBOR value).

    Raises:
        TypeError, ValueError: if ``state`` is outside the CBOR data model.
    """
    return domain_hash(VALUE_TAG, encoding.encode(state))


def _check32(value: bytes, what: str) -> None:
    if type(value) is not bytes or len(value) != HASH_SIZE:
        raise ValueError(f"{what} must be {HASH_SIZE} bytes")


def leaf_hash(key: bytes, value: bytes) -> MapHash:
    """Return ``SHA-256("memroot/map/leaf/v1" || 0x00 || key || value)``.

    Raises:
        ValueError: if ``key`` or ``value`` is not 32 bytes.
    """
    _check32(key, "a map key")
    _check32(value, "a map value")
    return MapHash(domain_hash(LEAF_TAG, key + value))


def node_hash(left: bytes, right: bytes) -> MapHash:
    """Return ``SHA-256("memroot/map/node/v1" || 0x00 || left || right)``."""
    return MapHash(domain_hash(NODE_TAG, left + right))


def _bit(key: bytes, depth: int) -> int:
    """Bit ``depth`` of ``key``, most significant bit of byte 0 first."""
    return (key[depth >> 3] >> (7 - (depth & 7))) & 1


def _split(keys: Sequence[bytes], lo: int, hi: int, depth: int) -> int:
    """Return the first index in ``keys[lo:hi]`` (sorted, one ``depth``-bit prefix) with bit 1."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if _bit(keys[mid], depth):
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True, slots=True)
class Leaf:
    """A stored leaf: its key and value (the value hash, or a namespace's item-tree root)."""

    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class Inner:
    """A stored interior node: its two children's hashes."""

    left: bytes
    right: bytes


Node = Leaf | Inner


class NodeSource(Protocol):
    """Where ``update``, ``lookup`` and ``prove`` read stored nodes from, by hash."""

    def node(self, h: bytes) -> Node | None:
        """Return the node whose hash is ``h``, or None when it is not stored."""


def _build(
    keys: Sequence[bytes],
    values: Sequence[bytes],
    lo: int,
    hi: int,
    depth: int,
    out: dict[bytes, Node] | None,
) -> MapHash:
    """Return the hash of the subtree of sorted ``keys[lo:hi]`` at ``depth``; record nodes."""
    if lo == hi:
        return EMPTY
    if hi - lo == 1:
        h = leaf_hash(keys[lo], values[lo])
        if out is not None:
            out[h] = Leaf(keys[lo], values[lo])
        return h
    if depth >= KEY_BITS:
        raise ValueError("two leaves with one key")  # callers pass each key once
    mid = _split(keys, lo, hi, depth)
    left = _build(keys, values, lo, mid, depth + 1, out)
    right = _build(keys, values, mid, hi, depth + 1, out)
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
    return _build(keys, [leaves[k] for k in keys], 0, len(keys), 0, None)


def map_root(namespaces: Mapping[str, Mapping[bytes, bytes]]) -> MapHash:
    """Return the map root of ``{namespace: {item key: value hash}}`` (empty namespaces left out).

    Raises:
        ValueError: if a key or value is not 32 bytes.
    """
    return root_of({namespace_key(ns): root_of(items) for ns, items in namespaces.items() if items})


@dataclass(slots=True)
class Update:
    """The result of ``update``: the new root and every node it created (hash -> node)."""

    root: MapHash
    nodes: dict[bytes, Node] = field(default_factory=dict)


def _get(source: NodeSource, new: Mapping[bytes, Node], h: bytes) -> Node:
    node = new.get(h)
    if node is None:
        node = source.node(h)
    if node is None:
        raise IntegrityError(f"memory map node {h.hex()} is not stored (derived map incomplete)")
    return node


def _update(
    source: NodeSource,
    new: dict[bytes, Node],
    h: bytes,
    depth: int,
    changes: list[tuple[bytes, bytes | None]],
) -> MapHash:
    if not changes:
        return MapHash(h)
    node = None if h == EMPTY else _get(source, new, h)
    if not isinstance(node, Inner):
        # An empty subtree or a single leaf: the result is the subtree of the few keys left.
        merged: dict[bytes, bytes] = {} if node is None else {node.key: node.value}
        for k, v in changes:
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        keys = sorted(merged)
        return _build(keys, [merged[k] for k in keys], 0, len(keys), depth, new)
    i = bisect_left([_bit(k, depth) for k, _ in changes], 1)
    left = _update(source, new, node.left, depth + 1, changes[:i])
    right = _update(source, new, node.right, depth + 1, changes[i:])
    # Canonical form: a subtree left with one leaf and nothing else is that leaf (shortcut).
    if right == EMPTY and (left == EMPTY or isinstance(_get(source, new, left), Leaf)):
        return left
    if left == EMPTY and isinstance(_get(source, new, right), Leaf):
        return right
    out = node_hash(left, right)
    if out != h:
        new[out] = Inner(left, right)
    return out


def update(source: NodeSource, root: bytes, changes: Mapping[bytes, bytes | None]) -> Update:
    """Apply ``changes`` (key -> new value, None to remove) to the tree at ``root``.

    Reads only the nodes on the changed paths; ``nodes`` holds the nodes of the new paths
    (a leaf that was only moved may be among them again: storing is idempotent). The new
    root equals ``root_of`` of the changed set.

    Raises:
        IntegrityError: if a node the paths need is not in ``source``.
        ValueError: if a key or value is not 32 bytes.
    """
    for k, v in changes.items():
        _check32(k, "a map key")
        if v is not None:
            _check32(v, "a map value")
    new: dict[bytes, Node] = {}
    out = _update(source, new, root, 0, sorted(changes.items()))
    return Update(out, new)


def lookup(source: NodeSource, root: bytes, key: bytes) -> bytes | None:
    """Return the value ``key`` holds in the tree at ``root``, or None.

    Raises:
        IntegrityError: if a node on the path is not in ``source``.
    """
    h, depth = root, 0
    while h != EMPTY:
        node = _get(source, {}, h)
        if isinstance(node, Leaf):
            return node.value if node.key == key else None
        h = node.right if _bit(key, depth) else node.left
        depth += 1
    return None


def update_map(
    source: NodeSource, root: bytes, changes: Mapping[str, Mapping[bytes, bytes | None]]
) -> Update:
    """Apply ``{namespace: {item key: value or None}}`` to the map at ``root``.

    Each changed namespace's item tree is updated, then the namespace tree with the new item
    roots (a namespace left with no item leaves the namespace tree).

    Raises:
        IntegrityError, ValueError: as ``update``.
    """
    nodes: dict[bytes, Node] = {}

    class _Both:
        def node(self, h: bytes) -> Node | None:
            found = nodes.get(h)
            return found if found is not None else source.node(h)

    both = _Both()
    top: dict[bytes, bytes | None] = {}
    for ns, items in changes.items():
        nk = namespace_key(ns)
        before = lookup(both, root, nk)
        u = update(both, EMPTY if before is None else before, items)
        nodes.update(u.nodes)
        top[nk] = None if u.root == EMPTY else u.root
    u = update(both, root, top)
    nodes.update(u.nodes)
    return Update(u.root, nodes)


# -- proofs -----------------------------------------------------------------------------------


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
        if len(self.siblings) > KEY_BITS:
            raise ValueError(f"a map proof has at most {KEY_BITS} siblings")
        for s in self.siblings:
            _check32(s, "a sibling")
        if self.leaf is not None:
            _check32(self.leaf.key, "the proof's leaf key")
            _check32(self.leaf.value, "the proof's leaf value")


def prove(source: NodeSource, root: bytes, key: bytes) -> MapProof:
    """Return the proof of ``key``'s path in the tree at ``root`` (inclusion or absence).

    Raises:
        IntegrityError: if a node on the path is not in ``source``.
    """
    siblings: list[bytes] = []
    h, depth = root, 0
    while h != EMPTY:
        node = _get(source, {}, h)
        if isinstance(node, Leaf):
            return MapProof(tuple(siblings), node)
        if _bit(key, depth):
            siblings.append(node.left)
            h = node.right
        else:
            siblings.append(node.right)
            h = node.left
        depth += 1
    return MapProof(tuple(siblings), None)


def proof_root(key: bytes, proof: MapProof) -> MapHash:
    """Return the root ``proof`` gives for ``key``'s path.

    Raises:
        IntegrityError: if the proof's leaf is another key that cannot sit on that path
            (it does not share the path's prefix with ``key``).
        ValueError: if ``key`` is not 32 bytes.
    """
    _check32(key, "a map key")
    depth = len(proof.siblings)
    if proof.leaf is None:
        h = EMPTY
    else:
        other = proof.leaf.key
        if other != key and any(_bit(other, d) != _bit(key, d) for d in range(depth)):
            raise IntegrityError(
                f"map proof: leaf {other.hex()} cannot end the path of key {key.hex()}"
            )
        h = leaf_hash(other, proof.leaf.value)
    for d in range(depth - 1, -1, -1):
        s = proof.siblings[d]
        h = node_hash(s, h) if _bit(key, d) else node_hash(h, s)
    return h


def _mismatch(what: str, root: bytes, got: bytes) -> IntegrityError:
    return IntegrityError(
        f"map proof: {what} does not give the root", expected=root.hex(), actual=got.hex()
    )


def verify_included(root: bytes, key: bytes, value: bytes, proof: MapProof) -> None:
    """Check that the tree at ``root`` maps ``key`` to ``value``.

    Raises:
        IntegrityError: if the proof ends elsewhere, at another value, or at another root.
    """
    if proof.leaf is None or proof.leaf.key != key or proof.leaf.value != value:
        raise IntegrityError(f"map proof: the path of {key.hex()} does not end at its leaf")
    got = proof_root(key, proof)
    if got != root:
        raise _mismatch(f"the inclusion of {key.hex()}", root, got)


def verify_absent(root: bytes, key: bytes, proof: MapProof) -> None:
    """Check that the tree at ``root`` holds no leaf for ``key``.

    Raises:
        IntegrityError: if the proof ends at ``key``'s own leaf or gives another root.
    """
    if proof.leaf is not None and proof.leaf.key == key:
        raise IntegrityError(f"map proof: {key.hex()} is in the map")
    got = proof_root(key, proof)
    if got != root:
        raise _mismatch(f"the absence of {key.hex()}", root, got)


@dataclass(frozen=True, slots=True)
class NamespaceProof:
    """Every item of one namespace (item key -> value, sorted) and its namespace leaf's path.

    An empty ``items`` claims that the map holds no item of the namespace.
    """

    namespace: str
    items: tuple[tuple[bytes, bytes], ...]
    path: MapProof


def prove_namespace(source: NodeSource, root: bytes, namespace: str) -> NamespaceProof:
    """Return the range proof of ``namespace`` in the map at ``root``: all its items.

    Raises:
        IntegrityError: if a node of the namespace is not in ``source``.
    """
    nk = namespace_key(namespace)
    path = prove(source, root, nk)
    items: list[tuple[bytes, bytes]] = []
    if path.leaf is not None and path.leaf.key == nk:
        items = [(x.key, x.value) for x in leaves_of(source, path.leaf.value)]
    return NamespaceProof(namespace, tuple(sorted(items)), path)


def verify_namespace(root: bytes, proof: NamespaceProof) -> dict[bytes, bytes]:
    """Check a namespace's range proof against the map ``root``; return its items.

    The items rebuild the namespace's item-tree root, which must be the value of the
    namespace's leaf, so no item can be left out or added.

    Raises:
        IntegrityError: if the items do not rebuild the namespace's leaf, or the path does
            not give ``root``.
    """
    nk = namespace_key(proof.namespace)
    items = dict(proof.items)
    if len(items) != len(proof.items):
        raise IntegrityError(f"map proof: namespace {proof.namespace!r} lists an item twice")
    if not items:
        verify_absent(root, nk, proof.path)
        return {}
    verify_included(root, nk, root_of(items), proof.path)
    return items


def leaves_of(source: NodeSource, root: bytes) -> Iterable[Leaf]:
    """Yield every leaf of the tree at ``root`` (any order).

    Raises:
        IntegrityError: if a node is not in ``source``.
    """
    stack = [root]
    while stack:
        h = stack.pop()
        if h == EMPTY:
            continue
        node = _get(source, {}, h)
        if isinstance(node, Leaf):
            yield node
        else:
            stack += (node.left, node.right)
