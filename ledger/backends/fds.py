"""Read files SQLite may hold locks on without ever dropping them: one descriptor per file.

POSIX record locks belong to a process and a file, not to a descriptor: closing *any*
descriptor of a file drops every lock the process holds on it (SQLite's "How To Corrupt
An SQLite Database File", 2.2). SQLite's own connections hold such locks on a ledger file
(the shared lock a WAL-mode connection keeps while it is open, which stops another process
from checkpointing and deleting the ``-wal`` under it) and on its ``-shm``. So a plain
``open()``/``close()`` of the file's header, while a connection of this process has it open,
takes those locks away, and SQLite does not notice (it counts its locks per process and does
not take them again).

Every read of such a file by memroot itself goes through here (``pread``, ``descriptor``):
one registry of descriptors per process, keyed by the file's (device, inode), so reading the
same file again never opens, and never closes, a descriptor. A descriptor is closed only when
no descriptor of the process but the registry's refers to its file (found by listing
``/proc/self/fd`` or ``/dev/fd``): then no SQLite connection of this process has the file open,
so the process holds no lock on it to lose. That is checked whenever the registry takes a new
descriptor, for files removed since (a ``-wal`` or ``-shm`` deleted and made again, a ledger
replaced) and, past ``KEPT`` files, for every file it holds; so opening and closing a ledger
many times costs no descriptor per cycle. Without a descriptor listing (not Linux or a BSD)
nothing is ever closed. What remains open to chance is a thread of this process opening the
same file in SQLite between the listing and the close (microseconds, past ``KEPT`` files only
for a file still on disk).

This is the lowest layer both readers need: the ``Store``'s header reads and the WAL scan of
``memroot.projections.wal_pages``. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Final

__all__ = ["KEPT", "descriptor", "held", "pread"]

KEPT: Final = 64
"""How many files the registry keeps descriptors of before it closes the idle ones."""

_LOCK: Final = threading.Lock()
_FDS: dict[tuple[int, int], list[int]] = {}
"""(device, inode) -> this registry's descriptors of that file (the first is the one read;
more than one only when a file was replaced between a ``stat`` and an ``open``)."""
_LISTING: Final = next((d for d in ("/proc/self/fd", "/dev/fd") if os.path.isdir(d)), None)


def _key(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def descriptor(path: Path | str) -> int:
    """Return this process's registry descriptor of the file at ``path`` (opened read-only).

    The descriptor belongs to the registry: never close it. A file replaced under the same
    name gets a new one (the key is the file, not its name).

    Raises:
        OSError: the file does not exist or cannot be opened.
    """
    key = _key(os.stat(path))
    with _LOCK:
        got = _FDS.get(key)
        if got:
            return got[0]
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        real = _key(os.fstat(fd))  # the name may have been replaced since the stat
        _FDS.setdefault(real, []).append(fd)
        _prune(keep=real)
        return _FDS[real][0]


def pread(path: Path | str, offset: int, n: int) -> bytes:
    """Read up to ``n`` bytes at ``offset`` of the file at ``path`` through ``descriptor``.

    Raises:
        OSError: the file cannot be opened or read.
    """
    return os.pread(descriptor(path), n, offset)


def held() -> int:
    """Return how many descriptors the registry holds now (for tests and diagnostics)."""
    with _LOCK:
        return sum(len(fds) for fds in _FDS.values())


def _others() -> dict[tuple[int, int], int] | None:
    """Return how many descriptors of this process refer to each file (None: not listable)."""
    if _LISTING is None:
        return None
    counts: dict[tuple[int, int], int] = {}
    try:
        names = os.listdir(_LISTING)
    except OSError:
        return None
    for name in names:
        try:
            st = os.fstat(int(name))
        except (OSError, ValueError):
            continue  # the listing's own descriptor, or one closed since
        k = _key(st)
        counts[k] = counts.get(k, 0) + 1
    return counts


def _prune(*, keep: tuple[int, int]) -> None:
    """Close the registry's descriptors of files no other descriptor of the process holds.

    Files no longer on disk (no link left) are always looked at; files still on disk only
    when the registry holds more than ``KEPT``. ``keep`` (the file just asked for) stays.
    Called with ``_LOCK`` held.
    """
    gone = []
    for k, fds in _FDS.items():
        if k == keep:
            continue
        try:
            if os.fstat(fds[0]).st_nlink == 0 or len(_FDS) > KEPT:
                gone.append(k)
        except OSError:
            gone.append(k)
    if not gone:
        return
    counts = _others()
    if counts is None:
        return
    for k in gone:
        fds = _FDS[k]
        if counts.get(k, 0) > len(fds):
            continue  # SQLite (or someone) in this process has it open: its locks stay
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        del _FDS[k]
