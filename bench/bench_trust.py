"""Cost of trust at every read (issue 11): the per-append seal and strict reads.

    python bench/bench_trust.py                       # defaults: 300 durable, 10^4 entries
    python bench/bench_trust.py --durable 500 --entries 20000 --json

Phases (fresh temporary files each, removed afterwards; sides interleaved, best of
``--repeat`` for throughput, medians for latencies):

1. Seal. Durable single appends (one fsync'd transaction each) and batched appends (1,000 and
   100 entries per transaction) on two ledgers: as shipped (every transaction seals a signed
   head checkpoint before it commits) and with the seal taken out of the store's commit
   callbacks (what an append cost before issue 11), in interleaved blocks so that machine
   load hits both sides alike. The ratio is sealed / unsealed (medians of the block rates).
2. Strict reads. On a ledger of ``--entries`` entries (events and ASSERTs through the CLI's
   hooks): ``memroot show`` at random seqs, ``memroot log --limit 50`` at random starts and
   ``memroot query`` (50 objects, each re-derived from its operations; on main, and on a
   SIMULATION fork made after them, where all 50 are inherited), each run in process
   through the CLI (open, checks, JSON output) with and without ``--no-strict``; and the
   library calls alone (``Ledger.read`` one entry, ``read_range`` of 1,000). The ratio is
   strict / non-strict time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from memroot.cli.main import cli
from memroot.ledger.entries import EventInput
from memroot.ledger.ledger import Ledger
from memroot.memory_root.branches import create_branch
from memroot.memory_root.stack import default_hooks
from memroot.projections import requests as rq


def _event(i: int) -> EventInput:
    return EventInput(
        stream=f"s{i % 7}",
        actor_id="alice",
        actor_type="HUMAN_USER",
        role="USER",
        content=f"message {i}: " + "x" * 80,
        namespace_id="alice",
    )


def _unsealed(ledger: Ledger) -> Ledger:
    """Take the seal out of the store's commit callbacks (the cost before issue 11)."""
    ledger.store._before_commit.clear()
    ledger.store._after_rollback.clear()
    return ledger


def _rate(n: int, fn: Callable[[], None]) -> float:
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


