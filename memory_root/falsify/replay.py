"""Replaying falsification from the log: verify step 9 for states, and ``rebuild``.

``FalsifyReplayCheck`` (a ``memroot.ledger.verify.ReplayCheck``) replays every entry into a
throwaway in-memory database with the same rules the append hook applies (``_core``): the
dependency index, every ``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` and every ``CASCADE``,
whose plan (touched items, the frontier beyond the bound, the re-snapshotted roots) is
recomputed from the ledger and must equal what the entry lists. With the ledger file it then
compares the stored tables and each memory root's ``state`` column with the replay; a
difference is a step 9 violation naming the table, branch and seq. State operations the rules
refuse (appended without the hook) are skipped by both sides and reported as notes.

Without the ledger file (an auditor's bundle carries no summaries) cascade plans are not
recomputed: the entries' lists are applied as they are (a note says so). A v3 root's
projection list (docs/FORMAT.md §6.16) is the file's stored one, or the bundle's record
(``lists``), used only when it hashes to the root's ``projections``.

A memory object's state operation with evidence is validated in its own view (``_core``),
which needs the memory model's gated bookkeeping as of each entry: the check folds the
memory model alongside (a ``MemoryReplayCheck`` it feeds itself, or the audit's own one:
an entry's own view needs only the entries before it), so the append path, step 9 and
``rebuild`` decide alike.

``rebuild`` drops the falsification tables and replays them from the log, then sets every
stored memory root's ``state``; run it after the memory model's and the roots' rebuilds
(its own views read the rebuilt memory model, as of each entry).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import apsw

from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport, Finding
from memroot.ledger.vocab import OpType
from memroot.memory_root import records
from memroot.memory_root.falsify import _core, deps, states
from memroot.memory_root.falsify._core import FalsifyCore, has_table, ledger_core, set_head
from memroot.memory_root.falsify.deps import ROOT, ItemRef
from memroot.memory_root.falsify.states import LIVE
from memroot.projections import tables
from memroot.projections.digest import rows_digest
from memroot.projections.hook import catch_up as memory_catch_up
from memroot.projections.registry import Registry, default_registry
from memroot.projections.replay import MemoryReplayCheck
from memroot.projections.strict_rows import Kept, kept_replay

__all__ = [
    "STEP",
    "TABLES",
    "FalsifyReplayCheck",
    "RebuildResult",
    "StatesRebuild",
    "rebuild",
    "replayed_skips",
]

STEP: Final = 9
TABLES: Final = (
    ("fz_forks", ("branch", "parent", "fork_seq")),
    ("fz_items", ("kind", "id", "branch", "seq", "namespace")),
    ("fz_edges", ("dep_kind", "dep_id", "kind", "id", "branch", "seq")),
    ("fz_touches", ("id", "branch", "seq", "type")),
    (
        "fz_roots",
        (
            "root",
            "branch",
            "seq",
            "hbranch",
            "lo",
            "hi",
            "parent",
            "stateful",
            "replaces",
            "rules",
            "preimage",
        ),
    ),
    (
        "fz_states",
        (
            "kind",
            "id",
            "branch",
            "seq",
            "state",
            "op",
            "actor_id",
            "actor_type",
            "reason",
            "evidence",
        ),
    ),
    ("fz_skipped", ("branch", "seq", "op_type", "reason")),
    ("fz_unapplied", ("branch", "seq", "op_type", "kind", "id", "reason")),
    ("fz_cascades", ("branch", "seq", "origin_kind", "origin_id", "kind", "id", "depth")),
)
"""The falsification tables and their columns (``fz_heads`` is bookkeeping)."""


def _rows(
    db: apsw.Connection, table: str, cols: tuple[str, ...], heads: dict[str, int]
) -> Iterator[tuple[Any, ...]]:
    """Yield a table's rows in a fixed order, only those of entries below each branch head."""
    has_seq = "seq" in cols
    b, s = cols.index("branch"), cols.index("seq") if has_seq else -1
    for r in db.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {', '.join(cols)}"):
        head = heads.get(str(r[b]))
        if head is None or (has_seq and int(r[s]) >= head):
            continue
        yield tuple(bytes(v) if isinstance(v, memoryview) else v for v in r)


