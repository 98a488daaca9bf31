"""Which pages of a SQLite file other connections' commits wrote since a mark (WAL mode).

SQLite's ``PRAGMA data_version`` says only that *some* other connection committed. A ledger
file runs in WAL mode, where every commit appends the pages it changed to the ``-wal`` file
as frames (a 24-byte header naming the page, then the page), never overwriting a frame until
the log restarts with new salts. So the frames after a mark name every page any connection
wrote since; a restart (the header's salts changed) loses that knowledge and answers None.
The ``-shm`` wal-index lists the same pages, one number per committed frame: ``pages_since``
reads that list (a few bytes) and reads the frames' headers only where it cannot say.

A table (with its indexes) is unchanged while no frame since names one of its b-trees' pages
(``table_pages``): changing a row rewrites the page that holds it; adding or freeing a page
rewrites its parent; dropping or recreating a table changes its schema row (``schema``).
The read gate uses this to keep a completeness check across a commit that wrote
none of the tables it read (``memory_root.complete``). What this cannot see is what
``data_version`` cannot see either: bytes written into the file behind SQLite's back.

The ``-wal`` and ``-shm`` are read through the process's one descriptor per file
(``memroot.ledger.backends.fds``), never opened and closed: closing a descriptor of the
``-shm`` would drop the locks SQLite's connections of this process hold on it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

import apsw

from memroot.ledger.backends import fds

if TYPE_CHECKING:
    from memroot.ledger.ledger import Ledger

__all__ = [
    "Mark",
    "Schema",
    "Watch",
    "floor",
    "floor_of",
    "mark",
    "pages_since",
    "schema",
    "schema_pages",
    "table_pages",
]

_HEADER: Final = struct.Struct(">IIIIII")  # magic, version, page size, ckpt seq, salt-1, salt-2
_FRAME: Final = struct.Struct(">IIII")  # page number, size after commit, salt-1, salt-2
_FRAME_HEADER: Final = 24
_MAGICS: Final = (0x377F0682, 0x377F0683)
_CHUNK: Final = 16
"""How many frames ``_scan`` reads at a time."""


class Mark(NamedTuple):
    """A position in a WAL file: its salts and how many frames it held."""

    salt1: int
    salt2: int
    page_size: int
    frames: int


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def _scan(path: Path, start: int, pages: set[int] | None) -> Mark | None:
    """Read the WAL's frames from ``start``; add their pages to ``pages``; return the end."""
    try:
        fd = fds.descriptor(_wal(path))
        head = os.pread(fd, 32, 0)
        if len(head) < 32:
            return None
        magic, _, size, _, s1, s2 = _HEADER.unpack_from(head)
        if magic not in _MAGICS or size < 512:
            return None
        i = start
        step = _FRAME_HEADER + size
        while True:
            # _CHUNK frames a read (one system call, not one per frame); only their headers
            # are looked at.
            chunk = os.pread(fd, _CHUNK * step, 32 + i * step)
            end = len(chunk) - 16
            at = 0
            while at <= end:
                page, _, f1, f2 = _FRAME.unpack_from(chunk, at)
                if (f1, f2) != (s1, s2):
                    return Mark(s1, s2, size, i)  # a frame of an earlier generation: the end
                if pages is not None:
                    pages.add(page)
                i += 1
                at += step
            if len(chunk) < _CHUNK * step:
                break
        return Mark(s1, s2, size, i)
    except OSError:
        return None


_SHM_HEADER: Final = struct.Struct("=IIIBBHIIII8s")  # WalIndexHdr, native order, 48 bytes
_SHM: Final[dict[Path, str]] = {}
"""A ledger's path -> its ``-shm`` file's name (``floor`` runs before every read)."""
_INDEX_VERSION: Final = 3007000
"""The wal-index format ``_listed`` reads (``WALINDEX_MAX_VERSION`` of SQLite's wal.c)."""
_INDEX_HEADER: Final = 136
"""Bytes before the first block's page numbers: two ``WalIndexHdr`` copies and ``WalCkptInfo``."""
_INDEX_FIRST: Final = 4062
"""How many frames the wal-index's first block lists: (16384 - 136) / 4 (wal.c's
``HASHTABLE_NPAGE_ONE``); ``_listed`` reads that block only."""
_INDEX_AHEAD: Final = 64
"""How many frames past a mark ``_listed`` reads with the header, in one system call."""


