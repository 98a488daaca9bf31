"""The checked read on PostgreSQL: CPU, wall time and statements per ``recall``, A/B interleaved.

``python -m memroot.bench.bench_pg_read --pg URL [--objects N] [--rounds K] [--reads R]
[--baseline DIR]``: ``URL`` names a PostgreSQL server (a role that may create databases).
Each code under test runs in a child process of its own (this installed memroot, and with
``--baseline`` the memroot package tree in ``DIR``, put first on ``PYTHONPATH``), on a
database of its own holding the same ledger (N remembered facts, each with its evidence
event; the derived state in a cache file). The children take turns: each round, each child
runs R reads of every case, and the parent keeps every read's figures. Per read: the CPU
time of the reading process (``time.process_time``), the wall time (PostgreSQL's work is in
the server, so it is only there), and the SQL statements the client sent (psycopg's
``Cursor.execute``/``executemany``, counted the same way for any code).

The cases (``recall(limit=20)`` through the read gate unless "unchecked"):

- ``unchecked``: ``unchecked_query`` of the same query in ``ledger.reading()`` (no check);
- ``repeated``: the checked recall again, nothing written in between;
- ``own write``: right after a ``record`` of the same handle (not timed);
- ``other host``: right after a ``record`` of a second handle with its own cache file
  (another host's commit, not timed);
- ``unchecked, other host``: the bare unchecked query right after another host's commit: it
  reads this host's cache as it is, without the other host's entry (a stale answer);
- ``unchecked path, other host``: the unchecked path as a surface runs it (``memroot query
  --no-strict``: the cache caught up with the other host's entries, then ``unchecked_query``),
  the same answer the checked read gives;
- ``catch-up, other host``: the catch-up alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

CASES = (
    "unchecked",
    "repeated",
    "own write",
    "other host",
    "unchecked, other host",
    "unchecked path, other host",
    "catch-up, other host",
)
"""The cases; the last one is the catch-up alone (the other host's entries folded into this
host's cache, which any current read, checked or not, needs first: the unchecked query above
reads the cache without it). A baseline tree that lacks a case prints none for it."""


def _child(url: str, objects: int) -> None:
    """Build the ledger on ``url``, then answer ``round R`` lines with each case's figures."""
    import psycopg

    import memroot
    from memroot.ledger.ledger import Ledger
    from memroot.projections.checked import unchecked_query
    from memroot.projections.epistemic import RetrievalMode
    from memroot.projections.query import Query

    sent = [0]
    for cls in (psycopg.Cursor,):
        for name in ("execute", "executemany"):
            orig = getattr(cls, name)

            def counted(self: Any, *a: Any, _orig: Any = orig, **k: Any) -> Any:
                sent[0] += 1
                return _orig(self, *a, **k)

            setattr(cls, name, counted)
    tmp = Path(tempfile.mkdtemp(prefix="memroot-pgread-"))
    key = tmp / "pg.key"
    os.environ["MEMROOT_CACHE"] = str(tmp / "a.cache")
    Ledger.init(url, origin="example.org/bench-pg-read", key_path=key).close()
    with memroot.open(url, key_path=key, trusted=False) as mem, mem.ledger.bulk():
        for i in range(objects):
            ev = mem.record(content=f"fact number {i}")
            mem.remember(f"fact {i} holds", evidence=[ev.id])
    mem = memroot.open(url, key_path=key, trusted=False)
    os.environ["MEMROOT_CACHE"] = str(tmp / "b.cache")
    other = memroot.open(url, key_path=key, trusted=False)
    os.environ["MEMROOT_CACHE"] = str(tmp / "a.cache")
    q = Query(mode=RetrievalMode.DEFAULT, limit=20)
    assert len(mem.recall(limit=20)) == 20
    n = [0]

    def unchecked() -> None:
        with mem.ledger.reading() as db:
            unchecked_query(db, q)

    def unchecked_path() -> None:
        # What `memroot query --no-strict` runs: both layers caught up, then the tables read.
        mem._catch_up(mem.branch)
        unchecked()

    def checked() -> None:
        mem.recall(limit=20)

    def own() -> None:
        n[0] += 1
        mem.record(content=f"said {n[0]}")

    def theirs() -> None:
        n[0] += 1
        other.record(content=f"heard {n[0]}")

    plan: dict[str, tuple[Callable[[], None] | None, Callable[[], None]]] = {
        "unchecked": (None, unchecked),
        "repeated": (None, checked),
        "own write": (own, checked),
        "other host": (theirs, checked),
        "unchecked, other host": (theirs, unchecked),
        "unchecked path, other host": (theirs, unchecked_path),
        "catch-up, other host": (theirs, lambda: mem._catch_up(mem.branch)),
    }
    print("ready", flush=True)
    for line in sys.stdin:
        reads = int(line.split()[1])
        out: dict[str, list[tuple[float, float, int]]] = {}
        for case, (before, read) in plan.items():
            got = out[case] = []
            for _ in range(reads):
                if before is not None:
                    before()
                s, c, w = sent[0], time.process_time(), time.perf_counter()
                read()
                got.append((time.process_time() - c, time.perf_counter() - w, sent[0] - s))
        print(json.dumps(out), flush=True)
    mem.close()
    other.close()


