"""The fold-state cache of re-snapshots (``fz_folds``; internal).

A cascade re-snapshots a root by folding its branch without the falsified inputs
(``cascade.resnapshot``). To avoid folding from the genesis every time, ``keep_fold_states``
keeps one root's projection fold states every ``FOLD_SPACING`` entries, and
``fold_checkpoint_of`` finds the newest kept states (or the newest root's own) before the
first falsified input. A cache: nothing is verified against it, and a rebuild empties it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import apsw

from memroot.memory_root.falsify.cascade import FoldCheckpoint

__all__ = ["FOLD_SPACING", "fold_checkpoint_of", "install", "keep_fold_states"]

FOLD_SPACING: Final = 10_000
"""A root's fold states are kept (``fz_folds``) when its high-water is the first past a
multiple of this many entries of its branch: a cascade's re-snapshots then fold at most
about this many entries before the first falsified input, instead of the whole branch."""

_FOLDS_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS fz_folds(
    root BLOB NOT NULL, branch TEXT NOT NULL, hi INTEGER NOT NULL, rule BLOB NOT NULL,
    state BLOB NOT NULL, PRIMARY KEY(branch, hi, rule)) STRICT, WITHOUT ROWID;
"""


def install(db: apsw.Connection) -> None:
    """Create the fold-state cache table if missing."""
    db.execute(_FOLDS_SCHEMA)


def keep_fold_states(db: apsw.Connection, branch: str) -> None:
    """Copy the fold states of ``branch``'s newest root before a new root supersedes it.

    The memory_root layer keeps fold states for the newest root of each branch only; this
    cache keeps one root's states per ``FOLD_SPACING`` entries. Call for each new
    ``SNAPSHOT`` entry, before ``RootsHook`` stores it. A cache: nothing is verified
    against it, and a rebuild empties it (cascades then fold from the genesis).
    """
    try:
        row = db.execute(
            "SELECT root, hw_seq FROM memory_roots WHERE branch = ? ORDER BY seq DESC LIMIT 1",
            (branch,),
        ).fetchone()
    except apsw.SQLError:
        return  # no memory_root layer in this file
    if row is None:
        return
    root, hi = bytes(row[0]), int(row[1])
    last = db.execute("SELECT max(hi) FROM fz_folds WHERE branch = ?", (branch,)).fetchall()[0][0]
    if last is not None and int(last) // FOLD_SPACING >= hi // FOLD_SPACING:
        return
    db.execute(
        "INSERT OR IGNORE INTO fz_folds SELECT root, ?, ?, rule, fold_state "
        "FROM memory_root_summaries WHERE root = ? AND fold_state IS NOT NULL",
        (branch, hi, root),
    )


def fold_checkpoint_of(db: apsw.Connection) -> FoldCheckpoint:
    """Return the checkpoint finder over ``fz_folds`` and the newest roots' own states."""

    def find(
        branch: str, before: int, rules: Sequence[bytes]
    ) -> tuple[int, dict[bytes, bytes]] | None:
        want = set(rules)
        candidates: list[tuple[int, dict[bytes, bytes]]] = []
        try:
            newest: list[Any] = db.execute(
                "SELECT r.hw_seq, s.rule, s.fold_state FROM memory_roots r "
                "JOIN memory_root_summaries s ON s.root = r.root WHERE r.branch = ? AND "
                "s.fold_state IS NOT NULL AND r.hw_seq < ? ORDER BY r.seq DESC",
                (branch, before),
            ).fetchall()
        except apsw.SQLError:
            return None
        if newest:
            hi = int(newest[0][0])
            candidates.append((hi, {bytes(r): bytes(st) for h, r, st in newest if int(h) == hi}))
        kept = db.execute(
            "SELECT hi FROM fz_folds WHERE branch = ? AND hi < ? ORDER BY hi DESC LIMIT 1",
            (branch, before),
        ).fetchone()
        if kept is not None:
            hi = int(kept[0])
            candidates.append(
                (
                    hi,
                    {
                        bytes(r): bytes(st)
                        for r, st in db.execute(
                            "SELECT rule, state FROM fz_folds WHERE branch = ? AND hi = ?",
                            (branch, hi),
                        )
                    },
                )
            )
        for hi, states in sorted(candidates, key=lambda c: -c[0]):
            if want <= set(states):
                return hi, states
        return None

    return find
