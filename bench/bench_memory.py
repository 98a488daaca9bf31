"""Memory model benchmarks (issue 3): replay speed, materialisation overhead, query latency.

    python bench/bench_memory.py                    # 20k-entry workload, queries on 10^6 objects
    python bench/bench_memory.py --objects 100000   # queries on 10^5 objects (faster)
    python bench/bench_memory.py --json --out memory-bench.json

Phases (each in fresh temporary files, removed afterwards):

1. Materialisation overhead. One deterministic, valid workload (about 1/3 events, ASSERTs,
   REINFORCE/DECAY/PENALTY, DEPRECATE, CONTRADICTION_NOTED, RELATE, ENTITY_CREATE; ids and
   timestamps fixed in advance) is appended to two new ledgers, with and without the memory
   hook, in batches of 1,000 (``append_batch``), alternating runs; best of ``--repeat``.
   Also single durable appends (one fsync each) in interleaved blocks. Target: the hook adds
   at most 30%.
2. Replay. The workload's ledger is replayed: ``fold`` = the engine over already-decoded entries
   into a fresh in-memory database (what verify's step 9 adds, since the verifier decodes every
   entry anyway); ``rebuild`` = ``memroot rebuild`` end to end (strict decoding of every entry,
   drop, replay, full-text index, two state digests). Target: >= 100,000 operations/s.
3. Query. ``--objects`` memory objects (half as many events again, 200 namespaces, 1,000
   entities) are materialised by the replay engine into a temporary ledger-sized database, then
   indexed filters are timed (median and 95th percentile of ``--runs`` runs, first run
   excluded as cache warm-up). Target: < 50 ms for an indexed filter at 10^6 objects.
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw

from memroot.ledger.entries import ZERO_HASH, Entry, EventInput, Kind, OpInput, new_uuid
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType
from memroot.projections import requests as rq
from memroot.projections import tables
from memroot.projections.backends import MemState
from memroot.projections.digest import state_digest
from memroot.projections.engine import Engine
from memroot.projections.hook import MemoryHook
from memroot.projections.query import Query, get_object, query
from memroot.projections.replay import rebuild, replay

WORDS = [
    "tea",
    "coffee",
    "sugar",
    "paris",
    "rome",
    "berlin",
    "meeting",
    "friday",
    "project",
    "alpha",
    "beta",
    "deadline",
    "invoice",
    "python",
    "rust",
    "sqlite",
    "ledger",
    "merkle",
    "memory",
    "agent",
    "user",
    "prefers",
    "likes",
    "lives",
    "works",
    "visits",
    "owns",
    "reads",
    "writes",
]
T0 = 1_700_000_000_000_000


def log(msg: str) -> None:
    """Print a progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


