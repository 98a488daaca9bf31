"""The memory map (docs/FORMAT.md §6.12): building, updating and proving it over stored nodes.

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
(``update`` over a ``NodeSource``); unchanged subtrees are shared by hash. ``update_map`` runs
the native core's level-synchronous walk when it is built (every changed path of every tree
together, one batched read per level), and the recursive ``update_map_reference`` otherwise.

Nothing here reads a database: storage passes nodes in (``NodeSource``, or ``RowSource`` for
the batched walk of ``prove_many``) and takes the new ones out (``Update.nodes``). The hash
rules themselves (keys, leaves, nodes, roots, path checks) are ``memroot.ledger.map_tree``,
the one copy the offline checker of proof files shares; this module re-exports them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from memroot.ledger._backend import NATIVE as _N
from memroot.ledger._backend import collector_paused
from memroot.ledger.errors import IntegrityError
from memroot.ledger.map_tree import (
    EMPTY,
    EMPTY_TAG,
    ITEM_TAG,
    KEY_BITS,
    LEAF_TAG,
    NODE_TAG,
    NS_TAG,
    VALUE_TAG,
    Inner,
    Leaf,
    MapHash,
    MapKey,
    MapProof,
    Node,
    NodeRow,
    bit,
    build,
    check_hash,
    descend_all,
    item_key,
    leaf_hash,
    namespace_key,
    node_hash,
    root_of,
    value_hash,
    verify_absent,
    verify_included,
)
from memroot.ledger.map_tree import path_root as proof_root

__all__ = [
    "EMPTY",
    "EMPTY_TAG",
    "ITEM_TAG",
    "KEY_BITS",
    "LEAF_TAG",
    "NODE_TAG",
    "NS_TAG",
    "VALUE_TAG",
    "BatchRead",
    "Inner",
    "Leaf",
    "MapHash",
    "MapKey",
    "MapProof",
    "NamespaceProof",
    "Node",
    "NodeRow",
    "NodeSource",
    "RowSource",
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
    "prove_many",
    "prove_namespace",
    "reads_of",
    "root_of",
    "update",
    "update_map",
    "update_map_reference",
    "value_hash",
    "verify_absent",
    "verify_included",
    "verify_namespace",
]


class NodeSource(Protocol):
    """Where ``update``, ``lookup`` and ``prove`` read stored nodes from, by hash.

    A source may also have ``map_reads()`` (see ``reads_of``): the nodes it holds and a
    batched read of the others, which the native ``update_map`` reads a level at a time;
    and ``start_update()``, which ``update_map`` calls before either of its walks.
    """

    def node(self, h: bytes) -> Node | None:
        """Return the node whose hash is ``h``, or None when it is not stored."""


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
        return build(keys, [merged[k] for k in keys], 0, len(keys), depth, new)
    i = bisect_left([bit(k, depth) for k, _ in changes], 1)
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
        check_hash(k, "a map key")
        if v is not None:
            check_hash(v, "a map value")
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
        h = node.right if bit(key, depth) else node.left
        depth += 1
    return None


_NATIVE_UPDATE = True
"""Whether ``update_map`` runs the native walk when the core is built (off: the reference,
as ``bench/bench_map_update_ab.py`` compares them in one build)."""


def update_map(
    source: NodeSource, root: bytes, changes: Mapping[str, Mapping[bytes, bytes | None]]
) -> Update:
    """Apply ``{namespace: {item key: value or None}}`` to the map at ``root``.

    Each changed namespace's item tree is updated, then the namespace tree with the new item
    roots (a namespace left with no item leaves the namespace tree). With the native core
    (``memroot._native.map_update``) every changed path of every tree is walked level by
    level together: one read of ``source`` per level (its ``map_reads`` when it has one, a
    batched read), the new nodes hashed bottom-up. Without it, or where the native walk
    stops (a node missing or edited, a malformed change), ``update_map_reference`` decides:
    the same root and nodes, or its own error.

    Raises:
        IntegrityError, ValueError: as ``update``.
    """
    start = getattr(source, "start_update", None)
    if start is not None:
        start()  # a source that keeps rows' positions checks them first (``StoredNodes``)
    if _N is not None and _NATIVE_UPDATE:
        held, read = reads_of(source)
        known = held if isinstance(held, dict) else {}
        groups: list[tuple[bytes, Mapping[bytes, bytes | None]]] = [
            (namespace_key(ns), items) for ns, items in changes.items()
        ]
        # The walk makes thousands of nodes and no reference cycle (``collector_paused``).
        try:
            with collector_paused():
                out, made = _N.map_update(root, groups, known, read, Leaf, Inner)
        except (_N.Reject, IntegrityError):
            pass  # the reference below reads node by node and raises its own error, if any
        else:
            return Update(MapHash(out), made)
    return update_map_reference(source, root, changes)


BatchRead = Callable[[list[bytes]], list[Node | NodeRow | None]]
"""A batched read of map nodes: hashes in, each one's node (or checked row, or None) out."""


