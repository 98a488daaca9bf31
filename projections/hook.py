"""The memory model's ``AppendHook``: validate and fold every entry inside its append.

Install it on a ledger (``Ledger.open(path, hooks=[MemoryHook()])``; the default hooks,
``memroot.memory_root.stack.default_hooks``, do) and every append is checked against the memory
model's rules in the same transaction that writes the entry: a refused operation raises
(``RuleError`` naming the rule, or ``ValidationError`` naming the field) and nothing is
written; an accepted one updates the derived tables before the transaction commits.

The tables remember how many entries of each branch they have folded (``mem_heads``). When
entries were appended without the hook (an older ledger, or the Python API without hooks), the
next append or ``sync`` folds the missing ones first (a branch's ancestors before it); entries
among them that break the rules are recorded in ``mem_skipped`` rather than refused, since
they are already in the ledger. Every branch is folded: a branch's entries are validated
against its view (its own state over its parent's at the fork, ``memroot.projections.views``).
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Final

import apsw

from memroot.ledger.backends.store import Store
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind, OpInput
from memroot.ledger.errors import IntegrityError, NotFoundError, RefusedError, StorageError
from memroot.ledger.ledger import Ledger
from memroot.projections import gated, tables
from memroot.projections.backends import _EV_INS, SqlState
from memroot.projections.engine import Engine
from memroot.projections.fold import apply_or_skip, fold_entries
from memroot.projections.model import EventRef, Grant, Namespace
from memroot.projections.views import Fork

__all__ = ["MemoryHook", "catch_up", "current", "flush_pending", "sync"]

_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""Events folded together by a replay (``Engine.fold_events``): a bound on what it holds."""
_HEAD_UPSERT: Final = (
    "INSERT INTO mem_heads VALUES(?, ?) ON CONFLICT(branch) DO UPDATE SET size = excluded.size"
)


