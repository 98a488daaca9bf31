"""Memory roots v2 on the mixed history: bytes per snapshot and append rate vs history length.

Not a test. Appends ``memroot.bench.hooked.mixed_history`` (90% events; per 1,000 entries ~70
``ASSERT``, 10 ``SUPERSEDE``, 10 ``DEPRECATE``, 10 ``FALSIFY``, so 10% of the objects end
falsified) through the CLI's default hooks in batches of 1,000 (one automatic snapshot
each, every root one with the map: v2, or v3 since the writer writes v3), and over the last
``--window`` batches reports:

- ``root_bytes``: bytes the memory-root layer stores per snapshot: the root's row, its
  summaries (``data`` plus the newest root's ``fold_state``) and the map nodes it adds
  (``map_nodes.ROW_BYTES`` of columns a row, and ``ROOT_ROW_BYTES`` a row of
  ``memory_map_roots``; before rows were found by position: 97 bytes a row, no roots rows);
- ``node_rows``: map node rows added per snapshot (the last row number's growth: ``_node_rows``;
  ``start_rows``: ``memory_map_roots`` rows);
- ``file_bytes``: growth of the ledger file per batch (pages x page size, WAL checkpointed);
- ``append_per_s``: the window's append rate (entries/s, hooks and checkpoint included);
  ``append_per_cpu_s`` the same per second of the process's CPU time (what a loaded machine
  moves least: the wall rate also counts the time other processes hold the cores).

``--writer-only N ...``: the same history and figures ``root_bytes`` / ``node_rows`` from the
memory-root writer's own fold alone (``memory_root._fold.BranchFold``, the code ``RootsHook``
runs, with the registered projections and the map in memory), without a ledger: no hooks, no
SQLite, no signing, events not built (no projection reads them and they set no leaf), so it
reaches 10^7 entries in minutes where the full append takes hours on a loaded machine. The
operations get the seqs the ledger would give them (one ``SNAPSHOT`` after each 1,000
entries); a node counts as added unless the map in memory holds it (nodes no map reaches any
more are dropped, as the auditor drops them, so one recreated later counts again: the store
would not). Run beside ``--sizes`` at the same sizes to compare the two.

``--violations`` (with ``--writer-only``): every 10th event of the history becomes a
``VIOLATION_RECORDED`` of one motif from a source no earlier violation named (40 characters,
``with_violations``), so 10^5 entries name 10,000 distinct sources; ``--motifs-v1`` folds with
``failure-motifs`` version 1 active instead of version 2 (the writer before version 2), to
compare what each stores per snapshot.

``--query N ...`` (with ``--sizes`` empty): the cost of a strict ``recall`` (limit 20) with
and without the completeness check of the memory map, on ledgers of N remembered facts.

Usage::

    python -m memroot.bench.bench_rootsv2 --sizes 100000 1000000 [--window 20] [--json F]
    python -m memroot.bench.bench_rootsv2 --sizes --writer-only 100000 1000000 10000000
    python -m memroot.bench.bench_rootsv2 --sizes --writer-only 100000 --violations [--motifs-v1]
    python -m memroot.bench.bench_rootsv2 --sizes --query 1000 10000 [--reads 30]
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

if TYPE_CHECKING:
    from memroot.ledger.entries import EventInput, OpInput


def _one(db: apsw.Connection, sql: str, args: tuple[Any, ...] = ()) -> int:
    row = db.execute(sql, args).fetchone()
    assert row is not None
    return int(row[0])


def _node_rows(db: apsw.Connection) -> int:
    """Return the number of the last node row: rows are appended by number, never deleted.

    Not ``count(*)``: that scans the whole node table (4.6 million rows at 10^6 entries,
    46 million at 10^7) through SQLite's page cache before and after every measured batch,
    evicting the pages the next batch reads (so the figure grew with the table for a reason
    no writer has).
    """
    return _one(db, "SELECT coalesce(max(at), 0) FROM memory_map_nodes")


def _root_bytes(db: apsw.Connection, root: bytes) -> int:
    summaries = _one(
        db,
        "SELECT coalesce(sum(length(data) + coalesce(length(fold_state), 0) + length(rule_cbor) "
        "+ 64 + length(projection)), 0) FROM memory_root_summaries WHERE root = ?",
        (root,),
    )
    return summaries + 32 * 6 + 40


def run(n: int, window: int, work: Path) -> dict[str, Any]:
    """Append ``n`` mixed entries; return the figures over the last ``window`` batches."""
    from click.testing import CliRunner

    from memroot.bench.hooked import BATCH, mixed_history
    from memroot.cli.main import cli
    from memroot.ledger.ledger import Ledger
    from memroot.memory_root import Roots, stack
    from memroot.memory_root.map_nodes import ROOT_ROW_BYTES, ROW_BYTES

    path = work / f"mixed-{n}.ledger"
    r = CliRunner().invoke(cli, ["-l", str(path), "init"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    items = mixed_history(n)
    batches = (n + BATCH - 1) // BATCH
    figures: list[dict[str, float]] = []
    with Ledger.open(path, hooks=stack.default_hooks()) as led:
        roots = Roots(led)
        db = led.derived.db
        for b in range(batches):
            chunk = list(itertools.islice(items, BATCH))
            measure = b >= batches - window
            if measure:
                nodes0 = _node_rows(db)
                starts0 = _one(db, "SELECT count(*) FROM memory_map_roots")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                pages0 = _one(db, "PRAGMA page_count")
            t, c = time.perf_counter(), time.process_time()
            led.append_batch(chunk)
            roots.sign_pending()
            dt, dc = time.perf_counter() - t, time.process_time() - c
            if measure:
                nodes1 = _node_rows(db)
                starts1 = _one(db, "SELECT count(*) FROM memory_map_roots")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                pages1 = _one(db, "PRAGMA page_count")
                page = _one(db, "PRAGMA page_size")
                latest = roots.latest()
                assert latest is not None and latest.map_root is not None
                figures.append(
                    {
                        "seconds": dt,
                        "cpu_seconds": dc,
                        "entries": len(chunk),
                        "node_rows": nodes1 - nodes0,
                        "start_rows": starts1 - starts0,
                        "root_bytes": _root_bytes(db, latest.root)
                        + ROW_BYTES * (nodes1 - nodes0)
                        + ROOT_ROW_BYTES * (starts1 - starts0),
                        "file_bytes": (pages1 - pages0) * page,
                    }
                )
    secs = sum(f["seconds"] for f in figures)
    cpu = sum(f["cpu_seconds"] for f in figures)
    k = len(figures)
    done = sum(f["entries"] for f in figures)
    return {
        "entries": n,
        "window_batches": k,
        "append_per_s": round(done / secs),
        "append_per_cpu_s": round(done / cpu),
        "node_rows": round(sum(f["node_rows"] for f in figures) / k, 1),
        "start_rows": round(sum(f["start_rows"] for f in figures) / k, 1),
        "root_bytes": round(sum(f["root_bytes"] for f in figures) / k),
        "file_bytes": round(sum(f["file_bytes"] for f in figures) / k),
    }


def _summary_bytes(stored: Any) -> int:
    """``_root_bytes`` of a snapshot not stored: its summaries' columns and the root row."""
    return (
        sum(
            len(x.data) + len(x.fold_state or b"") + len(x.rule_cbor) + 64 + len(x.projection)
            for x in stored
        )
        + 32 * 6
        + 40
    )