def reads_of(source: NodeSource) -> tuple[Mapping[bytes, Node | NodeRow], BatchRead]:
    """Return the nodes ``source`` holds and a batched read of the others, for ``update_map``.

    A source with a ``map_reads()`` method gives both (``MemNodes``, ``StoredNodes``); for
    any other, none are held and the read asks ``node`` once per hash.
    """
    reads = getattr(source, "map_reads", None)
    if reads is not None:
        got: tuple[Mapping[bytes, Node | NodeRow], BatchRead] = reads()
        return got

    def one_by_one(hashes: list[bytes]) -> list[Node | NodeRow | None]:
        return [source.node(h) for h in hashes]

    return {}, one_by_one


def update_map_reference(
    source: NodeSource, root: bytes, changes: Mapping[str, Mapping[bytes, bytes | None]]
) -> Update:
    """``update_map``'s reference: each namespace's item tree in turn, one node read at a time.

    Each changed namespace's item tree is updated (recursively, ``update``), then the
    namespace tree with the new item roots (a namespace left with no item leaves the
    namespace tree). The native ``update_map`` is tested to give the same root and nodes.

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
        if bit(key, depth):
            siblings.append(node.left)
            h = node.right
        else:
            siblings.append(node.right)
            h = node.left
        depth += 1
    return MapProof(tuple(siblings), None)


class RowSource(Protocol):
    """Where ``prove_many`` reads stored nodes from: a table of checked rows it fills in."""

    known: dict[bytes, NodeRow]
    """The checked nodes at hand, by hash (a cache: the source may clear it when full)."""

    def fetch(self, hashes: Collection[bytes]) -> None:
        """Add the nodes ``hashes`` to ``known``, read together, each checked; skip absent ones.

        Raises:
            IntegrityError: if a stored row does not hash to its hash.
        """


def prove_many(source: RowSource, walks: Sequence[tuple[bytes, bytes]]) -> list[MapProof]:
    """Return the proof of each ``(root, key)`` path in ``walks``, in order.

    The paths are walked level by level together: each round walks every path as far as
    the checked nodes at hand go (``map_tree.descend_all``, native when built), then reads the
    next node of every unfinished path in one ``fetch``. So ``n`` proofs cost a handful of
    batched reads (one per level below the cached ones), not one query per node.

    Raises:
        IntegrityError: if a node a path needs is not stored, or a stored node was edited.
        ValueError: if a key is not 32 bytes.
    """
    # The walk allocates many small lists and tuples and no reference cycle.
    with collector_paused():
        return _prove_many(source, walks)


def _prove_many(source: RowSource, walks: Sequence[tuple[bytes, bytes]]) -> list[MapProof]:
    keys = [key for _, key in walks]
    heads = [root for root, _ in walks]
    siblings: list[list[bytes]] = [[] for _ in walks]
    ends: list[Leaf | None] = [None] * len(walks)
    active = list(range(len(walks)))
    while active:
        known = source.known
        active, missing = descend_all(keys, heads, siblings, ends, active, known)
        if active:
            source.fetch(missing)
            known = source.known
            for h in missing:
                if h not in known:
                    raise IntegrityError(
                        f"memory map node {h.hex()} is not stored (derived map incomplete)"
                    )
    return [MapProof(tuple(s), end) for s, end in zip(siblings, ends, strict=True)]


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

    A source with a ``leaves(root)`` method walks the tree itself (``StoredNodes``: by
    row number, each read checked).

    Raises:
        IntegrityError: if a node is not in ``source``.
    """
    own: Callable[[bytes], Iterable[Leaf]] | None = getattr(source, "leaves", None)
    if own is not None:
        yield from own(root)
        return
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