def workload(n: int, seed: int = 1) -> list[EventInput | OpInput]:
    """Return a valid mixed history of ``n`` entries, fully determined by ``seed``."""
    rng = random.Random(seed)
    items: list[EventInput | OpInput] = []
    events: list[str] = []
    active: dict[str, list[float]] = {}  # object id -> [confidence, salience]
    entities: list[str] = []
    ts = T0
    while len(items) < n:
        ts += 1000
        ns = f"ns-{rng.randrange(20)}"
        agent = rq.Actor(f"agent-{rng.randrange(5)}", "AI_AGENT", ns)
        r = rng.random()
        if r < 0.34 or not events:
            eid = new_uuid()
            events.append(eid)
            text = " ".join(rng.choices(WORDS, k=12))
            items.append(
                EventInput(
                    stream="s",
                    actor_id="alice",
                    actor_type="HUMAN_USER",
                    role="USER",
                    content=text,
                    namespace_id=ns,
                    id=eid,
                    ts=ts,
                )
            )
        elif r < 0.64 or len(active) < 3:
            oid = new_uuid()
            ents = [rng.choice(entities)] if entities and rng.random() < 0.3 else []
            items.append(
                rq.assert_object(
                    agent,
                    rng.choice(["FACT", "PREFERENCE", "DECISION", "TASK", "INTENT"]),
                    "ASSERTED",
                    "USER_STATED",
                    [rng.choice(events[-50:])],
                    " ".join(rng.choices(WORDS, k=8)),
                    salience=0.5,
                    object_id=oid,
                    entity_ids=ents,
                    ts=ts,
                )
            )
            active[oid] = [0.8, 0.5]
        elif r < 0.84:
            oid = rng.choice(list(active)[-200:])
            c, s = active[oid]
            k = rng.randrange(3)
            if k == 0 and c <= 0.9 and s <= 0.9:
                items.append(rq.reinforce(agent, oid, "used", 0.1, c + 0.1, s + 0.1, "chat", ts=ts))
                active[oid] = [c + 0.1, s + 0.1]
            elif k == 1 and c >= 0.1 and s >= 0.1:
                items.append(rq.decay(agent, oid, 0.1, s - 0.1, c - 0.05, "exp", ts=ts))
                active[oid] = [c - 0.05, s - 0.1]
            elif c >= 0.1:
                items.append(rq.penalty(agent, oid, "wrong", 0.1, c - 0.1, "contradicted", ts=ts))
                active[oid] = [c - 0.1, s]
        elif r < 0.89:
            oid = rng.choice(list(active))
            del active[oid]
            items.append(rq.deprecate(agent, oid, "stale", ts=ts))
        elif r < 0.94 and len(active) > 2:
            a, b = rng.sample(list(active)[-200:], 2)
            items.append(rq.contradiction(agent, a, b, "clash"))
        elif r < 0.97 and len(active) > 2:
            a, b = rng.sample(list(active)[-200:], 2)
            items.append(rq.relate(agent, "SUPPORTS", a, b, 0.7))
        else:
            eid = new_uuid()
            entities.append(eid)
            items.append(
                rq.entity_create(agent, "PERSON", f"person {len(entities)}", entity_id=eid, ts=ts)
            )
    return items


