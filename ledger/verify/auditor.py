"""The auditor's verification of a ledger (SPEC "Auditor's verification", docs/FORMAT.md).

The steps, numbered as in SPEC and docs/FORMAT.md; the code below is labelled with them:

    (1)  decode every entry strictly (canonical CBOR, well-formed entry array);
    (2)  seq contiguous from 0 on every branch, and each entry names its branch;
    (3)  every ``prev`` link: the hash of the entry before (zeros for the canonical genesis);
    (4)  content commitments, or erasure recorded by a TOMBSTONE ("erased by entry N");
    (5)  recompute the Merkle root at every checkpoint size (successive checkpoints are then
         consistent by construction: their roots come from one leaf sequence) and check the
         stored caches (leaf hashes, interior nodes, chain head) against the recomputation;
    (6)  checkpoint signatures against the trusted keys, learning a rotated key only from a
         KEY_ROTATE that the key it retires signed off (``_Keyring``);
    (7)  branch anchors (layer above: branches);
    (8)  replay every SNAPSHOT and compare memory roots (layer above: memory_root);
    (9)  replay derived state and compare with the store (layer above: projections);
    (10) rollback: the ledger is not older than (and agrees with) the newest checkpoint the
         verifier trusted before.

Two ways to verify: ``audit`` never raises for bad data and lists every finding in an
``AuditReport``; ``verify`` raises an ``IntegrityError`` for the first. Both stream the
entries in bounded chunks, so memory stays flat whatever the ledger's size. Steps 7-9 plug in
as ``ReplayCheck`` objects that see every entry in order.

The steps read a ``LedgerSource``: a SQLite ``Store`` (``audit``), or an auditor's bundle
(``memroot.ledger.bundle.audit``). This module imports no storage driver, so the offline
verifier runs with the standard library, cbor2 and cryptography only; the checks of stored
caches (leaf hashes, interior nodes, content addresses) apply to sources that keep such
caches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from memroot.ledger import merkle
from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.entries import CANONICAL_BRANCH, ZERO_HASH, Entry, Kind
from memroot.ledger.errors import DecodeError, IntegrityError, MemrootError, ProofError
from memroot.ledger.hashing import EntryHash, content_commitment, content_digest, leaf_hash
from memroot.ledger.note import Verifier, open_checkpoint
from memroot.ledger.trust import TrustedLog, TrustedState
from memroot.ledger.vocab import OpType

if TYPE_CHECKING:
    from memroot._native import IndexSpan
    from memroot.ledger.backends.store import Store

__all__ = [
    "MAX_FINDINGS",
    "STEPS",
    "AuditReport",
    "BranchLike",
    "Finding",
    "LedgerSource",
    "Progress",
    "ReplayCheck",
    "RowLike",
    "audit",
    "audit_source",
    "bound_cache",
    "verify",
]

MAX_FINDINGS: Final = 1000
STEPS: Final = {
    1: "decode every entry strictly",
    2: "seq contiguous from 0",
    3: "prev links",
    4: "content commitments and erasures",
    5: "Merkle roots at checkpoints and stored tree caches",
    6: "checkpoint signatures",
    7: "branch anchors",
    8: "memory roots replayed",
    9: "derived state replayed",
    10: "no rollback against the trusted state",
}

Progress = Callable[[int, int], None]
"""Called as ``progress(entries_done, entries_total)`` while verifying."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One violation (or, with ``severity="note"``, one fact worth reporting)."""

    step: int
    message: str
    branch: str | None = None
    seq: int | None = None
    expected: str | None = None
    actual: str | None = None
    severity: str = "error"

    def to_json(self) -> dict[str, Any]:
        """Return the finding as a JSON-ready dict."""
        return {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) is not None}

    def __str__(self) -> str:
        where = f"branch {self.branch} " if self.branch else ""
        where += f"entry {self.seq} " if self.seq is not None else ""
        text = f"step {self.step}: {where}{self.message}"
        if self.expected is not None or self.actual is not None:
            text += f" (expected {self.expected}, found {self.actual})"
        return text


@dataclass(slots=True)
class AuditReport:
    """Everything an audit checked and found."""

    entries: int = 0
    branches: int = 0
    checkpoints: int = 0
    erased: int = 0
    findings: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    trusted: dict[str, Any] = field(default_factory=dict)
    truncated_findings: bool = False
    steps_checked: set[int] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        """True when no step found a violation."""
        return not self.findings

    def raise_first(self) -> AuditReport:
        """Return the report when every step holds; else raise its first finding.

        Raises:
            IntegrityError: carrying the first finding's step, branch, seq, expected, actual.
        """
        if self.findings:
            f = self.findings[0]
            raise IntegrityError(
                str(f),
                branch=f.branch,
                seq=f.seq,
                step=f.step,
                expected=f.expected,
                actual=f.actual,
            )
        return self

    def add(self, finding: Finding) -> None:
        """Record a finding (errors are capped at MAX_FINDINGS, notes are not kept past it)."""
        target = self.findings if finding.severity == "error" else self.notes
        if len(target) >= MAX_FINDINGS:
            self.truncated_findings = True
            return
        target.append(finding)

    def to_json(self) -> dict[str, Any]:
        """Return the report as a JSON-ready dict."""
        return {
            "ok": self.ok,
            "entries": self.entries,
            "branches": self.branches,
            "checkpoints": self.checkpoints,
            "erased": self.erased,
            "steps": {
                str(k): {
                    "what": v,
                    "checked": k in self.steps_checked,
                    "violations": sum(1 for f in self.findings if f.step == k),
                }
                for k, v in STEPS.items()
            },
            "findings": [f.to_json() for f in self.findings],
            "notes": [f.to_json() for f in self.notes],
            "trusted": self.trusted,
            "truncated_findings": self.truncated_findings,
        }


class ReplayCheck(Protocol):
    """A check of a layer above the ledger (steps 7-9) fed every entry in order."""

    steps: tuple[int, ...]
    """The auditor's steps this check performs (reported as checked)."""

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """See one strictly decoded entry.

        A check may also take a run of consecutive events of ``branch`` in one call,
        ``feed_events(branch, events, report)``, which must do what ``feed`` on each would
        (findings included, in order). The audit gives each run to the checks that take
        runs first, then event by event to the others: findings keep their order as long as
        only one check of those that take runs reports on events (the roots' replay; the
        memory and falsification replays report at ``finish``), before any other does.
        """

    def finish(self, report: AuditReport) -> None:
        """Compare what was replayed with what is stored; add findings to ``report``."""


class RowLike(Protocol):
    """One stored entry as the auditor reads it (``store.EntryRow`` or a bundle row)."""

    @property
    def seq(self) -> int:
        """The position the source stores the entry at."""

    @property
    def hash(self) -> bytes | None:
        """The cached leaf hash, or None when the source keeps no cache."""

    @property
    def data(self) -> bytes:
        """The exact entry bytes."""

    @property
    def digest(self) -> bytes | None:
        """The content address (BLAKE3 of the content), when the source keeps one."""

    @property
    def salt(self) -> bytes | None:
        """The event's commitment salt, or None when erased (or no event)."""

    @property
    def content(self) -> bytes | None:
        """The event's content bytes, or None when erased (or no event)."""

    @property
    def erased_by(self) -> int | None:
        """The seq of the TOMBSTONE that erased the content, if any."""


class BranchLike(Protocol):
    """A branch's chain head as the source records it."""

    @property
    def no(self) -> int:
        """The source's number for the branch (creation order)."""

    @property
    def name(self) -> str:
        """The branch name."""

    @property
    def size(self) -> int:
        """The number of entries the source claims."""

    @property
    def head(self) -> bytes:
        """The hash of the last entry the source claims."""


