"""Memory roots v2 (docs/FORMAT.md §6.13): the map a root commits to, and how to read it back.

What this module provides (the interface ``memroot prove`` / ``audit --proof`` build on):

- **The v2 preimage codec.** A v2 root is a ``RootPreimage`` (``memroot.memory_root.root``)
  with ``v = 2`` and ``map_root`` set: ``encode_preimage(pre)`` gives the canonical CBOR the
  root hashes, ``decode_payload(payload)`` parses a ``SNAPSHOT`` payload (v1 or v2) into its
  preimage and the root it claims, ``memory_root(pre)`` is
  ``SHA-256("memroot/root/v2" || 0x00 || cbor(preimage))`` (``ROOT_V2_TAG``).
- **The leaf rules.** ``leaf_changes(entry)`` lists the map leaves one entry sets
  (``LeafChange``: namespace, kind, item id, state, and its ``key`` / ``value`` hashes), from
  the entry alone: an ``ASSERT`` sets its object's leaf ``object`` in its own namespace,
  ``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` / ``CASCADE`` set ``state/<target_type>`` leaves.
  ``object_state`` / ``item_state`` build the states a prover shows beside a leaf.
- **Roots by id.** ``root_info(ledger, root)`` returns a stored root's ``RootInfo``: its
  ``SNAPSHOT`` entry's branch and seq, its preimage bytes, its version and map root
  (``None`` for a v1 root); ``map_nodes(ledger)`` the ``StoredNodes`` holding every node of
  every stored v2 root's map (each node read is re-hashed, so a prover reading from a root
  committed in a signed entry reads exactly the committed map or gets an ``IntegrityError``).
- **The map now.** ``map_at(ledger, branch, stop)`` returns the map of a branch's view as of
  entry ``stop - 1``: the newest v2 root at or before it and the leaf changes of the entries
  since (at most the snapshot cadence, plus a parent's entries up to the fork for a branch
  without a v2 root of its own); ``MapAt.apply(source)`` folds them into a map root.

The map at a high-water ``h`` of branch ``b`` is a function of the log alone: the leaves that
folding ``leaf_changes`` over the entries of ``b``'s view up to ``h`` gives (a branch's view:
its parent's view up to the ``BRANCH_CREATE`` that forked it, then its own entries), later
changes of a key replacing earlier ones. Roots only make it incremental.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from memroot.ledger import encoding
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind
from memroot.ledger.errors import NotFoundError
from memroot.ledger.hashing import domain_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType
from memroot.memory_root import records
from memroot.memory_root.map_nodes import StoredNodes
from memroot.memory_root.root import ROOT_V2_TAG, MemoryRoot, RootPreimage
from memroot.memory_root.state_map import (
    EMPTY,
    ITEM_TAG,
    VALUE_TAG,
    MapHash,
    MapKey,
    NodeSource,
    update_map,
)

__all__ = [
    "OBJECT_KIND",
    "ROOT_V2_TAG",
    "STATE_KIND_PREFIX",
    "LeafChange",
    "MapAt",
    "RootInfo",
    "as_changes",
    "changes_of",
    "decode_payload",
    "encode_preimage",
    "fork_anchor",
    "fork_anchor_of",
    "item_state",
    "leaf_changes",
    "map_at",
    "map_from_scratch",
    "map_nodes",
    "memory_root",
    "object_key",
    "object_state",
    "root_info",
    "view_changes",
]

OBJECT_KIND: Final = "object"
STATE_KIND_PREFIX: Final = "state/"
_ASSERT: Final = OpType.ASSERT.value
_CASCADE: Final = OpType.CASCADE.value
_STATE_OF: Final = {
    OpType.FALSIFY.value: "falsified",
    OpType.MARK_STALE.value: "stale",
    OpType.RESTORE.value: "live",
}
# cbor(["object", id]) for an id of n < 24 / < 256 bytes: array(2), text(6) "object", text(n).
_OBJECT_HEAD: Final = b"\x82\x66object"


def encode_preimage(pre: RootPreimage) -> bytes:
    """Return the canonical CBOR of a root's preimage (the bytes its root hashes)."""
    return pre.preimage()


