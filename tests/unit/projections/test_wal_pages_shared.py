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
    assert of_a.unchanged(db, path, then, here) is True
    assert of_b.unchanged(db, path, then, here) is False  # the commit wrote b's page
    assert calls == [then]
    # A later commit moves the floor: the pages are listed anew, and its page is seen.
    _commit(path, "a")
    later = wal_pages.floor(path)
    assert later is not None and later != here
    assert wal_pages.Watch(["a"]).unchanged(db, path, then, later) is False
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
