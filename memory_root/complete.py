"""Completeness of a strict read's set, against the memory map (issue 23.4 = 26.3).

The read gate (``memroot.projections.checked``) proves each served row and each row its
filters hid; what it cannot see from the rows alone is a row that is not there. The memory
map a v2 root commits to holds one ``object`` leaf per object asserted in a namespace, so
the map at the branch's latest v2 root plus the leaf changes of the entries since (at most
the snapshot cadence, read strictly: each proven in the signed tree) is the set of objects
the namespace must hold now. ``check_complete`` compares it with the derived rows:

- every map key of the namespace must be explained: the ``object`` key of an object the
  branch's view holds a row for, or the ``state/<kind>`` key of an item the falsification
  layer records a state (or an unapplied operation) for. An explanation is a hash match, so
  no edit of the derived tables can explain away the key of a deleted row;
- every object row of the namespace must have its key in the map (a row no ``ASSERT``
  accounts for is a forged row).

Anything else is refused with ``IntegrityError`` (step 9, like an edited row). Nodes are read
through ``StoredNodes`` (each re-hashed), and the item set of an item-tree root, a
content-addressed value, is kept in memory for the next read.

Not checked here: reads ``as_of`` an earlier entry (the map is the head's), and branches
whose newest root is v1 with no v2 root in their view (an old ledger until its next
snapshot). On a long-lived handle a check that held is not run again until the file changed
(``PRAGMA data_version``: another connection's commit; the branch's size: an append). An
``ASSERT`` the memory model skipped (``mem_skipped``, written without the hooks) has a leaf
and no row: it is refused too, until ``memroot verify`` explains it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from memroot.ledger import encoding
from memroot.ledger.errors import IntegrityError
from memroot.ledger.hashing import domain_hash
from memroot.ledger.ledger import Ledger
from memroot.memory_root import records
from memroot.memory_root.map_nodes import StoredNodes
from memroot.memory_root.root_v2 import STATE_KIND_PREFIX, map_at, object_key
from memroot.memory_root.state_map import EMPTY, ITEM_TAG, leaves_of, lookup, namespace_key
from memroot.projections.strict_rows import remembered

__all__ = ["check_complete"]

_CACHE: Final[OrderedDict[bytes, frozenset[bytes]]] = OrderedDict()
_CACHE_MAX: Final = 64
# A check that held is remembered (``strict_rows.remembered``, the read gate's memory) under
# ``_stamp``: PRAGMA data_version moves when another connection (another process: the attacker
# of the threat model) commits to the file, and the branch's size when this one appends
# through the hooks: while neither moved, nothing another writer could change has changed.


def _stamp(ledger: Ledger, branch: str) -> tuple[int, int]:
    """Return what moves when anything the check reads may have changed."""
    db = ledger.derived.db
    row = db.execute("PRAGMA data_version").fetchone()
    assert row is not None
    return int(row[0]), ledger.size(branch)


def _items(source: StoredNodes, item_root: bytes) -> frozenset[bytes]:
    """Return the keys of the item tree at ``item_root`` (cached by root: content-addressed)."""
    found = _CACHE.get(item_root)
    if found is not None:
        _CACHE.move_to_end(item_root)
        return found
    keys = frozenset(leaf.key for leaf in leaves_of(source, item_root))
    _CACHE[item_root] = keys
    if len(_CACHE) > _CACHE_MAX:
        _CACHE.popitem(last=False)
    return keys


def _state_keys(ledger: Ledger) -> set[bytes]:
    """Return the ``state/<kind>`` keys of every item the falsification layer recorded."""
    db = ledger.derived.db
    out: set[bytes] = set()
    for table in ("fz_states", "fz_unapplied"):
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchall():
            continue
        for kind, item in db.execute(f"SELECT DISTINCT kind, id FROM {table}"):
            out.add(domain_hash(ITEM_TAG, encoding.encode([STATE_KIND_PREFIX + kind, item])))
    return out


def check_complete(
    ledger: Ledger,
    branch: str,
    read_rows: Callable[[], tuple[Mapping[str, Iterable[str]], Sequence[str]]],
    asked: Sequence[str],
    *,
    every: bool = False,
) -> None:
    """Refuse a branch view whose object rows are not the map's set, per namespace.

    ``read_rows()`` returns ``(rows, namespaces)``: ``rows`` maps each namespace checked to
    the ids of the objects the view holds a current row for (any lifecycle state);
    ``namespaces`` names the namespaces to check (with no id when it has none). ``asked`` is
    the query's namespaces (the cache key). With ``every`` (a query over all namespaces) the
    map may hold no namespace outside ``namespaces``. ``read_rows`` is not called when the
    same check held on this connection and nothing changed since.

    Raises:
        IntegrityError: step 9, naming the namespace, for a map key no row explains (a
            deleted or hidden row) or a row the map does not hold (a forged row); or a
            map node that is missing or edited, or an entry since the root that fails its
            strict check.
    """
    db = ledger.derived.db
    stamp = _stamp(ledger, branch)
    passed = remembered(ledger, stamp, "complete")
    key = (branch, tuple(asked), every)
    if key in passed:
        return
    rows, namespaces = read_rows()
    at = map_at(ledger, branch)
    if at.root is None and records.latest_root(db, branch) is not None:
        return  # an old ledger: roots v1 only so far, no map to check against
    source = StoredNodes(db)
    if every and at.base != EMPTY:
        named = {namespace_key(ns) for ns in namespaces}
        named.update(namespace_key(c.namespace) for c in at.changes)
        unnamed = _items(source, at.base) - named
        if unnamed:
            raise IntegrityError(
                f"strict read refused: step 9: branch {branch}: the memory map holds "
                f"{len(unnamed)} namespace(s) no derived row names (every row of a "
                "namespace deleted); `memroot rebuild` re-derives the rows",
                branch=branch,
                step=9,
            )
    state_keys: set[bytes] | None = None
    for ns in namespaces:
        expected: set[bytes] = set()
        if at.base != EMPTY:
            item_root = lookup(source, at.base, namespace_key(ns))
            if item_root is not None:
                expected = set(_items(source, item_root))
        expected.update(c.key for c in at.changes if c.namespace == ns)
        have = {object_key(i) for i in rows.get(ns, ())}
        forged = have - expected
        if forged:
            raise IntegrityError(
                f"strict read refused: step 9: namespace {ns!r} on branch {branch} holds "
                f"{len(forged)} object row(s) no ASSERT in the log accounts for (derived "
                "row forged); `memroot rebuild` re-derives the rows",
                branch=branch,
                step=9,
            )
        missing = expected - have
        if missing:
            if state_keys is None:
                state_keys = _state_keys(ledger)
            missing -= state_keys
        if missing:
            root = (
                "the entries since the genesis"
                if at.root is None
                else f"root {at.root.hex()[:16]} and the entries since"
            )
            raise IntegrityError(
                f"strict read refused: step 9: namespace {ns!r} on branch {branch}: the memory "
                f"map ({root}) holds {len(missing)} item(s) no derived row explains "
                "(a derived row deleted or hidden); `memroot rebuild` re-derives the rows",
                branch=branch,
                step=9,
            )
    passed.add(key)
