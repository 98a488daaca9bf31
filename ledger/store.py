"""SQLite storage through apsw: the one narrow interface between the ledger and its file.

Everything the ledger persists goes through ``Store``; a later PostgreSQL backend replaces this
module, not the ledger. Tables (schema version 1):

- ``meta(key, value)``: ledger id, origin, schema version.
- ``branches(no, name, size, head)``: one row per branch; ``size`` and ``head`` are the chain
  head (number of entries, hash of the last), updated in the same transaction as the entries.
- ``entries(k, hash, data, digest, salt, content, erased_by)``: ``k = branch_no << 40 | seq``;
  ``data`` is the exact entry bytes; ``hash`` caches SHA-256(0x00 || data); events also carry
  their content, its BLAKE3 ``digest`` (the content address) and the commitment ``salt``. A
  TOMBSTONE sets ``digest``, ``salt`` and ``content`` to NULL and ``erased_by`` to its seq.
- ``nodes(k, h)``: every complete Merkle subtree with level >= 1,
  ``k = branch_no << 48 | level << 42 | index``; level-0 nodes are ``entries.hash``.
- ``event_ids(id, k)``: event UUID (16 bytes) to entry key.
- ``checkpoints(branch, size, root, note)``: signed checkpoint notes.

Entries are append-ordered rowid keys, so a batch fills pages sequentially (no random b-tree
inserts); ids we assign are UUIDv7 for the same reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

import apsw

from memroot.ledger.errors import NotFoundError, StorageError

__all__ = [
    "BRANCH_SHIFT",
    "SCHEMA_VERSION",
    "BranchRow",
    "EntryRow",
    "Store",
    "entry_key",
    "node_key",
]

SCHEMA_VERSION: Final = 1
BRANCH_SHIFT: Final = 40  # entries.k = branch_no << 40 | seq: 2**40 entries per branch
_NODE_BRANCH_SHIFT: Final = 48
_NODE_LEVEL_SHIFT: Final = 42
_BUSY_TIMEOUT_MS: Final = 60_000
_CACHE_MIN_LEVEL: Final = 3
_CACHE_MAX: Final = 1 << 18  # cached node hashes (~30 MB at most)

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value ANY) STRICT;
CREATE TABLE IF NOT EXISTS branches(
    no INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    head BLOB NOT NULL,
    parent TEXT,
    anchor INTEGER
) STRICT;
CREATE TABLE IF NOT EXISTS entries(
    k INTEGER PRIMARY KEY,
    hash BLOB NOT NULL,
    data BLOB NOT NULL,
    digest BLOB,
    salt BLOB,
    content BLOB,
    erased_by INTEGER
) STRICT;
CREATE TABLE IF NOT EXISTS nodes(k INTEGER PRIMARY KEY, h BLOB NOT NULL) STRICT;
CREATE TABLE IF NOT EXISTS event_ids(id BLOB PRIMARY KEY, k INTEGER NOT NULL)
    STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints(
    branch INTEGER NOT NULL,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    note TEXT NOT NULL,
    PRIMARY KEY(branch, size)
) STRICT, WITHOUT ROWID;
"""


def entry_key(branch_no: int, seq: int) -> int:
    """Return the ``entries.k`` of entry ``seq`` on branch ``branch_no``."""
    return branch_no << BRANCH_SHIFT | seq


def node_key(branch_no: int, level: int, index: int) -> int:
    """Return the ``nodes.k`` of the complete subtree ``(level, index)`` (level >= 1)."""
    return branch_no << _NODE_BRANCH_SHIFT | level << _NODE_LEVEL_SHIFT | index


@dataclass(frozen=True, slots=True)
class BranchRow:
    """A branch's chain head as stored."""

    no: int
    name: str
    size: int
    head: bytes


class EntryRow(NamedTuple):
    """One stored entry row: the bytes plus the event content columns.

    A named tuple, like ``Entry``: verify builds one per stored entry, and a tuple is built in
    a third of the time of a frozen dataclass.
    """

    seq: int
    hash: bytes
    data: bytes
    digest: bytes | None
    salt: bytes | None
    content: bytes | None
    erased_by: int | None


# Text is read as bytes and decoded here: apsw raises UnicodeDecodeError for a stored text
# value that is not UTF-8 (a damaged or edited file), which would escape every caller. Bad
# bytes become U+FFFD, so the value differs from anything genuine and verify reports it.
_AS_BLOB: Final = "CASE WHEN typeof({0}) = 'text' THEN CAST({0} AS BLOB) ELSE {0} END"


def _utf8(raw: bytes) -> str:
    return bytes(raw).decode("utf-8", "replace")


