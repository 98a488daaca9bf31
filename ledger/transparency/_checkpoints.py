"""Range reads of the store's signed checkpoints (the witness client and the tiles publisher).

Every append may sign a checkpoint, so "the checkpoints after size N" must not load every
note the ledger ever kept: these read only the rows asked for, with the store's connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memroot.ledger.backends.store import Store

__all__ = ["checkpoint_at", "checkpoints_after", "count_after"]


def checkpoints_after(store: Store, branch_no: int, size: int) -> list[tuple[int, bytes, str]]:
    """Return ``(size, root, note)`` of the branch's checkpoints larger than ``size``, by size.

    Raises:
        StorageError: if the ledger cannot be read.
    """
    with store.read() as db:
        rows: list[Any] = db.execute(
            "SELECT size, root, CAST(note AS BLOB) FROM checkpoints "
            "WHERE branch = ? AND size > ? ORDER BY size",
            (branch_no, size),
        ).fetchall()
    return [(int(r[0]), bytes(r[1]), bytes(r[2]).decode("utf-8")) for r in rows]


def count_after(store: Store, branch_no: int, size: int) -> int:
    """Return how many checkpoints of the branch are larger than ``size``."""
    with store.read() as db:
        rows: list[Any] = db.execute(
            "SELECT count(*) FROM checkpoints WHERE branch = ? AND size > ?", (branch_no, size)
        ).fetchall()
    return int(rows[0][0])


def checkpoint_at(store: Store, branch_no: int, size: int) -> str | None:
    """Return the stored note of the branch's checkpoint of ``size``, or None."""
    with store.read() as db:
        row: Any = db.execute(
            "SELECT CAST(note AS BLOB) FROM checkpoints WHERE branch = ? AND size = ?",
            (branch_no, size),
        ).fetchone()
    return None if row is None else bytes(row[0]).decode("utf-8")
