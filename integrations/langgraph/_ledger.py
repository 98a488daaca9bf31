"""What the saver and the store share: their ledger, their tables, how they write and read.

Both wrap an open ledger (or ``Memory``), keep lookup tables in its file (``_tables``) that
fold their event types and drop the rows a ``TOMBSTONE`` erased, append integration events
and ``TOMBSTONE``s as one batch (sealed by the ledger's own signed head checkpoint), and serve
only entries the ledger's strict read checked against the signed tree and their content
commitment.

**One lock per ledger.** A ledger has one SQLite connection, which two threads may not use at
once (``apsw.ThreadingViolationError``). Every saver and store on one ledger takes the same
re-entrant lock (``ledger_lock``) around each use of it, so a graph's background checkpoint
writes (``durability="async"``), the store used inside its nodes and ``asyncio`` worker
threads take turns. Code of its own that uses the same ``Memory`` from a graph's threads
takes it too: ``with ledger_lock(memory): memory.recall(...)``.

**The tables are checked, never trusted.** The lookup tables in the file are a cache anyone
who can write the file can edit: a deleted row would roll a thread back to an older
checkpoint, a row moved to another entry would serve an old version. So each saver and store
also folds the same entries, read strictly from the ledger by this process, into a private
in-memory copy of its tables, and serves every lookup from that copy: the newest checkpoint
of a thread is the newest entry the ledger holds for it, whatever the file's tables say.
Whenever another connection changed the file (SQLite's ``data_version``; always, where there
is none) the file's tables are compared with the copy row by row before anything is served,
and a difference is refused with ``IntegrityError`` (``memroot rebuild`` re-derives them;
``memroot verify`` reports them at step 9).

**Checked once per state of the file.** An entry's parsed content, once the strict read
checked it, is kept in memory until another connection commits to the file (or this one
erases content): then the next read checks it again. Nothing is served that was not checked
against the file as it is since anyone else last wrote it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from os import PathLike
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

import apsw

from memroot.integrations.langgraph import _index
from memroot.integrations.langgraph._tables import TableSet
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, EventInput, OpInput
from memroot.ledger.errors import IntegrityError, MemrootError, RefusedError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType

if TYPE_CHECKING:
    from memroot.memory import Memory

__all__ = ["AsyncLedgerTables", "LedgerTables", "ledger_lock", "open_owned"]

_LOCKS: weakref.WeakKeyDictionary[Ledger, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()
_CONTENTS_MAX: Final = 4096
"""Checked entries (parsed) kept in memory per saver or store while nobody else writes; what
a saver derives from one (``_memo``: its decoded parts) is dropped with it."""


def _ledger_of(ledger: Ledger | Memory) -> Ledger:
    return ledger if isinstance(ledger, Ledger) else ledger.ledger


def ledger_lock(ledger: Ledger | Memory) -> threading.RLock:
    """Return the one lock every saver and store on ``ledger`` holds while using it.

    Re-entrant; the same object for a ``Memory`` and its ``Ledger``. Hold it around your own
    use of a ledger (or ``Memory``) that a saver or store shares with a running graph.
    """
    led = _ledger_of(ledger)
    with _LOCKS_GUARD:
        lock = _LOCKS.get(led)
        if lock is None:
            lock = _LOCKS[led] = threading.RLock()
        return lock


_T = TypeVar("_T", bound="LedgerTables")


class LedgerTables:
    """The base of ``MemrootSaver`` and ``MemrootStore`` (see the module docstring).

    A subclass names its ``_TABLES`` (a ``_tables.TableSet``) and calls ``_open`` from its
    constructor.
    """

    __slots__ = (
        "_closed",
        "_contents",
        "_contents_token",
        "_events",
        "_lock",
        "_memo",
        "_mirror",
        "_mirror_pos",
        "_owned",
        "_sync_token",
        "_tables_token",
        "actor",
        "actor_type",
        "branch",
        "ledger",
        "namespace",
    )

    _TABLES: ClassVar[TableSet]

    ledger: Ledger
    branch: str
    actor: str
    actor_type: str
    namespace: str
    _lock: threading.RLock
    _mirror: apsw.Connection
    _mirror_pos: int
    _owned: Memory | None
    _closed: bool
    _tables_token: int | None
    _sync_token: tuple[int, int, int, int] | None
    _contents: dict[int, tuple[Entry, dict[str, Any] | None]]
    _contents_token: int | None
    _events: dict[str, tuple[str, int]]
    _memo: dict[Any, Any]

    def _open(
        self,
        ledger: Ledger | Memory,
        *,
        branch: str,
        actor: str,
        actor_type: str,
        namespace: str,
    ) -> None:
        """Keep the ledger and the writer's identity; create the tables if they are missing.

        Raises:
            ValidationError: the ledger was opened without strict reads (``strict=False``).
            IntegrityError: an entry of the branch does not check out (the private copy of
                the tables is folded from every entry when the saver or store opens).
        """
        led = _ledger_of(ledger)
        if not led.strict:
            raise ValidationError(
                "the LangGraph saver and store serve only checked entries: open the ledger "
                "with strict reads (the default), not strict=False",
                field="ledger",
            )
        self.ledger = led
        self.branch = branch
        self.actor = actor
        self.actor_type = actor_type
        self.namespace = namespace
        self._lock = ledger_lock(led)
        self._owned = None
        self._closed = False
        self._mirror = apsw.Connection(":memory:")
        self._TABLES.install(self._mirror)
        self._mirror_pos = 0
        self._tables_token = None
        self._sync_token = None
        self._contents = {}
        self._contents_token = None
        self._events = {}
        self._memo = {}
        with self._lock:
            with self.ledger.write() as db:
                self._TABLES.install(db)
            self._sync()

    def close(self) -> None:
        """Release the private tables (and the ledger, when ``from_conn_string`` opened it).

        Safe to call twice, and while another thread of a graph still runs: it waits for
        that thread's use of the ledger to end.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._mirror.close()
            if self._owned is not None:
                self._owned.close()

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls: type[_T],
        path: str | PathLike[str],
        *,
        branch: str = CANONICAL_BRANCH,
        key_path: str | PathLike[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[_T]:
        """Open (or create) the ledger at ``path``, yield a saver (or store) on it, close both.

        Like ``SqliteSaver.from_conn_string`` (``SqliteStore.from_conn_string``).

        ``path`` may be a ``postgresql://`` URL; ``key_path`` names the signing key (needed
        for such a ledger, whose key is not kept beside a file). ``kwargs`` go to the
        constructor (``actor``, ``namespace``, a saver's ``serde``...).

        Raises:
            StorageError, KeyFileError: the ledger or its key cannot be opened.
            NotImplementedError: a store's ``index`` or ``ttl`` configuration.
            IntegrityError: an entry of the branch does not check out.
        """
        tables = open_owned(cls, path, key_path, {"branch": branch, **kwargs})
        try:
            yield tables
        finally:
            tables.close()

    def setup(self) -> None:
        """Do nothing: the tables were created on open (``SqliteSaver.setup``'s place)."""

    # -- the index -----------------------------------------------------------------------------

    def _sync(self) -> None:
        """Fold entries appended since the last call into the file's tables and the copy.

        Raises:
            IntegrityError: an entry or its content does not check out.
        """
        if self._closed:
            raise ValidationError(f"this {type(self).__name__} is closed", field="self")
        token = self._token()
        if token is not None and token == self._sync_token:
            return  # nobody wrote since the last sync, not even on this connection
        t = self._TABLES
        try:
            _index.catch_up(self.ledger, t.name, self.branch, t.fold, t.types)
            self._sync_mirror()
            # Another connection committed (perhaps an editor of the file): the tables are
            # compared again, and what was checked is checked again when next served.
            tables = self.ledger.derived.data_version()
            if tables is None or tables != self._tables_token:
                self._compare_tables()
                self._tables_token = tables
            entries = self.ledger.store.data_version()
            if entries is None or entries != self._contents_token:
                self._contents.clear()
                self._memo.clear()
                self._contents_token = entries
            self._sync_token = self._token()
        except IntegrityError:
            raise
        except MemrootError as e:
            raise IntegrityError(
                f"the ledger's entries of the {t.name} do not check out: {e}"
            ) from e

    def _token(self) -> tuple[int, int, int, int] | None:
        """Return what changes when anyone commits to the ledger or its derived state (or None).

        SQLite's ``data_version`` (another connection committed) and the connection's
        ``total_changes`` (this one wrote: another saver, store or ``Memory`` on it).
        """
        store, derived = self.ledger.store, self.ledger.derived
        a = store.data_version()
        if derived is store:  # a ledger file: one connection holds both
            return None if a is None else (a, store.db.total_changes(), a, 0)
        b = derived.data_version()
        if a is None or b is None:
            return None
        return a, store.db.total_changes(), b, derived.db.total_changes()

    def _sync_mirror(self) -> None:
        """Fold the entries appended since the last call into the private copy (strict reads).

        Raises:
            IntegrityError: an entry or its content does not check out.
        """
        t = self._TABLES
        size = self.ledger.size(self.branch)
        if self._mirror_pos >= size:
            return
        db = self._mirror
        with db:
            for row in self.ledger.read_range(self._mirror_pos, size, self.branch):
                e = row.entry
                if _index.event_type(e) in t.types:
                    data = None if row.content is None else row.content.encode("utf-8")
                    self._fold_mirror(e, _index.content_json(e, data))
                elif e.type == OpType.TOMBSTONE.value:
                    self._fold_mirror(e, None)
        self._mirror_pos = size

    def _fold_mirror(self, e: Entry, content: dict[str, Any] | None) -> None:
        """Fold one strictly read entry (an event of the set's types, or a ``TOMBSTONE``)."""
        if e.type != OpType.TOMBSTONE.value:
            # Where each event is, from the entries this process read itself (the file's
            # event index is not asked: it is as editable as these tables).
            self._events[str(e.body["id"])] = (e.branch, e.seq)
        self._TABLES.fold(self._mirror, e, content, self._events.get)

    def _compare_tables(self) -> None:
        """Compare every row of the file's tables on the branch with the private copy.

        Raises:
            IntegrityError: a row is missing, added or changed (edited behind the ledger).
        """
        t = self._TABLES
        try:
            theirs = t.rows(self.ledger.derived.db, self.branch)
        except apsw.Error as e:
            raise IntegrityError(
                f"the {t.name}'s lookup tables in the ledger file cannot be read ({e}); "
                "run `memroot rebuild`",
                branch=self.branch,
                step=9,
            ) from e
        mine = t.rows(self._mirror, self.branch)
        for table in t.tables:
            missing, extra = mine[table] - theirs[table], theirs[table] - mine[table]
            if missing or extra:
                raise IntegrityError(
                    f"the {t.name}'s lookup table {table} in the ledger file disagrees with the "
                    f"ledger's entries ({len(missing)} row(s) missing or changed, {len(extra)} "
                    "not derived from any entry): it was edited; refusing to serve from it "
                    "(run `memroot rebuild`)",
                    branch=self.branch,
                    step=9,
                )

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a lookup on the private copy of the tables (checked against the file's).

        Only after ``_sync``, which compared the file's tables with the copy since anyone
        else last changed the file.
        """
        return [tuple(r) for r in self._mirror.execute(sql, args)]

    def _checked(self, seq: int) -> tuple[Entry, dict[str, Any] | None]:
        """Return entry ``seq`` of the branch, re-checked, and its parsed content (None: erased).

        Raises:
            IntegrityError: the entry or its content does not check out, or there is none.
        """
        hit = self._contents.get(seq)
        if hit is not None:
            return hit
        try:
            row = self.ledger.read(seq, self.branch)
        except IntegrityError:
            raise
        except MemrootError as e:
            raise IntegrityError(
                f"the index points at entry {self.branch}:{seq}, which cannot be read: {e}",
                branch=self.branch,
                seq=seq,
            ) from e
        data = None if row.content is None else row.content.encode("utf-8")
        found = row.entry, _index.content_json(row.entry, data)
        if len(self._contents) >= _CONTENTS_MAX:
            self._contents.clear()
            self._memo.clear()
        self._contents[seq] = found
        return found

    # -- writes --------------------------------------------------------------------------------

    def _event(self, kind: str, content: dict[str, Any]) -> EventInput:
        return _index.event(
            kind, content, actor=self.actor, actor_type=self.actor_type, namespace=self.namespace
        )

    def _tombstones(self, event_ids: list[str], reason: str) -> list[OpInput]:
        return _index.tombstones(
            event_ids,
            reason,
            actor=self.actor,
            actor_type=self.actor_type,
            namespace=self.namespace,
        )

    def _write(
        self,
        items: Sequence[EventInput | OpInput] | Callable[[], Sequence[EventInput | OpInput]],
    ) -> None:
        """Append ``items`` as one batch (its commit signs the new head) and fold them.

        ``items`` may be a function that returns them: it is called inside the write
        transaction, after the tables are synced there (``_sync``: a ``put`` reads its
        parent and a ``put_writes`` the writes already stored through them), so the write
        reads the file's ``data_version`` once, under the lock, instead of once before it
        too. Nothing is written when it returns none.

        Raises:
            IntegrityError: the ledger refused to sign over what the file now holds, or an
                entry does not check out; nothing is written.
        """
        from memroot.memory_root import Roots

        t = self._TABLES
        folded: list[tuple[Entry, dict[str, Any] | None]] = []
        store = self.ledger.store
        quiet: int | None = None
        try:
            with self.ledger.write():
                self._sync()
                batch = items() if callable(items) else items
                if not batch:
                    return
                if any(isinstance(i, OpInput) for i in batch):
                    self._contents.clear()  # a TOMBSTONE erases content this process checked
                    self._memo.clear()
                # Inside the write transaction nobody else can commit: when the data_version
                # and this connection's change count are still what _sync recorded (just
                # now, in this transaction), this write is the only change since (a ledger
                # file: one connection holds entries and derived tables).
                synced = self._sync_token
                version = store.data_version()
                if (
                    synced is not None
                    and self.ledger.derived is store
                    and synced[:2] == (version, store.db.total_changes())
                ):
                    quiet = version
                added = Roots(self.ledger).append_batch(batch, branch=self.branch)
                first = min((a.seq for a in added if a.branch == self.branch), default=None)
                start, end = _index.catch_up(
                    self.ledger,
                    t.name,
                    self.branch,
                    t.fold,
                    t.types,
                    collect=folded,
                    own_from=first,
                )
        except RefusedError as refused:
            self._sync_token = None  # what _sync did in the transaction was rolled back
            # The seal refuses to sign a tree inconsistent with its signed checkpoints: the
            # file was edited (truncated, rewritten) under this writer.
            raise IntegrityError(
                f"the ledger refused this {t.name}'s write: {refused}", branch=self.branch
            ) from refused
        except BaseException:
            self._sync_token = None
            raise
        if start == self._mirror_pos:
            # Committed: the private copy folds the entries the file's fold just read
            # strictly (one read, two folds); otherwise _sync reads them for it.
            with self._mirror:
                for e, content in folded:
                    self._fold_mirror(e, content)
                    if content is not None and len(self._contents) < _CONTENTS_MAX:
                        self._contents[e.seq] = (e, content)  # checked as it was folded
            self._mirror_pos = end
            if quiet is not None:
                # Nothing but this write changed the file since the last _sync, and the copy
                # folded it: what _sync would find is this token (the version read inside
                # the transaction, so a commit by another connection since is still seen).
                self._sync_token = (quiet, store.db.total_changes(), quiet, 0)
                return
        self._sync()


class AsyncLedgerTables(LedgerTables):
    """The async openers of ``AsyncMemrootSaver`` and ``AsyncMemrootStore``.

    ``from_conn_string`` is an async context manager here (``AsyncSqliteSaver``'s and
    ``AsyncSqliteStore``'s API): opening and closing run in a worker thread.
    """

    __slots__ = ()

    # An async context manager in place of the sync one: the override is what it is for.
    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(  # type: ignore[override]
        cls: type[_T],
        path: str | PathLike[str],
        *,
        branch: str = CANONICAL_BRANCH,
        key_path: str | PathLike[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[_T]:
        """Open (or create) the ledger at ``path``, yield a saver (or store) on it, close both.

        Raises:
            StorageError, KeyFileError: the ledger or its key cannot be opened.
            NotImplementedError: a store's ``index`` or ``ttl`` configuration.
            IntegrityError: an entry of the branch does not check out.
        """
        tables = await asyncio.to_thread(
            open_owned, cls, path, key_path, {"branch": branch, **kwargs}
        )
        try:
            yield tables
        finally:
            await asyncio.to_thread(tables.close)

    async def setup(self) -> None:  # type: ignore[override]
        """Do nothing: the tables were created on open (``AsyncSqliteSaver.setup``'s place)."""


def open_owned(
    cls: type[_T],
    path: str | PathLike[str],
    key_path: str | PathLike[str] | None,
    kwargs: dict[str, Any],
) -> _T:
    """Open (or create) the ledger at ``path`` and return a ``cls`` on it that closes it.

    Raises:
        StorageError, KeyFileError: the ledger or its key cannot be opened.
        IntegrityError: an entry of the branch does not check out.
    """
    from memroot.memory import open_memory

    mem = open_memory(path, key_path=key_path, actor=kwargs.get("actor", "langgraph"))
    try:
        tables = cls(mem, **kwargs)  # type: ignore[call-arg]
    except BaseException:
        mem.close()
        raise
    tables._owned = mem
    return tables
