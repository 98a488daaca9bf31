"""Invalidation gated by provenance (issue 15): anchored reads and the append bookkeeping.

    python bench/bench_anchor_state.py                      # 10^4 events, 10^5 objects, 3*10^4 ops
    python bench/bench_anchor_state.py --shape bushy --json # a random tree instead of a chat
    python bench/bench_anchor_state.py --events 2000 --objects 20000 --ops 6000   # quicker

One deterministic workload (ids and timestamps fixed in advance): a conversation tree of
``--events`` events, ``--objects`` ASSERTs (each citing an event and, half the time, its
parent) and ``--ops`` lifecycle operations (SUPERSEDE by a newer object of the same line,
DEPRECATE / PENALTY / REINFORCE / EPISTEMIC_TRANSITION with the event that motivated them,
a few without evidence, CONTRADICTION_NOTED). ``--shape chat`` (default) grows the tree like
a conversation: mostly on from the latest turn, with edits, regenerations, forks and
switches back (so paths run to thousands of events); ``--shape bushy`` gives each event a
random earlier parent (paths of ~10).

1. Appends. The workload is appended in batches of 1,000 (``append_batch``) to fresh ledgers
   with the conversation-tree and memory hooks, once with the gated bookkeeping and once
   with it switched off (``projections.gated.run`` replaced by the plain handler, and
   ``on_event`` by nothing): alternating, best of ``--repeat``, in CPU seconds of the process.
   Target: the bookkeeping costs at most 20%.
2. Anchored query. On the gated ledger, ``query(Query(anchor=E))`` (DEFAULT, limit 50) at
   ``--runs`` random anchors: median and 95th percentile (first run excluded). Also AUDIT
   reads and ``why --anchor``-style explanations. Target: median < 50 ms.

``--single plain|gated|none`` builds the workload and appends it once (``none``: not at all),
after a warm-up append of its first 50 entries, and prints the CPU seconds: a run to count
instructions, which a shared machine does not disturb (the bookkeeping's cost is
``gated - plain`` over ``plain - none``)::

    PYTHONHASHSEED=0 valgrind --tool=callgrind python bench/bench_anchor_state.py \
        --events 1000 --objects 10000 --ops 3000 --single gated
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memroot.ledger.entries import EventInput, OpInput, new_uuid, now_us
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import Ledger
from memroot.projections import gated
from memroot.projections import requests as rq
from memroot.projections.anchors import ConversationTree
from memroot.projections.epistemic import RetrievalMode
from memroot.projections.gated import AnchorState
from memroot.projections.hook import MemoryHook
from memroot.projections.query import Query, anchor_path_of, get_object, query
from memroot.projections.views import view_of

AGENT = rq.Actor("agent", "AI_AGENT", "ns")


def log(msg: str) -> None:
    """Print progress to stderr."""
    print(msg, file=sys.stderr, flush=True)


def tree(n: int, shape: str, rng: random.Random) -> tuple[list[str], list[str | None]]:
    """Event ids and each one's parent."""
    ids = [new_uuid() for _ in range(n)]
    parent: list[str | None] = [None]
    cursor = 0
    idx_parent = [-1]
    for i in range(1, n):
        if shape == "bushy":
            p = rng.randrange(i)
        else:
            x = rng.random()
            if x < 0.75:
                p = cursor  # the conversation goes on
            elif x < 0.9:
                p = max(idx_parent[cursor], 0)  # edit a message / regenerate a reply: a sibling
            else:
                p = rng.randrange(i)  # fork from a checkpoint, switch back
        idx_parent.append(p)
        parent.append(ids[p])
        cursor = i
    return ids, parent


