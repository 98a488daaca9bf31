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

from collections.abc import Mapping
from typing import Final

import apsw

from memroot.ledger.errors import IntegrityError
from memroot.memory_root.state_map import Inner, Leaf, Node, leaf_hash, node_hash

__all__ = ["StoredNodes", "install"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS memory_map_nodes(
    hash BLOB PRIMARY KEY,
    leaf INTEGER NOT NULL CHECK(leaf IN (0, 1)),
    a BLOB NOT NULL,
    b BLOB NOT NULL
) STRICT, WITHOUT ROWID;
"""


def install(db: apsw.Connection) -> None:
    """Create the node table if missing (inside a write transaction)."""
    db.execute(_SCHEMA)


class StoredNodes:
    """The ``NodeSource`` of one derived-state connection, checking every node it reads.

    Nodes read (and checked) are kept in memory, up to ``cache`` of them: a node is known by
    its own hash, so one that was checked once is that node for good, whatever happens to
    its row later. The upper levels every path crosses are then read once, not per proof.
    """

    def __init__(self, db: apsw.Connection, *, cache: int = 1 << 16) -> None:
        """Read (and ``put``) nodes through ``db``, keeping up to ``cache`` checked nodes."""
        self.db = db
        self._cache: dict[bytes, Node] = {}
        self._limit = cache

    def node(self, h: bytes) -> Node | None:
        """Return the node stored under ``h``, or None when there is none.

        Raises:
            IntegrityError: if the stored row does not hash to ``h`` (an edited row).
        """
        known = self._cache.get(h)
        if known is not None:
            return known
        try:
            row = self.db.execute(
                "SELECT leaf, a, b FROM memory_map_nodes WHERE hash = ?", (h,)
            ).fetchone()
        except apsw.SQLError as e:
            if "no such table" in str(e):
                return None
            raise
        if row is None:
            return None
        leaf, a, b = row
        a, b = bytes(a), bytes(b)
        node: Node
        try:
            node, got = (Leaf(a, b), leaf_hash(a, b)) if leaf else (Inner(a, b), node_hash(a, b))
        except ValueError as e:
            raise IntegrityError(f"memory map node {h.hex()} is malformed: {e}") from e
        if got != h:
            raise IntegrityError(
                f"memory map node {h.hex()} was edited (its row hashes to {got.hex()})",
                expected=h.hex(),
                actual=got.hex(),
            )
        if len(self._cache) < self._limit:
            self._cache[h] = node
        return node

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
