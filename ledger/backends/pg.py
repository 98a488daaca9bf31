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
from memroot.ledger.backends.store import (
    BRANCH_SHIFT,
    SCHEMA_VERSION,
    WRITER_STATEMENT_CACHE,
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


def _placeholders(sql: str) -> str:
    """Return ``sql`` with ``?`` outside string literals as ``%s`` and ``%`` doubled."""
    out: list[str] = []
    quoted = False
    for ch in sql:
        if ch == "'":
            quoted = not quoted
            out.append(ch)
        elif ch == "?" and not quoted:
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        else:
            out.append(ch)
    return "".join(out)


_DDL_RE: Final = re.compile(r"^\s*CREATE\s+(TABLE|INDEX|UNIQUE\s+INDEX)\b", re.I | re.M)
_CAST_BLOB_RE: Final = re.compile(r"CAST\((\w+) AS BLOB\)", re.I)
_UPSERT_RE: Final = re.compile(
    r"^\s*INSERT\s+OR\s+(REPLACE|IGNORE)\s+INTO\s+(\w+)\s*(\(([^)]*)\))?", re.I | re.S
)


def _ddl(sql: str) -> str:
    """Rewrite SQLite DDL to PostgreSQL: types, and no ``STRICT`` / ``WITHOUT ROWID``."""
    sql = re.sub(r"\)\s*STRICT\s*,\s*WITHOUT\s+ROWID", ")", sql, flags=re.I)
    sql = re.sub(r"\)\s*WITHOUT\s+ROWID\s*,\s*STRICT", ")", sql, flags=re.I)
    sql = re.sub(r"\)\s*(STRICT|WITHOUT\s+ROWID)\b", ")", sql, flags=re.I)
    sql = re.sub(r"\bBLOB\b", "BYTEA", sql, flags=re.I)
    return re.sub(r"\bINTEGER\b", "BIGINT", sql, flags=re.I)


class _Catalog:
    """Primary keys and columns of tables, read once from PostgreSQL's catalog."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.keys: dict[str, list[str]] = {}
        self.cols: dict[str, list[str]] = {}

    def columns(self, table: str) -> list[str]:
        if table not in self.cols:
            rows = self.conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                "current_schema() AND table_name = %s ORDER BY ordinal_position",
                (table,),
            ).fetchall()
            self.cols[table] = [str(r[0]) for r in rows]
        return self.cols[table]

    def primary_key(self, table: str) -> list[str]:
        if table not in self.keys:
            rows = self.conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = "
                "i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) "
                "AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)",
                (table,),
            ).fetchall()
            self.keys[table] = [str(r[0]) for r in rows]
        return self.keys[table]


def _translate(sql: str, catalog: _Catalog) -> str:
    """Return the PostgreSQL form of one statement of the SQLite dialect the ledger layer uses.

    ``?`` placeholders; ``INSERT OR REPLACE`` / ``OR IGNORE`` become ``ON CONFLICT`` on the
    table's primary key (read from the catalog); DDL types; ``CAST(text AS BLOB)`` (read
    text as its bytes) becomes ``convert_to(text, 'UTF8')``. Anything else passes as written:
    statements that need more are written in the subset both engines run.
    """
    if _DDL_RE.search(sql):
        sql = _ddl(sql)
    sql = _CAST_BLOB_RE.sub(r"convert_to(\1, 'UTF8')", sql)
    m = _UPSERT_RE.match(sql)
    if m is not None:
        table = m.group(2)
        cols = [c.strip() for c in m.group(4).split(",")] if m.group(4) else catalog.columns(table)
        head = f"INSERT INTO {table}({', '.join(cols)})"
        body = sql[m.end() :].rstrip().rstrip(";")
        if m.group(1).upper() == "IGNORE":
            sql = f"{head}{body} ON CONFLICT DO NOTHING"
        else:
            key = catalog.primary_key(table)
            rest = [c for c in cols if c not in key]
            action = (
                "DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in rest)
                if rest
                else "DO NOTHING"
            )
            sql = f"{head}{body} ON CONFLICT({', '.join(key)}) {action}"
    return _placeholders(sql)


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
    (witnesses, tiles, key rotation, verify) and run its PostgreSQL form (``_translate``,
    cached per statement). The layers above the ledger (memory model, roots, falsification)
    do not run their SQL here: their tables live in the host's ``DerivedCache``.
    """

    def __init__(self, conn: Any, where: str) -> None:
        """Wrap an open psycopg connection (autocommit mode: transactions are explicit)."""
        self.conn = conn
        self.where = where
        self._changes = 0
        self._cache: dict[str, str] = {}
        self._catalog = _Catalog(conn)

    def _sql(self, sql: str) -> str:
        got = self._cache.get(sql)
        if got is None:
            got = self._cache[sql] = _translate(sql, self._catalog)
        return got

    def execute(self, sql: str, bindings: Sequence[Any] | None = None) -> PgCursor:
        """Run one statement and return its rows.

        Raises:
            StorageError: if PostgreSQL refuses it or the connection is lost.
        """
        import psycopg

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
        """Return the snapshot this connection reads now (``pg_current_snapshot()``), as text.

        Two equal answers mean the same set of committed transactions in the cluster: any
        write since (anyone's, this connection's too) takes a transaction id, which moves
        the snapshot's ``xmax`` or, committing later, leaves its in-progress list. A cache
        of what was checked (the read gate's, ``projections.strict_rows``) holds while it
        does not change; unlike ``data_version`` it moves on this connection's own writes.
        Inside a ``REPEATABLE READ`` transaction it is that transaction's snapshot.

        Raises:
            StorageError: if PostgreSQL fails.
        """
        row = self.db.execute("SELECT pg_current_snapshot()::text").fetchone()
        return "" if row is None else str(row[0])

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
            _store.commit_counted(self.db)  # as the SQLite store counts it
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
        self.db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            yield self.db
        finally:
            with contextlib.suppress(Exception):
                self.db.execute("COMMIT")

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
            target = _with_ledger_schema(derived, Path(dst))
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
                # No level-1 nodes (written by an older writer) into a layout 2 file.
                low = f"WHERE (k & {63 << 42}) >= {_store.NODE_MIN_LEVEL << 42} "
                for table, cols, key, where in (
                    ("entries", _ENTRY_COLS, "k", ""),
                    ("nodes", "k, h", "k", low),
                    ("event_ids", "id, k", "id", ""),
                    ("checkpoints", "branch, size, root, note", "branch, size", ""),
                ):
                    marks = ",".join("?" * (cols.count(",") + 1))
                    sql = f"SELECT {cols} FROM {table} {where}ORDER BY {key}"
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
        """Return a meta value, or None."""
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
        lock = " FOR UPDATE" if self._write_depth else ""
        row = self.db.execute(
            f"SELECT no, name, size, head FROM branches WHERE name = ?{lock}", (name,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no branch named {name!r}")
        return BranchRow(int(row[0]), str(row[1]), int(row[2]), bytes(row[3]))

    def branches(self) -> list[BranchRow]:
        """Return every branch, in creation order."""
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
        row = self.db.execute(
            f"SELECT {_ENTRY_COLS} FROM entries WHERE k = ?", (entry_key(branch_no, seq),)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no entry {seq} on this branch")
        return _entry(row)

    def entry_rows(self, branch_no: int, seqs: Sequence[int]) -> list[EntryRow]:
        """Return the stored rows at ``seqs`` of a branch (those that exist), by seq."""
        keys = [entry_key(branch_no, s) for s in seqs]
        return [
            _entry(r)
            for r in self.db.execute(
                f"SELECT {_ENTRY_COLS} FROM entries WHERE k = ANY(?) ORDER BY k", (keys,)
            )
        ]

    def iter_entry_rows(
        self, branch_no: int, start: int = 0, stop: int | None = None, *, chunk: int = 4096
    ) -> Iterator[EntryRow]:
        """Yield entry rows of a branch with ``start <= seq < stop`` in seq order, by chunks."""
        lo = entry_key(branch_no, start)
        hi = entry_key(branch_no, _MASK if stop is None else stop)
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
        """Return the stored checkpoint with the largest size, or None."""
        row = self.db.execute(
            "SELECT size, root, note FROM checkpoints WHERE branch = ? ORDER BY size DESC LIMIT 1",
            (branch_no,),
        ).fetchone()
        return None if row is None else (int(row[0]), bytes(row[1]), str(row[2]))


def _with_ledger_schema(derived: Store, dst: Path) -> Store:
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


# -- the derived-state cache of a PostgreSQL ledger ------------------------------------------------

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