def workload(
    events: int, objects: int, ops: int, shape: str, seed: int = 15
) -> tuple[list[EventInput | OpInput], list[str]]:
    """Return the entries, in order, and the event ids (the anchors to read at)."""
    rng = random.Random(seed)
    ids, parent = tree(events, shape, rng)
    # Timestamps end a minute before now: the append rules refuse entries ahead of the clock
    # (docs/FORMAT.md §3.1), and every run appends within a day of building the workload.
    ts = now_us() - 60_000_000 - events * 1000 - objects - ops
    per_event = objects / events
    ops_per_event = ops / events
    items: list[EventInput | OpInput] = []
    objs_of: dict[str, list[str]] = {}  # event -> objects citing it
    recent: list[tuple[str, str]] = []  # (object, its event)
    made = 0
    done = 0
    lifecycle: set[str] = set()
    scored: set[str] = set()
    moved: set[str] = set()
    for i, ev in enumerate(ids):
        ts += 1000
        items.append(
            EventInput(
                stream="chat",
                actor_id="u",
                actor_type="HUMAN_USER",
                role="USER",
                content=f"turn {i}",
                namespace_id="ns",
                id=ev,
                parent_event_id=parent[i],
                ts=ts,
            )
        )
        target = int((i + 1) * per_event)
        while made < target:
            ts += 1
            up_ev = parent[i]
            evidence = [ev] if up_ev is None or rng.random() < 0.5 else [up_ev, ev]
            oid = new_uuid()
            items.append(
                rq.assert_object(
                    AGENT,
                    "FACT",
                    "ASSERTED",
                    "USER_STATED",
                    evidence,
                    f"fact {made}",
                    object_id=oid,
                    ts=ts,
                )
            )
            objs_of.setdefault(ev, []).append(oid)
            recent.append((oid, ev))
            made += 1
        target = int((i + 1) * ops_per_event)
        tries = 0
        while done < target and recent and tries < 50:
            tries += 1
            # An operation on an object of this line, motivated by the newest event. Each
            # object takes at most one lifecycle change, one score change and one transition
            # (scores and transitions before the lifecycle change), so every operation is
            # valid both in its own view and globally: the two timed runs append the same.
            up = parent[i]
            pool = objs_of.get(up, []) if up is not None else []
            old = rng.choice(pool) if pool and rng.random() < 0.7 else rng.choice(recent)[0]
            x = rng.random()
            mine = objs_of.get(ev, [])
            item: OpInput | None = None
            if x < 0.5 and old not in lifecycle:
                fresh = [o for o in mine if o != old and o not in lifecycle]
                if x < 0.35 and fresh:
                    item = rq.supersede(AGENT, old, fresh[-1], "corrected", ts=ts + 1)
                else:
                    item = rq.deprecate(AGENT, old, "wrong", evidence_ids=[ev], ts=ts + 1)
                lifecycle.add(old)
            elif x < 0.75 and old not in scored and old not in lifecycle:
                if x < 0.65:
                    item = rq.penalty(
                        AGENT, old, "doubt", 0.2, 0.7, "said so", evidence_ids=[ev], ts=ts + 1
                    )
                elif x < 0.72:
                    item = rq.reinforce(
                        AGENT, old, "used", 0.1, 0.85, 0.55, "chat", evidence_ids=[ev], ts=ts + 1
                    )
                else:
                    item = rq.reinforce(AGENT, old, "used", 0.1, 0.81, 0.5, "chat", ts=ts + 1)
                scored.add(old)
            elif x < 0.9 and old not in moved and old not in lifecycle:
                item = rq.transition(AGENT, old, "ASSERTED", "OBSERVED", "seen", [ev], ts=ts + 1)
                moved.add(old)
            elif x >= 0.9:
                other = rng.choice(recent)[0]
                if other != old:
                    item = rq.contradiction(AGENT, old, other, "disagree", ts=ts + 1)
            if item is not None:
                ts += 1
                done += 1
                items.append(item)
        if len(recent) > 2000:
            del recent[:1000]
    return items, ids


def build(directory: Path, items: list[Any], *, gate: bool) -> tuple[Ledger, float, int, int]:
    """Append ``items`` to a new ledger; return it, the CPU seconds it took, accepted, refused.

    CPU time of this process (``time.process_time``): on a shared machine wall time mostly
    measures the neighbours. (The ledger's ``store.db.cache_stats()`` then says how often
    apsw had to prepare a statement again: its cache keeps those of the last 100 runs.)
    """
    path = directory / f"{new_uuid()}.ledger"
    ledger = Ledger.init(path, hooks=[ConversationTree(), MemoryHook()])
    ledger.store.db.execute("PRAGMA synchronous=OFF")
    run, on_event = gated.run, gated.on_event
    if not gate:
        gated.run = lambda eng, handler, op: handler(eng, op)
        gated.on_event = lambda eng, entry: None
    accepted = refused = 0
    try:
        t = time.process_time()
        for i in range(0, len(items), 1000):
            chunk = items[i : i + 1000]
            try:
                ledger.append_batch(chunk)
                accepted += len(chunk)
            except RefusedError:
                for item in chunk:  # a refused entry refuses its batch: go one by one
                    try:
                        ledger.append(item)
                        accepted += 1
                    except RefusedError:
                        refused += 1
        seconds = time.process_time() - t
    finally:
        gated.run, gated.on_event = run, on_event
    return ledger, seconds, accepted, refused


def timed(fn: Callable[[], Any], runs: int) -> dict[str, float]:
    """Return the median, 95th percentile and max of ``runs`` calls in ms (after a warm-up)."""
    times = []
    for _ in range(runs + 1):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    times = times[1:]
    times.sort()
    return {
        "median_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
        "max_ms": round(times[-1], 2),
    }


