"""Benchmark the memory map (memory_root.state_map) on the mixed history's change rate.

Not a test. The mixed benchmark history (``bench.hooked.mixed_history``) has, per 1,000
entries (one automatic snapshot), 100 operations: about 70 ``ASSERT`` (a new object each),
10 ``SUPERSEDE`` and 10 ``DEPRECATE`` (one object changed each) and 10 ``FALSIFY`` (a new
falsification item each). A history of N entries therefore holds about 0.08 N map items, and
each snapshot changes about 110 leaves. For each N this builds a stored map of 0.08 N items
in one namespace (as the mixed history uses one), untimed, then measures over ``--snapshots``
snapshots of 110 changes each:

- ``rows`` and ``bytes``: node rows a snapshot adds to ``memory_map_nodes`` and the growth of
  the SQLite file per snapshot (pages x page size, after a WAL checkpoint);
- ``cpu_ms``: CPU per snapshot (update + store);
- ``proofs_per_s``: object proofs generated from the stored nodes and verified (both halves:
  the item path and the namespace path), and the mean ``proof_bytes`` (32 per sibling, 64 per
  end leaf, both paths);
- the baseline, measured in the same run: the bytes a v1 root stores for
  ``falsification-state`` at the same history length (its summary, stored as ``data`` and
  again as ``fold_state``, names every item ever falsified: 0.01 N items).

Usage::

    python bench/bench_map.py --sizes 100000 1000000 [--snapshots 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import apsw

from memroot.memory_root import state_map as mm
from memroot.memory_root.map_nodes import StoredNodes, install
from memroot.projections.builtins import ItemStates

NS = "bench"


def _value(i: int, version: int) -> bytes:
    return mm.value_hash({"lifecycle": "ACTIVE" if version == 0 else "DEPRECATED", "seq": i})


def _file_bytes(db: apsw.Connection) -> int:
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ((pages, size),) = db.execute(
        "SELECT page_count, page_size FROM pragma_page_count(), pragma_page_size()"
    ).fetchall()
    assert type(pages) is int and type(size) is int
    return pages * size


def _proof_bytes(p: mm.MapProof) -> int:
    return 32 * len(p.siblings) + (64 if p.leaf is not None else 0)


def run(entries: int, snapshots: int, proofs: int, tmp: Path) -> dict[str, Any]:
    """Measure one history length (see the module docstring)."""
    rng = random.Random(entries)
    n_items = entries * 8 // 100
    db = apsw.Connection(str(tmp / f"map{entries}.db"))
    db.execute("PRAGMA journal_mode=WAL")
    nodes = StoredNodes(db)
    keys = [mm.item_key("object", f"o{i}") for i in range(n_items)]
    with db:
        install(db)
        u = mm.update_map(nodes, mm.EMPTY, {NS: {k: _value(i, 0) for i, k in enumerate(keys)}})
        nodes.put(u.nodes)
    root = u.root
    start_bytes = _file_bytes(db)
    rows = 0
    cpu = 0.0
    next_id = n_items
    for s in range(snapshots):
        changes: dict[bytes, bytes | None] = {}
        for _ in range(70):
            changes[mm.item_key("object", f"o{next_id}")] = _value(next_id, 0)
            next_id += 1
        for _ in range(20):
            i = rng.randrange(n_items)
            changes[keys[i]] = _value(i, 1)
        for j in range(10):
            changes[mm.item_key("state/memory_object", f"f{s}-{j}")] = mm.value_hash(
                {"state": "falsified", "seq": s}
            )
        t = time.process_time()
        with db:
            u = mm.update_map(nodes, root, {NS: changes})
            rows += nodes.put(u.nodes)
        cpu += time.process_time() - t
        root = u.root
    grown = _file_bytes(db) - start_bytes
    ns_value = mm.lookup(nodes, root, mm.namespace_key(NS))
    assert ns_value is not None
    sample = [keys[rng.randrange(n_items)] for _ in range(proofs)]
    size = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    nk = mm.namespace_key(NS)
    for k in sample:
        item = mm.prove(nodes, ns_value, k)
        path = mm.prove(nodes, root, nk)
        assert item.leaf is not None
        mm.verify_included(ns_value, k, item.leaf.value, item)
        mm.verify_included(root, nk, ns_value, path)
        size += _proof_bytes(item) + _proof_bytes(path)
    wall = time.perf_counter() - t0
    pcpu = time.process_time() - c0
    # v1 baseline: falsification-state names every item falsified so far (0.01 N), stored
    # twice per root (summary data and fold state).
    states = ItemStates()
    for i in range(entries // 100):
        states.set("memory_object", f"{hashlib.sha256(b'%d' % i).hexdigest()[:36]}", {
            "state": "falsified", "seq": i * 100})  # fmt: skip
    v1 = 2 * len(states.encoded())
    db.close()
    return {
        "entries": entries,
        "items": n_items,
        "snapshots": snapshots,
        "rows_per_snapshot": rows / snapshots,
        "bytes_per_snapshot": grown / snapshots,
        "cpu_ms_per_snapshot": 1e3 * cpu / snapshots,
        "proofs_per_s_wall": proofs / wall,
        "proofs_per_s_cpu": proofs / pcpu,
        "proof_bytes_mean": size / proofs,
        "v1_falsification_state_bytes_per_root": v1,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print one JSON line per size."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--snapshots", type=int, default=50)
    ap.add_argument("--proofs", type=int, default=20_000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out = []
    with tempfile.TemporaryDirectory() as d:
        for n in args.sizes:
            r = run(n, args.snapshots, args.proofs, Path(d))
            out.append(r)
            sys.stdout.write(json.dumps(r) + "\n")
            sys.stdout.flush()
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
