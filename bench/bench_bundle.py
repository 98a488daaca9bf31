"""Benchmark: export and offline audit of a large auditor's bundle (issue 7's speed target).

Builds a ledger of N appended entries (two thirds events with ~120 bytes of content, one third
operations; built in bulk, not timed against a target), then runs each measured phase in a
fresh child process and reports its wall time, entries per second and peak RSS:

    export   memroot's export_bundle (signs a checkpoint, streams every file)
    audit    the offline auditor over the bundle (every step, native blake3)
    baseline a child that only imports memroot (the RSS floor to compare with)

Usage:
    python bench/bench_bundle.py --entries 100000 [--dir /tmp/bench] [--json]

Memory is bounded when the export and audit peaks stay near the baseline as N grows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memroot.bench.machine import peak_rss_kib

ORIGIN = "bench.example/bundle"


def build(path: Path, n: int) -> float:
    """Build a ledger of ``n`` entries (two thirds events, one third operations); return seconds."""
    from memroot.ledger.entries import EventInput, OpInput
    from memroot.ledger.ledger import Ledger

    start = time.perf_counter()
    with Ledger.init(path, origin=ORIGIN, hooks=()) as ledger, ledger.bulk():
        for lo in range(0, n, 5000):
            items: list[EventInput | OpInput] = []
            for i in range(lo, min(n, lo + 5000)):
                if i % 3:
                    items.append(
                        EventInput(
                            stream=f"session-{i % 7}",
                            actor_id="agent-7",
                            actor_type="AI_AGENT",
                            role="ASSISTANT",
                            content=f"message {i}: " + "x" * 110,
                            namespace_id="ns",
                        )
                    )
                else:
                    items.append(
                        OpInput(
                            op_type="ENTITY_CREATE",
                            actor_id="extractor",
                            actor_type="AI_AGENT",
                            namespace_id="ns",
                            payload={"entity_type": "PERSON", "canonical_name": f"E{i}"},
                            policy_version="policy/1",
                        )
                    )
            ledger.append_batch(items)
    return time.perf_counter() - start


def phase(name: str, ledger: Path, bundle: Path) -> dict[str, Any]:
    """Run one phase in this (child) process; return its timing and peak RSS."""
    from memroot.ledger.bundle.audit import audit_bundle
    from memroot.ledger.bundle.export import export_bundle
    from memroot.ledger.ledger import Ledger

    start = time.perf_counter()
    entries = 0
    ok = True
    if name == "export":
        with Ledger.open(ledger, hooks=()) as led:
            manifest = export_bundle(led, bundle)
        entries = sum(b.size for b in manifest.branches)
    elif name == "audit":
        report = audit_bundle(bundle, update_trusted=False)
        entries, ok = report.entries, report.ok
    seconds = time.perf_counter() - start
    return {
        "phase": name,
        "entries": entries,
        "seconds": round(seconds, 3),
        "entries_per_s": round(entries / seconds) if entries else None,
        "peak_rss_mib": round(peak_rss_kib() / 1024, 1),
        "ok": ok,
    }


def run_child(name: str, ledger: Path, bundle: Path) -> dict[str, Any]:
    """Run phase ``name`` in a fresh interpreter (this script) and return its JSON line."""
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--phase",
            name,
            "--ledger",
            str(ledger),
            "--bundle",
            str(bundle),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> None:
    """Build the ledger, run each phase in a child and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--ledger", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--bundle", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.ledger, args.bundle)))
        return
    work = Path(args.dir or tempfile.mkdtemp(prefix="memroot-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    ledger, bundle = work / "bench.ledger", work / "bench.bundle"
    for p in (ledger, Path(f"{ledger}.key"), Path(f"{ledger}-wal"), Path(f"{ledger}-shm")):
        p.unlink(missing_ok=True)
    shutil.rmtree(bundle, ignore_errors=True)
    built = build(ledger, args.entries)
    results = [run_child(name, ledger, bundle) for name in ("baseline", "export", "audit")]
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
    doc = {
        "entries": args.entries + 1,
        "build_seconds": round(built, 2),
        "bundle_mib": round(size / 2**20, 1),
        "load_average": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "phases": results,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(
            f"{doc['entries']} entries, bundle {doc['bundle_mib']} MiB, built in "
            f"{doc['build_seconds']} s (load average {doc['load_average']:.2f})"
        )
        for r in results:
            rate = f"{r['entries_per_s']:>9,} entries/s" if r["entries_per_s"] else " " * 20
            print(
                f"  {r['phase']:<8} {r['seconds']:>8.2f} s {rate}  peak RSS {r['peak_rss_mib']} MiB"
            )
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
