"""The replay engine shared by the append hook and verify step 8 (internal).

``BranchFold`` follows one branch entry by entry: it folds every projection, keeps the tree's
right edge (for the high-water ``tree_root``), and applies the snapshot cadence. The writer
(``RootsHook``) and the auditor (``RootsReplayCheck``) run the same code over the same
entries, so the roots they compute can only differ when the ledger was tampered with.

The cadence (docs/FORMAT.md §6): an automatic ``SNAPSHOT`` is due after entry ``e`` when
``e`` is neither a ``SNAPSHOT`` nor a ``SELFMODEL_SNAPSHOT``, no automatic snapshot is already
due, and ``e.seq - L >= N``, where ``L`` is the seq of the branch's last ``SNAPSHOT`` (0, the
genesis, when there is none) and ``N`` the ``snapshot_every`` recorded in the genesis. Its
high-water mark is ``e``. Any other ``SNAPSHOT`` (on demand) has as high-water the entry right
before it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from memroot.ledger import encoding
from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import ValidationError
from memroot.ledger.hashing import EntryHash, TreeRoot
from memroot.ledger.merkle import CompactRange
from memroot.ledger.vocab import OpType
from memroot.memory_root.records import StoredSummary
from memroot.memory_root.root import (
    ROOT_VERSION,
    HighWater,
    MemoryRoot,
    ProjectionDigest,
    RootPreimage,
    list_digest,
)
from memroot.memory_root.root_v2 import LeafChange, as_changes, fork_anchor, leaf_changes
from memroot.memory_root.state_map import (
    EMPTY,
    BatchRead,
    Node,
    NodeRow,
    NodeSource,
    reads_of,
    update_map,
)
from memroot.projections.projection import (
    Projection,
    Summary,
    encode_state,
    is_state_projection,
    rule_digest,
    rule_preimage,
)

__all__ = [
    "NO_CADENCE",
    "BranchFold",
    "Folder",
    "MemNodes",
    "Prepared",
    "SnapshotMismatch",
    "StateReader",
    "check_fork_root",
    "check_snapshot",
    "find_listed",
    "fork_anchor",
    "not_replayed",
    "relink",
    "relink_by",
    "relink_pairs",
]

NO_CADENCE: Final = frozenset({OpType.SNAPSHOT.value, OpType.SELFMODEL_SNAPSHOT.value})
_CASCADE: Final = OpType.CASCADE.value
_RESTORE: Final = OpType.RESTORE.value


def relink_pairs(entry: Entry) -> list[tuple[str, str]]:
    """Return the ``(root, root it links to instead)`` pairs an entry records, in order (hex).

    A ``CASCADE``'s ``resnapshots`` give ``(replaces, memory_root)``; a ``RESTORE``'s
    ``cascade.withdrawn`` give ``(memory_root, replaces)``; anything else none.
    """
    if entry.type not in (_CASCADE, _RESTORE) or entry.kind is not Kind.OP:
        return []
    payload = entry.body.get("payload")
    if type(payload) is not dict:
        return []
    if entry.type == _CASCADE:
        listed, old_key, new_key = payload.get("resnapshots"), "replaces", "memory_root"
    else:
        part = payload.get("cascade")
        listed = part.get("withdrawn") if type(part) is dict else None
        old_key, new_key = "memory_root", "replaces"
    out = []
    for x in listed if type(listed) is list else []:
        if type(x) is not dict:
            continue
        old, new = x.get(old_key), x.get(new_key)
        if type(old) is str and type(new) is str and len(new) == 64:
            try:
                bytes.fromhex(new)
            except ValueError:
                continue
            out.append((old, new))
    return out


def relink_by(parent: MemoryRoot | None, pairs: Sequence[tuple[str, str]]) -> MemoryRoot | None:
    """Apply ``relink_pairs`` to ``parent`` (see ``relink``)."""
    if parent is None:
        return None
    for old, new in pairs:
        if old == parent.hex():
            parent = MemoryRoot(bytes.fromhex(new))
    return parent


def relink(parent: MemoryRoot | None, entry: Entry) -> MemoryRoot | None:
    """Return the root the branch's next SNAPSHOT links to once ``entry`` is in the log.

    docs/FORMAT.md §6.4: a ``CASCADE`` on the branch that re-snapshots that root makes its
    re-snapshot the link (so the chain goes on from the root without the falsified
    inputs, not from the stale one it replaced); a ``RESTORE`` with a ``cascade`` part
    that withdraws that re-snapshot makes the root it replaced the link again. Anything
    else leaves ``parent`` as it is. Pairs are applied in the order listed, so a chain of
    re-snapshots listed by one entry is followed to its end.
    """
    return relink_by(parent, relink_pairs(entry))


FoldFn = Callable[[Any, Entry], Any]
StateReader = Callable[[Projection, str, int], Summary]
"""``read_state(projection, branch, as_of)``: a state projection's summary at entry as_of."""


