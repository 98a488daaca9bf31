"""The WAL pages a commit wrote, listed once per snapshot for every watch (``wal_pages``)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from memroot.projections import wal_pages


def _file(tmp_path: Path) -> tuple[Path, apsw.Connection]:
    path = tmp_path / "w.db"
    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE a(x)")
    db.execute("CREATE TABLE b(x)")
    db.execute("INSERT INTO a VALUES(1)")
    db.execute("INSERT INTO b VALUES(1)")
    return path, db


def _commit(path: Path, table: str) -> None:
    """Another connection's commit writing a row of ``table``."""
    other = apsw.Connection(str(path))
    other.execute(f"INSERT INTO {table} VALUES(randomblob(3000))")
    other.close()


def test_two_watches_of_one_snapshot_read_the_wal_index_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, db = _file(tmp_path)
    then = wal_pages.floor(path)
    assert then is not None
    _commit(path, "b")
    here = wal_pages.floor(path)
    assert here is not None and here != then
    calls: list[wal_pages.Mark] = []
    real = wal_pages.pages_since

    def counted(p: Path, since: wal_pages.Mark) -> frozenset[int] | None:
        calls.append(since)
        return real(p, since)

    monkeypatch.setattr(wal_pages, "pages_since", counted)
    of_a, of_b = wal_pages.Watch(["a"]), wal_pages.Watch(["b"])
    memo: dict[object, object] = {}  # one read transaction's (Store.read_memo)
    assert of_a.unchanged(db, path, then, here, memo) is True
    assert of_b.unchanged(db, path, then, here, memo) is False  # the commit wrote b's page
    assert calls == [then]
    # A later commit moves the floor: the pages are listed anew, and its page is seen.
    _commit(path, "a")
    later = wal_pages.floor(path)
    assert later is not None and later != here
    assert wal_pages.Watch(["a"]).unchanged(db, path, then, later, {}) is False
    assert calls == [then, then]


def test_a_listing_of_another_mark_is_not_reused(tmp_path: Path) -> None:
    path, db = _file(tmp_path)
    start = wal_pages.floor(path)
    assert start is not None
    _commit(path, "a")
    middle = wal_pages.floor(path)
    _commit(path, "b")
    end = wal_pages.floor(path)
    assert middle is not None and end is not None
    # From the middle only b was written; from the start a was too.
    assert wal_pages.Watch(["a"]).unchanged(db, path, middle, end) is True
    assert wal_pages.Watch(["a"]).unchanged(db, path, start, end) is False
    assert wal_pages.Watch(["b"]).unchanged(db, path, middle, end) is False


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Count the calls of ``wal_pages.<name>`` (one item per call)."""
    calls: list[int] = []
    real = getattr(wal_pages, name)

    def counted(*args: object) -> object:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(wal_pages, name, counted)
    return calls


def _grow(path: Path, table: str = "c") -> None:
    """Another connection's commit that writes no row of ``a`` or ``b``: it makes ``table``
    (a schema row: the schema table written) and grows the file."""
    other = apsw.Connection(str(path))
    other.execute(f"CREATE TABLE IF NOT EXISTS {table}(x)")
    other.execute(f"INSERT INTO {table} VALUES(randomblob(20000))")
    other.close()


def test_watches_of_one_read_share_its_schema_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, db = _file(tmp_path)
    then = wal_pages.floor(path)
    assert then is not None
    of_a, of_b = wal_pages.Watch(["a"]), wal_pages.Watch(["b"])
    assert of_a.unchanged(db, path, then, then) and of_b.unchanged(db, path, then, then)
    _grow(path, "c")
    here = wal_pages.floor(path)
    assert here is not None
    assert 1 in (wal_pages.pages_since(path, then) or ())  # the schema is read again
    pages = _counting(monkeypatch, "schema_pages")
    memo: dict[object, object] = {}  # the read transaction's (Store.read_memo)
    assert of_a.unchanged(db, path, then, here, memo) is True
    assert of_b.unchanged(db, path, then, here, memo) is True
    assert len(pages) == 1
    # Without a memo (or in another read transaction) each watch reads it itself.
    _grow(path, "d")
    later = wal_pages.floor(path)
    assert later is not None
    assert of_a.unchanged(db, path, here, later) is True
    assert of_b.unchanged(db, path, here, later) is True
    assert len(pages) == 3


def test_a_table_recreated_in_a_later_read_is_seen(tmp_path: Path) -> None:
    path, db = _file(tmp_path)
    then = wal_pages.floor(path)
    assert then is not None
    of_a = wal_pages.Watch(["a"])
    assert of_a.unchanged(db, path, then, then, {}) is True
    other = apsw.Connection(str(path))
    other.execute("DROP TABLE a; CREATE TABLE a(x); INSERT INTO a VALUES(2)")
    other.close()
    here = wal_pages.floor(path)
    assert here is not None
    assert of_a.unchanged(db, path, then, here, {}) is False


def test_a_commit_past_the_floor_is_seen_by_the_next_read(tmp_path: Path) -> None:
    """A commit between a read's floor and its snapshot: the snapshot holds it, so no listing
    of an earlier read at the same floor (which ended at that floor) may answer for it."""
    path, db = _file(tmp_path)
    then = wal_pages.floor(path)
    assert then is not None
    _commit(path, "b")
    here = wal_pages.floor(path)
    assert here is not None
    of_a = wal_pages.Watch(["a"])
    assert of_a.unchanged(db, path, then, here, {}) is True  # one read at floor ``here``
    assert wal_pages.Watch(["a"]).unchanged(db, path, then, here, {}) is True
    # The next read took its floor (``here`` again), then another connection wrote a, then
    # its snapshot began: the snapshot holds the write.
    _commit(path, "a")
    assert wal_pages.Watch(["a"]).unchanged(db, path, then, here, {}) is False
