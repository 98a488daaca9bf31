"""Replaying memory roots from the log: verify step 8 and ``rebuild``.

``RootsReplay`` folds every projection from the first entry of each branch and checks each
``SNAPSHOT`` against what it computes (the same ``check_snapshot`` the writer runs) and each
``SELFMODEL_SNAPSHOT`` (well-formed, selfmodel_root matches its body, cites a root of its
branch replayed before it). ``RootsReplayCheck`` plugs it into ``memroot.ledger.verify.audit`` as
step 8 and also compares the stored records (roots, summaries, fold states, SelfModels) with
the replay; ``rebuild`` drops the records and writes them again from the replay.

Findings name the branch, the entry's seq and step 8. A missing automatic snapshot (a ledger
written without this layer's hook) is reported as a note, not a violation: nothing was
hidden, every entry is still in the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import apsw

from memroot.ledger import encoding
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind
from memroot.ledger.errors import IntegrityError, NotFoundError, ValidationError
from memroot.ledger.ledger import DEFAULT_SNAPSHOT_EVERY, Ledger
from memroot.ledger.verify import AuditReport, Finding
from memroot.ledger.vocab import OpType
from memroot.memory_root import map_nodes, records
from memroot.memory_root._fold import (
    BranchFold,
    Folder,
    MemNodes,
    Prepared,
    SnapshotMismatch,
    StateReader,
    check_fork_root,
    check_snapshot,
    fork_anchor,
    not_replayed,
    relink_by,
    relink_pairs,
)
from memroot.memory_root.records import SelfModelRecord
from memroot.memory_root.root import MemoryRoot
from memroot.memory_root.root_v2 import LeafChange
from memroot.memory_root.selfmodel import parse_selfmodel_payload
from memroot.memory_root.state_map import Inner, Node
from memroot.projections.projection import Projection, Summary, is_state_projection, read_state
from memroot.projections.registry import Registry, default_registry

__all__ = [
    "STEP",
    "RootReplayed",
    "RootsRebuild",
    "RootsReplay",
    "RootsReplayCheck",
    "SelfModelReplayed",
    "reachable",
    "rebuild",
]

STEP: Final = 8
_SNAPSHOT: Final = OpType.SNAPSHOT.value
_SELFMODEL_SNAPSHOT: Final = OpType.SELFMODEL_SNAPSHOT.value
_RELINKS: Final = frozenset({OpType.CASCADE.value, OpType.RESTORE.value})
_WATCHED: Final = frozenset(
    {OpType.SNAPSHOT.value, OpType.SELFMODEL_SNAPSHOT.value, OpType.BRANCH_CREATE.value}
)


@dataclass(frozen=True, slots=True)
class RootReplayed:
    """A ``SNAPSHOT`` that replay confirmed; ``skipped`` names a missing automatic one."""

    seq: int
    root: MemoryRoot
    prepared: Prepared
    skipped: int | None
    previous: MemoryRoot | None


@dataclass(frozen=True, slots=True)
class SelfModelReplayed:
    """A ``SELFMODEL_SNAPSHOT`` that replay confirmed."""

    record: SelfModelRecord


def reachable(nodes: dict[bytes, Node], roots: Iterable[bytes]) -> dict[bytes, Node]:
    """Return the nodes of ``nodes`` that the maps rooted at ``roots`` reach (§6.12).

    A namespace leaf's value is its item tree's root, so the walk goes on through it. Hashes
    not in ``nodes`` (``EMPTY``, nodes held elsewhere) end the walk there.
    """
    live: dict[bytes, Node] = {}
    stack = list(roots)
    while stack:
        h = stack.pop()
        if h in live:
            continue
        node = nodes.get(h)
        if node is None:
            continue
        live[h] = node
        if isinstance(node, Inner):
            stack += (node.left, node.right)
        else:
            stack.append(node.value)
    return live


class RootsReplay:
    """Replay of every branch's roots from scratch, one entry at a time, in log order."""

    def __init__(
        self,
        registry: Registry,
        snapshot_every: int | None = None,
        states_for: Callable[[str, int], bool] | None = None,
        read_state: StateReader | None = None,
    ) -> None:
        """Fold every projection ``registry`` knows (active and retired).

        ``snapshot_every`` defaults to the value recorded in the canonical genesis.
        ``states_for(branch, seq)`` says at which SNAPSHOT entries the encoded fold states
        are wanted too (to store or compare them); by default none. ``read_state`` summarises
        state projections from derived tables; without it they are not replayed (a root that
        lists one is reported as not replayable here).
        """
        self.projections = tuple(
            p for p in registry.known() if read_state is not None or not is_state_projection(p)
        )
        self.read_state = read_state
        self.every = snapshot_every
        self.states_for = states_for
        self.folds: dict[str, BranchFold] = {}
        self.roots: dict[str, list[tuple[int, MemoryRoot]]] = {}
        # per branch: (seq, relink pairs) of its CASCADE / RESTORE entries that relink
        self.relinks: dict[str, list[tuple[int, list[tuple[str, str]]]]] = {}
        # The memory maps of every branch, in memory (one store: a fork shares its parent's
        # subtrees), and each fork point's map: (branch, seq of BRANCH_CREATE) -> (map
        # root, changes since), the map a forked branch starts from (§6.13).
        self.nodes = MemNodes()
        self.fork_maps: dict[tuple[str, int], tuple[bytes, list[LeafChange]]] = {}
        self._gc_at = 1 << 17

    def _collect(self) -> None:
        """Drop the in-memory map nodes no branch's map (nor a fork point's) reaches.

        Run when the store doubled since the last collection, so its cost is amortised and
        the memory held stays within twice the live maps' nodes.
        """
        roots = [f.map_base for f in self.folds.values()]
        roots += [base for base, _ in self.fork_maps.values()]
        live = reachable(self.nodes.nodes, roots)
        self.nodes.nodes = live
        self._gc_at = max(1 << 17, 2 * len(live))

    def _fold(self, entry: Entry) -> BranchFold:
        fold = self.folds.get(entry.branch)
        if fold is None:
            if self.every is None and entry.branch == CANONICAL_BRANCH and entry.seq == 0:
                every = entry.body.get("snapshot_every")
                self.every = every if type(every) is int and every > 0 else None
            fold = BranchFold(
                entry.branch,
                Folder(self.projections),
                self.every or DEFAULT_SNAPSHOT_EVERY,
                writer=False,
                read_state=self.read_state,
                map_source=self.nodes,
            )
            if entry.seq == 0 and entry.branch != CANONICAL_BRANCH:
                anchor = fork_anchor(entry)
                fold.fork_root = self._root_before(anchor)
                if anchor is not None and anchor in self.fork_maps:
                    base, changes = self.fork_maps[anchor]
                    fold.map_base = base
                    fold.map_changes = [replace(c, seq=-1) for c in changes]
            self.folds[entry.branch] = fold
            self.roots[entry.branch] = []
        return fold

    def _root_before(self, anchor: tuple[str, int] | None) -> MemoryRoot | None:
        if anchor is None:
            return None
        found = None
        at = -1
        for seq, root in self.roots.get(anchor[0], []):
            if seq < anchor[1]:
                found, at = root, seq
        # Relinked by the parent's cascades between that SNAPSHOT and the fork (§6.4).
        for seq, pairs in self.relinks.get(anchor[0], []):
            if at < seq < anchor[1]:
                found = relink_by(found, pairs)
        return found

    def feed(self, entry: Entry) -> RootReplayed | SelfModelReplayed | None:
        """Replay one entry (entries of a branch in seq order).

        Raises:
            SnapshotMismatch: a SNAPSHOT disagrees with the replay (the fold goes on from
                the root the entry claims, so one bad root is reported once).
            ValidationError: a malformed SNAPSHOT or SELFMODEL_SNAPSHOT payload.
        """
        fold = self.folds.get(entry.branch) or self._fold(entry)
        t = entry.type
        if t in _RELINKS and (pairs := relink_pairs(entry)):
            self.relinks.setdefault(entry.branch, []).append((entry.seq, pairs))
        if t not in _WATCHED or entry.kind is not Kind.OP:
            fold.advance(entry)
            return None
        try:
            if t == _SNAPSHOT:
                return self._snapshot(fold, entry)
            if t == _SELFMODEL_SNAPSHOT:
                return self._selfmodel(entry)
            self.fork_maps[(entry.branch, entry.seq)] = (fold.map_base, list(fold.map_changes))
            check_fork_root(entry, fold.latest_root)
            return None
        finally:
            fold.advance(entry)

    def _snapshot(self, fold: BranchFold, entry: Entry) -> RootReplayed:
        try:
            prepared = check_snapshot(fold, entry, exact=False)
        except ValidationError:
            payload = entry.body.get("payload")
            claimed = payload.get("memory_root") if type(payload) is dict else None
            if type(claimed) is bytes and len(claimed) == 32:
                fold.snapshot_taken(entry, MemoryRoot(claimed))
                self.roots[entry.branch].append((entry.seq, MemoryRoot(claimed)))
            raise
        root = prepared.preimage.root()
        pending = fold.pending_seq
        skipped = pending if pending is not None and pending != prepared.high_water.seq else None
        if (
            self.states_for is not None
            and prepared.high_water.seq == fold.next_seq - 1
            and self.states_for(entry.branch, entry.seq)
        ):
            states = fold.folder.encoded_states()
            prepared = replace(
                prepared,
                items=tuple((d, replace(s, fold_state=states[d.rule])) for d, s in prepared.items),
            )
        previous = fold.latest_root
        fold.snapshot_taken(entry, root, prepared)
        if len(self.nodes.nodes) > self._gc_at:
            self._collect()
        self.roots[entry.branch].append((entry.seq, root))
        return RootReplayed(entry.seq, root, prepared, skipped, previous)

    def _selfmodel(self, entry: Entry) -> SelfModelReplayed:
        payload = entry.body.get("payload")
        _, cited, branch, sm_root = parse_selfmodel_payload(payload)
        if branch != entry.branch:
            raise ValidationError(
                f"SelfModel body names branch {branch!r}", field="payload.body.branch"
            )
        if cited is not None and cited not in {r for _, r in self.roots[entry.branch]}:
            raise ValidationError(
                f"SelfModel cites memory_root {cited.hex()}, which is not a "
                "root of this branch before it",
                field="payload.body.memory_root",
            )
        assert isinstance(payload, dict)
        return SelfModelReplayed(
            SelfModelRecord(
                entry.branch, entry.seq, sm_root, cited, encoding.encode(payload["body"])
            )
        )

    def due(self) -> list[tuple[str, int]]:
        """Return ``(branch, seq)`` of automatic snapshots due at the end and never taken."""
        return [(b, f.pending_seq) for b, f in self.folds.items() if f.pending_seq is not None]


