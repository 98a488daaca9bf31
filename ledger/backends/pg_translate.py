"""The SQLite dialect of the ledger layer's own SQL, as PostgreSQL runs it (``PgConnection``).

``translate``: ``?`` placeholders, ``INSERT OR REPLACE`` / ``OR IGNORE``, DDL types and
``CAST(text AS BLOB)``; ``Catalog``: the primary keys and columns it reads from PostgreSQL's
catalog to write an upsert.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["Catalog", "translate"]


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


class Catalog:
    """Primary keys and columns of tables, read once from PostgreSQL's catalog."""

    def __init__(self, conn: Any) -> None:
        """Read the catalog through the psycopg connection ``conn``."""
        self.conn = conn
        self.keys: dict[str, list[str]] = {}
        self.cols: dict[str, list[str]] = {}

    def columns(self, table: str) -> list[str]:
        """Return the columns of ``table``, in order."""
        if table not in self.cols:
            rows = self.conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                "current_schema() AND table_name = %s ORDER BY ordinal_position",
                (table,),
            ).fetchall()
            self.cols[table] = [str(r[0]) for r in rows]
        return self.cols[table]

    def primary_key(self, table: str) -> list[str]:
        """Return the columns of ``table``'s primary key, in order."""
        if table not in self.keys:
            rows = self.conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = "
                "i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) "
                "AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)",
                (table,),
            ).fetchall()
            self.keys[table] = [str(r[0]) for r in rows]
        return self.keys[table]


def translate(sql: str, catalog: Catalog) -> str:
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
