"""``memroot verify`` step 9 and ``memroot rebuild`` for the saver's and the store's tables.

The lookup tables (``lg_checkpoints``, ``lg_writes``, ``lg_store``) are derived from the
entries by one fold (``_tables``), up to the position each set records in ``lg_heads``.
``LangGraphTablesCheck`` folds the entries the audit reads the same way into a private
in-memory database and compares the result with the file's tables, row by row: a row
deleted (a thread rolled back to an older checkpoint), moved to another entry, or added
behind the ledger's back is a violation naming the table. ``LangGraphTablesRebuild``
re-derives them from the entries.

No LangGraph import: a host without the ``langgraph`` extra still verifies and rebuilds a
ledger a saver wrote.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import apsw

from memroot.integrations.langgraph import _index
from memroot.integrations.langgraph._tables import SAVER, STORE, TableSet
from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport, Finding
from memroot.ledger.vocab import OpType

__all__ = ["LangGraphTablesCheck", "LangGraphTablesRebuild"]

STEP: Final = 9
_SETS: Final = (SAVER, STORE)
_HEADS_TABLE: Final = "lg_heads"


def _relevant(entry: Entry) -> bool:
    """Whether an entry folds into some set: an integration event or a ``TOMBSTONE``."""
    if entry.kind is Kind.OP:
        return entry.type == OpType.TOMBSTONE.value
    return _index.event_type(entry) in SAVER.types | STORE.types


def _content(raw: Any) -> dict[str, Any] | None:
    """Parse stored content for the fold (None: erased); ValueError when it is no object."""
    if raw is None:
        return None
    value = json.loads(bytes(raw))
    if not isinstance(value, dict):
        raise ValueError("the content is not a JSON object")
    return value


def _fold(
    db: apsw.Connection,
    t: TableSet,
    entries: Sequence[tuple[Entry, Any]],
    upto: int,
    events: dict[str, tuple[str, int]],
) -> None:
    """Fold ``(entry, stored content)`` pairs with ``seq < upto`` into ``t``'s tables.

    ``events``: where each integration event folded so far is (filled in as they come).
    """
    for entry, raw in entries:
        if entry.seq >= upto:
            break
        if entry.kind is Kind.OP:
            t.fold(db, entry, None, events.get)
        elif _index.event_type(entry) in t.types:
            events[str(entry.body["id"])] = (entry.branch, entry.seq)
            content = _content(raw)
            if content is not None:
                t.fold(db, entry, content, events.get)


class LangGraphTablesCheck:
    """Verify step 9 for the LangGraph saver's and store's lookup tables.

    Needs the ledger file (a bundle has none of these tables); with ``restricted``
    (``verify --branch``) nothing is checked. A ledger no saver or store ever opened (no
    ``lg_heads``) has nothing to check.
    """

    steps: tuple[int, ...] = (STEP,)

    def __init__(
        self, path: Path | None = None, *, restricted: bool = False, ledger: Ledger | None = None
    ) -> None:
        """Check the tables of the ledger file at ``path`` (None: nothing to check).

        ``ledger``: the open ledger whose read transaction the audit runs in, read instead
        of opening ``path``, and left open.
        """
        self.shared = ledger
        if ledger is not None:
            path = ledger.path
        self.path = None if path is None or restricted else Path(path)
        self._seen: dict[str, list[Entry]] = {}

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """Remember an entry that folds into the tables (its content is read at the end)."""
        if self.path is not None and _relevant(entry):
            self._seen.setdefault(branch, []).append(entry)

    @contextlib.contextmanager
    def _stored(self) -> Iterator[apsw.Connection]:
        if self.shared is not None:
            yield self.shared.derived.db
            return
        assert self.path is not None
        db = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            with db:  # one read transaction: one snapshot of every table
                yield db
        finally:
            db.close()

    def finish(self, report: AuditReport) -> None:
        """Fold what was fed into a private copy; report each table that differs from it."""
        if self.path is None:
            return
        with self._stored() as stored:
            names = {str(n) for (n,) in stored.execute("SELECT name FROM sqlite_master")}
            if _HEADS_TABLE not in names:
                return
            heads = {
                (str(n), str(b)): int(s)
                for n, b, s in stored.execute(f"SELECT name, branch, seq FROM {_HEADS_TABLE}")
            }
            numbers = {
                str(name): int(no) for no, name in stored.execute("SELECT no, name FROM branches")
            }
            replayed = apsw.Connection(":memory:")
            try:
                self._compare(stored, replayed, names, heads, numbers, report)
            finally:
                replayed.close()

    def _compare(
        self,
        stored: apsw.Connection,
        replayed: apsw.Connection,
        names: set[str],
        heads: dict[tuple[str, str], int],
        numbers: dict[str, int],
        report: AuditReport,
    ) -> None:
        for t in _SETS:
            if not any(n == t.name for n, _ in heads):
                continue
            t.install(replayed)
            events: dict[str, tuple[str, int]] = {}
            for (name, branch), upto in heads.items():
                if name != t.name:
                    continue
                no = numbers.get(branch)
                if no is None or upto > _branch_size(stored, branch):
                    report.add(
                        Finding(
                            STEP,
                            f"{_HEADS_TABLE} says the {t.name}'s tables folded {upto} entries "
                            f"of branch {branch!r}, which has fewer",
                            branch,
                        )
                    )
                    continue
                pairs = [
                    (e, _stored_content(stored, no, e.seq)) for e in self._seen.get(branch, ())
                ]
                try:
                    with replayed:
                        _fold(replayed, t, pairs, upto, events)
                except (ValueError, KeyError, TypeError, apsw.Error, IntegrityError) as e:
                    report.add(
                        Finding(STEP, f"the {t.name}'s entries cannot be folded: {e}", branch)
                    )
                    return
            for table in t.tables:
                if table not in names:
                    report.add(
                        Finding(STEP, f"{table} (the LangGraph {t.name}'s index) is missing")
                    )
                    continue
                have = {tuple(r) for r in stored.execute(f"SELECT * FROM {table}")}
                want = {tuple(r) for r in replayed.execute(f"SELECT * FROM {table}")}
                if have == want:
                    continue
                extra = sorted(have - want, key=repr)
                missing = sorted(want - have, key=repr)
                report.add(
                    Finding(
                        STEP,
                        f"{table} (the LangGraph {t.name}'s lookup table) differs from a replay "
                        f"of the entries: {len(extra)} stored row(s) no entry made, "
                        f"{len(missing)} replayed row(s) missing (edited; `memroot rebuild` "
                        "re-derives it)",
                        expected=repr(missing[0]) if missing else None,
                        actual=repr(extra[0]) if extra else None,
                    )
                )


def _branch_size(db: apsw.Connection, branch: str) -> int:
    row = db.execute("SELECT size FROM branches WHERE name = ?", (branch,)).fetchone()
    return 0 if row is None else int(row[0])


def _stored_content(db: apsw.Connection, no: int, seq: int) -> Any:
    row = db.execute("SELECT content FROM entries WHERE k = ?", (no << 40 | seq,)).fetchone()
    return None if row is None else row[0]


class LangGraphTablesRebuild:
    """The saver's and the store's tables re-derived by ``memroot rebuild``.

    A ``memroot.projections.replay.Refold``: at ``start`` it empties the tables of every set
    a saver or store ever kept in the file (those named in ``lg_heads``), and at ``finish``
    folds every entry of every branch into them from the stored rows, recording each
    branch's size as folded. Content that is not a JSON object is skipped and counted
    (``memroot verify`` reports it, step 4 or 9).
    """

    def __init__(self, ledger: Ledger) -> None:
        """Re-derive into ``ledger``'s derived state (the file, or a PostgreSQL cache)."""
        self.ledger = ledger
        self.entries = 0
        self.skipped = 0
        self._db: apsw.Connection | None = None
        self._sets: list[TableSet] = []

    def start(self, db: apsw.Connection) -> None:
        """Empty the tables of every set the file keeps (none: nothing to do)."""
        self._db = db
        try:
            names = {str(n) for (n,) in db.execute(f"SELECT DISTINCT name FROM {_HEADS_TABLE}")}
        except apsw.SQLError:
            return  # no saver or store ever opened this ledger
        self._sets = [t for t in _SETS if t.name in names]
        for t in self._sets:
            t.install(db)
            for table in t.tables:
                db.execute(f"DELETE FROM {table}")
            db.execute(f"DELETE FROM {_HEADS_TABLE} WHERE name = ?", (t.name,))

    def feed(self, entries: Sequence[Entry]) -> None:
        """Take nothing here: ``finish`` reads the rows, content included."""

    def finish(self) -> None:
        """Fold every branch's entries into the emptied tables; record how far."""
        db = self._db
        if db is None or not self._sets:
            return
        store = self.ledger.store
        events: dict[str, dict[str, tuple[str, int]]] = {t.name: {} for t in self._sets}
        for b in store.branches():
            pairs = []
            for r in store.iter_entry_rows(b.no, 0, b.size):
                entry = Entry.from_bytes(bytes(r.data))
                if _relevant(entry):
                    pairs.append((entry, r.content))
            for t in self._sets:
                for entry, raw in pairs:
                    try:
                        with db:
                            _fold(db, t, [(entry, raw)], b.size, events[t.name])
                    except (ValueError, KeyError, TypeError, apsw.Error, IntegrityError):
                        self.skipped += 1
                db.execute(
                    f"INSERT INTO {_HEADS_TABLE}(name, branch, seq) VALUES (?, ?, ?)",
                    (t.name, b.name, b.size),
                )
            self.entries += len(pairs)
