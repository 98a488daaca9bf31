"""Verify step 9 for the layers' tables no other check replays.

The branch registry (``branch_meta``, ``branch_merges``, ``branch_policy``), the conversation
tree (``conv_parents``) and the git index (``git_context``) are derived from the entries like
the memory model, and reads trust them (``branch list``, merges, reads at an anchor, git
affinity). ``LayerTablesCheck`` folds every entry the audit decodes through the hooks that
wrote them (``BranchRegistry``, ``GitContextHook``) into a private in-memory database and
compares the result with what the file stores: a row changed, added or removed behind the
ledger's back is a violation naming the table.

``conv_parents`` holds a row per event, so it is not kept: each event's row
(``ConversationTree.rows``) is folded into an order-free digest, the count and the sum modulo
2^256 of each row's BLAKE2b-256 under a key drawn at random for this check, compared with the
same digest of the stored table (event ids are unique in a ledger, so the rows are a set).
The key matters: with a known hash, a forger could pick rows whose sum balances the change
(a generalized-birthday search), which a key unknown until the audit runs rules out. About
0.6 µs an event on each side. The other tables are small and compared row by row.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final, cast

import apsw

from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import MemrootError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport, Finding
from memroot.memory_root.branches import BranchRegistry
from memroot.projections.anchors import ConversationTree
from memroot.projections.engine import event_rows
from memroot.projections.gitctx import GitContextHook

__all__ = ["LayerTablesCheck", "LayerTablesRebuild"]

STEP: Final = 9
EXACT_TABLES: Final = ("branch_meta", "branch_merges", "branch_policy", "git_context")
"""Compared row by row."""
DIGESTED_TABLE: Final = "conv_parents"
"""Compared by an order-free digest of its rows (one per event)."""
_MOD: Final = 1 << 256
_CHUNK: Final = 4096
_PARENTS_INS: Final = "INSERT OR IGNORE INTO conv_parents VALUES(?, ?)"
_WHAT: Final = {
    "branch_meta": "the branch registry",
    "branch_merges": "the branch registry's merges",
    "branch_policy": "the branch expiry policies",
    "git_context": "the git index",
    DIGESTED_TABLE: "the conversation tree",
}


class LayerTablesRebuild:
    """The branch registry, conversation tree and git index replayed by ``memroot rebuild``.

    A ``memroot.projections.replay.Refold``: fed the entries of the memory model's rebuild
    pass (one read of the log), it empties the three layers' tables at ``start`` and folds
    each entry through their hooks as committed entries (``Ledger.folding_committed``:
    the order across branches is not the live one); the entries of a branch past those fed
    (an unsigned tail the strict read does not yield) are read from their rows at the
    branch's end. An entry a hook refuses (one appended without the hooks) is skipped and
    counted, as the memory model's rebuild does; verify step 9 reports it.

    The events' ``conv_parents`` rows are held across runs and written with one statement
    every ``_CHUNK`` rows, before any entry goes through the other hooks and at each
    branch's end (nothing reads the table during a rebuild; ``INSERT OR IGNORE`` in the
    order the events came keeps the first row of a repeated id, as a statement per run did).
    """

    def __init__(self, ledger: Ledger) -> None:
        """Replay into ``ledger``'s derived state (the file, or a PostgreSQL ledger's cache)."""
        self.ledger = ledger
        self.entries = 0
        self.skipped = 0
        self._conv = ConversationTree()
        self._hooks = (BranchRegistry(), GitContextHook())
        self._sizes = {b.name: b.size for b in ledger.store.branches()}
        self._branch: str | None = None
        self._next = 0
        self._ended: set[str] = set()
        self._db: apsw.Connection | None = None
        self._parents: list[tuple[str, str | None]] = []  # held, not yet written

    def start(self, db: apsw.Connection) -> None:
        """Install the three layers' tables if missing and empty them."""
        for hook in (self._conv, *self._hooks):
            hook.install(db)
        for table in (*EXACT_TABLES, DIGESTED_TABLE):
            db.execute(f"DELETE FROM {table}")
        self._db = db

    def feed(self, entries: Sequence[Entry]) -> None:
        """Fold entries the memory model folded: one, or a run of events of one branch."""
        if not entries:
            return
        if entries[0].branch != self._branch:
            self._end_branch()
            self._branch, self._next = entries[0].branch, 0
        self._fold(entries)
        self._next = entries[-1].seq + 1

    def _fold(self, entries: Sequence[Entry]) -> None:
        db, ledger = self._db, self.ledger
        assert db is not None
        with ledger.folding_committed():
            native = event_rows(entries) if entries[0].kind is Kind.EVENT else None
            recorded: Sequence[Entry]
            if native is not None:  # a run of events: their rows, and those with a context
                self._parents += native.parents
                recorded = [entries[i] for i in native.contexts]
            else:
                self._parents += ConversationTree.rows(e for e in entries if e.kind is Kind.EVENT)
                recorded = [e for e in entries if _recorded(e)]
            if recorded or len(self._parents) >= _CHUNK:
                self._write_parents()
            for entry in recorded:
                try:
                    with db:  # a savepoint: a refused entry leaves nothing behind
                        for hook in self._hooks:
                            hook.apply(db, ledger, entry, None)
                except (MemrootError, apsw.Error):
                    self.skipped += 1
        self.entries += len(entries)

    def _write_parents(self) -> None:
        """Write the ``conv_parents`` rows held, in the order the events came."""
        if self._parents:
            assert self._db is not None
            self._db.executemany(_PARENTS_INS, self._parents)
            self._parents.clear()

    def _end_branch(self) -> None:
        branch, size = self._branch, self._sizes.get(self._branch or "", 0)
        if branch is not None and self._next < size:
            store = self.ledger.store
            rows = store.iter_entry_rows(store.branch(branch).no, self._next, size)
            self._fold([Entry.from_bytes(bytes(r.data)) for r in rows])
        self._write_parents()
        if branch is not None:
            self._ended.add(branch)
        self._branch = None

    def finish(self) -> None:
        """Fold the unsigned tail of the last branch and of any branch none was fed of."""
        self._end_branch()
        for name in self._sizes:
            if name not in self._ended:
                self._branch, self._next = name, 0
                self._end_branch()


