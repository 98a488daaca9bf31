"""A value per open store, valid while SQLite's ``data_version`` holds (no apsw import).

In its own module because the offline auditor (``memroot.ledger.bundle.audit``) reaches the witness
and tiles code that use it, and must run without apsw.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["VersionedCache"]


T = TypeVar("T")


class VersionedCache(Generic[T]):
    """One value per open store, kept while SQLite's ``data_version`` is the one it was read under.

    For what every sealed commit asks and almost nothing changes (are the witness tables
    there, the publish setting): another connection's commit moves ``data_version``, so the
    value is read again; this connection's own writer of the value calls ``forget`` before
    and after its write. A value read inside an open transaction (which may roll back) is
    not kept.
    """

    def __init__(self) -> None:
        """Start empty (stores are held weakly)."""
        self._seen: weakref.WeakKeyDictionary[Any, tuple[int, T]] = weakref.WeakKeyDictionary()

    def get(self, store: Any, version: int | None, read: Callable[[], T]) -> T:
        """Return the value kept for ``store`` under ``version``, else ``read()``.

        ``version``: the store's ``data_version`` the caller holds (None: nothing is kept).
        """
        kept = self._seen.get(store) if version is not None else None
        if kept is not None and kept[0] == version:
            return kept[1]
        value = read()
        if version is not None and not store.db.in_transaction:
            self._seen[store] = (version, value)
        return value

    def forget(self, store: Any) -> None:
        """Drop what is kept for ``store`` (its own connection is about to change it)."""
        self._seen.pop(store, None)
