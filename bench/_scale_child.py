"""The append half of ``bench/bench_scale.py``, run as ``python -m memroot.bench._scale_child``.

    python -m memroot.bench._scale_child LEDGER N WINDOW

Creates a ledger without hooks (the core alone, as ``memroot bench`` phase 1) and appends
``N`` bench events in batches of 1,000 (inputs built outside the timing, one sealed
transaction a batch), then signs a checkpoint at the full size. It runs in its own process
so that its peak RSS is this size's alone. Prints one JSON line: ``entries``, ``seconds`` and
``cpu_s`` of every append, the same for the last ``WINDOW`` appends (the rate *at* size N),
``db_bytes`` (the ledger file and its WAL) and ``vm_hwm_kb``. Progress goes to stderr.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from memroot.bench.ledger import BATCH, events
from memroot.bench.machine import vm_hwm_kib
from memroot.ledger.ledger import Ledger

PROGRESS_EVERY_S = 10.0


def main(argv: list[str]) -> None:
    """Build the ledger at ``argv[0]`` with ``argv[1]`` events; print the JSON line."""
    path, n, window = Path(argv[0]), int(argv[1]), int(argv[2])
    wall = cpu = window_wall = window_cpu = 0.0
    window_entries = 0
    window_start = max(0, n - window)
    reported = time.perf_counter()
    with Ledger.init(path, hooks=()) as ledger:
        for start in range(0, n, BATCH):
            items = events(start, min(BATCH, n - start))
            w0, c0 = time.perf_counter(), time.process_time()
            ledger.append_batch(items)
            dw, dc = time.perf_counter() - w0, time.process_time() - c0
            wall += dw
            cpu += dc
            if start >= window_start:
                window_wall += dw
                window_cpu += dc
                window_entries += len(items)
            if time.perf_counter() - reported >= PROGRESS_EVERY_S:
                done = start + len(items)
                print(f"progress {done:,}/{n:,} appended, {done / wall:,.0f}/s", file=sys.stderr,
                      flush=True)  # fmt: skip
                reported = time.perf_counter()
        ledger.checkpoint()  # so the verify checks a signed root at the full size
    db_bytes = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    line = {
        "entries": n,
        "seconds": wall,
        "cpu_s": cpu,
        "window": window_entries,
        "window_s": window_wall,
        "window_cpu_s": window_cpu,
        "db_bytes": db_bytes,
        "vm_hwm_kb": vm_hwm_kib(),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main(sys.argv[1:])