def _storage_error(e: apsw.Error, path: Path) -> StorageError:
    if isinstance(e, apsw.FullError):
        return StorageError(f"disk full while writing {path}: nothing was written")
    if isinstance(e, apsw.ReadOnlyError):
        return StorageError(f"{path} is read-only: nothing was written")
    if isinstance(e, apsw.BusyError):
        return StorageError(f"{path} stayed locked by another writer for too long; try again")
    if isinstance(e, apsw.CantOpenError):
        return StorageError(f"cannot open {path}: {e}")
    if isinstance(e, apsw.NotADBError | apsw.CorruptError):
        return StorageError(f"{path} is not a memroot ledger or is corrupt: {e}")
    return StorageError(f"storage error on {path}: {e}")


class Store:
    """An open ledger file. Not thread-safe: use one Store per thread or process."""

    def __init__(self, path: Path, *, create: bool = False, readonly: bool = False) -> None:
        """Open (or with ``create``, create) the SQLite file at ``path``.

        Raises:
            StorageError: if the file is missing (and not ``create``), exists (and ``create``),
                is not a ledger, or cannot be opened.
        """
        self.path = Path(path)
        self._write_depth = 0
        self._node_cache: dict[int, bytes] = {}
        exists = self.path.exists()
        if create and exists:
            raise StorageError(f"{self.path} already exists; refusing to overwrite a ledger")
        if not create and not exists:
            raise StorageError(f"no ledger at {self.path} (create one with `memroot init`)")
        flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE
        if create:
            flags |= apsw.SQLITE_OPEN_CREATE
        try:
            self.db = apsw.Connection(str(self.path), flags=flags)
            self.db.set_busy_timeout(_BUSY_TIMEOUT_MS)
            if not readonly:
                self.db.execute("PRAGMA journal_mode=WAL")
            # FULL: a commit that returned is on disk (SPEC 5: sign only what is durable).
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("PRAGMA cache_size=-65536")
            if create:
                with self.write():
                    self.db.execute(_SCHEMA)
                    self.db.execute(
                        "INSERT INTO meta VALUES('schema_version', ?)", (SCHEMA_VERSION,)
                    )
            version = self.meta("schema_version")
        except apsw.Error as e:
            raise _storage_error(e, self.path) from e
        if version != SCHEMA_VERSION:
            raise StorageError(
                f"{self.path} has schema version {version!r}; this memroot reads {SCHEMA_VERSION}"
            )

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self.db.close()

    # -- transactions ------------------------------------------------------------------------

    @contextlib.contextmanager
    def write(self) -> Iterator[apsw.Connection]:
        """Run the body as one ``BEGIN IMMEDIATE`` transaction: all of it commits, or none.

        IMMEDIATE takes the write lock up front, so two processes never both read the same
        chain head and append conflicting entries; the second waits (busy timeout) and then
        sees the first one's commit. Any exception, including a crash mid-batch (the WAL frame
        is never committed), a full disk or a refused entry, rolls everything back: entry rows,
        tree nodes, chain head and derived state land together or not at all.

        Raises:
            StorageError: if SQLite fails (disk full, read-only, locked too long).
        """
        if self._write_depth:
            # Nested in an open write (e.g. a bulk import): the outer one commits or rolls
            # back everything, so an error here must propagate to it untouched.
            self._write_depth += 1
            try:
                yield self.db
            finally:
                self._write_depth -= 1
            return
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except apsw.Error as e:
            raise _storage_error(e, self.path) from e
        self._write_depth = 1
        try:
            yield self.db
        except apsw.Error as e:
            # SQLite failing inside the body (disk full while pages spill, a damaged file)
            # is a StorageError like a failed COMMIT, not a raw apsw error for the caller.
            with contextlib.suppress(apsw.Error):
                self.db.execute("ROLLBACK")
            raise _storage_error(e, self.path) from e
        except BaseException:
            with contextlib.suppress(apsw.Error):
                self.db.execute("ROLLBACK")
            raise
        finally:
            self._write_depth = 0
        try:
            self.db.execute("COMMIT")
        except apsw.Error as e:
            with contextlib.suppress(apsw.Error):
                self.db.execute("ROLLBACK")
            raise _storage_error(e, self.path) from e

    @contextlib.contextmanager
    def read(self) -> Iterator[apsw.Connection]:
        """Run the body in one read transaction: a consistent snapshot of the file.

        Raises:
            StorageError: if SQLite fails.
        """
        if not self.db.in_transaction:
            try:
                self.db.execute("BEGIN DEFERRED")
            except apsw.Error as e:
                raise _storage_error(e, self.path) from e
            try:
                yield self.db
            finally:
                with contextlib.suppress(apsw.Error):
                    self.db.execute("COMMIT")
        else:
            yield self.db

    # -- meta and branches --------------------------------------------------------------------

    def meta(self, key: str) -> Any:
        """Return a meta value, or None."""
        row = self.db.execute(
            f"SELECT typeof(value) = 'text', {_AS_BLOB.format('value')} FROM meta WHERE key = ?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        return _utf8(row[1]) if row[0] else row[1]

    def set_meta(self, key: str, value: Any) -> None:
        """Set a meta value (inside a write transaction)."""
        self.db.execute("INSERT OR REPLACE INTO meta VALUES(?, ?)", (key, value))

    def branch(self, name: str) -> BranchRow:
        """Return the stored head of branch ``name``.

        Raises:
            NotFoundError: if there is no such branch.
        """
        row = self.db.execute(
            "SELECT no, CAST(name AS BLOB), size, head FROM branches WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no branch named {name!r}")
        return BranchRow(row[0], _utf8(row[1]), row[2], row[3])

    def branches(self) -> list[BranchRow]:
        """Return every branch, in creation order."""
        return [
            BranchRow(r[0], _utf8(r[1]), r[2], r[3])
            for r in self.db.execute(
                "SELECT no, CAST(name AS BLOB), size, head FROM branches ORDER BY no"
            )
        ]

    def add_branch(
        self, name: str, head: bytes, *, parent: str | None = None, anchor: int | None = None
    ) -> BranchRow:
        """Create an empty branch row (inside a write transaction) and return it.

        ``head`` is what the branch's genesis links to: zeros for ``main``, the hash of the
        ``BRANCH_CREATE`` entry (at seq ``anchor`` of ``parent``) for a fork.
        """
        self.db.execute(
            "INSERT INTO branches(name, size, head, parent, anchor) VALUES(?, 0, ?, ?, ?)",
            (name, head, parent, anchor),
        )
        return self.branch(name)

    def branch_parent(self, name: str) -> tuple[str | None, int | None]:
        """Return ``(parent, anchor seq)`` of a branch (None, None for main).

        Raises:
            NotFoundError: if there is no such branch.
        """
        row = self.db.execute(
            "SELECT parent, anchor FROM branches WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no branch named {name!r}")
        return row[0], row[1]

    def set_head(self, branch_no: int, size: int, head: bytes) -> None:
        """Move a branch's chain head (inside the write transaction that added the entries)."""
        self.db.execute(
            "UPDATE branches SET size = ?, head = ? WHERE no = ?", (size, head, branch_no)
        )

    # -- entries -------------------------------------------------------------------------------

    def insert_entries(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Insert ``(k, hash, data, digest, salt, content)`` rows (inside a write transaction)."""
        self.db.executemany(
            "INSERT INTO entries(k, hash, data, digest, salt, content) VALUES(?,?,?,?,?,?)", rows
        )

    def insert_event_ids(self, rows: Iterable[tuple[bytes, int]]) -> None:
        """Index event ids ``(uuid_bytes, k)`` (inside a write transaction)."""
        self.db.executemany("INSERT INTO event_ids(id, k) VALUES(?, ?)", rows)

    def insert_nodes(self, rows: Iterable[tuple[int, bytes]]) -> None:
        """Store completed subtree hashes ``(node_key, hash)`` (inside a write transaction)."""
        self.db.executemany("INSERT INTO nodes(k, h) VALUES(?, ?)", rows)

    def entry_row(self, branch_no: int, seq: int) -> EntryRow:
        """Return one stored entry row.

        Raises:
            NotFoundError: if there is no entry ``seq`` on that branch.
        """
        row = self.db.execute(
            "SELECT k, hash, data, digest, salt, content, erased_by FROM entries WHERE k = ?",
            (entry_key(branch_no, seq),),
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no entry {seq} on this branch")
        return EntryRow(row[0] & ((1 << BRANCH_SHIFT) - 1), *row[1:])

    def iter_entry_rows(
        self, branch_no: int, start: int = 0, stop: int | None = None, *, chunk: int = 4096
    ) -> Iterator[EntryRow]:
        """Yield entry rows of a branch with ``start <= seq < stop`` in seq order.

        Reads in chunks with short read transactions, so memory stays bounded and a long scan
        does not hold the WAL back from checkpointing.
        """
        lo = entry_key(branch_no, start)
        hi = entry_key(branch_no, (1 << BRANCH_SHIFT) - 1 if stop is None else stop)
        mask = (1 << BRANCH_SHIFT) - 1
        while True:
            rows: list[Any] = self.db.execute(
                "SELECT k, hash, data, digest, salt, content, erased_by FROM entries "
                "WHERE k >= ? AND k < ? ORDER BY k LIMIT ?",
                (lo, hi, chunk),
            ).fetchall()
            for r in rows:
                yield EntryRow(r[0] & mask, r[1], r[2], r[3], r[4], r[5], r[6])
            if len(rows) < chunk:
                return
            lo = rows[-1][0] + 1

    def event_key(self, event_id: bytes) -> int | None:
        """Return the entry key of an event id, or None."""
        row = self.db.execute("SELECT k FROM event_ids WHERE id = ?", (event_id,)).fetchone()
        return None if row is None else int(row[0])

    def erase_content(self, k: int, erased_by: int) -> None:
        """Erase an event's content and salt (a TOMBSTONE), inside a write transaction."""
        self.db.execute(
            "UPDATE entries SET digest = NULL, salt = NULL, content = NULL, erased_by = ? "
            "WHERE k = ?",
            (erased_by, k),
        )

    def lookup(self, table: str, key: str, value: str, keys: Sequence[Any]) -> dict[Any, Any]:
        """Return ``{key: value}`` for the rows of ``table`` whose ``key`` is in ``keys``.

        One ``IN`` query per 500 keys (SQLite's bound on parameters stays far away). ``table``
        and the column names are the store's own, never caller data.
        """
        found: dict[Any, Any] = {}
        keys = list(keys)
        for part in range(0, len(keys), 500):
            chunk = keys[part : part + 500]
            marks = ",".join("?" * len(chunk))
            for k, v in self.db.execute(
                f"SELECT {key}, {value} FROM {table} WHERE {key} IN ({marks})", chunk
            ):
                found[k] = v
        return found

    # -- tree nodes ----------------------------------------------------------------------------

    def read_nodes(self, branch_no: int, ids: Sequence[tuple[int, int]]) -> list[bytes]:
        """Return the hashes of complete subtrees ``(level, index)`` in the order asked.

        Level-0 nodes are ``entries.hash``; the others come from ``nodes``. A complete subtree
        never changes once written, so nodes of level >= ``_CACHE_MIN_LEVEL`` (1/8 of all
        nodes) are kept in a bounded in-process cache: the upper levels, which every proof and
        root touches, are then read once. ``memroot verify`` always reads the file itself.

        Raises:
            StorageError: if a node that must exist is missing (a damaged node cache; ``memroot
                verify`` reports it).
        """
        out: list[bytes | None] = [None] * len(ids)
        cache = self._node_cache
        leaves: list[tuple[int, int]] = []
        inner: list[tuple[int, int]] = []
        for pos, (lvl, i) in enumerate(ids):
            if lvl == 0:
                leaves.append((pos, branch_no << BRANCH_SHIFT | i))
                continue
            k = branch_no << _NODE_BRANCH_SHIFT | lvl << _NODE_LEVEL_SHIFT | i
            h = cache.get(k)
            if h is None:
                inner.append((pos, k))
            else:
                out[pos] = h
        for table, col, wanted in (("entries", "hash", leaves), ("nodes", "h", inner)):
            found = self.lookup(table, "k", col, [k for _, k in wanted])
            for pos, k in wanted:
                h = found.get(k)
                if h is None:
                    lvl, i = ids[pos]
                    raise StorageError(f"tree node ({lvl}, {i}) is missing from {self.path}")
                out[pos] = h
                if table == "nodes" and ids[pos][0] >= _CACHE_MIN_LEVEL:
                    if len(cache) >= _CACHE_MAX:
                        cache.clear()
                    cache[k] = h
        return out  # type: ignore[return-value]

    # -- checkpoints ---------------------------------------------------------------------------

    def insert_checkpoint(self, branch_no: int, size: int, root: bytes, note: str) -> None:
        """Store a signed checkpoint note (inside a write transaction)."""
        self.db.execute(
            "INSERT INTO checkpoints(branch, size, root, note) VALUES(?, ?, ?, ?)",
            (branch_no, size, root, note),
        )

    def checkpoints(self, branch_no: int) -> list[tuple[int, bytes, str]]:
        """Return ``(size, root, note)`` of every stored checkpoint of a branch, by size."""
        return [
            (int(s), bytes(r), _utf8(n))
            for s, r, n in self.db.execute(
                "SELECT size, root, CAST(note AS BLOB) FROM checkpoints WHERE branch = ? "
                "ORDER BY size",
                (branch_no,),
            )
        ]

    def latest_checkpoint(self, branch_no: int) -> tuple[int, bytes, str] | None:
        """Return the stored checkpoint with the largest size, or None."""
        row = self.db.execute(
            "SELECT size, root, CAST(note AS BLOB) FROM checkpoints WHERE branch = ? "
            "ORDER BY size DESC LIMIT 1",
            (branch_no,),
        ).fetchone()
        return None if row is None else (int(row[0]), bytes(row[1]), _utf8(row[2]))