def decode_payload(payload: Any) -> tuple[RootPreimage, MemoryRoot]:
    """Parse a ``SNAPSHOT`` payload (v1 or v2) into its preimage and the root it claims.

    Raises:
        ValidationError: naming the malformed field.
    """
    return RootPreimage.from_payload(payload)


def memory_root(pre: RootPreimage) -> MemoryRoot:
    """Return the root of a preimage (``memroot/root/v1`` or ``/v2`` by its version)."""
    return pre.root()


def object_state(branch: str, seq: int) -> dict[str, Any]:
    """Return the state an object's leaf holds: where its ``ASSERT`` is (§6.13)."""
    return {"branch": branch, "seq": seq}


def item_state(state: str, seq: int) -> dict[str, Any]:
    """Return the state a ``state/<target_type>`` leaf holds (as v1's summary did, §6.6)."""
    return {"state": state, "seq": seq}


def object_key(object_id: str) -> MapKey:
    """Return ``item_key("object", object_id)`` (§6.12), without the general CBOR encoder."""
    raw = object_id.encode("utf-8")
    n = len(raw)
    head = bytes([0x60 + n]) if n < 24 else (b"\x78" + bytes([n]) if n < 256 else b"")
    if not head:
        return MapKey(domain_hash(ITEM_TAG, encoding.encode([OBJECT_KIND, object_id])))
    return MapKey(domain_hash(ITEM_TAG, _OBJECT_HEAD + head + raw))


@dataclass(frozen=True, slots=True)
class LeafChange:
    """One leaf an entry sets: ``(namespace, kind, item id) -> state``.

    ``key`` is ``item_key(kind, id)`` and ``value`` is ``value_hash(state)`` (§6.12).
    """

    seq: int
    namespace: str
    kind: str
    item_id: str
    state: dict[str, Any]
    key: bytes = field(compare=False)
    value: bytes = field(compare=False)


def _change(seq: int, namespace: str, kind: str, item_id: str, state: dict[str, Any]) -> LeafChange:
    key: bytes = (
        object_key(item_id)
        if kind == OBJECT_KIND
        else domain_hash(ITEM_TAG, encoding.encode([kind, item_id]))
    )
    return LeafChange(
        seq, namespace, kind, item_id, state, key, domain_hash(VALUE_TAG, encoding.encode(state))
    )


def leaf_changes(entry: Entry) -> list[LeafChange]:
    """Return the map leaves ``entry`` sets, in order (docs/FORMAT.md §6.13, "Leaves").

    - ``ASSERT``: leaf ``object`` / the object's id (the operation's ``target_id``, else its
      own id, as the memory model names it) in the operation's namespace, state
      ``{"branch", "seq"}`` of the ``ASSERT``;
    - ``FALSIFY`` / ``MARK_STALE`` / ``RESTORE``: leaf ``state/<target_type>`` /
      ``target_id`` in the operation's namespace, state ``{"state": falsified | stale |
      live, "seq"}``;
    - ``CASCADE``: the same with ``stale`` for each ``{"type", "id"}`` of ``payload.touched``.

    Anything else (events included) sets none; fields of the wrong type are ignored.
    """
    if entry.kind is not Kind.OP:
        return []
    t = entry.type
    body = entry.body
    ns = body.get("namespace_id")
    if type(ns) is not str:
        return []
    if t == _ASSERT:
        target = body.get("target_id")
        oid = body.get("id") if target is None else target
        if type(oid) is not str:
            return []
        return [_change(entry.seq, ns, OBJECT_KIND, oid, object_state(entry.branch, entry.seq))]
    if t in _STATE_OF:
        kind, item = body.get("target_type"), body.get("target_id")
        if type(kind) is not str or type(item) is not str:
            return []
        return [
            _change(
                entry.seq, ns, STATE_KIND_PREFIX + kind, item, item_state(_STATE_OF[t], entry.seq)
            )
        ]
    if t == _CASCADE:
        payload = body.get("payload")
        touched = payload.get("touched") if type(payload) is dict else None
        out = []
        for x in touched if type(touched) is list else []:
            if type(x) is dict and type(x.get("type")) is str and type(x.get("id")) is str:
                out.append(
                    _change(
                        entry.seq,
                        ns,
                        STATE_KIND_PREFIX + x["type"],
                        x["id"],
                        item_state("stale", entry.seq),
                    )
                )
        return out
    return []


