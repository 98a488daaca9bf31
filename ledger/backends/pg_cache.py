"""The derived-state cache of a PostgreSQL ledger: a local SQLite file per host.

``DerivedCache`` (the file), ``StoreView`` (the ledger as the cache knows it while catching
up), ``default_cache_path`` and ``with_ledger_schema`` (a copy of the cache as a ledger file,
for ``PgStore.copy_snapshot``). See ``memroot.ledger.backends.pg`` and docs/postgresql.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from memroot.ledger.backends.store import WRITER_STATEMENT_CACHE, BranchRow, Store
from memroot.ledger.errors import StorageError

__all__ = ["CACHE_ENVVAR", "DerivedCache", "StoreView", "default_cache_path", "with_ledger_schema"]


def with_ledger_schema(derived: Store, dst: Path) -> Store:
    """Copy the derived tables of ``derived`` to a new file ``dst``, add the ledger's tables."""
    import apsw

    from memroot.ledger.backends import store as sqlite_store

    derived.copy_snapshot(dst)
    conn = apsw.Connection(str(dst))
    try:
        with conn:
            conn.execute("DROP TABLE IF EXISTS cache_heads; DROP TABLE IF EXISTS cache_meta")
            conn.execute(sqlite_store._SCHEMA)
            conn.execute(
                "INSERT INTO meta VALUES('schema_version', ?)", (sqlite_store.SCHEMA_VERSION,)
            )
    finally:
        conn.close()
    return Store(dst)


CACHE_ENVVAR: Final = "MEMROOT_CACHE"
"""Names the local cache file of a PostgreSQL ledger's derived state (docs/postgresql.md)."""

_CACHE_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS cache_meta(key TEXT PRIMARY KEY, value ANY) STRICT;
CREATE TABLE IF NOT EXISTS cache_heads(
    branch TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    head BLOB NOT NULL
) STRICT;
"""


def default_cache_path(ledger_id: str, key_path: Path | None) -> Path:
    """Return where a PostgreSQL ledger's derived state is cached on this host.

    ``$MEMROOT_CACHE`` when set; else beside the signing key (``KEY.cache``) when one is
    named; else ``$XDG_CACHE_HOME/memroot/LEDGER_ID.cache`` (``~/.cache`` by default).
    """
    import os

    named = os.environ.get(CACHE_ENVVAR)
    if named:
        return Path(named)
    if key_path is not None:
        return Path(f"{key_path}.cache")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "memroot" / f"{ledger_id}.cache"


class DerivedCache(Store):
    """A host's local SQLite file holding the derived state of a PostgreSQL ledger.

    The layers above the ledger (memory model, roots, falsification, branches) keep their
    tables here, through the same hooks as in a ledger file; the entries stay in PostgreSQL.
    It is a cache: ``cache_heads`` records, per branch, the size and head hash of the ledger
    it has applied, ``cache_meta`` the ledger id, so a cache of another ledger, or of a
    ledger that was rolled back, is detected (and rebuilt) rather than trusted. Only
    ``write``/``read``/``on_commit`` and ``db`` of ``Store`` are meant to be used on it.
    """

    def __init__(self, path: Path, ledger_id: str) -> None:
        """Open (creating if missing) the cache at ``path`` for the ledger ``ledger_id``.

        A file that is no cache of this ledger (another ledger's id, not a SQLite file) is
        replaced by an empty cache.

        Raises:
            StorageError: if the file cannot be created or opened.
        """
        import apsw

        self.path = Path(path)
        self.readonly = False
        self._write_depth = 0
        self._node_cache = {}
        self._before_commit = []
        self._after_rollback = []
        self._after_commit = []
        self.ledger_id = ledger_id
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = self._open_file()
            if self.stored_id() not in (None, ledger_id):
                self.reset()
            with self.write() as db:
                db.execute("INSERT OR IGNORE INTO cache_meta VALUES('ledger_id', ?)", (ledger_id,))
        except apsw.Error as e:
            raise StorageError(f"cannot open the derived-state cache {self.path}: {e}") from e
        except OSError as e:
            raise StorageError(f"cannot create the derived-state cache {self.path}: {e}") from e

    def _open_file(self) -> Any:
        import apsw

        for attempt in range(2):
            db = apsw.Connection(str(self.path), statementcachesize=WRITER_STATEMENT_CACHE)
            try:
                db.set_busy_timeout(60_000)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")  # a cache: a lost commit is replayed
                db.execute(_CACHE_SCHEMA)
                return db
            except (apsw.NotADBError, apsw.CorruptError):
                db.close()
                if attempt:
                    raise
                self._unlink()
        raise AssertionError("unreachable")  # pragma: no cover

    def _unlink(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def stored_id(self) -> str | None:
        """Return the ledger id the cache was made for (None for a new cache)."""
        row = self.db.execute("SELECT value FROM cache_meta WHERE key = 'ledger_id'").fetchone()
        return None if row is None else str(row[0])

    def reset(self) -> None:
        """Replace the cache by an empty one (its state was not this ledger's)."""
        self.db.close()
        self._unlink()
        self.db = self._open_file()

    def heads(self) -> dict[str, tuple[int, bytes]]:
        """Return ``{branch: (size, head hash)}`` of what the cache has applied."""
        return {
            str(b): (int(s), bytes(h))
            for b, s, h in self.db.execute("SELECT branch, size, head FROM cache_heads")
        }

    def set_heads(self, heads: Iterable[tuple[str, int, bytes]]) -> None:
        """Record what the cache has applied (inside its write transaction)."""
        self.db.executemany("INSERT OR REPLACE INTO cache_heads VALUES(?, ?, ?)", list(heads))


class StoreView:
    """The ledger store as its derived-state cache knows it, while the cache catches up.

    Hooks replaying committed entries read branch heads through ``ledger.store``: this view
    answers ``branch``/``branches`` with the heads the cache has applied (the entry being
    replayed is the next one, as in a live append), everything else from the real store.
    With ``rows`` None it is the real store.
    """

    def __init__(self, real: Store) -> None:
        """Wrap ``real`` (a view of nothing until ``rows`` is set)."""
        self.real = real
        self.rows: dict[str, BranchRow] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def branch(self, name: str) -> BranchRow:
        """Return the applied head of ``name`` (the stored one for a branch not in the view)."""
        if self.rows is not None and name in self.rows:
            return self.rows[name]
        return self.real.branch(name)

    def branches(self) -> list[BranchRow]:
        """Return the branches the view knows, with their applied heads, in creation order."""
        if self.rows is None:
            return self.real.branches()
        rows = self.rows
        return [rows[b.name] for b in self.real.branches() if b.name in rows]