class LedgerSource(Protocol):
    """What the auditor reads; ``Store`` methods of the same names, or a bundle reader."""

    @property
    def has_caches(self) -> bool:
        """True when rows carry cached leaf hashes and content addresses and tree nodes exist."""

    def branches(self) -> Sequence[BranchLike]:
        """Return every branch, parents before their forks."""

    def branch(self, name: str) -> BranchLike:
        """Return one branch by name (``NotFoundError`` if absent)."""

    def iter_entry_rows(self, branch_no: int) -> Iterable[RowLike]:
        """Yield a branch's rows in seq order (``MemrootError`` if the source is unreadable)."""

    def entry_row(self, branch_no: int, seq: int) -> RowLike:
        """Return one row (``NotFoundError`` if absent)."""

    def checkpoints(self, branch_no: int) -> list[tuple[int, bytes, str]]:
        """Return ``(size, root, note)`` of every signed checkpoint, by size."""

    def latest_checkpoint(self, branch_no: int) -> tuple[int, bytes, str] | None:
        """Return the checkpoint with the largest size, or None."""

    def meta(self, key: str) -> Any:
        """Return a ledger-wide value the source serves (``ledger_id``, ``origin``, ...)."""

    def read_nodes(self, branch_no: int, ids: Sequence[tuple[int, int]]) -> list[bytes]:
        """Return stored complete-subtree hashes (only called when ``has_caches``)."""

    def node_mismatches(
        self, branch_no: int, nodes: Sequence[tuple[int, int, bytes]]
    ) -> list[tuple[int, int, bytes, bytes | None]]:
        """Return ``(level, index, recomputed, stored)`` for cached nodes that differ."""

    def event_index_mismatches(
        self, branch_no: int, events: Sequence[tuple[str, int]]
    ) -> list[tuple[str, int, int | None]]:
        """Return ``(event id, seq, indexed key)`` for events the index misplaces or lacks."""

    def event_index_size(self) -> int:
        """Return the number of rows in the event index (only called when ``has_caches``)."""


class _StoreSource:
    """A SQLite ``Store`` seen as a ``LedgerSource`` (it keeps every cache)."""

    has_caches = True

    def __init__(self, store: Store) -> None:
        self.store = store
        # The stored nodes the reader thread read ahead (``row_chunks``), of one branch:
        # every node whose subtree ends at or before leaf ``_covered`` is in ``_read_ahead``
        # or missing from the file. Checked nodes are dropped from it.
        self._read_ahead: dict[int, bytes] = {}
        self._ahead_branch: int | None = None
        self._covered = 0
        # The event index rows the reader thread read ahead, one span per chunk: every index
        # row whose id lies in the span. Spans of chunks whose events were all checked are
        # dropped.
        self._ahead_events: list[IndexSpan] = []
        # The chunk the reader thread yielded last and its content address flags
        # (``content_digests_ok``), computed there.
        self._digests: tuple[list[Any], bytes] | None = None
        self.branches = store.branches
        self.branch = store.branch
        self.iter_entry_rows = store.iter_entry_rows
        self.entry_row = store.entry_row
        self.checkpoints = store.checkpoints
        self.latest_checkpoint = store.latest_checkpoint
        self.meta = store.meta
        self.read_nodes = store.read_nodes

    def node_mismatches(
        self, branch_no: int, nodes: Sequence[tuple[int, int, bytes]]
    ) -> list[tuple[int, int, bytes, bytes | None]]:
        from memroot.ledger.backends.store import node_key

        if _N is not None:
            last_level, last_index, _ = nodes[-1] if nodes else (0, 0, b"")
            ahead = (
                branch_no == self._ahead_branch and (last_index + 1) << last_level <= self._covered
            )
            # Nodes complete in order of the leaf that ends them: when the last one was read
            # ahead, every one was (a node absent from the read-ahead is absent from the file).
            if ahead:  # and checked nodes are taken out of the read-ahead
                bad_ahead = _N.node_mismatches_ahead(branch_no, list(nodes), self._read_ahead)
                return [(*nodes[i][:2], nodes[i][2], stored) for i, stored in bad_ahead]
            keys = _N.node_keys(branch_no, list(nodes))
            found = _nodes_by_runs(self.store, keys)
            bad = _N.mismatches(keys, [h for _, _, h in nodes], found)
            return [(*nodes[i][:2], nodes[i][2], found.get(keys[i])) for i in bad]
        keys = [node_key(branch_no, level, index) for level, index, _ in nodes]
        stored = {k: bytes(h) for k, h in _nodes_by_runs(self.store, keys).items()}
        return [
            (level, index, h, stored.get(k))
            for (level, index, h), k in zip(nodes, keys, strict=True)
            if stored.get(k) != h
        ]

    def event_index_mismatches(
        self, branch_no: int, events: Sequence[tuple[str, int]]
    ) -> list[tuple[str, int, int | None]]:
        from memroot.ledger.backends.store import entry_key

        base = entry_key(branch_no, 0)  # seq < 2**40: entry_key(no, seq) == base + seq
        if _N is not None and events and branch_no == self._ahead_branch:
            ahead = _N.event_index_check_ahead(list(events), base, self._ahead_events)
            # The caller checks every event it has listed so far: the events of the chunks
            # before the current one are done.
            del self._ahead_events[:-1]
            if ahead is not None:
                return ahead
        if _N is not None and events:
            try:
                lo, hi = _N.event_id_span(list(events))
            except _N.Reject:
                pass  # an id that is not canonical UUID text, or a repeat: the reference
            else:
                found_rows = _event_id_rows(self.store, lo, hi, len(events), events)
                return _N.event_index_check(list(events), base, found_rows)
        wanted: dict[bytes, tuple[str, int]] = {}
        raws = _N.uuid_bytes([e for e, _ in events]) if _N is not None else [None] * len(events)
        for (event_id, seq), raw in zip(events, raws, strict=True):
            if raw is not None:  # canonical UUID text, parsed natively
                wanted[raw] = (event_id, seq)
                continue
            try:
                wanted[bytes.fromhex(event_id.replace("-", ""))] = (event_id, seq)
            except ValueError:
                continue  # not a UUID: step 1/4 report the entry itself
        found = {bytes(raw): int(k) for raw, k in _event_ids_by_span(self.store, wanted).items()}
        out = []
        for raw, (event_id, seq) in wanted.items():
            if found.get(raw) != base + seq:
                out.append((event_id, seq, found.get(raw)))
        return out

    def event_index_size(self) -> int:
        row: Any = self.store.db.execute("SELECT count(*) FROM event_ids").fetchone()
        return int(row[0])

    def row_chunks(self, branch_no: int) -> Iterator[list[Any]]:
        """Yield the branch's rows in seq order, in chunks, as the store's query returns them.

        Each row is the tuple ``(k, hash, data, digest, salt, content, erased_by)``
        (``as_row`` makes an ``EntryRow`` of one). With the native core and a read-only
        store, a second connection reads the next chunks in a thread while this one checks
        (SQLite and the native checks both run with the GIL released), provided it sees the
        same state of the file: the same branch heads as this connection's transaction (every
        change memroot makes to the entries table moves a head; an edit made outside memroot
        in between is read as the file holds it, and reported). Otherwise this connection
        reads them.
        """
        from memroot.ledger.backends.store import BRANCH_SHIFT, entry_key

        lo, hi = entry_key(branch_no, 0), entry_key(branch_no, (1 << BRANCH_SHIFT) - 1)
        self._read_ahead, self._ahead_branch, self._covered = {}, None, 0
        self._ahead_events, self._digests = [], None
        if _N is not None and self.store.readonly:
            reader = _ChunkReader(self.store, lo, hi, branch_no)
            try:
                if reader.same_state():
                    self._ahead_branch = branch_no
                    for rows, nodes, covered, events, digests in reader:
                        self._read_ahead.update(nodes)
                        self._covered = covered
                        if events is not None:
                            self._ahead_events.append(events)
                        self._digests = (rows, digests)
                        yield rows
                    return
            finally:
                reader.close()
                self._read_ahead, self._ahead_branch, self._covered = {}, None, 0
                self._ahead_events, self._digests = [], None
        yield from _row_chunks(self.store.db, lo, hi)

    def digests_ok(self, chunk: list[Any]) -> bytes | None:
        """Return the reader thread's content address flags of ``chunk``, if it read it."""
        if self._digests is not None and self._digests[0] is chunk:
            return self._digests[1]
        return None

    @staticmethod
    def as_row(raw: Any) -> RowLike:
        """Return the ``EntryRow`` of a row tuple from ``row_chunks``."""
        from memroot.ledger.backends.store import BRANCH_SHIFT, EntryRow

        return EntryRow(raw[0] & ((1 << BRANCH_SHIFT) - 1), *raw[1:])


