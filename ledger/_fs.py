"""Filesystem durability helpers, standard library only (the offline auditor imports them)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["fsync_dir"]


def fsync_dir(directory: Path) -> None:
    """Flush a directory's entries so a file created, linked or renamed in it survives a crash.

    A no-op off POSIX; filesystems that cannot fsync a directory (EINVAL, ENOTSUP) are
    accepted, any other failure is raised.
    """
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:  # pragma: no cover - depends on the filesystem
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)
