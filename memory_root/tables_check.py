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
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final, cast

import apsw

from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import MemrootError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport, Finding
from memroot.memory_root.branches import BranchRegistry
from memroot.projections.anchors import ConversationTree
from memroot.projections.gitctx import GitContextHook

__all__ = ["LayerTablesCheck", "rebuild_layer_tables"]

STEP: Final = 9
EXACT_TABLES: Final = ("branch_meta", "branch_merges", "branch_policy", "git_context")
"""Compared row by row."""
DIGESTED_TABLE: Final = "conv_parents"
"""Compared by an order-free digest of its rows (one per event)."""
_MOD: Final = 1 << 256
_CHUNK: Final = 4096
_WHAT: Final = {
    "branch_meta": "the branch registry",
    "branch_merges": "the branch registry's merges",
    "branch_policy": "the branch expiry policies",
    "git_context": "the git index",
    DIGESTED_TABLE: "the conversation tree",
}


def rebuild_layer_tables(ledger: Ledger) -> int:
    """Empty the branch registry, conversation tree and git index and replay them.

    One transaction; returns how many entries were folded. What ``memroot rebuild`` does for
    these layers (the memory model, roots and states have their own rebuilds); on a
    PostgreSQL ledger, in this host's cache.

    Raises:
        StorageError: if a hook refuses a committed entry (nothing is changed then).
    """
    hooks = (BranchRegistry(), ConversationTree(), GitContextHook())
    with ledger.write() as db:
        for hook in hooks:
            hook.install(db)
        for table in (*EXACT_TABLES, DIGESTED_TABLE):
            db.execute(f"DELETE FROM {table}")
        return ledger.replay_hooks(hooks=hooks)


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
            if "context" not in entry.body:
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
        digest, count = _row_digest(ConversationTree.rows(self._events), self._key)
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