class _BatchState(SqlState):
    """``SqlState`` that holds a batch's event rows and heads in memory until ``flush``.

    Events are most of a log and write only their ``mem_events`` row and the head: those are
    buffered and written with one ``executemany`` each (an operation writes its own rows as
    it goes, after what is buffered; its head is buffered too). Whatever reads them goes through
    ``flush`` first (``MemoryHook`` flushes before any entry that is not an event, at the end
    of every batch, and ``catch_up``/``flush_pending`` for other readers), so the tables are
    exactly as if every entry had been written on its own. Permissions are remembered for
    the batch, and forgotten when a policy (namespace, grant) or a fork is recorded.
    """

    def __init__(self, db: apsw.Connection) -> None:
        super().__init__(db)
        self.events: list[tuple[Any, ...]] = []
        self.heads: dict[str, int] = {}
        self.perms: dict[tuple[str, str, str], frozenset[str] | None] = {}
        self.gated = gated.Pending(db)
        """The batch's gated-invalidation rows (``gated.Pending``), written by ``flush``."""

    def add_event(self, event: EventRef) -> None:
        """Buffer a new event's row (written by ``flush``)."""
        self.events.append(event.row())

    def add_event_rows(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Buffer new events' ``EventRef.row()`` tuples, in order (``Engine.apply_events``)."""
        self.events.extend(rows)

    def set_head(self, branch: str, size: int) -> None:
        """Buffer the branch's head (written by ``flush``)."""
        self.heads[branch] = size

    def head(self, branch: str) -> int:
        """Return the head, the buffered one first."""
        size = self.heads.get(branch)
        return super().head(branch) if size is None else size

    def permissions(self, branch: str, namespace_id: str, actor_id: str) -> frozenset[str] | None:
        """Return the actor's permissions (remembered until ``forget``)."""
        key = (branch, namespace_id, actor_id)
        try:
            return self.perms[key]
        except KeyError:
            found = self.perms[key] = super().permissions(branch, namespace_id, actor_id)
            return found

    def add_namespace(self, namespace: Namespace) -> None:
        """Record a namespace policy (what was remembered of permissions is forgotten)."""
        self.perms.clear()
        super().add_namespace(namespace)

    def add_grant(self, grant: Grant) -> None:
        """Record a new grant (what was remembered of permissions is forgotten)."""
        self.perms.clear()
        super().add_grant(grant)

    def close_grant(
        self, branch: str, namespace_id: str, actor_id: str, permission: str, seq: int
    ) -> None:
        """End a grant (what was remembered of permissions is forgotten)."""
        self.perms.clear()
        super().close_grant(branch, namespace_id, actor_id, permission, seq)

    def add_fork(self, fork: Fork) -> None:
        """Record a fork (a branch's view changes: permissions are read again)."""
        self.perms.clear()
        super().add_fork(fork)

    def write_events(self) -> None:
        """Write the buffered event rows (an operation reads the events before it)."""
        if self.events:
            self.db.executemany(_EV_INS, self.events)
            self.events.clear()

    def flush(self) -> None:
        """Write the buffered rows and heads; forget the remembered permissions."""
        self.perms.clear()
        self.write_events()
        self.gated.flush()
        if self.heads:
            self.db.executemany(_HEAD_UPSERT, list(self.heads.items()))
            self.heads.clear()

    def discard(self) -> None:
        """Drop what is buffered (its batch never landed)."""
        self.events.clear()
        self.heads.clear()
        self.perms.clear()
        self.gated.discard()


# The hooks' buffered states, so a reader of the same connection can have them written first.
_BUFFERS: weakref.WeakSet[_BatchState] = weakref.WeakSet()


def flush_pending(db: apsw.Connection) -> None:
    """Write what memory hooks on ``db`` hold for the batch being appended (if anything).

    Call before reading the memory tables from inside an append (another hook's reads).
    """
    for state in list(_BUFFERS):
        if state.db is db:
            state.flush()


class MemoryHook:
    """The ``AppendHook`` that keeps the memory model's derived state (see module doc).

    A batch's events are written together at its end (``end_batch``; see ``_BatchState``);
    any other entry is folded on its own, after the events the batch buffered so far.
    """

    def __init__(self) -> None:
        """Start without a connection; ``apply`` binds to the ledger's."""
        self._state: _BatchState | None = None
        # (branch, seq, data_version) the next entry must have for the stored head to be
        # known without reading it: set after each fold, so a rollback (the next entry then
        # has a lower seq) or another connection's commit (data_version moves) misses it.
        self._expect: tuple[str, int, int] | None = None
        # Stores whose rollbacks drop what is buffered (weak: an id could be reused).
        self._stores: weakref.WeakSet[Store] = weakref.WeakSet()

    def _bound(self, db: apsw.Connection, ledger: Ledger) -> _BatchState:
        if self._state is None or self._state.db is not db:
            self._state = _BatchState(db)
            _BUFFERS.add(self._state)
        if ledger.derived not in self._stores:
            self._stores.add(ledger.derived)
            ledger.derived.on_commit(_nothing, self._rolled_back)
        return self._state

    def _rolled_back(self) -> None:
        if self._state is not None:
            self._state.discard()
        self._expect = None

    def install(self, db: apsw.Connection) -> None:
        """Create the memory tables if missing (runs at open, inside a write transaction)."""
        tables.install(db)

    def apply(
        self, db: apsw.Connection, ledger: Ledger, entry: Entry, content: str | None
    ) -> list[OpInput]:
        """Validate one new entry and fold it into the derived tables (on any branch).

        Raises:
            ValidationError: a payload field is missing or malformed.
            RuleError: the entry breaks a rule of the memory model (including namespace
                policy: ``PermissionRefused`` names actor, namespace and permission).
            StorageError: the derived state is ahead of the ledger (run ``memroot rebuild``).
        """
        state = self._bound(db, ledger)
        version = _commit_version(db, ledger)
        if self._expect != (entry.branch, entry.seq, version):
            self._reload(db, ledger, state, entry)
        elif entry.kind is not Kind.EVENT:
            state.write_events()  # an operation reads the events before it (its evidence)
        self._expect = None
        if ledger.replaying:
            _fold_committed(db, state, entry)
        else:
            if entry.kind is not Kind.EVENT and ledger.strict:
                _check_named(ledger, state, entry)
            Engine(state).apply(entry)
        state.set_head(entry.branch, entry.seq + 1)
        self._expect = None if version is None else (entry.branch, entry.seq + 1, version)
        return []

    def folded(self, db: apsw.Connection, ledger: Ledger, branch: str) -> int:
        """Return how many entries of ``branch`` the memory tables hold (``catch_up`` too)."""
        return self._bound(db, ledger).head(branch)

    def _reload(
        self, db: apsw.Connection, ledger: Ledger, state: _BatchState, entry: Entry
    ) -> None:
        """Check the stored head before ``entry`` (not the one expected); catch up to it."""
        # What is buffered belongs to a batch that did not land (it ended in an error).
        state.discard()
        head = state.head(entry.branch)
        if head > entry.seq:
            raise StorageError(
                f"the derived memory state has folded {head} entries of branch "
                f"{entry.branch!r} but the ledger has {entry.seq}; it belongs to another "
                "ledger or history: run memroot rebuild"
            )
        if head < entry.seq or (entry.seq == 0 and entry.branch != CANONICAL_BRANCH):
            # A branch reads its parent as of the fork: the parent must be folded that far.
            catch_up(db, ledger, entry.branch, entry.seq)

    def apply_events(
        self, db: apsw.Connection, ledger: Ledger, entries: Sequence[Entry], contents: Sequence[str]
    ) -> list[OpInput]:
        """Validate and fold a run of events of one branch, as ``apply`` on each in turn.

        The stored head is checked before the first (as ``apply`` does); the run is folded in
        one call (``Engine.apply_events``).

        Raises:
            RuleError, StorageError: as ``apply``.
        """
        first = entries[0]
        state = self._bound(db, ledger)
        version = _commit_version(db, ledger)
        if self._expect != (first.branch, first.seq, version):
            self._reload(db, ledger, state, first)
        self._expect = None
        Engine(state).apply_events(entries)
        last = entries[-1]
        state.set_head(last.branch, last.seq + 1)
        self._expect = None if version is None else (last.branch, last.seq + 1, version)
        return []

    def end_batch(self, db: apsw.Connection) -> None:
        """Write the batch's buffered event rows and heads (the ledger calls it)."""
        if self._state is not None and self._state.db is db:
            self._state.flush()


def _commit_version(db: apsw.Connection, ledger: Ledger) -> int | None:
    """Return the number that moves when another connection commits to ``db`` (None: none).

    SQLite's ``PRAGMA data_version`` (``Store.data_version``, read once per write
    transaction): unlike the file control ``db.data_version()``, it stays the same across this
    connection's own commits, so the head the last fold left is still known at the next write
    of a saver or agent; a commit by anyone else, an attacker's included, moves it. A rollback
    of this connection's write drops what is expected (``_rolled_back``).
    """
    if ledger.derived.db is db:
        return ledger.derived.data_version()
    return None


def _fold_committed(db: apsw.Connection, state: _BatchState, entry: Entry) -> None:
    """Fold an entry already in the ledger; skip (and record) it if the rules refuse it.

    What ``fold_entries`` does for every replay (catch-up, rebuild, verify): an entry in the
    log that breaks the rules (appended without the hooks) gets its ``mem_skipped`` row and
    nothing else, the same on every host (a PostgreSQL cache's catch-up folds through the
    hooks, ``Ledger.replaying``). An operation is folded in a savepoint after what the batch
    buffered is written, so a refusal leaves no trace of it.
    """
    if entry.kind is Kind.EVENT:
        try:
            Engine(state).apply(entry)  # refused before anything is buffered
        except RefusedError as e:
            state.skip(entry.branch, entry.seq, entry.type, str(e))
        return
    state.flush()
    # On a refusal the gated bookkeeping drops only this entry's: the batch's were flushed.
    apply_or_skip(db, Engine(state), state, entry, undo=state.gated.discard)


def _named(value: object, out: set[str]) -> None:
    if isinstance(value, str):
        if _UUID.fullmatch(value):
            out.add(value)
    elif isinstance(value, dict):
        for v in value.values():
            _named(v, out)
    elif isinstance(value, list):
        for v in value:
            _named(v, out)


def _check_named(ledger: Ledger, state: _BatchState, entry: Entry) -> None:
    """Before a live operation is validated: check every stored object and event it names.

    The engine validates an operation against the derived tables (an object's lifecycle,
    version and namespace; an evidence event's namespace), which anyone who can write the
    file can edit. So each object the operation names (its target, the objects and events
    of its payload) is first checked as a strict read would: the object against the replay
    of its own operations, the event against its entry and content. What this batch made
    itself (not stored yet) is the writer's own.

    Raises:
        IntegrityError: a named object or event fails its check; nothing is written.
    """
    from memroot.projections.strict_rows import check_objects  # (it imports this module)

    ids: set[str] = set()
    _named(entry.body.get("target_id"), ids)
    _named(entry.body.get("payload"), ids)
    state.write_events()
    for i in sorted(ids):
        o = state.obj(entry.branch, i)
        if o is not None and o.seq < ledger.size(o.branch):
            with contextlib.suppress(NotFoundError):
                # NotFound: its closure reached an entry of this batch, not stored yet (a
                # read past the stored head; a deleted stored entry is an IntegrityError).
                check_objects(ledger, [o], entry.branch)
        e = state.event(entry.branch, i)
        if e is not None:
            _check_event(ledger, e)


def _check_event(ledger: Ledger, e: EventRef) -> None:
    """Check an event an operation is validated against: its entry, content and row.

    An event of the batch being appended (not stored yet) is this writer's own.

    Raises:
        IntegrityError: the entry or its content fails its strict read (step 1-5 or 4), or
            the ``mem_events`` row names another id, namespace or actor.
    """
    if e.seq >= ledger.size(e.branch):
        return
    row = ledger.read(e.seq, e.branch)
    body = row.entry.body
    # (Its erasure is the view's: an ancestor's event erased after a fork is not erased there.)
    said = (body.get("id"), body.get("namespace_id"), body.get("actor_id"))
    if row.entry.kind is not Kind.EVENT or said != (e.id, e.namespace_id, e.actor_id):
        raise IntegrityError(
            f"step 9: the derived row of event {e.id} is not what entry {e.branch}:{e.seq} "
            "says (derived state edited); nothing was written",
            branch=e.branch,
            seq=e.seq,
            step=9,
        )


def _nothing() -> None:
    """Nothing to do before a commit: every batch wrote its rows at its end."""


def catch_up(db: apsw.Connection, ledger: Ledger, branch: str, upto: int) -> int:
    """Fold the entries of ``branch`` below ``upto`` not folded yet, its ancestors first.

    Each ancestor is folded at least through the ``BRANCH_CREATE`` of the branch below it,
    so the branch's view of it is complete. Returns how many entries were folded. Run inside
    a write transaction.

    Raises:
        DecodeError: if a stored entry does not decode.
        StorageError: if the derived state is ahead of the ledger.
    """
    flush_pending(db)
    parent, anchor = ledger.store.branch_parent(branch)
    n = 0
    if parent is not None and anchor is not None:
        n += catch_up(db, ledger, parent, anchor + 1)
    state = SqlState(db)
    head = state.head(branch)
    if head >= upto:
        return n
    fresh = branch == CANONICAL_BRANCH and not db.execute("SELECT 1 FROM mem_heads").fetchone()
    return n + fold_entries(db, ledger.entries(head, upto, branch), fresh=fresh)


def _behind(ledger: Ledger, db: apsw.Connection) -> bool:
    state = SqlState(db)
    return any(state.head(b.name) != b.size for b in ledger.store.branches())


def current(ledger: Ledger, db: apsw.Connection) -> bool:
    """Return whether the derived state ``db`` holds every entry and a current text index.

    What ``sync`` answers without the write lock; run it inside the read transaction that
    is to read the state (``ledger.reading()``), so the answer is that snapshot's.
    """
    return tables.installed(db) and not _behind(ledger, db) and tables.text_index_current(db)


def sync(ledger: Ledger, branch: str | None = None) -> int:
    """Fold every entry the derived state has not seen yet; return how many were folded.

    Every branch is brought up to date (parents first), or only ``branch`` and its
    ancestors. Readers call this first, so queries never see a state behind the ledger. It
    also brings the full-text index up to date (``tables.index_text``).

    Raises:
        StorageError: if the derived state is ahead of the ledger, or the file is read-only
            (and the state is behind).
        NotFoundError: if ``branch`` does not exist.
    """
    with ledger.reading() as db:
        # Most calls find nothing to do: answer them without taking the write lock.
        if current(ledger, db):
            return 0
    with ledger.write() as db:
        if not tables.installed(db):
            tables.install(db)
        names = (
            [b.name for b in ledger.store.branches()]
            if branch is None
            else [ledger.store.branch(branch).name]
        )
        n = 0
        for name in names:
            size = ledger.size(name)
            head = SqlState(db).head(name)
            if head > size:
                raise StorageError(
                    f"the derived memory state has folded {head} entries of branch {name!r} "
                    f"but the ledger has {size}: run memroot rebuild"
                )
            n += catch_up(db, ledger, name, size)
        tables.index_text(db)
        return n
