"""Before a cascade walks the dependency index: check the index against the log (issue 23.3).

A ``CASCADE`` (and a ``RESTORE`` with a cascade part) is planned by walking the dependency
index (``deps``: ``fz_edges``, ``fz_touches``, ``fz_items``, ``fz_roots``, ``fz_forks``), derived
tables anyone who can write the file can edit. Delete the edge that says an object was built
on a falsified one, and the walk stops short: the cascade is planned without it, its entry
lists less than the log gives, and the dependent object reads live for good. So before a
strict ledger plans or accepts a cascade, the index rows of the branch's view are compared
with the index the view's own entries give, re-derived from entries read strictly (each
proven in the signed tree): ``deps.fold`` of every operation and genesis, and the
re-snapshotted roots each ``CASCADE`` lists. Any row added, edited or deleted is refused with
``IntegrityError`` (step 9), so nothing is planned on it and nothing is written.

The re-derived index is kept per ledger (by its id) in memory, with the size and the hash of
the last entry read of each branch; the next check reads only the entries after it, once that
entry proves again with the same hash (the hash chain then fixes every entry before it), so a
check costs one strict read of the new entries and one comparison of the view's rows.

Not re-derived: the recomputed rule digests and preimage of a re-snapshotted root (they are the
cascade's own plan, which the hook recomputes and compares with the entry anyway), and the
rows of a ``CASCADE`` the falsification layer recorded as skipped (``fz_skipped``: a cascade
the rules refused records nothing; verify step 9 re-judges every skip).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import apsw

from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import IntegrityError, MemrootError
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType
from memroot.memory_root.falsify import deps
from memroot.memory_root.falsify._core import stored_lists
from memroot.memory_root.falsify.checked import view_levels
from memroot.memory_root.falsify.deps import RuleInfo

__all__ = ["check_index"]

_CASCADE: Final = OpType.CASCADE.value
# Each table the walk reads, the columns compared, and the condition that selects a view's rows.
_TABLES: Final = (
    ("fz_edges", "dep_kind, dep_id, kind, id, branch, seq"),
    ("fz_touches", "id, branch, seq, type"),
    ("fz_items", "kind, id, branch, seq, namespace"),
    ("fz_roots", "root, branch, seq, hbranch, lo, hi, parent, stateful, replaces"),
    ("fz_roots", "root, rules, preimage"),
)


@dataclass
class _Index:
    """The index re-derived from one ledger's entries, and how far each branch was read."""

    db: apsw.Connection
    read: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    unlisted: set[str] = field(default_factory=set)
    """v3 roots re-derived without their projection list (no stored record hashed to it):
    tried again at every check, as a rebuild may have written the records since."""


_DERIVED: dict[str, _Index] = {}
"""ledger id -> the index its entries give (``_Index``)."""


def _fresh() -> apsw.Connection:
    db = apsw.Connection(":memory:")
    with db:
        deps.install(db)
    return db


def _forget(db: apsw.Connection, branch: str) -> None:
    """Drop what the re-derived index holds of ``branch`` (to read it again from its start)."""
    for table in ("fz_edges", "fz_touches", "fz_items", "fz_roots", "fz_forks"):
        db.execute(f"DELETE FROM {table} WHERE branch = ?", (branch,))


def _skipped(stored: apsw.Connection, branch: str, seq: int) -> bool:
    try:
        row = stored.execute(
            "SELECT 1 FROM fz_skipped WHERE branch = ? AND seq = ?", (branch, seq)
        ).fetchone()
    except (apsw.SQLError, MemrootError):
        return False
    return row is not None


