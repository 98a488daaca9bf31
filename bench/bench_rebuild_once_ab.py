"""Interleaved A/B of ``memroot rebuild`` reading the log once or twice, CPU time.

    python bench/bench_rebuild_once_ab.py LEDGER [--rounds 3] [--main-python PY]

Each round runs every variant once, in turn, each in a child process
(``memroot.bench._hooked_child rebuild``: the command timed in the child, imports left out)
on a fresh copy of ``LEDGER`` (a mixed history, e.g. made by
``python -m memroot.bench._hooked_child mixed LEDGER 100000``), and reports the child's CPU
seconds of the command (``time.process_time``) and its peak RSS: min and median per
variant, each median against ``once``. Variants:

- ``once``: this build: the memory roots replayed in the memory model's pass (one strict read
  of the log, ``memory_root.replay.RootsRebuild``), the map's nodes written in key order at
  the end (``map_nodes.SortedLoad``);
- ``unsorted``: the same with ``memory_root.replay._SORTED_LOAD`` off: each snapshot's nodes
  inserted as it replays (``StoredNodes.put``);
- ``twice``: the same build with both off (``memroot.cli.memory_cmds._ONE_PASS`` too): the
  roots replayed first from a strict read of their own, then the memory model's pass, the
  code path before this branch;
- ``main``: the main worktree's build (``--main-python``, e.g.
  ``/work/main/.venv-dev/bin/python``; left out without it).

``--variants`` picks which run (default: all four). Every rebuild must report
``identical`` (the copies hold the state the hooks wrote).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

VARIANTS = ("once", "unsorted", "twice", "main")

_CHILD = """
import sys
if sys.argv[1] in ("unsorted", "twice"):
    from memroot.memory_root import replay
    replay._SORTED_LOAD = False
if sys.argv[1] == "twice":
    from memroot.cli import memory_cmds
    memory_cmds._ONE_PASS = False
from memroot.bench import _hooked_child
_hooked_child.main(sys.argv[2:])
"""


def _run(variant: str, ledger: Path, main_python: str | None) -> dict[str, Any]:
    python = sys.executable
    if variant == "main":
        if main_python is None:
            raise ValueError("the main variant needs --main-python")
        python = main_python
    out = subprocess.run(
        [python, "-c", _CHILD, variant, "rebuild", str(ledger)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["identical"]:
        raise SystemExit(f"{variant}: the rebuild of {ledger} was not identical")
    return result


def _copy(src: Path, dst: Path) -> None:
    for f in src.parent.glob(src.name + "*"):
        shutil.copyfile(f, dst.parent / (dst.name + f.name[len(src.name) :]))


def main(argv: list[str] | None = None) -> None:
    """Run the rounds and print one JSON document (every run, then the summary)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ledger", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--main-python", help="the python of a build of main (the main variant)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ns = ap.parse_args(argv)
    variants = [v for v in ns.variants.split(",") if v in VARIANTS]
    if ns.main_python is None:
        variants = [v for v in variants if v != "main"]
    if "once" not in variants:
        ap.error("--variants must include once (the ratios are against it)")
    cpu: dict[str, list[float]] = {}
    rss: dict[str, list[int]] = {}
    loads: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory(dir=ns.ledger.parent) as tmp:
        for r in range(ns.rounds):
            for variant in variants:
                copy = Path(tmp) / f"{variant}-{r}.ledger"
                _copy(ns.ledger, copy)
                loads.append(os.getloadavg())
                got = _run(variant, copy, ns.main_python)
                cpu.setdefault(variant, []).append(got["cpu_s"])
                rss.setdefault(variant, []).append(got["vm_hwm_kb"])
                for f in Path(tmp).glob(copy.name + "*"):
                    f.unlink()
                print(f"round {r + 1} {variant}: {got['cpu_s']:.2f} s CPU", file=sys.stderr)
    base = statistics.median(cpu["once"])
    summary = {
        v: {
            "min_cpu_s": min(xs),
            "median_cpu_s": statistics.median(xs),
            "median_vs_once": statistics.median(xs) / base,
            "max_rss_kb": max(rss[v]),
        }
        for v, xs in cpu.items()
    }
    print(
        json.dumps(
            {"cpu_s": cpu, "rss_kb": rss, "summary": summary, "load": [*loads, os.getloadavg()]},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
