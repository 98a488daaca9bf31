"""Replaying the ledger into derived state: ``rebuild`` and the auditor's step 9.

The derived tables are a cache (RFC-0002): ``rebuild`` drops them and replays every entry,
and the result must be identical (it reports the state digest before and after). Step 9 of the
verifier (``MemoryReplayCheck``) replays the entries it reads into a throwaway in-memory
database and compares that state's digest with the one the ledger file holds, naming the
first differing row when they disagree.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import apsw

from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport, Finding
from memroot.ledger.vocab import EdgeType
from memroot.projections import tables
from memroot.projections.backends import _EV_INS, MemState, SqlState
from memroot.projections.digest import first_difference, state_digest
from memroot.projections.engine import Engine
from memroot.projections.fold import fold_entries
from memroot.projections.gated import Pending, gated_digest, gated_rows
from memroot.projections.model import EventRef, MemoryObject

__all__ = ["MemoryReplayCheck", "RebuildReport", "Refold", "rebuild", "replay"]

MAX_SKIP_NOTES: Final = 20
_FLUSH_EVERY: Final = 4096


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """What ``rebuild`` did: entries replayed, state sizes, digests before and after."""

    entries: int
    objects: int
    versions: int
    edges: int
    entities: int
    skipped: int
    before: bytes | None
    after: bytes
    seconds: float
    branches_before: Mapping[str, bytes] = field(default_factory=dict)
    branches_after: Mapping[str, bytes] = field(default_factory=dict)
    gated_before: Mapping[str, bytes] = field(default_factory=dict)
    """Per branch, ``gated.gated_digest`` of the gated-invalidation bookkeeping before."""
    gated_after: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def identical(self) -> bool | None:
        """True when the rebuilt state equals the one it replaced (None: there was none).

        ``before``/``after`` digest the canonical branch; every other branch's digests are in
        ``branches_before``/``branches_after`` and must agree too.
        """
        if self.before is None:
            return None
        return (
            self.before == self.after
            and self.branches_before == self.branches_after
            and self.gated_before == self.gated_after
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the report as a JSON-ready dict (digests in hex)."""
        return {
            "entries": self.entries,
            "objects": self.objects,
            "versions": self.versions,
            "edges": self.edges,
            "entities": self.entities,
            "skipped": self.skipped,
            "digest_before": None if self.before is None else self.before.hex(),
            "digest_after": self.after.hex(),
            "identical": self.identical,
            "seconds": round(self.seconds, 3),
            "branches": {
                name: {
                    "digest_before": (
                        self.branches_before[name].hex() if name in self.branches_before else None
                    ),
                    "digest_after": digest.hex(),
                }
                for name, digest in self.branches_after.items()
            },
            "gated": {
                name: {
                    "digest_before": (
                        self.gated_before[name].hex() if name in self.gated_before else None
                    ),
                    "digest_after": digest.hex(),
                }
                for name, digest in self.gated_after.items()
            },
        }


def _count(db: apsw.Connection, sql: str) -> int:
    row = db.execute(sql).fetchone()
    return 0 if row is None else int(row[0])


def _all_entries(ledger: Ledger) -> Iterator[Entry]:
    """Every branch's entries, branches in creation order (parents before their forks)."""
    for b in ledger.store.branches():
        yield from ledger.entries(branch=b.name)


class Refold(Protocol):
    """Another layer's derived state, replayed in the same pass as the memory model's.

    ``rebuild`` calls ``start`` inside its transaction before the first entry, ``feed``
    with each entry once the memory model has folded it (so the layer reads the memory
    model as of that entry), and ``finish`` after the last, before it commits.
    """

    def start(self, db: apsw.Connection) -> None:
        """Drop and recreate the layer's tables in ``db`` (the rebuild's transaction)."""

    def feed(self, entries: Sequence[Entry]) -> None:
        """Replay entries the memory model folded: one, or a run of events of one branch.

        Branches come in ``Store.branches`` order, each in seq order.
        """

    def finish(self) -> None:
        """Write what is still held."""


