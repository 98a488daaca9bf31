"""Full verify (steps 1-7 and 10) split by thread: the auditor's and the reader's CPU seconds.

    python bench/bench_verify_threads.py                          # 10^6 entries, 3 runs
    python bench/bench_verify_threads.py --entries 100000 --runs 5
    python bench/bench_verify_threads.py --ledger L.ledger --json # an existing ledger

Builds a ledger as ``memroot bench`` phase 1 does (``ledger.batched_memroot``: events in
batches of 1,000, one sealed checkpoint each) in a temporary directory, unless ``--ledger``
names one, then runs ``verify_path`` on it ``--runs`` times in this process (the first run is
a warm-up of the page cache and is not reported). Each run reports the wall seconds and
entries/s, the process CPU seconds, and the CPU seconds of each of the two threads: the
auditor's (this thread: the native checks of each chunk, the Python loop, the checks of
stored nodes and the event index against what was read ahead) and the reader's (its
connection's SQL reads, the content addresses and the event ids of each chunk; see
``store_source._ChunkReader``). On a 2-core machine the wall time of a calm run is about the larger
of the two plus the waits between them, so the larger one (``critical_cpu_s``) is a measure a
loaded machine disturbs far less than the wall time. The load average is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memroot.bench.ledger import batched_memroot
from memroot.ledger import verify
from memroot.ledger.verify import store_source


def measure(path: Path) -> dict[str, Any]:
    """Verify the ledger at ``path`` once; return its rates and CPU seconds per thread."""
    reader_cpu: list[float] = []
    run = store_source._ChunkReader._run

    def timed(self: store_source._ChunkReader) -> None:
        start = time.thread_time()
        try:
            run(self)
        finally:
            reader_cpu.append(time.thread_time() - start)

    store_source._ChunkReader._run = timed  # type: ignore[method-assign]
    try:
        t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
        report = verify.verify_path(path, update_trusted=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        main_cpu = time.thread_time() - m0
    finally:
        store_source._ChunkReader._run = run  # type: ignore[method-assign]
    if not report.ok:
        raise SystemExit(f"the ledger does not verify: {report.findings[:3]}")
    reader = sum(reader_cpu)
    return {
        "entries": report.entries,
        "wall_s": wall,
        "entries_per_s": report.entries / wall,
        "cpu_s": cpu,
        "auditor_cpu_s": main_cpu,
        "reader_cpu_s": reader,
        "critical_cpu_s": max(main_cpu, reader),
        "load_average": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; print a line per run (or the JSON document)."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--entries", type=int, default=1_000_000, help="ledger size to build")
    ap.add_argument("--ledger", type=Path, help="verify this ledger instead of building one")
    ap.add_argument("--runs", type=int, default=3, help="reported runs (after one warm-up)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memroot-bench-verify-") as tmp:
        path = args.ledger
        if path is None:
            path = Path(tmp) / "memroot.ledger"
            print(f"building {args.entries:,} entries ...", file=sys.stderr)
            batched_memroot(path, args.entries)
        measure(path)  # warm-up
        runs = [measure(path) for _ in range(args.runs)]
    if args.json:
        print(json.dumps({"ledger": str(args.ledger or "built"), "runs": runs}, indent=2))
        return 0
    for r in runs:
        print(
            f"{r['entries_per_s']:>9,.0f} entries/s  wall {r['wall_s']:.2f} s  "
            f"CPU {r['cpu_s']:.2f} s (auditor {r['auditor_cpu_s']:.2f} s, reader "
            f"{r['reader_cpu_s']:.2f} s)  load {r['load_average']:.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