def _short(row: tuple[Any, ...] | None) -> str:
    if row is None:
        return "(no row)"
    return str(tuple(v.hex()[:16] if isinstance(v, bytes) else v for v in row))[:300]


class FalsifyReplayCheck:
    """Verify step 9 for SPEC 7 states (see the module docstring)."""

    steps: tuple[int, ...] = (STEP,)

    def __init__(
        self,
        path: Path | None = None,
        registry: Registry | None = None,
        *,
        memory: MemoryReplayCheck | None = None,
        ledger: Ledger | None = None,
        lists: deps.ListSource | None = None,
    ) -> None:
        """Check the ledger file at ``path`` (None: replay only, as for a bundle).

        ``registry`` must know the projections the roots were built with (default: built-ins
        and plugins), so cascades are recomputed the way they were planned. ``memory`` is
        the audit's memory-model replay, which the audit feeds too (it gives operations
        their own views); without it this check folds its own. ``ledger``: the open ledger
        whose read transaction the audit runs in, read instead of opening ``path`` (one
        snapshot for every check) and left open. ``lists``: without a file, where a v3 root's
        projection list is read (a bundle's records, ``bundle_section.bundle_lists``).

        Raises:
            StorageError: if the file cannot be opened read-only.
        """
        self._shared = ledger
        if ledger is not None:
            path = ledger.path
        self.path = None if path is None else Path(path)
        # A private temporary file, not ":memory:": SQLite spills its pages to disk, so the
        # replayed tables (an item, an edge and a touch per object) do not grow the memory
        # of an audit of 10^6 entries (~35 MB there).
        self.db = apsw.Connection("")
        _core.install(self.db)
        self.db.execute("BEGIN")
        reg = registry if registry is not None else default_registry()
        self.file: Ledger | None = None
        self._feeds_memory = memory is None
        # Only its fold is used (``feed``); its ``finish`` compares, which is not ours to do.
        self.memory = memory if memory is not None else MemoryReplayCheck(self.path or Path())
        if self.path is not None:
            self.file = ledger if ledger is not None else Ledger.open(self.path, readonly=True)
            self.core = ledger_core(self.file, reg, db=self.db, gated_db=self.memory.db)
        else:
            self.core = FalsifyCore(
                self.db,
                reg,
                summary_keys=None,
                source=None,
                state_replay=None,
                find_event=None,
                root_states=False,
                gated_db=self.memory.db,
                lists=lists,
            )
        self.sizes: dict[str, int] = {}
        self._noted_plans = False

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """Replay one entry; note a state operation the rules refuse."""
        if self._feeds_memory:
            self.memory.feed(branch, entry, report)
        try:
            skipped = self.core.apply(entry, strict=False)
        except (ValueError, TypeError, KeyError, apsw.Error, IntegrityError) as e:
            # IntegrityError: a DecodeError, or a cascade through a v3 root whose projection
            # list no record vouches for (its stored summaries edited: step 8 names them).
            report.add(Finding(STEP, f"{entry.type} cannot be replayed: {e}", branch, entry.seq))
            skipped = None
        self.sizes[branch] = entry.seq + 1
        if skipped is not None:
            report.add(
                Finding(
                    STEP,
                    f"{entry.type} is refused by the falsification rules and was skipped: "
                    f"{skipped}",
                    branch,
                    entry.seq,
                    severity="note",
                )
            )
        if entry.type == OpType.CASCADE and not self.core.replays_plans and not self._noted_plans:
            self._noted_plans = True
            report.add(
                Finding(
                    STEP,
                    "CASCADE lists are applied as written: recomputing a cascade's plan needs "
                    "the ledger file (its stored summaries)",
                    branch,
                    entry.seq,
                    severity="note",
                )
            )

    def feed_events(self, branch: str, events: Sequence[Entry], report: AuditReport) -> None:
        """Replay a run of consecutive events (as ``feed`` on each: only the head moves)."""
        if self._feeds_memory:
            self.memory.feed_events(branch, events, report)
        if events:
            last = events[-1]
            self.core.apply(last, strict=False)  # an event: nothing but its head to fold
            self.sizes[branch] = last.seq + 1

    def finish(self, report: AuditReport) -> None:
        """Compare the stored tables and root states with the replay (with the file)."""
        try:
            if self.file is not None:
                self._compare(report)
        finally:
            self.db.execute("ROLLBACK")
            self.db.close()
            if self._feeds_memory:
                self.memory.db.close()
            if self.file is not None and self._shared is None:
                self.file.close()

    def _compare(self, report: AuditReport) -> None:
        assert self.file is not None
        fdb = self.file.derived.db
        if not has_table(fdb, "fz_heads"):
            report.add(
                Finding(
                    STEP,
                    "no falsification state is stored in this file (run `memroot rebuild`)",
                    severity="note",
                )
            )
            return
        stored = {str(b): int(n) for b, n in fdb.execute("SELECT branch, size FROM fz_heads")}
        heads: dict[str, int] = {}
        for branch, size in self.sizes.items():
            have = stored.get(branch, 0)
            if have > size:
                report.add(
                    Finding(
                        STEP,
                        f"stored falsification state covers {have} entries, the branch has {size}",
                        branch,
                        expected=str(size),
                        actual=str(have),
                    )
                )
            elif have < size:
                report.add(
                    Finding(
                        STEP,
                        f"stored falsification state covers {have} of {size} entries "
                        "(appended without the hook; any falsify command brings it up to "
                        "date); compared up to there",
                        branch,
                        severity="note",
                    )
                )
            heads[branch] = min(have, size)
        for table, cols in TABLES:
            self._compare_table(fdb, table, cols, heads, report)
        self._compare_root_states(fdb, heads, report)

    def _compare_table(
        self,
        fdb: apsw.Connection,
        table: str,
        cols: tuple[str, ...],
        heads: dict[str, int],
        report: AuditReport,
    ) -> None:
        if not has_table(fdb, table):
            theirs: Iterator[tuple[Any, ...]] = iter(())
        else:
            # Equal tables (every row, in order) are equal below each head: nothing to walk.
            want = rows_digest(self.db, table, cols)
            if want is not None and want == rows_digest(fdb, table, cols):
                return
            theirs = _rows(fdb, table, cols, heads)
        mine = _rows(self.db, table, cols, heads)
        while True:
            a, b = next(mine, None), next(theirs, None)
            if a is None and b is None:
                return
            if a != b:
                row = a if a is not None else b
                assert row is not None
                branch = str(row[cols.index("branch")])
                seq = int(row[cols.index("seq")]) if "seq" in cols else None
                report.add(
                    Finding(
                        STEP,
                        f"stored {table} differs from the replay of the log (first differing "
                        "row; run `memroot rebuild`)",
                        branch,
                        seq,
                        expected=_short(a),
                        actual=_short(b),
                    )
                )
                return

    def _compare_root_states(
        self, fdb: apsw.Connection, heads: dict[str, int], report: AuditReport
    ) -> None:
        if not has_table(fdb, "memory_roots"):
            return
        for root, branch, seq, state in fdb.execute(
            "SELECT root, branch, seq, state FROM memory_roots ORDER BY branch, seq"
        ):
            b = str(branch)
            if b not in heads or heads[b] < self.sizes.get(b, 0):
                continue  # lagging: the state column may be behind too
            change = states.current(
                self.db, deps.view_of(self.db, b), ItemRef(ROOT, bytes(root).hex())
            )
            want = LIVE if change is None else change.state
            if state != want:
                report.add(
                    Finding(
                        STEP,
                        f"stored state of memory_root {bytes(root).hex()[:16]} differs from "
                        "the replay of its FALSIFY/MARK_STALE/RESTORE/CASCADE entries",
                        b,
                        int(seq),
                        expected=want,
                        actual=str(state),
                    )
                )
        self._compare_resnapshots(fdb, heads, report)

    def _compare_resnapshots(
        self, fdb: apsw.Connection, heads: dict[str, int], report: AuditReport
    ) -> None:
        """Compare the stored re-snapshot records with the cascades replayed."""
        if not has_table(fdb, "memory_root_resnapshots"):
            return

        def complete(branch: str) -> bool:
            return branch in heads and heads[branch] >= self.sizes.get(branch, 0)

        stored: set[str] = set()
        for (raw,) in fdb.execute("SELECT root FROM memory_root_resnapshots ORDER BY branch, seq"):
            rec = records.get_resnapshot(fdb, bytes(raw))
            assert rec is not None and rec.replaces is not None and rec.cascade_branch is not None
            b, root = rec.cascade_branch, rec.root.hex()
            stored.add(root)
            if not complete(b):
                continue
            row = deps.root_row(self.db, root)
            problem = None
            if row is None or (row.replaces, row.branch, row.seq) != (
                rec.replaces.hex(),
                b,
                rec.seq,
            ):
                problem = "no CASCADE entry lists it (as stored)"
            elif rec.preimage().root() != rec.root:
                problem = "its stored record (parent, high-water, summaries) does not hash to it"
            else:
                now = states.current(self.db, deps.view_of(self.db, b), ItemRef(ROOT, root))
                want = LIVE if now is None else now.state
                if rec.state != want:
                    problem = f"stored state {rec.state} differs from the replay ({want})"
            if problem is not None:
                report.add(Finding(STEP, f"stored re-snapshot {root[:16]}: {problem}", b, rec.seq))
        for root, branch, seq in self.db.execute(
            "SELECT root, branch, seq FROM fz_roots WHERE replaces IS NOT NULL ORDER BY root"
        ):
            if str(root) not in stored and complete(str(branch)):
                report.add(
                    Finding(
                        STEP,
                        f"re-snapshot {str(root)[:16]} listed by the CASCADE has no stored "
                        "record (run `memroot rebuild`)",
                        str(branch),
                        int(seq),
                    )
                )


