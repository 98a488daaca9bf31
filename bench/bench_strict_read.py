"""The strict read of every entry, native chunk check against the reference loop (issue 27).

    python bench/bench_strict_read.py LEDGER [--runs 5]

Times, in CPU seconds of this process (the minimum over ``--runs``), on an existing ledger
(e.g. the mixed one ``python -m memroot.bench._hooked_child mixed L 100000`` builds):

- ``decode``: checking the canonical branch's rows, already read, a chunk of 1,024 at a time:
  ``_native.decode_chunk`` against ``Entry.from_bytes`` of each row;
- ``entries``: the whole strict read, ``sum(1 for _ in ledger.entries())`` (SQLite fetch,
  leaf hashes, range proofs, decoding), with ``StrictReader._decode_chunk`` on and switched
  off (the reference loop), alternating.

Prints one JSON line. Needs the native core.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memroot.ledger import _backend, strict
from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.ledger import Ledger


def _cpu(fn: Callable[[], Any]) -> float:
    c0 = time.process_time()
    fn()
    return time.process_time() - c0


def main() -> None:
    """Run the two measurements and print them as one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ledger", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    n = _backend.NATIVE
    if n is None:
        raise SystemExit("the native core is not built (or MEMROOT_BACKEND=python)")
    with Ledger.open(args.ledger, hooks=()) as led:
        with led.reading():
            no = led.store.branch(CANONICAL_BRANCH).no
            rows = list(led.store.iter_entry_rows(no))
        chunks = [rows[i : i + 1024] for i in range(0, len(rows), 1024)]

        def native_decode() -> None:
            for ch in chunks:
                n.decode_chunk(
                    ch, CANONICAL_BRANCH, ch[0].seq, None, CANONICAL_BRANCH, Entry, strict._KINDS
                )

        def reference_decode() -> None:
            for ch in chunks:
                for r in ch:
                    Entry.from_bytes(bytes(r.data))

        on = strict.StrictReader.__dict__["_decode_chunk"]
        off = staticmethod(lambda *_: None)

        def read(switch: Any) -> Callable[[], None]:
            def run() -> None:
                setattr(strict.StrictReader, "_decode_chunk", switch)  # noqa: B010
                try:
                    sum(1 for _ in led.entries())
                finally:
                    setattr(strict.StrictReader, "_decode_chunk", on)  # noqa: B010

            return run

        out: dict[str, list[float]] = {k: [] for k in ("native", "reference", "on", "off")}
        for _ in range(args.runs):
            out["native"].append(_cpu(native_decode))
            out["reference"].append(_cpu(reference_decode))
            out["off"].append(_cpu(read(off)))
            out["on"].append(_cpu(read(on)))
    print(
        json.dumps(
            {
                "entries": len(rows),
                "decode_native_cpu_s": round(min(out["native"]), 3),
                "decode_reference_cpu_s": round(min(out["reference"]), 3),
                "entries_native_cpu_s": round(min(out["on"]), 3),
                "entries_reference_loop_cpu_s": round(min(out["off"]), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
