"""Benchmark memory-root snapshots and their replay (issue 4; not a test).

For each size it builds a ledger with the memory_root hook (automatic snapshots every 1000
entries, as `memroot init` does by default), then measures:

- ``append``: entries/s appending in batches of 1000, hook on (automatic snapshots included),
  and, with ``--baseline``, the same appends without any hook;
- ``snapshot_warm``: an on-demand snapshot after 999 new entries, in the process that appended
  them (the fold state is in memory): the SNAPSHOT append plus the checkpoint signature;
- ``snapshot_cold``: the same in a freshly opened ledger, as ``memroot snapshot`` runs: load the
  projection states of the last root, fold the entries after its high-water from the file;
- ``replay``: step 8 alone, every root of the ledger recomputed from scratch by
  ``RootsReplay`` over decoded entries (entries/s, CPU time);
- ``verify``: a full ``verify`` with step 8, and the CPU time spent inside step 8 (the check
  wrapped in a timer), i.e. the replay of every root plus the comparison of stored records.

Usage::

    python bench/bench_roots.py --sizes 100000 1000000 [--baseline] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memroot.ledger.entries import EventInput, OpInput, new_uuid
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import verify_path
from memroot.memory_root import Roots, RootsHook
from memroot.memory_root.replay import RootsReplay, RootsReplayCheck
from memroot.projections.registry import default_registry

BATCH = 1000


class Clock:
    """Wall-clock and CPU seconds of a block (CPU time is what contention cannot inflate)."""

    def __enter__(self) -> Clock:
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall0
        self.cpu = time.process_time() - self.cpu0


MOTIFS = ["TITLE_MISMATCH", "WARRANT_MISSING", "DEFLECTION"]


def items(n: int, rng: random.Random) -> Iterator[EventInput | OpInput]:
    """Yield a mix of what an agent appends: events, memory operations, audit records."""
    for i in range(n):
        r = rng.random()
        if r < 0.6:
            yield EventInput(
                stream=f"s{i % 50}",
                actor_id="user-1",
                actor_type="HUMAN_USER",
                role="USER",
                content=f"message {i} " + "x" * 80,
                namespace_id="agent-7",
            )
            continue
        if r < 0.8:
            op, payload, target = (
                "ASSERT",
                {
                    "object_type": "FACT",
                    "epistemic_type": rng.choice(["OBSERVED", "ASSERTED", "INFERRED"]),
                    "source_type": "USER_STATED",
                    "evidence_ids": [new_uuid()],
                    "value": f"v{i}",
                    "confidence": 0.8,
                    "salience": 0.5,
                },
                new_uuid(),
            )
        elif r < 0.9:
            op, payload, target = (
                "VIOLATION_RECORDED",
                {"motif": rng.choice(MOTIFS), "source": f"source-{rng.randrange(200)}"},
                None,
            )
        elif r < 0.95:
            op, payload, target = (
                "CORRECTION_APPLIED",
                {"correction": f"fix {i}", "accepted_by": "verifier-2"},
                None,
            )
        else:
            op, payload, target = "DEPRECATE", {"reason": "old", "deprecated_by": "a"}, new_uuid()
        yield OpInput(
            op_type=op,
            actor_id="agent-7",
            actor_type="AI_AGENT",
            namespace_id="agent-7",
            payload=payload,
            policy_version="policy/1",
            target_id=target,
        )


def build(path: Path, size: int, hooked: bool, seed: int) -> dict[str, float]:
    """Create a ledger of about ``size`` entries; return appended entries/s (wall and CPU)."""
    rng = random.Random(seed)
    hooks = [RootsHook()] if hooked else []
    with Ledger.init(path, origin="bench.example/roots", hooks=hooks) as ledger:
        roots = Roots(ledger) if hooked else None
        todo = size - 1
        stream = items(todo, rng)
        with Clock() as c:
            while todo > 0:
                batch = [next(stream) for _ in range(min(BATCH, todo))]
                if roots is not None:
                    roots.append_batch(batch)
                else:
                    ledger.append_batch(batch)
                todo -= len(batch)
    return {
        "entries_per_s_wall": round((size - 1) / c.wall),
        "entries_per_s_cpu": round((size - 1) / c.cpu),
    }


def snapshot_times(path: Path, rounds: int, seed: int) -> dict[str, Any]:
    """Median ms (wall and CPU) of an on-demand snapshot after 999 new entries, warm and cold."""
    rng = random.Random(seed)
    runs: dict[str, list[tuple[float, float]]] = {"warm": [], "cold": []}
    for _ in range(rounds):
        with Ledger.open(path, hooks=[RootsHook()]) as ledger:
            roots = Roots(ledger)
            roots.snapshot()
            roots.append_batch(list(items(999, rng)))
            with Clock() as c:
                res = roots.snapshot()
            runs["warm"].append((c.wall * 1000, c.cpu * 1000))
            assert res.created
        with Ledger.open(path, hooks=[RootsHook()]) as ledger:
            ledger.append_batch(list(items(999, rng)))
        with Ledger.open(path, hooks=[RootsHook()]) as ledger:
            with Clock() as c:
                res = Roots(ledger).snapshot()
            runs["cold"].append((c.wall * 1000, c.cpu * 1000))
            assert res.created
    out: dict[str, Any] = {}
    for kind, xs in runs.items():
        out[f"{kind}_ms_wall_median"] = round(statistics.median(x[0] for x in xs), 1)
        out[f"{kind}_ms_cpu_median"] = round(statistics.median(x[1] for x in xs), 1)
        out[f"{kind}_ms_wall"] = [round(x[0], 1) for x in xs]
    return out


def replay_rate(path: Path, chunk: int = 20_000) -> dict[str, Any]:
    """Entries/s of RootsReplay alone (every root recomputed), decoding excluded.

    Entries are decoded a chunk at a time (memory stays flat) and only the replay of each
    decoded chunk is timed, in CPU seconds so other processes do not skew it.
    """
    replay = RootsReplay(default_registry())
    n = roots = 0
    cpu = 0.0
    with Ledger.open(path, hooks=()) as ledger:
        stream = ledger.entries()
        while True:
            batch = [e for _, e in zip(range(chunk), stream, strict=False)]
            if not batch:
                break
            with Clock() as c:
                for e in batch:
                    if replay.feed(e) is not None:
                        roots += 1
            cpu += c.cpu
            n += len(batch)
    return {
        "entries": n,
        "roots_replayed": roots,
        "replay_cpu_s": round(cpu, 2),
        "entries_per_s_cpu": round(n / cpu),
    }


class TimedCheck:
    """A ReplayCheck wrapper that adds up the CPU time spent inside the wrapped check."""

    def __init__(self, check: RootsReplayCheck) -> None:
        self.check = check
        self.steps = check.steps
        self.cpu = 0.0

    def feed(self, branch: str, entry: Any, report: Any) -> None:
        """Feed the wrapped check, counting its CPU time."""
        t = time.process_time()
        self.check.feed(branch, entry, report)
        self.cpu += time.process_time() - t

    def finish(self, report: Any) -> None:
        """Finish the wrapped check, counting its CPU time."""
        t = time.process_time()
        self.check.finish(report)
        self.cpu += time.process_time() - t


def verify_times(path: Path, repeat: int = 2) -> dict[str, Any]:
    """Time a full verify with step 8: the total, and the CPU time spent in step 8 itself."""
    best: dict[str, Any] = {}
    for _ in range(repeat):
        timed = TimedCheck(RootsReplayCheck(path))
        with Clock() as c:
            report = verify_path(path, checks=[timed], update_trusted=False)
        assert report.ok, [str(f) for f in report.findings][:5]
        n = report.entries
        run = {
            "entries": n,
            "verify_wall_s": round(c.wall, 2),
            "verify_cpu_s": round(c.cpu, 2),
            "step8_cpu_s": round(timed.cpu, 2),
            "step8_entries_per_s_cpu": round(n / timed.cpu),
            "verify_entries_per_s_wall": round(n / c.wall),
        }
        if not best or run["step8_cpu_s"] < best["step8_cpu_s"]:
            best = run
    return best


def main() -> None:
    """Run the benchmark for each size and print (or write) the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", action="store_true", help="also append without hooks")
    ap.add_argument("--no-verify", action="store_true", help="skip the full verify timing")
    ap.add_argument("--verify-repeat", type=int, default=2, help="verify runs (best of)")
    ap.add_argument(
        "--dir", type=Path, help="keep the ledgers here, reusing any already built (default: temp)"
    )
    ap.add_argument("--json", type=Path, help="write the results to this file")
    args = ap.parse_args()
    out: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        # --dir keeps the ledgers (and reuses one already built there); else a temp dir.
        tmp = str(args.dir) if args.dir else stack.enter_context(tempfile.TemporaryDirectory())
        for size in args.sizes:
            path = Path(tmp) / f"roots-{size}.ledger"
            res: dict[str, Any] = {}
            if not path.exists():
                res["append_hooked"] = build(path, size, True, 1)
            if args.baseline:
                plain = Path(tmp) / f"plain-{size}.ledger"
                if not plain.exists():
                    res["append_no_hooks"] = build(plain, size, False, 1)
            res["snapshot_after_1000"] = snapshot_times(path, args.rounds, 2)
            res["replay_step8_only"] = replay_rate(path)
            if not args.no_verify:
                res["verify"] = verify_times(path, args.verify_repeat)
            res["file_mb"] = round(path.stat().st_size / 1e6, 1)
            out[str(size)] = res
            print(json.dumps({size: res}, indent=2), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
