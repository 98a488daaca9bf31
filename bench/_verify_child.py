"""The full verify of ``memroot bench`` phase 4, run as ``python -m memroot.bench._verify_child``.

It runs in its own process so that its peak RSS is the verifier's alone, and prints one JSON
line: ``ok``, ``entries``, ``seconds`` (wall), ``cpu_s``, the first findings and ``vm_hwm_kb``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from memroot.bench.machine import vm_hwm_kib
from memroot.ledger.verify import verify_path


def main(argv: list[str]) -> None:
    """Verify the ledger at ``argv[0]`` and print the JSON line."""
    t0, c0 = time.perf_counter(), time.process_time()
    report = verify_path(Path(argv[0]), update_trusted=False)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    line = {
        "ok": report.ok,
        "entries": report.entries,
        "seconds": seconds,
        "cpu_s": cpu,
        "findings": [str(f) for f in report.findings[:5]],
        "vm_hwm_kb": vm_hwm_kib(),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main(sys.argv[1:])