def as_changes(changes: Iterable[LeafChange]) -> dict[str, dict[bytes, bytes | None]]:
    """Return ``{namespace: {key: value}}`` for ``update_map`` (later changes win)."""
    out: dict[str, dict[bytes, bytes | None]] = {}
    for c in changes:
        out.setdefault(c.namespace, {})[c.key] = c.value
    return out


@dataclass(frozen=True, slots=True)
class RootInfo:
    """A stored root as a prover needs it: where its entry is and what it commits to."""

    root: MemoryRoot
    branch: str
    seq: int
    v: int
    preimage: bytes
    map_root: bytes | None
    record: records.RootRecord


def root_info(ledger: Ledger, root: bytes) -> RootInfo:
    """Return the stored root ``root`` (a ``SNAPSHOT``'s root or a cascade's re-snapshot).

    ``seq`` is its ``SNAPSHOT`` entry on ``branch`` (a re-snapshot's: its ``CASCADE`` entry,
    on ``record.cascade_branch``). The preimage is rebuilt from the stored record and must
    hash to ``root``; the entry itself is in the log (``ledger.entry(seq, branch)``).

    Raises:
        NotFoundError: if no such root is stored.
        IntegrityError: if the stored record does not hash to ``root`` (an edited record).
    """
    from memroot.ledger.errors import IntegrityError

    db = ledger.derived.db
    rec = records.get_resnapshot(db, root) or records.get_root(db, root)
    pre = rec.preimage()
    if pre.root() != rec.root:
        raise IntegrityError(
            f"stored memory_root record {root.hex()} does not hash to its root (edited); "
            "`memroot rebuild` re-derives it",
            step=8,
        )
    entry_branch = rec.branch if rec.cascade_branch is None else rec.cascade_branch
    return RootInfo(rec.root, entry_branch, rec.seq, rec.v, pre.preimage(), rec.map_root, rec)


def map_nodes(ledger: Ledger) -> StoredNodes:
    """Return the node source of the ledger's stored maps (every read re-hashed)."""
    return StoredNodes(ledger.derived.db)


def fork_anchor(genesis: Entry) -> tuple[str, int] | None:
    """Return ``(parent branch, seq of its BRANCH_CREATE)`` from a branch genesis, or None.

    A branch's first root links to the parent branch's root at the fork (SPEC 6): the newest
    root of the parent whose SNAPSHOT entry precedes the BRANCH_CREATE entry.
    """
    anchor = genesis.body.get("anchor")
    if type(anchor) is not dict:
        return None
    branch, seq = anchor.get("branch"), anchor.get("seq")
    if type(branch) is not str or type(seq) is not int:
        return None
    return branch, seq


def fork_anchor_of(ledger: Ledger, branch: str) -> tuple[str, int] | None:
    """Return ``(parent, seq of its BRANCH_CREATE)`` of a branch from its genesis, or None."""
    return None if branch == CANONICAL_BRANCH else fork_anchor(ledger.entry(0, branch))