def _fold(index: _Index, stored: apsw.Connection, entry: Entry, rules: RuleInfo) -> None:
    """Add what one entry gives the index, as the falsification hook does.

    A v3 root's projection list is the stored one when it hashes to the entry's
    ``projections`` (the entries read here are committed: their records are stored).
    """
    if entry.kind is Kind.EVENT:
        return
    db = index.db
    unlisted = deps.fold(db, entry, rules, stored_lists(stored))
    if unlisted is not None:
        index.unlisted.add(unlisted)
    if entry.kind is not Kind.OP or entry.type != _CASCADE:
        return
    payload = entry.body.get("payload")
    listed: Any = payload.get("resnapshots") if isinstance(payload, dict) else None
    if type(listed) is not list or _skipped(stored, entry.branch, entry.seq):
        return
    deps.add_listed_replacements(db, entry, listed)


def _read(
    ledger: Ledger, index: _Index, stored: apsw.Connection, branch: str, rules: RuleInfo
) -> None:
    """Bring the re-derived index of ``branch`` up to the branch's stored size.

    Raises:
        IntegrityError: an entry fails its strict read.
    """
    size = ledger.size(branch)
    start = 0
    got = index.read.get(branch)
    if got is not None and 0 < got[0] <= size:
        seen, last = got
        if ledger.read_many([seen - 1], branch, links=False)[seen - 1].entry.hash == last:
            start = seen
    if start == 0:
        _forget(index.db, branch)
        index.read.pop(branch, None)
    if start >= size:
        return
    last_hash = b""
    with index.db:
        for e in ledger.entries(start, size, branch):
            _fold(index, stored, e, rules)
            last_hash = e.hash
    index.read[branch] = (size, last_hash)


def _rows(
    db: apsw.Connection, table: str, cols: str, cond: str, params: Sequence[Any]
) -> list[tuple[Any, ...]]:
    extra = " AND replaces IS NULL" if cols.startswith("root, rules") else ""
    return sorted(
        tuple(r)
        for r in db.execute(f"SELECT {cols} FROM {table} WHERE {cond}{extra}", tuple(params))
    )


def check_index(ledger: Ledger, stored: apsw.Connection, branch: str, rules: RuleInfo) -> None:
    """Check, on a strict ledger, the dependency index a cascade on ``branch`` walks.

    ``stored`` holds the falsification layer's tables (caught up to the branch's head);
    ``rules`` says what each projection reads (the core's ``rules``). Run inside a
    transaction of ``ledger`` that holds no rows of entries not yet stored (a ``CASCADE`` is
    the first entry of its append). A non-strict ledger, or one replaying, is not checked.

    Raises:
        IntegrityError: step 9, naming the table, when a row of the view is not what the
            view's entries give (an edge, a touch, an item, a root or a fork record added,
            edited or deleted); or the step of an entry that fails its strict read.
    """
    if ledger.replaying or not ledger.strict:
        return
    levels = view_levels(ledger, branch)
    index = _DERIVED.get(ledger.ledger_id)
    if index is None:
        index = _DERIVED[ledger.ledger_id] = _Index(_fresh())
    try:
        for b, _ in reversed(levels):
            _read(ledger, index, stored, b, rules)
    except BaseException:
        _DERIVED.pop(ledger.ledger_id, None)  # half read: the next check starts again
        raise
    if index.unlisted:
        lists = stored_lists(stored)
        with index.db:
            index.unlisted = {
                r
                for r in index.unlisted
                if deps.root_row(index.db, r) is not None
                and not deps.attach_list(index.db, r, rules, lists)
            }
    view = tuple(levels)
    cond, params = deps.visible_condition(view)
    forks = [b for b, _ in levels]
    marks = ",".join("?" * len(forks))
    checks = [*_TABLES, ("fz_forks", "branch, parent, fork_seq")]
    for table, cols in checks:
        if table == "fz_forks":
            where, args = f"branch IN ({marks})", forks
        else:
            where, args = cond, params
        if _rows(stored, table, cols, where, args) != _rows(index.db, table, cols, where, args):
            raise IntegrityError(
                f"step 9: the dependency index ({table}) of branch {branch} is not what the "
                "ledger's own entries give (derived state edited: a dependency added, edited "
                "or deleted); nothing was written: run `memroot verify`, or `memroot rebuild` "
                "to re-derive it",
                branch=branch,
                step=9,
            )
