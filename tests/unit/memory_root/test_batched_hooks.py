"""The append hooks fold a batch at its end: the same derived state as one entry at a time.

``MemoryHook`` buffers a batch's event rows and heads and ``FalsifyHook`` the heads events
move (issue 12, point 3). On random histories with refusals in them, two ledgers are fed the
same requests: one an entry per ``append`` (the reference), the other in batches. A batch
holding a request the reference refused must be refused whole, with the reference's error,
writing nothing; the rest must leave the memory tables identical, and the batched ledger's
roots, falsification states and memory tables must equal what ``rebuild`` and the verifier
replay from its entries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import tempfile
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger.entries import EventInput, OpInput, new_uuid, now_us
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import AppendHook, Ledger
from memroot.ledger.verify import verify_path
from memroot.memory_root import RootsHook
from memroot.memory_root.branches import BranchRegistry
from memroot.memory_root.erasure import ErasureHook
from memroot.memory_root.falsify import FalsifyHook
from memroot.memory_root.falsify.replay import FalsifyReplayCheck
from memroot.memory_root.falsify.replay import rebuild as rebuild_states
from memroot.memory_root.replay import RootsReplayCheck
from memroot.memory_root.replay import rebuild as rebuild_roots
from memroot.projections import requests as rq
from memroot.projections import tables
from memroot.projections.anchors import ConversationTree
from memroot.projections.backends import MemState
from memroot.projections.builtins import MemoryStateDigest, builtin_projections
from memroot.projections.digest import state_digest
from memroot.projections.engine import Engine
from memroot.projections.gitctx import GitContextHook
from memroot.projections.hook import MemoryHook, sync
from memroot.projections.registry import Registry
from memroot.projections.replay import MemoryReplayCheck
from memroot.projections.replay import rebuild as rebuild_memory

AGENT = rq.Actor("agent-1", "AI_AGENT", "ns")
OWNER = rq.Actor("owner", "HUMAN_USER", "locked")
# The ledger's own tables: entry rows, tree, heads and checkpoints (salts and signatures
# differ between two ledgers); everything else is derived state.
LEDGER_TABLES = frozenset({"entries", "nodes", "branches", "meta", "event_ids", "checkpoints"})


def _registry() -> Registry:
    # The memory-state projection reads the derived tables at every snapshot: a snapshot
    # due in the middle of a batch must see the batch's events.
    return Registry([*builtin_projections(), MemoryStateDigest()])


def _hooks() -> list[AppendHook]:
    registry = _registry()
    return [
        BranchRegistry(),
        ConversationTree(),
        GitContextHook(),
        MemoryHook(),
        FalsifyHook(registry),
        RootsHook(registry, selfmodel_hooks=[]),
        ErasureHook(),
    ]


def _tables(db: apsw.Connection) -> list[str]:
    rows: Any = db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name"
    ).fetchall()
    return [str(r[0]) for r in rows if "_fts" not in str(r[0])]


def _dump(db: apsw.Connection, names: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for name in names:
        rows: Any = db.execute(f"SELECT * FROM {name}").fetchall()
        out[name] = sorted((tuple(r) for r in rows), key=repr)
    return out


def _memory_tables(db: apsw.Connection) -> list[str]:
    return [t for t in _tables(db) if t.startswith("mem_") or t == "conv_parents"]


def _derived_tables(db: apsw.Connection) -> list[str]:
    # Less the caches rebuild starts afresh: the fold-state cache and the text index's mark.
    return [t for t in _tables(db) if t not in LEDGER_TABLES and t not in ("fz_folds", "mem_meta")]


def _event(rng: random.Random, events: list[str], ts: int, ns: str = "ns") -> EventInput:
    parent = rng.choice(events) if events and rng.random() < 0.3 else None
    return EventInput(
        stream="s",
        actor_id="alice",
        actor_type="HUMAN_USER",
        role="USER",
        content=f"message {rng.randrange(10**6)}",
        namespace_id=ns,
        id=new_uuid(),
        parent_event_id=parent,
        ts=ts,
    )


def _history(seed: int, n: int, base: int) -> list[EventInput | OpInput]:
    """Return ``n`` requests: mostly events, memory and state operations, some invalid."""
    rng = random.Random(seed)
    items: list[EventInput | OpInput] = []
    events: list[str] = []
    objects: list[str] = []
    for i in range(n):
        ts = base + i
        r = rng.random()
        if r < 0.5 or not events:
            ev = _event(rng, events, ts, "locked" if rng.random() < 0.1 else "ns")
            events.append(str(ev.id))
            items.append(ev)
        elif r < 0.62:
            cited = rng.choice(events) if rng.random() < 0.9 else new_uuid()  # unknown: refused
            oid = new_uuid()
            objects.append(oid)
            items.append(
                rq.assert_object(
                    AGENT,
                    "FACT",
                    "OBSERVED",
                    "USER_STATED",
                    [cited],
                    f"v{i}",
                    object_id=oid,
                    ts=ts,
                )
            )
        elif r < 0.85 and objects:
            oid = rng.choice(objects)
            k = rng.randrange(6)
            if k == 0:
                items.append(rq.reinforce(AGENT, oid, "used", 0.1, 0.95, 0.55, "chat", ts=ts))
            elif k == 1:
                items.append(rq.decay(AGENT, oid, 0.1, 0.45, 0.85, "exp", ts=ts))
            elif k == 2:
                items.append(rq.deprecate(AGENT, oid, "stale", ts=ts))  # twice: refused
            elif k == 3 and len(objects) > 1:
                a, b = rng.sample(objects, 2)
                items.append(rq.relate(AGENT, "SUPPORTS", a, b, 0.7, ts=ts))
            elif k == 4:
                # FALSIFY (the falsification hook); a second one of the same object is refused.
                items.append(
                    OpInput(
                        op_type="FALSIFY",
                        actor_id="mallory",
                        actor_type="HUMAN_USER",
                        namespace_id="system",
                        payload={"reason": "wrong"},
                        policy_version="p/1",
                        target_id=oid,
                        target_type="memory_object",
                        ts=ts,
                    )
                )
            else:
                items.append(rq.contradiction(AGENT, oid, rng.choice(objects), "clash", ts=ts))
        elif r < 0.9:
            # A policy on "locked": later events of alice there are refused (no WRITE).
            items.append(rq.namespace_create(OWNER, "TEAM", ts=ts))
        elif r < 0.95 and events:
            mode = rng.choice([None, "KEEP", "DEPRECATE", "ARCHIVE"])
            items.append(rq.tombstone(AGENT, rng.choice(events), "gdpr", "p/1", mode, ts=ts))
        else:
            ev = _event(rng, events, ts)
            if events and rng.random() < 0.5:
                ev = EventInput(**{**_fields(ev), "id": rng.choice(events)})  # duplicate id
            items.append(ev)
    # Operations get their ids here, so both ledgers derive the same edge ids from them.
    return [dataclasses.replace(x, id=new_uuid()) if isinstance(x, OpInput) else x for x in items]


def _fields(ev: EventInput) -> dict[str, Any]:
    return {
        k: getattr(ev, k)
        for k in (
            "stream",
            "actor_id",
            "actor_type",
            "role",
            "content",
            "namespace_id",
            "id",
            "parent_event_id",
            "ts",
        )
    }


def _open_pair(tmp: Path) -> tuple[Ledger, Ledger]:
    one = Ledger.init(tmp / "one.ledger", snapshot_every=7, hooks=_hooks())
    many = Ledger.init(tmp / "many.ledger", snapshot_every=7, hooks=_hooks())
    return one, many


def _check_replay(ledger: Ledger) -> None:
    """Roots, states and memory tables equal their rebuild and the verifier's replay."""
    db = ledger.store.db
    stored = _dump(db, _derived_tables(db))
    registry = _registry()
    path = ledger.path
    report = verify_path(
        path,
        checks=[
            RootsReplayCheck(path, registry),
            MemoryReplayCheck(path),
            FalsifyReplayCheck(path, registry),
        ],
    )
    assert report.ok, [str(f) for f in report.findings]
    assert rebuild_memory(ledger).identical
    rebuild_roots(ledger, registry)
    rebuild_states(ledger, registry)
    assert _dump(db, _derived_tables(db)) == stored


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(1, 15), min_size=1))
def test_batches_fold_as_entries_one_at_a_time(
    tmp_path_factory: pytest.TempPathFactory, seed: int, sizes: list[int]
) -> None:
    """Batched and per-entry appends agree on every refusal and on the memory tables."""
    tmp = tmp_path_factory.mktemp("batched")
    one, many = _open_pair(tmp)
    try:
        items = _history(seed, 90, now_us())
        start = 0
        k = 0
        while start < len(items):
            batch = items[start : start + sizes[k % len(sizes)]]
            start += len(batch)
            k += 1
            accepted: list[EventInput | OpInput] = []
            first: RefusedError | None = None
            for item in batch:
                try:
                    one.append(item)
                    accepted.append(item)
                except RefusedError as e:
                    first = first or e
            before = _dump(many.store.db, _tables(many.store.db))
            if first is not None:
                with pytest.raises(RefusedError) as refused:
                    many.append_batch(batch)
                # Refused whole, with what the reference refused first; nothing written.
                assert str(refused.value) == str(first)
                assert _dump(many.store.db, _tables(many.store.db)) == before
            if accepted:
                many.append_batch(accepted)
            db1, db2 = one.store.db, many.store.db
            assert _dump(db2, _memory_tables(db2)) == _dump(db1, _memory_tables(db1))
        _check_replay(many)
    finally:
        one.close()
        many.close()