@dataclass(frozen=True, slots=True)
class RebuildResult:
    """What ``rebuild`` replayed: entries, state changes, skipped state operations."""

    entries: int
    changes: int
    skipped: int


class StatesRebuild:
    """The falsification tables replayed from the log, entry by entry (``rebuild``).

    A ``memroot.projections.replay.Refold``: ``memroot rebuild`` feeds it the entries of
    the memory model's own rebuild pass (one read of the log), each once the memory model
    has folded it, so an operation's own view reads the memory model as of that entry, as
    the append hook did. ``start`` drops and recreates the tables, ``feed`` replays one
    entry, ``finish`` writes the heads; ``result`` is then what was replayed.
    """

    def __init__(self, ledger: Ledger, registry: Registry | None = None) -> None:
        """Replay into ``ledger``'s file with ``registry`` (default: built-ins and plugins)."""
        self.ledger = ledger
        self.registry = registry if registry is not None else default_registry()
        self.result: RebuildResult | None = None
        self._sizes = {b.name: b.size for b in ledger.store.branches()}
        self._branch: str | None = None
        self._next = 0  # the seq of the branch's next entry
        self._ended: set[str] = set()
        self._n = 0
        self._db: apsw.Connection | None = None
        self._core: FalsifyCore | None = None

    def start(self, db: apsw.Connection) -> None:
        """Drop the falsification tables, recreate them, reset every root's state."""
        for table, _ in TABLES:
            db.execute(f"DROP TABLE IF EXISTS {table}")
        db.execute("DROP TABLE IF EXISTS fz_heads")
        db.execute("DROP TABLE IF EXISTS fz_folds")
        _core.install(db)
        if has_table(db, "memory_roots"):
            db.execute("UPDATE memory_roots SET state = 'live'")
            records.clear_resnapshots(db)
        self._db = db
        self._core = ledger_core(self.ledger, self.registry)

    def feed(self, entries: Sequence[Entry]) -> None:
        """Replay entries, one or a run of events (an event only counts: nothing folds it)."""
        if not entries:
            return
        first = entries[0]
        if first.branch != self._branch:
            self._end_branch()
            self._branch, self._next = first.branch, 0
        if len(entries) > 1 or first.kind is Kind.EVENT:  # a run of events of the branch
            self._n += len(entries)
            self._next = entries[-1].seq + 1
            return
        self._n += 1
        self._next = first.seq + 1
        assert self._core is not None
        self._core.apply(first, strict=False)

    def _end_branch(self) -> None:
        """Replay the branch's stored entries past those fed (unsigned ones); write its head."""
        branch = self._branch
        if branch is None:
            return
        core, db = self._core, self._db
        assert core is not None and db is not None
        size = self._sizes.get(branch, self._next)
        if self._next < size:
            for r in self.ledger.store.iter_entry_rows(
                self.ledger.store.branch(branch).no, self._next, size
            ):
                self._n += 1
                if r.digest is not None or r.erased_by is not None:
                    continue  # an event (known by its content columns): nothing to fold
                core.apply(Entry.from_bytes(bytes(r.data)), strict=False)
        core.flush_heads()
        set_head(db, branch, size)
        self._ended.add(branch)
        self._branch = None

    def finish(self) -> None:
        """Write the heads of every branch; set ``result``."""
        self._end_branch()
        db = self._db
        assert db is not None
        for name in self._sizes:
            if name not in self._ended:  # a branch no entry was fed of (none stored)
                self._branch, self._next = name, 0
                self._end_branch()
        changes: Any = db.execute("SELECT count(*) FROM fz_states").fetchall()[0][0]
        skipped: Any = db.execute("SELECT count(*) FROM fz_skipped").fetchall()[0][0]
        self.result = RebuildResult(self._n, int(changes), int(skipped))


