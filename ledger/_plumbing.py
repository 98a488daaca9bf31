"""The ledger's transactions and the derived state its hooks keep: writing, catch-up, folding.

``write``/``reading`` open a transaction over the ledger and its derived state (the file
itself, or a PostgreSQL ledger's local cache), catching the hooks up first with what other
processes appended (``_catch_up``, ``_replay``); ``replay_hooks`` and ``_fold_committed``
fold committed entries through the hooks again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self

import apsw

from memroot.ledger._state import _HookLike, _LedgerState
from memroot.ledger.backends.pg import DerivedCache, PgStore
from memroot.ledger.backends.store import BranchRow, EntryRow
from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import RefusedError, StorageError


class _StaleCache(StorageError):
    """The derived-state cache is ahead of, or diverges from, the ledger: not trusted."""

    def __init__(self, path: Path, branch: str) -> None:
        super().__init__(
            f"the derived-state cache {path} does not match branch {branch!r} of the ledger "
            "(another ledger's, or the ledger was rolled back): reopen the ledger to rebuild "
            "it, or delete the file"
        )


def _folded(hook: _HookLike, db: apsw.Connection, ledger: _LedgerState, branch: str) -> int:
    """Return how many entries of ``branch`` ``hook`` says it holds (0: it does not say)."""
    folded = getattr(hook, "folded", None)
    return 0 if folded is None else int(folded(db, ledger, branch))


def _fold_op(
    hooks: Sequence[_HookLike],
    done: Sequence[int],
    db: apsw.Connection,
    ledger: Any,
    e: Entry,
    content: str | None,
) -> None:
    """Fold one committed operation through the hooks; a hook that refuses it skips it.

    The rule every replay shares (docs/FORMAT.md §3.1): an entry in the log that is not a
    valid operation (appended without the hooks, or validated against an edited cache) is
    skipped, never refused, so every host, catch-up, rebuild, import and verify gives the
    same state, and verify reports it as a note naming the entry. The memory model and the
    falsification layer record their skips themselves (``mem_skipped``, ``fz_skipped``, as
    their rebuilds do); for any other hook what it wrote of the entry is rolled back (a
    savepoint), as ``rebuild`` does for the registry and the git index. What the hooks
    buffered is written first, so the savepoint holds this entry only.
    """
    _end_batch(hooks, db)
    for hook, folded in zip(hooks, done, strict=True):
        if e.seq < folded:
            continue
        db.execute("SAVEPOINT fold_op")
        try:
            hook.apply(db, ledger, e, content)
        except RefusedError:
            db.execute("ROLLBACK TO fold_op")
        except BaseException:
            db.execute("ROLLBACK TO fold_op")
            db.execute("RELEASE fold_op")
            raise
        db.execute("RELEASE fold_op")


def _end_batch(hooks: Sequence[_HookLike], db: apsw.Connection) -> None:
    for hook in hooks:
        end_batch = getattr(hook, "end_batch", None)
        if end_batch is not None:
            end_batch(db)


class _Plumbing(_LedgerState):
    """Transactions, the derived-state cache and catch-up through the hooks."""

    def close(self) -> None:
        """Close the underlying file (and the derived-state cache, if any)."""
        self.store.close()
        if self.derived is not self.store:
            self.derived.close()

    # -- transactions over the ledger and its derived state -------------------------------------

    @contextlib.contextmanager
    def write(self) -> Iterator[apsw.Connection]:
        """Run the body as one write transaction of the ledger and its derived state.

        Yields the connection of the derived tables (the hooks' ``db``). For a ledger file
        it is the file's one transaction. For a PostgreSQL ledger the cache's transaction is
        opened first (so writers on one host never wait for each other's PostgreSQL locks
        while holding the cache), then PostgreSQL's; the cache catches up with what other
        hosts appended, PostgreSQL commits, then the cache. A cache commit lost after
        PostgreSQL's is replayed by the next catch-up; a failed PostgreSQL commit rolls the
        cache back.

        Raises:
            StorageError: if either store fails; nothing is written then.
        """
        if self.derived is self.store:
            with self.store.write() as db:
                yield db
            return
        with self.derived.write() as db, self.store.write():
            self._catch_up()
            yield db

    @contextlib.contextmanager
    def reading(self) -> Iterator[apsw.Connection]:
        """Run the body on one snapshot of the ledger and of its derived state; yield the latter.

        For a PostgreSQL ledger the cache is first brought up to the snapshot PostgreSQL's
        read transaction sees (committed entries other hosts appended are applied).

        Raises:
            StorageError: if either store fails.
        """
        if self.derived is self.store:
            with self.store.read() as db:
                yield db
            return
        if self.store.db.in_transaction:
            # Inside an open snapshot another process may have applied newer entries: allowed.
            self._catch_up(ahead_ok=True)
            with self.store.read(), self.derived.read() as db:
                yield db
            return
        # The cache is brought up to exactly the snapshot the read sees (its branch rows are
        # read once, as it opens: ``PgStore.read``), so no entry another host committed
        # meanwhile is in PostgreSQL's snapshot and missing from the cache.
        with self.store.read():
            try:
                self._catch_up()
                ahead = False
            except _StaleCache:
                ahead = True
            if not ahead:
                with self.derived.read() as db:
                    yield db
                return
        # The cache is ahead of that snapshot: another process of this host applied newer
        # entries, or the cache is of another history. Outside a snapshot the latter is
        # refused (``_StaleCache``); the former is read as before, the cache caught up first.
        self._catch_up()
        with self.store.read():
            self._catch_up(ahead_ok=True)
            with self.derived.read() as db:
                yield db

    def copy_snapshot(self, dst: Path) -> None:
        """Copy the ledger and its derived state, as one snapshot, to a new SQLite file ``dst``.

        For a PostgreSQL ledger the derived state is this host's cache, caught up to the
        snapshot copied (so ``verify`` checks it, steps 8-9); without hooks, the entries only.

        Raises:
            StorageError: if the ledger cannot be read or the copy cannot be written.
        """
        if not isinstance(self.store, PgStore) or self.derived is self.store:
            self.store.copy_snapshot(dst)
            return
        for _ in range(20):
            self._catch_up()
            # The cache's snapshot first (SQLite takes it at the first read), then
            # PostgreSQL's (at its first query, in _behind): the cache then holds nothing
            # newer than what PostgreSQL's snapshot sees (the cache commits after it).
            with self.derived.read() as db, self.store.read():
                db.execute("SELECT count(*) FROM cache_heads").fetchall()
                self._applied = None  # the cache's heads as this snapshot sees them
                if not self._behind():
                    self.store.copy_snapshot(dst, self.derived)
                    return
        raise StorageError(
            f"{self.store.where} kept growing while its derived-state cache was copied; try again"
        )

    # -- the derived-state cache of a PostgreSQL ledger -----------------------------------------

    def _open_cache(self) -> None:
        """Check the cache is of this ledger's history (else start it afresh), catch it up."""
        assert isinstance(self.derived, DerivedCache)
        try:
            self._catch_up()
        except _StaleCache:
            self.derived.reset()
            self._applied = None
            with self.derived.write() as db:
                db.execute(
                    "INSERT OR IGNORE INTO cache_meta VALUES('ledger_id', ?)", (self.ledger_id,)
                )
                for hook in self.hooks:
                    hook.install(db)
            self._catch_up()

    def _forget_applied(self) -> None:
        self._applied = None

    def _applied_heads(self) -> dict[str, tuple[int, bytes]]:
        """Return what the cache has applied (read again once another process committed)."""
        assert isinstance(self.derived, DerivedCache)
        version = self.derived.data_version()
        if self._applied is None or version != self._applied_version:
            self._applied = self.derived.heads()
            self._applied_version = version
        return self._applied

    def _record_applied(self) -> None:
        """Before PostgreSQL's COMMIT: record in the cache the heads this transaction grew."""
        if not self._txn:
            return
        assert isinstance(self.derived, DerivedCache)
        applied = self._applied_heads()
        rows = []
        for branch in self._txn:
            row = self._heads[branch].row
            applied[branch] = (row.size, bytes(row.head))
            rows.append((branch, row.size, bytes(row.head)))
        self.derived.set_heads(rows)

    def _catch_up(self, *, ahead_ok: bool = False) -> int:
        """Apply to the cache the committed entries it has not seen yet; return how many.

        Every branch in creation order (parents before their forks), each entry through the
        hooks as a live append would have (``_replay``). Runs inside a transaction of the
        ledger store; opens the cache's own write transaction when there is something to do.

        Raises:
            StorageError: if the cache is of another history (``_StaleCache``) or a hook
                refuses a committed entry.
        """
        if self.derived is self.store or self._replaying or not self._behind(ahead_ok):
            return 0
        with self.derived.write() as db:
            # Again under the cache's lock: another process may have caught it up meanwhile.
            return sum(self._replay(db, b, start) for b, start in self._behind(ahead_ok))

    def _behind(self, ahead_ok: bool = False) -> list[tuple[BranchRow, int]]:
        """Return the branches the cache lags behind, with the size it has applied of each.

        ``ahead_ok``: the branch heads are read in an older snapshot than the cache (another
        process applied newer entries): a cache ahead of them is not taken for stale.

        Raises:
            _StaleCache: if the cache is ahead of a branch or its head is not the ledger's.
        """
        applied = self._applied_heads()
        todo: list[tuple[BranchRow, int]] = []
        for b in self.store.branches():
            if b.name in self._txn:
                continue  # caught up before this transaction appended to it: the rest is ours
            size, head = applied.get(b.name, (0, b""))
            if size > b.size and ahead_ok:
                continue
            if size > b.size or (size and size == b.size and head != bytes(b.head)):
                raise _StaleCache(self.derived.path, b.name)
            if size < b.size:
                if size and bytes(self._cache_head_row(b, size).hash) != head:
                    raise _StaleCache(self.derived.path, b.name)
                todo.append((b, size))
        return todo

    def _cache_head_row(self, b: BranchRow, size: int) -> EntryRow:
        """Return the entry the cache's head names (``size - 1``), reading a few after it too.

        A catch-up of a few entries then replays the rows read here: inside a PostgreSQL
        read transaction they are kept (``PgStore.iter_entry_rows``), one statement for both.

        Raises:
            NotFoundError: if the ledger has no such entry.
        """
        rows = self.store.entry_rows(b.no, list(range(size - 1, min(b.size, size + 31))))
        if not rows or rows[0].seq != size - 1:
            return self.store.entry_row(b.no, size - 1)
        return rows[0]

    def _replay(self, db: apsw.Connection, b: BranchRow, start: int) -> int:
        """Apply entries ``start..`` of branch ``b`` to the cache through the hooks.

        The hooks see ``ledger.store`` as the cache knows the ledger (``StoreView``): the
        entry applied is the next one of its branch; the follow-ups they return, and what
        they would append, are already in the log and are not appended again.
        """
        assert isinstance(self.derived, DerivedCache)
        applied = self._applied_heads()
        rows = {
            r.name: BranchRow(r.no, r.name, applied[r.name][0], applied[r.name][1])
            for r in self.store.branches()
            if r.name in applied
        }
        prev = applied.get(b.name, (0, b""))[1]
        self._catching_up = True
        try:
            n, prev = self._fold_committed(
                db, b, start, prev, rows, f"the derived-state cache {self.derived.path}"
            )
        finally:
            self._catching_up = False
        size = start + n
        applied[b.name] = (size, prev)
        self.derived.set_heads([(b.name, size, prev)])
        return n

    @property
    def catching_up(self) -> bool:
        """True while a PostgreSQL ledger's cache applies entries other processes committed.

        The hooks then build on the rows the cache file already holds, which anyone with
        access to the file can edit: the memory-root hook checks them against the memory
        map at every v2 root applied (``memroot.memory_root.cache_check``).
        """
        return self._catching_up

    @property
    def replaying(self) -> bool:
        """True while committed entries are folded through the hooks again.

        A PostgreSQL cache's catch-up, ``replay_hooks`` and a check that replays
        (``folding_committed``) fold each branch whole, parents before their forks: the
        order across branches is not the live one (entries of a fork appended before its
        parent closed it come after the close). A hook skips the append-time rules that
        depend on that order or on sizes at the time (a branch's state and limits): the
        entries passed them when they were appended. Nothing is appended meanwhile.
        """
        return self._replaying

    @contextlib.contextmanager
    def folding_committed(self) -> Iterator[None]:
        """Mark the body as folding committed entries (``replaying`` is True in it)."""
        was, self._replaying = self._replaying, True
        try:
            yield
        finally:
            self._replaying = was

    def replay_hooks(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Fold every committed entry of a ledger file through its hooks; return how many.

        For a file whose entries were written without the hooks (``import_bundle`` copies a
        bundle's entries and checkpoints as they are): every branch in creation order, each
        entry as a live append would have applied it, in one write transaction, so the
        layers' derived state (memory model, roots, falsification, branch registry,
        conversation tree, ...) is what the exporting ledger had. Nothing is appended: the
        follow-ups the hooks return are already in the log. ``progress(done, total)`` is
        called every few thousand entries.

        A PostgreSQL ledger's cache does the same fold on its own when the ledger opens (and
        at every write and read): for one, this applies what is still missing, if anything.

        An operation a hook refuses is skipped by that hook (``_fold_op``), as every replay
        skips it.

        Raises:
            StorageError: if a hook refuses a committed event (nothing is written then).
        """
        if self.derived is not self.store:
            return self._catch_up()
        rows: dict[str, BranchRow] = {}
        done = 0
        with self.write() as db:
            branches = self.store.branches()
            total = sum(b.size for b in branches)

            def tick(n: int) -> None:
                nonlocal done
                done += n
                if progress is not None:
                    progress(done, total)

            for b in branches:
                self._fold_committed(db, b, 0, b"", rows, f"the derived state of {self.path}", tick)
        return done

    def _fold_committed(
        self,
        db: apsw.Connection,
        b: BranchRow,
        start: int,
        prev: bytes,
        rows: dict[str, BranchRow],
        where: str,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, bytes]:
        """Fold committed entries ``start..`` of ``b`` through the hooks into ``db``.

        ``rows`` holds the heads the hooks are shown (``StoreView``) and is updated as the
        entries are folded; ``prev`` is the hash of entry ``start - 1``. Returns how many
        entries were folded and the hash of the last one.
        """
        hooks, real, view = self.hooks, self.store, self._view
        view.rows = rows
        self.store = view  # type: ignore[assignment]
        was, self._replaying = self._replaying, True
        n = 0
        try:
            # A hook that folded some of these on its own (reading the ledger's newest size
            # while another host appended) is not given them again.
            done = [_folded(hook, db, self, b.name) for hook in hooks]
            for row in real.iter_entry_rows(b.no, start, b.size):
                e = Entry.from_bytes(row.data)
                if row.seq and e.prev != prev:
                    raise StorageError(
                        f"entry {row.seq} of branch {b.name!r} does not link to the entry "
                        "before it: run `memroot verify`"
                    )
                rows[b.name] = BranchRow(b.no, b.name, row.seq, e.prev)
                content = None if row.content is None else bytes(row.content).decode("utf-8")
                try:
                    if e.kind is not Kind.EVENT:
                        _fold_op(hooks, done, db, self, e, content)
                    else:
                        for hook, folded in zip(hooks, done, strict=True):
                            if row.seq >= folded:
                                hook.apply(db, self, e, content)
                except RefusedError as err:
                    # The memory model skips an event its rules refuse (``mem_skipped``):
                    # another hook refusing one is a layer this version cannot replay.
                    raise StorageError(
                        f"{where} cannot apply event {row.seq} of branch {b.name!r} ({err}); "
                        "nothing was changed"
                    ) from err
                prev = bytes(row.hash)
                n += 1
                if n % 4096 == 0:
                    _end_batch(hooks, db)
                    if progress is not None:
                        progress(4096)
            _end_batch(hooks, db)
            if progress is not None and n % 4096:
                progress(n % 4096)
        finally:
            self.store = real
            view.rows = None
            self._replaying = was
        rows[b.name] = BranchRow(b.no, b.name, start + n, prev)
        return n, prev

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
