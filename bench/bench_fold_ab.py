"""Interleaved A/B of the memory layer's native pieces: rebuild and mixed appends, CPU time.

    python bench/bench_fold_ab.py LEDGER [--rounds 3] [--mixed 30000]

On a loaded machine wall-clock ratios swing by 1x, so each round runs every variant once, in
turn, each in a child process (``memroot.bench._hooked_child``: the command timed in the child,
imports left out) on a fresh copy of ``LEDGER`` (a mixed history, e.g. made by
``python -m memroot.bench._hooked_child mixed LEDGER 100000``), and reports the child's CPU
seconds of the command: min and median per variant, and each variant's median against
``native``. Variants:

- ``native``: the native core as shipped;
- ``no-plans``: the same with the operation payload plans and derived ids of issue 27
  switched off (``ops._NATIVE_PLAN`` emptied, ``_native.derived_id`` refused), which is the
  native core before them;
- ``no-kept``: the same with the replay's fold of ``main`` answering its ``mem_gated``
  reads from the table (``gated._KEPT`` off: every read writes what is held and queries),
  which is the fold before issue 27's kept rows (branch ``fold``);
- ``main``: the main worktree's build (``--main-python``, e.g. ``/work/main/.venv-dev/bin/python``;
  left out without it);
- ``reference``: ``MEMROOT_BACKEND=python``.

``--variants`` picks which run (default: ``native,no-kept,main,reference``).

``--verify`` also times ``memroot verify`` (all ten steps: step 9 folds ``main`` as
``rebuild`` does) of each copy, before its rebuild.

``--mixed N`` also times appending ``N`` entries of the bench's mixed history through the
default hooks (the import path: every operation validated and folded), per variant.

``--pieces R`` times only the two pieces, in this process, over the ledger's operations read
once: ``Op.from_entry`` of every operation (its payload validated) and ``derived_id`` of each
evidence id an ASSERT cites, natively and by the reference alternately, ``R`` rounds (CPU
time; the whole commands' figures above swing more than these pieces weigh).
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

VARIANTS = ("native", "no-plans", "no-kept", "main", "reference")

_CHILD = """
import sys
from memroot.projections import engine, gated, ops
if sys.argv[1] == "no-kept":
    gated._KEPT = False
if sys.argv[1] == "no-plans":
    ops._NATIVE_PLAN.clear()
    real = engine._N

    class _NoDerived:
        def __getattr__(self, name):
            return getattr(real, name)

        def derived_id(self, op_id, n):
            raise real.Reject("switched off")

    engine._N = _NoDerived()