class _StatesReplay:
    """The falsification layer's replay of the log (verify step 9's), fed on (``kept_replay``)."""

    def __init__(self, ledger: Ledger) -> None:
        self.check = FalsifyReplayCheck(ledger=ledger)
        self.report = AuditReport()

    def feed(self, entries: list[Entry]) -> None:
        for entry in entries:
            self.check.feed(entry.branch, entry, self.report)

    def skipped(self) -> frozenset[tuple[str, int]]:
        return frozenset(
            (str(b), int(s)) for b, s in self.check.db.execute("SELECT branch, seq FROM fz_skipped")
        )

    def close(self) -> None:
        self.check.db.execute("ROLLBACK")
        self.check.db.close()
        self.check.memory.db.close()


_SKIPS: dict[str, Kept] = {}
"""ledger id -> the falsification layer's replay of the log, kept (``kept_replay``)."""


def replayed_skips(ledger: Ledger) -> frozenset[tuple[str, int]]:
    """Return the (branch, seq) of every state operation a replay of the log skips.

    The judge of a recorded skip (``fz_skipped``, a derived row anyone can add): the whole
    log, read strictly (each entry proven in the signed tree), replayed by the rules the
    append hook and verify step 9 apply, memory objects' own views included. The replay is
    kept per ledger and fed only the entries appended since (``strict_rows.kept_replay``).
    Run inside a read transaction of ``ledger``.

    Raises:
        IntegrityError: an entry fails its strict read.
    """
    return kept_replay(_SKIPS, ledger, lambda: _StatesReplay(ledger))


def rebuild(ledger: Ledger, registry: Registry | None = None) -> RebuildResult:
    """Drop the falsification tables and replay them from the log; set root states.

    Runs after the memory model's and the roots' rebuilds (it reads the stored summaries,
    and the memory model's gated bookkeeping for own views, folding what it lacks first).
    ``memroot rebuild`` replays it in the memory model's pass instead (``StatesRebuild``).

    Raises:
        DecodeError: if a stored entry does not decode (nothing is changed).
        StorageError: if the file cannot be written (nothing is changed).
    """
    states = StatesRebuild(ledger, registry)
    with ledger.write() as db:
        states.start(db)
        if tables.installed(db):
            # Own views read the memory model as of each entry: it must cover the log.
            for b in ledger.store.branches():
                memory_catch_up(db, ledger, b.name, b.size)
        states.finish()  # every branch's stored entries, read from its rows
    assert states.result is not None
    return states.result
