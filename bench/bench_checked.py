"""The read gate's cost: ``recall`` and the LangGraph saver's ``get_tuple``, checked and unchecked.

``python -m memroot.bench.bench_checked [--objects N] [--reads R]``: one ledger of N remembered
facts (each with its evidence event); R reads of ``Memory.recall(limit=20)`` through the gate
(``projections.checked.checked_query``: heads, every served row re-derived, the rows the state
filter hid, completeness) beside the same query through ``unchecked_query`` on the same open
ledger; and the same checked recall "cold", with what the gate remembers of its checks
forgotten before every read (the cost of a first read, nothing remembered), right after each
of R ``record`` calls of the same handle (its own writes), and right after each of R
``record`` calls of a second handle on the same ledger (another connection's commit, on
PostgreSQL another host with its own cache file: what the gate remembers is kept only where
that commit left it holding; ``--commits K``: K commits of it before each such read). Each of
the last two is interleaved with the unchecked query
timed right after a commit of the same kind (SQLite discards a connection's page cache when
another connection committed: the unchecked read pays that too), so each has two ratios:
against the unchecked query on an unchanged file, and against it after the same commit.
Then a saver with one thread of R checkpoints, ``get_tuple`` (strict; the saver refuses a
non-strict ledger), beside LangGraph's own ``SqliteSaver.get_tuple`` on the same
checkpoints (no check at all). Every figure is the median CPU time of the process per read
(``time.process_time``: other processes' load does not count), and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _cpu(fn: Callable[[], Any]) -> float:
    """Return the CPU seconds of this process that one call of ``fn`` took."""
    t = time.process_time()
    fn()
    return time.process_time() - t


def _median_us(fn: Callable[[], Any], n: int) -> float:
    return statistics.median(_cpu(fn) for _ in range(n)) * 1e6


_AFTER_OWN: list[tuple[float, float]] = []
"""(checked, unchecked) median right after this handle's own ``record``, per ``bench_recall``."""
_AFTER_OTHER: list[tuple[float, float]] = []
"""(checked, unchecked) median right after another connection's ``record``, per ``bench_recall``."""


def bench_recall(
    tmp: Path, objects: int, reads: int, pg: str | None = None, commits: int = 1
) -> tuple[float, float, float]:
    """Return (checked, unchecked, checked cold) median microseconds per recall of 20 objects.

    ``pg``: the URL of an empty PostgreSQL database to hold the ledger instead of a file
    (its derived state in a cache file under ``tmp``). ``commits``: how many ``record``
    calls (each its own commit) the other connection makes before each timed read.
    """
    import os

    import memroot
    from memroot.projections import strict_rows
    from memroot.projections.checked import unchecked_query
    from memroot.projections.epistemic import RetrievalMode
    from memroot.projections.query import Query

    path: Path | str = tmp / "recall.ledger"
    key: Path | None = None
    if pg is not None:
        from memroot.ledger.ledger import Ledger

        path, key = pg, tmp / "pg.key"
        os.environ["MEMROOT_CACHE"] = str(tmp / "pg.cache")
        Ledger.init(pg, origin="example.org/bench-checked", key_path=key).close()
    with memroot.open(path, key_path=key, trusted=False) as mem, mem.ledger.bulk():
        for i in range(objects):
            ev = mem.record(content=f"fact number {i}")
            mem.remember(f"fact {i} holds", evidence=[ev.id])
    with memroot.open(path, key_path=key, trusted=False) as mem:
        q = Query(mode=RetrievalMode.DEFAULT, limit=20)
        assert len(mem.recall()) == 20

        def unchecked() -> None:
            with mem.ledger.reading() as db:
                unchecked_query(db, q)

        def cold() -> None:
            strict_rows._CHECKED.clear()
            strict_rows._PROOFS.clear()
            mem.recall(limit=20)

        checked = _median_us(lambda: mem.recall(limit=20), reads)
        raw = _median_us(unchecked, reads)
        first = _median_us(cold, reads)

        def recall() -> None:
            mem.recall(limit=20)

        own, own_raw = [], []
        for i in range(reads):
            mem.record(content=f"said {i}")  # this handle's own write, not timed
            own.append(_cpu(recall))
            mem.record(content=f"said again {i}")
            own_raw.append(_cpu(unchecked))
            recall()  # not timed: the next timed read follows one write, as the first
        _AFTER_OWN.append((statistics.median(own) * 1e6, statistics.median(own_raw) * 1e6))
        if pg is not None:  # another host: its own cache file
            os.environ["MEMROOT_CACHE"] = str(tmp / "pg-other.cache")
        with memroot.open(path, key_path=key, trusted=False) as other:
            if pg is not None:
                os.environ["MEMROOT_CACHE"] = str(tmp / "pg.cache")
            theirs, theirs_raw = [], []
            for i in range(reads):
                for j in range(commits):  # another connection's commits, not timed
                    other.record(content=f"heard {i}.{j}")
                theirs.append(_cpu(recall))
                for j in range(commits):
                    other.record(content=f"heard again {i}.{j}")
                theirs_raw.append(_cpu(unchecked))
                recall()  # not timed: the next timed read follows one commit, as the first
        _AFTER_OTHER.append((statistics.median(theirs) * 1e6, statistics.median(theirs_raw) * 1e6))
    return checked, raw, first