def _shm(path: Path) -> str:
    shm = _SHM.get(path)
    if shm is None:
        if len(_SHM) >= 256:
            _SHM.clear()
        shm = _SHM[path] = str(path.with_name(path.name + "-shm"))
    return shm


def _header(raw: bytes) -> Mark | None:
    """Return the position a wal-index header (``raw[:96]``, both copies) names, or None."""
    if len(raw) < 96 or raw[:48] != raw[48:96]:
        return None
    _, _, _, init, _, size, frames, _, _, _, salts = _SHM_HEADER.unpack_from(raw)
    if not init:
        return None
    s1, s2 = struct.unpack(">II", salts)
    return Mark(s1, s2, 65536 if size == 1 else size, frames)


def floor(path: Path) -> Mark | None:
    """Return the WAL position a read transaction begun now will see at least, or None.

    It is the wal-index's ``mxFrame`` (the ``-shm`` file's header: the last committed frame
    readers take their snapshot at) read before the transaction begins, so every frame up
    to it is in the transaction's snapshot; a commit after it shows in ``pages_since``.
    None when the header cannot be read or its two copies differ (a writer is updating it).
    """
    try:
        raw = fds.pread(_shm(path), 0, 96)
    except OSError:
        return None
    return _header(raw)


_UNLISTED: Final = frozenset({-1})
"""``_listed``'s answer when the wal-index cannot say (the frames themselves are read then)."""


def _listed(path: Path, since: Mark) -> frozenset[int] | None:
    """``pages_since`` from the wal-index (sqlite.org/walformat.html, "The WAL-Index Format").

    For each frame, the ``-shm`` file lists the page it holds (``aPgno``, native order),
    written before the header's ``mxFrame`` moves past the frame: the frames committed since
    ``since`` are then one slice of it, a few bytes, not their headers in the ``-wal`` (each
    a page apart). Only committed frames are listed: a commit still being written is in no
    read transaction's snapshot that this slice is read after, and a reader's snapshot
    keeps the WAL from restarting under the frames up to it. None when the log restarted
    (other salts) or holds fewer frames than at the mark, as ``pages_since``; ``_UNLISTED``
    when the index cannot say (not readable, a header being written, another format, the
    frames past its first block, a slot not written): the frames are then read.
    """
    got = _index_pages(path, since, since.frames)
    return frozenset(got[1]) if isinstance(got, tuple) else got  # None, or _UNLISTED


def mark(path: Path) -> Mark | None:
    """Return the end of the WAL of the file at ``path`` now (None: no WAL to read)."""
    return _scan(path, 0, None)


_DB_HEADER: Final = 100
"""Bytes of page 1 before its b-tree page (the database header: file size, counters)."""
_PAGE_ONE_FRAMES: Final = 64
"""At most this many frames of page 1 since a mark are read (``_page_one_since``)."""


