"""Interleaved A/B of the memory map's update: the native walk against the reference, CPU time.

    python bench/bench_map_update_ab.py update [--entries 100000] [--snapshots 50] [--rounds 3]
    python bench/bench_map_update_ab.py rebuild LEDGER [--rounds 3] [--verify] [--main-python PY]

Variants: ``native``, this build's ``state_map.update_map`` (``memroot._native.map_update``:
every changed path walked level by level, one batched read per level, hashed in Rust), and
``reference``, the same build with ``state_map._NATIVE_UPDATE`` off (the recursive Python
``update_map_reference``, one node read at a time). With ``--main-python`` (``rebuild``), the
main worktree's build too, as ``main``.

``update``: ``update_map`` alone, on ``bench_map.py``'s load: a map of 0.08 N items in one
namespace (built untimed), then ``--snapshots`` snapshots of 110 changes each (70 new items,
20 changed, 10 falsified, 10 of them twice), over two sources: ``mem``, the nodes in memory
(``MemNodes``, as a rebuild's replay holds them) and ``stored``, the nodes in SQLite
(``StoredNodes``, fresh caches each round, as a snapshot of a live ledger reads them). Each
round runs both variants on the same snapshots and reports CPU ms per snapshot (the update
only; the new nodes joined to the source, untimed). Both must give the same roots and nodes.

``rebuild``: ``memroot rebuild`` in a child process per run (``memroot.bench._hooked_child``,
imports left out) on a fresh copy of ``LEDGER`` (a mixed history, e.g. made by
``python -m memroot.bench._hooked_child mixed LEDGER 100000``): the child's CPU seconds of
the command and, for this build's variants, the CPU seconds spent inside ``update_map``.
``--verify`` also times ``memroot verify`` (all ten steps; step 8 replays the roots, maps
included) the same way, trusting the copy's keys on first use.

Rounds alternate the variants' order (ABBA). Prints one JSON document: every run, then min
and median per variant, and the medians' ratio reference / native.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_CHILD = """
import json, sys, time
from memroot.memory_root import _fold, root_v2, state_map
if sys.argv[1] == "reference":
    state_map._NATIVE_UPDATE = False
spent = [0.0, 0]
def timed(fn):
    def run(*args, **kw):
        c = time.process_time()
        try:
            return fn(*args, **kw)
        finally:
            spent[0] += time.process_time() - c
            spent[1] += 1
    return run
