"""LangGraph benchmarks (issue 25 point 1): ``MemrootSaver`` / ``MemrootStore`` beside SQLite's.

    python bench/bench_langgraph.py      # 200 invokes, 2,000 get_tuple, 500 store ops
    python bench/bench_langgraph.py --invokes 500 --json --out lg-bench.json
    python bench/bench_langgraph.py --dir /dev/shm   # no disk fsync on either side (CPU only)

One run measures both sides on the same graph, in fresh temporary files (removed after):

1. ``invoke``: a one-node graph (a counter, and a list of strings that grows by one each invoke) run
   ``--invokes`` times on one thread with ``durability="sync"`` (each invoke writes its
   checkpoints before it returns), ``MemrootSaver.from_conn_string`` beside
   ``langgraph.checkpoint.sqlite.SqliteSaver.from_conn_string``, both open at once and their
   invokes interleaved (one of each in turn, so a change of the machine's load reaches both);
   median and p95 per invoke.
2. ``get_tuple``: the thread's newest checkpoint read ``--reads`` times, interleaved too;
   median and p95.
3. ``checkpoint file``: the size of each file after the invokes (after ``VACUUM`` on both, so
   free pages count on neither side).
4. ``store``: ``--store-ops`` puts of small JSON items then as many gets, ``MemrootStore``
   beside ``langgraph.store.sqlite.SqliteStore``; median per op and the file sizes.

Targets (issue 25): invoke and ``get_tuple`` within 2x of SqliteSaver, the checkpoint file
within 2x. Needs the ``bench`` extra (``langgraph-checkpoint-sqlite``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import operator
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import apsw

__all__ = ["main", "run"]


class _State(TypedDict):
    count: int
    log: Annotated[list[str], operator.add]


def _graph(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    def step(state: _State) -> dict[str, Any]:
        return {"count": state["count"] + 1, "log": [f"step {state['count']}"]}

    builder = StateGraph(_State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def _times(fn: Callable[[int], object], n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "median_ms": round(statistics.median(ms), 4),
        "p95_ms": round(ms[int(len(ms) * 0.95) - 1], 4),
    }


def _vacuumed_size(path: Path) -> int:
    db = apsw.Connection(str(path))
    db.execute("VACUUM")
    db.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def _saver_sides(
    openers: dict[str, Callable[[Path], AbstractContextManager[Any]]],
    paths: dict[str, Path],
    invokes: int,
    reads: int,
) -> dict[str, dict[str, Any]]:
    """Both savers at once, their invokes (then reads) interleaved one by one.

    A machine shared with other work slows down and speeds up by tens of percent within
    seconds; measured one after the other, the two sides see different loads and their ratio
    moves with it (1.8x to 3.3x in the runs of BENCHMARKS.md). Interleaved, both see the same.
    """
    cfg = {"configurable": {"thread_id": "bench"}}
    with contextlib.ExitStack() as stack:
        savers = {name: stack.enter_context(o(paths[name])) for name, o in openers.items()}
        graphs = {name: _graph(s) for name, s in savers.items()}
        for g in graphs.values():
            g.invoke({"count": 0, "log": []}, cfg, durability="sync")  # warm up, makes tables
        inv: dict[str, list[float]] = {name: [] for name in savers}
        for i in range(invokes):
            for name, g in graphs.items():
                t0 = time.perf_counter()
                g.invoke({"count": i, "log": []}, cfg, durability="sync")
                inv[name].append((time.perf_counter() - t0) * 1e3)
        get: dict[str, list[float]] = {name: [] for name in savers}
        for saver in savers.values():
            got = saver.get_tuple(cfg).checkpoint["channel_values"]
            assert got["count"] == invokes and len(got["log"]) == invokes + 1, got
        for _ in range(reads):
            for name, saver in savers.items():
                t0 = time.perf_counter()
                saver.get_tuple(cfg)
                get[name].append((time.perf_counter() - t0) * 1e3)
    return {
        name: {
            "invoke": _summary(inv[name]),
            "get_tuple": _summary(get[name]),
            "file_bytes": _vacuumed_size(paths[name]),
        }
        for name in openers
    }


def _store_side(
    opener: Callable[[Path], AbstractContextManager[Any]], path: Path, ops: int
) -> dict[str, Any]:
    with opener(path) as store:
        put = _times(
            lambda i: store.put(("bench", "users"), f"k{i}", {"n": i, "text": "x" * 40}), ops
        )
        get = _times(lambda i: store.get(("bench", "users"), f"k{i}"), ops)
    return {"put": _summary(put), "get": _summary(get), "file_bytes": _vacuumed_size(path)}


def _memroot_saver(path: Path) -> AbstractContextManager[Any]:
    from memroot.integrations.langgraph import MemrootSaver

    return MemrootSaver.from_conn_string(path)


def _sqlite_saver(path: Path) -> AbstractContextManager[Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    return SqliteSaver.from_conn_string(str(path))


def _memroot_store(path: Path) -> AbstractContextManager[Any]:
    from memroot.integrations.langgraph import MemrootStore

    return MemrootStore.from_conn_string(path)


def _sqlite_store(path: Path) -> AbstractContextManager[Any]:
    from langgraph.store.sqlite import SqliteStore

    @contextlib.contextmanager
    def opened() -> Iterator[Any]:
        with SqliteStore.from_conn_string(str(path)) as store:
            store.setup()
            yield store

    return opened()


def _fresh(work: Path, name: str, file: str) -> Path:
    (work / name).mkdir()
    return work / name / file


def run(
    invokes: int = 200, reads: int = 2000, store_ops: int = 500, where: Path | None = None
) -> dict[str, Any]:
    """Measure both sides; return every figure (the ``--json`` document) as a dict.

    ``where``: the directory the temporary files go in (default: the system's temporary
    directory; ``/dev/shm`` takes the disk's fsync out of both sides).
    """
    from memroot.bench.machine import machine_info

    with tempfile.TemporaryDirectory(prefix="memroot-lg-bench-", dir=where) as d:
        work = Path(d)
        doc: dict[str, Any] = {"machine": dict(machine_info(work))}
        doc["saver"] = _saver_sides(
            {"memroot": _memroot_saver, "sqlite": _sqlite_saver},
            {"memroot": _fresh(work, "m", "cp.ledger"), "sqlite": _fresh(work, "s", "cp.sqlite")},
            invokes,
            reads,
        )
        doc["store"] = {
            "memroot": _store_side(_memroot_store, _fresh(work, "ms", "st.ledger"), store_ops),
            "sqlite": _store_side(_sqlite_store, _fresh(work, "ss", "st.sqlite"), store_ops),
        }
    m, s = doc["saver"]["memroot"], doc["saver"]["sqlite"]
    doc["ratios"] = {
        "invoke": round(m["invoke"]["median_ms"] / s["invoke"]["median_ms"], 2),
        "get_tuple": round(m["get_tuple"]["median_ms"] / s["get_tuple"]["median_ms"], 2),
        "checkpoint_file": round(m["file_bytes"] / s["file_bytes"], 2),
        "store_put": round(
            doc["store"]["memroot"]["put"]["median_ms"]
            / doc["store"]["sqlite"]["put"]["median_ms"],
            2,
        ),
        "store_get": round(
            doc["store"]["memroot"]["get"]["median_ms"]
            / doc["store"]["sqlite"]["get"]["median_ms"],
            2,
        ),
        "store_file": round(
            doc["store"]["memroot"]["file_bytes"] / doc["store"]["sqlite"]["file_bytes"], 2
        ),
    }
    doc["params"] = {
        "invokes": invokes,
        "reads": reads,
        "store_ops": store_ops,
        "dir": None if where is None else str(where),
    }
    return doc


def _print(doc: dict[str, Any]) -> None:
    sv, st, r = doc["saver"], doc["store"], doc["ratios"]
    rows = [
        (
            "1-node invoke (median ms)",
            sv["memroot"]["invoke"]["median_ms"],
            sv["sqlite"]["invoke"]["median_ms"],
            r["invoke"],
        ),
        (
            "get_tuple (median ms)",
            sv["memroot"]["get_tuple"]["median_ms"],
            sv["sqlite"]["get_tuple"]["median_ms"],
            r["get_tuple"],
        ),
        (
            "checkpoint file (bytes)",
            sv["memroot"]["file_bytes"],
            sv["sqlite"]["file_bytes"],
            r["checkpoint_file"],
        ),
        (
            "store put (median ms)",
            st["memroot"]["put"]["median_ms"],
            st["sqlite"]["put"]["median_ms"],
            r["store_put"],
        ),
        (
            "store get (median ms)",
            st["memroot"]["get"]["median_ms"],
            st["sqlite"]["get"]["median_ms"],
            r["store_get"],
        ),
        (
            "store file (bytes)",
            st["memroot"]["file_bytes"],
            st["sqlite"]["file_bytes"],
            r["store_file"],
        ),
    ]
    print(f"{'':28} {'memroot':>12} {'sqlite':>12} {'ratio':>7}")
    for name, a, b, ratio in rows:
        print(f"{name:28} {a:>12} {b:>12} {ratio:>6}x")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--invokes", type=int, default=200)
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--store-ops", type=int, default=500)
    p.add_argument("--dir", type=Path, help="where the temporary files go (e.g. /dev/shm)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    doc = run(a.invokes, a.reads, a.store_ops, a.dir)
    text = json.dumps(doc, indent=2, default=str)
    if a.out:
        a.out.write_text(text + "\n")
    if a.json:
        print(text)
    else:
        _print(doc)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MEMROOT_BENCH", "1")
    sys.exit(main())
