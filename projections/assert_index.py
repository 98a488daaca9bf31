"""What each object's ``ASSERT`` says, from the log itself: its words and its type.

A strict query with ``text=`` is answered from ``mem_fts``, the full-text index of the
derived tables, and one with ``types=`` from the ``type`` column of ``mem_objects``; anyone
who can write the file can edit either: take an object's words out of the index (or edit its
stored value before it is indexed), or change its stored type, and the query drops the
object without a word. The read gate (``projections.checked``) therefore asks this module
which objects the words or types select, from what it can trust: the ``value`` and
``object_type`` of each ``ASSERT`` entry of the log (an object's value and type are its
``ASSERT``'s and never change after), each entry read strictly (proven in the signed tree).
Values are indexed by SQLite's own FTS5 with the same table definition and the same
``MATCH`` text as ``mem_fts`` (so the words mean what they mean to the index the query used).

The index lives in a private in-memory database per ledger (``ledger_id``) and branch read,
and is fed only the entries appended since the last read: the branch's entry it stopped at is
proven again in the signed tree now and must have the same hash (the hash chain then vouches
for every entry before it, as ``memory_root.falsify.checked._state_ops`` does), else the
branch is read again from its start. So after another connection's commit a text query reads
what was appended, not the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import apsw

from memroot.ledger.entries import Entry, Kind
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType

__all__ = ["selected"]

_SPEC: Final = "fts5(value, content='', detail=none)"
"""The same table as ``projections.tables._FTS_SPEC`` (tests/unit assert they are equal)."""


class _Branch:
    """How far one branch's entries were read: its size then and the last entry's hash."""

    __slots__ = ("last", "size")

    def __init__(self) -> None:
        self.size = 0
        self.last = b""


class _Index:
    """The ``ASSERT`` values of one ledger's branches read so far, in a private FTS5 table."""

    __slots__ = ("branches", "count", "db", "ids", "memo", "types")

    def __init__(self) -> None:
        self.db = apsw.Connection(":memory:")
        self.db.execute(f"CREATE VIRTUAL TABLE words USING {_SPEC}")
        self.ids: list[str] = []  # rowid - 1 -> object id
        self.branches: dict[str, _Branch] = {}
        self.count = 0  # ASSERTs read
        self.types: dict[str, set[str]] = {}  # object_type -> object ids
        self.memo: dict[tuple[str | None, tuple[str, ...]], tuple[int, frozenset[str]]] = {}
        """(words, types) -> (how many ASSERTs were read then, the ids they selected)."""

    def add(self, entries: Iterable[Entry]) -> None:
        rows = []
        for e in entries:
            if e.kind is not Kind.OP or e.type != OpType.ASSERT.value:
                continue
            payload = e.body.get("payload")
            value = payload.get("value") if isinstance(payload, dict) else None
            target, op_id = e.body.get("target_id"), e.body.get("id")
            object_id = target if isinstance(target, str) else op_id
            if not isinstance(object_id, str):
                continue
            self.count += 1
            kind = payload.get("object_type") if isinstance(payload, dict) else None
            if isinstance(kind, str):
                self.types.setdefault(kind, set()).add(object_id)
            if isinstance(value, str):
                self.ids.append(object_id)
                rows.append((len(self.ids), value))
        self.db.executemany("INSERT INTO words(rowid, value) VALUES (?, ?)", rows)


_MEMO: Final = 256
"""At most this many (words, types) answers are kept per ledger."""

_INDEXES: dict[str, _Index] = {}
"""ledger id -> the index of its branches' ``ASSERT`` values read so far."""


def _read_to_head(ledger: Ledger, index: _Index, branch: str) -> None:
    """Feed ``index`` the branch's entries it has not read.

    Raises:
        _Restart: the entry it stopped at is not in this log any more (a rolled-back or
            other copy of the ledger): the index is dropped, to be built again.
    """
    size = ledger.size(branch)
    kept = index.branches.get(branch)
    if kept is not None and not (
        kept.size <= size
        and ledger.read_many([kept.size - 1], branch, links=False)[kept.size - 1].entry.hash
        == kept.last
    ):
        _INDEXES.pop(ledger.ledger_id, None)
        raise _Restart
    start = 0 if kept is None else kept.size
    if start >= size:
        return
    fresh = list(ledger.entries(start, size, branch))  # all proven before any is kept
    index.add(fresh)
    mark = index.branches.setdefault(branch, _Branch())
    mark.size, mark.last = size, fresh[-1].hash


class _Restart(Exception):
    """The kept index does not describe this log any more: build it again."""


def _current(ledger: Ledger, branches: Iterable[str]) -> _Index:
    """Return the ledger's index, fed every entry of ``branches`` up to their heads now."""
    wanted = list(dict.fromkeys(branches))
    try:
        index = _INDEXES.setdefault(ledger.ledger_id, _Index())
        for b in wanted:
            _read_to_head(ledger, index, b)
    except _Restart:
        index = _INDEXES.setdefault(ledger.ledger_id, _Index())  # a new one: nothing kept
        for b in wanted:
            _read_to_head(ledger, index, b)
    return index


def selected(
    ledger: Ledger, branches: Iterable[str], fts: str | None, types: tuple[str, ...]
) -> frozenset[str]:
    """Return the ids of the objects whose ``ASSERT`` matches ``fts`` and has one of ``types``.

    ``fts``: the match text the query gave ``mem_fts`` (``query._fts_query``), or None for
    any value; ``types``: the object types (empty: any). ``branches``: the branches whose
    entries the query's view sees; objects of others are not excluded (the caller
    intersects with the view). The answer is kept until an ``ASSERT`` is read. Run inside a
    transaction of a strict ``ledger``.

    Raises:
        IntegrityError: an entry read fails its strict read.
    """
    index = _current(ledger, branches)
    key = (fts, types)
    kept = index.memo.get(key)
    if kept is not None and kept[0] == index.count:
        return kept[1]
    ids: set[str] | None = None
    if fts is not None:
        ids = {
            index.ids[int(r) - 1]
            for (r,) in index.db.execute("SELECT rowid FROM words WHERE words MATCH ?", (fts,))
        }
    if types:
        typed = set().union(*(index.types.get(t, set()) for t in types))
        ids = typed if ids is None else ids & typed
    out = frozenset(ids or ())
    if len(index.memo) >= _MEMO:
        index.memo.clear()
    index.memo[key] = (index.count, out)
    return out