def new_ledger(directory: Path, name: str, hooked: bool) -> Ledger:
    """Create a fresh ledger ``name`` in ``directory``, with the memory hook if ``hooked``."""
    path = directory / name
    for suffix in ("", "-wal", "-shm", ".key"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return Ledger.init(path, hooks=[MemoryHook()] if hooked else [])


def append_run(directory: Path, items: list[Any], hooked: bool, batch: int) -> float:
    """Seconds to append ``items`` in batches of ``batch`` to a new ledger."""
    ledger = new_ledger(directory, f"append-{hooked}.db", hooked)
    try:
        t = time.perf_counter()
        for i in range(0, len(items), batch):
            ledger.append_batch(items[i : i + batch])
        return time.perf_counter() - t
    finally:
        ledger.close()


def durable_run(directory: Path, items: list[Any], block: int = 50) -> tuple[float, float]:
    """Seconds for single fsync'd appends with and without the hook, interleaved in blocks."""
    with_hook = new_ledger(directory, "durable-on.db", True)
    without = new_ledger(directory, "durable-off.db", False)
    on = off = 0.0
    try:
        for i in range(0, len(items), block):
            chunk = items[i : i + block]
            t = time.perf_counter()
            for it in chunk:
                without.append(it)
            off += time.perf_counter() - t
            t = time.perf_counter()
            for it in chunk:
                with_hook.append(it)
            on += time.perf_counter() - t
    finally:
        with_hook.close()
        without.close()
    return on, off


def phase_overhead(directory: Path, items: list[Any], repeat: int, durable: int) -> dict[str, Any]:
    """Phase 1: the append cost of the memory hook, batched (best of ``repeat``) and durable."""
    n = len(items)
    on, off = [], []
    for r in range(repeat):
        log(f"  append run {r + 1}/{repeat}")
        off.append(append_run(directory, items, False, 1000))
        on.append(append_run(directory, items, True, 1000))
    best_on, best_off = min(on), min(off)
    out: dict[str, Any] = {
        "entries": n,
        "batched": {
            "batch": 1000,
            "without_hook_entries_per_s": round(n / best_off),
            "with_hook_entries_per_s": round(n / best_on),
            "without_hook_us_per_entry": round(best_off / n * 1e6, 2),
            "with_hook_us_per_entry": round(best_on / n * 1e6, 2),
            "overhead_pct": round((best_on / best_off - 1) * 100, 1),
            "runs_s": {"with": [round(x, 3) for x in on], "without": [round(x, 3) for x in off]},
        },
    }
    if durable:
        log(f"  {durable} single durable appends per side")
        d_on, d_off = durable_run(directory, items[:durable])
        out["durable_single"] = {
            "entries": durable,
            "without_hook_ms_per_append": round(d_off / durable * 1e3, 3),
            "with_hook_ms_per_append": round(d_on / durable * 1e3, 3),
            "overhead_pct": round((d_on / d_off - 1) * 100, 1),
        }
    return out


def phase_replay(directory: Path, items: list[Any]) -> dict[str, Any]:
    """Phase 2: strict decode, replay fold and end-to-end rebuild rates of ``items``."""
    ledger = new_ledger(directory, "replay.db", True)
    try:
        for i in range(0, len(items), 1000):
            ledger.append_batch(items[i : i + 1000])
        t = time.perf_counter()
        entries = list(ledger.entries())
        decode_s = time.perf_counter() - t
        ops = sum(1 for e in entries if e.kind is Kind.OP)
        folds = []
        for _ in range(3):
            t = time.perf_counter()
            db = replay(entries)
            folds.append(time.perf_counter() - t)
            db.close()
        fold_s = min(folds)
        t = time.perf_counter()
        report = rebuild(ledger)
        rebuild_s = time.perf_counter() - t
        assert report.identical, "rebuild changed the state"
        t = time.perf_counter()
        state_digest(ledger.store.db)
        digest_s = time.perf_counter() - t
    finally:
        ledger.close()
    n = len(entries)
    return {
        "entries": n,
        "operations": ops,
        "events": n - ops - 1,
        "fold_entries_per_s": round(n / fold_s),
        "fold_ops_per_s": round(ops / fold_s),
        "fold_s": round(fold_s, 3),
        "strict_decode_entries_per_s": round(n / decode_s),
        "rebuild_entries_per_s": round(n / rebuild_s),
        "rebuild_s": round(rebuild_s, 3),
        "state_digest_s": round(digest_s, 3),
    }


def synthetic(n_objects: int, seed: int = 2) -> Iterator[Entry]:
    """Yield decoded entries for ``n_objects`` ASSERTs (plus events, entities, mutations)."""
    rng = random.Random(seed)
    seq = 0
    events: list[str] = []
    entities = [new_uuid() for _ in range(1000)]

    def entry(kind: Kind, type_: str, body: dict[str, Any]) -> Entry:
        nonlocal seq
        seq += 1
        return Entry(1, ZERO_HASH, seq, "main", T0 + seq, kind, type_, body, b"", ZERO_HASH)

    def op(op_type: str, ns: str, payload: dict[str, Any], target: str | None = None) -> Entry:
        body: dict[str, Any] = {
            "actor_id": "agent",
            "actor_type": "AI_AGENT",
            "id": new_uuid(),
            "namespace_id": ns,
            "payload": payload,
            "policy_version": "p",
        }
        if target is not None:
            body["target_id"] = target
        return entry(Kind.OP, op_type, body)

    for i, eid in enumerate(entities):
        yield op(
            OpType.ENTITY_CREATE,
            "ns-0",
            {"entity_type": "PERSON", "canonical_name": f"p{i}", "aliases": []},
            eid,
        )
    made = 0
    while made < n_objects:
        ns = f"ns-{rng.randrange(200)}"
        if not events or rng.random() < 0.33:
            eid = new_uuid()
            events.append(eid)
            yield entry(
                Kind.EVENT,
                "EVENT",
                {
                    "actor_id": "alice",
                    "actor_type": "HUMAN_USER",
                    "content_commitment": b"",
                    "id": eid,
                    "namespace_id": ns,
                    "role": "USER",
                    "stream": "s",
                },
            )
            continue
        epi, src = rng.choice(
            [
                ("OBSERVED", "USER_STATED"),
                ("ASSERTED", "USER_STATED"),
                ("INFERRED", "SYSTEM_INFERRED"),
                ("HYPOTHETICAL", "USER_STATED"),
                ("UNVERIFIED", "TOOL_OUTPUT"),
            ]
        )
        payload: dict[str, Any] = {
            "object_type": rng.choice(
                ["FACT", "PREFERENCE", "DECISION", "TASK", "SUMMARY", "INTENT"]
            ),
            "epistemic_type": epi,
            "source_type": src,
            "evidence_ids": [events[-1]],
            "value": " ".join(rng.choices(WORDS, k=8)) + f" n{made}",
            "confidence": None,
            "salience": 0.5,
        }
        if rng.random() < 0.2:
            payload["entity_ids"] = [rng.choice(entities)]
        oid = new_uuid()
        yield op(OpType.ASSERT, ns, payload, oid)
        made += 1
        if rng.random() < 0.1:
            yield op(OpType.DEPRECATE, ns, {"reason": "r", "deprecated_by": "a"}, oid)


def timed(fn: Callable[[], Any], runs: int) -> dict[str, float]:
    """Call ``fn`` once to warm up, then ``runs`` times; return median, p95 and max in ms."""
    fn()  # warm-up
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    samples.sort()
    return {
        "median_ms": round(statistics.median(samples), 3),
        "p95_ms": round(samples[max(0, int(len(samples) * 0.95) - 1)], 3),
        "max_ms": round(samples[-1], 3),
    }


def phase_query(directory: Path, n_objects: int, runs: int) -> dict[str, Any]:
    """Phase 3: query latencies on a projection of ``n_objects`` synthetic objects."""
    path = directory / "query.db"
    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA cache_size=-65536")
    db.execute("BEGIN")
    tables.install(db, indexes=False)  # as rebuild does: indexes built once, at the end
    state = MemState(db)
    engine = Engine(state)
    t = time.perf_counter()
    n = 0
    for e in synthetic(n_objects):
        engine.fold(e)
        n += 1
    state.finish()
    tables.create_indexes(db)
    tables.index_text(db)
    db.execute("COMMIT")
    build_s = time.perf_counter() - t
    # ``Cursor.get`` is the one value of a one-row, one-column result.
    objects = db.execute("SELECT count(*) FROM mem_objects WHERE vto IS NULL").get
    size = db.execute("SELECT max(size) FROM mem_heads").get
    some = db.execute("SELECT id FROM mem_objects WHERE rid = ?", (objects // 2,)).get
    entity = db.execute("SELECT target_id FROM mem_edges WHERE type = 'ABOUT_ENTITY' LIMIT 1").get
    cases: dict[str, Callable[[], Any]] = {
        "type=PREFERENCE (DEFAULT, limit 50)": lambda: query(
            db, Query(types=("PREFERENCE",), limit=50)
        ),
        "namespace=ns-7 (DEFAULT, limit 50)": lambda: query(
            db, Query(namespaces=("ns-7",), limit=50)
        ),
        "namespace=ns-7 type=TASK (DEFAULT, limit 50)": lambda: query(
            db, Query(namespaces=("ns-7",), types=("TASK",), limit=50)
        ),
        "epistemic=INFERRED (EXPLICIT, limit 50)": lambda: query(
            db,
            Query(
                epistemic=("INFERRED",),
                mode="EXPLICIT",  # type: ignore[arg-type]
                limit=50,
            ),
        ),
        "state=DEPRECATED (AUDIT, limit 50)": lambda: query(
            db,
            Query(
                states=("DEPRECATED",),
                mode="AUDIT",  # type: ignore[arg-type]
                limit=50,
            ),
        ),
        "entity=<one of 1000> (DEFAULT, limit 50)": lambda: query(
            db, Query(entity=entity, limit=50)
        ),
        "text='merkle ledger' (DEFAULT, limit 50)": lambda: query(
            db, Query(text="merkle ledger", limit=50)
        ),
        "text='n12345' (rare word)": lambda: query(
            db, Query(text=f"n{min(12345, objects - 1)}", limit=50)
        ),
        "get_object by id": lambda: get_object(db, some),
        "get_object by id as of mid-ledger": lambda: get_object(db, some, as_of=size - 1),
        "type=FACT as of mid-ledger (DEFAULT, limit 50)": lambda: query(
            db, Query(types=("FACT",), as_of=size // 2, limit=50)
        ),
    }
    results = {}
    for name, fn in cases.items():
        log(f"  {name}")
        results[name] = timed(fn, runs)
    t = time.perf_counter()
    state_digest(db)
    digest_s = time.perf_counter() - t
    db.close()
    return {
        "objects": objects,
        "entries_folded": n,
        "build_s": round(build_s, 1),
        "file_mb": round(path.stat().st_size / 2**20, 1),
        "state_digest_s": round(digest_s, 2),
        "queries": results,
    }


def main() -> None:
    """Run the phases not skipped and print the figures (human or JSON)."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--entries", type=int, default=20_000, help="workload size (phases 1-2)")
    ap.add_argument("--objects", type=int, default=1_000_000, help="objects for phase 3")
    ap.add_argument("--repeat", type=int, default=3, help="append runs per side (phase 1)")
    ap.add_argument("--durable", type=int, default=300, help="single fsync'd appends per side")
    ap.add_argument("--runs", type=int, default=30, help="timed runs per query")
    ap.add_argument("--skip", default="", help="comma list of phases to skip: 1,2,3")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args()
    skip = set(args.skip.split(",")) - {""}
    out: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "python": platform.python_version(),
            "sqlite": apsw.sqlite_lib_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
    }
    with tempfile.TemporaryDirectory(prefix="memroot-bench-") as tmp:
        directory = Path(tmp)
        items = workload(args.entries) if {"1", "2"} - skip else []
        if "1" not in skip:
            log(f"phase 1: materialisation overhead, {len(items)} entries")
            out["overhead"] = phase_overhead(directory, items, args.repeat, args.durable)
        if "2" not in skip:
            log("phase 2: replay")
            out["replay"] = phase_replay(directory, items)
        if "3" not in skip:
            log(f"phase 3: queries on {args.objects} objects")
            out["query"] = phase_query(directory, args.objects, args.runs)
    text = json.dumps(out, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
        return
    print(f"command: {out['command']}")
    if "overhead" in out:
        b = out["overhead"]["batched"]
        print(
            f"append, batches of 1000 ({out['overhead']['entries']} entries): without hook "
            f"{b['without_hook_us_per_entry']} us/entry, with hook "
            f"{b['with_hook_us_per_entry']} us/entry: overhead {b['overhead_pct']}% "
            "(target <= 30%)"
        )
        if "durable_single" in out["overhead"]:
            d = out["overhead"]["durable_single"]
            print(
                f"single durable appends ({d['entries']}): without "
                f"{d['without_hook_ms_per_append']} ms, with {d['with_hook_ms_per_append']} ms: "
                f"overhead {d['overhead_pct']}%"
            )
    if "replay" in out:
        r = out["replay"]
        print(
            f"replay fold: {r['fold_ops_per_s']:,} operations/s ({r['fold_entries_per_s']:,} "
            f"entries/s, {r['operations']} ops + {r['events']} events) (target >= 100,000)"
        )
        print(
            f"rebuild end to end: {r['rebuild_entries_per_s']:,} entries/s (strict decode "
            f"alone {r['strict_decode_entries_per_s']:,}/s); state digest {r['state_digest_s']}s"
        )
    if "query" in out:
        q = out["query"]
        print(
            f"queries on {q['objects']:,} objects ({q['file_mb']} MB, built in {q['build_s']}s"
            f", digest {q['state_digest_s']}s):"
        )
        for name, t in q["queries"].items():
            print(f"  {name:<48} median {t['median_ms']:>8} ms  p95 {t['p95_ms']:>8} ms")


if __name__ == "__main__":
    main()