from memroot.bench import _hooked_child
_hooked_child.main(sys.argv[2:])
"""


_MAIN_CHILD = """
import sys
from memroot.bench import _hooked_child
_hooked_child.main(sys.argv[2:])
"""


def _run(variant: str, args: list[str], main_python: str | None = None) -> dict[str, Any]:
    env = dict(os.environ)
    if variant == "reference":
        env["MEMROOT_BACKEND"] = "python"
    if variant == "main":
        if main_python is None:
            raise ValueError("the main variant needs --main-python")
        cmd = [main_python, "-c", _MAIN_CHILD, variant, *args]
    else:
        cmd = [sys.executable, "-c", _CHILD, variant, *args]
    out = subprocess.run(
        cmd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _copy(src: Path, dst: Path) -> None:
    for f in src.parent.glob(src.name + "*"):
        shutil.copyfile(f, dst.parent / (dst.name + f.name[len(src.name) :]))


def _pieces(ledger: Path, rounds: int) -> dict[str, Any]:
    """CPU seconds of the pieces over every operation of ``ledger``, native and reference."""
    import time

    from memroot.ledger.entries import Kind
    from memroot.ledger.ledger import Ledger
    from memroot.projections import engine, ops
    from memroot.projections.handlers import Op

    with Ledger.open(ledger, hooks=()) as led:
        entries = [e for e in led.entries() if e.kind is Kind.OP and e.type in ops.SCHEMAS]
    cites = [
        (e.body["id"], n)
        for e in entries
        for n in range(len(e.body["payload"].get("evidence_ids") or ()))
    ]
    module = vars(engine)  # the engine's own binding of the native core, swapped below
    plans, real = dict(ops._NATIVE_PLAN), module["_N"]

    def once() -> float:
        t = time.process_time()
        for e in entries:
            Op.from_entry(e)
        for op_id, n in cites:
            engine.derived_id(op_id, n)
        return time.process_time() - t

    times: dict[str, list[float]] = {"native": [], "reference": []}
    for _ in range(rounds):
        times["native"].append(once())
        ops._NATIVE_PLAN.clear()
        module["_N"] = None
        try:
            times["reference"].append(once())
        finally:
            ops._NATIVE_PLAN.update(plans)
            module["_N"] = real
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "operations": len(entries),
        "derived_ids": len(cites),
        "cpu_s": times,
        "min_cpu_s": {k: min(v) for k, v in times.items()},
        "median_cpu_s": med,
        "reference_over_native": med["reference"] / med["native"],
        "load": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    """Run the rounds and print one JSON document (every run, then the summary)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ledger", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mixed", type=int, default=0, help="also append N mixed entries")
    ap.add_argument("--pieces", type=int, default=0, help="time the two pieces only, R rounds")
    ap.add_argument("--main-python", help="the python of a build of main (the main variant)")
    ap.add_argument("--verify", action="store_true", help="also time verify (all ten steps)")
    ap.add_argument("--variants", default="native,no-kept,main,reference")
    ns = ap.parse_args(argv)
    variants = [v for v in ns.variants.split(",") if v in VARIANTS]
    if ns.main_python is None:
        variants = [v for v in variants if v != "main"]
    if "native" not in variants:
        ap.error("--variants must include native (the ratios are against it)")
    if ns.pieces:
        print(json.dumps(_pieces(ns.ledger, ns.pieces), indent=1))
        return
    runs: dict[str, dict[str, list[float]]] = {"rebuild": {}, "verify": {}, "mixed": {}}
    rss: dict[str, dict[str, list[int]]] = {what: {} for what in runs}  # peak RSS, KiB
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(ns.rounds):
            for variant in variants:
                copy = Path(tmp) / f"{variant}-{r}.ledger"
                _copy(ns.ledger, copy)
                if ns.verify:
                    trusted = Path(tmp) / f"{variant}-{r}-trusted.json"
                    got = _run(variant, ["verify", str(copy), str(trusted)], ns.main_python)
                    if not got["ok"]:
                        raise SystemExit(f"verify of {copy} failed: {got['findings']}")
                    runs["verify"].setdefault(variant, []).append(got["cpu_s"])
                    rss["verify"].setdefault(variant, []).append(got["vm_hwm_kb"])
                got = _run(variant, ["rebuild", str(copy)], ns.main_python)
                runs["rebuild"].setdefault(variant, []).append(got["cpu_s"])
                rss["rebuild"].setdefault(variant, []).append(got["vm_hwm_kb"])
                if ns.mixed:
                    fresh = Path(tmp) / f"{variant}-{r}-mixed.ledger"
                    got = _run(variant, ["mixed", str(fresh), str(ns.mixed)], ns.main_python)
                    runs["mixed"].setdefault(variant, []).append(got["cpu_s"])
                    rss["mixed"].setdefault(variant, []).append(got["vm_hwm_kb"])
                print(f"round {r + 1} {variant} done", file=sys.stderr)
    summary: dict[str, Any] = {}
    for what, per in runs.items():
        if not per:
            continue
        base = statistics.median(per["native"])
        summary[what] = {
            v: {
                "min_cpu_s": min(xs),
                "median_cpu_s": statistics.median(xs),
                "median_vs_native": statistics.median(xs) / base,
                "max_rss_kb": max(rss[what][v]),
            }
            for v, xs in per.items()
        }
    print(json.dumps({"runs": runs, "summary": summary, "load": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