class Folder:
    """The fold states of a fixed list of projections, dispatched by entry type."""

    __slots__ = ("_by_type", "_every", "projections", "states")

    def __init__(
        self, projections: Sequence[Projection], states: Sequence[Any] | None = None
    ) -> None:
        """Start every projection at ``states`` (default: their initial states)."""
        self.projections = tuple(projections)
        self.states: list[Any] = (
            [p.initial() for p in self.projections] if states is None else list(states)
        )
        self._every: tuple[tuple[int, FoldFn], ...] = tuple(
            (i, p.fold) for i, p in enumerate(self.projections) if getattr(p, "types", None) is None
        )
        by_type: dict[str, list[tuple[int, FoldFn]]] = {}
        for i, p in enumerate(self.projections):
            for t in getattr(p, "types", None) or ():
                by_type.setdefault(t, []).append((i, p.fold))
        self._by_type = {
            t: tuple(sorted([*fs, *self._every], key=lambda x: x[0])) for t, fs in by_type.items()
        }

    def fold(self, entry: Entry) -> None:
        """Fold one entry into every projection that reads its type."""
        states = self.states
        for i, fold in self._by_type.get(entry.type, self._every):
            states[i] = fold(states[i], entry)

    def fold_all(self, entries: Iterable[Entry]) -> None:
        """Fold entries in order."""
        for e in entries:
            self.fold(e)

    def outputs(
        self, *, writer: bool, read_state: Callable[[Projection], Summary] | None = None
    ) -> list[tuple[Projection, Summary, bytes | None]]:
        """Return each projection with its summary and (``writer``) its encoded state.

        The writer also checks that each summary is canonical CBOR (``root show`` decodes
        it) and encodes the states it stores; an auditor only needs the digests. State
        projections are summarised by ``read_state``. The summary of a projection whose
        class sets ``summary_is_canonical`` (its summaries come from the canonical encoder)
        is not decoded.

        Raises:
            TypeError, ValueError, DecodeError: if a projection's state or summary is outside
                the CBOR data model (a projection bug), or a state projection has no reader.
        """
        out: list[tuple[Projection, Summary, bytes | None]] = []
        for p, s in zip(self.projections, self.states, strict=True):
            if is_state_projection(p):
                if read_state is None:
                    raise ValueError(f"projection {p.id!r} needs the derived state to read")
                summary = read_state(p)
            else:
                summary = p.summarize(s)
            state: bytes | None = None
            if writer:
                # A summary made by the canonical encoder needs no decoding to prove it
                # canonical: decoding costs a pass over the whole summary at every snapshot
                # (falsification-state's grows with every item named).
                if not getattr(p, "summary_is_canonical", False):
                    encoding.decode(summary.data)
                state = encode_state(p, s)
            out.append((p, summary, state))
        return out

    def encoded_states(self) -> dict[bytes, bytes]:
        """Return every projection's canonically encoded state, by rule digest.

        Raises:
            TypeError, ValueError: if a state is outside the CBOR data model.
        """
        return {
            rule_digest(p): encode_state(p, s)
            for p, s in zip(self.projections, self.states, strict=True)
        }


