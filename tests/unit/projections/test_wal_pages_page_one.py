"""A watch across commits that only grew the file: page 1's header rewritten, not its b-tree.

``wal_pages.Watch`` keeps page 1's b-tree part (the schema table's root) as of its mark; when
page 1 is the only page of the schema table written since and every frame of it since holds
the same b-tree part, the schema is not read again. Any other change of the schema table is
still seen, and read again.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from memroot.projections import wal_pages


def _file(tmp_path: Path, tables: int = 2) -> tuple[Path, apsw.Connection]:
    """A WAL file with tables ``t0``.. (one row each); each table's SQL is long enough that
    the schema table spills out of page 1 when there are many."""
    path = tmp_path / "w.db"
    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")  # the frames stay in the WAL
    for i in range(tables):
        cols = ", ".join(f"column_number_{j} TEXT" for j in range(8))
        db.execute(f"CREATE TABLE t{i}(x, {cols})")
        db.execute(f"INSERT INTO t{i}(x) VALUES(1)")
    return path, db


def _other(path: Path, sql: str) -> None:
    """Another connection's commit."""
    other = apsw.Connection(str(path))
    other.execute(sql)
    other.close()


def _grow(path: Path) -> None:
    """A commit that writes no row of ``t0`` and grows the file (page 1's header)."""
    _other(path, "INSERT INTO t1(x) VALUES(randomblob(20000))")


def _schema_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for name in ("schema", "schema_pages", "table_pages"):
        real = getattr(wal_pages, name)

        def counted(*args: object, _real: object = real, _name: str = name) -> object:
            calls.append(_name)
            return _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(wal_pages, name, counted)
    return calls


def _watched(path: Path, db: apsw.Connection) -> tuple[wal_pages.Watch, wal_pages.Mark]:
    """A watch of ``t0`` that answered at a mark past a first growth (page 1 in the WAL)."""
    watch = wal_pages.Watch(["t0"])
    start = wal_pages.floor(path)
    assert start is not None
    _grow(path)
    mark = wal_pages.floor(path)
    assert mark is not None
    assert watch.unchanged(db, path, start, mark) is True
    return watch, mark


def test_growth_alone_reads_no_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, db = _file(tmp_path)
    watch, then = _watched(path, db)
    for _ in range(3):
        _grow(path)
        here = wal_pages.floor(path)
        assert here is not None
        assert 1 in (wal_pages.pages_since(path, then) or ())
        calls = _schema_reads(monkeypatch)
        assert watch.unchanged(db, path, then, here) is True
        assert calls == []
        monkeypatch.undo()
        then = here


@pytest.mark.parametrize(
    ("tables", "sql"),
    [
        (2, "UPDATE t0 SET x = 2"),
        (2, "DROP TABLE t0; CREATE TABLE t0(x); INSERT INTO t0 VALUES(3)"),
        (40, "DROP TABLE t0; CREATE TABLE t0(x); INSERT INTO t0 VALUES(3)"),
    ],
    ids=["row changed", "table recreated, schema in page 1", "table recreated, past page 1"],
)
def test_change_of_the_watched_table_is_seen(tmp_path: Path, tables: int, sql: str) -> None:
    path, db = _file(tmp_path, tables)
    watch, then = _watched(path, db)
    _other(path, sql)
    here = wal_pages.floor(path)
    assert here is not None
    assert watch.unchanged(db, path, then, here) is False


@pytest.mark.parametrize("tables", [2, 40], ids=["schema in page 1", "schema past page 1"])
def test_schema_row_pointed_at_a_copy_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tables: int
) -> None:
    """The schema row of ``t0`` edited to name another b-tree's root page (a copy of the
    table made beside it), none of ``t0``'s own pages written: the schema is read again."""
    path, db = _file(tmp_path, tables)
    watch, then = _watched(path, db)
    other = apsw.Connection(str(path))
    other.execute("CREATE TABLE copy(x); INSERT INTO copy VALUES(9)")
    root = other.execute("SELECT rootpage FROM sqlite_master WHERE name = 'copy'").fetchone()
    assert root is not None
    version = int(other.execute("PRAGMA schema_version").fetchone()[0])  # type: ignore[index]
    other.execute("PRAGMA writable_schema = ON")
    other.execute("UPDATE sqlite_master SET rootpage = ? WHERE name = 't0'", (root[0],))
    other.execute(f"PRAGMA schema_version = {version + 1}")
    other.execute("PRAGMA writable_schema = OFF")
    other.close()
    here = wal_pages.floor(path)
    assert here is not None
    calls = _schema_reads(monkeypatch)
    assert watch.unchanged(db, path, then, here) is False
    assert "schema" in calls


def test_page_one_not_in_the_wal_reads_the_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch whose mark has page 1 in the database file only (no frame of it): a frame of
    page 1 later is compared with nothing, so the schema is read."""
    path, db = _file(tmp_path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    _other(path, "INSERT INTO t1(x) VALUES(4)")  # the WAL restarts (new salts)
    watch = wal_pages.Watch(["t0"])
    start = wal_pages.floor(path)
    assert start is not None
    _other(path, "INSERT INTO t1(x) VALUES(5)")  # no growth: page 1 not written
    then = wal_pages.floor(path)
    assert then is not None and 1 not in (wal_pages.pages_since(path, start) or ())
    assert watch.unchanged(db, path, start, then) is True
    _grow(path)
    here = wal_pages.floor(path)
    assert here is not None
    calls = _schema_reads(monkeypatch)
    assert watch.unchanged(db, path, then, here) is True
    assert "schema" in calls