def with_violations(items: Iterable[EventInput | OpInput]) -> Iterator[EventInput | OpInput]:
    """Yield ``items``, every 10th event replaced by a violation from a new source.

    The 5th, 15th, 25th, ... item, when an event, becomes a ``VIOLATION_RECORDED`` of
    ``TITLE_MISMATCH`` from a source no earlier one named (40 characters:
    ``https://example.org/retrieved/doc-NNNNNN``, N the item's index).
    """
    from memroot.ledger.entries import EventInput, OpInput

    for i, item in enumerate(items):
        if i % 10 == 4 and isinstance(item, EventInput):
            yield OpInput(
                op_type="VIOLATION_RECORDED",
                actor_id="verifier-1",
                actor_type="SYSTEM_PROCESS",
                namespace_id="agent-7",
                policy_version="policy/1",
                payload={
                    "motif": "TITLE_MISMATCH",
                    "source": f"https://example.org/retrieved/doc-{i:06d}",
                },
            )
        else:
            yield item


def writer_only(
    n: int, window: int, *, violations: bool = False, motifs_v1: bool = False
) -> dict[str, Any]:
    """Fold the mixed history of ``n`` entries as the writer does; figures of the last window.

    See the module docstring (``--writer-only``, ``--violations``, ``--motifs-v1``).
    """
    from memroot.bench.hooked import BATCH, mixed_history
    from memroot.ledger.entries import ZERO_HASH, EventInput, Kind, build_entry, new_uuid
    from memroot.memory_root._fold import BranchFold, Folder, MemNodes
    from memroot.memory_root.map_nodes import ROW_BYTES
    from memroot.memory_root.replay import reachable
    from memroot.memory_root.root import MemoryRoot
    from memroot.projections.builtins import FailureMotifs
    from memroot.projections.registry import default_registry

    every = 1000  # the ledger's default snapshot_every, as ``memroot init`` writes it
    nodes = MemNodes()
    rules = list(default_registry().projections())
    if motifs_v1:
        rules = [FailureMotifs() if p.id == "failure-motifs" else p for p in rules]
    fold = BranchFold("main", Folder(rules), every, next_seq=1, map_source=nodes)
    history = mixed_history(n)
    batches = (n + BATCH - 1) // BATCH
    figures: list[dict[str, float]] = []
    seq = 1  # the genesis is seq 0
    collect_at = 1 << 18
    t = time.perf_counter()
    for i, item in enumerate(with_violations(history) if violations else history):
        b = i // BATCH
        if isinstance(item, EventInput):
            entry_seq, seq = seq, seq + 1
            if entry_seq - fold.last_snapshot_seq < every:
                continue
            # The entry that makes a snapshot due: only its seq matters to what is written.
            e = build_entry(ZERO_HASH, entry_seq, "main", 1, Kind.EVENT, "MESSAGE", {})
        else:
            e = build_entry(
                ZERO_HASH, seq, "main", 1, Kind.OP, item.op_type, item.body(item.id or new_uuid())
            )
            seq += 1
        if not fold.advance(e):
            continue
        prepared = fold.pending
        assert prepared is not None
        new = sum(1 for h in prepared.nodes or {} if h not in nodes.nodes)
        if b >= batches - window:
            figures.append(
                {
                    "node_rows": new,
                    "root_bytes": _summary_bytes(prepared.stored) + ROW_BYTES * new,
                }
            )
        snap = build_entry(ZERO_HASH, seq, "main", 1, Kind.OP, "SNAPSHOT", {})
        seq += 1
        fold.snapshot_taken(snap, MemoryRoot(bytes(32)), prepared)
        fold.next_seq = seq
        if len(nodes.nodes) > collect_at:
            nodes.nodes = reachable(nodes.nodes, [fold.map_base])
            collect_at = max(1 << 18, 2 * len(nodes.nodes))
    k = len(figures)
    return {
        "entries": n,
        "mode": "writer-only",
        "window_batches": k,
        "seconds": round(time.perf_counter() - t, 1),
        "map_nodes_live": len(reachable(nodes.nodes, [fold.map_base])),
        "node_rows": round(sum(f["node_rows"] for f in figures) / k, 1),
        "root_bytes": round(sum(f["root_bytes"] for f in figures) / k),
        **({"violations": True} if violations else {}),
        **({"failure_motifs": 1} if motifs_v1 else {}),
    }


