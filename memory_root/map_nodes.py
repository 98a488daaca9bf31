"""Stored memory-map nodes: one content-addressed table in the derived-state database.

``memory_map_nodes(hash, leaf, a, b)``: an interior node (``leaf = 0``) holds its children's
hashes in ``a``, ``b``; a leaf (``leaf = 1``) its key and value. Rows are keyed by the node's
own hash, so a subtree that did not change between two snapshots is one set of rows both
share, and a snapshot adds only the nodes on its changed paths (``state_map.update``).

The table is a cache like every derived table (on PostgreSQL it lives in the host's derived
SQLite file): nothing in it is trusted. Every node read is hashed again and must equal the
hash it was asked for, so a reader that starts from a root committed in a signed entry reads
either exactly the committed tree or an ``IntegrityError``.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from typing import Any, Final

import apsw

from memroot.ledger.errors import IntegrityError
from memroot.ledger.map_tree import check_rows_into, node_from_row
from memroot.memory_root.state_map import BatchRead, Leaf, Node, NodeRow

__all__ = ["FETCH_CHUNK", "SortedLoad", "StoredNodes", "install"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS memory_map_nodes(
    hash BLOB PRIMARY KEY,
    leaf INTEGER NOT NULL CHECK(leaf IN (0, 1)),
    a BLOB NOT NULL,
    b BLOB NOT NULL
) STRICT, WITHOUT ROWID;
"""

FETCH_CHUNK: Final = 2000
"""Hashes per query of ``fetch`` (SQLite takes 32,766 variables)."""


def install(db: apsw.Connection) -> None:
    """Create the node table if missing (inside a write transaction)."""
    db.execute(_SCHEMA)


