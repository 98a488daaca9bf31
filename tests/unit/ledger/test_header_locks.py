"""Reading a ledger's header never drops SQLite's locks (SQLite "How To Corrupt" 2.2).

Closing any descriptor of a file drops every POSIX lock the process holds on it. A second
``Store`` opened in a process that already has the ledger open used to read the header with
``open()``/``close()``: the first connection's shared lock on the file was gone (SQLite counts
its locks per process and never takes it again), so another process closing its connection
could take the exclusive lock, checkpoint and delete the ``-wal`` under the open handle.

The lock state is read exactly, from another process, with ``fcntl(F_GETLK)``; the WAL's
survival is checked after a third process opens and closes a connection.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memroot.ledger.backends import fds
from memroot.ledger.backends.store import Store
from memroot.projections import wal_pages

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/fd")

_WHO_LOCKS = r"""
import fcntl, os, struct, sys
# SQLite's lock bytes (os_unix.c): PENDING at 2^30, then RESERVED, then the SHARED range.
first, size = 0x40000000 + 2, 510
fd = os.open(sys.argv[1], os.O_RDWR)
got = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, first, size, 0))
t, _, _, _, pid = struct.unpack("hhqqi", got)
print(0 if t == fcntl.F_UNLCK else pid)
"""

_OPEN_CLOSE = r"""
import sys, apsw
db = apsw.Connection(sys.argv[1])
db.execute("SELECT count(*) FROM meta").fetchall()
db.close()  # the last connection's close checkpoints and deletes the WAL, if it can lock
"""


def _shared_lock_holder(path: Path) -> int:
    """The pid holding a lock on the file's SHARED range, seen from another process (0: none)."""
    done = subprocess.run(
        [sys.executable, "-c", _WHO_LOCKS, str(path)], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


def _ledger(tmp_path: Path) -> Store:
    store = Store(tmp_path / "m.ledger", create=True)
    with store.write() as db:
        db.execute("INSERT INTO meta VALUES('note', 'x')")
    return store


def test_a_second_store_keeps_the_first_ones_shared_lock(tmp_path: Path) -> None:
    first = _ledger(tmp_path)
    path = first.path
    try:
        assert first.meta("note") == "x"
        assert _shared_lock_holder(path) == os.getpid()
        for readonly in (True, False):  # both header reads: _sniff and _probe_is_ledger
            second = Store(path, readonly=readonly)
            second.close()
            assert _shared_lock_holder(path) == os.getpid(), "the shared lock was dropped"
        wal = Path(f"{path}-wal")
        assert wal.exists()
        subprocess.run([sys.executable, "-c", _OPEN_CLOSE, str(path)], check=True)
        assert wal.exists(), "another process checkpointed and deleted the WAL under a handle"
        assert first.meta("note") == "x"
    finally:
        first.close()


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_opening_and_closing_a_ledger_many_times_keeps_descriptors_bounded(
    tmp_path: Path,
) -> None:
    _ledger(tmp_path).close()
    path = tmp_path / "m.ledger"
    wal = Path(f"{path}-wal")
    before = _fd_count()
    for i in range(40):
        store = Store(path)
        reader = Store(path, readonly=True)
        with store.write() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES('note', ?)", (str(i),))
        assert wal_pages.mark(path) is not None
        assert wal_pages.floor(path) is not None
        reader.close()
        store.close()
        assert not wal.exists()  # the last close deleted the WAL: the next open makes a new one
    assert _fd_count() <= before + 3  # the db file, its -wal and -shm at most
    assert fds.held() <= before + 3


def test_a_descriptor_sqlite_still_holds_is_never_closed(tmp_path: Path) -> None:
    """A file deleted while a connection of the process has it open keeps our descriptor;
    once the connection is closed, the next new descriptor closes it (nothing leaks)."""
    first = _ledger(tmp_path)
    old = fds.descriptor(first.path)
    key = (os.fstat(old).st_dev, os.fstat(old).st_ino)
    os.unlink(first.path)  # no name left; the connection still holds (and locks) the file
    try:
        for i in range(3):  # new descriptors: each prunes the files no longer on disk
            (tmp_path / f"f{i}").write_bytes(b"x" * 16)
            fds.pread(tmp_path / f"f{i}", 0, 16)
        st = os.fstat(old)
        assert (st.st_dev, st.st_ino) == key, "closed while SQLite had the file open"
        held = fds.held()
    finally:
        first.close()
    (tmp_path / "g").write_bytes(b"x" * 16)
    fds.pread(tmp_path / "g", 0, 16)  # a new descriptor: the deleted, unheld file goes
    assert fds.held() == held


def _frames_one_by_one(path: Path, start: int) -> tuple[set[int], int]:
    """The reference scan: each frame header read on its own (WAL format, sqlite.org/fileformat)."""
    import struct

    raw = Path(f"{path}-wal").read_bytes()
    _, _, size, _, s1, s2 = struct.unpack_from(">IIIIII", raw)
    pages, i, step = set(), start, 24 + size
    while 32 + i * step + 16 <= len(raw):
        page, _, f1, f2 = struct.unpack_from(">IIII", raw, 32 + i * step)
        if (f1, f2) != (s1, s2):
            break
        pages.add(page)
        i += 1
    return pages, i


def test_the_wal_scan_reads_every_frame_across_its_chunks(tmp_path: Path) -> None:
    """``wal_pages`` reads frames in chunks: the pages and the end must be the reference's."""
    store = _ledger(tmp_path)
    try:
        start = wal_pages.mark(store.path)
        assert start is not None
        for i in range(60):  # many commits: well past one chunk of frames
            with store.write() as db:
                db.execute("INSERT OR REPLACE INTO meta VALUES(?, ?)", (f"k{i}", "v" * 3000))
        end = wal_pages.mark(store.path)
        assert end is not None
        pages, frames = _frames_one_by_one(store.path, start.frames)
        assert end.frames == frames > start.frames + 2 * wal_pages._CHUNK
        assert wal_pages.pages_since(store.path, start) == frozenset(pages)
    finally:
        store.close()


def test_the_wal_index_lists_the_pages_the_frames_hold(tmp_path: Path) -> None:
    """``pages_since`` reads the pages from the ``-shm``'s page list (``_listed``): the same
    set the frames' own headers give, from any mark on; and where the index cannot say (its
    two header copies differ, as while a writer updates it) the frames are read instead."""
    import shutil

    store = _ledger(tmp_path)
    try:
        marks = []
        for i in range(40):  # commits of a few frames each, marks between them
            marks.append(wal_pages.floor(store.path))
            with store.write() as db:
                db.execute("INSERT OR REPLACE INTO meta VALUES(?, ?)", (f"k{i}", "v" * (i * 300)))
        for since in marks:
            assert since is not None
            pages, _ = _frames_one_by_one(store.path, since.frames)
            listed = wal_pages._listed(store.path, since)
            assert listed is not wal_pages._UNLISTED
            assert listed == frozenset(pages) == wal_pages.pages_since(store.path, since)
        # A copy of the files whose index header copies disagree: the frames decide.
        torn = tmp_path / "copy" / "m.ledger"
        torn.parent.mkdir()
        shutil.copyfile(f"{store.path}-wal", f"{torn}-wal")
        shm = bytearray(Path(f"{store.path}-shm").read_bytes())
        shm[48 + 16] ^= 0xFF  # the second copy's mxFrame
        Path(f"{torn}-shm").write_bytes(bytes(shm))
        since = marks[5]
        assert since is not None
        assert wal_pages._listed(torn, since) is wal_pages._UNLISTED
        assert wal_pages.pages_since(torn, since) == frozenset(
            _frames_one_by_one(store.path, since.frames)[0]
        )
    finally:
        store.close()


def test_the_wal_index_says_a_restart(tmp_path: Path) -> None:
    """After the WAL restarted (a checkpoint, then a commit: new salts) a mark of the old log
    gets None from the index, as from the frames: nothing can be known since it."""
    store = _ledger(tmp_path)
    try:
        since = wal_pages.floor(store.path)
        assert since is not None and since.frames > 0
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with store.write() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES('after', 'restart')")
        assert wal_pages._listed(store.path, since) is None
        assert wal_pages.pages_since(store.path, since) is None
    finally:
        store.close()