def _database(server: str) -> str:
    """Create an empty database on ``server``; return its URL.

    Raises:
        SystemExit: ``server`` is not a ``postgresql://`` URL, or cannot be reached.
    """
    import psycopg

    from memroot.ledger.backends.pg import is_url

    if not is_url(server):
        raise SystemExit(f"--pg: {server!r} is not a postgresql:// URL")
    name = f"memroot_bench_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
    except psycopg.Error as e:
        raise SystemExit(f"--pg: cannot create a database on {server}: {e}") from e
    head, _, tail = server.partition("?")
    base = head.rsplit("/", 1)[0] if head.count("/") > 2 else head
    return f"{base}/{name}" + (f"?{tail}" if tail else "")


def _start(label: str, url: str, objects: int, pythonpath: str | None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    # By path, not by module name: a baseline tree need not hold this file.
    run = (
        "import runpy, sys; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", run, __file__, "--child", url, str(objects)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    assert p.stdout is not None
    ready = p.stdout.readline().strip()
    if ready != "ready":
        raise SystemExit(f"{label}: the child did not start ({ready!r})")
    return p


def main() -> None:
    """Run the interleaved rounds and print the medians and ratios."""
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pg", required=True, help="URL of a PostgreSQL server")
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reads", type=int, default=20)
    ap.add_argument("--baseline", help="a memroot package tree to compare with (PYTHONPATH)")
    args = ap.parse_args()
    codes: list[tuple[str, str | None]] = [("this", None)]
    if args.baseline:
        codes.insert(0, ("baseline", args.baseline))
    procs = {label: _start(label, _database(args.pg), args.objects, path) for label, path in codes}
    figures: dict[str, dict[str, list[tuple[float, float, int]]]] = {
        label: {c: [] for c in CASES} for label in procs
    }
    for _ in range(args.rounds):
        for label, p in procs.items():
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write(f"round {args.reads}\n")
            p.stdin.flush()
            for case, rows in json.loads(p.stdout.readline()).items():
                figures[label].setdefault(case, []).extend(tuple(r) for r in rows)
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    print(
        f"recall(limit=20) over {args.objects} objects, {args.rounds} rounds x {args.reads} "
        "reads per case, median per read"
    )
    for label, per in figures.items():
        base_cpu = statistics.median(r[0] for r in per["unchecked"])
        base_wall = statistics.median(r[1] for r in per["unchecked"])
        print(f"{label}:")
        for case in CASES:
            rows = per[case]
            if not rows:
                continue
            cpu = statistics.median(r[0] for r in rows)
            wall = statistics.median(r[1] for r in rows)
            stm = statistics.mean(r[2] for r in rows)
            print(
                f"  {case:<22} CPU {cpu * 1e6:7.0f} us ({cpu / base_cpu:5.2f}x)  wall "
                f"{wall * 1e6:7.0f} us ({wall / base_wall:5.2f}x)  statements {stm:5.1f}"
            )
        theirs = per["unchecked, other host"]
        cpu = statistics.median(r[0] for r in per["other host"])
        wall = statistics.median(r[1] for r in per["other host"])
        print(
            f"  other host / unchecked other host: CPU "
            f"{cpu / statistics.median(r[0] for r in theirs):.2f}x, wall "
            f"{wall / statistics.median(r[1] for r in theirs):.2f}x"
        )
        path = per.get("unchecked path, other host")
        if path:
            print(
                f"  other host / unchecked path other host (caught up, as `query --no-strict`): "
                f"CPU {cpu / statistics.median(r[0] for r in path):.2f}x, wall "
                f"{wall / statistics.median(r[1] for r in path):.2f}x"
            )
        folds = per["catch-up, other host"]
        if folds:
            caught = statistics.median(r[0] for r in theirs) + statistics.median(
                r[0] for r in folds
            )
            print(f"  other host / (catch-up + unchecked other host): CPU {cpu / caught:.2f}x")


if __name__ == "__main__":
    main()
