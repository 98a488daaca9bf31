"""PostgreSQL storage (psycopg 3): a ``Store`` whose ledger lives in a PostgreSQL database.

``-l postgresql://...`` (or ``Ledger.open(url)``) opens one. The tables are those of the SQLite
store (``memroot.ledger.backends.store``) with PostgreSQL types (``BIGINT``, ``BYTEA``, ``TEXT``);
the entries, hashes, tree nodes and signed checkpoints stored are the same bytes, so a ledger
appended here and the same inputs appended to a file give the same roots and checkpoints.

Concurrency (docs/postgresql.md):

- A write is one READ COMMITTED transaction. The first read of a branch's head inside it
  (``branch``) takes ``SELECT ... FOR UPDATE`` on that branch's row: the one serialization
  point per branch. A second writer of the same branch waits there and then reads the head
  the first one committed, so many writers on many hosts extend one gap-free chain; writers
  of different branches do not wait for each other.
- A batch is one transaction: entries, tree nodes, event index, chain head and checkpoint
  commit together or not at all (a writer killed mid-batch leaves nothing).
- A read (``read``) is one REPEATABLE READ READ ONLY transaction: one snapshot.

The meta table keeps each value with its kind (``i`` integer, ``t`` text, ``b`` bytes), since
SQLite's ``ANY`` column keeps the type of what was stored.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from memroot.ledger.backends import store as _store
from memroot.ledger.backends.pg_cache import (
    CACHE_ENVVAR,
    DerivedCache,
    StoreView,
    default_cache_path,
    with_ledger_schema,
)
from memroot.ledger.backends.pg_snapshot import Commits, Snapshot
from memroot.ledger.backends.pg_translate import Catalog, translate
from memroot.ledger.backends.store import (
    BRANCH_SHIFT,
    SCHEMA_VERSION,
    BranchRow,
    EntryRow,
    Store,
    entry_key,
)
from memroot.ledger.errors import NotFoundError, StorageError

__all__ = [
    "CACHE_ENVVAR",
    "SCHEMES",
    "DerivedCache",
    "PgConnection",
    "PgStore",
    "StoreView",
    "default_cache_path",
    "is_url",
    "open_store",
    "redact",
]

SCHEMES: Final = ("postgresql://", "postgres://")
_LOCK_TIMEOUT: Final = "60s"  # as the SQLite busy timeout: a lock held longer is an error
_TABLES: Final = ("meta", "branches", "entries", "nodes", "event_ids", "checkpoints")

_SCHEMA: Final = (
    "CREATE TABLE meta(key TEXT PRIMARY KEY, kind CHAR(1) NOT NULL, value BYTEA NOT NULL)",
    """CREATE TABLE branches(
        no BIGINT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        size BIGINT NOT NULL,
        head BYTEA NOT NULL,
        parent TEXT,
        anchor BIGINT)""",
    """CREATE TABLE entries(
        k BIGINT PRIMARY KEY,
        hash BYTEA NOT NULL,
        data BYTEA NOT NULL,
        digest BYTEA,
        salt BYTEA,
        content BYTEA,
        erased_by BIGINT)""",
    "CREATE TABLE nodes(k BIGINT PRIMARY KEY, h BYTEA NOT NULL)",
    "CREATE TABLE event_ids(id BYTEA PRIMARY KEY, k BIGINT NOT NULL)",
    """CREATE TABLE checkpoints(
        branch BIGINT NOT NULL,
        size BIGINT NOT NULL,
        root BYTEA NOT NULL,
        note TEXT NOT NULL,
        PRIMARY KEY(branch, size))""",
    # What the ledger layer asks SQLite's catalog (does the witnesses table exist yet?).
    """CREATE VIEW sqlite_master AS
        SELECT CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' ELSE 'index' END
               AS type, c.relname::text AS name, c.relname::text AS tbl_name
        FROM pg_class c
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'v', 'i')""",
)

_ENTRY_COLS: Final = "k, hash, data, digest, salt, content, erased_by"
_MASK: Final = (1 << BRANCH_SHIFT) - 1
_VERSION: Final = "xmin::text || '/' || ctid::text"
"""A stored row's version: the transaction that wrote it and where it lies. An ``UPDATE``
writes a new version (another transaction, another place), so an unchanged version is the
row read before, byte for byte (``entry_rows``; a ``VACUUM FULL`` moves rows: read again)."""
_VERSIONS_MAX: Final = 1 << 14
_KEPT_RANGE: Final = 64
"""A range of entries this long, all read already in a read transaction, is not read again."""
_TAIL_ROWS: Final = 8
"""Entry rows read with the newest checkpoint, ending at its last (``latest_checkpoint``)."""
_E_ENTRY_COLS: Final = ", ".join("e." + c for c in _ENTRY_COLS.split(", "))
_BEGIN_READ: Final = (
    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; "
    "SELECT b.no, b.name, b.size, b.head, "
    f"(SELECT max(e.k) FROM entries e WHERE e.k >= b.no << {BRANCH_SHIFT} "
    f"AND e.k < (b.no + 1) << {BRANCH_SHIFT}), pg_current_snapshot()::text "
    "FROM branches b ORDER BY b.no"
)
"""Opens a read transaction and reads, in its snapshot, what ``Snapshot`` holds: one round
trip (the snapshot is taken at the SELECT, the first statement after BEGIN)."""
_COMMIT_OWN: Final = "SELECT pg_current_xact_id_if_assigned()::text; COMMIT"
"""Commits a write and says its transaction id (none when it wrote nothing): one round trip."""


def is_url(target: object) -> bool:
    """Return True when ``target`` names a PostgreSQL ledger (a ``postgresql://`` URL)."""
    return isinstance(target, str) and target.startswith(SCHEMES)


def open_store(target: Path | str, *, readonly: bool = False) -> Store:
    """Open the ledger at ``target``: a ``PgStore`` for a PostgreSQL URL, else a file ``Store``.

    Raises:
        StorageError: as ``Store`` / ``PgStore``.
    """
    if is_url(target):
        return PgStore(str(target), readonly=readonly)
    return Store(Path(target), readonly=readonly)


def redact(url: str) -> str:
    """Return ``url`` with any password replaced by ``***`` (for messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable PostgreSQL URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class PgCursor:
    """The rows of one statement, read like an apsw cursor (iterate, fetchone, fetchall)."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        """Wrap the fetched ``rows``."""
        self._rows = rows
        self._pos = 0

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        while self._pos < len(self._rows):
            self._pos += 1
            yield self._rows[self._pos - 1]

    def fetchone(self) -> tuple[Any, ...] | None:
        """Return the next row, or None."""
        if self._pos >= len(self._rows):
            return None
        self._pos += 1
        return self._rows[self._pos - 1]

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Return the rows not read yet."""
        rest = self._rows[self._pos :]
        self._pos = len(self._rows)
        return rest


class PgConnection:
    """The part of apsw's ``Connection`` the ledger layer's own SQL uses, over psycopg.

    ``execute`` / ``executemany`` take the SQLite dialect of the ledger layer's own SQL
    (witnesses, tiles, key rotation, verify) and run its PostgreSQL form (``translate``,
    cached per statement). The layers above the ledger (memory model, roots, falsification)
    do not run their SQL here: their tables live in the host's ``DerivedCache``.
    """

    def __init__(self, conn: Any, where: str) -> None:
        """Wrap an open psycopg connection (autocommit mode: transactions are explicit)."""
        self.conn = conn
        self.where = where
        self.statements = 0  # round trips to the server (benchmarks and tests count them)
        self._changes = 0
        self._cache: dict[str, str] = {}
        self._catalog = Catalog(conn)

    def _sql(self, sql: str) -> str:
        got = self._cache.get(sql)
        if got is None:
            got = self._cache[sql] = translate(sql, self._catalog)
        return got

    def execute(self, sql: str, bindings: Sequence[Any] | None = None) -> PgCursor:
        """Run one statement and return its rows.

        Raises:
            StorageError: if PostgreSQL refuses it or the connection is lost.
        """
        import psycopg

        self.statements += 1
        try:
            cur = self.conn.execute(self._sql(sql), bindings)
            self._changes = max(cur.rowcount, 0)
            return PgCursor(cur.fetchall() if cur.description is not None else [])
        except psycopg.Error as e:
            raise pg_error(e, self.where) from e

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement once per row of ``rows``.

        Raises:
            StorageError: if PostgreSQL refuses a row or the connection is lost.
        """
        import psycopg

        rows = list(rows)
        if not rows:
            return
        self.statements += 1
        try:
            with self.conn.cursor() as cur:
                cur.executemany(self._sql(sql), rows)
        except psycopg.Error as e:
            raise pg_error(e, self.where) from e

    def changes(self) -> int:
        """Return the number of rows the last ``execute`` changed."""
        return self._changes

    @property
    def in_transaction(self) -> bool:
        """True inside an open transaction."""
        from psycopg import pq

        return bool(self.conn.info.transaction_status != pq.TransactionStatus.IDLE)

    def readonly(self, name: str = "main") -> bool:
        """Return True when the session cannot write (a read-only ``PgStore``)."""
        row = self.execute("SHOW default_transaction_read_only").fetchone()
        return row is not None and row[0] == "on"

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self.conn.close()


def pg_error(e: Exception, where: str) -> StorageError:
    """Return the ``StorageError`` for a psycopg error, naming what went wrong in plain words."""
    import psycopg
    from psycopg import errors

    if isinstance(e, errors.LockNotAvailable):
        return StorageError(f"{where} stayed locked by another writer for too long; try again")
    if isinstance(e, errors.SerializationFailure | errors.DeadlockDetected):
        return StorageError(f"{where}: a concurrent writer conflicted with this one; try again")
    if isinstance(e, errors.ReadOnlySqlTransaction):
        return StorageError(f"{where} is opened read-only: nothing was written")
    if isinstance(e, errors.DiskFull):
        return StorageError(f"disk full on the PostgreSQL server of {where}: nothing was written")
    if isinstance(e, errors.InsufficientPrivilege):
        return StorageError(f"{where}: permission denied: {_first_line(e)}")
    if isinstance(e, psycopg.OperationalError):
        return StorageError(f"lost or refused the connection to {where}: {_first_line(e)}")
    return StorageError(f"storage error on {where}: {_first_line(e)}")


def connect(url: str, *, readonly: bool = False) -> Any:
    """Open a psycopg connection to ``url`` (autocommit; the session as the store needs it).

    Raises:
        StorageError: if psycopg is not installed, the URL is malformed or the server cannot
            be reached or refuses the login.
    """
    where = redact(url)
    try:
        import psycopg
    except ImportError as e:
        raise StorageError(
            "a PostgreSQL ledger needs psycopg: pip install 'memroot[postgres]'"
        ) from e
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.ProgrammingError as e:
        raise StorageError(f"bad PostgreSQL URL {where}: {_first_line(e)}") from e
    except psycopg.Error as e:
        raise StorageError(f"cannot connect to PostgreSQL at {where}: {_first_line(e)}") from e
    try:
        conn.execute(f"SET lock_timeout = '{_LOCK_TIMEOUT}'")
        conn.execute("SET client_min_messages = warning")
        if readonly:
            conn.execute("SET default_transaction_read_only = on")
    except psycopg.Error as e:
        conn.close()
        raise pg_error(e, where) from e
    return conn


def _meta_value(kind: str, raw: bytes) -> Any:
    if kind == "i":
        return int(raw)
    if kind == "t":
        return bytes(raw).decode("utf-8", "replace")
    return bytes(raw)


def _meta_row(value: Any) -> tuple[str, bytes]:
    if isinstance(value, bool) or not isinstance(value, int | str | bytes):
        raise StorageError(f"a meta value must be an integer, text or bytes, not {value!r}")
    if isinstance(value, int):
        return "i", str(value).encode()
    if isinstance(value, str):
        return "t", value.encode()
    return "b", value


_NAME_RE: Final = re.compile(r"[a-z_]+")


class PgStore(Store):
    """An open PostgreSQL ledger: ``Store``'s methods over one psycopg connection.

    Not thread-safe: one PgStore per thread or process, like ``Store``.

    ``db`` is a ``PgConnection``: the part of apsw's ``Connection`` API the ledger layer's
    own SQL uses. The layers above annotate ``apsw.Connection``; their tables are in the
    ledger's ``derived`` store (a ``DerivedCache``), never here, hence the override of the
    attribute's type.
    """

    db: PgConnection  # type: ignore[assignment]
    node_min_level = 1  # PostgreSQL keeps its level-1 nodes rows (FORMAT.md 4)

    def __init__(self, url: str, *, create: bool = False, readonly: bool = False) -> None:
        """Connect to the database at ``url`` (with ``create``, make the ledger's tables).

        Raises:
            StorageError: if the server cannot be reached, the database holds no ledger
                (and not ``create``) or already holds one (and ``create``).
        """
        self.url = url
        self.where = redact(url)
        self.path = Path(self.where)  # for messages only; no file is read or written
        self.readonly = readonly
        self._write_depth = 0
        self._node_cache: dict[int, bytes] = {}
        self._before_commit = []
        self._after_rollback = []
        self._after_commit = []
        self._snap: Snapshot | None = None
        self.commits = Commits()
        self._unique = 0
        self._versions: dict[int, tuple[str, EntryRow]] = {}
        conn = connect(url, readonly=readonly)
        self.db = PgConnection(conn, self.where)
        try:
            have = self._tables()
            if create:
                if have:
                    raise StorageError(
                        f"{self.where} already holds memroot tables ({', '.join(sorted(have))}); "
                        "refusing to overwrite a ledger"
                    )
                with self.write():
                    for statement in _SCHEMA:
                        self.db.execute(statement)
                    self.set_meta("schema_version", SCHEMA_VERSION)
            elif set(_TABLES) - have:
                raise StorageError(
                    f"no memroot ledger in {self.where} (create one with `memroot init`)"
                )
            version = self.meta("schema_version")
        except BaseException:
            self.db.close()
            raise
        if version != SCHEMA_VERSION:
            self.db.close()
            raise StorageError(
                f"{self.where} has schema version {version!r}; this memroot reads {SCHEMA_VERSION}"
            )

    def _tables(self) -> set[str]:
        rows = self.db.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_name = ANY(?)",
            (list(_TABLES),),
        ).fetchall()
        return {str(r[0]) for r in rows}

    def data_version(self) -> int | None:
        """Return None: PostgreSQL has no per-connection commit counter (nothing is cached)."""
        return None

    def commit_token(self) -> str:
        """Return what moves whenever any transaction committed since: anyone's, or this one's.

        Two equal answers mean that nothing committed between them: neither this
        connection (``Commits.mine``) nor any other transaction of the server
        (``foreign_token``). A cache of what was checked (the read gate's,
        ``projections.strict_rows``) holds while it does not change; unlike
        ``data_version`` it moves on this connection's own writes. Inside a write
        transaction every answer is new (its snapshot changes statement by statement, and
        its own writes are not committed yet): nothing checked there is kept.

        Raises:
            StorageError: if PostgreSQL fails.
        """
        return f"{self.foreign_token()}:{self.commits.mine}"

    def foreign_token(self) -> str:
        """Return what moves whenever a transaction other than this connection's committed.

        The snapshot read in (``pg_current_snapshot()``: inside a ``REPEATABLE READ``
        transaction, that transaction's) is compared with the one seen before it
        (``Commits.observe``): the transactions that ended in between are exactly known,
        and when each is one this connection committed, the answer stays the same. Like
        SQLite's ``data_version``, which moves on every other connection's commit and never
        on this one's. Any other transaction of the server (another host, an edit of a
        table, a write to another database) moves it. Inside a write transaction every
        answer is new.

        Raises:
            StorageError: if PostgreSQL fails.
        """
        if self._write_depth:
            self._unique += 1
            return f"w{self._unique}"
        text = self._snapshot_text()
        self.commits.observe(text)
        return str(self.commits.foreign)

    def _snapshot_text(self) -> str:
        snap = self._snap
        if snap is not None and snap.text is not None:
            return snap.text
        row = self.db.execute("SELECT pg_current_snapshot()::text").fetchone()
        text = "" if row is None else str(row[0])
        if snap is not None:
            snap.text = text
        return text

    def drop(self) -> None:
        """Drop the ledger's tables and close: undo a ``memroot init`` that failed half-way."""
        with contextlib.suppress(Exception):
            self.db.execute("DROP VIEW IF EXISTS sqlite_master")
            self.db.execute(f"DROP TABLE IF EXISTS {', '.join(_TABLES)}")
        self.db.close()

    # -- transactions ------------------------------------------------------------------------

    @contextlib.contextmanager
    def write(self) -> Iterator[Any]:
        """Run the body as one transaction: all of it commits, or none.

        Branch heads are locked as the body first reads them (``branch``), so the body
        serializes with every other writer of the same branch, on any host. An exception
        (a refused entry, a lost connection, a killed process: the server rolls back a
        transaction whose client went away) leaves nothing written.

        Raises:
            StorageError: if PostgreSQL fails (connection lost, lock held too long, conflict).
        """
        if self._write_depth:
            self._write_depth += 1
            try:
                yield self.db
            finally:
                self._write_depth -= 1
            return
        if self.readonly:
            raise StorageError(f"{self.where} is opened read-only: nothing was written")
        self.db.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        self._write_depth = 1
        try:
            yield self.db
        except BaseException:
            self._rollback()
            raise
        finally:
            self._write_depth = 0
        try:
            for callback in self._before_commit:
                callback()
            _store.commit_counted(_Committing(self))  # as the SQLite store counts it
        except BaseException:
            self._rollback()
            raise
        for callback in self._after_commit:
            callback()

    def _rollback(self) -> None:
        with contextlib.suppress(Exception):
            self.db.execute("ROLLBACK")
        self._rolled_back()

    @contextlib.contextmanager
    def read(self) -> Iterator[Any]:
        """Run the body in one REPEATABLE READ READ ONLY transaction: one snapshot.

        Raises:
            StorageError: if PostgreSQL fails.
        """
        if self.db.in_transaction:
            yield self.db
            return
        self._snap = Snapshot(self._begin_read())
        try:
            yield self.db
        finally:
            self._snap = None
            with contextlib.suppress(Exception):
                self.db.execute("COMMIT")

    def _begin_read(self) -> list[tuple[Any, ...]]:
        """Open the read transaction and read its ``Snapshot`` rows (``_BEGIN_READ``)."""
        import psycopg

        self.db.statements += 1
        try:
            cur = self.db.conn.execute(_BEGIN_READ)
            cur.nextset()  # past BEGIN's result, to the SELECT's
            rows: list[tuple[Any, ...]] = cur.fetchall()
            return rows
        except psycopg.Error as e:
            with contextlib.suppress(Exception):
                self.db.execute("ROLLBACK")
            raise pg_error(e, self.where) from e

    def _snapshot(self) -> Snapshot | None:
        """Return the open read transaction's ``Snapshot`` (None in a write or outside a read)."""
        return None if self._write_depth else self._snap

    def copy_snapshot(self, dst: Path, derived: Store | None = None) -> None:
        """Copy the ledger, as one REPEATABLE READ transaction sees it, to a new SQLite file.

        The copy is an ordinary memroot ledger file (the same rows): ``verify`` runs every
        step on it, and it can be exported, audited or read like any other. With ``derived``
        (a ``DerivedCache`` the caller caught up to this same snapshot, inside one ``read``)
        the copy also holds its derived tables, as a ledger file holds its own.

        Raises:
            StorageError: if the ledger cannot be read or the file cannot be written.
        """
        if derived is None:
            target = Store(Path(dst), create=True)
        else:
            target = with_ledger_schema(derived, Path(dst))
        try:
            with self.read(), target.write() as out:
                for key, kind, raw in self.db.execute("SELECT key, kind, value FROM meta"):
                    if key != "schema_version":
                        out.execute(
                            "INSERT OR REPLACE INTO meta VALUES(?, ?)",
                            (key, _meta_value(kind, raw)),
                        )
                out.executemany(
                    "INSERT INTO branches(no, name, size, head, parent, anchor) "
                    "VALUES(?,?,?,?,?,?)",
                    self.db.execute(
                        "SELECT no, name, size, head, parent, anchor FROM branches ORDER BY no"
                    ).fetchall(),
                )
                # No level-1 nodes into a layout 3 file, the others keyed by ``node_key``.
                low = f"WHERE (k & {63 << 42}) >= {_store.NODE_MIN_LEVEL << 42} "
                for table, cols, picked, key, where in (
                    ("entries", _ENTRY_COLS, _ENTRY_COLS, "k", ""),
                    ("nodes", "k, h", f"{_store.by_end_sql('::int')} AS k, h", "k", low),
                    ("event_ids", "id, k", "id, k", "id", ""),
                    ("checkpoints", *["branch, size, root, note"] * 2, "branch, size", ""),
                ):
                    marks = ",".join("?" * (cols.count(",") + 1))
                    sql = f"SELECT {picked} FROM {table} {where}ORDER BY {key}"
                    for chunk in self._scan(sql):
                        out.executemany(f"INSERT INTO {table}({cols}) VALUES({marks})", chunk)
        finally:
            target.close()

    def _scan(self, sql: str, chunk: int = 8192) -> Iterator[list[tuple[Any, ...]]]:
        """Yield the rows of ``sql`` in chunks, through a server-side cursor (bounded memory)."""
        import psycopg

        try:
            with self.db.conn.cursor(name="memroot_scan") as cur:
                cur.execute(sql)
                while rows := cur.fetchmany(chunk):
                    yield rows
        except psycopg.Error as e:
            raise pg_error(e, self.where) from e

    # -- meta and branches --------------------------------------------------------------------

    def meta(self, key: str) -> Any:
        """Return a meta value, or None (in a read transaction, every row read at once)."""
        snap = self._snapshot()
        if snap is not None:
            if snap.meta is None:
                snap.meta = {
                    str(k): _meta_value(str(kind), bytes(v))
                    for k, kind, v in self.db.execute("SELECT key, kind, value FROM meta")
                }
            return snap.meta.get(key)
        row = self.db.execute("SELECT kind, value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else _meta_value(str(row[0]), bytes(row[1]))

    def set_meta(self, key: str, value: Any) -> None:
        """Set a meta value (inside a write transaction)."""
        kind, raw = _meta_row(value)
        self.db.execute(
            "INSERT INTO meta(key, kind, value) VALUES(?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET kind = excluded.kind, value = excluded.value",
            (key, kind, raw),
        )

    def branch(self, name: str) -> BranchRow:
        """Return the stored head of branch ``name``; inside a write, lock it (FOR UPDATE).

        The row lock is the branch's serialization point: held until the write commits, so
        no other writer reads this head, appends after it and commits in between.

        Raises:
            NotFoundError: if there is no such branch.
        """
        snap = self._snapshot()
        if snap is not None:
            found = snap.by_name.get(name)
            if found is None:
                raise NotFoundError(f"no branch named {name!r}")
            return found
        lock = " FOR UPDATE" if self._write_depth else ""
        row = self.db.execute(
            f"SELECT no, name, size, head FROM branches WHERE name = ?{lock}", (name,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no branch named {name!r}")
        return BranchRow(int(row[0]), str(row[1]), int(row[2]), bytes(row[3]))

    def branches(self) -> list[BranchRow]:
        """Return every branch, in creation order."""
        snap = self._snapshot()
        if snap is not None:
            return list(snap.branches)
        return [
            BranchRow(int(r[0]), str(r[1]), int(r[2]), bytes(r[3]))
            for r in self.db.execute("SELECT no, name, size, head FROM branches ORDER BY no")
        ]

    def add_branch(
        self, name: str, head: bytes, *, parent: str | None = None, anchor: int | None = None
    ) -> BranchRow:
        """Create an empty branch row (inside a write transaction) and return it.

        Numbered as SQLite numbers them (one more than the largest); two writers creating a
        branch at the same moment: one of them fails on the key and rolls back.
        """
        self.db.execute(
            "INSERT INTO branches(no, name, size, head, parent, anchor) "
            "SELECT coalesce(max(no), 0) + 1, ?, 0, ?, ?, ? FROM branches",
            (name, head, parent, anchor),
        )
        return self.branch(name)

    # -- entries -------------------------------------------------------------------------------

    def _copy_in(self, table: str, cols: str, rows: Iterable[Sequence[Any]]) -> None:
        """Insert ``rows`` with one ``COPY ... FROM STDIN`` (inside the write transaction)."""
        import psycopg

        self.db.statements += 1
        try:
            with (
                self.db.conn.cursor() as cur,
                cur.copy(f"COPY {table}({cols}) FROM STDIN") as copy,
            ):
                for row in rows:
                    copy.write_row(row)
        except psycopg.Error as e:
            raise pg_error(e, self.where) from e

    def insert_entries(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Insert ``(k, hash, data, digest, salt, content)`` rows (inside a write transaction)."""
        self._copy_in("entries", "k, hash, data, digest, salt, content", rows)

    def insert_event_ids(self, rows: Iterable[tuple[bytes, int]]) -> None:
        """Index event ids ``(uuid_bytes, k)`` (inside a write transaction)."""
        self._copy_in("event_ids", "id, k", rows)

    def insert_nodes(self, rows: Iterable[tuple[int, bytes]]) -> None:
        """Store completed subtree hashes ``(node_key, hash)`` (inside a write transaction)."""
        self._copy_in("nodes", "k, h", rows)

    def entry_row(self, branch_no: int, seq: int) -> EntryRow:
        """Return one stored entry row.

        Raises:
            NotFoundError: if there is no entry ``seq`` on that branch.
        """
        k = entry_key(branch_no, seq)
        snap = self._snapshot()
        if snap is not None and k in snap.rows:
            return snap.rows[k]
        row = self.db.execute(f"SELECT {_ENTRY_COLS} FROM entries WHERE k = ?", (k,)).fetchone()
        if row is None:
            raise NotFoundError(f"no entry {seq} on this branch")
        got = _entry(row)
        if snap is not None:
            snap.rows[k] = got
        return got

    def entry_row_tuples(self, branch_no: int, seqs: Sequence[int]) -> list[tuple[Any, ...]]:
        """``entry_rows`` as plain tuples (``Store.entry_row_tuples``)."""
        return [tuple(r) for r in self.entry_rows(branch_no, seqs)]

    def entry_rows(self, branch_no: int, seqs: Sequence[int]) -> list[EntryRow]:
        """Return the stored rows at ``seqs`` of a branch (those that exist), by seq."""
        keys = [entry_key(branch_no, s) for s in seqs]
        snap = self._snapshot()
        if snap is not None and all(k in snap.rows for k in keys):
            return [snap.rows[k] for k in sorted(set(keys))]
        known = self._versions
        if keys and all(k in known for k in keys):
            # Read again since: each row's version (the transaction that wrote it and its
            # place) says whether it is the row read then; only a changed one is fetched.
            now = dict(
                self.db.execute(
                    f"SELECT k, {_VERSION} FROM entries WHERE k = ANY(?) ORDER BY k", (keys,)
                ).fetchall()
            )
            changed = [k for k in now if known[k][0] != now[k]]
            if not changed:
                rows = [known[k][1] for k in sorted(now)]
                if snap is not None:
                    snap.rows.update(zip(sorted(now), rows, strict=True))
                return rows
        rows = []
        if len(known) + len(keys) > _VERSIONS_MAX:
            known.clear()
        for r in self.db.execute(
            f"SELECT {_ENTRY_COLS}, {_VERSION} FROM entries WHERE k = ANY(?) ORDER BY k", (keys,)
        ):
            row = _entry(r)
            rows.append(row)
            known[int(r[0])] = (str(r[7]), row)
        if snap is not None:
            snap.rows.update((entry_key(branch_no, r.seq), r) for r in rows)
        return rows

    def iter_entry_rows(
        self, branch_no: int, start: int = 0, stop: int | None = None, *, chunk: int = 4096
    ) -> Iterator[EntryRow]:
        """Yield entry rows of a branch with ``start <= seq < stop`` in seq order, by chunks."""
        lo = entry_key(branch_no, start)
        hi = entry_key(branch_no, _MASK if stop is None else stop)
        snap = self._snapshot()
        if snap is not None and snap.no_entry_from(lo, branch_no):
            return  # past the branch's last entry in this snapshot (known from its opening)
        if snap is not None:  # no row is past the branch's last key in this snapshot
            end = hi if (last := snap.last_key.get(branch_no)) is None else min(hi, last + 1)
            kept = [snap.rows.get(k) for k in range(lo, end)] if end - lo <= _KEPT_RANGE else None
            if kept is not None and all(r is not None for r in kept):
                yield from (r for r in kept if r is not None)  # read already in this snapshot
                return
        while True:
            rows = self.db.execute(
                f"SELECT {_ENTRY_COLS} FROM entries WHERE k >= ? AND k < ? ORDER BY k LIMIT ?",
                (lo, hi, chunk),
            ).fetchall()
            for r in rows:
                yield _entry(r)
            if len(rows) < chunk:
                return
            lo = int(rows[-1][0]) + 1

    def lookup(self, table: str, key: str, value: str, keys: Sequence[Any]) -> dict[Any, Any]:
        """Return ``{key: value}`` for the rows of ``table`` whose ``key`` is in ``keys``.

        One ``= ANY(array)`` query. ``table`` and the column names are the store's own.
        """
        if not (
            _NAME_RE.fullmatch(table) and _NAME_RE.fullmatch(key) and _NAME_RE.fullmatch(value)
        ):
            raise StorageError(f"bad look-up {table}.{key}")
        keys = list(keys)
        if not keys:
            return {}
        found: dict[Any, Any] = {}
        for k, v in self.db.execute(
            f"SELECT {key}, {value} FROM {table} WHERE {key} = ANY(?)", (keys,)
        ):
            found[bytes(k) if isinstance(k, memoryview) else k] = (
                bytes(v) if isinstance(v, memoryview) else v
            )
        return found

    def tree_rows(
        self, leaf_keys: Sequence[int], node_keys: Sequence[int]
    ) -> list[tuple[int, int, bytes]]:
        """Return ``(0, k, hash)`` per ``entries`` row and ``(1, k, h)`` per ``nodes`` row asked.

        One query with two ``= ANY(array)`` look-ups (either list may be empty).
        """
        rows = self.db.execute(
            "SELECT 0, k, hash FROM entries WHERE k = ANY(?) "
            "UNION ALL SELECT 1, k, h FROM nodes WHERE k = ANY(?)",
            (list(leaf_keys), list(node_keys)),
        ).fetchall()
        return [(int(t), int(k), bytes(h)) for t, k, h in rows]

    def tree_rows_of(
        self, branch: str, leaf_keys: Sequence[int], node_keys: Sequence[int]
    ) -> tuple[tuple[int, int] | None, list[tuple[int, int, bytes]]]:
        """Return ``(size, no)`` of branch ``branch`` (None if absent) and ``tree_rows``.

        One statement, as ``Store.tree_rows_of``, with ``= ANY(array)`` look-ups (either list
        may be empty: ``IN ()`` is not PostgreSQL) and typed columns (a UNION's column has one
        type there: the branch row's number is a fourth column).
        """
        rows = self.db.execute(
            "SELECT 2, size, NULL::BYTEA, no FROM branches WHERE name = ? "
            "UNION ALL SELECT 0, k, hash, NULL::BIGINT FROM entries WHERE k = ANY(?) "
            "UNION ALL SELECT 1, k, h, NULL::BIGINT FROM nodes WHERE k = ANY(?)",
            (branch, list(leaf_keys), list(node_keys)),
        ).fetchall()
        have: tuple[int, int] | None = None
        out: list[tuple[int, int, bytes]] = []
        for t, k, h, no in rows:
            if int(t) == 2:
                have = (int(k), int(no))
            else:
                out.append((int(t), int(k), bytes(h)))
        return have, out

    # -- checkpoints ---------------------------------------------------------------------------

    def checkpoints(self, branch_no: int) -> list[tuple[int, bytes, str]]:
        """Return ``(size, root, note)`` of every stored checkpoint of a branch, by size."""
        return [
            (int(s), bytes(r), str(n))
            for s, r, n in self.db.execute(
                "SELECT size, root, note FROM checkpoints WHERE branch = ? ORDER BY size",
                (branch_no,),
            )
        ]

    def latest_checkpoint(self, branch_no: int) -> tuple[int, bytes, str] | None:
        """Return the stored checkpoint with the largest size, or None.

        In a read transaction its last ``_TAIL_ROWS`` entry rows and the meta rows (what a head
        check reads next: ``_since_before``, its keys) come in the same round trip, kept.
        """
        snap = self._snapshot()
        if snap is None:
            row = self.db.execute(
                "SELECT size, root, note FROM checkpoints WHERE branch = ? "
                "ORDER BY size DESC LIMIT 1",
                (branch_no,),
            ).fetchone()
            return None if row is None else (int(row[0]), bytes(row[1]), str(row[2]))
        if branch_no in snap.checkpoints:
            return snap.checkpoints[branch_no]
        import psycopg

        # Integers only in the text (no parameters): the meta rows follow as a second result.
        base = entry_key(int(branch_no), 0)
        sql = (
            f"SELECT c.size, c.root, c.note, {_E_ENTRY_COLS} "
            f"FROM (SELECT size, root, note FROM checkpoints WHERE branch = {int(branch_no)} "
            f"ORDER BY size DESC LIMIT 1) c LEFT JOIN entries e "
            f"ON e.k BETWEEN {base} + c.size - {_TAIL_ROWS} AND {base} + c.size - 1 "
            f"AND e.k >= {base} ORDER BY e.k"
        )
        if snap.meta is None:
            sql += "; SELECT key, kind, value FROM meta"
        self.db.statements += 1
        try:
            cur = self.db.conn.execute(sql)
            found = cur.fetchall()
            if snap.meta is None and cur.nextset():
                snap.meta = {
                    str(k): _meta_value(str(kind), bytes(v)) for k, kind, v in cur.fetchall()
                }
        except psycopg.Error as e:
            raise pg_error(e, self.where) from e
        got = None if not found else (int(found[0][0]), bytes(found[0][1]), str(found[0][2]))
        if got is not None and got[0] > 0:
            snap.rows.update((int(r[3]), _entry(r[3:])) for r in found if r[3] is not None)
        snap.checkpoints[branch_no] = got
        return got

    def read_nodes(self, branch_no: int, ids: Sequence[tuple[int, int]]) -> list[bytes]:
        """Return the hashes of complete subtrees ``(level, index)`` in the order asked.

        As ``Store.read_nodes`` (upper levels kept in the node cache), with the leaves and
        the inner nodes it must read in one statement (``tree_rows``), and the leaves of
        entry rows this read transaction already holds not read again.

        Raises:
            StorageError: if a node that must exist is missing.
        """
        out: list[bytes | None] = [None] * len(ids)
        cache = self._node_cache
        snap = self._snapshot()
        leaves: list[tuple[int, int]] = []
        inner: list[tuple[int, int]] = []
        for pos, (lvl, i) in enumerate(ids):
            if lvl == 0:
                k = branch_no << BRANCH_SHIFT | i
                row = None if snap is None else snap.rows.get(k)
                if row is None:
                    leaves.append((pos, k))
                else:
                    out[pos] = row.hash
                continue
            k = _store.level_node_key(branch_no, lvl, i)
            h = cache.get(k)
            if h is None:
                inner.append((pos, k))
            else:
                out[pos] = h
        if leaves or inner:
            found = {
                (t, k): h
                for t, k, h in self.tree_rows([k for _, k in leaves], [k for _, k in inner])
            }
            for t, wanted in ((0, leaves), (1, inner)):
                for pos, k in wanted:
                    h = found.get((t, k))
                    if h is None:
                        lvl, i = ids[pos]
                        raise StorageError(f"tree node ({lvl}, {i}) is missing from {self.where}")
                    out[pos] = h
                    if t == 1 and ids[pos][0] >= _store.NODE_CACHE_MIN_LEVEL:
                        if len(cache) >= _store.NODE_CACHE_MAX:
                            cache.clear()
                        cache[k] = h
        return out  # type: ignore[return-value]


def _entry(r: Sequence[Any]) -> EntryRow:
    return EntryRow(
        int(r[0]) & _MASK,
        bytes(r[1]),
        bytes(r[2]),
        None if r[3] is None else bytes(r[3]),
        None if r[4] is None else bytes(r[4]),
        None if r[5] is None else bytes(r[5]),
        None if r[6] is None else int(r[6]),
    )


class _Committing:
    """The connection as ``commit_counted`` sees it: its COMMIT also says the transaction's id.

    ``_COMMIT_OWN`` asks the id and commits in one round trip; the id is recorded as this
    connection's own (``Commits.committed``), so the next snapshot's difference does not
    count it as another's.
    """

    def __init__(self, store: PgStore) -> None:
        self.store = store

    @property
    def in_transaction(self) -> bool:
        """True inside an open transaction."""
        return self.store.db.in_transaction

    def execute(self, sql: str) -> None:
        """Run ``COMMIT`` (the only statement ``commit_counted`` runs), recording the id.

        Raises:
            StorageError: if PostgreSQL refuses the commit or the connection is lost.
        """
        import psycopg

        assert sql == "COMMIT"
        self.store.db.statements += 1
        try:
            cur = self.store.db.conn.execute(_COMMIT_OWN)
            row = cur.fetchone()
        except psycopg.Error as e:
            raise pg_error(e, self.store.where) from e
        xid = None if row is None or row[0] is None else int(row[0])
        self.store.commits.committed(xid)