def rebuild(
    ledger: Ledger, branch: str = CANONICAL_BRANCH, *, also: Sequence[Refold] = ()
) -> RebuildReport:
    """Drop the derived memory tables and replay the whole ledger into them, atomically.

    Every branch is replayed (the canonical one in memory, then each fork through SQL, parents
    first). ``before``/``after`` digest ``branch``; ``branches_before``/``branches_after``
    digest every other branch. The layers in ``also`` are replayed in the same pass, over
    the same entries read once (``Refold``), in the same transaction.

    Raises:
        DecodeError: if a stored entry does not decode (nothing is changed).
        StorageError: if the file cannot be written (nothing is changed).
    """
    t0 = time.perf_counter()
    with ledger.write() as db:
        others = [b.name for b in ledger.store.branches() if b.name != branch]
        had = tables.installed(db)
        before = state_digest(db, branch=branch) if had else None
        branches_before = {b: state_digest(db, branch=b) for b in others} if had else {}
        names = [b.name for b in ledger.store.branches()]
        gated_before = {b: gated_digest(db, b) for b in names} if _has_gated(db) else {}
        tables.drop(db)
        tables.install(db, indexes=False)
        for layer in also:
            layer.start(db)
        n = _refold(db, _all_entries(ledger), _feeder(also))
        tables.create_indexes(db)
        after = state_digest(db, branch=branch)
        report = RebuildReport(
            entries=n,
            objects=_count(db, "SELECT count(*) FROM mem_objects WHERE vto IS NULL"),
            versions=_count(db, "SELECT count(*) FROM mem_objects"),
            edges=_count(db, "SELECT count(*) FROM mem_edges"),
            entities=_count(db, "SELECT count(*) FROM mem_entities WHERE vto IS NULL"),
            skipped=_count(db, "SELECT count(*) FROM mem_skipped"),
            before=before,
            after=after,
            seconds=time.perf_counter() - t0,
            branches_before=branches_before,
            branches_after={b: state_digest(db, branch=b) for b in others},
            gated_before=gated_before,
            gated_after={b: gated_digest(db, b) for b in names},
        )
        for layer in also:
            layer.finish()
    return report


def _feeder(layers: Sequence[Refold]) -> Callable[[Sequence[Entry]], None] | None:
    """Return what ``fold_entries`` calls after entries are folded: every layer's ``feed``."""
    if not layers:
        return None
    if len(layers) == 1:
        return layers[0].feed
    feeds = [layer.feed for layer in layers]

    def feed(entries: Sequence[Entry]) -> None:
        for f in feeds:
            f(entries)

    return feed


def _refold(
    db: apsw.Connection,
    entries: Iterable[Entry],
    after: Callable[[Sequence[Entry]], None] | None = None,
) -> int:
    """``fold_entries(db, entries, fresh=True)`` with the canonical branch in bounded memory.

    The canonical branch is folded in a ``_BoundedMemState`` (the same rows as ``MemState``,
    with at most ``_OBJECTS_HELD`` objects held); the branches after it through SQL, as
    ``fold_entries`` does; ``after`` as there. Returns how many entries were folded.
    """
    memory = _BoundedMemState(db, flush_every=_FLUSH_EVERY, held=_OBJECTS_HELD)
    try:
        return fold_entries(db, entries, fresh=True, memory=memory, after=after)
    except BaseException:
        # A failed fold is rolled back: the rows its holder still holds must not reach the
        # restored tables (``gated._settle`` writes every held row before a read), as they
        # would when the same transaction goes on (``memroot rebuild`` redoing its pass).
        memory.gated.discard()
        raise
    finally:
        # A failed fold is rolled back: its holder must not answer for the restored table.
        memory.gated.abandon()


def _has_gated(db: apsw.Connection) -> bool:
    """Return True when the file holds the gated-invalidation tables (newer derived state)."""
    return (
        db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'mem_gated'"
        ).fetchone()
        is not None
    )


