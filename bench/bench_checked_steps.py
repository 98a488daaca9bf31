"""What each step of a checked ``recall`` costs after other connections' commits, in place.

    python bench/bench_checked_steps.py [--objects 2000] [--reads 150] [--commits 5]

The ledger of ``bench_checked`` (N facts, each with its evidence event), a reading handle
and another handle on the same file that commits ``--commits`` events before each timed
read, as ``bench_checked`` does. Two measurements, CPU time of this process
(``time.process_time``), medians:

- **steps**: reads of one process interleaved, each with one step of the read gate switched
  off (a measurement only: the answer is not checked then), so ``base`` minus a variant is
  that step's cost where it runs, caches as they are after the commits (a step timed alone
  in a loop is warm, and costs 2-7x less than in a read right after another connection's
  commit). Variants: ``base`` (the gate as shipped); ``objects`` (``check_results``: the
  served objects' kept checks, the entries appended since read strictly, and the
  byte-for-byte re-read of the entry rows those checks rest on); ``re-read`` (only that
  re-read: ``Store.entry_row_tuples`` answers what it read before); ``hidden`` (the hidden
  rows' kept scan and its WAL watch); ``complete`` (the completeness check); and the
  ``unchecked`` query after the same commits, for the ratio.
- **head**: the head check's parts timed inside a read after the commits (each a wrapper:
  its own overhead included): the note opened (its signature, its text split, its body
  parsed), the rows since the head checked before read, decoded and proven on the kept edge.

The head check is not switched off in ``steps``: a read without it checks the head anyway
where the entries appended since are read (``strict_rows.since``).
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_VARIANTS = ("base", "objects", "re-read", "hidden", "complete", "unchecked")


def _ledger(path: Path, objects: int) -> None:
    import memroot

    with memroot.open(path, trusted=False) as mem, mem.ledger.bulk():
        for i in range(objects):
            ev = mem.record(content=f"fact number {i}")
            mem.remember(f"fact {i} holds", evidence=[ev.id])


@contextmanager
def _switched_off(variant: str, rows: dict[tuple[int, tuple[int, ...]], Any]) -> Iterator[None]:
    """Switch one step of the gate off for the body (``base``: nothing)."""
    from memroot.ledger.backends.store import Store
    from memroot.projections import checked

    saved: list[tuple[object, str, object]] = []

    def off(owner: object, name: str, value: object) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    if variant == "objects":
        off(checked, "check_results", lambda *a, **k: None)
    elif variant == "hidden":
        off(checked, "_kept_on_rows", lambda *a, **k: None)
    elif variant == "complete":
        off(checked, "_check_complete", lambda *a, **k: None)
    elif variant == "re-read":
        real = Store.entry_row_tuples

        def kept(self: Store, no: int, seqs: Any) -> Any:
            got = rows.get((no, tuple(seqs)))
            return real(self, no, seqs) if got is None else got

        off(Store, "entry_row_tuples", kept)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def _recording(rows: dict[tuple[int, tuple[int, ...]], Any]) -> Callable[[], None]:
    """Record every ``entry_row_tuples`` answer into ``rows``; return the undo."""
    from memroot.ledger.backends.store import Store

    real = Store.entry_row_tuples

    def recorded(self: Store, no: int, seqs: Any) -> Any:
        got = real(self, no, seqs)
        rows[(no, tuple(seqs))] = got
        return got

    setattr(Store, "entry_row_tuples", recorded)  # noqa: B010  # a measurement only

    def undo() -> None:
        setattr(Store, "entry_row_tuples", real)  # noqa: B010

    return undo


def steps(objects: int, reads: int, commits: int) -> dict[str, float]:
    """Return the median CPU microseconds of a read per variant (``_VARIANTS``)."""
    import memroot
    from memroot.projections.checked import unchecked_query
    from memroot.projections.epistemic import RetrievalMode
    from memroot.projections.query import Query

    times: dict[str, list[float]] = collections.defaultdict(list)
    rows: dict[tuple[int, tuple[int, ...]], Any] = {}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "steps.ledger"
        _ledger(path, objects)
        undo = _recording(rows)
        try:
            with (
                memroot.open(path, trusted=False) as mem,
                memroot.open(path, trusted=False) as other,
            ):
                q = Query(mode=RetrievalMode.DEFAULT, limit=20)
                mem.recall(limit=20)
                for i in range(reads * len(_VARIANTS)):
                    variant = _VARIANTS[i % len(_VARIANTS)]
                    for j in range(commits):
                        other.record(content=f"heard {i}.{j}")
                    with _switched_off(variant, rows):
                        t = time.process_time()
                        if variant == "unchecked":
                            with mem.ledger.reading() as db:
                                unchecked_query(db, q)
                        else:
                            mem.recall(limit=20)
                        times[variant].append(time.process_time() - t)
                    # Not timed: the gate's memory as after a checked read, for the next.
                    mem.recall(limit=20)
        finally:
            undo()
    return {v: statistics.median(times[v]) * 1e6 for v in _VARIANTS}


_HEAD_PARTS = (
    ("check_head", "memroot.ledger.strict", "StrictReader.check_head"),
    ("note opened", "memroot.ledger.strict", "open_checkpoint"),
    ("  its signature", "memroot.ledger.note", "verify_signature"),
    ("  its text split", "memroot.ledger.note", "_split_note"),
    ("  its body parsed", "memroot.ledger.note", "parse_checkpoint"),
    ("rows since, checked", "memroot.ledger.strict", "StrictReader._since_before"),
    ("  read", "memroot.ledger.backends.store", "Store.iter_entry_rows"),
    ("  proven on the edge", "memroot.ledger.strict", "StrictReader._prove"),
)


def head(objects: int, reads: int, commits: int) -> dict[str, float]:
    """Return the median CPU microseconds of each head-check part inside a read."""
    import memroot
    from memroot.ledger import note, strict
    from memroot.ledger.backends import store

    modules: dict[str, Any] = {
        "memroot.ledger.strict": strict,
        "memroot.ledger.note": note,
        "memroot.ledger.backends.store": store,
    }

    spent: dict[str, float] = collections.defaultdict(float)
    per: dict[str, list[float]] = collections.defaultdict(list)
    undo: list[tuple[object, str, object]] = []
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "head.ledger"
        _ledger(path, objects)
        for label, module, name in _HEAD_PARTS:
            owner: Any = modules[module]
            attr = name
            if "." in name:
                cls, attr = name.split(".")
                owner = getattr(owner, cls)
            real = getattr(owner, attr)

            def timed(*a: Any, _real: Any = real, _label: str = label, **k: Any) -> Any:
                t = time.process_time()
                try:
                    got = _real(*a, **k)
                    return list(got) if _label == "  read" else got  # a generator: read it
                finally:
                    spent[_label] += time.process_time() - t

            undo.append((owner, attr, real))
            setattr(owner, attr, functools.wraps(real)(timed))
        try:
            with (
                memroot.open(path, trusted=False) as mem,
                memroot.open(path, trusted=False) as other,
            ):
                mem.recall(limit=20)
                for i in range(reads):
                    for j in range(commits):
                        other.record(content=f"heard {i}.{j}")
                    spent.clear()
                    mem.recall(limit=20)
                    for label, _, _ in _HEAD_PARTS:
                        per[label].append(spent.get(label, 0.0))
        finally:
            for owner, attr, real in reversed(undo):
                setattr(owner, attr, real)
    return {label: statistics.median(per[label]) * 1e6 for label, _, _ in _HEAD_PARTS}


def main() -> None:
    """Run both measurements and print them."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--reads", type=int, default=150)
    ap.add_argument("--commits", type=int, default=5)
    args = ap.parse_args()
    got = steps(args.objects, args.reads, args.commits)
    base, raw = got["base"], got["unchecked"]
    print(
        f"recall after {args.commits} other commits: checked {base:.0f} us, unchecked "
        f"{raw:.0f} us, {base / raw:.2f}x"
    )
    for v in _VARIANTS[1:-1]:
        cost = base - got[v]
        print(f"  step {v:9s} {cost:6.0f} us ({cost / raw:.2f}x of the unchecked read)")
    print(f"head check parts inside such a read (wrapped; {args.commits} other commits):")
    for label, us in head(args.objects, args.reads, args.commits).items():
        print(f"  {label:22s} {us:6.0f} us")


if __name__ == "__main__":
    main()
