"""``RootsHook``: the memory_root layer's append hook (runs inside every append transaction).

For every new entry it

- validates the operations this layer owns: ``VIOLATION_RECORDED`` and ``CORRECTION_APPLIED``
  payloads, ``SNAPSHOT`` (the payload must be exactly what replaying the log gives) and
  ``SELFMODEL_SNAPSHOT`` (well-formed, its selfmodel_root matches, it cites the branch's latest
  live memory_root); a bad one is refused and nothing is written;
- stores the root and selfmodel records of accepted ``SNAPSHOT`` / ``SELFMODEL_SNAPSHOT``;
- folds the entry into every registered projection and returns an automatic ``SNAPSHOT``
  follow-up when the cadence makes one due, then ``SELFMODEL_SNAPSHOT`` follow-ups from the
  SelfModel hooks once it is stored.

Fold state lives in memory between appends, checked against the chain at every entry (the
entry must extend the last one folded). When it does not (first append after opening, a
rolled-back transaction, another writer), it is reloaded: each projection's state from the
latest root (persisted with it), then the entries after that root's high-water mark.

The hook appends no checkpoint: SQLite cannot sign inside the transaction whose commit the
checkpoint must follow. ``memory_root.Roots`` signs right after the commit of any append that
produced a snapshot (see ``Roots.append`` and ``Roots.sign_pending``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

import apsw

from memroot.ledger import encoding
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind, OpInput, _library_op
from memroot.ledger.errors import IntegrityError, StorageError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.merkle import CompactRange, perfect_subtrees
from memroot.ledger.vocab import OpType
from memroot.memory_root import map_nodes, records
from memroot.memory_root._fold import (
    NO_CADENCE,
    BranchFold,
    Folder,
    Prepared,
    check_fork_root,
    check_snapshot,
    fork_anchor,
    not_replayed,
    relink,
)
from memroot.memory_root.cache_check import check_segment
from memroot.memory_root.records import RootRecord, SelfModelRecord
from memroot.memory_root.root import MemoryRoot
from memroot.memory_root.root_v2 import map_at
from memroot.memory_root.selfmodel import (
    SelfModelHook,
    load_selfmodel_hooks,
    parse_selfmodel_payload,
    selfmodel_payload,
)
from memroot.projections.builtins import check_payload
from memroot.projections.hook import flush_pending
from memroot.projections.projection import (
    Projection,
    Summary,
    decode_state,
    read_state,
    rule_digest,
)
from memroot.projections.registry import Registry, default_registry

__all__ = ["RootsHook"]

_SNAPSHOT: Final = OpType.SNAPSHOT.value
_SELFMODEL_SNAPSHOT: Final = OpType.SELFMODEL_SNAPSHOT.value
_BRANCH_CREATE: Final = OpType.BRANCH_CREATE.value


def _replayed_snapshot(fold: BranchFold, entry: Entry) -> Prepared:
    """Check a committed ``SNAPSHOT`` a host's cache applies, as verify step 8 checks it.

    A writer's own ``SNAPSHOT`` must list exactly its fold's projections; one already in
    the log is judged as every replay judges it (``check_snapshot`` with ``exact`` off, the
    auditor's rule), and one that does not replay is refused with the finding verify
    reports for it, never skipped: skipping it would serve memory a root of the log
    disagrees with, while ``verify`` fails on that root (issue 23 point 3).

    Raises:
        IntegrityError: step 8, naming the branch, the entry and what does not replay.
    """
    try:
        return check_snapshot(fold, entry, exact=False)
    except ValidationError as e:
        raise IntegrityError(
            f"step 8: entry {entry.seq} of branch {entry.branch!r}: "
            f"{not_replayed(e, entry.type)}; `memroot verify` reports it (the log holds a "
            "memory root its own entries do not give)",
            branch=entry.branch,
            seq=entry.seq,
            step=8,
        ) from e


class RootsHook:
    """The ``AppendHook`` of the memory_root layer (see the module docstring)."""

    def __init__(
        self,
        registry: Registry | None = None,
        selfmodel_hooks: Sequence[SelfModelHook] | None = None,
    ) -> None:
        """Use ``registry`` and ``selfmodel_hooks`` (default: built-ins and entry points).

        Default SelfModel hooks are those declared in the ``memroot.selfmodel`` group.

        Raises:
            TypeError, ValueError, ImportError: if a plugin cannot be loaded.
        """
        self.registry = registry if registry is not None else default_registry()
        self.selfmodel_hooks = list(
            load_selfmodel_hooks() if selfmodel_hooks is None else selfmodel_hooks
        )
        self._folds: dict[tuple[str, str], BranchFold] = {}
        self._db: apsw.Connection | None = None  # the connection state projections read

    def _read_state(self, projection: Projection, branch: str, as_of: int) -> Summary:
        """Summarise a state projection from the derived tables of the ledger being written."""
        assert self._db is not None
        flush_pending(self._db)  # the memory model's rows of the batch so far
        return read_state(projection, self._db, branch, as_of)

    def install(self, db: apsw.Connection) -> None:
        """Create the memory_root tables (and the memory map's node table) if missing."""
        records.install(db)
        map_nodes.install(db)

    def apply(
        self, db: apsw.Connection, ledger: Ledger, entry: Entry, content: str | None
    ) -> list[OpInput]:
        """Validate and fold one new entry; return automatic snapshot / SelfModel follow-ups.

        Raises:
            ValidationError: for a malformed audit record, a SNAPSHOT that does not match the
                replay, or a SELFMODEL_SNAPSHOT that does not cite the latest live root.
        """
        fold = self.fold_for(ledger, entry.branch, entry)
        if entry.seq == 0 and entry.branch != CANONICAL_BRANCH:
            fold.fork_root = self.fork_root(db, entry, ledger)
            anchor = fork_anchor(entry)
            if anchor is not None:
                # A branch's map starts from its parent's at the fork (shared subtrees).
                m = map_at(ledger, anchor[0], anchor[1], strict=False)
                fold.map_base = m.base
                fold.map_changes = [dataclasses.replace(c, seq=-1) for c in m.changes]
        follow: list[OpInput] = []
        if entry.kind is Kind.OP:
            t = entry.type
            if t == _SNAPSHOT:
                follow = self._snapshot(db, fold, entry, ledger)
            elif t == _SELFMODEL_SNAPSHOT:
                self._selfmodel(db, entry)
            elif t == _BRANCH_CREATE:
                check_fork_root(entry, fold.latest_root)
            else:
                check_payload(entry.type, entry.body["payload"])
        if fold.advance(entry):
            assert fold.pending is not None
            follow.append(
                _library_op(Ledger.system_op(OpType.SNAPSHOT, fold.pending.preimage.payload()))
            )
        return follow

    def apply_events(
        self, db: apsw.Connection, ledger: Ledger, entries: Sequence[Entry], contents: Sequence[str]
    ) -> list[OpInput]:
        """Fold a run of events (the ledger's native batch path), as ``apply`` on each.

        An event is never the genesis nor an operation: it is only folded (``advance``),
        which may make an automatic snapshot due (``event_run`` ends the run there).
        """
        fold = self.fold_for(ledger, entries[0].branch, entries[0])
        follow: list[OpInput] = []
        for entry in entries:
            if fold.advance(entry):
                assert fold.pending is not None
                follow.append(
                    _library_op(Ledger.system_op(OpType.SNAPSHOT, fold.pending.preimage.payload()))
                )
        return follow

    def event_run(self, ledger: Ledger, branch: str, seq: int, prev: bytes) -> int:
        """How many events from ``seq`` may be one run: through the next automatic snapshot."""
        fold = self._folds.get((ledger.ledger_id, branch))
        if fold is None or fold.next_seq != seq or fold.last_hash != prev:
            return 1  # the first event loads the fold; the next run knows the cadence
        if fold.pending_seq is not None:
            return 1 << 62  # a snapshot is already due: no event makes another one due
        return fold.last_snapshot_seq + fold.every - seq + 1

    # -- snapshots -----------------------------------------------------------------------------

    def _snapshot(
        self, db: apsw.Connection, fold: BranchFold, entry: Entry, ledger: Ledger
    ) -> list[OpInput]:
        if ledger.catching_up:
            prepared = _replayed_snapshot(fold, entry)
        else:
            prepared = check_snapshot(fold, entry, exact=True)
        pre = prepared.preimage
        if pre.map_root is not None and ledger.catching_up:
            # A host's cache applying another host's root: its rows must give the leaves
            # the root changed (cache_check); refused, the catch-up rolls back.
            prev = records.latest_v2_before(db, entry.branch, pre.high_water.seq + 1)
            check_segment(
                db,
                ledger.derived.path or "",
                entry.branch,
                fold.map_changes,
                -1 if prev is None else prev.high_water.seq,
                pre.high_water.seq,
            )
        if prepared.nodes or pre.map_root is not None:
            # Through the source the update read its nodes from: it knows their row numbers.
            source = fold.map_source
            if not (isinstance(source, map_nodes.StoredNodes) and source.db is db):
                source = map_nodes.StoredNodes(db)
            source.put(prepared.nodes or {}, () if pre.map_root is None else (pre.map_root,))
        root = records.insert_root(db, entry.seq, pre, prepared.stored, supersedes=fold.latest_root)
        fold.snapshot_taken(entry, root, prepared)
        if not self.selfmodel_hooks:
            return []
        record = RootRecord(
            root,
            pre.branch,
            entry.seq,
            pre.parent,
            pre.high_water,
            pre.v,
            "live",
            pre.projections,
            map_root=pre.map_root,
        )
        follow = []
        for hook in self.selfmodel_hooks:
            model = hook.on_root(record)
            if model is not None:
                follow.append(
                    _library_op(
                        Ledger.system_op(
                            OpType.SELFMODEL_SNAPSHOT, selfmodel_payload(model, root, entry.branch)
                        )
                    )
                )
        return follow

    def _selfmodel(self, db: apsw.Connection, entry: Entry) -> None:
        _, cited, branch, sm_root = parse_selfmodel_payload(entry.body["payload"])
        if branch != entry.branch:
            raise ValidationError(
                f"SelfModel body names branch {branch!r}, the entry is on {entry.branch!r}",
                field="payload.body.branch",
            )
        latest = records.latest_root(db, entry.branch, live_only=True)
        want = None if latest is None else latest.root
        if cited != want:
            raise ValidationError(
                "a SELFMODEL_SNAPSHOT must cite the branch's latest live memory_root "
                f"({'none yet' if want is None else want.hex()}), not "
                f"{'none' if cited is None else cited.hex()}",
                field="payload.body.memory_root",
            )
        records.insert_selfmodel(
            db,
            SelfModelRecord(
                entry.branch,
                entry.seq,
                sm_root,
                cited,
                encoding.encode(entry.body["payload"]["body"]),
            ),
        )

    def prepare_head(self, ledger: Ledger, branch: str) -> Prepared | None:
        """Return the snapshot of ``branch`` at its head, or None if nothing changed.

        Nothing changed when only SELFMODEL_SNAPSHOT entries, or none, follow the last
        SNAPSHOT.

        Call inside a write transaction, then append its payload as a SNAPSHOT.

        Raises:
            StorageError: if the stored roots cannot be read.
        """
        self._db = ledger.derived.db
        row = ledger.store.branch(branch)
        fold = self._folds.get((ledger.ledger_id, branch))
        if fold is None or fold.next_seq != row.size or fold.last_hash != row.head:
            fold = self._load(ledger, branch)
        if not fold.dirty:
            return None
        return fold.prepare()

    # -- fold state ----------------------------------------------------------------------------

    def fold_for(self, ledger: Ledger, branch: str, entry: Entry) -> BranchFold:
        """Return the branch's fold positioned right before ``entry``, reloading if needed.

        Raises:
            StorageError: if the stored state cannot be brought up to ``entry``.
        """
        self._db = ledger.derived.db
        key = (ledger.ledger_id, branch)
        fold = self._folds.get(key)
        if fold is not None and fold.follows(entry):
            return fold
        fold = self._load(ledger, branch)
        if not fold.follows(entry):
            raise StorageError(
                f"memory_root state of branch {branch!r} ends at entry {fold.next_seq - 1}, "
                f"cannot fold entry {entry.seq} (was an entry appended without the hook?)"
            )
        return fold

    @staticmethod
    def fork_root(
        db: apsw.Connection, genesis: Entry, ledger: Ledger | None = None
    ) -> MemoryRoot | None:
        """Return the root a branch's first root links to: its parent's root at the fork.

        That is the parent's newest root before the ``BRANCH_CREATE``, relinked by the
        parent's cascades between that root's SNAPSHOT and the fork (docs/FORMAT.md §6.4);
        without ``ledger`` (no entries to read) the relinking is left out.
        """
        anchor = fork_anchor(genesis)
        if anchor is None:
            return None
        root = records.root_before(db, *anchor)
        if root is None or ledger is None:
            return root
        start = records.get_root(db, root).seq + 1
        for e in ledger.entries(start, anchor[1], anchor[0]):
            root = relink(root, e)
        return root

    def check_complete(
        self,
        ledger: Ledger,
        branch: str,
        read_rows: Callable[[], tuple[Mapping[str, Iterable[str]], Sequence[str]]],
        asked: Sequence[str],
        *,
        every: bool = False,
    ) -> None:
        """Check a view's object rows against the memory map (the read gate's hook).

        See ``memroot.memory_root.complete.check_complete``.

        Raises:
            IntegrityError: as ``check_complete``.
        """
        from memroot.memory_root.complete import check_complete

        check_complete(ledger, branch, read_rows, asked, every=every)

    def forget(self, ledger: Ledger, branch: str) -> None:
        """Drop the in-memory fold of a branch (it is reloaded from storage when next used)."""
        self._folds.pop((ledger.ledger_id, branch), None)

    def _load(self, ledger: Ledger, branch: str) -> BranchFold:
        """Rebuild a branch's fold from the latest stored root and the entries after it."""
        store = ledger.store
        row = store.branch(branch)
        db = ledger.derived.db
        latest = records.latest_root(db, branch)
        saved = {
            s.rule: s.fold_state
            for s in (records.summaries(db, latest.root) if latest else [])
            if s.fold_state is not None
        }
        projections = self.registry.projections()
        resume_at = latest.high_water.seq + 1 if latest else 0
        resumed = [p for p in projections if rule_digest(p) in saved]
        fresh = [p for p in projections if rule_digest(p) not in saved]
        r_fold = Folder(resumed, [decode_state(p, saved[rule_digest(p)]) for p in resumed])
        f_fold = Folder(fresh)
        last_snap = latest.seq if latest else 0
        fork_root = None
        if branch != CANONICAL_BRANCH and row.size and latest is None:
            # Only the branch's first root links to it.
            fork_root = self.fork_root(db, ledger.entry(0, branch), ledger)
        base = latest.root if latest else fork_root
        link = base
        dirty = latest is None
        start = 0 if fresh else resume_at
        # Events are most of a log and no built-in reads them: a stored event row is known by
        # its content columns (ledger.store), so it is skipped without decoding the entry.
        reads = [getattr(p, "types", None) for p in projections]
        skip_events = all(t is not None and "EVENT" not in t for t in reads)
        for r in store.iter_entry_rows(row.no, start, row.size):
            if skip_events and (r.digest is not None or r.erased_by is not None):
                dirty = dirty or r.seq > last_snap
                continue
            e = Entry.from_bytes(r.data)
            if e.seq > last_snap:
                link = relink(link, e)
            f_fold.fold(e)
            if e.seq >= resume_at:
                r_fold.fold(e)
            if e.seq > last_snap and e.type not in NO_CADENCE:
                dirty = True
        order = {p.id: i for i, p in enumerate(projections)}
        pairs = sorted(
            [*zip(resumed, r_fold.states, strict=True), *zip(fresh, f_fold.states, strict=True)],
            key=lambda x: order[x[0].id],
        )
        folder = Folder([p for p, _ in pairs], [s for _, s in pairs])
        compact = CompactRange.from_hashes(
            row.size, store.read_nodes(row.no, perfect_subtrees(row.size))
        )
        fold = BranchFold(
            branch,
            folder,
            ledger.snapshot_every,
            next_seq=row.size,
            last_hash=bytes(row.head),
            compact=compact,
            last_snapshot_seq=last_snap,
            latest_root=latest.root if latest else None,
            fork_root=fork_root,
            dirty=dirty,
            read_state=self._read_state,
            map_source=map_nodes.StoredNodes(db),
        )
        m = map_at(ledger, branch, row.size, strict=False)
        fold.map_base = m.base
        fold.map_changes = m.changes
        if link != base:
            fold.relinked = link
        self._folds[(ledger.ledger_id, branch)] = fold
        return fold