def _compare_root(db: apsw.Connection, branch: str, r: RootReplayed, report: AuditReport) -> None:
    """Compare the stored record of a replayed root (and its summaries) with the replay."""

    def bad(message: str, expected: str | None = None, actual: str | None = None) -> None:
        report.add(
            Finding(
                STEP,
                f"stored memory_root {r.root.hex()[:16]}: {message}",
                branch,
                r.seq,
                expected=expected,
                actual=actual,
            )
        )

    try:
        rec = records.get_root(db, r.root)
    except NotFoundError:
        bad("no stored record (run `memroot rebuild`?)")
        return
    pre = r.prepared
    want = (branch, r.seq, pre.parent, pre.high_water, pre.map_root)
    got = (rec.branch, rec.seq, rec.parent, rec.high_water, rec.map_root)
    if want != got:
        bad(
            "record differs from the SNAPSHOT entry (branch, seq, parent, high-water, map)",
            str(want),
            str(got),
        )
    stored = {s.projection: s for s in records.summaries(db, r.root)}
    for _, s in pre.items:
        got_s = stored.pop(s.projection, None)
        if got_s is not None and s.fold_state is None:
            got_s = replace(got_s, fold_state=None)  # not replayed here: nothing to compare
        if got_s is None:
            bad(f"summary of projection {s.projection!r} is missing")
        elif got_s != s:
            field = next(
                f
                for f in ("rule", "rule_cbor", "digest", "count", "data", "fold_state")
                if getattr(got_s, f) != getattr(s, f)
            )
            bad(
                f"stored {field} of projection {s.projection!r} differs from the replay",
                _short(getattr(s, field)),
                _short(getattr(got_s, field)),
            )
    for extra in sorted(stored):
        bad(f"stored summary of projection {extra!r} is not committed by the root")