_ROWS_SQL: Final = (
    "SELECT k, hash, data, digest, salt, content, erased_by FROM entries "
    "WHERE k >= ? AND k < ? ORDER BY k LIMIT ?"
)


def _row_chunks(db: Any, lo: int, hi: int) -> Iterator[list[Any]]:
    """Yield the ``entries`` rows with ``lo <= k < hi`` in key order, ``_CHUNK`` at a time."""
    while True:
        rows: list[Any] = db.execute(_ROWS_SQL, (lo, hi, _CHUNK)).fetchall()
        if rows:
            yield rows
        if len(rows) < _CHUNK:
            return
        lo = rows[-1][0] + 1


_READER_CACHE_KIB: Final = 2048
"""Page cache of the reader thread's connection (a sequential scan needs few pages)."""
_AUDITOR_CACHE_KIB: Final = 8192
"""Page cache of ``verify_path``'s own connection. The store's default (64 MiB) made the
auditor's memory grow with the file until it was full (62 MB at 10^5 entries, 121 MB at 10^6);
the checks read each page about once, so 8 MiB costs no time (measured: same CPU time at 10^6,
59 MB)."""


def _node_ranges(branch_no: int, start: int, stop: int) -> list[int]:
    """Return ``[lo, hi, ...]``: the ``nodes`` key ranges of the subtrees leaves complete.

    Leaves ``start`` to ``stop - 1`` complete, on level ``L`` >= 1, the subtrees with
    indexes ``start >> L`` to ``(stop >> L) - 1``.
    """
    from memroot.ledger.backends.store import node_key

    out: list[int] = []
    level = 1
    while stop >> level > start >> level:
        out += (
            node_key(branch_no, level, start >> level),
            node_key(branch_no, level, stop >> level),
        )
        level += 1
    return out


_NODE_RANGES_SQL: dict[int, str] = {}


