"""The SQLite-to-PostgreSQL rewriting of the ledger layer's own statements, run on a server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.errors import StorageError
from memroot.ledger.ledger import Ledger


@pytest.fixture
def db(pg_url: str, pg_key: Path) -> Iterator[Any]:
    ledger = Ledger.init(pg_url, origin="example.org/t", key_path=pg_key)
    yield ledger.store.db
    ledger.close()


def test_ddl_upserts_and_placeholders(db: Any) -> None:
    from memroot.ledger.backends.pg import PgConnection

    assert isinstance(db, PgConnection)
    db.execute(
        "CREATE TABLE IF NOT EXISTS t(a TEXT PRIMARY KEY, n INTEGER, b BLOB) STRICT, WITHOUT ROWID;"
        "CREATE TABLE IF NOT EXISTS u(x INTEGER, y INTEGER, v TEXT, PRIMARY KEY(x, y)) STRICT"
    )
    db.execute("INSERT OR REPLACE INTO t(a, n, b) VALUES(?, ?, ?)", ("k", 1, b"\x00"))
    db.execute("INSERT OR REPLACE INTO t(a, n, b) VALUES(?, ?, ?)", ("k", 2**40, b"\x01"))
    db.execute("INSERT OR IGNORE INTO t VALUES(?, ?, ?)", ("k", 3, b"\x02"))
    assert db.execute("SELECT a, n, b FROM t").fetchall() == [("k", 2**40, b"\x01")]
    db.execute("INSERT OR REPLACE INTO u VALUES(?, ?, ?)", (1, 2, "a"))
    db.execute("INSERT OR REPLACE INTO u VALUES(?, ?, ?)", (1, 2, "b"))
    assert db.changes() == 1
    assert db.execute("SELECT v FROM u WHERE x = ? AND y = ?", (1, 2)).fetchone() == ("b",)
    # a '?' and a '%' inside a literal are data, not placeholders
    assert db.execute("SELECT '?%', ?", (5,)).fetchone() == ("?%", 5)
    assert db.execute("SELECT CAST(v AS BLOB) FROM u").fetchone() == (b"b",)
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"entries", "t", "u"} <= names


def test_errors_are_storage_errors(db: Any) -> None:
    from memroot.ledger.backends.pg import PgConnection

    assert isinstance(db, PgConnection)
    with pytest.raises(StorageError, match="does not exist"):
        db.execute("SELECT * FROM no_such_table")
    with pytest.raises(StorageError):
        db.executemany("INSERT INTO no_such_table VALUES(?)", [(1,)])