class StoredNodes:
    """The ``NodeSource`` (and ``RowSource``) of one derived-state connection, checking reads.

    Nodes read (and checked) are kept in memory, up to ``cache`` of them: a node is known by
    its own hash, so one that was checked once is that node for good, whatever happens to
    its row later. The upper levels every path crosses are then read once, not per proof.
    ``node`` (one node per query, for updates) and ``fetch`` (many per query, for the
    batched proofs of ``state_map.prove_many``) keep one cache each.
    """

    def __init__(self, db: apsw.Connection, *, cache: int = 1 << 16, rows: int = 1 << 18) -> None:
        """Read (and ``put``) nodes through ``db``, keeping up to ``cache`` checked nodes.

        ``rows`` bounds ``known``, the batched walks' cache (about 250 bytes a node).
        """
        self.db = db
        self._cache: dict[bytes, Node] = {}
        self._limit = cache
        self._rows = rows
        self.known: dict[bytes, NodeRow] = {}

    def _select(self, sql: str, args: Collection[bytes]) -> list[Any]:
        try:
            return list(self.db.execute(sql, tuple(args)).fetchall())
        except apsw.SQLError as e:
            if "no such table" in str(e):
                return []
            raise

    def node(self, h: bytes) -> Node | None:
        """Return the node stored under ``h``, or None when there is none.

        Raises:
            IntegrityError: if the stored row does not hash to ``h`` (an edited row).
        """
        known = self._cache.get(h)
        if known is not None:
            return known
        rows = self._select("SELECT hash, leaf, a, b FROM memory_map_nodes WHERE hash = ?", (h,))
        if not rows:
            return None
        _, leaf, a, b = rows[0]
        node = node_from_row(h, bool(leaf), bytes(a), bytes(b))
        if len(self._cache) < self._limit:
            self._cache[h] = node
        return node

    def fetch(self, hashes: Collection[bytes]) -> None:
        """Read the nodes ``hashes`` into ``known``, ``FETCH_CHUNK`` per query, each checked.

        A hash with no row is left out (the caller names it). When ``known`` would pass its
        bound, its newer half is dropped first: the oldest nodes are the upper levels every
        path crosses (the walks read them first), and the nodes just read are always kept.

        Raises:
            IntegrityError: if a stored row does not hash to its hash (an edited row).
        """
        want = list(hashes)
        checked: dict[bytes, NodeRow] = {}
        for i in range(0, len(want), FETCH_CHUNK):
            self._read_into(want[i : i + FETCH_CHUNK], checked)
        if len(self.known) + len(checked) > self._rows:
            self.known = dict(itertools.islice(self.known.items(), self._rows // 2))
        self.known.update(checked)

    def map_reads(self) -> tuple[Mapping[bytes, NodeRow], BatchRead]:
        """Return the checked nodes at hand (``known``) and a batched read of others.

        The read (for ``state_map.update_map``) ``fetch``es the hashes it is given that are
        not at hand and returns each one's checked row, or None when it has none.

        Raises:
            IntegrityError: from the read, if a stored row does not hash to its hash.
        """

        def read(hashes: list[bytes]) -> list[Node | NodeRow | None]:
            known = self.known
            self.fetch([h for h in hashes if h not in known])
            known = self.known
            return [known.get(h) for h in hashes]

        return self.known, read

    def _read_into(self, chunk: list[bytes], into: dict[bytes, NodeRow]) -> None:
        """Read the stored nodes of ``chunk``'s hashes into ``into``, each checked.

        The hashes are looked up in their order (``CROSS JOIN``: the list is the outer loop)
        and the rows come back without their hash column, paired with the hash asked for:
        a value less to convert per row, and no temporary index of the list. The pairing is
        only a guess that each row's own hash confirms (``check_rows_into`` re-hashes every
        row under the hash it is paired with, all or nothing). When a hash is absent or a
        pairing does not hash, the chunk is read again by key, so that a missing row is left
        out and an edited one named, exactly as before.

        Raises:
            IntegrityError: if a stored row does not hash to its hash (an edited row).
        """
        values = ",".join(["(?)"] * len(chunk))
        got = self._select(
            f"SELECT n.leaf, n.a, n.b FROM (VALUES {values}) AS k "
            "CROSS JOIN memory_map_nodes AS n ON n.hash = k.column1",
            chunk,
        )
        if len(got) == len(chunk):
            try:
                check_rows_into([(h, *r) for h, r in zip(chunk, got, strict=True)], into)
            except IntegrityError:
                pass  # not the rows of these hashes in this order: read them by key
            else:
                return
        marks = ",".join("?" * len(chunk))
        check_rows_into(
            self._select(
                f"SELECT hash, leaf, a, b FROM memory_map_nodes WHERE hash IN ({marks})", chunk
            ),
            into,
        )

    def put(self, nodes: Mapping[bytes, Node]) -> int:
        """Store ``nodes`` (inside a write transaction); return how many rows were new."""
        install(self.db)
        before = self.db.total_changes()
        self.db.executemany(
            "INSERT OR IGNORE INTO memory_map_nodes VALUES(?,?,?,?)",
            [
                (h, 1, n.key, n.value) if isinstance(n, Leaf) else (h, 0, n.left, n.right)
                for h, n in nodes.items()
            ],
        )
        return int(self.db.total_changes() - before)


_STAGE: Final = "memroot_map_nodes_load"


class SortedLoad:
    """The nodes of a rebuild of the emptied ``memory_map_nodes``, written in key order.

    ``StoredNodes.put`` inserts each snapshot's new nodes under their hashes, which are
    random: every row lands on a page of its own in a b-tree far larger than the cache (548
    MB at 10^6 entries), so a rebuild read, dirtied and spilled a page per node. Here the
    rows go to a ``TEMP`` table in the order they come (appended, page after page), and
    ``close`` inserts them all at once ordered by hash, so the b-tree is built from its first
    page to its last, each page written once. Nothing may read the node table between the
    first ``put`` and ``close`` (a rebuild's replay keeps its maps in memory, ``MemNodes``);
    the temporary table is the transaction's, so a rollback drops it too.
    """

    def __init__(self, db: apsw.Connection) -> None:
        """Stage nodes for ``db``'s node table (inside a write transaction)."""
        self.db = db
        db.execute(
            f"DROP TABLE IF EXISTS temp.{_STAGE}; "
            f"CREATE TEMP TABLE {_STAGE}(hash BLOB NOT NULL, leaf INTEGER NOT NULL, "
            "a BLOB NOT NULL, b BLOB NOT NULL)"
        )

    def put(self, nodes: Mapping[bytes, Node]) -> None:
        """Stage ``nodes`` (written by ``close``)."""
        self.db.executemany(
            f"INSERT INTO temp.{_STAGE} VALUES(?,?,?,?)",
            [
                (h, 1, n.key, n.value) if isinstance(n, Leaf) else (h, 0, n.left, n.right)
                for h, n in nodes.items()
            ],
        )

    def close(self) -> int:
        """Write every staged node into the node table, in hash order; return how many rows."""
        install(self.db)
        before = self.db.total_changes()
        self.db.execute(
            f"INSERT OR IGNORE INTO memory_map_nodes SELECT hash, leaf, a, b FROM temp.{_STAGE} "
            f"ORDER BY hash; DROP TABLE temp.{_STAGE}"
        )
        return int(self.db.total_changes() - before)