def single(events: int, objects: int, ops: int, shape: str, mode: str) -> None:
    """Build the workload and append it once in ``mode`` (see the module doc)."""
    items, _ = workload(events, objects, ops, shape)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        build(d, items[:50], gate=True)[0].close()  # imports and first statements
        if mode != "none":
            ledger, seconds, _, refused = build(d, items, gate=mode == "gated")
            ledger.close()
            print(f"{mode}: {len(items)} entries, {seconds:.2f} s CPU, {refused} refused")


def main() -> None:
    """Run both phases and print (or ``--json``) the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--ops", type=int, default=30_000)
    ap.add_argument("--shape", choices=("chat", "bushy"), default="chat")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--single", choices=("plain", "gated", "none"))
    args = ap.parse_args()
    if args.single is not None:
        single(args.events, args.objects, args.ops, args.shape, args.single)
        return
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "shape": args.shape,
        "events": args.events,
        "objects": args.objects,
        "ops": args.ops,
    }
    items, ids = workload(args.events, args.objects, args.ops, args.shape)
    log(f"workload: {len(items)} entries")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        best = {True: float("inf"), False: float("inf")}
        counts: dict[bool, tuple[int, int]] = {}
        misses: dict[bool, int] = {}
        ledger: Ledger | None = None
        for r in range(args.repeat):
            for gate in (False, True):
                led, secs, acc, ref = build(d, items, gate=gate)
                best[gate] = min(best[gate], secs)
                counts[gate] = (acc, ref)
                misses[gate] = led.store.db.cache_stats()["misses"]
                log(f"append gate={gate} run {r}: {secs:.1f}s ({acc} accepted, {ref} refused)")
                if gate and ledger is None:
                    ledger = led
                else:
                    led.close()
        assert ledger is not None
        db = ledger.store.db
        got: Any = db.execute("SELECT count(*), sum(applied = 0) FROM mem_gated").fetchone()
        rows, off = got
        got = db.execute("SELECT count(DISTINCT object_id) FROM mem_gated").fetchone()
        rowed = got[0]
        out["append"] = {
            "entries": len(items),
            "plain_s": round(best[False], 2),
            "gated_s": round(best[True], 2),
            "plain_per_s": round(len(items) / best[False]),
            "gated_per_s": round(len(items) / best[True]),
            "overhead": round(best[True] / best[False] - 1, 3),
            "statement_cache_misses_plain": misses[False],
            "statement_cache_misses_gated": misses[True],
            "accepted_plain": counts[False][0],
            "accepted_gated": counts[True][0],
            "gated_rows": rows,
            "objects_with_rows": rowed,
            "not_applied_globally": off,
        }
        rng = random.Random(7)
        anchors = [rng.choice(ids) for _ in range(args.runs + 1)]
        view = view_of(db, "main")
        paths = [len(anchor_path_of(db, view, a)) for a in anchors]
        it = iter(anchors * 4)
        found: list[int] = []

        def default() -> None:
            found.append(len(query(db, Query(anchor=next(it), limit=50))))

        def audit() -> None:
            query(db, Query(anchor=next(it), mode=RetrievalMode.AUDIT, limit=50))

        sample = [r[0] for r in db.execute("SELECT object_id FROM mem_gated LIMIT 200")]

        def explain() -> None:
            a = next(it)
            state = AnchorState(db, view, anchor_path_of(db, view, a))
            for oid in sample[:20]:
                state.explain(get_object(db, oid))

        out["query"] = {
            "anchor_path_median": statistics.median(paths),
            "anchor_path_max": max(paths),
            "default_limit_50": timed(default, args.runs),
            "results_median": statistics.median(found),
            "audit_limit_50": timed(audit, args.runs),
            "explain_20_objects": timed(explain, args.runs),
        }
        ledger.close()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        a, q = out["append"], out["query"]
        print(
            f"{args.shape} tree, {args.events} events, {args.objects} objects, {args.ops} ops: "
            f"append {a['plain_per_s']:,}/s plain vs {a['gated_per_s']:,}/s gated "
            f"(overhead {a['overhead']:.1%}); {a['gated_rows']} gated rows on "
            f"{a['objects_with_rows']} objects, {a['not_applied_globally']} not applied globally"
        )
        print(
            f"anchored DEFAULT query: median {q['default_limit_50']['median_ms']} ms, p95 "
            f"{q['default_limit_50']['p95_ms']} ms (path median {q['anchor_path_median']}, "
            f"max {q['anchor_path_max']}; {q['results_median']} results); AUDIT median "
            f"{q['audit_limit_50']['median_ms']} ms; explain x20 "
            f"{q['explain_20_objects']['median_ms']} ms"
        )


if __name__ == "__main__":
    main()