@dataclass(slots=True)
class MapAt:
    """A branch's map at some entry: a base map root and the leaf changes since it.

    ``base`` is the map of ``root`` (the newest v2 root the view reaches), or ``EMPTY``;
    ``changes`` the leaf changes of the later entries of the view, in log order.
    """

    base: bytes
    root: MemoryRoot | None
    changes: list[LeafChange]

    def apply(self, source: NodeSource) -> tuple[MapHash, dict[bytes, Any]]:
        """Return the map root with every change applied, and the nodes that made.

        Raises:
            IntegrityError: if a node the changed paths need is not in ``source``.
        """
        if not self.changes:
            return MapHash(self.base), {}
        u = update_map(source, self.base, as_changes(self.changes))
        return u.root, u.nodes


def map_at(
    ledger: Ledger,
    branch: str,
    stop: int | None = None,
    *,
    strict: bool | None = None,
    depth: int = 0,
) -> MapAt:
    """Return the map of ``branch``'s view through entry ``stop - 1`` (default: the head).

    Reads the entries after the newest v2 root's high-water (strictly, each proven in the
    signed tree, when ``strict`` or, by default, when the ledger is strict); for a branch with
    no v2 root, its parent's map at the fork and then the branch's own entries from its
    genesis. The parent's changes are listed first, with ``seq`` -1 (before every entry of
    the branch).

    Raises:
        NotFoundError: if the branch does not exist or its fork chain is broken.
        IntegrityError: if strict and an entry read fails its check.
    """
    if depth > 64:
        raise NotFoundError(f"branch {branch!r} has a broken chain of forks")
    size = ledger.size(branch)
    stop = size if stop is None else min(stop, size)
    strict = ledger.strict if strict is None else strict
    db = ledger.derived.db
    latest = records.latest_v2_before(db, branch, stop)
    if latest is not None:
        assert latest.map_root is not None
        start = latest.high_water.seq + 1
        out = MapAt(latest.map_root, latest.root, [])
    else:
        start = 0
        anchor = fork_anchor_of(ledger, branch) if stop > 0 else None
        if anchor is None:
            out = MapAt(EMPTY, None, [])
        else:
            out = map_at(ledger, anchor[0], anchor[1], strict=strict, depth=depth + 1)
            out.changes = [dataclasses.replace(c, seq=-1) for c in out.changes]
    if start < stop:
        if strict:
            # Each chunk proven against the signed tree before it is read.
            for e in ledger.entries(start, stop, branch):
                out.changes.extend(leaf_changes(e))
        else:
            for r in ledger.store.iter_entry_rows(ledger.store.branch(branch).no, start, stop):
                if r.digest is not None or r.erased_by is not None:
                    continue  # an event: it sets no leaf
                out.changes.extend(leaf_changes(Entry.from_bytes(r.data)))
    return out


class _NoNodes:
    def node(self, h: bytes) -> None:
        del h


def view_changes(ledger: Ledger, branch: str, stop: int, *, depth: int = 0) -> list[LeafChange]:
    """Return every leaf change of ``branch``'s view through entry ``stop - 1``, from scratch.

    Reads no stored root or node: the parent's entries before the fork, then the branch's.

    Raises:
        NotFoundError: if the fork chain is broken.
    """
    if depth > 64:
        raise NotFoundError(f"branch {branch!r} has a broken chain of forks")
    out: list[LeafChange] = []
    anchor = fork_anchor_of(ledger, branch) if stop > 0 else None
    if anchor is not None:
        out = view_changes(ledger, anchor[0], anchor[1], depth=depth + 1)
    out.extend(changes_of(ledger.entries(0, stop, branch)))
    return out


def map_from_scratch(ledger: Ledger, branch: str, stop: int) -> MapHash:
    """Return the map root of ``branch``'s view through entry ``stop - 1``, from the log alone."""
    return MapAt(EMPTY, None, view_changes(ledger, branch, stop)).apply(_NoNodes())[0]


def changes_of(entries: Iterable[Entry]) -> list[LeafChange]:
    """Return the leaf changes of ``entries``, in order."""
    out: list[LeafChange] = []
    for e in entries:
        out.extend(leaf_changes(e))
    return out