def replay(entries: Iterable[Entry], *, fts: bool = False) -> apsw.Connection:
    """Replay entries into a new in-memory database and return it (for comparisons).

    Refused entries are skipped and recorded, as in ``rebuild``. Give each branch's entries
    in seq order and a branch after its parent (``Store.branches`` order).
    """
    db = apsw.Connection(":memory:")
    db.execute("BEGIN")
    tables.install(db, fts=fts, indexes=False)
    fold_entries(db, entries, fresh=True)
    db.execute("COMMIT")
    return db


_OBJECTS_HELD: Final = 8192
_EV_REPLACE: Final = _EV_INS.replace("INSERT", "INSERT OR REPLACE", 1)
_SPILL_INDEXES: Final = (
    # tables._INDEXES's own indexes (IF NOT EXISTS: create_indexes later leaves them be)
    "CREATE UNIQUE INDEX IF NOT EXISTS mem_objects_id ON mem_objects(id, branch, vfrom);"
    "CREATE INDEX IF NOT EXISTS mem_edges_target ON mem_edges(target_id, type)"
)
_DERIVED: Final = EdgeType.DERIVED_FROM.value
_CITING: Final = (
    "SELECT source_id FROM mem_edges WHERE target_id = ? AND type = ? AND branch = ? "
    "AND rid <= ? ORDER BY rid"
)
_CURRENT_OBJECT: Final = (
    f"SELECT rid, oid, {', '.join(tables.OBJECT_COLS)} FROM mem_objects "
    "WHERE id = ? AND branch = ? AND vto IS NULL"
)


