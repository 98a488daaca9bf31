"""Stored memory-map nodes: rows appended in write order, found by position.

``memory_map_nodes(at, leaf, a, b, at_a, at_b)``: row ``at`` (SQLite's rowid, given in
write order) holds one node. An interior node (``leaf = 0``) holds its children's hashes in
``a``, ``b`` and their row numbers in ``at_a``, ``at_b`` (NULL for an ``EMPTY`` child); a
leaf (``leaf = 1``) holds its key and value, and ``at_b`` is the row of the item tree its
value is the root of when it is a namespace leaf (NULL for an item leaf). A walk reads a
node's children by their row numbers, as the Jellyfish Merkle tree keys nodes by version:
a snapshot's new nodes fill a few new pages at the end of the table instead of landing on a
page each of a b-tree keyed by random hashes. ``memory_map_roots(hash, at)`` is where walks
start: the row of every map root a snapshot wrote, and of every item-tree root.

A row holds no hash of its own. The table is a cache like every derived table (on
PostgreSQL it lives in the host's derived SQLite file): nothing in it is trusted, row
numbers included. Every node read is hashed again and must equal the hash its parent (or
the root it was asked for) names, so a reader that starts from a root committed in a signed
entry reads either exactly the committed tree or an ``IntegrityError``; a row number that
points at another row only makes that check fail.

A file written before this layout (``memory_map_nodes(hash, leaf, a, b)``, keyed by hash)
is converted by ``install`` (a write transaction); until then ``StoredNodes`` reads it as
it is, by hash.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import apsw

from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.errors import IntegrityError
from memroot.ledger.map_tree import EMPTY, check_rows_into, leaf_hash, node_from_row, node_hash
from memroot.memory_root.state_map import BatchRead, Inner, Leaf, Node, NodeRow

__all__ = [
    "FETCH_CHUNK",
    "ROOT_ROW_BYTES",
    "ROW_BYTES",
    "SortedLoad",
    "StoredNodes",
    "find_row_unchecked",
    "install",
]

_LOG: Final = logging.getLogger(__name__)

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS memory_map_nodes(
    at INTEGER PRIMARY KEY,
    leaf INTEGER NOT NULL CHECK(leaf IN (0, 1)),
    a BLOB NOT NULL,
    b BLOB NOT NULL,
    at_a INTEGER,
    at_b INTEGER
) STRICT;
CREATE TABLE IF NOT EXISTS memory_map_roots(
    hash BLOB PRIMARY KEY,
    at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
"""

FETCH_CHUNK: Final = 2000
"""Nodes per query of ``fetch`` (SQLite takes 32,766 variables)."""

ROW_BYTES: Final = 73
"""Column bytes of a node row at most (flag, two hashes, two 4-byte row numbers)."""

ROOT_ROW_BYTES: Final = 36
"""Column bytes of a ``memory_map_roots`` row (a hash, a 4-byte row number)."""

MIGRATE_CHUNK: Final = 200_000
"""Rows converted per statement when ``install`` converts a hash-keyed table."""

_OLD: Final = "memory_map_nodes_v1"
_PLACES: Final = "memroot_map_places"


def _one_int(db: apsw.Connection, sql: str) -> int:
    row = db.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def _columns(db: apsw.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in db.execute(f"PRAGMA table_info({table})")]


def install(db: apsw.Connection, *, progress: Callable[[int, int], None] | None = None) -> None:
    """Create the node tables if missing, converting a hash-keyed table (in a write transaction).

    A ``memory_map_nodes`` keyed by hash (the layout before row numbers) is rewritten in
    place: its rows in hash order get row numbers, each parent its children's, and every map
    root the stored roots name, every item-tree root and every node no other row names
    becomes a start of walks. ``progress(done, total)`` is called after each
    ``MIGRATE_CHUNK`` rows (and the conversion is logged at INFO).
    """
    if "hash" in _columns(db, "memory_map_nodes"):
        _convert(db, progress)
    db.execute(_SCHEMA)


