"""The gated bookkeeping inside a batched append (issue 15, point 6).

Under ``MemoryHook`` an operation on ``main`` reads its objects together with whether they
have ``mem_gated`` rows in one statement; the batch's ``mem_conv`` and ``mem_gated`` rows are
held until the batch ends, and every later operation of the same batch must see them (the
walk of its own view, the validation there). Each test feeds the same requests to two
ledgers, one an entry per ``append`` and one in a single ``append_batch``, and compares every
derived table and the gated digest.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from memroot.ledger.entries import EventInput, OpInput, new_uuid, now_us
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import Ledger
from memroot.memory_root.falsify import FalsifyHook
from memroot.projections import requests as rq
from memroot.projections.anchors import ConversationTree
from memroot.projections.gated import gated_digest
from memroot.projections.hook import MemoryHook, sync

AGENT = rq.Actor("agent", "AI_AGENT", "ns")


def _open(path: Path) -> Ledger:
    ledger = Ledger.init(path, hooks=[ConversationTree(), MemoryHook(), FalsifyHook()])
    ledger.store.db.execute("PRAGMA synchronous=OFF")
    return ledger


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    led = _open(tmp_path / "one.ledger")
    try:
        yield led
    finally:
        led.close()


def _event(content: str, parent: str | None, ts: int) -> EventInput:
    return EventInput(
        stream="chat",
        actor_id="alice",
        actor_type="HUMAN_USER",
        role="USER",
        content=content,
        namespace_id="ns",
        id=new_uuid(),
        parent_event_id=parent,
        ts=ts,
    )


def _fact(value: str, evidence: list[str], ts: int) -> OpInput:
    return rq.assert_object(
        AGENT, "FACT", "ASSERTED", "USER_STATED", evidence, value, object_id=new_uuid(), ts=ts
    )


def _statements(db: apsw.Connection) -> list[str]:
    seen: list[str] = []

    def trace(_cursor: apsw.Cursor, sql: str, _bindings: Any) -> bool:
        seen.append(sql)
        return True

    db.exec_trace = trace
    return seen


def test_an_operation_in_main_reads_its_object_and_rows_in_one_statement(ledger: Ledger) -> None:
    """The batched hook's store reads the tables as they are: no separate row preload."""
    ts = now_us() - 10_000_000
    root = _event("hi", None, ts)
    fact = _fact("likes tea", [str(root.id)], ts + 1)
    ledger.append_batch([root, fact])
    oid = str(fact.target_id)
    seen = _statements(ledger.store.db)
    ledger.append(rq.deprecate(AGENT, oid, "wrong", evidence_ids=[str(root.id)], ts=ts + 2))
    ledger.store.db.exec_trace = None
    preloads = [s for s in seen if "FROM mem_gated g WHERE g.object_id IN" in s]
    assert preloads == []
    rows: Any = ledger.store.db.execute("SELECT op_type, applied FROM mem_gated").fetchall()
    assert rows == [("DEPRECATE", 1)]


