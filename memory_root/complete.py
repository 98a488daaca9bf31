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
(``PRAGMA data_version``: another connection's commit; on PostgreSQL the branch's size too). An
``ASSERT`` the memory model skipped (``mem_skipped``, written without the hooks) has a leaf
and no row: its skip row explains the leaf only when a replay of the log skips the entry too
(a forged skip row hides no honest ``ASSERT``).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

import apsw

from memroot.ledger import encoding
from memroot.ledger.errors import IntegrityError
from memroot.ledger.hashing import domain_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType
from memroot.memory_root import records
from memroot.memory_root.falsify.checked import view_levels
from memroot.memory_root.falsify.replay import replayed_skips as replayed_state_skips
from memroot.memory_root.map_nodes import StoredNodes
from memroot.memory_root.root_v2 import STATE_KIND_PREFIX, map_at, object_key
from memroot.memory_root.state_map import EMPTY, ITEM_TAG, leaves_of, lookup, namespace_key
from memroot.projections import wal_pages
from memroot.projections.strict_rows import (
    Heads,
    heads_of,
    object_token,
    remembered,
    replayed_skips,
    since,
)
from memroot.projections.wal_pages import Mark

__all__ = ["check_complete"]

_ASSERT: Final = OpType.ASSERT.value
_CACHE: Final[OrderedDict[bytes, frozenset[bytes]]] = OrderedDict()
_CACHE_MAX: Final = 64
_KEYS: Final[dict[str, bytes]] = {}
_KEYS_MAX: Final = 1 << 20
# A check that held is remembered (``strict_rows.remembered``, the read gate's memory) under
# ``_stamp``: PRAGMA data_version moves when another connection (another process: the attacker
# of the threat model) commits to the file: while it did not move, nothing another writer
# could change has changed.


def _stamp(ledger: Ledger, branch: str) -> tuple[object, ...]:
    """Return what moves when anything the check reads may have changed.

    On a SQLite file only another connection's commit can (``data_version``): this
    connection's own appends go through the hooks, which write an object's row with its
    leaf, so a check that held still holds after them (the same reasoning as the objects'
    checks, ``strict_rows.object_token``). On PostgreSQL the host cache's ``data_version``
    and the commits of every transaction but this connection's own
    (``PgStore.foreign_token``): other hosts' entries reach the map before this host's cache
    folds them, and this host's catch-up writes the cache through its own connection.
    """
    if ledger.derived is ledger.store:
        # The store's number: asked once per read transaction (its snapshot's), shared
        # with the head check's and the read gate's tokens.
        version = ledger.store.data_version()
        if version is not None:
            return (version,)
    row = ledger.derived.db.execute("PRAGMA data_version").fetchone()
    assert row is not None
    if ledger.derived is ledger.store:
        return (int(row[0]),)
    foreign = getattr(ledger.store, "foreign_token", None)
    if foreign is None:
        return int(row[0]), ledger.size(branch)
    return int(row[0]), foreign()


def _key(object_id: str) -> bytes:
    """Return ``object_key(object_id)``, remembered (a pure function of the id)."""
    got = _KEYS.get(object_id)
    if got is None:
        if len(_KEYS) >= _KEYS_MAX:
            _KEYS.clear()
        got = _KEYS[object_id] = object_key(object_id)
    return got


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


# -- a check kept across another connection's commit (a SQLite file in WAL mode) ---------------

_READS: Final = (
    "mem_objects",
    "mem_forks",
    "mem_namespaces",
    "mem_skipped",
    "fz_items",
    "fz_states",
    "fz_unapplied",
    "fz_skipped",
)
"""The derived tables whose rows a check compares with the map. Not watched: ``mem_events``
(it only adds namespaces to check: no edit of it can make a failing check pass, since the
object rows name their namespaces too), and the map's nodes and root records (with no
operation appended since, the map a check held against is the one the signed root commits
to, whatever the stored copies now say; the next full check re-hashes them)."""

_Held = dict[object, tuple[Heads, object]]
_HELD: Final[weakref.WeakKeyDictionary[Ledger, _Held]] = weakref.WeakKeyDictionary()
"""Per open ledger: each check that held -> the heads and the position it held at (a file: the
WAL floor, ``Mark``; PostgreSQL: the host cache's ``data_version``)."""
_WATCHED: Final[weakref.WeakKeyDictionary[Ledger, wal_pages.Watch]] = weakref.WeakKeyDictionary()
"""Per open ledger: the pages and schema of ``_READS``, exact as of a floor
(``wal_pages.Watch``)."""


def _held(ledger: Ledger) -> _Held:
    return _HELD.setdefault(ledger, {})


def _advance(ledger: Ledger, key: object) -> None:
    """Move a check's position on: it held, and no other connection committed since.

    This connection's own appends (through the hooks) then do not count against it when
    another connection commits next.
    """
    held = _HELD.get(ledger)
    if held is not None and key in held:
        here = wal_pages.floor_of(ledger)
        if here is not None:
            held[key] = (heads_of(ledger), here)