def bench_seal(durable: int, repeat: int) -> dict[str, Any]:
    """Sealed vs unsealed appends on two ledgers, in interleaved blocks (medians of blocks)."""
    out: dict[str, Any] = {}
    cases = {
        "durable single append": (durable, 1, 25),
        "batched append, 1,000 per transaction": (20_000 * repeat, 1000, 2000),
        "batched append, 100 per transaction": (10_000 * repeat, 100, 1000),
    }
    for name, (n, per, block) in cases.items():
        items = [_event(i) for i in range(block)]
        rates: dict[str, list[float]] = {"sealed": [], "unsealed": []}
        with tempfile.TemporaryDirectory() as d:
            ledgers = {
                "sealed": Ledger.init(Path(d) / "sealed.db", hooks=()),
                "unsealed": _unsealed(Ledger.init(Path(d) / "unsealed.db", hooks=())),
            }
            for _ in range(max(1, n // block)):
                for side, ledger in ledgers.items():

                    def run(
                        ledger: Ledger = ledger,
                        items: list[EventInput] = items,
                        block: int = block,
                        per: int = per,
                    ) -> None:
                        for s in range(0, block, per):
                            ledger.append_batch(items[s : s + per])

                    rates[side].append(_rate(block, run))
            for ledger in ledgers.values():
                ledger.close()
        sealed, unsealed = (statistics.median(rates[k]) for k in ("sealed", "unsealed"))
        out[name] = {
            "sealed_per_s": round(sealed),
            "unsealed_per_s": round(unsealed),
            "ratio": round(sealed / unsealed, 3),
            "blocks": len(rates["sealed"]),
        }
        print(f"  {name}: {out[name]}", file=sys.stderr)
    return out


def _build(path: Path, entries: int) -> list[str]:
    """Write a ledger of ``entries`` entries: events, each second one followed by an ASSERT."""
    agent = rq.Actor("agent-7", namespace_id="alice")
    with Ledger.init(path, hooks=default_hooks()) as ledger:
        items: list[Any] = []
        objects: list[str] = []
        i = 0
        while len(items) < entries:
            ev = _event(i)
            items.append(ev)
            i += 1
            if i % 2 == 0:
                items.append("assert")
        # events need their ids before the ASSERTs cite them: append in chunks
        chunk: list[Any] = []
        last_event: str | None = None
        for item in items:
            if item == "assert":
                if chunk:
                    appended = ledger.append_batch(chunk)
                    last_event = [a.id for a in appended if a.type == "EVENT"][-1]
                    chunk = []
                assert last_event is not None
                op = rq.assert_object(
                    agent, "FACT", "OBSERVED", "USER_STATED", [last_event], f"fact {len(objects)}"
                )
                objects.append(ledger.append(op).id)
            else:
                chunk.append(item)
        if chunk:
            ledger.append_batch(chunk)
    return objects


def _cli_time(path: Path, args: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        result = CliRunner().invoke(cli, ["-l", str(path), *args])
        times.append(time.perf_counter() - t)
        assert result.exit_code == 0, result.output
    return statistics.median(times[1:]) * 1000


def _range(ledger: Ledger, rng: random.Random, size: int) -> int:
    start = rng.randrange(size - 1000)
    return sum(1 for _ in ledger.read_range(start, start + 1000))


def bench_reads(entries: int, runs: int) -> dict[str, Any]:
    """Time strict and non-strict reads (CLI show/log/query, ``Ledger.read``/``read_range``)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "reads.ledger"
        _build(path, entries)
        with Ledger.open(path, strict=False, hooks=default_hooks()) as ledger:
            size = ledger.size()
            # A fork after everything: its reads serve inherited objects (issue 28 point 1).
            _, genesis = create_branch(
                ledger, branch_type="SIMULATION", purpose="bench", actor_id="alice"
            )
            fork = genesis.branch
        rng = random.Random(1)
        commands: dict[str, Callable[[], list[str]]] = {
            "show": lambda: ["show", str(rng.randrange(size)), "--json"],
            "log --limit 50": lambda: ["log", "--start", str(rng.randrange(size - 50)), "--json"],
            "query (50 objects)": lambda: ["query", "--json"],
            "query --branch (50 inherited objects)": lambda: ["query", "-b", fork, "--json"],
        }
        for name, make in commands.items():
            med: dict[str, float] = {}
            for side, extra in (("non-strict", ["--no-strict"]), ("strict", [])):
                times = []
                for _ in range(runs):
                    args = make() + extra
                    times.append(_cli_time(path, args, 2))
                med[side] = statistics.median(times)
            out[f"memroot {name}"] = {
                "strict_ms": round(med["strict"], 2),
                "non_strict_ms": round(med["non-strict"], 2),
                "ratio": round(med["strict"] / med["non-strict"], 2),
            }
            print(f"  memroot {name}: {out[f'memroot {name}']}", file=sys.stderr)
        readers: dict[str, Callable[[Ledger], Callable[[], object]]] = {
            "Ledger.read (one entry, open ledger)": lambda led: (
                lambda: led.read(rng.randrange(size))
            ),
            "Ledger.read_range (1,000 entries)": lambda led: lambda: _range(led, rng, size),
        }
        for name, fn_of in readers.items():
            med = {}
            for side, strict in (("non-strict", False), ("strict", True)):
                with Ledger.open(path, readonly=True, strict=strict) as led:
                    fn = fn_of(led)
                    fn()
                    times = []
                    for _ in range(runs * 10):
                        t = time.perf_counter()
                        fn()
                        times.append(time.perf_counter() - t)
                med[side] = statistics.median(times) * 1000
            out[name] = {
                "strict_ms": round(med["strict"], 3),
                "non_strict_ms": round(med["non-strict"], 3),
                "ratio": round(med["strict"] / med["non-strict"], 2),
            }
            print(f"  {name}: {out[name]}", file=sys.stderr)
    return out


def main() -> None:
    """Run both phases and print the figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--durable", type=int, default=300)
    p.add_argument("--entries", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    started = time.time()
    print("seal:", file=sys.stderr)
    seal = bench_seal(a.durable, a.repeat)
    print("strict reads:", file=sys.stderr)
    reads = bench_reads(a.entries, a.runs)
    figures = {
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
        "seconds": round(time.time() - started, 1),
        "seal": seal,
        "reads": reads,
    }
    if a.json:
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