def _tables(db: apsw.Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every memory and falsification table and the conversation tree, rows sorted.

    (Less the falsification layer's fold cache, which a batch fills differently.)
    """
    names: Any = db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND (name LIKE 'mem_%' OR "
        "name LIKE 'fz_%' OR name = 'conv_parents') AND sql NOT LIKE 'CREATE VIRTUAL%' "
        "AND name NOT LIKE '%fts%' AND name != 'fz_folds' ORDER BY name"
    ).fetchall()
    out = {}
    for (name,) in names:
        rows: Any = db.execute(f"SELECT * FROM {name}").fetchall()
        out[name] = sorted((tuple(r) for r in rows), key=repr)
    return out


def _same_as_one_by_one(tmp: Path, batches: list[list[EventInput | OpInput]]) -> Ledger:
    """Append ``batches`` to a ledger, and each request on its own to another: same tables.

    Returns the batched ledger (open; the caller closes it).
    """
    # Operations get their ids here, so both ledgers derive the same edge ids from them.
    batches = [[_with_id(x) for x in batch] for batch in batches]
    tmp.mkdir(exist_ok=True)
    one, many = _open(tmp / "one.ledger"), _open(tmp / "many.ledger")
    try:
        for batch in batches:
            for item in batch:
                one.append(item)
            many.append_batch(batch)
            assert _tables(many.store.db) == _tables(one.store.db)
        assert gated_digest(many.store.db, "main") == gated_digest(one.store.db, "main")
    except BaseException:
        many.close()
        raise
    finally:
        one.close()
    return many


def _with_id(item: EventInput | OpInput) -> EventInput | OpInput:
    if isinstance(item, OpInput) and item.id is None:
        return dataclasses.replace(item, id=new_uuid())
    return item


def _gated(db: apsw.Connection) -> list[tuple[Any, ...]]:
    rows: Any = db.execute(
        "SELECT op_type, applied, base IS NOT NULL FROM mem_gated ORDER BY seq"
    ).fetchall()
    return [tuple(r) for r in rows]


def test_a_supersede_and_a_deprecate_from_two_lines_in_one_batch(tmp_path: Path) -> None:
    """The DEPRECATE from line b sees the SUPERSEDE's row held from line a, and b's event.

    Its own view (b's path) has F1 ACTIVE, so it is accepted; the global state (F1
    SUPERSEDED by then) cannot take it. Had it not seen the held row, it would have been
    checked globally and refused; had it not seen the held ``mem_conv`` rows, its evidence
    would look unlinked (a flat log) and it would be refused the same way.
    """
    ts = now_us() - 10_000_000
    r = _event("I'm moving", None, ts)
    a = _event("to Chengdu", str(r.id), ts + 1)
    b = _event("to Hangzhou", str(r.id), ts + 2)
    f1 = _fact("moving", [str(r.id)], ts + 3)
    f2 = _fact("moving to Chengdu", [str(a.id)], ts + 4)
    old, new = str(f1.target_id), str(f2.target_id)
    batch: list[EventInput | OpInput] = [
        r,
        a,
        b,
        f1,
        f2,
        rq.supersede(AGENT, old, new, "the user said Chengdu", ts=ts + 5),
        rq.deprecate(AGENT, old, "the user edited it", evidence_ids=[str(b.id)], ts=ts + 6),
    ]
    ledger = _same_as_one_by_one(tmp_path, [batch])
    try:
        assert _gated(ledger.store.db) == [("SUPERSEDE", 1, 1), ("DEPRECATE", 0, 0)]
    finally:
        ledger.close()


def test_an_event_and_the_operation_citing_it_in_one_batch(tmp_path: Path) -> None:
    """A PENALTY citing an event of its own batch walks that event's held ``mem_conv`` row.

    F1 was REINFORCEd from line a in an earlier batch (0.8 -> 0.9). The PENALTY from c (on
    line b, appended in the same batch as c) is checked on c's path, where F1 is still at
    0.8 (0.8 -> 0.6 is within its delta); the global state (0.9) cannot take it.
    """
    ts = now_us() - 10_000_000
    r = _event("I take tea", None, ts)
    a = _event("no sugar, noted", str(r.id), ts + 1)
    b = _event("are you sure?", str(r.id), ts + 2)
    f1 = _fact("takes tea without sugar", [str(r.id)], ts + 3)
    oid = str(f1.target_id)
    first: list[EventInput | OpInput] = [
        r,
        a,
        b,
        f1,
        rq.reinforce(
            AGENT, oid, "confirmed", 0.1, 0.9, 0.6, "reply", evidence_ids=[str(a.id)], ts=ts + 4
        ),
    ]
    c = _event("yes, sure", str(b.id), ts + 5)
    second: list[EventInput | OpInput] = [
        c,
        rq.penalty(AGENT, oid, "doubted", 0.2, 0.6, "reply", evidence_ids=[str(c.id)], ts=ts + 6),
    ]
    ledger = _same_as_one_by_one(tmp_path, [first, second])
    try:
        assert _gated(ledger.store.db) == [("REINFORCE", 1, 1), ("PENALTY", 0, 0)]
    finally:
        ledger.close()


def test_a_refused_batch_leaves_no_held_gated_rows(tmp_path: Path) -> None:
    """Rows held before a refused entry are dropped: no reader writes them, the next batch
    starts clean, and the tables equal a ledger that never saw the refused batch."""
    ts = now_us() - 10_000_000
    r = _event("hi", None, ts)
    a = _event("hello", str(r.id), ts + 1)
    f1 = _fact("greets", [str(r.id)], ts + 2)
    oid = str(f1.target_id)
    good: list[EventInput | OpInput] = [r, a, f1]
    b = _event("bye", str(r.id), ts + 3)
    refused: list[EventInput | OpInput] = [
        b,
        rq.deprecate(AGENT, oid, "gone", evidence_ids=[str(b.id)], ts=ts + 4),
        rq.deprecate(AGENT, new_uuid(), "no such object", ts=ts + 5),
    ]
    later: list[EventInput | OpInput] = [
        rq.archive(AGENT, oid, "old", "p", evidence_ids=[str(a.id)], ts=ts + 6)
    ]
    good, refused, later = ([_with_id(x) for x in batch] for batch in (good, refused, later))
    reference = _same_as_one_by_one(tmp_path / "ref", [good, later])
    want = _tables(reference.store.db)
    reference.close()
    (tmp_path / "run").mkdir()
    ledger = _open(tmp_path / "run" / "l.ledger")
    try:
        ledger.append_batch(good)
        before = _tables(ledger.store.db)
        with pytest.raises(RefusedError, match="does not exist"):
            ledger.append_batch(refused)
        sync(ledger)  # a reader that writes (it brings the text index up to date)
        after = _tables(ledger.store.db)
        assert {k: v for k, v in after.items() if k != "mem_meta"} == {
            k: v for k, v in before.items() if k != "mem_meta"
        }
        ledger.append_batch(later)
        got = _tables(ledger.store.db)
    finally:
        ledger.close()
    # The text index's mark aside (sync moved it), the ledger that saw the refused batch
    # holds exactly the rows of the one that never did.
    assert {k: v for k, v in got.items() if k != "mem_meta"} == {
        k: v for k, v in want.items() if k != "mem_meta"
    }
    assert [r[5] for r in got["mem_gated"]] == ["ARCHIVE"]


def _history(rng: random.Random, ts: int) -> list[EventInput | OpInput]:
    """A random conversation (each event's parent one of the six before it, so lines
    interleave, and a few new roots) and gated operations on its objects.

    Many operations cite events of their own line appended just before them, and objects
    are changed again soon after, so in batches most of them read rows held for the batch.
    Some requests are invalid (the caller keeps the ones an entry-by-entry ledger accepts).
    """
    items: list[EventInput | OpInput] = []
    events: list[str] = []
    parent: dict[str, str | None] = {}
    objects: list[str] = []
    for _ in range(rng.randrange(40, 70)):
        ts += 10
        up = None if not events or rng.random() < 0.05 else rng.choice(events[-6:])
        event = _event("turn", up, ts)
        node = str(event.id)
        parent[node] = up
        events.append(node)
        items.append(event)
        for _ in range(rng.randrange(0, 4)):
            ts += 1
            line = [node] if parent[node] is None or rng.random() < 0.5 else [up, node]
            evidence = [e for e in line if e is not None]
            if not objects or rng.random() < 0.3:
                fact = _fact("f", evidence, ts)
                objects.append(str(fact.target_id))
                items.append(fact)
                continue
            oid = rng.choice(objects[-8:])
            mine = evidence if rng.random() < 0.8 else []
            k = rng.randrange(8)
            item: OpInput
            if k == 0:
                item = rq.supersede(AGENT, oid, rng.choice(objects[-8:]), "fixed", ts=ts)
            elif k == 1:
                item = rq.deprecate(AGENT, oid, "wrong", evidence_ids=mine, ts=ts)
            elif k == 2:
                item = rq.archive(AGENT, oid, "old", "p", evidence_ids=mine, ts=ts)
            elif k == 3:
                c = round(rng.uniform(0.75, 0.95), 3)
                item = rq.reinforce(
                    AGENT, oid, "used", 0.1, c, 0.55, "chat", evidence_ids=mine, ts=ts
                )
            elif k == 4:
                c = round(rng.uniform(0.55, 0.85), 3)
                item = rq.penalty(AGENT, oid, "doubt", 0.2, c, "said", evidence_ids=mine, ts=ts)
            elif k == 5:
                item = rq.transition(AGENT, oid, "ASSERTED", "OBSERVED", "seen", mine, ts=ts)
            elif k == 6:
                other = rng.choice(objects)
                item = rq.contradiction(AGENT, oid, other, "clash", ts=ts)
            else:
                kind = rng.choice(["FALSIFY", "MARK_STALE", "RESTORE"])
                payload: dict[str, Any] = {"reason": "checked"}
                if mine:
                    payload["evidence_ids"] = mine
                item = OpInput(
                    kind,
                    "agent",
                    "AI_AGENT",
                    "ns",
                    payload,
                    "memroot/1",
                    oid,
                    "memory_object",
                    ts=ts,
                )
            items.append(item)
    return [_with_id(x) for x in items]


def test_random_batches_fold_gated_operations_as_entries_one_at_a_time(tmp_path: Path) -> None:
    """Batched and entry-by-entry appends leave the same tables and gated digest."""
    unapplied = refused = 0
    for seed in range(6):
        rng = random.Random(seed)
        items = _history(rng, now_us() - 100_000_000)
        one = _open(tmp_path / f"filter{seed}.ledger")
        accepted: list[EventInput | OpInput] = []
        try:
            for item in items:
                try:
                    one.append(item)
                    accepted.append(item)
                except RefusedError:
                    refused += 1
            off = one.store.db.execute("SELECT count(*) FROM mem_gated WHERE applied = 0")
            unapplied += off.fetchone()[0]
        finally:
            one.close()
        batches = []
        start = 0
        while start < len(accepted):
            size = rng.choice([1, 3, 10, 40, 200])
            batches.append(accepted[start : start + size])
            start += size
        _same_as_one_by_one(tmp_path / f"pair{seed}", batches).close()
    # The histories do what this is about: rows the global state did not apply, refusals.
    assert unapplied > 0 and refused > 0