def strict_query(objects: int, reads: int, work: Path) -> dict[str, Any]:
    """Median ms of a strict recall (limit 20), with and without the completeness check.

    One ledger of ``objects`` remembered facts (each with its evidence event; automatic v2
    roots every 1,000 entries), read through ``Memory.recall``; the two variants alternate
    read by read on the same open ledger (without: ``_check_complete`` made a no-op).
    """
    import statistics

    import memroot
    from memroot.projections import checked

    path = work / f"recall-{objects}.ledger"
    with memroot.open(path, trusted=False) as mem, mem.ledger.bulk():
        for i in range(objects):
            ev = mem.record(content=f"fact number {i}")
            mem.remember(f"fact {i} holds", evidence=[ev.id])
    real = checked._check_complete
    times: dict[bool, list[float]] = {True: [], False: []}
    with memroot.open(path, trusted=False) as mem:
        assert len(mem.recall(limit=20)) == 20
        for i in range(2 * reads):
            on = i % 2 == 0
            checked._check_complete = real if on else (lambda *a: None)
            t = time.perf_counter()
            mem.recall(limit=20)
            times[on].append(time.perf_counter() - t)
    checked._check_complete = real
    with_ms = statistics.median(times[True]) * 1e3
    without_ms = statistics.median(times[False]) * 1e3
    return {
        "objects": objects,
        "recall_ms_with_completeness": round(with_ms, 2),
        "recall_ms_without": round(without_ms, 2),
        "ratio": round(with_ms / without_ms, 2),
    }


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark for each size and print one JSON line per size."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[100_000])
    ap.add_argument(
        "--query", type=int, nargs="*", default=[], help="strict recall cost at these objects"
    )
    ap.add_argument(
        "--writer-only", type=int, nargs="*", default=[], help="the writer's fold alone, no ledger"
    )
    ap.add_argument(
        "--violations", action="store_true", help="writer-only: a new source every 10 entries"
    )
    ap.add_argument(
        "--motifs-v1", action="store_true", help="writer-only: failure-motifs v1 active"
    )
    ap.add_argument("--reads", type=int, default=30)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    out = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in args.sizes:
            res = run(n, args.window, Path(tmp))
            print(json.dumps(res), flush=True)
            out.append(res)
        for n in args.writer_only:
            res = writer_only(n, args.window, violations=args.violations, motifs_v1=args.motifs_v1)
            print(json.dumps(res), flush=True)
            out.append(res)
        for n in args.query:
            res = strict_query(n, args.reads, Path(tmp))
            print(json.dumps(res), flush=True)
            out.append(res)
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