def _convert(db: apsw.Connection, progress: Callable[[int, int], None] | None) -> None:
    """Rewrite the hash-keyed node table as rows with row numbers (see ``install``)."""
    total = _one_int(db, "SELECT count(*) FROM memory_map_nodes")
    _LOG.info("memory map: converting %d node rows to rows found by position", total)
    db.execute(
        f"ALTER TABLE memory_map_nodes RENAME TO {_OLD}; {_SCHEMA}"
        f"DROP TABLE IF EXISTS temp.{_PLACES}; "
        f"CREATE TEMP TABLE {_PLACES}(hash BLOB PRIMARY KEY, at INTEGER NOT NULL) "
        "WITHOUT ROWID; "
        f"INSERT INTO temp.{_PLACES} SELECT hash, row_number() OVER (ORDER BY hash) FROM {_OLD}"
    )
    for lo in range(1, total + 1, MIGRATE_CHUNK):
        db.execute(
            "INSERT INTO memory_map_nodes(at, leaf, a, b, at_a, at_b) "
            "SELECT p.at, v.leaf, v.a, v.b, "
            f"CASE WHEN v.leaf = 0 THEN (SELECT at FROM temp.{_PLACES} WHERE hash = v.a) END, "
            f"(SELECT at FROM temp.{_PLACES} WHERE hash = v.b) "
            f"FROM temp.{_PLACES} AS p CROSS JOIN {_OLD} AS v ON v.hash = p.hash "
            "WHERE p.at BETWEEN ? AND ? ORDER BY p.at",
            (lo, lo + MIGRATE_CHUNK - 1),
        )
        done = min(total, lo + MIGRATE_CHUNK - 1)
        _LOG.info("memory map: %d of %d node rows converted", done, total)
        if progress is not None:
            progress(done, total)
    for table in ("memory_roots", "memory_root_resnapshots"):  # their ``map`` column (records)
        if "map" in _columns(db, table):
            db.execute(
                f"INSERT OR IGNORE INTO memory_map_roots SELECT p.hash, p.at FROM {table} AS r "
                f"CROSS JOIN temp.{_PLACES} AS p ON p.hash = r.map"
            )
    db.execute(
        # Item-tree roots (a namespace leaf's value) and nodes no row names (roots of trees).
        "INSERT OR IGNORE INTO memory_map_roots "
        "SELECT b, at_b FROM memory_map_nodes WHERE leaf = 1 AND at_b IS NOT NULL; "
        f"INSERT OR IGNORE INTO memory_map_roots SELECT p.hash, p.at FROM temp.{_PLACES} AS p "
        "WHERE p.at NOT IN (SELECT at_a FROM memory_map_nodes WHERE at_a IS NOT NULL "
        "UNION SELECT at_b FROM memory_map_nodes WHERE at_b IS NOT NULL); "
        f"DROP TABLE {_OLD}; DROP TABLE temp.{_PLACES}"
    )
    _LOG.info("memory map: %d node rows converted", total)


def _row_hash(leaf: int, a: bytes, b: bytes) -> bytes:
    return leaf_hash(a, b) if leaf else node_hash(a, b)


def find_row_unchecked(db: apsw.Connection, h: bytes) -> int | None:
    """Return the row number of a stored node whose bytes hash to ``h``, or None (forensics).

    Scans the whole table: for tests and repairs that must name a node's row, never for a
    read (a walk finds rows through their parents' row numbers, each read checked).
    """
    for at, leaf, a, b in db.execute("SELECT at, leaf, a, b FROM memory_map_nodes"):
        try:
            if _row_hash(int(leaf), bytes(a), bytes(b)) == h:
                return int(at)
        except ValueError:
            continue
    return None


_Row = tuple[int, int, bytes, bytes, int | None, int | None]
"""A stored row as read: ``(at, leaf, a, b, at_a, at_b)``."""