def _recorded(entry: Entry) -> bool:
    """Whether the registry's or the git index's hook records anything of ``entry``.

    Folding committed entries: a BRANCH_* operation, or an entry with a context (every other
    entry they only check against rules skipped then, ``Ledger.replaying``).
    """
    return "context" in entry.body or (entry.kind is Kind.OP and entry.type.startswith("BRANCH_"))


class _Committed:
    """The ledger as the replayed hooks see it: entries already committed (``replaying``).

    Folding committed entries, the hooks read nothing of the ledger but ``replaying`` (their
    rules that read it, the branch limits, are skipped then); any other read is an
    ``AttributeError``, reported as a finding rather than read from a file being audited.
    """

    replaying: Final = True


def _row_digest(rows: Iterable[tuple[str, str | None]], key: bytes) -> tuple[int, int]:
    """Return (sum of the rows' keyed BLAKE2b-256 modulo 2^256, count) of ``(id, parent)`` rows.

    A row is hashed as the UTF-8 of ``id + U+0000 + parent``, a NULL parent as U+0001.
    """
    mac, as_int = hashlib.blake2b, int.from_bytes
    total = count = 0
    for i, parent in rows:
        text = i + "\x00" + ("\x01" if parent is None else parent)
        total += as_int(mac(text.encode("utf-8"), key=key).digest(), "big")
        count += 1
    return total % _MOD, count


