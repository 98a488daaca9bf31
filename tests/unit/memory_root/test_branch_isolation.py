"""RFC-0012 section 12 isolation benchmark, with the memory model and memory roots installed."""

from __future__ import annotations

import random
from itertools import count
from pathlib import Path

from memroot.ledger.entries import EventInput, OpInput, now_us
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import Ledger
from memroot.ledger.trust import TrustedState
from memroot.ledger.verify import verify_path
from memroot.memory_root import Roots, RootsHook
from memroot.memory_root.branches import BranchRegistry, create_branch
from memroot.memory_root.replay import RootsReplayCheck
from memroot.projections import requests as rq
from memroot.projections.digest import state_digest
from memroot.projections.epistemic import RetrievalMode
from memroot.projections.hook import MemoryHook
from memroot.projections.query import MAX_LIMIT, Query, query
from memroot.projections.replay import MemoryReplayCheck

AGENT = rq.Actor("agent", "AI_AGENT", "ns")


def _event(ts: int, text: str) -> EventInput:
    return EventInput(
        stream="s",
        actor_id="alice",
        actor_type="HUMAN_USER",
        role="USER",
        content=text,
        namespace_id="ns",
        ts=ts,
    )


def test_canonical_is_byte_identical_after_1000_branch_entries_on_10_simulations(
    tmp_path: Path,
):
    """Root, checkpoint, memory state digest and memory_root of main do not move while ten
    SIMULATION branches take 1000 events and operations, many on objects inherited from main."""
    tick = count(now_us() + 10**9, 1_000)
    path = tmp_path / "iso.ledger"
    hooks = [BranchRegistry(), MemoryHook(), RootsHook()]
    with Ledger.init(path, origin="example.org/iso", hooks=hooks) as ledger:
        ledger.store.db.execute("PRAGMA synchronous=OFF")
        roots = Roots(ledger)
        base = [ledger.append(_event(next(tick), f"fact {i}")).id for i in range(20)]
        objs = [
            ledger.append(
                rq.assert_object(
                    AGENT, "FACT", "OBSERVED", "USER_STATED", [e], f"v{i}", ts=next(tick)
                )
            ).id
            for i, e in enumerate(base)
        ]
        names = []
        for i in range(10):
            _, g = create_branch(
                ledger, branch_type="SIMULATION", purpose=f"what if {i}", actor_id=f"u{i}"
            )
            names.append(g.branch)
        roots.snapshot()
        db = ledger.store.db
        main_view = query(db, Query(mode=RetrievalMode.AUDIT, limit=MAX_LIMIT))
        before = (
            ledger.size(),
            ledger.root(),
            ledger.checkpoint().note,
            state_digest(db),
            roots.latest().root,
        )
        rng = random.Random(7)
        own: dict[str, list[str]] = {n: [] for n in names}
        written = 0
        while written < 1000:
            name = names[written % 10]
            r = rng.random()
            item: EventInput | OpInput
            if r < 0.4 or not own[name]:
                item = _event(next(tick), f"branch {written}")
            elif r < 0.6:
                item = rq.assert_object(
                    AGENT,
                    "FACT",
                    rng.choice(["HYPOTHETICAL", "ASSERTED"]),
                    "USER_STATED",
                    [rng.choice(own[name])],
                    f"b{written}",
                    ts=next(tick),
                )
            elif r < 0.8:
                item = rq.decay(AGENT, rng.choice(objs), 0.01, 0.49, 0.89, "sim", ts=next(tick))
            else:
                item = rq.deprecate(AGENT, rng.choice(objs), "in this world", ts=next(tick))
            try:
                made = ledger.append(item, branch=name)
            except RefusedError:  # an op on an object this branch deprecated: refused
                continue
            if isinstance(item, EventInput):
                own[name].append(made.id)
            written += 1
        after = (
            ledger.size(),
            ledger.root(),
            ledger.checkpoint().note,
            state_digest(db),
            roots.latest().root,
        )
        assert after == before
        assert query(db, Query(mode=RetrievalMode.AUDIT, limit=MAX_LIMIT)) == main_view
        assert sum(ledger.size(n) - 1 for n in names) >= 1000
        changed = sum(
            1
            for n in names
            for r in query(db, Query(branch=n, mode=RetrievalMode.AUDIT, limit=MAX_LIMIT))
            if r.object.branch == n and r.object.id in objs
        )
        assert changed > 10  # the branches did rewrite inherited objects
        for n in names:
            ledger.checkpoint(n)
    report = verify_path(
        path,
        trusted=TrustedState(tmp_path / "t.json"),
        checks=[RootsReplayCheck(path), MemoryReplayCheck(path)],
    )
    assert report.ok, [str(f) for f in report.findings]