def test_a_snapshot_due_inside_a_batch_sees_the_events_before_it(tmp_path: Path) -> None:
    """The memory-state digest of a root taken mid-batch covers the batch's events so far."""
    ledger = Ledger.init(tmp_path / "l.ledger", snapshot_every=5, hooks=_hooks())
    try:
        rng = random.Random(1)
        events: list[str] = []
        batch = []
        for i in range(23):
            ev = _event(rng, events, now_us() + i)
            events.append(str(ev.id))
            batch.append(ev)
        made = ledger.append_batch(batch)
        assert sum(1 for a in made if a.type == "SNAPSHOT") == 4
        _check_replay(ledger)
    finally:
        ledger.close()


def test_a_refused_batch_leaves_no_buffered_rows_behind(tmp_path: Path) -> None:
    """Events buffered before a refused entry are dropped: the next batch starts clean."""
    ledger = Ledger.init(tmp_path / "l.ledger", hooks=_hooks())
    try:
        rng = random.Random(2)
        good = [_event(rng, [], now_us() + i) for i in range(6)]
        fact = rq.assert_object(AGENT, "FACT", "OBSERVED", "USER_STATED", [str(good[0].id)], "v")
        ledger.append_batch([good[0], fact])  # the text index now lags this ASSERT
        bad = rq.assert_object(AGENT, "FACT", "OBSERVED", "USER_STATED", [new_uuid()], "v")
        db = ledger.store.db
        before = _dump(db, _tables(db))
        with pytest.raises(RefusedError, match="evidence event"):
            ledger.append_batch([*good[1:], bad])
        assert _dump(db, _tables(db)) == before
        # A reader that folds (the lagging text index makes sync write) writes no row or
        # head of the refused batch.
        sync(ledger)
        names = ["mem_events", "mem_heads", "fz_heads"]
        assert _dump(db, names) == {k: before[k] for k in names}
        ledger.append_batch(good[1:3])
        rows: Any = db.execute("SELECT count(*) FROM mem_events").fetchone()
        assert rows[0] == 3
        _check_replay(ledger)
    finally:
        ledger.close()


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_replay_that_writes_its_events_out_early_folds_the_same_state(seed: int) -> None:
    """``MemState`` writes its events to ``mem_events`` every ``flush_every`` (bounded memory):
    evidence and TOMBSTONE targets among the written events are found, the state is equal."""
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger.init(Path(tmp) / "l.ledger", hooks=[MemoryHook()])
        try:
            for item in _history(seed, 80, now_us()):
                with contextlib.suppress(RefusedError):
                    ledger.append(item)
            db = apsw.Connection(":memory:")
            db.execute("BEGIN")
            tables.install(db, fts=False, indexes=False)
            state = MemState(db, flush_every=3)
            engine = Engine(state)
            for entry in ledger.entries():
                engine.fold(entry)
            state.finish()
            assert state_digest(db) == state_digest(ledger.store.db)
            names = [t for t in _memory_tables(db) if t != "mem_meta"]  # the text index mark
            assert _dump(db, names) == _dump(ledger.store.db, names)
        finally:
            ledger.close()
