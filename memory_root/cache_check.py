"""A PostgreSQL host's cache checked against the memory map at every v2 root it applies.

On a PostgreSQL ledger each host keeps the derived tables in a local SQLite file (the cache,
``ledger.backends.pg.DerivedCache``) and brings it up to date by replaying the entries other
hosts committed (``ledger._plumbing``: ``_catch_up``). The replay writes rows on top of what
the file already holds, so an edit of the file (or rows another writer left) would be built
on, and served. The memory map a v2 root commits to (docs/FORMAT.md §6.12, §6.13) says, from
the entries alone, which object each ``ASSERT`` made (``{"branch", "seq"}``) and which state
each falsification operation set (``{"state", "seq"}``). So when the catch-up reaches a
``SNAPSHOT`` (a v2 root), ``check_segment`` re-derives, from the cache's own rows, the value
of every leaf the root changed since the branch's previous v2 root, hashes it
(``value_hash``) and compares it with the leaf the root commits to; and every object row the
segment's entries could have written must be one an ``ASSERT`` of the segment accounts for.
The cost is the segment's leaf changes (one indexed look-up each), never a scan.

A mismatch raises ``IntegrityError`` (step 9, ``ledger.errors.cache_edited``) naming the
cache file and how to recover (delete it: the next open rebuilds it from the ledger); the
catch-up's transaction is rolled back, so the cache keeps what it had and nothing is written
to the ledger.

Not checked here (the read gate's job, ``projections.checked``): the rows of items the segment
did not change, and the non-leaf fields of an object (its value, lifecycle, confidence): a
strict read re-derives every row it serves or hides from its own operations and checks the set
it serves against the map (§6.14).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import apsw

from memroot.ledger import encoding
from memroot.ledger.errors import cache_edited
from memroot.ledger.hashing import domain_hash
from memroot.memory_root.root_v2 import OBJECT_KIND, STATE_KIND_PREFIX, LeafChange, object_key
from memroot.memory_root.state_map import VALUE_TAG
from memroot.projections.views import view_of

__all__ = ["check_segment"]


def _value(state: dict[str, object]) -> bytes:
    return domain_hash(VALUE_TAG, encoding.encode(state))


def _skipped(db: apsw.Connection, table: str, branch: str, seq: int) -> bool:
    """Whether ``table`` (``mem_skipped`` / ``fz_skipped`` / ``fz_unapplied``) records the entry."""
    try:
        return bool(
            db.execute(
                f"SELECT 1 FROM {table} WHERE branch = ? AND seq = ?", (branch, seq)
            ).fetchall()
        )
    except apsw.SQLError:
        return False  # a layer this ledger does not have


def check_segment(
    db: apsw.Connection,
    path: os.PathLike[str] | str,
    branch: str,
    changes: Sequence[LeafChange],
    after: int,
    high_water: int,
) -> None:
    """Check the cache's rows for the leaves a v2 root changed on ``branch`` (module docstring).

    ``changes``: the leaf changes the root folds since the previous v2 root (the branch's
    own, ``seq`` >= 0; a fork's inherited ones, ``seq`` -1, were checked at the parent's
    roots); ``after``: that previous root's high-water (-1: none); ``high_water``: this
    root's. Run when the catch-up applies the ``SNAPSHOT``, the rows of every entry through
    ``high_water`` written (a later change of a key, after the high-water, is not checked
    here: the next root's).

    Raises:
        IntegrityError: step 9, naming the cache, the item and the entry, for a leaf the
            rows do not give, or an object row no ``ASSERT`` of the segment accounts for.
    """
    last: dict[bytes, LeafChange] = {}
    later: set[bytes] = set()
    for c in changes:
        if c.seq < 0:
            continue
        if c.seq > high_water:
            later.add(c.key)
        else:
            last[c.key] = c
    asserted: dict[tuple[str, int], LeafChange] = {}
    for key, c in last.items():
        if key in later:
            continue
        if c.kind == OBJECT_KIND:
            asserted[(c.item_id, c.seq)] = c
            _check_object(db, path, branch, c)
        else:
            _check_state(db, path, branch, c)
    # Every object an entry of the segment first gave a row on this branch is one its
    # ASSERT there made, or one the branch's view inherited (a fork's parent's object).
    parents: tuple[tuple[str, int | None], ...] | None = None
    for oid, ns, vfrom in db.execute(
        "SELECT o.id, o.namespace_id, o.vfrom FROM mem_objects o WHERE o.branch = ? "
        "AND o.vfrom > ? AND o.vfrom <= ? AND NOT EXISTS (SELECT 1 FROM mem_objects p "
        "WHERE p.id = o.id AND p.branch = o.branch AND p.vfrom < o.vfrom)",
        (branch, after, high_water),
    ):
        made = asserted.get((str(oid), int(vfrom)))
        if made is not None and made.namespace == ns:
            continue
        if _asserted_later(changes, str(oid), int(vfrom), str(ns)):
            continue
        if parents is None:
            parents = view_of(db, branch).levels[1:]
        if _inherited(db, str(oid), parents):
            continue
        raise cache_edited(
            path,
            f"memory object {oid} (namespace {ns!r}) has a first row at entry {vfrom} of "
            f"branch {branch!r} that no ASSERT there makes and no parent holds (a forged row)",
            branch=branch,
            seq=int(vfrom),
        )


def _inherited(db: apsw.Connection, oid: str, levels: Sequence[tuple[str, int | None]]) -> bool:
    """Whether a parent level of the view holds a row of ``oid`` (before its fork)."""
    for b, bound in levels:
        if db.execute(
            "SELECT 1 FROM mem_objects WHERE id = ? AND branch = ? AND vfrom <= ? LIMIT 1",
            (oid, b, (1 << 62) if bound is None else bound),
        ).fetchall():
            return True
    return False


def _asserted_later(changes: Sequence[LeafChange], oid: str, seq: int, ns: str) -> bool:
    """Whether an ``ASSERT`` of the segment at ``seq`` makes ``oid`` in ``ns`` (whatever won)."""
    key = object_key(oid)
    return any(c.key == key and c.seq == seq and c.namespace == ns for c in changes)


def _check_object(
    db: apsw.Connection, path: os.PathLike[str] | str, branch: str, c: LeafChange
) -> None:
    """Check an ``object`` leaf: its ``ASSERT``'s row is in the cache, in its namespace."""
    rows = db.execute(
        "SELECT namespace_id FROM mem_objects WHERE id = ? AND branch = ? AND vfrom = ?",
        (c.item_id, branch, c.seq),
    ).fetchall()
    if rows and rows[0][0] == c.namespace:
        if _value({"branch": branch, "seq": c.seq}) == c.value:
            return
    elif not rows and _skipped(db, "mem_skipped", branch, c.seq):
        return  # not a valid operation: every replay skips it (judged again at reads, §6.14)
    what = (
        "its row is missing (deleted or hidden)"
        if not rows
        else f"its row is in namespace {rows[0][0]!r}, the map's leaf in {c.namespace!r}"
    )
    raise cache_edited(
        path,
        f"memory object {c.item_id} asserted at entry {c.seq} of branch {branch!r}: {what}, "
        "against the memory map the ledger's root commits to",
        branch=branch,
        seq=c.seq,
    )


def _check_state(
    db: apsw.Connection, path: os.PathLike[str] | str, branch: str, c: LeafChange
) -> None:
    """Check a ``state/<kind>`` leaf: the item's newest state row is the one it holds."""
    kind = c.kind.removeprefix(STATE_KIND_PREFIX)
    try:
        row = db.execute(
            "SELECT state, seq FROM fz_states WHERE kind = ? AND id = ? AND branch = ? "
            "AND seq <= ? ORDER BY seq DESC LIMIT 1",
            (kind, c.item_id, branch, c.seq),
        ).fetchone()
        newer = db.execute(
            "SELECT 1 FROM fz_states WHERE kind = ? AND id = ? AND branch = ? AND seq > ? LIMIT 1",
            (kind, c.item_id, branch, c.seq),
        ).fetchall()
    except apsw.SQLError:
        return  # no falsification layer on this ledger: nothing derived to check
    if row is not None and not newer and int(row[1]) == c.seq:
        if _value({"state": str(row[0]), "seq": int(row[1])}) == c.value:
            return
    elif not newer and (
        _skipped(db, "fz_skipped", branch, c.seq) or _skipped(db, "fz_unapplied", branch, c.seq)
    ):
        return  # an operation the falsification rules skip or do not apply (§6.14)
    found = "no state row" if row is None else f"state {row[0]!r} at entry {row[1]}"
    if newer:
        found = "a state row after the entry that set it"
    raise cache_edited(
        path,
        f"{kind} {c.item_id}: the memory map's leaf holds the state its entry {c.seq} of "
        f"branch {branch!r} set, the cache holds {found}",
        branch=branch,
        seq=c.seq,
    )
