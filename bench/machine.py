"""The machine a benchmark ran on, and a process's own peak memory.

``machine_info`` goes into every ``memroot bench`` report; ``peak_rss_kib`` is what each
benchmark child reports as its peak resident set (``bench_bundle.py`` and the verify child of
``memroot bench``).
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import apsw

from memroot.bench.results import MachineInfo

__all__ = ["cpu_model", "fsync_us", "machine_info", "peak_rss_kib", "vm_hwm_kib"]


def cpu_model() -> str:
    """Return the CPU model from ``/proc/cpuinfo`` (or ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fsync_us(work: Path, rounds: int = 50) -> float:
    """Return the median latency of write(4 KiB) + fsync in the ``work`` directory, in µs."""
    times: list[float] = []
    fd = os.open(work / "fsync.probe", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(rounds):
            t0 = time.perf_counter()
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return sorted(times)[len(times) // 2] * 1e6


def _pymerkle_version() -> str | None:
    try:
        return version("pymerkle")
    except PackageNotFoundError:
        return None


def machine_info(work: Path | None = None) -> MachineInfo:
    """Describe the machine and library versions the figures are measured with.

    With ``work`` (a directory inside the run's temporary directory) it also records where
    the run writes and that directory's fsync latency.
    """
    # Imported here, not at the top: the verify child imports this module for its peak RSS
    # and should not load a second SQLite library.
    import sqlite3

    info: MachineInfo = {
        "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "sqlite_apsw": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
        "sqlite_stdlib": sqlite3.sqlite_version,
        "pymerkle": _pymerkle_version(),
        "loadavg_start": list(os.getloadavg()),
    }
    if work is not None:
        info["tmpdir"] = str(work.parent)
        info["fsync_median_us"] = fsync_us(work)
    return info


def vm_hwm_kib() -> int | None:
    """Return this process's ``VmHWM`` (peak resident set) in KiB, or ``None`` without /proc.

    ``VmHWM`` belongs to this process image alone, unlike ``ru_maxrss``: on Linux a child's
    ``maxrss`` starts at its parent's high-water mark when it execs (``exec_mmap`` keeps the
    old address space's peak).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next((int(x.split()[1]) for x in f if x.startswith("VmHWM:")), None)
    except OSError:
        return None


def peak_rss_kib() -> int:
    """Return this process's peak resident set in KiB: ``VmHWM``, else ``ru_maxrss``."""
    hwm = vm_hwm_kib()
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