_Planned = tuple[list[_Row], dict[bytes, int], list[bytes], bytes | None]
"""``put``'s new rows, item-tree starts, the roots its nodes make and its last new node."""


class StoredNodes:
    """The ``NodeSource`` (and ``RowSource``) of one derived-state connection, checking reads.

    Nodes are asked for by hash, as the walks know them. The row of a hash comes from where
    the walk met it: the row numbers its parent's row holds (kept in ``_at`` as rows are
    read, and for the rows ``put`` writes), or ``memory_map_roots`` for a root. A hash the
    source has not met (a walk that does not start from a root, or positions forgotten) is
    looked for from every stored root (``_locate``: slow, but it finds every stored node a
    root reaches). Whatever row a position names, its bytes must hash to the hash asked for.

    Nodes read (and checked) are kept in memory, up to ``cache`` of them: a node is known by
    its own hash, so one that was checked once is that node for good, whatever happens to
    its row later. The upper levels every path crosses are then read once, not per proof.
    ``node`` (one node per query, for updates) and ``fetch`` (many per query, for the
    batched proofs of ``state_map.prove_many``) keep one cache each. The positions are
    valid for the connection's committed rows and its own transaction's: like the caches,
    an instance belongs to one holder that drops it when its transaction rolls back.
    """

    def __init__(
        self,
        db: apsw.Connection,
        *,
        cache: int = 1 << 16,
        rows: int = 1 << 18,
        places: int = 1 << 20,
    ) -> None:
        """Read (and ``put``) nodes through ``db``, keeping up to ``cache`` checked nodes.

        ``rows`` bounds ``known``, the batched walks' cache (about 250 bytes a node);
        ``places`` the row numbers kept (about 150 bytes each), past which all three are
        let go when no update is under way.
        """
        self.db = db
        self._cache: dict[bytes, Node] = {}
        self._limit = cache
        self._rows = rows
        self._places = places
        self.known: dict[bytes, NodeRow] = {}
        self._at: dict[bytes, int] = {}
        self._updating = False
        self._legacy: bool | None = None
        self._wrote: tuple[int, bytes] | None = None  # the last row ``put`` wrote, and its hash
        self._version: int | None = None  # ``PRAGMA data_version`` when positions were checked

    # -- the layout ----------------------------------------------------------------------------

    def _is_legacy(self) -> bool:
        """Whether the table is still keyed by hash (a file not converted yet)."""
        if self._legacy is None:
            cols = _columns(self.db, "memory_map_nodes")
            if not cols:
                return False  # no table yet: look again next time
            self._legacy = "hash" in cols
        return self._legacy

    def _select(self, sql: str, args: Sequence[Any]) -> list[Any]:
        try:
            return list(self.db.execute(sql, tuple(args)).fetchall())
        except apsw.SQLError as e:
            if "no such table" in str(e):
                return []
            raise

    # -- positions -----------------------------------------------------------------------------

    def _check_written(self) -> None:
        """Forget every position when another connection committed, or a write was undone.

        Another connection's commit may have rewritten the tables (``memroot rebuild`` in
        another process numbers the rows again): ``PRAGMA data_version`` tells, and the
        positions met before are let go (the roots' rows say where to start again). The
        rows a rolled-back transaction (or savepoint) of this connection wrote are gone, and
        their row numbers may be given again to other nodes: the positions met since may be
        wrong, and a node this source knows may be unstored again. The last row written
        tells (a rollback removes it with all the rows after any savepoint before it).
        """
        rows = self._select("PRAGMA data_version", ())
        version = int(rows[0][0]) if rows else None
        if version != self._version:
            if self._version is not None:
                self._at, self._cache, self.known = {}, {}, {}
                self._wrote = None
            self._version = version
        if self._wrote is None:
            return
        at, h = self._wrote
        rows = self._select("SELECT leaf, a, b FROM memory_map_nodes WHERE at = ?", (at,))
        try:
            kept = bool(rows) and _row_hash(int(rows[0][0]), rows[0][1], rows[0][2]) == h
        except ValueError:
            kept = False
        if not kept:
            self._at, self._cache, self.known = {}, {}, {}
            self._wrote = None

    def _learn(self, leaf: int, a: bytes, b: bytes, at_a: int | None, at_b: int | None) -> None:
        """Keep the row numbers a checked row gives its children (or its item tree)."""
        if at_a is not None and not leaf:
            self._at[a] = at_a
        if at_b is not None:
            self._at[b] = at_b

    def _places_of(self, hashes: Iterable[bytes]) -> dict[bytes, int]:
        """Return the row of each hash it can find: met before, a stored root, or located."""
        at = self._at
        found = {h: at[h] for h in hashes if h in at}
        rest = [h for h in hashes if h not in found and h != EMPTY]
        if rest:
            found.update(self._stored_starts(rest))
            lost = {h for h in rest if h not in found}
            if lost:
                found.update(self._locate(lost))
        return found

    def _stored_starts(self, hashes: Sequence[bytes]) -> dict[bytes, int]:
        """Return the rows ``memory_map_roots`` gives of ``hashes`` (kept in ``_at`` too)."""
        found: dict[bytes, int] = {}
        for i in range(0, len(hashes), FETCH_CHUNK):
            chunk = hashes[i : i + FETCH_CHUNK]
            marks = ",".join("?" * len(chunk))
            for h, p in self._select(
                f"SELECT hash, at FROM memory_map_roots WHERE hash IN ({marks})", chunk
            ):
                found[bytes(h)] = int(p)
        self._at.update(found)
        return found

    def _locate(self, wanted: set[bytes]) -> dict[bytes, int]:
        """Find the rows of ``wanted`` by walking down from every stored root, newest first.

        The slow way (every node a root reaches may be read): for a hash the source has not
        met. Every row read on the way is checked against the hash its parent names.

        Raises:
            IntegrityError: if a row on the way does not hash to the hash it is reached by.
        """
        starts = [
            (bytes(h), int(p))
            for h, p in self._select("SELECT hash, at FROM memory_map_roots ORDER BY at DESC", ())
        ]
        found: dict[bytes, int] = {}
        seen: set[int] = set()
        level = starts
        while level and len(found) < len(wanted):
            step = [(h, p) for h, p in level if p not in seen]
            seen.update(p for _, p in step)
            for h, p in step:
                if h in wanted:
                    found[h] = p
            following: list[tuple[bytes, int]] = []
            for i in range(0, len(step), FETCH_CHUNK):
                for _h, row in self._rows_at(step[i : i + FETCH_CHUNK]):
                    _, leaf, a, b, at_a, at_b = row
                    if not leaf and at_a is not None:
                        following.append((a, at_a))
                    if at_b is not None:
                        following.append((b, at_b))
            level = following
        self._at.update(found)
        return found

    def _rows_at(self, chunk: Sequence[tuple[bytes, int]]) -> Iterator[tuple[bytes, _Row]]:
        """Yield ``(hash, row)`` for each ``(hash, at)`` of ``chunk`` whose row exists, checked.

        All or nothing: no row is yielded unless every present row hashes to its hash.

        Raises:
            IntegrityError: naming the first row that is malformed or does not hash.
        """
        values = ",".join(["(?)"] * len(chunk))
        got: dict[int, _Row] = {
            int(r[0]): (int(r[0]), r[1], bytes(r[2]), bytes(r[3]), r[4], r[5])
            for r in self._select(
                "SELECT n.at, n.leaf, n.a, n.b, n.at_a, n.at_b "
                f"FROM (VALUES {values}) AS k CROSS JOIN memory_map_nodes AS n "
                "ON n.at = k.column1",
                [p for _, p in chunk],
            )
        }
        pairs = [(h, got[p]) for h, p in chunk if p in got]
        check_rows_into([(h, r[1], r[2], r[3]) for h, r in pairs], {})
        yield from pairs

    # -- reads ---------------------------------------------------------------------------------

    def node(self, h: bytes) -> Node | None:
        """Return the node stored under ``h``, or None when there is none.

        Raises:
            IntegrityError: if the stored row does not hash to ``h`` (an edited row).
        """
        known = self._cache.get(h)
        if known is not None:
            return known
        if self._is_legacy():
            rows = self._select("SELECT leaf, a, b FROM memory_map_nodes WHERE hash = ?", (h,))
            if not rows:
                return None
            leaf, a, b = rows[0]
            return self._keep(h, node_from_row(h, bool(leaf), bytes(a), bytes(b)))
        at = self._places_of((h,)).get(h)
        if at is None:
            return None
        rows = self._select(
            "SELECT leaf, a, b, at_a, at_b FROM memory_map_nodes WHERE at = ?", (at,)
        )
        if not rows:
            return None
        leaf, a, b, at_a, at_b = rows[0]
        node = node_from_row(h, bool(leaf), bytes(a), bytes(b))
        self._learn(leaf, bytes(a), bytes(b), at_a, at_b)
        return self._keep(h, node)

    def _keep(self, h: bytes, node: Node) -> Node:
        if len(self._cache) < self._limit:
            self._cache[h] = node
        return node

    def fetch(self, hashes: Collection[bytes]) -> None:
        """Read the nodes ``hashes`` into ``known``, ``FETCH_CHUNK`` per query, each checked.

        A hash with no row is left out (the caller names it). When ``known`` would pass its
        bound, its newer half is dropped first: the oldest nodes are the upper levels every
        path crosses (the walks read them first), and the nodes just read are always kept.
        When the row numbers kept pass theirs (and no update is under way), every cache is
        let go but the nodes just read and their children's rows.

        Raises:
            IntegrityError: if a stored row does not hash to its hash (an edited row).
        """
        want = list(hashes)
        checked: dict[bytes, NodeRow] = {}
        if self._is_legacy():
            for i in range(0, len(want), FETCH_CHUNK):
                self._read_legacy(want[i : i + FETCH_CHUNK], checked)
        else:
            places = self._places_of(want)
            items = [(h, places[h]) for h in want if h in places]
            learned: list[Any] = []
            for i in range(0, len(items), FETCH_CHUNK):
                self._read_at(items[i : i + FETCH_CHUNK], checked, learned)
            if not self._updating and len(self._at) > self._places:
                self._at, self._cache, self.known = {}, {}, {}
            at = self._at
            for _, leaf, a, b, at_a, at_b in learned:
                if at_a is not None and not leaf:
                    at[a] = at_a
                if at_b is not None:
                    at[b] = at_b
        if len(self.known) + len(checked) > self._rows:
            self.known = dict(itertools.islice(self.known.items(), self._rows // 2))
        self.known.update(checked)

    def _read_at(
        self, chunk: list[tuple[bytes, int]], into: dict[bytes, NodeRow], rows: list[Any]
    ) -> None:
        """Read the rows of ``chunk`` (``(hash, at)`` pairs) into ``into``, each checked.

        The rows come back in the order asked (``CROSS JOIN``: the list is the outer loop),
        so when every row exists each is paired with its hash as it comes; otherwise by row
        number, an absent row left out. The stored rows read are appended to ``rows``.

        Raises:
            IntegrityError: if a row does not hash to the hash it is read for (nothing of the
                chunk is added then).
        """
        values = ",".join(["(?)"] * len(chunk))
        got = self._select(
            "SELECT n.at, n.leaf, n.a, n.b, n.at_a, n.at_b "
            f"FROM (VALUES {values}) AS k CROSS JOIN memory_map_nodes AS n ON n.at = k.column1",
            [p for _, p in chunk],
        )
        if len(got) != len(chunk):
            by = {r[0]: r for r in got}
            chunk = [(h, p) for h, p in chunk if p in by]
            got = [by[p] for _, p in chunk]
        check_rows_into([(h, r[1], r[2], r[3]) for (h, _), r in zip(chunk, got, strict=True)], into)
        rows.extend(got)

    def _read_legacy(self, chunk: list[bytes], into: dict[bytes, NodeRow]) -> None:
        """Read the rows of ``chunk``'s hashes from a table keyed by hash, each checked."""
        marks = ",".join("?" * len(chunk))
        check_rows_into(
            self._select(
                f"SELECT hash, leaf, a, b FROM memory_map_nodes WHERE hash IN ({marks})", chunk
            ),
            into,
        )

    def start_update(self) -> None:
        """Begin an update (``state_map.update_map`` calls it first, on either of its paths).

        The positions met before are checked (``_check_written``: let go when rows they name
        were rolled back or numbered again by another connection), and the row numbers the
        update meets are kept until ``put`` writes its nodes.
        """
        self._check_written()
        if len(self._at) > self._places:
            self._at, self._cache, self.known = {}, {}, {}
        self._updating = True

    def map_reads(self) -> tuple[Mapping[bytes, NodeRow], BatchRead]:
        """Return the checked nodes at hand (``known``) and a batched read of others.

        The read (for ``state_map.update_map``'s native walk) ``fetch``es the hashes it is
        given that are not at hand and returns each one's checked row, or None when it has
        none.

        Raises:
            IntegrityError: from the read, if a stored row does not hash to its hash.
        """

        def read(hashes: list[bytes]) -> list[Node | NodeRow | None]:
            known = self.known
            self.fetch([h for h in hashes if h not in known])
            known = self.known
            return [known.get(h) for h in hashes]

        return self.known, read

    def leaves(self, root: bytes) -> Iterator[Leaf]:
        """Yield every leaf of the tree at ``root`` (any order), each node read checked.

        ``state_map.leaves_of`` uses it: the walk keeps each pending subtree's row number
        beside its hash, so it holds no more positions than its own stack.

        Raises:
            IntegrityError: if a node is not stored, or a row does not hash to its hash.
        """
        if root == EMPTY:
            return
        if self._is_legacy():
            stack = [root]
            while stack:
                h = stack.pop()
                if h == EMPTY:
                    continue
                n = self.node(h)
                if n is None:
                    raise _not_stored(h)
                if isinstance(n, Leaf):
                    yield n
                else:
                    stack += (n.left, n.right)
            return
        at = self._places_of((root,)).get(root)
        if at is None:
            raise _not_stored(root)
        level: list[tuple[bytes, int]] = [(root, at)]
        while level:
            following: list[tuple[bytes, int]] = []
            for i in range(0, len(level), FETCH_CHUNK):
                chunk = level[i : i + FETCH_CHUNK]
                rows = dict(self._rows_at(chunk))
                for h, _ in chunk:
                    row = rows.get(h)
                    if row is None:
                        raise _not_stored(h)
                    _, leaf, a, b, at_a, at_b = row
                    if leaf:
                        yield Leaf(a, b)
                        continue
                    for child, child_at in ((a, at_a), (b, at_b)):
                        if child == EMPTY:
                            continue
                        if child_at is None:
                            child_at = self._places_of((child,)).get(child)
                            if child_at is None:
                                raise _not_stored(child)
                        following.append((child, child_at))
            level = following

    # -- writes --------------------------------------------------------------------------------

    def put(self, nodes: Mapping[bytes, Node], roots: Iterable[bytes] = ()) -> int:
        """Store ``nodes`` (inside a write transaction); return how many rows were new.

        The nodes get the next row numbers, in the order given; each interior node's row
        holds its children's (new ones, or the rows the update read them through), a
        namespace leaf's row the row of its item tree. A node whose row the source already
        knows is not written again (a leaf the update only moved). ``roots`` (the map root
        the nodes make, which may be an older node) and every new node no other new node
        names, and every item tree a new leaf names, become starts of walks.

        A child that is neither new nor found stored gets no row number (NULL): a walk that
        reaches it through this row finds it among the roots or not at all (``not stored``).
        The rows are planned by the native core when it is built (``map_put_rows``: no Python
        a node), else by ``_put_rows``, its reference.

        Raises:
            IntegrityError: if a row read to find a child does not hash to its hash, or a
                root in ``roots`` is neither new nor stored.
        """
        install(self.db)
        self._legacy = False
        if not self._updating:
            self._check_written()  # (an update checked when it started)
        try:
            return self._put(nodes, list(roots))
        finally:
            self._updating = False
            if len(self._at) > self._places:
                self._at, self._cache, self.known = {}, {}, {}

    def _put(self, nodes: Mapping[bytes, Node], roots: list[bytes]) -> int:
        base = _one_int(self.db, "SELECT coalesce(max(at), 0) FROM memory_map_nodes") + 1
        planned = None
        if _N is not None and type(nodes) is dict:
            try:
                planned = _N.map_put_rows(
                    nodes, self._at, base, self._places_of, self._stored_starts, Leaf, Inner
                )
            except _N.Reject:
                planned = None  # a node of another shape: the reference below decides
        if planned is None:
            planned = self._put_rows(nodes, base)
        rows, starts, top, last = planned
        at = self._at
        for h in (*roots, *top):
            if h != EMPTY:
                place = at.get(h)
                if place is None:
                    place = self._places_of((h,)).get(h)
                if place is None:
                    raise _not_stored(h)
                starts[h] = place
        self.db.executemany("INSERT INTO memory_map_nodes VALUES(?,?,?,?,?,?)", rows)
        if last is not None:
            self._wrote = (at[last], last)
        self.db.executemany(
            "INSERT OR IGNORE INTO memory_map_roots VALUES(?,?)", list(starts.items())
        )
        return len(rows)

    def _put_rows(self, nodes: Mapping[bytes, Node], base: int) -> _Planned:
        """Plan ``put``'s rows: the reference (``native.map_put_rows`` is tested equal to it).

        Numbers the nodes the source has no row of from ``base`` on; looks for the children
        (and item trees) of new nodes it has not met; returns the new rows in order, the
        item-tree starts found, the nodes no other of ``nodes`` names, and the last new
        node's hash.
        """
        at = self._at
        fresh = [(h, n) for h, n in nodes.items() if h not in at]
        top = _tops(nodes)
        for i, (h, _) in enumerate(fresh):
            at[h] = base + i
        children = {
            c for _, n in fresh if not isinstance(n, Leaf) for c in (n.left, n.right) if c != EMPTY
        }
        missing = [c for c in children if c not in at]
        if missing:
            self._places_of(missing)  # a child found nowhere gets no row number (NULL)
        values = [n.value for _, n in fresh if isinstance(n, Leaf) and n.value not in at]
        if values:
            self._stored_starts(values)  # item-tree roots (no walk from every root for them)
        rows: list[_Row] = []
        starts: dict[bytes, int] = {}
        for h, n in fresh:
            if isinstance(n, Leaf):
                item = at.get(n.value)
                rows.append((at[h], 1, n.key, n.value, None, item))
                if item is not None:
                    starts[n.value] = item
            else:
                rows.append(
                    (
                        at[h],
                        0,
                        n.left,
                        n.right,
                        None if n.left == EMPTY else at.get(n.left),
                        None if n.right == EMPTY else at.get(n.right),
                    )
                )
        return rows, starts, top, fresh[-1][0] if fresh else None


def _tops(nodes: Mapping[bytes, Node]) -> list[bytes]:
    """Return the nodes of ``nodes`` that no other of them names (the roots they make)."""
    named: set[bytes] = set()
    for n in nodes.values():
        if isinstance(n, Leaf):
            named.add(n.value)
        else:
            named.update((n.left, n.right))
    return [h for h in nodes if h not in named]


def _not_stored(h: bytes) -> IntegrityError:
    return IntegrityError(f"memory map node {h.hex()} is not stored (derived map incomplete)")


_STAGE: Final = "memroot_map_nodes_load"


class SortedLoad:
    """The nodes of a rebuild of the emptied ``memory_map_nodes``, written all at once.

    The rows go to a ``TEMP`` table in the order they come (appended, page after page), and
    ``close`` writes each distinct node once, in the order it was first staged, with its
    children's row numbers, so the node table is written from its first page to its last.
    Nothing may read the node table between the first ``put`` and ``close`` (a rebuild's
    replay keeps its maps in memory, ``MemNodes``); the temporary table is the
    transaction's, so a rollback drops it too.
    """

    def __init__(self, db: apsw.Connection) -> None:
        """Stage nodes for ``db``'s node table (inside a write transaction)."""
        self.db = db
        db.execute(
            f"DROP TABLE IF EXISTS temp.{_STAGE}; "
            f"CREATE TEMP TABLE {_STAGE}(hash BLOB NOT NULL, leaf INTEGER NOT NULL, "
            "a BLOB NOT NULL, b BLOB NOT NULL)"
        )
        self._roots: list[bytes] = []

    def put(self, nodes: Mapping[bytes, Node], roots: Iterable[bytes] = ()) -> None:
        """Stage ``nodes`` and the map ``roots`` they make (written by ``close``)."""
        self.db.executemany(
            f"INSERT INTO temp.{_STAGE} VALUES(?,?,?,?)",
            [
                (h, 1, n.key, n.value) if isinstance(n, Leaf) else (h, 0, n.left, n.right)
                for h, n in nodes.items()
            ],
        )
        self._roots.extend(roots)
        self._roots.extend(_tops(nodes))

    def close(self) -> int:
        """Write every staged node into the node table once; return how many rows."""
        install(self.db)
        db = self.db
        base = _one_int(db, "SELECT coalesce(max(at), 0) FROM memory_map_nodes")
        db.execute(
            f"DROP TABLE IF EXISTS temp.{_PLACES}; "
            f"CREATE TEMP TABLE {_PLACES}(hash BLOB PRIMARY KEY, first INTEGER NOT NULL, "
            "at INTEGER NOT NULL) WITHOUT ROWID"
        )
        db.execute(
            f"INSERT INTO temp.{_PLACES} SELECT hash, first, "
            "? + row_number() OVER (ORDER BY first) "
            f"FROM (SELECT hash, min(rowid) AS first FROM temp.{_STAGE} GROUP BY hash)",
            (base,),
        )
        before = db.total_changes()
        db.execute(
            "INSERT INTO memory_map_nodes(at, leaf, a, b, at_a, at_b) "
            "SELECT p.at, s.leaf, s.a, s.b, "
            f"CASE WHEN s.leaf = 0 THEN (SELECT at FROM temp.{_PLACES} WHERE hash = s.a) END, "
            f"(SELECT at FROM temp.{_PLACES} WHERE hash = s.b) "
            f"FROM temp.{_PLACES} AS p CROSS JOIN temp.{_STAGE} AS s ON s.rowid = p.first "
            "ORDER BY p.at"
        )
        written = int(db.total_changes() - before)
        db.executemany(
            f"INSERT OR IGNORE INTO memory_map_roots SELECT hash, at FROM temp.{_PLACES} "
            "WHERE hash = ?",
            [(h,) for h in dict.fromkeys(self._roots)],
        )
        db.execute(
            "INSERT OR IGNORE INTO memory_map_roots SELECT b, at_b FROM memory_map_nodes "
            "WHERE leaf = 1 AND at_b IS NOT NULL AND at > ?; "
            f"DROP TABLE temp.{_STAGE}; DROP TABLE temp.{_PLACES}",
            (base,),
        )
        return written