def _short(value: object) -> str:
    if isinstance(value, bytes):
        return value.hex() if len(value) <= 32 else f"{len(value)} bytes"
    return str(value)


class RootsReplayCheck:
    """Verify step 8 as a ``memroot.ledger.verify.ReplayCheck``: replay every root, compare records.

    With ``path`` (a ledger file) the stored records are compared with the replay too; without
    (an auditor's bundle, which carries no records) only the entries are replayed.
    """

    steps: tuple[int, ...] = (STEP,)

    def __init__(
        self,
        path: Path | None = None,
        registry: Registry | None = None,
        snapshot_every: int | None = None,
        *,
        restricted: bool = False,
        ledger: Ledger | None = None,
    ) -> None:
        """Check with ``registry`` (default: built-ins + plugins).

        ``snapshot_every`` defaults to the canonical genesis's value. ``restricted`` (an audit
        of some branches only, ``verify --branch``): stored records of branches never fed are
        not reported. ``ledger``: the open ledger whose read transaction the audit runs in;
        its connection is read instead of opening ``path`` (one snapshot for every check),
        and left open.
        """
        self.restricted = restricted
        self._fed: set[str] = set()
        self._shared = ledger
        if ledger is not None:
            path = ledger.path
        self.path = None if path is None else Path(path)
        self.replay = RootsReplay(
            registry if registry is not None else default_registry(),
            snapshot_every,
            states_for=self._stored_state,
            read_state=None if self.path is None else self._read_state,
        )
        self._db: apsw.Connection | None = None
        self._roots: set[bytes] = set()
        self._selfmodels: set[tuple[str, int]] = set()

    def _records(self) -> apsw.Connection | None:
        """Return a read-only connection to the stored records, or None (no file, no tables)."""
        if self._db is None and self.path is not None:
            db = (
                apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
                if self._shared is None
                else self._shared.store.db
            )
            found = db.execute(
                "SELECT count(*) FROM sqlite_master WHERE name = 'memory_roots'"
            ).fetchall()[0][0]
            if not found:
                if self._shared is None:
                    db.close()
                self.path = None
                return None
            self._db = db
        return self._db

    def _read_state(self, projection: Projection, branch: str, as_of: int) -> Summary:
        """Summarise a state projection from the file's derived tables (checked by step 9)."""
        db = self._records()
        if db is None:
            raise ValueError("the ledger file holds no derived state to replay it from")
        return read_state(projection, db, branch, as_of)

    def _stored_state(self, branch: str, seq: int) -> bool:
        """Return True when the stored root at (branch, seq) keeps fold states to compare."""
        db = self._records()
        return db is not None and bool(
            db.execute(
                "SELECT 1 FROM memory_roots r JOIN memory_root_summaries s ON s.root = r.root "
                "WHERE r.branch = ? AND r.seq = ? AND s.fold_state IS NOT NULL LIMIT 1",
                (branch, seq),
            ).fetchall()
        )

    def _failed(self, e: Exception, branch: str, entry: Entry, report: AuditReport) -> None:
        """Report why ``entry`` does not replay.

        ``e`` is a ``SnapshotMismatch``, a ``ValidationError``, or a state projection's
        ``ValueError``/``TypeError``/``apsw.Error``.
        """
        if isinstance(e, SnapshotMismatch):
            report.add(
                Finding(
                    STEP,
                    not_replayed(e, entry.type),
                    branch,
                    entry.seq,
                    expected=e.expected,
                    actual=e.actual,
                )
            )
        elif isinstance(e, ValidationError):
            report.add(Finding(STEP, not_replayed(e, entry.type), branch, entry.seq))
        else:
            report.add(
                Finding(STEP, f"a state projection cannot be replayed: {e}", branch, entry.seq)
            )

    def feed_events(self, branch: str, events: Sequence[Entry], report: AuditReport) -> None:
        """Replay a run of consecutive events (as ``feed`` on each, findings included)."""
        self._fed.add(branch)
        folds = self.replay.folds
        for entry in events:
            fold = folds.get(entry.branch)
            if fold is None:
                self.feed(branch, entry, report)
                continue
            try:
                fold.advance(entry)  # what ``RootsReplay.feed`` does with an event
            except (ValidationError, ValueError, TypeError, apsw.Error) as e:
                self._failed(e, branch, entry, report)

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """Replay one entry; report a SNAPSHOT or SELFMODEL_SNAPSHOT that does not hold."""
        self._fed.add(branch)
        try:
            r = self.replay.feed(entry)
        except (ValidationError, ValueError, TypeError, apsw.Error) as e:
            self._failed(e, branch, entry, report)
            return
        if r is None:
            return
        db = self._records()
        if isinstance(r, RootReplayed):
            self._roots.add(r.root)
            if r.skipped is not None:
                report.add(
                    Finding(
                        STEP,
                        f"the automatic SNAPSHOT due after entry {r.skipped} "
                        "is missing (written without the memory_root hook?)",
                        branch,
                        r.skipped,
                        severity="note",
                    )
                )
            if db is not None:
                _compare_root(db, branch, r, report)
            return
        self._selfmodels.add((branch, entry.seq))
        if db is None:
            return
        row = db.execute(
            "SELECT branch, seq, selfmodel_root, memory_root, body FROM selfmodel_snapshots "
            "WHERE branch = ? AND seq = ?",
            (branch, entry.seq),
        ).fetchone()
        if row is None or SelfModelRecord(*row) != r.record:
            report.add(
                Finding(
                    STEP,
                    "stored SelfModel record is missing or differs from the "
                    "SELFMODEL_SNAPSHOT entry",
                    branch,
                    entry.seq,
                )
            )

    def finish(self, report: AuditReport) -> None:
        """Report stored records no entry accounts for, and automatic snapshots never taken."""
        for branch, seq in self.replay.due():
            report.add(
                Finding(
                    STEP,
                    f"the automatic SNAPSHOT due after entry {seq} is missing "
                    "(written without the memory_root hook?)",
                    branch,
                    seq,
                    severity="note",
                )
            )
        db = self._records()
        if db is None:
            return
        try:
            roots: list[Any] = db.execute(
                "SELECT root, branch, seq FROM memory_roots ORDER BY branch, seq"
            ).fetchall()
            for root, b, n in roots:
                if self.restricted and b not in self._fed:
                    continue
                if root not in self._roots:
                    report.add(
                        Finding(
                            STEP,
                            f"stored memory_root {root.hex()} has no SNAPSHOT "
                            "entry that replays to it",
                            b,
                            n,
                        )
                    )
            models: list[Any] = db.execute(
                "SELECT branch, seq FROM selfmodel_snapshots ORDER BY branch, seq"
            ).fetchall()
            for b, n in models:
                if self.restricted and b not in self._fed:
                    continue
                if (b, n) not in self._selfmodels:
                    report.add(
                        Finding(
                            STEP,
                            "stored SelfModel record has no SELFMODEL_SNAPSHOT entry",
                            b,
                            n,
                        )
                    )
        finally:
            if self._shared is None:
                db.close()
            self._db = None