def _index_pages(
    path: Path, at: Mark, lo: int
) -> tuple[int, tuple[int, ...]] | frozenset[int] | None:
    """Return the wal-index's ``mxFrame`` and the pages of frames ``lo + 1`` to it (1-based).

    None when the log is not ``at``'s any more (other salts or page size, fewer frames than
    ``lo``); ``_UNLISTED`` when the index cannot say (not readable, a header being written,
    another format, frames past its first block, a slot not written).
    """
    try:
        raw = fds.pread(_shm(path), 0, _INDEX_HEADER + 4 * (lo + _INDEX_AHEAD))
        now = _header(raw)
        if now is None or _SHM_HEADER.unpack_from(raw)[0] != _INDEX_VERSION:
            return _UNLISTED
        if (now.salt1, now.salt2, now.page_size) != (at.salt1, at.salt2, at.page_size):
            return None
        if now.frames < lo:
            return None
        if now.frames > _INDEX_FIRST:
            return _UNLISTED
        end = _INDEX_HEADER + 4 * now.frames
        if len(raw) < end:
            raw += fds.pread(_shm(path), len(raw), end - len(raw))
        if len(raw) < end:
            return _UNLISTED
        pages = struct.unpack_from(f"={now.frames - lo}I", raw, _INDEX_HEADER + 4 * lo)
    except OSError:
        return _UNLISTED
    if 0 in pages:
        return _UNLISTED  # a slot not written: not an index this reader understands
    return now.frames, pages


def _frame_pages(path: Path, at: Mark, lo: int) -> tuple[int, tuple[int, ...]] | None:
    """``_index_pages``, None whenever it gives no pages."""
    got = _index_pages(path, at, lo)
    return got if isinstance(got, tuple) else None


def _page_one_in(path: Path, at: Mark, frame: int) -> bytes | None:
    """Return page 1's b-tree page (after the database header) as a frame of the WAL holds it.

    ``frame`` is 1-based, of ``at``'s log; None when that frame is not page 1 of that log
    (another page, other salts) or cannot be read.
    """
    step = _FRAME_HEADER + at.page_size
    try:
        raw = fds.pread(_wal(path), 32 + (frame - 1) * step, step)
    except OSError:
        return None
    if len(raw) < step:
        return None
    page, _, s1, s2 = _FRAME.unpack_from(raw)
    if (page, s1, s2) != (1, at.salt1, at.salt2):
        return None
    return raw[_FRAME_HEADER + _DB_HEADER :]


def _page_one_at(path: Path, at: Mark) -> bytes | None:
    """Return page 1's b-tree page in a snapshot at ``at``, or None.

    It is the last frame up to ``at`` that holds page 1. None when no frame does (the page is
    then the database file's, which a checkpoint may overwrite with a later frame's) or the
    wal-index cannot say.
    """
    listed = _frame_pages(path, at, 0)
    if listed is None or listed[0] < at.frames:
        return None
    for i in range(at.frames - 1, -1, -1):
        if listed[1][i] == 1:
            return _page_one_in(path, at, i + 1)
    return None


def _page_one_since(path: Path, then: Mark, here: Mark, page: bytes) -> bool:
    """Whether page 1's b-tree part is ``page`` in a snapshot of floor ``here`` (past ``then``).

    ``page`` is its b-tree part at ``then``. The snapshot holds the last frame of page 1 up
    to its own end, which is ``here`` or a later frame: so the last frame of page 1 up to
    ``here`` and every one after it (to the WAL's end) must hold ``page`` (with no frame of
    page 1 since ``then``, the page is ``then``'s). True means only the database header
    changed (the file grew). False when it cannot say (the index, a frame of another log,
    too many frames).
    """
    listed = _frame_pages(path, then, then.frames)
    if listed is None or listed[0] < here.frames:
        return False
    frames = [then.frames + 1 + i for i, p in enumerate(listed[1]) if p == 1]
    before = [f for f in frames if f <= here.frames]
    frames = before[-1:] + [f for f in frames if f > here.frames]
    if len(frames) > _PAGE_ONE_FRAMES:
        return False
    return all(_page_one_in(path, then, f) == page for f in frames)


