"""SQLite storage through apsw: the one narrow interface between the ledger and its file.

Everything the ledger persists goes through ``Store``; a later PostgreSQL backend replaces this
module, not the ledger. Tables (schema version 2):

- ``meta(key, value)``: ledger id, origin, schema version.
- ``branches(no, name, size, head)``: one row per branch; ``size`` and ``head`` are the chain
  head (number of entries, hash of the last), updated in the same transaction as the entries.
- ``entries(k, hash, data, digest, salt, content, erased_by)``: ``k = branch_no << 40 | seq``;
  ``data`` is the exact entry bytes; ``hash`` caches SHA-256(0x00 || data); events also carry
  their content, its BLAKE3 ``digest`` (the content address) and the commitment ``salt``. A
  TOMBSTONE sets ``digest``, ``salt`` and ``content`` to NULL and ``erased_by`` to its seq.
- ``nodes(k, h)``: every complete Merkle subtree with level >= ``NODE_MIN_LEVEL`` (2),
  keyed by the tree size that completes it, ``k = branch_no << 48 | end << 6 | level`` with
  ``end = (index + 1) << level`` (schema version 3: an append's nodes all sort after every
  stored one, so their rows go at the end of the b-tree); level-0 nodes are ``entries.hash``
  and a level-1 node is folded from its two leaves. Versions 1 and 2 keyed them by level,
  ``branch_no << 48 | level << 42 | index`` (``level_node_key``), and version 1 also held
  level-1 rows, which nothing reads; a writer's open rewrites both (``_migrate``).
- ``event_ids(id, k)``: event UUID (16 bytes) to entry key.
- ``checkpoints(branch, size, root, note)``: signed checkpoint notes.

Entries are append-ordered rowid keys, so a batch fills pages sequentially (no random b-tree
inserts); ids we assign are UUIDv7 for the same reason.

Kept whole: ``Store`` is the store interface itself, one class whose every method the
PostgreSQL store (``backends.pg.PgStore``) overrides or inherits; its transactions, the read
transaction's memo (``read_memo``) and the reads that use it are one idea, split only at the
cost of the interface.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

import apsw

from memroot.ledger.backends import fds
from memroot.ledger.errors import IntegrityError, NotFoundError, StorageError

__all__ = [
    "BRANCH_SHIFT",
    "NODE_CACHE_MAX",
    "NODE_CACHE_MIN_LEVEL",
    "NODE_MIN_LEVEL",
    "SCHEMA_VERSION",
    "WRITER_STATEMENT_CACHE",
    "BranchRow",
    "EntryRow",
    "Store",
    "by_end_sql",
    "commit_counted",
    "entry_key",
    "level_node_key",
    "node_key",
    "pack_entry_row",
    "unpack_entry_row",
    "unpack_keyed",
]

SCHEMA_VERSION: Final = 1
"""The schema version of the PostgreSQL store's tables (``backends.pg``); a SQLite file
written before ``SQLITE_SCHEMA_VERSION`` 2 carries it too."""
SQLITE_SCHEMA_VERSION: Final = 3
"""The schema version a SQLite file is written with: version 1 stored level-1 nodes, and
versions 1 and 2 keyed the nodes by level (``level_node_key``)."""
_BY_LEVEL_VERSIONS: Final = (SCHEMA_VERSION, 2)
"""The SQLite schema versions whose ``nodes`` rows are keyed by level (read as they are)."""
NODE_MIN_LEVEL: Final = 2
"""The lowest level of the ``nodes`` rows a SQLite writer stores (and a reader reads); below
it a node is folded from its leaf hashes (``entries.hash``). As ``merkle::NODE_MIN_LEVEL``."""
BRANCH_SHIFT: Final = 40  # entries.k = branch_no << 40 | seq: 2**40 entries per branch
_NODE_BRANCH_SHIFT: Final = 48
_NODE_LEVEL_SHIFT: Final = 42
_NODE_END_SHIFT: Final = 6
_BUSY_TIMEOUT_MS: Final = 60_000
WRITER_STATEMENT_CACHE: Final = 512
"""Prepared statements a writing connection keeps (apsw's largest; its default is 100).

apsw's cache drops the statement run longest ago, counting every execution: an append with
the memory hooks runs more than 100 statements between two uses of the same one, so with the
default every hooked batch re-prepared its statements (12,753 misses in ``python
bench/bench_anchor_state.py``, 7,412 with 512; the gated bookkeeping's cost 19.6-21.5% ->
16.7-17.2% of the plain append, same plain rate).
"""

LOCK_NOTICE_MS: Final = 1_000
"""How long a write waits for another writer's lock before ``lock_wait_notice`` is told."""

lock_wait_notice: Callable[[Path], None] | None = None
"""Called (with the ledger's path) once a write has waited ``LOCK_NOTICE_MS`` for the lock.

None by default (the library says nothing); the CLI sets it to a notice on stderr.
"""

commits = 0
"""Write transactions this process committed that changed a row, on every backend (a
PostgreSQL commit counts always): the CLI's Ctrl-C message says from it whether anything
was written (a write commits whole or not at all)."""


def _count(changed: bool, by: int = 1) -> None:
    """Add ``by`` to ``commits`` for a transaction that changed a row."""
    global commits
    if changed:
        commits += by


def commit_counted(db: Any, changed: bool = True) -> None:
    """Run ``COMMIT`` on ``db`` (either backend's connection), counted in ``commits``.

    Counted before the COMMIT and taken back only if the transaction is still open after
    it: a Ctrl-C landing as a COMMIT returns finds it counted.
    """
    _count(changed)
    try:
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            _count(changed, -1)
        raise


_ROWS_MEMO_MAX: Final = 64
"""At most this many entry rows read in one statement are remembered for the read
transaction (``Store.iter_entry_rows``)."""
_CACHE_MIN_LEVEL: Final = 3
_CACHE_MAX: Final = 1 << 18  # cached node hashes (~30 MB at most)
NODE_CACHE_MIN_LEVEL: Final = _CACHE_MIN_LEVEL
"""Nodes of this level and above are kept in ``Store.node_cache``."""
NODE_CACHE_MAX: Final = _CACHE_MAX
"""``Store.node_cache`` is cleared when it holds this many hashes."""
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"

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


def by_end_sql(shift_type: str = "") -> str:
    """Return SQL computing the ``node_key`` of a row keyed by ``level_node_key`` (``k``).

    Every term parenthesized: SQL's bit operators share one precedence. ``shift_type`` casts
    the shift count (PostgreSQL shifts a bigint by an int: ``"::int"``).
    """
    level = "((k >> 42) & 63)"
    end = f"(((k & {(1 << 42) - 1}) + 1) << {level}{shift_type})"
    return f"((k >> 48) << 48) | ({end} << 6) | {level}"


_MIGRATE_NODES_SQL: Final = f"""
CREATE TABLE nodes_by_end(k INTEGER PRIMARY KEY, h BLOB NOT NULL) STRICT;
INSERT INTO nodes_by_end(k, h)
SELECT {by_end_sql()}, h FROM nodes WHERE ((k >> 42) & 63) >= {NODE_MIN_LEVEL} ORDER BY 1;
DROP TABLE nodes;
ALTER TABLE nodes_by_end RENAME TO nodes;
"""

_VALUES_MAX: Final = 128
"""Rows of the longest multi-row ``VALUES`` list ``Store._insert_pairs`` writes."""
_VALUES_SQL: dict[tuple[str, int], str] = {}
"""The statements of ``Store._insert_pairs`` by insert and row count."""
_TREE_ROWS_SQL: dict[tuple[int, int, bool], str] = {}
"""The statements of ``Store.tree_rows``/``tree_rows_of`` by key counts (and branch row)."""
_ARMS_MAX: Final = 64
"""Up to this many keys, ``_tree_rows_sql`` looks each up in its own ``UNION ALL`` arm."""


def _tree_rows_sql(leaves: int, nodes: int, *, branch: bool) -> str:
    """Return the statement reading ``leaves`` entry hashes and ``nodes`` node hashes.

    Rows come as ``(0, k, hash)`` and ``(1, k, h)``, after ``(2, size, no)`` of the branch
    named by the first parameter when ``branch``. An audit path (a few dozen keys) is read
    with one ``k = ?`` arm per key: an ``IN`` list makes SQLite build and sort a temporary
    index of its values first, which cost a proof at 10^6 about 2 us of its ~6 us of SQL
    with every page in the cache. Past ``_ARMS_MAX`` keys (SQLite allows 500 arms) the ``IN``
    lists are used.
    """
    sql = _TREE_ROWS_SQL.get((leaves, nodes, branch))
    if sql is not None:
        return sql
    arms = ["SELECT 2, size, no FROM branches WHERE name = ?"] if branch else []
    if leaves + nodes <= _ARMS_MAX:
        arms += ["SELECT 0, k, hash FROM entries WHERE k = ?"] * leaves
        arms += ["SELECT 1, k, h FROM nodes WHERE k = ?"] * nodes
    else:
        arms.append(f"SELECT 0, k, hash FROM entries WHERE k IN ({','.join('?' * leaves)})")
        arms.append(f"SELECT 1, k, h FROM nodes WHERE k IN ({','.join('?' * nodes)})")
    sql = " UNION ALL ".join(arms) if arms else "SELECT 0, 0, 0 WHERE 0"
    _TREE_ROWS_SQL[(leaves, nodes, branch)] = sql
    return sql


def _fold_leaves(hashes: list[bytes]) -> bytes:
    """Return the RFC 9162 hash of the perfect subtree over ``hashes`` (a power of two).

    ``SHA-256(0x01 || left || right)`` level by level: ``hashing.node_hash``, which this layer
    may not import (``tests/unit/ledger/test_store.py`` checks the two agree).
    """
    while len(hashes) > 1:
        hashes = [
            hashlib.sha256(b"\x01" + bytes(hashes[j]) + bytes(hashes[j + 1])).digest()
            for j in range(0, len(hashes), 2)
        ]
    return bytes(hashes[0])


def entry_key(branch_no: int, seq: int) -> int:
    """Return the ``entries.k`` of entry ``seq`` on branch ``branch_no``."""
    return branch_no << BRANCH_SHIFT | seq


def node_key(branch_no: int, level: int, index: int) -> int:
    """Return the ``nodes.k`` of the complete subtree ``(level, index)`` in a SQLite file.

    Keyed by the tree size that completes it (schema version 3, FORMAT.md 4): ``end = (index
    + 1) << level`` in bits 6-47 and the level in bits 0-5, so the nodes of an append sort
    after every stored one (``merkle::node_key``). Only levels >= ``NODE_MIN_LEVEL`` are
    stored; the key of a lower one names no row.
    """
    return branch_no << _NODE_BRANCH_SHIFT | (index + 1) << level << _NODE_END_SHIFT | level


def level_node_key(branch_no: int, level: int, index: int) -> int:
    """Return the ``nodes.k`` of ``(level, index)`` keyed by level.

    As PostgreSQL's tables and SQLite schema versions 1 and 2 key them:
    ``branch_no << 48 | level << 42 | index``.
    """
    return branch_no << _NODE_BRANCH_SHIFT | level << _NODE_LEVEL_SHIFT | index


PACK_HEAD: Final = 104
"""Bytes before an entry's own in a packed ``entries`` row (``pack_entry_row``)."""
_PACK_LEN: Final = 8  # the entry's length, in ASCII decimal digits
_ENTRY_PACK_SQL: Final = f"""
INSERT INTO entries(k, hash, digest, salt, data, content)
SELECT ?2 + rowid - 1, substr(value, 1, 32), substr(value, 33, 32), substr(value, 65, 32),
    substr(value, {PACK_HEAD + 1}, CAST(substr(value, 97, {_PACK_LEN}) AS INTEGER)),
    substr(value, {PACK_HEAD + 1} + CAST(substr(value, 97, {_PACK_LEN}) AS INTEGER))
FROM carray(?1)
"""
# carray numbers its rows from 1 in the order given (SQLite's carray.c, xRowid).
_EVENT_PACK_SQL: Final = (
    "INSERT INTO event_ids(id, k) SELECT substr(?2, 16 * rowid - 15, 16), value FROM carray(?1)"
)
_NODE_PACK_SQL: Final = (
    "INSERT INTO nodes(k, h) SELECT value, substr(?2, 32 * rowid - 31, 32) FROM carray(?1)"
)


def pack_entry_row(hash: bytes, data: bytes, digest: bytes, salt: bytes, content: bytes) -> bytes:
    """Return an event's ``entries`` row packed into one byte string (``Store.insert_entry_pack``).

    ``hash || digest || salt || len(data) as 8 decimal digits || data || content``: SQLite takes
    a batch of them apart in one statement, with no Python object per column. The native core
    packs the rows it builds the same way (``append::pack_row``).

    Raises:
        ValueError: if a hash, digest or salt is not 32 bytes or ``data`` is too long.
    """
    if not len(hash) == len(digest) == len(salt) == 32:
        raise ValueError("hash, digest and salt must be 32 bytes each")
    if len(data) >= 10**_PACK_LEN:
        raise ValueError(f"entry of {len(data)} bytes is too long to pack")
    return b"".join((hash, digest, salt, b"%08d" % len(data), data, content))


def unpack_entry_row(k: int, packed: bytes) -> tuple[int, bytes, bytes, bytes, bytes, bytes]:
    """Return the ``(k, hash, data, digest, salt, content)`` row of a packed one, keyed ``k``."""
    n = int(packed[96:PACK_HEAD])
    return (
        k,
        packed[:32],
        packed[PACK_HEAD : PACK_HEAD + n],
        packed[32:64],
        packed[64:96],
        packed[PACK_HEAD + n :],
    )


def unpack_keyed(values: bytes, keys: bytes, width: int) -> list[tuple[bytes, int]]:
    """Return the ``(value, key)`` pairs of packed rows.

    ``width``-byte values end to end and the keys as native 64-bit integers, as
    ``Store.insert_event_pack`` and ``insert_node_pack`` take them.

    Raises:
        ValueError: if the two do not hold the same number of rows.
    """
    ints = array.array("q")
    ints.frombytes(keys)
    if len(values) != width * len(ints):
        raise ValueError(f"{len(ints)} keys for {len(values)} bytes of {width}-byte values")
    return [(values[i * width : (i + 1) * width], k) for i, k in enumerate(ints)]


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


def _corrupt(e: apsw.Error, path: Path) -> IntegrityError:
    """Return the error for a SQLite file whose pages do not read back: the data's fault."""
    return IntegrityError(f"{path} is a corrupt SQLite file: {e}", step=1)


def _sniff(path: Path) -> None:
    """Refuse, before SQLite touches it, a file that cannot be a ledger (empty, not SQLite).

    Raises:
        StorageError: naming what the file is instead.
    """
    try:
        head = fds.pread(path, 0, len(_SQLITE_MAGIC))  # never close(): SQLite's locks stay
    except OSError as e:
        raise StorageError(f"cannot read {path}: {e.strerror}") from e
    if not head:
        raise StorageError(f"{path} is an empty file, not a memroot ledger; left untouched")
    if head != _SQLITE_MAGIC:
        raise StorageError(f"{path} is not a SQLite file, so not a memroot ledger; left untouched")


class Store:
    """An open ledger file. Not thread-safe: use one Store per thread or process."""

    # Class defaults, so the subclasses of ``memroot.ledger.backends.pg`` (which set their own
    # fields) have them too.
    _write_open: bool = False  # from BEGIN IMMEDIATE to its COMMIT or ROLLBACK
    node_min_level: int = NODE_MIN_LEVEL
    """The lowest level of the ``nodes`` rows this store's writers write and its verify
    checks: ``NODE_MIN_LEVEL`` for a SQLite file, 1 for the PostgreSQL store (its tables
    keep schema version 1's layout)."""
    takes_packs: bool = False
    """Whether a writer may hand this store packed rows (``insert_entry_pack`` and the like,
    SQLite's carray: a SQLite file); the PostgreSQL store takes rows (its COPY)."""
    node_by_end: bool = False
    """Whether ``nodes.k`` is ``node_key`` (by the tree size that completes a node: a SQLite
    file of schema version 3) or ``level_node_key`` (PostgreSQL, and a SQLite file of version
    1 or 2 opened read-only, which no open migrates)."""
    read_floor: Callable[[Path], object] | None = None
    """Set by a reader that wants ``floor``: called with the file's path before every read
    transaction begins (``projections.wal_pages.floor``: the WAL position it will see)."""
    floor: object = None
    """What ``read_floor`` returned before the current (or last) read transaction began."""
    _txn_version: int | None = None  # the ``data_version`` read in the open write
    _read_memo: dict[object, Any] | None = None
    """What the open read transaction (``read``) has read, by what was asked: the same
    statement in one snapshot gives the same rows (``read_memo``); None outside one."""
    _read_memo_changes: int = (
        -1
    )  # this connection's ``total_changes()`` when ``_read_memo`` was filled
    committed_version: int | None = None
    """The ``data_version`` read inside this connection's last committed write (None when
    that write read none or the last write rolled back): the file's number as of that COMMIT;
    a later commit by another connection shows in the next write's own read."""

    def __init__(self, path: Path, *, create: bool = False, readonly: bool = False) -> None:
        """Open (or with ``create``, create) the SQLite file at ``path``.

        ``readonly`` never writes to the file and never leaves a ``-wal``/``-shm`` it made
        beside a file that is not a ledger: an empty or non-SQLite file is refused before
        SQLite opens it, a SQLite file without memroot's tables is refused and closed as it
        was. On a read-only directory or medium (no ``-shm`` can be made) the ledger is opened
        as immutable, which needs its ``-wal`` to be empty or absent.

        Raises:
            StorageError: if the file is missing (and not ``create``), exists (and ``create``),
                is not a ledger, or cannot be opened.
            IntegrityError: if it is a SQLite file whose pages are corrupt (step 1).
        """
        self.path = Path(path)
        self.readonly = readonly
        self._write_depth = 0
        self.changes_at_begin = -1
        """This connection's ``total_changes()`` when the open outermost write began: with
        ``data_version``, a writer tells whether anything changed the file since its last commit."""
        self._node_cache: dict[int, bytes] = {}
        self._before_commit: list[Callable[[], None]] = []
        self._after_rollback: list[Callable[[], None]] = []
        self._after_commit: list[Callable[[], None]] = []
        exists = self.path.exists()
        if create and exists:
            raise StorageError(f"{self.path} already exists; refusing to overwrite a ledger")
        if not create and not exists:
            raise StorageError(f"no ledger at {self.path} (create one with `memroot init`)")
        if not create:
            _sniff(self.path)
        flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE
        if create:
            flags |= apsw.SQLITE_OPEN_CREATE
        side = [Path(f"{self.path}{x}") for x in ("-wal", "-shm")]
        had_side = [p.exists() for p in side]
        try:
            self.db = self._connect(flags, readonly)
            if not create and not self._has_schema():
                self.db.close()
                self._drop_new_side_files(side, had_side)
                raise StorageError(
                    f"{self.path} is a SQLite file but not a memroot ledger; left untouched"
                )
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
                        "INSERT INTO meta VALUES('schema_version', ?)", (SQLITE_SCHEMA_VERSION,)
                    )
            version = self.meta("schema_version")
            if version in _BY_LEVEL_VERSIONS and not readonly:
                version = self._migrate()
        except apsw.CorruptError as e:
            raise _corrupt(e, self.path) from e
        except apsw.NotADBError as e:
            if readonly:
                raise _corrupt(e, self.path) from e  # the magic was there: a damaged file
            raise _storage_error(e, self.path) from e
        except apsw.Error as e:
            raise _storage_error(e, self.path) from e
        if version not in (*_BY_LEVEL_VERSIONS, SQLITE_SCHEMA_VERSION):
            raise StorageError(
                f"{self.path} has schema version {version!r}; this memroot reads "
                f"{', '.join(map(str, _BY_LEVEL_VERSIONS))} and {SQLITE_SCHEMA_VERSION}"
            )
        self.node_by_end = version == SQLITE_SCHEMA_VERSION
        self.takes_packs = True

    def key_of_node(self, branch_no: int, level: int, index: int) -> int:
        """Return the ``nodes.k`` of ``(level, index)`` in this store (``node_by_end``)."""
        if self.node_by_end:
            return node_key(branch_no, level, index)
        return level_node_key(branch_no, level, index)

    def _migrate(self) -> int:
        """Bring a schema version 1 or 2 file to version 3 in one transaction; return it.

        Version 2 dropped the level-1 ``nodes`` rows (``NODE_MIN_LEVEL``); version 3 keys the
        rows by the tree size that completes them (``node_key``). The rows of level 2 and
        above are copied, re-keyed and in key order, into a new table that then replaces
        ``nodes`` (re-keying in place could collide with a key not yet rewritten), and the
        meta row says 3, or (an interrupted migration) none of it happened and the file is
        as before, which reads the same. Another writer may have migrated it first (the
        version is read again under the write lock).
        """
        with self.write():
            version = self.meta("schema_version")
            if version not in _BY_LEVEL_VERSIONS:
                return int(version)
            self.db.execute(_MIGRATE_NODES_SQL)
            self.set_meta("schema_version", SQLITE_SCHEMA_VERSION)
        return SQLITE_SCHEMA_VERSION

    def _connect(self, flags: int, readonly: bool) -> apsw.Connection:
        """Open the connection for a writer, or for a reader that never changes the file.

        A reader of a ledger in a writable directory opens it read-write but ``query_only``
        and without the checkpoint SQLite runs on close: it shares the WAL index with the
        writers like any reader (a ``SQLITE_OPEN_READONLY`` connection can be refused with
        "database is locked" while writers come and go) and still writes nothing to the
        file. On a read-only medium the file is opened read-only, and, when no ``-shm``
        can be made there, as immutable (nobody can be writing to it), provided no WAL
        content would be ignored.
        """
        if not readonly:
            db = apsw.Connection(
                str(self.path), flags=flags, statementcachesize=WRITER_STATEMENT_CACHE
            )
            db.set_busy_timeout(_BUSY_TIMEOUT_MS)
            return db
        writable = os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK)
        if writable and self._probe_is_ledger():
            db = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READWRITE)
            db.set_busy_timeout(_BUSY_TIMEOUT_MS)
            db.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            db.execute("PRAGMA query_only=1")
            return db
        db = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        db.set_busy_timeout(_BUSY_TIMEOUT_MS)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchall()
            return db
        except (apsw.CantOpenError, apsw.ReadOnlyError) as e:
            db.close()
            wal = Path(f"{self.path}-wal")
            if wal.exists() and wal.stat().st_size > 0:
                raise StorageError(
                    f"{self.path} is on a read-only medium with an unmerged {wal.name}: copy "
                    "both files to a writable directory to read them"
                ) from e
            uri = f"file:{self.path.resolve()}?mode=ro&immutable=1"
            immutable = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
            immutable.set_busy_timeout(_BUSY_TIMEOUT_MS)
            return immutable

    def _probe_is_ledger(self) -> bool:
        """Return True when a WAL-mode file holds memroot's tables, read without any change.

        Only then may a reader open it read-write (``_connect``). The WAL flag is read from
        the header (bytes 18-19 are 2 for WAL); the tables through a read-only connection,
        retried while writers hold the WAL index busy.
        """
        try:
            header = fds.pread(self.path, 0, 20)  # never close(): SQLite's locks stay
        except OSError:
            return False
        if header[18:20] != b"\x02\x02":
            return False
        for attempt in range(200):
            probe = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
            try:
                probe.set_busy_timeout(_BUSY_TIMEOUT_MS)
                names = {
                    str(r[0])
                    for r in probe.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                }
                return {"meta", "branches", "entries", "nodes", "checkpoints"} <= names
            except apsw.BusyError:
                time.sleep(min(0.001 * (attempt + 1), 0.05))
            except apsw.Error:
                return False
            finally:
                probe.close()
        return False

    def _has_schema(self) -> bool:
        """Return True when the file holds memroot's tables (checked before anything reads)."""
        names = {
            str(r[0])
            for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        return {"meta", "branches", "entries", "nodes", "checkpoints"} <= names

    @staticmethod
    def _drop_new_side_files(side: list[Path], had: list[bool]) -> None:
        """Remove ``-wal``/``-shm`` files this open created beside a file that is not a ledger."""
        for p, existed in zip(side, had, strict=True):
            if not existed:
                with contextlib.suppress(OSError):
                    p.unlink()

    def data_version(self) -> int | None:
        """Return SQLite's ``data_version``: it changes when another connection commits.

        A cache of something stored may keep its answer while this number stays the same
        (the engine's own commits are the caller's to track); None when the engine has no
        such number (then nothing may be cached).
        """
        if self._write_open and self._txn_version is not None:
            # Inside the write transaction nobody else can commit (we hold the write lock):
            # the number read at its first call holds until COMMIT or ROLLBACK.
            return self._txn_version
        memo = self.read_memo()
        if memo is not None and "data_version" in memo:
            # A read transaction's number is its snapshot's (the PRAGMA reads it at the
            # snapshot, which its first read takes): asked again, it gives the same.
            return memo["data_version"]  # type: ignore[no-any-return]
        row = self.db.execute("PRAGMA data_version").fetchone()
        version = None if row is None else int(row[0])
        if self._write_open:
            self._txn_version = version
        if memo is not None:
            memo["data_version"] = version
        return version

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
            self._begin_immediate()
        except apsw.Error as e:
            raise _storage_error(e, self.path) from e
        self.changes_at_begin = self.db.total_changes()
        self._write_open = True
        self._txn_version = None
        self.committed_version = None
        self._write_depth = 1
        try:
            yield self.db
        except apsw.Error as e:
            # SQLite failing inside the body (disk full while pages spill, a damaged file)
            # is a StorageError like a failed COMMIT, not a raw apsw error for the caller.
            with contextlib.suppress(apsw.Error):
                self.db.execute("ROLLBACK")
            self._rolled_back()
            raise _storage_error(e, self.path) from e
        except BaseException:
            with contextlib.suppress(apsw.Error):
                self.db.execute("ROLLBACK")
            self._rolled_back()
            raise
        finally:
            self._write_depth = 0
        try:
            # Still inside the transaction: what a callback writes (the ledger's signed
            # checkpoint) commits with the body or not at all.
            for callback in self._before_commit:
                callback()
            commit_counted(self.db, self.db.total_changes() != self.changes_at_begin)
        except BaseException as e:
            with contextlib.suppress(apsw.Error):
                self.db.execute("ROLLBACK")
            self._rolled_back()
            if isinstance(e, apsw.Error):
                raise _storage_error(e, self.path) from e
            raise
        self._write_open = False
        self.committed_version = self._txn_version
        for callback in self._after_commit:
            callback()

    def _begin_immediate(self) -> None:
        """Take the write lock; past ``LOCK_NOTICE_MS`` of waiting, tell ``lock_wait_notice``.

        The wait as a whole stays the busy timeout: another writer holding the lock longer
        than that is a StorageError ("locked"), never an endless wait.
        """
        notice = lock_wait_notice
        if notice is None:
            self.db.execute("BEGIN IMMEDIATE")
            return
        self.db.set_busy_timeout(LOCK_NOTICE_MS)
        try:
            try:
                self.db.execute("BEGIN IMMEDIATE")
                return
            except apsw.BusyError:
                notice(self.path)
            self.db.set_busy_timeout(_BUSY_TIMEOUT_MS - LOCK_NOTICE_MS)
            self.db.execute("BEGIN IMMEDIATE")
        finally:
            self.db.set_busy_timeout(_BUSY_TIMEOUT_MS)

    def on_commit(
        self,
        before: Callable[[], None],
        rollback: Callable[[], None],
        after: Callable[[], None] | None = None,
    ) -> None:
        """Run ``before`` inside every outermost write transaction right before its COMMIT.

        ``before`` may write (its rows commit with the transaction) or raise (the whole
        transaction rolls back); ``rollback`` runs after any rollback, so a caller's
        per-transaction bookkeeping never outlives it; ``after`` runs once the COMMIT is
        durable (what it does, e.g. send the checkpoint to a witness, cannot undo the commit).
        """
        self._before_commit.append(before)
        self._after_rollback.append(rollback)
        if after is not None:
            self._after_commit.append(after)

    def _rolled_back(self) -> None:
        self._write_open = False
        self._txn_version = None
        for callback in self._after_rollback:
            callback()

    @contextlib.contextmanager
    def read(self) -> Iterator[apsw.Connection]:
        """Run the body in one read transaction: a consistent snapshot of the file.

        Raises:
            StorageError: if SQLite fails.
        """
        if not self.db.in_transaction:
            if self.read_floor is not None:
                # Before the snapshot is taken (at the first read after BEGIN DEFERRED).
                self.floor = self.read_floor(self.path)
            try:
                self.db.execute("BEGIN DEFERRED")
            except apsw.Error as e:
                raise _storage_error(e, self.path) from e
            self._read_memo, self._read_memo_changes = {}, self.db.total_changes()
            try:
                yield self.db
            finally:
                self._read_memo = None
                with contextlib.suppress(apsw.Error):
                    self.db.execute("COMMIT")
        else:
            yield self.db

    def read_memo(self) -> dict[object, Any] | None:
        """Return what the open read transaction has read (``_read_memo``), or None outside one.

        One read transaction is one snapshot: a statement asked again in it gives the rows it
        gave (another connection's commit is not seen until the next transaction). Only this
        connection could change them, by writing: any row it writes (``total_changes``)
        empties the memo. Outside a read transaction ``read`` opened (in a write, in
        autocommit) nothing is remembered. A reader above the store may keep in it what it
        derived from rows read in the transaction (``StrictReader``: entries it decoded), by
        a key of its own (a tuple whose first item names it).
        """
        snap = self._read_memo
        if snap is None or not self.db.in_transaction:
            return None
        changes = self.db.total_changes()
        if changes != self._read_memo_changes:
            snap.clear()
            self._read_memo_changes = changes
        return snap

    def copy_snapshot(self, dst: Path) -> None:
        """Copy the whole file, as one read transaction sees it, to a new file ``dst``.

        SQLite's online backup copies every page in a single step, which holds one read
        transaction on this file: the copy is one consistent state, whatever writers commit
        meanwhile. ``verify`` runs every step (and every layer's check, which open the file
        by path) on such a copy, so concurrent appends never produce a finding.

        Raises:
            StorageError: if the copy cannot be written.
        """
        try:
            target = apsw.Connection(str(dst))
            try:
                with target.backup("main", self.db, "main") as b:
                    b.step(-1)
            finally:
                target.close()
        except apsw.CorruptError as e:
            raise _corrupt(e, self.path) from e
        except apsw.Error as e:
            raise _storage_error(e, Path(dst)) from e

    # -- meta and branches --------------------------------------------------------------------

    def meta(self, key: str) -> Any:
        """Return a meta value, or None (remembered for the read transaction, ``read_memo``)."""
        memo = self.read_memo()
        if memo is not None and ("meta", key) in memo:
            return memo["meta", key]
        row = self.db.execute(
            f"SELECT typeof(value) = 'text', {_AS_BLOB.format('value')} FROM meta WHERE key = ?",
            (key,),
        ).fetchone()
        value = None if row is None else _utf8(row[1]) if row[0] else row[1]
        if memo is not None:
            memo["meta", key] = value
        return value

    def set_meta(self, key: str, value: Any) -> None:
        """Set a meta value (inside a write transaction)."""
        self.db.execute("INSERT OR REPLACE INTO meta VALUES(?, ?)", (key, value))

    def delete_meta(self, key: str) -> None:
        """Remove a meta value (inside a write transaction)."""
        self.db.execute("DELETE FROM meta WHERE key = ?", (key,))

    def branch(self, name: str) -> BranchRow:
        """Return the stored head of branch ``name``.

        Raises:
            NotFoundError: if there is no such branch.
        """
        memo = self.read_memo()
        if memo is not None and "branches" in memo:
            for b in memo["branches"]:
                if b.name == name:
                    return b  # type: ignore[no-any-return]
        row = self.db.execute(
            "SELECT no, CAST(name AS BLOB), size, head FROM branches WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no branch named {name!r}")
        return BranchRow(row[0], _utf8(row[1]), row[2], row[3])

    def branches(self) -> list[BranchRow]:
        """Return every branch, in creation order (remembered for the read transaction)."""
        memo = self.read_memo()
        if memo is not None and "branches" in memo:
            return list(memo["branches"])
        rows = [
            BranchRow(r[0], _utf8(r[1]), r[2], r[3])
            for r in self.db.execute(
                "SELECT no, CAST(name AS BLOB), size, head FROM branches ORDER BY no"
            )
        ]
        if memo is not None:
            memo["branches"] = tuple(rows)
        return rows

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
        self._insert_pairs("INSERT INTO event_ids(id, k) VALUES", rows)

    def insert_nodes(self, rows: Iterable[tuple[int, bytes]]) -> None:
        """Store completed subtree hashes ``(node_key, hash)`` (inside a write transaction)."""
        self._insert_pairs("INSERT INTO nodes(k, h) VALUES", rows)

    def insert_entry_pack(self, first_k: int, rows: Sequence[bytes]) -> None:
        """Insert packed event rows (``pack_entry_row``) keyed ``first_k`` on, in one statement.

        One carray binding for the batch: the ~1 us a row of ``executemany`` spends binding
        six values from Python goes (BENCHMARKS.md, "The batched append's rows packed").
        """
        if rows:
            self.db.execute(_ENTRY_PACK_SQL, (apsw.carray(tuple(rows)), first_k))

    def insert_event_pack(self, ids: bytes, keys: bytes) -> None:
        """Index events from packed rows: 16-byte ids end to end, entry keys as native int64s."""
        if keys:
            self.db.execute(
                _EVENT_PACK_SQL, (apsw.carray(keys, flags=apsw.SQLITE_CARRAY_INT64), ids)
            )

    def insert_node_pack(self, keys: bytes, hashes: bytes) -> None:
        """Store subtree hashes from packed rows: keys as native int64s, 32-byte hashes."""
        if keys:
            self.db.execute(
                _NODE_PACK_SQL, (apsw.carray(keys, flags=apsw.SQLITE_CARRAY_INT64), hashes)
            )

    def _insert_pairs(self, insert: str, rows: Iterable[tuple[Any, Any]]) -> None:
        """Insert two-column rows with multi-row ``VALUES`` statements, up to 128 rows each.

        A row of ``executemany`` costs ~0.2 us more (BENCHMARKS.md, ``rows1``). The rest after
        the lists of 128 goes in powers of two: at most eight statement texts a table.
        """
        flat = [v for row in rows for v in row]
        start, left = 0, len(flat) // 2
        while left:
            width = _VALUES_MAX if left >= _VALUES_MAX else 1 << (left.bit_length() - 1)
            sql = _VALUES_SQL.get((insert, width))
            if sql is None:
                sql = _VALUES_SQL[(insert, width)] = insert + ",".join(["(?,?)"] * width)
            self.db.execute(sql, flat[start : start + 2 * width])
            start += 2 * width
            left -= width

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

    def entry_rows(self, branch_no: int, seqs: Sequence[int]) -> list[EntryRow]:
        """Return the stored rows at ``seqs`` of a branch (those that exist), by seq.

        Seqs that are a run (each once, consecutive: a check's entries re-read) are read as
        one range, a quarter cheaper than looking each key up.
        """
        return [EntryRow(*r) for r in self.entry_row_tuples(branch_no, seqs)]

    def entry_row_tuples(self, branch_no: int, seqs: Sequence[int]) -> list[tuple[Any, ...]]:
        """``entry_rows`` as plain tuples of the same fields, equal to each ``EntryRow``.

        For a caller that only compares rows (a kept check's entries, read again): no named
        tuple is built for each.
        """
        mask = (1 << BRANCH_SHIFT) - 1
        cols = "k & ?, hash, data, digest, salt, content, erased_by"
        if (
            1 < len(seqs) <= 500
            and seqs[0] >= 0
            and list(seqs) == list(range(seqs[0], seqs[0] + len(seqs)))
        ):
            return self.db.execute(
                f"SELECT {cols} FROM entries WHERE k >= ? AND k < ? ORDER BY k",
                (mask, entry_key(branch_no, seqs[0]), entry_key(branch_no, seqs[0] + len(seqs))),
            ).fetchall()
        keys = [entry_key(branch_no, s) for s in seqs]
        out: list[tuple[Any, ...]] = []
        for part in range(0, len(keys), 500):
            chunk = keys[part : part + 500]
            marks = ",".join("?" * len(chunk))
            out += self.db.execute(
                f"SELECT {cols} FROM entries WHERE k IN ({marks}) ORDER BY k", (mask, *chunk)
            ).fetchall()
        return out

    def iter_entry_rows(
        self, branch_no: int, start: int = 0, stop: int | None = None, *, chunk: int = 4096
    ) -> Iterator[EntryRow]:
        """Yield entry rows of a branch with ``start <= seq < stop`` in seq order.

        Reads in chunks with short read transactions, so memory stays bounded and a long scan
        does not hold the WAL back from checkpointing. In a read transaction, the last few
        rows read in one statement are remembered (``read_memo``): a read of rows among them (the
        strict read of the entries the head check read just before) asks nothing again.
        """
        memo = self.read_memo()
        if memo is not None:
            got = memo.get(("rows", branch_no))
            if (
                got is not None
                and got[0] <= start
                and (got[1] is None or (stop is not None and stop <= got[1]))
            ):
                yield from (r for r in got[2] if r.seq >= start and (stop is None or r.seq < stop))
                return
        lo = entry_key(branch_no, start)
        hi = entry_key(branch_no, (1 << BRANCH_SHIFT) - 1 if stop is None else stop)
        mask = (1 << BRANCH_SHIFT) - 1
        first = True
        while True:
            rows: list[Any] = self.db.execute(
                # The limit as an expression, not a bare parameter: with a bare one this
                # SQLite build plans the statement again each time it is bound (2-4x the
                # cost of reading a few rows, most after another connection's commit).
                "SELECT k, hash, data, digest, salt, content, erased_by FROM entries "
                "WHERE k >= ? AND k < ? ORDER BY k LIMIT CAST(? AS INTEGER)",
                (lo, hi, chunk),
            ).fetchall()
            got_rows = [EntryRow(r[0] & mask, r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]
            if memo is not None and first and len(rows) <= _ROWS_MEMO_MAX:
                # Every row of the branch from ``start`` up to ``end`` is among them.
                end = stop if len(rows) < chunk else got_rows[-1].seq + 1
                memo["rows", branch_no] = (start, end, tuple(got_rows))
            first = False
            yield from got_rows
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

        One ``IN`` query per 500 keys (SQLite's bound on parameters stays far away), with a
        power of two of placeholders (the last key repeated): few statement texts, each
        prepared once (apsw's statement cache). ``table`` and the column names are the
        store's own, never caller data.
        """
        found: dict[Any, Any] = {}
        keys = list(keys)
        for part in range(0, len(keys), 500):
            chunk = keys[part : part + 500]
            width = 1 << (len(chunk) - 1).bit_length()
            chunk += [chunk[-1]] * (width - len(chunk))
            marks = ",".join("?" * width)
            for k, v in self.db.execute(
                f"SELECT {key}, {value} FROM {table} WHERE {key} IN ({marks})", chunk
            ):
                found[k] = v
        return found

    # -- tree nodes ----------------------------------------------------------------------------

    def read_nodes(self, branch_no: int, ids: Sequence[tuple[int, int]]) -> list[bytes]:
        """Return the hashes of complete subtrees ``(level, index)`` in the order asked.

        Level-0 nodes are ``entries.hash``; a node below ``NODE_MIN_LEVEL`` is folded from
        its leaves (``entries.hash``, read in the same query); the others come from
        ``nodes``. A complete subtree never changes once written, so nodes of level >=
        ``_CACHE_MIN_LEVEL`` (1/8 of all nodes) are kept in a bounded in-process cache: the
        upper levels, which every proof and root touches, are then read once. ``memroot
        verify`` always reads the file itself.

        Raises:
            StorageError: if a node that must exist is missing (a damaged node cache; ``memroot
                verify`` reports it).
        """
        out: list[bytes | None] = [None] * len(ids)
        cache = self._node_cache
        leaves: list[tuple[int, int]] = []  # (position in out, or -1 for a folded leaf; key)
        folded: list[tuple[int, int, int]] = []  # (position, level, first leaf key)
        inner: list[tuple[int, int]] = []
        base = branch_no << BRANCH_SHIFT
        for pos, (lvl, i) in enumerate(ids):
            if lvl == 0:
                leaves.append((pos, base | i))
                continue
            if lvl < NODE_MIN_LEVEL:
                first = base | i << lvl
                folded.append((pos, lvl, first))
                leaves += [(-1, first + j) for j in range(1 << lvl)]
                continue
            k = self.key_of_node(branch_no, lvl, i)
            h = cache.get(k)
            if h is None:
                inner.append((pos, k))
            else:
                out[pos] = h
        found_leaves: dict[int, bytes] = {}
        for table, col, wanted in (("entries", "hash", leaves), ("nodes", "h", inner)):
            found = self.lookup(table, "k", col, [k for _, k in wanted])
            if table == "entries":
                found_leaves = found
            for pos, k in wanted:
                h = found.get(k)
                if h is None:
                    lvl, i = ids[pos] if pos >= 0 else (0, k - base)
                    raise StorageError(f"tree node ({lvl}, {i}) is missing from {self.path}")
                if pos < 0:
                    continue
                out[pos] = h
                if table == "nodes" and ids[pos][0] >= _CACHE_MIN_LEVEL:
                    if len(cache) >= _CACHE_MAX:
                        cache.clear()
                    cache[k] = h
        for pos, lvl, first in folded:
            out[pos] = _fold_leaves([found_leaves[first + j] for j in range(1 << lvl)])
        return out  # type: ignore[return-value]

    @property
    def node_cache(self) -> dict[int, bytes]:
        """The bounded cache of node hashes ``read_nodes`` keeps (the native proofs share it)."""
        return self._node_cache

    def tree_rows(
        self, leaf_keys: Sequence[int], node_keys: Sequence[int]
    ) -> list[tuple[int, int, bytes]]:
        """Return ``(0, k, hash)`` per ``entries`` row and ``(1, k, h)`` per ``nodes`` row asked.

        One query for an audit path's leaves and nodes (at most 500 keys of each; rows that
        do not exist are absent).
        """
        if len(leaf_keys) > 500 or len(node_keys) > 500:
            raise ValueError("tree_rows reads at most 500 keys of each kind")
        sql = _tree_rows_sql(len(leaf_keys), len(node_keys), branch=False)
        rows: list[Any] = self.db.execute(sql, [*leaf_keys, *node_keys]).fetchall()
        return rows

    def tree_rows_of(
        self, branch: str, leaf_keys: Sequence[int], node_keys: Sequence[int]
    ) -> tuple[tuple[int, int] | None, list[tuple[int, int, bytes]]]:
        """Return ``(size, no)`` of branch ``branch`` (None if absent) and ``tree_rows``.

        One statement: an inclusion proof reads the branch's size and its path together.
        """
        if len(leaf_keys) > 500 or len(node_keys) > 500:
            raise ValueError("tree_rows_of reads at most 500 keys of each kind")
        sql = _tree_rows_sql(len(leaf_keys), len(node_keys), branch=True)
        rows: list[Any] = self.db.execute(sql, [branch, *leaf_keys, *node_keys]).fetchall()
        for i, r in enumerate(rows):  # the first row, as SQLite runs the arms in order
            if r[0] == 2:
                del rows[i]
                return (r[1], r[2]), rows
        return None, rows

    # -- checkpoints ---------------------------------------------------------------------------

    def insert_checkpoint(self, branch_no: int, size: int, root: bytes, note: str) -> None:
        """Store a signed checkpoint note (inside a write transaction)."""
        self.db.execute(
            "INSERT INTO checkpoints(branch, size, root, note) VALUES(?, ?, ?, ?)",
            (branch_no, size, root, note),
        )

    def delete_checkpoint(self, branch_no: int, size: int) -> None:
        """Drop a superseded head checkpoint (retention, inside a write transaction)."""
        self.db.execute("DELETE FROM checkpoints WHERE branch = ? AND size = ?", (branch_no, size))

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
        """Return the stored checkpoint with the largest size, or None (kept, ``read_memo``)."""
        memo = self.read_memo()
        if memo is not None and ("checkpoint", branch_no) in memo:
            return memo["checkpoint", branch_no]  # type: ignore[no-any-return]
        row = self.db.execute(
            # CAST: the branch as an expression, as in ``iter_entry_rows`` (a bare parameter
            # before the ORDER BY has the statement planned again at each use).
            "SELECT size, root, CAST(note AS BLOB) FROM checkpoints "
            "WHERE branch = CAST(? AS INTEGER) ORDER BY size DESC LIMIT 1",
            (branch_no,),
        ).fetchone()
        got = None if row is None else (int(row[0]), bytes(row[1]), _utf8(row[2]))
        if memo is not None:
            memo["checkpoint", branch_no] = got
        return got