_SORTED_LOAD = True
"""``RootsRebuild`` writes the map's nodes all at once at the end (``map_nodes.SortedLoad``;
off: each snapshot's nodes as it replays, ``StoredNodes.put``, the reference the tests and
the A/B compare with)."""


class RootsRebuild:
    """The memory roots' records and the map's nodes, replayed from the log (``rebuild``).

    A ``memroot.projections.replay.Refold``: ``memroot rebuild`` feeds it the entries of
    the memory model's own pass (one strict read of the log, each entry proven once), ahead
    of the falsification layer, which reads the roots' records as of each entry; ``rebuild``
    below feeds it a strict read of its own. ``start`` drops the stored roots, SelfModel
    records, re-snapshot records and map nodes; each ``SNAPSHOT`` that replays writes its
    record and its map's new nodes; ``n`` counts the roots written.

    A ``SNAPSHOT`` or ``SELFMODEL_SNAPSHOT`` that does not replay raises ``IntegrityError``
    (step 8, branch and seq) and leaves it in ``failed``, so that a caller sharing the pass
    tells it from a failed strict read (which the reader raises, ``failed`` None).
    """

    def __init__(
        self,
        ledger: Ledger,
        registry: Registry,
        *,
        read_state: Callable[[Projection, str, int], Summary] | None = None,
    ) -> None:
        """Replay with ``registry``'s projections into ``ledger``'s derived state.

        ``read_state(projection, branch, as_of)`` summarises a state projection; without it
        state projections are not replayed (``RootsReplay``), so a caller sharing the
        memory model's pass, which rebuilds the tables such a projection reads, passes none
        and must not be given a registry that knows one (``ValueError``).

        Raises:
            ValueError: if ``read_state`` is None and ``registry`` knows a state projection.
        """
        if read_state is None and any(is_state_projection(p) for p in registry.known()):
            raise ValueError(
                "a state projection reads the stored memory model: replay the roots before "
                "the memory model's pass (memroot.memory_root.replay.rebuild)"
            )
        self.ledger = ledger
        self.registry = registry
        self._read_state = read_state
        self.n = 0
        self.failed: IntegrityError | None = None
        self._db: apsw.Connection | None = None
        self._stored: map_nodes.SortedLoad | map_nodes.StoredNodes | None = None
        self._replay: RootsReplay | None = None

    def start(self, db: apsw.Connection) -> None:
        """Drop the stored roots, SelfModel records and map nodes (inside ``db``'s transaction).

        Root states are left ``live``; the falsification layer re-applies its own.
        """
        records.install(db)
        records.clear_resnapshots(db)  # the falsification layer's rebuild writes them again
        map_nodes.install(db)
        db.execute(
            "DELETE FROM memory_root_summaries; DELETE FROM memory_roots; "
            "DELETE FROM selfmodel_snapshots; DELETE FROM memory_map_nodes; "
            "DELETE FROM memory_map_roots"
        )
        self._db = db
        self._stored = map_nodes.SortedLoad(db) if _SORTED_LOAD else map_nodes.StoredNodes(db)
        self._replay = RootsReplay(
            self.registry, states_for=lambda branch, seq: True, read_state=self._read_state
        )
        self.n = 0
        self.failed = None

    def feed(self, entries: Sequence[Entry]) -> None:
        """Replay entries of one branch in seq order (one, or a run of events).

        Raises:
            IntegrityError: (step 8, naming branch and seq) if a SNAPSHOT or
                SELFMODEL_SNAPSHOT does not replay (also left in ``failed``).
        """
        replay, db, stored = self._replay, self._db, self._stored
        assert replay is not None and db is not None and stored is not None
        folds = replay.folds
        for e in entries:
            if e.kind is Kind.EVENT and (fold := folds.get(e.branch)) is not None:
                fold.advance(e)  # what ``RootsReplay.feed`` does with an event
                continue
            try:
                r = replay.feed(e)
            except ValidationError as err:
                self.failed = IntegrityError(
                    f"{e.type} at entry {e.seq} does not replay: {err}",
                    branch=e.branch,
                    seq=e.seq,
                    step=STEP,
                )
                raise self.failed from err
            if isinstance(r, RootReplayed):
                top = r.prepared.preimage.map_root
                if r.prepared.nodes or top is not None:
                    stored.put(r.prepared.nodes or {}, () if top is None else (top,))
                records.insert_root(
                    db, e.seq, r.prepared.preimage, r.prepared.stored, supersedes=r.previous
                )
                self.n += 1
            elif isinstance(r, SelfModelReplayed):
                records.insert_selfmodel(db, r.record)

    def finish(self) -> None:
        """Write the map's nodes (``map_nodes.SortedLoad``: each once, all at once)."""
        if isinstance(self._stored, map_nodes.SortedLoad):
            self._stored.close()
        self._stored = None


def rebuild(ledger: Ledger, registry: Registry) -> int:
    """Drop the stored roots and SelfModel records and replay them from the log.

    Root states are reset to ``live``; the falsification layer re-applies its own. The log
    is read strictly here, branch by branch; state projections summarise the memory model
    as stored. Returns the number of roots written.

    Raises:
        IntegrityError: (step 8, naming branch and seq) if a SNAPSHOT or SELFMODEL_SNAPSHOT
            does not replay, or an entry fails its strict read; nothing is changed then.
    """
    with ledger.write() as db:
        layer = RootsRebuild(
            ledger, registry, read_state=lambda p, b, as_of: read_state(p, db, b, as_of)
        )
        layer.start(db)
        for b in ledger.store.branches():
            for e in ledger.entries(0, None, b.name):
                layer.feed((e,))
        layer.finish()
    return layer.n