def pages_since(path: Path, since: Mark) -> frozenset[int] | None:
    """Return every page a frame after ``since`` names, or None when that cannot be known.

    None when the log restarted (other salts), holds fewer frames than at the mark, or
    cannot be read. Read from the wal-index (``_listed``: the committed frames' pages, one
    small read), or when it cannot say, from the frames' headers in the ``-wal`` (where the
    frames of a commit still being written count too).
    """
    listed = _listed(path, since)
    if listed is not _UNLISTED:
        return listed
    try:
        head = fds.pread(_wal(path), 0, 32)
    except OSError:
        return None
    if len(head) < 32:
        return None
    _, _, size, _, s1, s2 = _HEADER.unpack_from(head)
    if (s1, s2, size) != (since.salt1, since.salt2, since.page_size):
        return None
    pages: set[int] = set()
    end = _scan(path, since.frames, pages)
    if end is None or (end.salt1, end.salt2) != (s1, s2) or end.frames < since.frames:
        return None
    return frozenset(pages)


def table_pages(db: apsw.Connection, tables: Iterable[str]) -> tuple[frozenset[int], Schema]:
    """Return the pages of ``tables``' b-trees and their indexes', and their schema rows.

    Read through SQLite's ``dbstat`` table (O(the pages)). The schema rows (each b-tree's
    name, root page and SQL, ``schema``) are compared rather than page 1, which SQLite also
    rewrites when the file grows (its header holds the file's size): a table dropped or
    recreated changes them, or rewrites its root page.
    """
    found = schema(db, tables)
    names = [name for _, name, _, _ in found]
    marks = ",".join("?" * len(names))
    pages = frozenset(
        int(r[0]) for r in db.execute(f"SELECT pageno FROM dbstat WHERE name IN ({marks})", names)
    )
    return pages, found


Schema = tuple[tuple[str, str, int, str], ...]
"""(type, name, root page, SQL) of each b-tree of some tables, as ``sqlite_master`` lists them."""


def schema(db: apsw.Connection, tables: Iterable[str]) -> Schema:
    """Return the ``sqlite_master`` rows of ``tables`` and their indexes, sorted."""
    wanted = sorted(set(tables))
    marks = ",".join("?" * len(wanted))
    return tuple(
        sorted(
            (str(t), str(n), int(r or 0), str(q or ""))
            for t, n, r, q in db.execute(
                f"SELECT type, name, rootpage, sql FROM sqlite_master WHERE tbl_name IN ({marks})",
                wanted,
            )
        )
    )


def schema_pages(db: apsw.Connection) -> frozenset[int]:
    """Return the pages of the schema table's b-tree (``sqlite_schema``, page 1 its root).

    While no commit wrote one of them, every ``schema`` row is as it was: a row changed,
    added or removed rewrites the page that holds it, and a page added or freed its parent.
    Page 1 also holds the file's header, which SQLite rewrites as the file grows: a caller
    then reads the rows themselves. Read through ``dbstat``, as ``table_pages``.
    """
    return frozenset(
        int(r[0])
        for r in db.execute(
            "SELECT pageno FROM dbstat WHERE name IN ('sqlite_schema', 'sqlite_master')"
        )
    )


def floor_of(ledger: Ledger) -> Mark | None:
    """Return the WAL floor of the transaction ``ledger`` runs in now (None: not known).

    A read transaction's is taken before it began (``Store.read_floor``, asked from the next
    read transaction on once this is called); in a write transaction nobody else can
    commit, so the position now is the snapshot's. None too off a file in WAL mode, or when
    the derived tables live elsewhere (a PostgreSQL host's cache).
    """
    store = ledger.store
    if ledger.derived is not store or store.path is None:
        return None
    if store.read_floor is None:
        store.read_floor = floor  # from the next read transaction on
        return None
    if store._write_open:
        return floor(store.path)
    got = store.floor
    return got if isinstance(got, Mark) else None


_R = TypeVar("_R")


def _read(memo: dict[object, Any] | None, key: tuple[object, ...], read: Callable[[], _R]) -> _R:
    """``read()``, kept in a read transaction's ``memo`` under ``("wal_pages", *key)``."""
    if memo is None:
        return read()
    k = ("wal_pages", *key)
    if k not in memo:
        memo[k] = read()
    return memo[k]  # type: ignore[no-any-return]  # stored above by this function for k


