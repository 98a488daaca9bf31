"""Benchmark a bounded cascade over 10,000 dependents (issue 5; not a test).

Builds a ledger with the CLI's hooks (memory model, falsification, roots with a snapshot
every 1000 entries, ...): ``--entries`` entries in all, the filler first (events and facts,
so the falsified object sits at the end of a long log and the re-snapshots fold all of it),
then one fact ``O`` and ``--dependents`` SUMMARY objects that each summarise ``O``
(an ASSERT and a SUMMARY_CREATED each). It falsifies ``O`` and measures, in a freshly opened
ledger as ``memroot`` runs:

- ``plan``: ``Falsifier.plan`` (the walk of ``memroot cascade --dry-run``, which also
  computes the re-snapshots, as ``apply`` does): the walk over every dependent, writing
  nothing;
- ``apply``: ``Falsifier.cascade``: the plan, the re-snapshots of the affected roots without
  ``O`` (a fold of the branch up to the last affected root), the one CASCADE entry, its
  validation by the hook, the states of every touched item (and the memory model's object
  versions) in the same transaction;
- ``cli_dry_run`` / ``verify_step9``: optional (``--cli``, ``--verify``), the wall time of
  ``memroot cascade --dry-run --json`` in a subprocess (Python start-up included) and of the
  falsification replay check alone.

Usage::

    python bench/bench_cascade.py --entries 100000 --dependents 10000 [--cli] [--verify] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memroot.ledger.entries import EventInput
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import verify_path
from memroot.memory_root import Roots
from memroot.memory_root.falsify import Falsifier
from memroot.memory_root.falsify.replay import FalsifyReplayCheck
from memroot.memory_root.stack import default_hooks
from memroot.projections import requests as rq

AGENT = rq.Actor("agent-7", "AI_AGENT", "ns")
BATCH = 1000


def log(msg: str) -> None:
    """Print a progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


def _event(i: int) -> EventInput:
    return EventInput(
        stream=f"s{i % 50}",
        actor_id="alice",
        actor_type="HUMAN_USER",
        role="USER",
        content=f"message {i} " + "x" * 60,
        namespace_id="ns",
    )