def _nodes_in_ranges(db: Any, ranges: list[int]) -> list[tuple[int, bytes]]:
    """Return the ``(k, h)`` rows of ``nodes`` in the key ranges ``[lo, hi)``, one statement."""
    if not ranges:
        return []
    sql = _NODE_RANGES_SQL.get(len(ranges))
    if sql is None:
        sql = " UNION ALL ".join(
            ["SELECT k, h FROM nodes WHERE k >= ? AND k < ?"] * (len(ranges) // 2)
        )
        _NODE_RANGES_SQL[len(ranges)] = sql
    rows: list[tuple[int, bytes]] = db.execute(sql, ranges).fetchall()
    return rows


_EVENT_SPAN_SQL: Final = "SELECT id, k FROM event_ids WHERE id >= ? AND id <= ? LIMIT ?"


def _event_rows_ahead(db: Any, rows: list[Any]) -> IndexSpan | None:
    """Read the event index rows of the events among a chunk of row tuples, by one scan.

    The ids of the chunk's events (decoded natively, the GIL released) span ``[lo, hi]``;
    the index rows in that span are read when they are few (ids memroot assigns are UUIDv7,
    so a chunk's events lie in a narrow span), else nothing is read ahead (None), and the
    check reads the index itself (``_event_id_rows``).
    """
    assert _N is not None
    span = _N.row_event_ids(rows)
    if span is None:
        return None
    count, lo, hi = span
    limit = 2 * count + 64
    found: list[tuple[bytes, int]] = db.execute(_EVENT_SPAN_SQL, (lo, hi, limit)).fetchall()
    return _N.event_index_span(lo, hi, found) if len(found) < limit else None


class _ChunkReader:
    """Read row chunks ahead in a thread, with a second connection to the same file.

    The thread's connection opens its read transaction and compares the branch heads with
    the auditing connection's; only when they agree (``same_state``) are its chunks used.
    With each chunk it reads the stored nodes the chunk's leaves complete (by position in
    the scan: the n-th row read is leaf n of the tree the auditor rebuilds), so the node
    check reads nothing itself, and the event index rows of the chunk's events
    (``_event_rows_ahead``), so the event index check mostly reads nothing either; and it
    checks the rows' content addresses (``content_digests_ok``, one flag a row). It yields
    ``(rows, {k: h}, leaves so far, event index span or None, flags)``. Any error in
    the thread is raised in the auditor's thread, where it would have come from. ``close``
    stops the thread and waits for it.
    """

    _END: Final = object()

    def __init__(self, store: Store, lo: int, hi: int, branch_no: int) -> None:
        import queue
        import threading

        self._want = [(b.no, b.size, bytes(b.head)) for b in store.branches()]
        self._path = store.path
        self._lo, self._hi = lo, hi
        self._no = branch_no
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memroot-verify-reader")
        self._thread.daemon = True
        self._thread.start()

    def _put(self, item: Any) -> bool:
        import queue

        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        from memroot.ledger.backends.store import Store

        try:
            twin = Store(self._path, readonly=True)
            # It reads each page once, in key order: a small page cache, so the process's
            # memory stays what one connection takes.
            twin.db.execute(f"PRAGMA cache_size=-{_READER_CACHE_KIB}")
        except BaseException:  # no second connection: the auditor reads for itself
            self._put(False)
            return
        try:
            with twin.read():
                have = [(b.no, b.size, bytes(b.head)) for b in twin.branches()]
                if have != self._want:
                    self._put(False)
                    return
                if not self._put(True):
                    return
                done = 0
                for rows in _row_chunks(twin.db, self._lo, self._hi):
                    ranges = _node_ranges(self._no, done, done + len(rows))
                    nodes = dict(_nodes_in_ranges(twin.db, ranges))
                    events = _event_rows_ahead(twin.db, rows)
                    digests = _N.content_digests_ok(rows)
                    done += len(rows)
                    if not self._put((rows, nodes, done, events, digests)):
                        return
            self._put(self._END)
        except BaseException as e:
            self._put(e)
        finally:
            twin.close()

    def same_state(self) -> bool:
        """Tell whether the thread's connection sees the auditor's state of the file."""
        return self._queue.get() is True

    def __iter__(
        self,
    ) -> Iterator[tuple[list[Any], dict[int, bytes], int, IndexSpan | None, bytes]]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Stop the thread (it may be waiting to hand over a chunk) and wait for it."""
        self._stop.set()
        self._thread.join()


def _nodes_by_runs(store: Store, keys: list[int]) -> dict[int, bytes]:
    """Return ``{k: h}`` of the stored nodes among ``keys``, one range scan per run of keys.

    The nodes a chunk of appends completed have consecutive indexes on each level, so their
    keys fall into a few runs of consecutive integers: a range scan reads each run in key
    order, where an ``IN`` list descends the b-tree once per key.
    """
    found: dict[int, bytes] = {}
    ordered = sorted(set(keys))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j - i < 8:
            found.update(store.lookup("nodes", "k", "h", ordered[i : j + 1]))
        else:
            found.update(
                store.db.execute(
                    "SELECT k, h FROM nodes WHERE k >= ? AND k <= ?", (ordered[i], ordered[j])
                )
            )
        i = j + 1
    return found


def _event_id_rows(
    store: Store, lo: bytes, hi: bytes, count: int, events: Sequence[tuple[str, int]]
) -> list[tuple[bytes, int]]:
    """Return ``(id, k)`` index rows covering the ``count`` events whose ids span ``[lo, hi]``.

    As ``_event_ids_by_span``: one range scan when the span is narrow, else the ``IN``
    look-up of the events' own ids. Rows of other ids may be among them.
    """
    limit = 2 * count + 64
    rows: list[Any] = store.db.execute(_EVENT_SPAN_SQL, (lo, hi, limit)).fetchall()
    if len(rows) < limit:
        return rows
    raws = [bytes.fromhex(e.replace("-", "")) for e, _ in events]
    return list(store.lookup("event_ids", "id", "k", raws).items())


def _event_ids_by_span(store: Store, wanted: dict[bytes, Any]) -> dict[bytes, int]:
    """Return ``{id: k}`` of the indexed events among ``wanted``, by one range scan if cheap.

    The ids memroot assigns are UUIDv7 (time first), so the events of a chunk of entries lie
    in a narrow span of the index: one scan of ``[min, max]`` reads them in key order. When
    that span holds many other ids (events imported with ids of their own), it falls back to
    the ``IN`` look-up.
    """
    if not wanted:
        return {}
    limit = 2 * len(wanted) + 64
    rows: list[Any] = store.db.execute(
        "SELECT id, k FROM event_ids WHERE id >= ? AND id <= ? LIMIT ?",
        (min(wanted), max(wanted), limit),
    ).fetchall()
    if len(rows) >= limit:
        return store.lookup("event_ids", "id", "k", list(wanted))
    return {bytes(raw): k for raw, k in rows if bytes(raw) in wanted}


@dataclass(slots=True)
class _BranchRun:
    """The verifier's running state over one branch."""

    name: str
    expected_seq: int = 0
    prev: bytes = ZERO_HASH
    compact: merkle.CompactRange = field(default_factory=merkle.CompactRange)
    # event id -> (seq, stored erased_by), awaiting its TOMBSTONE
    erased: dict[str, tuple[int, int]] = field(default_factory=dict)
    tombstones: dict[str, int] = field(default_factory=dict)  # target id -> tombstone seq
    caches: bool = True  # the source keeps leaf hashes and content addresses to check
    genesis: Entry | None = None
    # branch id -> the BRANCH_CREATE entry naming it and this tree's root just before it (7)
    creates: dict[str, tuple[Entry, bytes]] = field(default_factory=dict)
    rotations: list[tuple[int, Any]] = field(default_factory=list)  # (seq, KEY_ROTATE payload)
    events: list[tuple[str, int]] = field(default_factory=list)  # (event id, seq) to check
    event_count: int = 0


@dataclass(slots=True)
class _Keyring:
    """The keys the verifier trusts, growing by signed-off KEY_ROTATE entries (step 6).

    A key starts trusted if given, remembered, or (trust on first use) in the genesis. A
    ``KEY_ROTATE`` entry on ``main`` with payload ``{new_vkey, old_vkey}`` adds ``new_vkey``
    only when the first verified checkpoint covering it carries a valid signature by
    ``old_vkey``, a key trusted at that size: the rotation was appended while the old key was
    in force and the old key signed it off. From then on the old key is retired: it is accepted
    only for ``main`` checkpoints no larger than that sign-off checkpoint, so a leaked old key
    cannot sign a newer tree. Branch checkpoints accept any trusted key.
    """

    keys: dict[str, Verifier] = field(default_factory=dict)  # vkey -> verifier
    retired: dict[str, int] = field(default_factory=dict)  # vkey -> largest size it may sign

    def valid(self, size: int | None) -> list[Verifier]:
        """Return the keys that may sign a checkpoint of ``size`` (None: any size)."""
        return [
            v
            for k, v in self.keys.items()
            if size is None or k not in self.retired or size <= self.retired[k]
        ]


def audit(
    store: Store,
    *,
    origin: str,
    trusted: TrustedState | None = None,
    vkeys: Sequence[str] = (),
    checks: Sequence[ReplayCheck] = (),
    progress: Progress | None = None,
    update_trusted: bool = True,
    branch: str | None = None,
) -> AuditReport:
    """Run every ledger step over ``store`` and return the report; never raises for bad data.

    Trusted keys come from ``vkeys`` if given, else from the trusted state for ``origin``, else
    (trust on first use, reported as a note) from the ledger's own genesis. When every step
    holds and ``update_trusted`` is set, the newest checkpoint becomes the trusted one.
    ``branch`` restricts the audit to that branch and its ancestors (``_lineage``).
    """
    import apsw

    from memroot.ledger.strict import relaxed

    # One read transaction: every step sees one state of the file, whatever writers commit
    # meanwhile. Relaxed: the layers' checks open the ledger to report on it, not to refuse.
    with relaxed(), store.read():
        try:
            return _audit_store(
                store,
                origin=origin,
                trusted=trusted,
                vkeys=vkeys,
                checks=checks,
                progress=progress,
                update_trusted=update_trusted,
                branch=branch,
            )
        except (apsw.CorruptError, apsw.NotADBError) as e:
            # (1) a SQLite file whose pages do not read back: an integrity finding, not a
            # storage failure (the disk answered; the data is bad).
            report = AuditReport()
            report.steps_checked.add(1)
            report.add(Finding(1, f"the ledger file is a corrupt SQLite file: {e}"))
            return report


def _audit_store(
    store: Store,
    *,
    origin: str,
    trusted: TrustedState | None,
    vkeys: Sequence[str],
    checks: Sequence[ReplayCheck],
    progress: Progress | None,
    update_trusted: bool,
    branch: str | None,
) -> AuditReport:
    return audit_source(
        _StoreSource(store),
        origin=origin,
        trusted=trusted,
        vkeys=vkeys,
        checks=checks,
        progress=progress,
        update_trusted=update_trusted,
        branch=branch,
    )


def audit_source(
    store: LedgerSource,
    *,
    origin: str,
    trusted: TrustedState | None = None,
    vkeys: Sequence[str] = (),
    checks: Sequence[ReplayCheck] = (),
    progress: Progress | None = None,
    update_trusted: bool = True,
    branch: str | None = None,
) -> AuditReport:
    """Run every ledger step over any ``LedgerSource`` (a store or a bundle); see ``audit``."""
    report = AuditReport()
    report.steps_checked.update((1, 2, 3, 4, 5, 6, 7, 10))
    for check in checks:
        report.steps_checked.update(check.steps)
    branches = store.branches()
    if branch is not None:
        lineage = _lineage(store, branches, branch, report)
        branches = [b for b in branches if b.name in lineage]
    report.branches = len(branches)
    if not any(b.name == CANONICAL_BRANCH for b in branches):
        # (2) Without this, a ledger whose branch rows were deleted had nothing to check
        # and passed.
        report.add(
            Finding(2, f"the canonical branch {CANONICAL_BRANCH!r} is missing", CANONICAL_BRANCH, 0)
        )
    total = sum(b.size for b in branches)
    done = 0
    trusted_log = trusted.get(origin) if trusted is not None else None
    verifiers, key_source = _trusted_verifiers(store, vkeys, trusted_log, report)
    keyring = _Keyring({v.vkey(): v for v in verifiers})
    report.trusted["keys"] = key_source
    _check_meta(store, report)
    creates: dict[str, tuple[str, Entry, bytes, list[tuple[int, bytes]]]] = {}
    events_seen = 0
    for b in branches:
        run = _BranchRun(b.name, caches=store.has_caches)
        b_origin = origin if b.name == CANONICAL_BRANCH else f"{origin}/branch/{b.name}"
        stored_cps = _read_checkpoints(store, b.no, b.name, report)
        trusted_here = (
            trusted_log
            if b.name == CANONICAL_BRANCH
            else (trusted.get(b_origin) if trusted is not None else None)
        )
        targets = sorted(
            {s for s, _, _ in stored_cps} | ({trusted_here.size} if trusted_here else set())
        )
        t_iter = iter(targets)
        next_target = next(t_iter, None)
        roots: dict[int, bytes] = {}
        if next_target == 0:
            roots[0] = run.compact.root()
            next_target = next(t_iter, None)
        pending_nodes: list[tuple[int, int, bytes]] = []
        try:
            if isinstance(store, _StoreSource):
                chunks: Iterable[list[Any]] = store.row_chunks(b.no)
                as_row: Callable[[Any], RowLike] | None = store.as_row
                digests_of: Callable[[list[Any]], bytes | None] | None = store.digests_ok
            else:
                chunks, as_row = _chunks(store.iter_entry_rows(b.no)), None
                digests_of = None
            for chunk in chunks:
                digests = digests_of(chunk) if digests_of is not None else None
                i = 0
                while i < len(chunk):
                    # The native core takes the plain rows of a run at once, stopping where
                    # the code below has work to do; any other row takes the reference path.
                    n, new_nodes = (
                        _native_rows(
                            run,
                            b.name,
                            chunk,
                            i,
                            checks,
                            report,
                            next_target,
                            len(pending_nodes),
                            8192 - done % 8192,
                            digests,
                        )
                        if _N is not None and _native_size(next_target)
                        else (0, [])
                    )
                    if n == 0:
                        row = chunk[i] if as_row is None else as_row(chunk[i])
                        leaf = _check_row(run, b.name, row, report, checks)
                        new_nodes = run.compact.append(leaf)
                        n = 1
                    i += n
                    if run.caches and new_nodes:
                        pending_nodes.extend(new_nodes)
                        if len(pending_nodes) >= 4096:
                            _check_nodes(store, b.no, b.name, pending_nodes, report)
                            pending_nodes.clear()
                    if len(run.events) >= 4096:
                        _check_event_index(store, b.no, b.name, run.events, report)
                        run.events.clear()
                    while next_target is not None and run.compact.size == next_target:
                        roots[next_target] = run.compact.root()
                        next_target = next(t_iter, None)
                    done += n
                    if progress is not None and done % 8192 == 0:
                        progress(done, total)
        except MemrootError as e:
            # (1) an unreadable source (a damaged file or bundle) ends this branch's scan;
            # everything after it is unverified, and the report says where.
            report.add(
                Finding(
                    1,
                    f"entries cannot be read from entry {run.expected_seq} on: {e}",
                    b.name,
                    run.expected_seq,
                )
            )
        _check_nodes(store, b.no, b.name, pending_nodes, report)
        _check_event_index(store, b.no, b.name, run.events, report)
        events_seen += run.event_count
        report.entries += run.expected_seq
        # (2) and (3): the stored chain head must describe what is stored.
        if b.size != run.expected_seq or bytes(b.head) != run.prev:
            report.add(
                Finding(
                    3,
                    "stored chain head does not match the entries",
                    b.name,
                    expected=f"size {run.expected_seq} head {run.prev.hex()}",
                    actual=f"size {b.size} head {bytes(b.head).hex()}",
                )
            )
        # (4): erasures must be recorded by a TOMBSTONE.
        for event_id, (seq, _) in run.erased.items():
            report.add(
                Finding(
                    4,
                    f"content of event {event_id} is missing and no TOMBSTONE erased it",
                    b.name,
                    seq,
                )
            )
        # (6): signatures, learning rotated keys on main as their sign-offs verify.
        cps = _checkpoints(stored_cps, b.name, b_origin, keyring, run.rotations, report)
        # (5): every signed root recomputed from the leaves.
        for size, root in cps:
            if size > run.expected_seq:
                report.add(
                    Finding(
                        5,
                        f"a checkpoint was signed at size {size} but the branch "
                        f"has only {run.expected_seq} entries (truncated)",
                        b.name,
                        run.expected_seq,
                        expected=str(size),
                        actual=str(run.expected_seq),
                    )
                )
            elif roots.get(size) != root:
                got = roots.get(size)
                report.add(
                    Finding(
                        5,
                        f"the Merkle root at checkpoint size {size} does not "
                        "match the signed checkpoint",
                        b.name,
                        size - 1,
                        expected=root.hex(),
                        actual=got.hex() if got else None,
                    )
                )
        report.checkpoints += len(cps)
        # (6) no unsigned tail: every entry is covered by a checkpoint that verifies (every
        # append is sealed by one in its own transaction, docs/FORMAT.md section 5).
        covered = max((size for size, _ in cps if size <= run.expected_seq), default=0)
        if covered < run.expected_seq:
            report.add(
                Finding(
                    6,
                    f"entries {covered}..{run.expected_seq - 1} are covered by no signed "
                    "checkpoint (unsigned tail: appended without the key, or the head "
                    "checkpoint was removed)",
                    b.name,
                    covered,
                    expected=str(run.expected_seq),
                    actual=str(covered),
                )
            )
        # (10): not older than, and consistent with, what the verifier trusted before.
        if trusted_here is not None:
            if trusted_here.size > run.expected_seq:
                report.add(
                    Finding(
                        10,
                        f"rollback: the verifier trusted a checkpoint of size "
                        f"{trusted_here.size}, the ledger has only "
                        f"{run.expected_seq} entries",
                        b.name,
                        run.expected_seq,
                        expected=str(trusted_here.size),
                        actual=str(run.expected_seq),
                    )
                )
            elif roots.get(trusted_here.size) != trusted_here.root:
                got = roots.get(trusted_here.size)
                report.add(
                    Finding(
                        10,
                        f"history differs from the trusted checkpoint at size "
                        f"{trusted_here.size} (rewritten or forked)",
                        b.name,
                        trusted_here.size - 1 if trusted_here.size else None,
                        expected=trusted_here.root.hex(),
                        actual=got.hex() if got else None,
                    )
                )
            report.trusted[b.name] = {"size": trusted_here.size}
        # (7): branch anchors. Parents are verified before their forks (creation order).
        for name, (create, root_before) in run.creates.items():
            creates[name] = (b.name, create, root_before, cps)
        if b.name != CANONICAL_BRANCH:
            _check_anchor(store, b.name, run.genesis, creates.get(b.name), report)
    if store.has_caches and branch is None:
        # (5) the event index must hold exactly the events verified, no stray rows (a
        # restricted audit saw only some branches' events, so it cannot count them).
        indexed = store.event_index_size()
        if indexed != events_seen:
            report.add(
                Finding(
                    5,
                    "the event index does not match the events in the ledger",
                    expected=f"{events_seen} events",
                    actual=f"{indexed} rows",
                )
            )
    for check in checks:
        check.finish(report)
    if progress is not None:
        progress(done, total)
    if report.ok and update_trusted and trusted is not None:
        _remember(store, origin, trusted, list(keyring.keys.values()), branches)
    return report


def _lineage(
    store: LedgerSource, branches: Sequence[BranchLike], name: str, report: AuditReport
) -> set[str]:
    """Return ``name`` and its ancestors, following each branch genesis's ``anchor``.

    The anchors are read from the entries (step 7 then checks each against its
    ``BRANCH_CREATE``), not from the store's branch table. A missing branch is a finding.
    """
    by_name = {b.name: b for b in branches}
    out: set[str] = {CANONICAL_BRANCH}
    cur: str | None = name
    while cur is not None and cur not in out:
        b = by_name.get(cur)
        if b is None:
            report.add(Finding(2, f"no branch named {cur!r} to verify", cur))
            break
        out.add(cur)
        try:
            anchor = Entry.from_bytes(store.entry_row(b.no, 0).data).body.get("anchor")
        except MemrootError:
            break  # the scan of this branch reports why its genesis does not read
        parent = anchor.get("branch") if isinstance(anchor, dict) else None
        cur = parent if isinstance(parent, str) else None
    return out


def _check_anchor(
    store: LedgerSource,
    branch: str,
    genesis: Entry | None,
    created: tuple[str, Entry, bytes, list[tuple[int, bytes]]] | None,
    report: AuditReport,
) -> None:
    """(7): the BRANCH_CREATE is in the parent's signed tree and the branch genesis links to it.

    Checks that a BRANCH_CREATE entry names the branch; that the genesis's ``prev`` and
    ``anchor`` are that entry's hash and position; that the fork point recorded in the
    BRANCH_CREATE payload (seq, entry_hash, tree_size, tree_root) is the parent's head just
    before it; and, with an inclusion proof, that the entry is in the parent's newest signed
    checkpoint that covers it.
    """
    if genesis is None:
        report.add(Finding(7, "the branch has no genesis entry", branch, 0))
        return
    if created is None:
        report.add(Finding(7, "no BRANCH_CREATE entry in any parent names this branch", branch, 0))
        return
    parent, create, root_before, parent_cps = created
    anchor = genesis.body.get("anchor")
    want = {"branch": parent, "entry_hash": create.hash, "seq": create.seq}
    if genesis.prev != create.hash or anchor != want:
        report.add(
            Finding(
                7,
                f"the branch genesis does not link to its BRANCH_CREATE ({parent} entry "
                f"{create.seq})",
                branch,
                0,
                expected=create.hash.hex(),
                actual=genesis.prev.hex(),
            )
        )
    payload = create.body.get("payload", {})
    fork = payload.get("fork") if isinstance(payload, dict) else None
    want_fork = {
        "entry_hash": create.prev,
        "seq": create.seq - 1,
        "tree_root": root_before,
        "tree_size": create.seq,
    }
    if fork != want_fork or payload.get("parent_branch_id") != parent:
        report.add(
            Finding(
                7,
                "the fork point recorded by BRANCH_CREATE is not the parent's head before it",
                parent,
                create.seq,
                expected=f"size {create.seq} root {root_before.hex()}",
                actual=repr(fork),
            )
        )
    covering = [(size, root) for size, root in parent_cps if size > create.seq]
    if not covering:
        report.add(
            Finding(
                7,
                f"no signed checkpoint of {parent} covers the BRANCH_CREATE yet; "
                "its inclusion was checked against the recomputed tree only",
                branch,
                0,
                severity="note",
            )
        )
        return
    if not store.has_caches:
        # No node cache to prove from: the entry is one of the leaves whose recomputed root
        # matched the signed one at every checkpoint size (step 5), which is inclusion.
        return
    size, root = covering[-1]
    try:
        parent_no = store.branch(parent).no
        proof = merkle.inclusion_proof(
            create.seq, size, lambda ids: store.read_nodes(parent_no, ids)
        )
        merkle.verify_inclusion(create.hash, create.seq, size, proof, root)
    except MemrootError as e:
        report.add(
            Finding(
                7,
                f"the BRANCH_CREATE entry is not provably in the signed "
                f"checkpoint of size {size}: {e}",
                parent,
                create.seq,
            )
        )


def verify(store: Store, **kwargs: Any) -> AuditReport:
    """Like ``audit``, but raise an ``IntegrityError`` for the first finding.

    Raises:
        IntegrityError: carrying the first finding's step, branch, seq, expected and actual.
    """
    return audit(store, **kwargs).raise_first()


def _trusted_verifiers(
    store: LedgerSource,
    vkeys: Sequence[str],
    trusted_log: TrustedLog | None,
    report: AuditReport,
) -> tuple[list[Verifier], str]:
    if vkeys:
        keys, source = list(vkeys), "given"
    elif trusted_log is not None:
        keys, source = list(trusted_log.vkeys), "trusted state"
    else:
        keys, source = _genesis_keys(store), "genesis (trust on first use)"
        report.add(
            Finding(
                6,
                "no trusted key was given or remembered: trusting the keys "
                "recorded in the ledger's own genesis (trust on first use)",
                severity="note",
            )
        )
    verifiers = []
    for k in keys:
        try:
            verifiers.append(Verifier.from_vkey(k))
        except DecodeError as e:
            report.add(Finding(6, f"trusted key {k!r} is malformed: {e}"))
    return verifiers, source


def _genesis_keys(store: LedgerSource) -> list[str]:
    try:
        row = store.entry_row(store.branch(CANONICAL_BRANCH).no, 0)
        keys = Entry.from_bytes(row.data).body.get("keys", [])
        return [str(k) for k in keys] if isinstance(keys, list) else []
    except MemrootError:
        return []


_GENESIS_META: Final = ("ledger_id", "origin", "snapshot_every")


def _check_meta(store: LedgerSource, report: AuditReport) -> None:
    """(5): the meta values the ledger serves are copies of its genesis entry (a cache)."""
    try:
        genesis = Entry.from_bytes(store.entry_row(store.branch(CANONICAL_BRANCH).no, 0).data)
    except MemrootError:
        return  # a missing or undecodable genesis is reported by steps 1-3
    for key in _GENESIS_META:
        want, have = genesis.body.get(key), store.meta(key)
        if type(want) is not type(have) or want != have:
            report.add(
                Finding(
                    5,
                    f"stored meta {key!r} does not match the genesis entry",
                    CANONICAL_BRANCH,
                    0,
                    expected=repr(want),
                    actual=repr(have),
                )
            )


def _read_checkpoints(
    store: LedgerSource, branch_no: int, branch: str, report: AuditReport
) -> list[tuple[int, bytes, str]]:
    """Return the stored ``(size, root, note)`` checkpoints of a branch, unverified."""
    try:
        return store.checkpoints(branch_no)
    except MemrootError as e:
        report.add(Finding(6, f"the checkpoints cannot be read: {e}", branch))
        return []


def _checkpoints(
    stored: list[tuple[int, bytes, str]],
    branch: str,
    origin: str,
    keyring: _Keyring,
    rotations: list[tuple[int, Any]],
    report: AuditReport,
) -> list[tuple[int, bytes]]:
    """(6): open every stored checkpoint note; return the (size, root) pairs that verify.

    On ``main``, KEY_ROTATE entries are applied to the keyring as their sign-off checkpoints
    verify (see ``_Keyring``), in size order.
    """
    out: list[tuple[int, bytes]] = []
    main = branch == CANONICAL_BRANCH
    pending = sorted(rotations, key=lambda r: r[0]) if main else []
    for size, root, note in stored:
        last = size - 1 if size > 0 else None  # the newest entry the checkpoint covers
        try:
            signed = open_checkpoint(note, keyring.valid(size if main else None), origin=origin)
        except (ProofError, DecodeError) as e:
            report.add(Finding(6, f"checkpoint at size {size} does not verify: {e}", branch, last))
            continue
        while pending and pending[0][0] < size:
            seq, payload = pending.pop(0)
            _rotate(keyring, seq, payload, size, note, origin, report)
        cp = signed.checkpoint
        if cp.size != size or cp.root != bytes(root):
            report.add(
                Finding(
                    5,
                    f"stored checkpoint index (size {size}) disagrees with its signed note",
                    branch,
                    last,
                    expected=f"{cp.size} {cp.root.hex()}",
                    actual=f"{size} {bytes(root).hex()}",
                )
            )
        out.append((cp.size, cp.root))
    for seq, _ in pending:
        report.add(
            Finding(
                6,
                "KEY_ROTATE is not covered by a verified checkpoint yet, so its new key is "
                "not trusted",
                CANONICAL_BRANCH,
                seq,
                severity="note",
            )
        )
    return out


_CHUNK: Final = 4096
_KIND_OF: Final = {k.value: k for k in Kind}


def _chunks(rows: Iterable[RowLike]) -> Iterator[list[RowLike]]:
    """Yield ``rows`` in lists of ``_CHUNK``; a read error comes after the rows read before it."""
    buf: list[RowLike] = []
    try:
        for row in rows:
            buf.append(row)
            if len(buf) == _CHUNK:
                yield buf
                buf = []
    except MemrootError:
        if buf:
            yield buf
        raise
    if buf:
        yield buf


def _native_size(size: int | None) -> bool:
    """Tell whether ``size`` (a stored checkpoint size, so possibly tampered) fits native code.

    A size outside 0..2^63-1 (a flipped byte in a stored checkpoint) takes the reference
    path, which reports it as the finding it is.
    """
    return size is None or 0 <= size < 1 << 63


def _native_rows(
    run: _BranchRun,
    branch: str,
    chunk: list[RowLike],
    start: int,
    checks: Sequence[ReplayCheck],
    report: AuditReport,
    stop_size: int | None,
    pending_nodes: int,
    max_rows: int,
    digests: bytes | None = None,
) -> tuple[int, list[merkle.NewNode]]:
    """Check the plain rows from ``chunk[start]`` on natively; return how many and their nodes.

    A plain row is one ``_check_row`` would pass without a finding, only moving the branch's
    state on (native/src/verify.rs). The native call stops after the row where the caller has
    work (a checkpoint size, a full batch of nodes or events, a progress tick) and before any
    row that is not plain, which the caller then checks with ``_check_row``. Steps 7-9 see the
    same entries, in the same order. ``digests``: the content address flags of ``chunk``
    the reader thread computed (``_StoreSource.digests_ok``), if any.
    """
    assert _N is not None
    n, prev, hashes, nodes, events, entries = _N.verify_rows(
        chunk,
        start,
        max_rows,
        branch,
        run.expected_seq,
        run.prev,
        run.compact.size,
        list(run.compact.hashes),
        run.caches,
        not run.tombstones,
        stop_size,
        4096 - pending_nodes,
        4096 - len(run.events),
        bool(checks),
        digests,
    )
    if n == 0:
        return 0, []
    run.compact = merkle.CompactRange.from_hashes(run.compact.size + n, hashes)
    run.prev = EntryHash(prev)
    run.expected_seq += n
    if run.caches:
        run.events.extend(events)
    run.event_count += len(events)
    if entries:
        kinds = _KIND_OF
        built = [
            Entry(
                v,
                EntryHash(e_prev),
                seq,
                name,
                ts,
                kinds[kind],
                type_,
                body,
                _row_data(row),
                EntryHash(h),
            )
            for (v, e_prev, seq, name, ts, kind, type_, body, h), row in zip(
                entries, chunk[start : start + n], strict=True
            )
        ]
        _feed_checks(checks, branch, built, report)
    return n, nodes


def _feed_checks(
    checks: Sequence[ReplayCheck], branch: str, entries: list[Entry], report: AuditReport
) -> None:
    """Feed ``entries`` to every check, in order.

    Each run of events goes in one call to a check that takes runs (``feed_events``); every
    other entry to each check in turn.
    """
    runs = [getattr(c, "feed_events", None) for c in checks]
    event = Kind.EVENT
    first = 0  # the start of the run of events being gathered
    for i, entry in enumerate(entries):
        if entry.kind is event:
            continue
        if first < i:
            _feed_run(checks, runs, branch, entries[first:i], report)
        for check in checks:
            check.feed(branch, entry, report)
        first = i + 1
    if first < len(entries):
        _feed_run(checks, runs, branch, entries[first:], report)


def _feed_run(
    checks: Sequence[ReplayCheck],
    runs: list[Any],
    branch: str,
    events: list[Entry],
    report: AuditReport,
) -> None:
    # The checks that take runs go first (see ``ReplayCheck.feed``); the others see the run
    # entry by entry, interleaved as before.
    rest = [c for c, feed_events in zip(checks, runs, strict=True) if feed_events is None]
    for feed_events in runs:
        if feed_events is not None:
            feed_events(branch, events, report)
    if rest:
        for entry in events:
            for check in rest:
                check.feed(branch, entry, report)


def _row_data(row: Any) -> bytes:
    """Return the entry bytes of a store row tuple (``row_chunks``) or of a ``RowLike``."""
    return row[2] if type(row) is tuple else row.data  # type: ignore[no-any-return]


def _check_row(
    run: _BranchRun,
    branch: str,
    row: RowLike,
    report: AuditReport,
    checks: Sequence[ReplayCheck],
) -> bytes:
    """Check steps 1-4 (and the stored leaf hash cache) for one row; return its leaf hash."""
    computed = leaf_hash(row.data)
    # (2) contiguous seq: a gap means deleted rows.
    if row.seq != run.expected_seq:
        report.add(
            Finding(
                2,
                f"entries {run.expected_seq}..{row.seq - 1} are missing"
                if row.seq > run.expected_seq
                else "entry out of order",
                branch,
                row.seq,
                expected=str(run.expected_seq),
                actual=str(row.seq),
            )
        )
    if row.hash is not None and bytes(row.hash) != computed:
        report.add(
            Finding(
                5,
                "stored leaf hash does not match the entry bytes",
                branch,
                row.seq,
                expected=computed.hex(),
                actual=bytes(row.hash).hex(),
            )
        )
    # (1) strict decoding.
    try:
        entry = Entry.from_bytes(row.data, computed)
    except DecodeError as e:
        report.add(Finding(1, f"entry does not decode: {e}", branch, row.seq))
        run.prev, run.expected_seq = computed, row.seq + 1
        return computed
    # (2) the entry's own seq and branch agree with where it is stored.
    if entry.seq != row.seq or entry.branch != branch:
        report.add(
            Finding(
                2,
                "entry records another position (replayed or moved)",
                branch,
                row.seq,
                expected=f"{branch}:{row.seq}",
                actual=f"{entry.branch}:{entry.seq}",
            )
        )
    # (3) the hash chain, checked at every link.
    if entry.prev != run.prev and not (row.seq == 0 and branch != CANONICAL_BRANCH):
        report.add(
            Finding(
                3,
                "prev does not match the hash of the entry before",
                branch,
                row.seq,
                expected=run.prev.hex(),
                actual=entry.prev.hex(),
            )
        )
    if (row.seq == 0) != (entry.kind is Kind.GENESIS):
        report.add(Finding(3, "a genesis entry must be exactly entry 0", branch, row.seq))
    if entry.kind is Kind.GENESIS:
        run.genesis = entry
    elif entry.type == OpType.BRANCH_CREATE:
        payload = entry.body.get("payload")
        name = payload.get("branch_id") if isinstance(payload, dict) else None
        if isinstance(name, str):
            run.creates[name] = (entry, run.compact.root())
    # (4) content commitments and erasures.
    if entry.type == OpType.KEY_ROTATE and entry.kind is Kind.OP:
        run.rotations.append((row.seq, entry.body.get("payload")))
    if entry.kind is not Kind.EVENT and (
        row.content is not None
        or row.salt is not None
        or row.digest is not None
        or row.erased_by is not None
    ):
        # Only events have content: bytes planted beside an operation are committed by
        # nothing, yet Ledger.content() would serve them.
        report.add(Finding(4, "an entry that is not an event has stored content", branch, row.seq))
    if entry.kind is Kind.EVENT:
        _check_content(run, branch, row, entry, report)
        run.event_count += 1
        if run.caches:
            run.events.append((str(entry.body.get("id")), row.seq))
    elif entry.type == OpType.TOMBSTONE:
        payload = entry.body.get("payload")
        target = payload.get("target_event_id") if isinstance(payload, dict) else None
        if isinstance(target, str):
            erased = run.erased.pop(target, None)
            if erased is not None:
                if erased[1] != row.seq:
                    report.add(
                        Finding(
                            4,
                            f"event {target} is marked erased by entry {erased[1]}, but its "
                            f"TOMBSTONE is entry {row.seq}",
                            branch,
                            erased[0],
                            expected=str(row.seq),
                            actual=str(erased[1]),
                        )
                    )
                report.erased += 1
                # The note is about the erased event (its entry), naming the erasing one.
                report.add(
                    Finding(
                        4,
                        f"content of entry {erased[0]} erased by entry {row.seq} (event {target})",
                        branch,
                        erased[0],
                        severity="note",
                    )
                )
            else:
                # A TOMBSTONE always erases an earlier event of its branch, in its own
                # transaction: content still there means erasure was skipped or undone.
                report.add(
                    Finding(
                        4,
                        f"TOMBSTONE of event {target} erased nothing: the event's content is "
                        "still stored, or it is not an earlier event on this branch",
                        branch,
                        row.seq,
                    )
                )
                run.tombstones[target] = row.seq
    for check in checks:
        check.feed(branch, entry, report)
    run.prev, run.expected_seq = computed, row.seq + 1
    return computed


def _check_content(
    run: _BranchRun, branch: str, row: RowLike, entry: Entry, report: AuditReport
) -> None:
    event_id = str(entry.body.get("id"))
    commitment = entry.body.get("content_commitment")
    if row.content is None:
        if row.erased_by is None or row.erased_by <= row.seq:
            report.add(
                Finding(
                    4,
                    f"content of event {event_id} is missing and no TOMBSTONE erased it",
                    branch,
                    row.seq,
                )
            )
        else:
            run.erased[event_id] = (row.seq, row.erased_by)
        return
    if row.erased_by is not None:
        report.add(
            Finding(
                4,
                f"event {event_id} is marked erased by entry {row.erased_by} but its content "
                "is still stored",
                branch,
                row.seq,
            )
        )
    if event_id in run.tombstones:  # pragma: no cover - a TOMBSTONE always follows its target
        return
    if row.salt is None or len(row.salt) != 32:
        report.add(Finding(4, "event content is present but its salt is missing", branch, row.seq))
        return
    data = bytes(row.content)
    got = content_commitment(bytes(row.salt), data)
    if got != commitment:
        report.add(
            Finding(
                4,
                "content does not match the entry's commitment (edited)",
                branch,
                row.seq,
                expected=commitment.hex() if isinstance(commitment, bytes) else None,
                actual=got.hex(),
            )
        )
    if not run.caches:
        return
    digest = content_digest(data)
    if row.digest is None or bytes(row.digest) != digest:
        report.add(
            Finding(
                4,
                "stored content address does not match the content",
                branch,
                row.seq,
                expected=digest.hex(),
                actual=None if row.digest is None else bytes(row.digest).hex(),
            )
        )


def _check_nodes(
    store: LedgerSource,
    branch_no: int,
    branch: str,
    nodes: list[tuple[int, int, bytes]],
    report: AuditReport,
) -> None:
    """(5): stored interior nodes must equal the recomputed ones (they serve proofs)."""
    if not nodes:
        return
    for level, index, h, stored in store.node_mismatches(branch_no, nodes):
        report.add(
            Finding(
                5,
                f"stored tree node (level {level}, index {index}) does not "
                "match the recomputed tree",
                branch,
                ((index + 1) << level) - 1,  # the entry whose append completed the node
                expected=h.hex(),
                actual=stored.hex() if stored is not None else "missing",
            )
        )


def _check_event_index(
    store: LedgerSource,
    branch_no: int,
    branch: str,
    events: list[tuple[str, int]],
    report: AuditReport,
) -> None:
    """(5): the event index (event id -> entry) must point at every event verified.

    A misdirected index would let ``find_event`` and a TOMBSTONE reach the wrong event.
    """
    if not events or not store.has_caches:
        return
    for event_id, seq, k in store.event_index_mismatches(branch_no, events):
        report.add(
            Finding(
                5,
                f"the event index does not point at event {event_id}",
                branch,
                seq,
                expected=f"entry {seq}",
                actual="missing" if k is None else f"key {k}",
            )
        )


def _rotate(
    keyring: _Keyring,
    seq: int,
    payload: Any,
    size: int,
    note: str,
    origin: str,
    report: AuditReport,
) -> None:
    """Apply one KEY_ROTATE at ``seq`` whose first verified covering checkpoint is ``note``."""
    new = payload.get("new_vkey") if isinstance(payload, dict) else None
    old = payload.get("old_vkey") if isinstance(payload, dict) else None
    old_key = keyring.keys.get(old) if isinstance(old, str) else None
    try:
        if not isinstance(new, str) or old_key is None or old_key not in keyring.valid(size):
            raise ProofError(f"it retires {old!r}, which is not a trusted key at size {size}")
        open_checkpoint(note, [old_key], origin=origin)
        new_key = Verifier.from_vkey(new)
    except (ProofError, DecodeError) as e:
        report.add(
            Finding(
                6,
                f"KEY_ROTATE was not signed off by the key it retires in the first checkpoint "
                f"covering it (size {size}), so its new key is not trusted: {e}",
                CANONICAL_BRANCH,
                seq,
            )
        )
        return
    keyring.keys[new_key.vkey()] = new_key
    keyring.retired[old_key.vkey()] = size
    report.add(
        Finding(
            6,
            f"signing key rotated to {new_key} (signed off by {old_key} at size {size}); "
            f"the old key is accepted up to size {size}",
            CANONICAL_BRANCH,
            seq,
            severity="note",
        )
    )


def _remember(
    store: LedgerSource,
    origin: str,
    trusted: TrustedState,
    verifiers: list[Verifier],
    branches: Sequence[BranchLike],
) -> None:
    """After a clean audit, trust the newest checkpoint of every branch it checked."""
    vkeys = tuple(v.vkey() for v in verifiers)
    for b in branches:
        last = store.latest_checkpoint(b.no)
        if last is None:
            continue
        size, root, note = last
        b_origin = origin if b.name == CANONICAL_BRANCH else f"{origin}/branch/{b.name}"
        known = trusted.get(b_origin)
        if known is not None and known.size > size:
            # Never move back: with its newer checkpoints deleted, a ledger that still holds
            # everything we trusted passes, and trusting its older checkpoint would hide a
            # truncation done after this run (step 10).
            continue
        trusted.put(b_origin, TrustedLog(vkeys, size, bytes(root), note))
    trusted.save()


def bound_cache(store: Store) -> None:
    """Give ``store``'s connection a small page cache (``_AUDITOR_CACHE_KIB``).

    For a connection that reads (or rewrites) the whole ledger about once: an audit, whose
    steps and layers' checks read each page about once, or ``memroot rebuild``. The store's
    own cache would only make the process's memory grow with the file.
    """
    store.db.execute(f"PRAGMA cache_size=-{_AUDITOR_CACHE_KIB}")


def verify_path(path: Path | str, **kwargs: Any) -> AuditReport:
    """Open the ledger at ``path`` read-only and ``audit`` it (``kwargs`` as for audit).

    ``path`` may be a ``postgresql://`` URL: the audit then reads one REPEATABLE READ
    snapshot of the database (``PgStore.read``).
    """
    from memroot.ledger.backends.pg import is_url, open_store

    store = open_store(path, readonly=True)
    try:
        if not is_url(path):
            bound_cache(store)
        # An auditor who knows which log to expect says so (``origin=``): a ledger rewritten
        # under another origin then fails its checkpoints (step 6) instead of being trusted
        # under the name it claims.
        origin = kwargs.pop("origin", None) or str(store.meta("origin"))
        return audit(store, origin=origin, **kwargs)
    finally:
        store.close()