class LayerTablesCheck:
    """Verify step 9 for the branch registry, the conversation tree and the git index.

    Needs the ledger file (a bundle has no derived state) and every branch: with
    ``restricted`` (``verify --branch``) nothing is checked, since the registry and the
    conversation tree span the branches.
    """

    steps: tuple[int, ...] = (STEP,)

    def __init__(
        self, path: Path | None = None, *, restricted: bool = False, ledger: Ledger | None = None
    ) -> None:
        """Check the stored tables of the ledger file at ``path`` (None: nothing to check).

        ``ledger``: the open ledger whose read transaction the audit runs in, read instead of
        opening ``path`` (one snapshot for every check) and left open.
        """
        self.shared = ledger
        if ledger is not None:
            path = ledger.path
        self.path = None if path is None or restricted else Path(path)
        self._db: apsw.Connection | None = None
        self._hooks = (BranchRegistry(), GitContextHook())
        self._key = os.urandom(32)
        self._events: list[Entry] = []  # not yet in the digest
        self._digest = 0
        self._count = 0
        self._broken: str | None = None  # why the replay stopped, once it did

    def _replay_db(self) -> apsw.Connection:
        if self._db is None:
            self._db = apsw.Connection(":memory:")
            for hook in self._hooks:
                hook.install(self._db)
        return self._db

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """Fold one decoded entry.

        An event's conversation row goes into the digest; an operation, or an event with a
        git context, through the registry's and git index's hooks (replaying, they record
        nothing of any other event).
        """
        if self.path is None or self._broken is not None:
            return
        if entry.kind is Kind.EVENT:
            self._events.append(entry)
            if len(self._events) >= _CHUNK:
                self._fold_events()
        if not _recorded(entry):
            return
        db = self._replay_db()
        try:
            for hook in self._hooks:
                hook.apply(db, cast(Ledger, _Committed()), entry, None)
        except (MemrootError, apsw.Error, AttributeError, KeyError, TypeError) as e:
            self._broken = f"entry {entry.seq} of branch {entry.branch!r} cannot be replayed"
            report.add(
                Finding(
                    STEP,
                    f"{entry.type} cannot be replayed into the branch registry or git index: {e}",
                    entry.branch,
                    entry.seq,
                )
            )

    def _fold_events(self) -> None:
        native = event_rows(self._events)
        rows = ConversationTree.rows(self._events) if native is None else native.parents
        digest, count = _row_digest(rows, self._key)
        self._digest, self._count = (self._digest + digest) % _MOD, self._count + count
        self._events.clear()

    def finish(self, report: AuditReport) -> None:
        """Compare the replayed tables with the stored ones; report each that differs."""
        if self.path is None or self._broken is not None:
            return
        self._fold_events()
        replayed = self._replay_db()
        with self._stored() as stored:
            have = {n for (n,) in stored.execute("SELECT name FROM sqlite_master")}
            for table in (*EXACT_TABLES, DIGESTED_TABLE):
                if table not in have:
                    report.add(
                        Finding(STEP, f"{table} ({_WHAT[table]}) is missing from the ledger file")
                    )
                elif table == DIGESTED_TABLE:
                    self._compare_digest(stored, report)
                else:
                    _compare_rows(table, stored, replayed, report)
        replayed.close()
        self._db = None

    @contextlib.contextmanager
    def _stored(self) -> Iterator[apsw.Connection]:
        if self.shared is not None:
            yield self.shared.derived.db
            return
        db = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            with db:  # one read transaction: one snapshot of every table
                yield db
        finally:
            db.close()

    def _compare_digest(self, stored: apsw.Connection, report: AuditReport) -> None:
        rows = stored.execute(f"SELECT id, parent FROM {DIGESTED_TABLE}")
        digest, count = _row_digest(rows, self._key)
        if (digest, count) != (self._digest, self._count):
            report.add(
                Finding(
                    STEP,
                    f"{DIGESTED_TABLE} ({_WHAT[DIGESTED_TABLE]}) differs from a replay of the "
                    "events: a parent link was changed, added or removed",
                    expected=f"{self._count} rows",
                    actual=f"{count} rows" + ("" if count != self._count else ", other links"),
                )
            )


def _compare_rows(
    table: str, stored: apsw.Connection, replayed: apsw.Connection, report: AuditReport
) -> None:
    """Report the first row where ``table`` differs between the two databases."""
    columns = [r[1] for r in replayed.execute(f"PRAGMA table_info({table})")]
    order = ", ".join(columns)
    try:
        have = stored.execute(f"SELECT {order} FROM {table} ORDER BY {order}").fetchall()
    except apsw.Error as e:
        report.add(Finding(STEP, f"{table} ({_WHAT[table]}) is unreadable: {e}"))
        return
    want = replayed.execute(f"SELECT {order} FROM {table} ORDER BY {order}").fetchall()
    if have == want:
        return
    extra = sorted(set(have) - set(want), key=repr)
    missing = sorted(set(want) - set(have), key=repr)
    report.add(
        Finding(
            STEP,
            f"{table} ({_WHAT[table]}) differs from a replay of the entries: "
            f"{len(extra)} stored row(s) no entry made, {len(missing)} replayed row(s) missing",
            expected=repr(missing[0]) if missing else None,
            actual=repr(extra[0]) if extra else None,
        )
    )
