"""What the rebuild and fold tests compare: every derived table of a file, row for row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def derived_tables(db: Any, prefixes: Sequence[str]) -> dict[str, list[Any]]:
    """Every table of ``db`` whose name starts with one of ``prefixes``, rows sorted by ``repr``.

    The full-text index (``mem_fts``) by its shadow tables, not its virtual table.
    """
    names = [
        str(r[0])
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'mem_fts' "
            "ORDER BY name"
        )
        if str(r[0]).startswith(tuple(prefixes))
    ]
    return {n: sorted(db.execute(f"SELECT * FROM {n}").fetchall(), key=repr) for n in names}
