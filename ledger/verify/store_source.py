"""A SQLite ledger file as the auditor's ``LedgerSource``, read in bounded chunks.

``_StoreSource`` answers the steps from a ``Store``; ``_ChunkReader`` reads the next rows
(and the Merkle nodes and event-index rows they need) on a thread of its own while the steps
check the last ones. The SQLite driver is imported inside the functions that read a file, so
a bundle's auditor never loads it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.verify.report import _CHUNK, RowLike

if TYPE_CHECKING:
    from memroot._native import IndexSpan
    from memroot.ledger.backends.store import Store


class _StoreSource:
    """A SQLite ``Store`` seen as a ``LedgerSource`` (it keeps every cache)."""

    has_caches = True
    has_content = True

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
        # The nodes below the store's node_min_level are not stored (the leaves, checked by
        # step 5 against the entries, give them); a version 1 file's level-1 rows are read by
        # nobody. PostgreSQL stores (and reads) level 1: there every level is checked.
        low = self.store.node_min_level
        by_end = self.store.node_by_end
        nodes = [n for n in nodes if n[0] >= low]
        if not nodes:
            return []

        if _N is not None:
            last_level, last_index, _ = nodes[-1] if nodes else (0, 0, b"")
            ahead = (
                branch_no == self._ahead_branch and (last_index + 1) << last_level <= self._covered
            )
            # Nodes complete in order of the leaf that ends them: when the last one was read
            # ahead, every one was (a node absent from the read-ahead is absent from the file).
            if ahead:  # and checked nodes are taken out of the read-ahead
                bad_ahead = _N.node_mismatches_ahead(
                    branch_no, list(nodes), self._read_ahead, by_end
                )
                return [(*nodes[i][:2], nodes[i][2], stored) for i, stored in bad_ahead]
            keys = _N.node_keys(branch_no, list(nodes), by_end)
            found = _nodes_by_runs(self.store, keys)
            bad = _N.mismatches(keys, [h for _, _, h in nodes], found)
            return [(*nodes[i][:2], nodes[i][2], found.get(keys[i])) for i in bad]
        keys = [self.store.key_of_node(branch_no, level, index) for level, index, _ in nodes]
        stored = {k: bytes(h) for k, h in _nodes_by_runs(self.store, keys).items()}
        return [
            (level, index, h, stored.get(k))
            for (level, index, h), k in zip(nodes, keys, strict=True)
            if stored.get(k) != h
        ]

    def stray_nodes(self, branch_no: int) -> int:
        """Return how many ``nodes`` rows of the branch lie below ``NODE_MIN_LEVEL``.

        None is written from layout version 2 on (FORMAT.md 4) and none is read in any
        version; a version 1 SQLite file and the PostgreSQL tables keep the level-1 rows
        written before, so those are not counted (0). A version 2 file (opened read-only,
        so not migrated) is counted by level, a version 3 one by the level bits of its keys.
        """
        from memroot.ledger.backends.store import (
            NODE_MIN_LEVEL,
            SCHEMA_VERSION,
            level_node_key,
        )

        if self.store.meta("schema_version") == SCHEMA_VERSION:  # version 1, or PostgreSQL
            return 0
        if not self.store.node_by_end:
            bounds = (level_node_key(branch_no, 0, 0), level_node_key(branch_no, NODE_MIN_LEVEL, 0))
            row: Any = self.store.db.execute(
                "SELECT count(*) FROM nodes WHERE k >= ? AND k < ?", bounds
            ).fetchone()
            return int(row[0])
        row = self.store.db.execute(
            "SELECT count(*) FROM nodes WHERE k >= ? AND k < ? AND (k & 63) < ?",
            (branch_no << 48, (branch_no + 1) << 48, NODE_MIN_LEVEL),
        ).fetchone()
        return int(row[0])

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


def _node_ranges(branch_no: int, start: int, stop: int, *, by_end: bool) -> list[int]:
    """Return ``[lo, hi, ...]``: the ``nodes`` key ranges of the subtrees leaves complete.

    Leaves ``start`` to ``stop - 1`` complete, on level ``L`` >= 1, the subtrees with
    indexes ``start >> L`` to ``(stop >> L) - 1``: keyed by the tree size that completes
    them (``by_end``, ``node_key``), the one range of the sizes ``start + 1`` to ``stop``;
    keyed by level (``level_node_key``), a range a level.
    """
    from memroot.ledger.backends.store import level_node_key

    if by_end:
        return [(branch_no << 48) | (start + 1) << 6, (branch_no << 48) | (stop + 1) << 6]
    out: list[int] = []
    level = 1
    while stop >> level > start >> level:
        out += (
            level_node_key(branch_no, level, start >> level),
            level_node_key(branch_no, level, stop >> level),
        )
        level += 1
    return out


_NODE_RANGES_SQL: dict[int, str] = {}
_END_GAP: Final = 4 << 6 | 63
"""Keys (``node_key``) of nodes that complete at sizes four apart differ by at most this."""


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
                    ranges = _node_ranges(self._no, done, done + len(rows), by_end=twin.node_by_end)
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
    keys fall into a few runs of consecutive integers (keyed by level), or into one run of
    keys at most ``_END_GAP`` apart (keyed by the tree size that completes them: the sizes
    that complete a node of level >= 2 are multiples of 4): a range scan reads each run in
    key order, where an ``IN`` list descends the b-tree once per key. A scan may return rows
    not asked for, which no caller looks up.
    """
    found: dict[int, bytes] = {}
    ordered = sorted(set(keys))
    gap = _END_GAP if store.node_by_end else 1
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] - ordered[j] <= gap:
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


def bound_cache(store: Store) -> None:
    """Give ``store``'s connection a small page cache (``_AUDITOR_CACHE_KIB``).

    For a connection that reads (or rewrites) the whole ledger about once: an audit, whose
    steps and layers' checks read each page about once, or ``memroot rebuild``. The store's
    own cache would only make the process's memory grow with the file.
    """
    store.db.execute(f"PRAGMA cache_size=-{_AUDITOR_CACHE_KIB}")