def bench_get_tuple(tmp: Path, reads: int) -> tuple[float, float] | None:
    """Return (memroot saver, SqliteSaver) median microseconds per get_tuple of the newest.

    The saver refuses a ledger opened ``strict=False`` (it serves only checked entries), so
    its unchecked baseline is LangGraph's own SqliteSaver over the same checkpoints.
    """
    try:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        return None
    from memroot.integrations.langgraph import MemrootSaver

    path = tmp / "saver.ledger"
    cfg: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    with MemrootSaver.from_conn_string(path) as saver:
        for i in range(reads):
            cp = empty_checkpoint()
            cp["channel_values"] = {"n": i}
            saver.put(cfg, cp, {"step": i}, {})
    read: Any = {"configurable": {"thread_id": "t1"}}
    with SqliteSaver.from_conn_string(str(tmp / "lg.sqlite")) as plain:
        for i in range(reads):
            cp = empty_checkpoint()
            cp["channel_values"] = {"n": i}
            plain.put(cfg, cp, {"step": i}, {})
        raw = _median_us(lambda: plain.get_tuple(read), reads)
    with MemrootSaver.from_conn_string(path) as saver:
        return _median_us(lambda: saver.get_tuple(read), reads), raw


def _line(what: str, checked: float, raw: float, first: float) -> str:
    """One run's figures (CPU microseconds per read) and ratios, as ``main`` prints them."""
    (own, own_raw), (other, other_raw) = _AFTER_OWN[-1], _AFTER_OTHER[-1]
    return (
        f"{what} (CPU per read): checked {checked:.0f} us, unchecked {raw:.0f} us, ratio "
        f"{checked / raw:.2f}x; checked cold (nothing remembered) {first:.0f} us, ratio "
        f"{first / raw:.2f}x; right after an own record: checked {own:.0f} us, ratio "
        f"{own / raw:.2f}x (unchecked after an own record {own_raw:.0f} us: "
        f"{own / own_raw:.2f}x); right after another connection's record: checked "
        f"{other:.0f} us, ratio {other / raw:.2f}x (unchecked after such a record "
        f"{other_raw:.0f} us: {other / other_raw:.2f}x)"
    )


def main() -> None:
    """Run both measurements and print them."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--reads", type=int, default=200)
    ap.add_argument("--pg", help="also measure recall on this empty PostgreSQL database (URL)")
    ap.add_argument(
        "--commits",
        type=int,
        default=1,
        help="the other connection's commits before each read after them (default 1)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        checked, raw, first = bench_recall(tmp, args.objects, args.reads, commits=args.commits)
        what = f"recall(limit=20) over {args.objects} objects"
        if args.commits != 1:
            what += f", {args.commits} other commits before each read after them"
        print(_line(what, checked, raw, first))
        if args.pg:
            checked, raw, first = bench_recall(tmp, args.objects, args.reads, args.pg)
            print(
                _line(
                    f"PostgreSQL recall(limit=20) over {args.objects} objects", checked, raw, first
                )
            )
        got = bench_get_tuple(tmp, args.reads)
        if got is None:
            print("get_tuple: langgraph not installed")
        else:
            strict, plain = got
            print(
                f"get_tuple (thread of {args.reads} checkpoints): MemrootSaver (checked) "
                f"{strict:.0f} us, SqliteSaver (unchecked) {plain:.0f} us, "
                f"ratio {strict / plain:.2f}x"
            )


if __name__ == "__main__":
    main()