def _still_holds(ledger: Ledger, key: object) -> bool:
    """Whether a check that held still holds though another connection committed since.

    It does when no operation was appended since (only an operation sets a map leaf: the
    map is the same) and no commit since wrote a page of the tables the check reads
    (``wal_pages``: the rows are the same). On a file in WAL mode only.

    Raises:
        IntegrityError: an entry appended since fails its strict read.
    """
    got = _HELD.get(ledger, {}).get(key)
    if got is None:
        return False
    heads, then = got
    if ledger.derived is not ledger.store:
        return _still_holds_cache(ledger, key, heads, then)
    here = wal_pages.floor_of(ledger)
    path = ledger.store.path
    if not isinstance(then, Mark) or here is None or path is None:
        return False
    appended = since(ledger, object_token(ledger), heads)
    if appended is None or appended[1]:
        return False
    if not _WATCHED.setdefault(ledger, wal_pages.Watch(_READS)).unchanged(
        ledger.derived.db, path, then, here, ledger.store.read_memo()
    ):
        return False
    _held(ledger)[key] = (heads_of(ledger), here)
    return True


def _cache_version(ledger: Ledger) -> int:
    row = ledger.derived.db.execute("PRAGMA data_version").fetchone()
    assert row is not None
    return int(row[0])


def _still_holds_cache(ledger: Ledger, key: object, heads: Heads, then: object) -> bool:
    """``_still_holds`` on PostgreSQL: the host's cache file unchanged by anyone else.

    The derived rows live in the host's cache file, which only this connection writes
    through the hooks (its own appends, its catch-up of other hosts' entries) unless its
    ``data_version`` moved; and with no operation appended since, the map is the same.

    Raises:
        IntegrityError: an entry appended since fails its strict read.
    """
    if then != _cache_version(ledger):
        return False
    appended = since(ledger, object_token(ledger), heads)
    if appended is None or appended[1]:
        return False
    _held(ledger)[key] = (heads_of(ledger), then)
    return True


def _skipped_keys(ledger: Ledger, branch: str, namespace: str) -> set[bytes]:
    """Return the object keys of ``namespace`` that skipped ``ASSERT`` entries explain.

    An ``ASSERT`` in the log that is not a valid operation (appended without the hooks) has
    its map leaf and no row in every replay. Its ``mem_skipped`` row is derived (anyone can
    add one to hide an honest ``ASSERT``), so it is judged again: it explains the leaf only
    when a replay of the log skips the entry too (``strict_rows.replayed_skips``); the
    entry itself is read strictly, in the branch's view.
    """
    db = ledger.derived.db
    levels = view_levels(ledger, branch)
    rows = []
    for b, bound in levels:
        rows += [
            (b, int(seq))
            for (seq,) in db.execute(
                "SELECT seq FROM mem_skipped WHERE branch = ? AND op_type = ?"
                + ("" if bound is None else " AND seq <= ?"),
                (b, _ASSERT) if bound is None else (b, _ASSERT, bound),
            )
        ]
    out = _skipped_state_keys(ledger, db, levels)
    if not rows:
        return out
    genuine = replayed_skips(ledger)
    for b, seq in rows:
        if (b, seq) not in genuine or seq >= ledger.size(b):
            continue
        entry = ledger.read_many([seq], b, links=False)[seq].entry
        oid = entry.body.get("target_id")
        oid = oid if isinstance(oid, str) else entry.body.get("id")
        ours = entry.type == _ASSERT and entry.body.get("namespace_id") == namespace
        if ours and isinstance(oid, str):
            out.add(object_key(oid))
    return out


def _skipped_state_keys(
    ledger: Ledger, db: apsw.Connection, levels: Sequence[tuple[str, int | None]]
) -> set[bytes]:
    """Return the ``state/<kind>`` keys that state operations every replay skips explain.

    A state operation the falsification rules refuse sets its item's leaf (leaves come from
    the entries alone) and no ``fz_states`` row; its ``fz_skipped`` row explains the leaf
    only when a replay of the log skips it too (``falsify.replay.replayed_skips``).
    """
    try:
        rows = [
            (b, int(seq))
            for b, bound in levels
            for (seq,) in db.execute(
                "SELECT seq FROM fz_skipped WHERE branch = ?"
                + ("" if bound is None else " AND seq <= ?"),
                (b,) if bound is None else (b, bound),
            )
        ]
    except apsw.SQLError:
        return set()  # no falsification layer on this ledger
    if not rows:
        return set()
    genuine = replayed_state_skips(ledger)
    out: set[bytes] = set()
    for b, seq in rows:
        if (b, seq) not in genuine or seq >= ledger.size(b):
            continue
        body = ledger.read_many([seq], b, links=False)[seq].entry.body
        kind, item = body.get("target_type"), body.get("target_id")
        if isinstance(kind, str) and isinstance(item, str):
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
        _advance(ledger, key)
        return
    if _still_holds(ledger, key):
        passed.add(key)
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
        have = {_key(i) for i in rows.get(ns, ())}
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
            missing -= _skipped_keys(ledger, branch, ns)
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
    here: object = (
        wal_pages.floor_of(ledger) if ledger.derived is ledger.store else _cache_version(ledger)
    )
    _held(ledger)[key] = (heads_of(ledger), here)