def build(path: Path, entries: int, dependents: int) -> tuple[str, float]:
    """Build the ledger; return O's id and the build time."""
    t0 = time.perf_counter()
    with Ledger.init(path, origin="example.org/bench-cascade", hooks=default_hooks()) as ledger:
        ledger.store.db.execute("PRAGMA synchronous=OFF")
        roots = Roots(ledger)
        n_filler = max(0, entries - 2 * dependents - 4 - entries // 1000)
        prev_event = None
        made = 0
        while made < n_filler:
            k = min(BATCH, n_filler - made)
            batch: list[Any] = [
                rq.assert_object(AGENT, "FACT", "OBSERVED", "USER_STATED", [prev_event], "f")
                if prev_event is not None and j % 5 == 4
                else _event(made + j)
                for j in range(k)
            ]
            out = ledger.append_batch(batch)
            prev_event = next(a.id for a in out if a.type == "EVENT")
            made += k
        done = ledger.size()
        log(f"  filler: {done} entries in {time.perf_counter() - t0:.1f}s")
        ev = ledger.append(_event(10**9)).id
        o = ledger.append(rq.assert_object(AGENT, "FACT", "OBSERVED", "USER_STATED", [ev], "O")).id
        batch = []
        for _ in range(dependents):
            sid = rq.assert_object(AGENT, "SUMMARY", "INFERRED", "SYSTEM_INFERRED", [ev], "sum")
            batch.append(sid)
            if len(batch) == BATCH // 2:
                added = ledger.append_batch(batch)
                ledger.append_batch(
                    [
                        rq.summary_created(AGENT, a.id, [o], (0, 1), "daily")
                        for a in added
                        if a.type == "ASSERT"
                    ]
                )
                batch = []
        if batch:
            added = ledger.append_batch(batch)
            ledger.append_batch(
                [
                    rq.summary_created(AGENT, a.id, [o], (0, 1), "daily")
                    for a in added
                    if a.type == "ASSERT"
                ]
            )
        roots.snapshot()
        Falsifier(ledger).falsify(o, "benchmark: the source was retracted")
        log(f"  built {ledger.size()} entries in {time.perf_counter() - t0:.1f}s")
    return o, time.perf_counter() - t0


def timed(fn: Any) -> tuple[Any, float, float]:
    """Call ``fn`` once; return its result, wall seconds and CPU seconds."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    """Build the ledger, time the cascade plan and apply, and print the figures."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--dependents", type=int, default=10_000)
    ap.add_argument("--max-depth", type=int, default=2)
    ap.add_argument("--max-items", type=int, default=20_000)
    ap.add_argument("--cli", action="store_true", help="also time `memroot cascade --dry-run`")
    ap.add_argument("--verify", action="store_true", help="also time the step 9 replay check")
    ap.add_argument(
        "--dir", type=Path, default=None, help="build here (kept) instead of a temp dir"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault(
        "MEMROOT_TRUSTED", str(Path(tempfile.gettempdir()) / "bench-cascade-trusted.json")
    )
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or Path(tmp)
        path = directory / "cascade.ledger"
        log(f"building {args.entries} entries with {args.dependents} dependents ...")
        origin, build_s = build(path, args.entries, args.dependents)
        result: dict[str, Any] = {
            "entries": None,
            "dependents": args.dependents,
            "max_depth": args.max_depth,
            "max_items": args.max_items,
            "build_seconds": round(build_s, 1),
        }
        with Ledger.open(path, hooks=default_hooks()) as ledger:
            result["entries"] = ledger.size()
            plan, wall, cpu = timed(
                lambda: Falsifier(ledger).plan(origin, args.max_depth, args.max_items)
            )
            result["plan"] = {
                "seconds": round(wall, 3),
                "cpu_seconds": round(cpu, 3),
                "touched": len(plan.touched),
                "beyond": len(plan.beyond),
                "roots": len(plan.roots),
            }
            log(f"plan: {wall:.3f}s wall, {cpu:.3f}s CPU, {len(plan.touched)} touched")
        if args.cli:
            t0 = time.perf_counter()
            subprocess.run(
                [
                    str(Path(sys.executable).parent / "memroot"),
                    "-l",
                    str(path),
                    "cascade",
                    origin,
                    "--max-depth",
                    str(args.max_depth),
                    "--max-items",
                    str(args.max_items),
                    "--dry-run",
                    "--json",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            result["cli_dry_run_seconds"] = round(time.perf_counter() - t0, 3)
            log(f"cli dry run: {result['cli_dry_run_seconds']}s")
        with Ledger.open(path, hooks=default_hooks()) as ledger:
            applied, wall, cpu = timed(
                lambda: Falsifier(ledger).cascade(origin, args.max_depth, args.max_items)
            )
            entry = ledger.entry(applied.appended[0].seq)
            result["apply"] = {
                "seconds": round(wall, 3),
                "cpu_seconds": round(cpu, 3),
                "touched": len(applied.plan.touched),
                "resnapshots": len(applied.plan.resnapshots),
                "entry_bytes": len(entry.raw),
            }
            log(f"apply: {wall:.3f}s wall, {cpu:.3f}s CPU, entry {len(entry.raw)} bytes")
        if args.verify:
            check = FalsifyReplayCheck(path)
            t0 = time.perf_counter()
            report = verify_path(path, checks=[check])
            result["verify_with_step9_seconds"] = round(time.perf_counter() - t0, 1)
            result["verify_findings"] = len(report.findings)
            secs = result["verify_with_step9_seconds"]
            log(f"verify (steps 1-7, 10 and the falsification step 9): {secs}s")
        result["command"] = " ".join(["python", *sys.argv])
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