class MemNodes:
    """An in-memory ``NodeSource`` (an auditor's map, or nodes not stored yet)."""

    __slots__ = ("nodes", "under")

    def __init__(self, under: NodeSource | None = None) -> None:
        """Hold nodes in memory, reading ``under`` (stored nodes) for the others."""
        self.nodes: dict[bytes, Node] = {}
        self.under = under

    def node(self, h: bytes) -> Node | None:
        """Return the node ``h`` (memory first, then ``under``), or None."""
        found = self.nodes.get(h)
        if found is None and self.under is not None:
            return self.under.node(h)
        return found

    def map_reads(self) -> tuple[Mapping[bytes, Node | NodeRow], BatchRead]:
        """Return the nodes held (by hash) and a batched read of the others (``update_map``).

        The read gives ``under``'s nodes (through its own batched read when it has one), or
        None for each hash when there is no ``under``.
        """
        if self.under is None:

            def none(hashes: list[bytes]) -> list[Node | NodeRow | None]:
                return [None] * len(hashes)

            return self.nodes, none
        return self.nodes, reads_of(self.under)[1]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A snapshot computed at a high-water mark: what it commits to and what to store.

    ``items`` pairs each projection's preimage item with its stored summary, sorted by id.
    ``map_root`` is the memory map at the high-water (None: a v1 root, as an old payload
    checked by an auditor), ``nodes`` the map nodes the snapshot adds. ``v`` is the root's
    version (None: the version this memroot writes, ``ROOT_VERSION``, when it has a map).
    """

    branch: str
    parent: MemoryRoot | None
    high_water: HighWater
    items: tuple[tuple[ProjectionDigest, StoredSummary], ...]
    map_root: bytes | None = None
    nodes: dict[bytes, Node] | None = None
    v: int | None = None

    @property
    def preimage(self) -> RootPreimage:
        """The root's preimage (v1 without a map root, else ``v``, default ``ROOT_VERSION``).

        Raises:
            ValueError: if two items share an id (an auditor's fold of retired rules).
        """
        return RootPreimage(
            self.branch,
            self.parent,
            self.high_water,
            tuple(d for d, _ in self.items),
            1 if self.map_root is None else (self.v or ROOT_VERSION),
            self.map_root,
        )

    @property
    def stored(self) -> list[StoredSummary]:
        """The summaries to store with the root."""
        return [s for _, s in self.items]


def check_fork_root(create: Entry, latest: MemoryRoot | None) -> None:
    """Check the ``memory_root`` a ``BRANCH_CREATE`` payload may carry (SPEC 8's anchor).

    When present it must be the parent branch's latest root (``latest``) at the fork.

    Raises:
        ValidationError: if it is not 32 bytes or not that root.
    """
    payload = create.body.get("payload")
    if type(payload) is not dict or "memory_root" not in payload:
        return
    claimed = payload["memory_root"]
    if claimed != latest or (claimed is not None and len(claimed) != 32):
        want = "none (no root yet)" if latest is None else latest.hex()
        raise ValidationError(
            f"BRANCH_CREATE memory_root must be the parent branch's latest root at the fork: "
            f"{want}",
            field="payload.memory_root",
        )


class BranchFold:
    """One branch followed entry by entry: projections, tree edge, cadence, latest root."""

    __slots__ = (
        "branch",
        "compact",
        "dirty",
        "every",
        "folder",
        "fork_root",
        "last_hash",
        "last_snapshot_seq",
        "latest_root",
        "leaves",
        "map_base",
        "map_changes",
        "map_source",
        "memo",
        "next_seq",
        "pending",
        "pending_seq",
        "read_state",
        "relinked",
        "writer",
    )

    def __init__(
        self,
        branch: str,
        folder: Folder,
        every: int,
        *,
        next_seq: int = 0,
        last_hash: bytes = b"",
        compact: CompactRange | None = None,
        last_snapshot_seq: int = 0,
        latest_root: MemoryRoot | None = None,
        fork_root: MemoryRoot | None = None,
        dirty: bool = True,
        writer: bool = True,
        read_state: StateReader | None = None,
        map_source: NodeSource | None = None,
        map_base: bytes = EMPTY,
        map_changes: list[LeafChange] | None = None,
    ) -> None:
        """Start following ``branch`` at ``next_seq`` with the given state.

        ``writer`` folds keep the encoded states with each snapshot (to store them); an
        auditor's fold (``writer=False``) computes only digests. ``read_state`` summarises
        state projections (``read_state(projection, branch, as_of)``). The memory map:
        ``map_base`` is its root at the last v2 root (or the fork, or empty),
        ``map_changes`` the leaf changes folded since, ``map_source`` where its nodes are
        read (None: an in-memory store of the fold's own).
        """
        self.branch = branch
        self.folder = folder
        self.every = every
        self.next_seq = next_seq
        self.last_hash = last_hash
        self.compact = compact if compact is not None else CompactRange()
        self.leaves: list[bytes] = []  # entry hashes not yet folded into ``compact``
        self.writer = writer
        self.read_state = read_state
        self.last_snapshot_seq = last_snapshot_seq
        self.latest_root = latest_root
        self.fork_root = fork_root
        self.relinked: MemoryRoot | None = None  # set by a CASCADE / RESTORE (``relink``)
        self.dirty = dirty
        self.pending: Prepared | None = None
        self.pending_seq: int | None = None
        self.memo: tuple[int, bytes, MemoryRoot | None, Prepared] | None = None
        self.map_source: NodeSource = MemNodes() if map_source is None else map_source
        self.map_base = map_base
        self.map_changes: list[LeafChange] = [] if map_changes is None else map_changes

    def map_now(self) -> tuple[bytes, dict[bytes, Node]]:
        """Return the memory map at the last entry folded and the nodes it adds.

        Raises:
            IntegrityError: if a node the changed paths need cannot be read.
        """
        if not self.map_changes:
            return self.map_base, {}
        u = update_map(self.map_source, self.map_base, as_changes(self.map_changes))
        return u.root, u.nodes

    def follows(self, entry: Entry) -> bool:
        """Return True when ``entry`` is the next entry of the chain this fold has seen."""
        return entry.seq == self.next_seq and entry.prev == self.last_hash

    def high_water(self) -> HighWater:
        """Return the high-water mark at the last entry folded."""
        return HighWater(
            self.next_seq - 1,
            EntryHash(self.last_hash),
            self.next_seq,
            TreeRoot(self.tree_root()),
        )

    def tree_root(self) -> bytes:
        """Return the Merkle root of the entries folded so far."""
        if self.leaves:
            self.compact.append_many(self.leaves)
            self.leaves.clear()
        return self.compact.root()

    @property
    def parent(self) -> MemoryRoot | None:
        """The parent of the next root: the latest root, else the root at the fork.

        As re-snapshots relinked it since (``relink``).
        """
        if self.relinked is not None:
            return self.relinked
        return self.latest_root if self.latest_root is not None else self.fork_root

    def prepare(self) -> Prepared:
        """Compute the snapshot at the last entry folded (memoised until the next fold).

        The result depends only on the chain up to the last entry folded and the parent, so
        the memo is keyed by that entry's seq and hash and the parent.

        Raises:
            TypeError, ValueError: if a projection's output is outside the CBOR data model.
        """
        memo = self.memo
        if memo is not None and memo[:3] == (self.next_seq, self.last_hash, self.parent):
            return memo[3]
        items = []
        reader = self.read_state
        as_of = self.next_seq - 1
        outputs = self.folder.outputs(
            writer=self.writer,
            read_state=None if reader is None else (lambda p: reader(p, self.branch, as_of)),
        )
        for p, summary, state in outputs:
            rule = rule_digest(p)
            items.append(
                (
                    ProjectionDigest(p.id, rule, summary.digest, summary.count),
                    StoredSummary(
                        p.id,
                        rule,
                        rule_preimage(p),
                        summary.digest,
                        summary.count,
                        summary.data,
                        state,
                    ),
                )
            )
        items.sort(key=lambda x: (x[0].id, x[0].rule))
        map_root, nodes = self.map_now()
        prepared = Prepared(
            self.branch, self.parent, self.high_water(), tuple(items), map_root, nodes
        )
        self.memo = (self.next_seq, self.last_hash, self.parent, prepared)
        return prepared

    def advance(self, entry: Entry) -> bool:
        """Fold ``entry``; return True when it makes an automatic snapshot due.

        When one is due, ``pending`` holds it, computed at ``entry``.
        """
        self.folder.fold(entry)
        if entry.kind is Kind.OP:
            self.map_changes.extend(leaf_changes(entry))
        if entry.type in (_CASCADE, _RESTORE):
            base = self.parent
            linked = relink(base, entry)
            if linked != base:
                self.relinked = linked
        self.leaves.append(entry.hash)
        self.next_seq = entry.seq + 1
        self.last_hash = entry.hash
        if entry.type in NO_CADENCE:
            return False
        self.dirty = True
        if self.pending_seq is None and entry.seq - self.last_snapshot_seq >= self.every:
            self.pending = self.prepare()
            self.pending_seq = entry.seq
            return True
        return False

    def expected(self, snapshot: Entry, hw_seq: int) -> Prepared | None:
        """Return what a ``SNAPSHOT`` at ``snapshot`` with high-water ``hw_seq`` must commit to.

        None when ``hw_seq`` is neither the entry right before it nor a due automatic
        snapshot's high-water. Call before ``advance(snapshot)``.
        """
        if self.pending is not None and hw_seq == self.pending_seq:
            return self.pending
        if hw_seq == snapshot.seq - 1 == self.next_seq - 1:
            return self.prepare()
        return None

    def snapshot_taken(
        self, entry: Entry, root: MemoryRoot, prepared: Prepared | None = None
    ) -> None:
        """Record that ``entry`` (a SNAPSHOT) committed ``root``; resets the cadence.

        With ``prepared`` holding a map (a v2 root), the map goes on from it: its nodes
        join an in-memory source, and the changes it covers (through its high-water) are
        dropped from the fold.
        """
        if prepared is not None and prepared.map_root is not None:
            hw = prepared.high_water.seq
            if prepared.nodes and isinstance(self.map_source, MemNodes):
                self.map_source.nodes.update(prepared.nodes)
            self.map_base = prepared.map_root
            self.map_changes = [c for c in self.map_changes if c.seq > hw]
        self.latest_root = root
        self.relinked = None
        self.last_snapshot_seq = entry.seq
        self.pending = None
        self.pending_seq = None
        self.dirty = False


class SnapshotMismatch(ValidationError):
    """A ``SNAPSHOT`` payload that does not commit to what replaying the log gives.

    Attributes:
        expected: what replay computed (hex for hashes), when one value differs.
        actual: what the payload says.
    """

    def __init__(
        self, message: str, *, field: str, expected: str | None = None, actual: str | None = None
    ) -> None:
        super().__init__(message, field=field)
        self.expected = expected
        self.actual = actual


def not_replayed(e: ValidationError, op_type: str) -> str:
    """Return why an entry does not replay, as verify step 8 words it (its finding's text).

    ``e`` is what ``check_snapshot`` (or a SelfModel check) raised for the entry of type
    ``op_type``: a ``SnapshotMismatch`` (the payload disagrees with the replay) or a
    malformed payload. The same words serve a host's catch-up that refuses the entry.
    """
    if isinstance(e, SnapshotMismatch):
        return f"SNAPSHOT does not replay: {e} ({e.field})"
    return f"{op_type} is malformed: {e} ({e.field})"


def _hex(value: bytes | None) -> str:
    return "null" if value is None else value.hex()


def check_snapshot(fold: BranchFold, entry: Entry, *, exact: bool) -> Prepared:
    """Check a ``SNAPSHOT`` entry against the replay ``fold`` (before ``advance(entry)``).

    With ``exact`` (the writer) the payload must list exactly the fold's projections; without
    (the auditor, whose fold may know more rules) every listed projection must be known and
    match. Returns what the root commits to, restricted to the listed projections.

    Raises:
        ValidationError: the payload is malformed (naming the field).
        SnapshotMismatch: the payload disagrees with the replay (naming what differs).
    """
    pre, claimed = RootPreimage.from_payload(entry.body.get("payload"))
    if pre.branch != entry.branch:
        raise SnapshotMismatch(
            "SNAPSHOT names another branch",
            field="payload.branch",
            expected=entry.branch,
            actual=pre.branch,
        )
    if claimed != pre.root():
        raise SnapshotMismatch(
            "memory_root does not match its own preimage",
            field="payload.memory_root",
            expected=pre.root().hex(),
            actual=claimed.hex(),
        )
    hw = pre.high_water
    exp = fold.expected(entry, hw.seq)
    if exp is None:
        raise SnapshotMismatch(
            "high_water must be the entry right before the SNAPSHOT or the entry whose "
            "automatic snapshot is due",
            field="payload.high_water.seq",
            expected=str(entry.seq - 1 if fold.pending_seq is None else fold.pending_seq),
            actual=str(hw.seq),
        )
    if hw != exp.high_water:
        raise SnapshotMismatch(
            "high_water does not match the log",
            field="payload.high_water",
            expected=f"{exp.high_water.entry_hash.hex()} {exp.high_water.tree_root.hex()}",
            actual=f"{hw.entry_hash.hex()} {hw.tree_root.hex()}",
        )
    if pre.parent != exp.parent:
        raise SnapshotMismatch(
            "parent is not the branch's previous memory_root",
            field="payload.parent",
            expected=_hex(exp.parent),
            actual=_hex(pre.parent),
        )
    if exact and pre.v != ROOT_VERSION:
        raise SnapshotMismatch(
            f"this memroot writes v{ROOT_VERSION} roots, not v{pre.v}",
            field="payload.v",
            expected=str(ROOT_VERSION),
            actual=str(pre.v),
        )
    if pre.map_root is not None and pre.map_root != exp.map_root:
        raise SnapshotMismatch(
            "map is not the memory map the log gives at the high-water",
            field="payload.map",
            expected=_hex(exp.map_root),
            actual=pre.map_root.hex(),
        )
    if pre.v == 3:
        listed = find_listed(pre.listed, [d for d, _ in exp.items], exact=exact)
        if listed is None:
            raise SnapshotMismatch(
                "projections is the hash of no list of the projections the replay computes "
                "(a summary digest or count differs, or a projection is not registered here)",
                field="payload.projections",
                expected=list_digest([d for d, _ in exp.items]).hex() if exact else None,
                actual=pre.listed.hex(),
            )
        pre = pre.with_projections(listed)
    known = {d.rule: (d, s) for d, s in exp.items}
    items = []
    for i, d in enumerate(pre.projections):
        where = f"payload.projections[{i}]"
        if d.rule not in known:
            raise SnapshotMismatch(
                f"projection {d.id!r} with rule {d.rule.hex()} is not registered here "
                "(another version or params); its summary cannot be recomputed",
                field=f"{where}.rule",
                actual=d.rule.hex(),
            )
        w, s = known[d.rule]
        if d != w:
            raise SnapshotMismatch(
                f"projection {d.id!r}: summary digest or count differs from the replay",
                field=where,
                expected=f"{w.digest.hex()} count {w.count}",
                actual=f"{d.digest.hex()} count {d.count}",
            )
        items.append((d, s))
    if exact and len(pre.projections) != len(exp.items):
        missing = sorted({d.id for d, _ in exp.items} - {d.id for d in pre.projections})
        raise SnapshotMismatch(
            f"SNAPSHOT leaves out registered projections {missing}", field="payload.projections"
        )
    if pre.map_root is None:
        return Prepared(pre.branch, pre.parent, hw, tuple(items))
    return Prepared(pre.branch, pre.parent, hw, tuple(items), exp.map_root, exp.nodes, pre.v)


_MAX_LISTS: Final = 1 << 12
_recent_lists: list[frozenset[bytes]] = []


def find_listed(
    target: bytes, candidates: Sequence[ProjectionDigest], *, exact: bool
) -> tuple[ProjectionDigest, ...] | None:
    """Return the projection list, drawn from ``candidates``, whose ``list_digest`` is ``target``.

    A v3 root commits to its list by one hash (docs/FORMAT.md §6.16). With ``exact`` (the
    writer: every registered projection listed) the one candidate is the whole list. Else
    (the auditor, whose replay folds every rule it knows, retired ones too) the list is at
    most one rule per id: the rule sets found before are tried first, then every choice
    (each id: one of its rules, or not listed), at most 4,096 lists. Collision resistance
    makes the list found the one the root was made of. None if no list hashes to ``target``.
    """
    ordered = tuple(sorted(candidates, key=lambda d: (d.id, d.rule)))
    if exact:
        return ordered if list_digest(ordered) == target else None
    by_rule: dict[bytes, ProjectionDigest] = {d.rule: d for d in ordered}
    for rules in _recent_lists:
        if rules <= by_rule.keys():
            items = tuple(sorted((by_rule[r] for r in rules), key=lambda d: d.id))
            if list_digest(items) == target:
                return items
    groups: dict[str, list[ProjectionDigest | None]] = {}
    for d in ordered:
        groups.setdefault(d.id, []).append(d)
    choices = [[*g, None] for _, g in sorted(groups.items())]
    for n, combo in enumerate(itertools.product(*choices)):
        if n >= _MAX_LISTS:
            break
        items = tuple(d for d in combo if d is not None)
        if list_digest(items) == target:
            _recent_lists.insert(0, frozenset(d.rule for d in items))
            del _recent_lists[8:]
            return items
    return None
