"""Fold entries already in the ledger into the memory model's tables, skipping refused ones.

The one fold every replay shares (the append hook's catch-up, strict reads' re-derivation,
verify's replay, rebuild): below both the hook (``projections.hook``) and the strict reads
(``projections.strict_rows``), so neither imports the other.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import apsw

from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind
from memroot.ledger.errors import RefusedError
from memroot.projections import tables
from memroot.projections.backends import MemState, SqlState
from memroot.projections.engine import Engine

__all__ = ["fold_entries"]

_RUN: Final = 1024


def fold_entries(
    db: apsw.Connection,
    entries: Iterable[Entry],
    *,
    fresh: bool,
    memory: MemState | None = None,
    after: Callable[[Sequence[Entry]], None] | None = None,
) -> int:
    """Fold entries that are already in the ledger, skipping (and recording) refused ones.

    With ``fresh`` the tables must be empty and the fast in-memory store (``memory``, by
    default a ``MemState`` of ``db``) folds the canonical branch; at the first entry of
    another branch it writes what it holds and the rest is folded through SQL (a branch reads
    its parent as of the fork, which needs the parent's versioned rows; branches must come
    after their parents, as ``Store.branches`` lists them). Otherwise each entry is folded
    through SQL inside a savepoint, so a refused one leaves no trace but its ``mem_skipped``
    row. ``after(entries)`` is called once entries are folded, with each in order (one
    entry, or a run of events folded together): another layer's replay in the same pass,
    which then sees the state of every entry up to the last given. Returns how many entries
    were folded. Run inside a write transaction.

    Raises:
        DecodeError: if a stored entry does not decode.
    """
    n = 0
    it = iter(entries)
    if fresh:
        mem = MemState(db) if memory is None else memory
        engine = Engine(mem)
        rest: Entry | None = None
        run: list[Entry] = []  # consecutive events, folded together (``Engine.fold_events``)
        for entry in it:
            if entry.branch != CANONICAL_BRANCH:
                rest = entry
                break
            n += 1
            if entry.kind is Kind.EVENT:
                run.append(entry)
                if len(run) >= _RUN:
                    _fold_run(engine, run, after)
                    run = []
                continue
            if run:
                _fold_run(engine, run, after)
                run = []
            engine.fold(entry)
            if after is not None:
                after((entry,))
        if run:
            _fold_run(engine, run, after)
        mem.finish()
        if rest is None:
            tables.index_text(db)
            return n
        tables.create_indexes(db)
        it = itertools.chain([rest], it)
    state = SqlState(db)
    engine = Engine(state)
    for entry in it:
        apply_or_skip(db, engine, state, entry)
        state.set_head(entry.branch, entry.seq + 1)
        n += 1
        if after is not None:
            after((entry,))
    if fresh:
        tables.index_text(db)
    return n


def apply_or_skip(
    db: apsw.Connection,
    engine: Engine,
    state: SqlState,
    entry: Entry,
    *,
    undo: Callable[[], None] | None = None,
) -> None:
    """Apply one committed entry in a savepoint; if the rules refuse it, record the skip.

    The one rule for an entry in the log that is not a valid operation (appended without the
    hooks): its ``mem_skipped`` row and nothing else, the same in every replay. Handlers
    check before they write; the savepoint makes sure of it. ``undo`` drops what the state
    holds in memory for the refused entry (none for a plain ``SqlState``).
    """
    db.execute("SAVEPOINT mem_fold")
    try:
        engine.apply(entry)
    except RefusedError as e:
        db.execute("ROLLBACK TO mem_fold")
        if undo is not None:
            undo()
        state.skip(entry.branch, entry.seq, entry.type, str(e))
    except BaseException:
        db.execute("ROLLBACK TO mem_fold")
        db.execute("RELEASE mem_fold")
        raise
    db.execute("RELEASE mem_fold")


def _fold_run(
    engine: Engine, run: list[Entry], after: Callable[[Sequence[Entry]], None] | None
) -> None:
    engine.fold_events(run)
    if after is not None:
        after(run)