class _BoundedMemState(MemState):
    """A ``MemState`` that holds at most about ``held`` current objects in memory.

    ``MemState`` keeps the current version of every object it ever saw, and every
    DERIVED_FROM edge by event; a replay of 10^6 entries of which 7% create objects held
    ~100 MB of them. Past ``held`` objects, every queued row is written, the older half of
    the objects is let go and so is every edge: objects are then read back from the rows
    just written (``obj``, ``put_object``, ``used``), and an event's citing objects are the
    edges written up to the last spill followed by those held since (``citing``, in the
    order ``MemState`` lists them), through the tables' indexes (created at the first
    spill). The rows written are exactly the ones ``MemState`` writes, so the replayed
    state, and its digest, are the same.
    """

    def __init__(self, db: apsw.Connection, *, flush_every: int, held: int) -> None:
        super().__init__(db, flush_every=flush_every)
        self.held = held
        self.spilled = False
        self.edges_spilled = 0  # edges with a row id up to this are read from mem_edges
        self.gated = Pending(db, complete=True)
        """The events' ``mem_conv`` rows and the operations' ``mem_gated`` rows, held and
        written with one statement each (``gated.Pending``: every read of those tables writes
        them first), at the latest with the events (every ``flush_every``) and at ``finish``.
        ``complete``: the tables are fresh and every row of ``main`` comes through it, so an
        object it never held a row of has none (no query) until ``finish``."""

        self.rows: dict[str, tuple[Any, ...]] = {}
        """The events held, as their ``mem_events`` rows (``MemState.events`` stays empty:
        an ``EventRef`` is built only for an event an operation reads)."""

    def _write_events(self) -> None:
        self.gated.flush()
        super()._write_events()  # none (held as rows)
        # OR REPLACE: a (tampered) log repeating an event id keeps its last, as MemState.
        self.db.executemany(_EV_REPLACE, self.rows.values())
        self.rows.clear()

    def add_event(self, event: EventRef) -> None:
        """Record a new event (every ``flush_every`` events, those held are written out)."""
        self.add_event_rows((event.row(),))

    def add_event_rows(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Record new events by their ``EventRef.row()`` tuples, in order."""
        held = self.rows
        for row in rows:
            held[row[0]] = row
            if len(held) >= self.flush_every:
                self._write_events()
                self._events_written = True

    def event(self, branch: str, event_id: str) -> EventRef | None:
        """Return the event with this id on ``branch``, or None."""
        row = self.rows.get(event_id)
        if row is None:
            return super().event(branch, event_id)  # written out (or none)
        return EventRef(*row) if row[1] == branch else None

    def erase_event(self, event_id: str, seq: int) -> None:
        """Record that entry ``seq`` erased the event's content."""
        row = self.rows.get(event_id)
        if row is None:
            super().erase_event(event_id, seq)
        else:
            self.rows[event_id] = (*row[:6], seq)

    def finish(self) -> None:
        """Write everything still held (``MemState.finish``), the gated rows first."""
        self.gated.close()  # what follows (forks, through SQL) reads the table
        super().finish()

    def _spill(self) -> None:
        self.flush()  # the rows of every object and edge let go are written from here on
        if not self.spilled:
            self.db.execute(_SPILL_INDEXES)
            self.spilled = True
        drop = list(itertools.islice(self.objects, len(self.objects) // 2))
        for key in drop:
            del self.objects[key]
        self.cites.clear()
        self.edges_spilled = self._rid["x"]

    def _load(self, branch: str, object_id: str) -> tuple[MemoryObject, int, int] | None:
        cur = self.objects.get((branch, object_id))
        if cur is not None or not self.spilled:
            return cur
        row = self.db.execute(_CURRENT_OBJECT, (object_id, branch)).fetchone()
        if row is None:
            return None
        cur = (tables.object_from_row(row[2:]), int(row[0]), int(row[1]))
        self.objects[(branch, object_id)] = cur
        return cur

    def obj(self, branch: str, object_id: str) -> MemoryObject | None:
        """Return the current version of a memory object, or None."""
        cur = self._load(branch, object_id)
        return None if cur is None else cur[0]

    def put_object(self, obj: MemoryObject, *, new: bool) -> None:
        """Open a version of an object (closing the current one unless ``new``)."""
        if not new:
            self._load(obj.branch, obj.id)
        super().put_object(obj, new=new)
        if len(self.objects) > self.held:
            self._spill()

    def citing(self, branch: str, event_id: str) -> list[str]:
        """Return the ids of objects with a current DERIVED_FROM edge to the event."""
        held = super().citing(branch, event_id)
        if not self.edges_spilled:
            return held
        params = (event_id, _DERIVED, branch, self.edges_spilled)
        return [str(r[0]) for r in self.db.execute(_CITING, params)] + held

    def used(self, branch: str, node_id: str) -> bool:
        """Return True when an object or entity ever had this id on ``branch``."""
        if super().used(branch, node_id):
            return True
        return self.spilled and (
            self.db.execute(
                "SELECT 1 FROM mem_objects WHERE id = ? AND branch = ? LIMIT 1",
                (node_id, branch),
            ).fetchone()
            is not None
        )


class MemoryReplayCheck:
    """Step 9: replay derived state and compare it with what the ledger file materialised.

    Fed every entry by ``memroot.ledger.verify.audit`` (branch by branch, parents first); ``finish``
    opens the file at ``path`` read-only and compares state digests of every branch it was
    fed (as of the last entry the stored state has folded, when it lags the ledger). The
    canonical branch is replayed in memory; forks through SQL over the replayed parent,
    which gives each its parent as of the fork. Entries the rules refuse (appended without
    the hook) are skipped and reported as notes, exactly as the stored state skipped them.
    """

    steps: tuple[int, ...] = (9,)

    def __init__(
        self, path: Path, *, restricted: bool = False, ledger: Ledger | None = None
    ) -> None:
        """Check the derived state stored in the ledger file at ``path``.

        Every branch fed is compared. Unless ``restricted`` (an audit of some branches only,
        ``verify --branch``), stored state of a branch the audit never fed is a finding.
        ``ledger``: the open ledger whose read transaction the audit runs in; ``finish``
        reads its connection instead of opening ``path`` (one snapshot for every check).
        """
        self.shared = ledger
        self.path = Path(path if ledger is None else ledger.path)
        self.restricted = restricted
        # A private temporary file, not ":memory:": SQLite spills its pages to disk, so a
        # replay of 10^6 entries does not hold the whole replayed state in memory.
        self.db = apsw.Connection("")
        self.db.execute("BEGIN")
        tables.install(self.db, fts=False, indexes=False)
        # Events and queued rows are written out every _FLUSH_EVERY (not MemState's 50,000):
        # what the replay holds in memory stays small whatever the ledger's size.
        self.state = _BoundedMemState(self.db, flush_every=_FLUSH_EVERY, held=_OBJECTS_HELD)
        self.engine = Engine(self.state)
        self.sql: SqlState | None = None
        self.sizes: dict[str, int] = {}

    @property
    def size(self) -> int:
        """Entries of the canonical branch replayed."""
        return self.sizes.get(CANONICAL_BRANCH, 0)

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """Fold one entry into the replayed state."""
        if entry.branch != branch:
            return
        if branch == CANONICAL_BRANCH and self.sql is None:
            self.engine.fold(entry)
        else:
            if self.sql is None:
                # The canonical branch is complete (audits feed it first): write it out, so
                # forks read it as of their fork points.
                self.state.finish()
                tables.create_indexes(self.db)
                self.sql = SqlState(self.db)
                self.engine = Engine(self.sql)
            self._fold_sql(entry)
        self.sizes[branch] = max(self.sizes.get(branch, 0), entry.seq + 1)

    def feed_events(self, branch: str, events: Sequence[Entry], report: AuditReport) -> None:
        """Fold a run of consecutive events of ``branch`` (as ``feed`` on each; no finding)."""
        if branch != CANONICAL_BRANCH or self.sql is not None:
            for entry in events:
                self.feed(branch, entry, report)
            return
        run = [e for e in events if e.branch == branch]
        if run:
            self.engine.fold_events(run)
            self.sizes[branch] = max(self.sizes.get(branch, 0), run[-1].seq + 1)

    def _fold_sql(self, entry: Entry) -> None:
        assert self.sql is not None
        self.db.execute("SAVEPOINT mem_fold")
        try:
            self.engine.apply(entry)
        except RefusedError as e:
            self.db.execute("ROLLBACK TO mem_fold")
            self.sql.skip(entry.branch, entry.seq, entry.type, str(e))
        self.db.execute("RELEASE mem_fold")
        self.sql.set_head(entry.branch, entry.seq + 1)

    def finish(self, report: AuditReport) -> None:
        """Compare the replayed state with the stored one; add findings to ``report``."""
        if self.sql is None:
            self.state.finish()
        skipped: list[Any] = self.db.execute(
            "SELECT branch, seq, op_type, reason FROM mem_skipped "
            "ORDER BY branch != ?, branch, seq",
            (CANONICAL_BRANCH,),
        ).fetchall()
        for branch, seq, op_type, reason in skipped[:MAX_SKIP_NOTES]:
            report.add(
                Finding(
                    9,
                    f"{op_type} entry is not a valid memory operation and is "
                    f"ignored by the memory model: {reason}",
                    branch,
                    seq,
                    severity="note",
                )
            )
        if len(skipped) > MAX_SKIP_NOTES:
            report.add(
                Finding(
                    9,
                    f"{len(skipped) - MAX_SKIP_NOTES} more entries are ignored by the memory model",
                    CANONICAL_BRANCH,
                    severity="note",
                )
            )
        own = self.shared is None
        try:
            stored = (
                apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
                if self.shared is None
                else self.shared.store.db
            )
        except apsw.Error as e:
            self.db.execute("COMMIT")
            report.add(Finding(9, f"cannot open {self.path} to compare derived state: {e}"))
            return
        try:
            if own:
                stored.execute("BEGIN")
            try:
                if not tables.installed(stored):
                    report.add(
                        Finding(
                            9,
                            "the ledger holds no derived memory state to compare (it "
                            "was never materialised); memroot rebuild creates it",
                            CANONICAL_BRANCH,
                            severity="note",
                        )
                    )
                    return
                for branch, size in self.sizes.items():
                    self._compare(stored, branch, size, report)
                if not self.restricted:
                    edited = tables.text_index_edited(stored)
                    if edited is not None:
                        report.add(Finding(9, edited, CANONICAL_BRANCH))
                if not self.restricted:
                    for (branch,) in stored.execute(
                        "SELECT branch FROM mem_heads WHERE size > 0 ORDER BY branch"
                    ).fetchall():
                        if branch not in self.sizes:
                            report.add(
                                Finding(
                                    9,
                                    "the derived memory state holds a branch the ledger does "
                                    "not have",
                                    str(branch),
                                )
                            )
            finally:
                if own:
                    stored.execute("COMMIT")
        except apsw.Error as e:
            report.add(Finding(9, f"the stored derived memory state cannot be read: {e}"))
        finally:
            if own:
                stored.close()
            self.db.execute("COMMIT")

    def _compare_gated(
        self, stored: apsw.Connection, branch: str, as_of: int | None, report: AuditReport
    ) -> None:
        """Step 9 for the gated-invalidation bookkeeping (``mem_gated``, ``mem_conv``)."""
        want = gated_digest(self.db, branch, as_of)
        if not _has_gated(stored):
            report.add(
                Finding(
                    9,
                    "the stored derived state predates gated invalidation (no mem_gated); "
                    "memroot rebuild creates it",
                    branch,
                    expected=want.hex(),
                )
            )
            return
        got = gated_digest(stored, branch, as_of)
        if got == want:
            return
        mine, theirs = gated_rows(self.db, branch, as_of), gated_rows(stored, branch, as_of)
        seq = None
        where = ""
        for a, b in zip(mine, theirs, strict=False):
            if a != b:
                seq = int(a[1]) if isinstance(a[1], int) else None
                where = (
                    f": first at {a[0]} row of entry {a[1]} (replay {a!r:.200}, stored {b!r:.200})"
                )
                break
        else:
            where = f": the replay has {len(mine)} rows, the stored state {len(theirs)}"
        report.add(
            Finding(
                9,
                "the stored gated-invalidation state differs from the replay of the ledger"
                + where
                + " (state materialised before gated invalidation? memroot rebuild)",
                branch,
                seq,
                expected=want.hex(),
                actual=got.hex(),
            )
        )

    def _compare(
        self, stored: apsw.Connection, branch: str, size: int, report: AuditReport
    ) -> None:
        row = stored.execute("SELECT size FROM mem_heads WHERE branch = ?", (branch,)).fetchone()
        head = 0 if row is None else int(row[0])
        if head > size:
            report.add(
                Finding(
                    9,
                    f"the derived memory state claims {head} entries but the ledger has {size}",
                    branch,
                    expected=str(size),
                    actual=str(head),
                )
            )
            return
        as_of = None
        if head < size:
            report.add(
                Finding(
                    9,
                    f"the derived memory state covers {head} of {size} "
                    "entries (appended without the memory hook); compared "
                    "up to there. Any memory command brings it up to date",
                    branch,
                    severity="note",
                )
            )
            as_of = head - 1
        self._compare_gated(stored, branch, as_of, report)
        got = state_digest(stored, as_of=as_of, branch=branch)
        want = state_digest(self.db, as_of=as_of, branch=branch)
        if got == want:
            return
        diff = first_difference(stored, self.db, as_of=as_of, branch=branch)
        seq = None
        if diff is not None and diff.table != "mem_events" and len(diff.key) > 1:
            seq = diff.key[-1] if isinstance(diff.key[-1], int) else None
        report.add(
            Finding(
                9,
                "the stored derived memory state differs from the replay of the ledger"
                + (f": {diff}" if diff is not None else ""),
                branch,
                seq,
                expected=want.hex(),
                actual=got.hex(),
            )
        )