def _only_header(
    memo: dict[object, Any] | None, path: Path, then: Mark, here: Mark, page: bytes
) -> bool:
    """``_page_one_since``, asked once per read transaction (``memo``) for all its watches."""
    return _read(
        memo, ("page 1 since", then, page), lambda: _page_one_since(path, then, here, page)
    )


class Watch:
    """Whether a commit since a mark wrote a page of some tables (or of their indexes).

    Keeps the tables' pages (``table_pages``) and the schema table's (``schema_pages``) as
    of the last mark it answered True at, so a check asked again from that mark reads only
    the wal-index (``pages_since``); from another mark, or when the schema table was
    written since (a table made, dropped or moved; or only page 1's file header, as the
    file grew: then the schema rows decide), the pages are read anew.

    Page 1 holds both the database header, which SQLite rewrites whenever the file grows
    (most commits), and the root of the schema table's b-tree. So the watch also keeps page
    1's b-tree part as of its mark (the last frame up to it that holds page 1, when one
    does): when page 1 is the only page of the schema table written since and the snapshot
    holds that same b-tree part (``_page_one_since``), the schema table is as it was (its
    root is the same bytes, so it has the same children, none of which was written: by
    induction every page of it is), and neither its rows nor its pages are read again.
    """

    __slots__ = ("_at", "tables")

    def __init__(self, tables: Iterable[str]) -> None:
        self.tables = tuple(tables)
        self._at: tuple[Mark, frozenset[int], Schema, frozenset[int], bytes | None] | None = None

    def unchanged(
        self,
        db: apsw.Connection,
        path: Path,
        then: Mark,
        here: Mark,
        memo: dict[object, Any] | None = None,
    ) -> bool:
        """Whether no commit since ``then`` wrote the tables, to the end of this read's snapshot.

        ``here`` is the snapshot's floor; the frames are listed in the read, to the WAL's end
        (at or past the snapshot's own end: a frame past it can only make the answer False).
        False when it cannot say (the log restarted since ``then``). ``memo``: the read
        transaction's memo (``Store.read_memo``; one snapshot), where the schema and page
        lists this reads are kept for the other watches of the same read: most commits
        grow the file, which rewrites page 1, and every watch then reads the schema again.
        """
        # The pages are listed once per read (``memo``): the watches of one read ask from the
        # same mark in the same snapshot. Never a listing of an earlier read: one at the same
        # floor ended there, and a commit after the floor read but before the snapshot began
        # is in the snapshot (a listing made in the read ends at or past the snapshot's end).
        changed = _read(memo, ("since", then), lambda: pages_since(path, then))
        if changed is None:
            return False
        at = self._at
        page_one = None if at is None else at[4]
        if at is not None and at[0] == then and not changed.isdisjoint(at[3]):
            only_header = (
                page_one is not None
                and changed & at[3] == {1}
                and _only_header(memo, path, then, here, page_one)
            )
            if not only_header:
                same = at[2] == _read(
                    memo, ("schema", self.tables), lambda: schema(db, self.tables)
                )
                page_one = None
                at = (
                    None
                    if not same
                    else (*at[:3], _read(memo, ("schema",), lambda: schema_pages(db)), None)
                )
        if at is None or at[0] != then:
            pages, rows = _read(memo, ("tables", self.tables), lambda: table_pages(db, self.tables))
            page_one = None
            at = (then, pages, rows, _read(memo, ("schema",), lambda: schema_pages(db)), None)
        if not changed.isdisjoint(at[1]):
            self._at = None
            return False
        # Nothing of the tables changed up to the WAL's end: the pages are exact here (no
        # page of the schema table written since: its rows are the ones the pages were of).
        # Page 1 as of ``here``: the same b-tree part when only its header was written since,
        # else the last frame up to ``here`` that holds it.
        if page_one is None:
            page_one = _read(memo, ("page 1", here), lambda: _page_one_at(path, here))
        self._at = (here, at[1], at[2], at[3], page_one)
        return True