_fold.update_map = timed(_fold.update_map)
root_v2.update_map = timed(root_v2.update_map)
from memroot.bench import _hooked_child
from memroot.bench.machine import vm_hwm_kib
task, args = sys.argv[2], sys.argv[3:]
line = _hooked_child._rebuild(*args) if task == "rebuild" else _hooked_child._verify(*args)
line.update(update_map_cpu_s=spent[0], update_map_calls=spent[1], vm_hwm_kb=vm_hwm_kib())
print(json.dumps(line))
"""

_MAIN_CHILD = """
import json, sys
from memroot.bench import _hooked_child
_hooked_child.main(sys.argv[2:])
"""


def _summary(runs: dict[str, list[float]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        v: {"min": min(xs), "median": statistics.median(xs)} for v, xs in runs.items()
    }
    if "native" in runs and "reference" in runs:
        out["reference_vs_native"] = statistics.median(runs["reference"]) / statistics.median(
            runs["native"]
        )
    return out


def _rebuild(argv: list[str]) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="bench_map_update_ab.py rebuild")
    ap.add_argument("ledger", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--main-python", help="the python of a build of main (the main variant)")
    ap.add_argument("--verify", action="store_true", help="also time verify (all ten steps)")
    ns = ap.parse_args(argv)
    variants = ["native", "reference"] + (["main"] if ns.main_python else [])
    tasks = ["rebuild"] + (["verify"] if ns.verify else [])
    cpu: dict[str, dict[str, list[float]]] = {t: {} for t in tasks}
    inside: dict[str, dict[str, list[float]]] = {t: {} for t in tasks}
    rss: dict[str, dict[str, list[int]]] = {t: {} for t in tasks}
    loads = []
    with tempfile.TemporaryDirectory(dir=ns.ledger.parent) as tmp:
        for r in range(ns.rounds):
            # ABBA: each variant runs first in every other round (the first run of a round
            # was seen to be the slower one).
            for variant in variants if r % 2 == 0 else variants[::-1]:
                copy = Path(tmp) / f"{variant}-{r}.ledger"
                for f in ns.ledger.parent.glob(ns.ledger.name + "*"):
                    shutil.copyfile(f, copy.parent / (copy.name + f.name[len(ns.ledger.name) :]))
                loads.append(os.getloadavg())
                python = ns.main_python if variant == "main" else sys.executable
                child = _MAIN_CHILD if variant == "main" else _CHILD
                for task in tasks:
                    args = [str(copy)]
                    if task == "verify":
                        args.append(str(Path(tmp) / f"{variant}-{r}-trusted.json"))
                    done = subprocess.run(
                        [python, "-c", child, variant, task, *args],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    got = json.loads(done.stdout.strip().splitlines()[-1])
                    if not got.get("identical", got.get("ok")):
                        raise SystemExit(f"{variant}: {task} of {copy} failed: {got}")
                    cpu[task].setdefault(variant, []).append(got["cpu_s"])
                    rss[task].setdefault(variant, []).append(got["vm_hwm_kb"])
                    if "update_map_cpu_s" in got:
                        inside[task].setdefault(variant, []).append(got["update_map_cpu_s"])
                    print(
                        f"round {r + 1} {variant} {task}: {got['cpu_s']:.2f} s CPU, "
                        f"update_map {got.get('update_map_cpu_s', float('nan')):.3f} s",
                        file=sys.stderr,
                    )
                for f in Path(tmp).glob(copy.name + "*"):
                    f.unlink()
    return {
        "cpu_s": cpu,
        "update_map_cpu_s": inside,
        "rss_kb": rss,
        "summary": {
            t: {"cpu_s": _summary(cpu[t]), "update_map_cpu_s": _summary(inside[t])} for t in tasks
        },
        "load": [*loads, os.getloadavg()],
    }


def _snapshots(n_items: int, snapshots: int) -> list[dict[bytes, bytes | None]]:
    from memroot.memory_root import state_map as mm

    rng = random.Random(n_items)
    out: list[dict[bytes, bytes | None]] = []
    next_id = n_items
    for s in range(snapshots):
        changes: dict[bytes, bytes | None] = {}
        for _ in range(70):
            changes[mm.item_key("object", f"o{next_id}")] = mm.value_hash({"seq": next_id})
            next_id += 1
        for _ in range(20):
            i = rng.randrange(n_items)
            changes[mm.item_key("object", f"o{i}")] = mm.value_hash({"seq": i, "v": s})
        for j in range(10):
            changes[mm.item_key("state/memory_object", f"f{s}-{j}")] = mm.value_hash(
                {"state": "falsified", "seq": s}
            )
        out.append(changes)
    return out


def _update(argv: list[str]) -> dict[str, Any]:
    import apsw

    from memroot.memory_root import state_map as mm
    from memroot.memory_root._fold import MemNodes
    from memroot.memory_root.map_nodes import StoredNodes, install

    ap = argparse.ArgumentParser(prog="bench_map_update_ab.py update")
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--snapshots", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ns = ap.parse_args(argv)
    n_items = ns.entries * 8 // 100
    items: dict[bytes, bytes | None] = {
        mm.item_key("object", f"o{i}"): mm.value_hash({"seq": i}) for i in range(n_items)
    }
    start = mm.update_map_reference(MemNodes(), mm.EMPTY, {"bench": items})
    snaps = _snapshots(n_items, ns.snapshots)
    runs: dict[str, dict[str, list[float]]] = {"mem": {}, "stored": {}}
    results: dict[str, list[tuple[bytes, int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = apsw.Connection(str(Path(tmp) / "map.db"))
        db.execute("PRAGMA journal_mode=WAL")
        with db:
            install(db)
            StoredNodes(db).put(start.nodes)
        for _ in range(ns.rounds):
            for source in ("mem", "stored"):
                for variant in ("native", "reference"):
                    mm._NATIVE_UPDATE = variant == "native"
                    nodes: Any
                    if source == "mem":
                        nodes = MemNodes()
                        nodes.nodes.update(start.nodes)
                    else:
                        nodes = MemNodes(StoredNodes(db))  # the new nodes held in memory
                    root, cpu = start.root, 0.0
                    made: list[tuple[bytes, int]] = []
                    for changes in snaps:
                        c = time.process_time()
                        u = mm.update_map(nodes, root, {"bench": changes})
                        cpu += time.process_time() - c
                        nodes.nodes.update(u.nodes)
                        root = u.root
                        made.append((u.root, len(u.nodes)))
                    mm._NATIVE_UPDATE = True
                    if results.setdefault(source, made) != made:
                        raise SystemExit(f"{source}: the variants gave different maps")
                    runs[source].setdefault(variant, []).append(1e3 * cpu / len(snaps))
                    print(
                        f"{source} {variant}: {1e3 * cpu / len(snaps):.3f} ms CPU per snapshot",
                        file=sys.stderr,
                    )
        db.close()
    return {
        "entries": ns.entries,
        "items": n_items,
        "snapshots": ns.snapshots,
        "nodes_per_snapshot": statistics.mean(n for _, n in results["mem"]),
        "cpu_ms_per_snapshot": runs,
        "summary": {source: _summary(r) for source, r in runs.items()},
    }


def main(argv: list[str] | None = None) -> None:
    """Run the A/B named by the first argument; print one JSON document."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("update", "rebuild"):
        raise SystemExit(__doc__)
    out = _update(args[1:]) if args[0] == "update" else _rebuild(args[1:])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
