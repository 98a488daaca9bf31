"""The gated bookkeeping inside a batched append (issue 15, point 6).

Under ``MemoryHook`` an operation on ``main`` reads its objects together with whether they
have ``mem_gated`` rows in one statement; the batch's ``mem_conv`` and ``mem_gated`` rows are
held until the batch ends, and every later operation of the same batch must see them (the
walk of its own view, the validation there). Each test feeds the same requests to two
ledgers, one an entry per ``append`` and one in a single ``append_batch``, and compares every
derived table and the gated digest.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from memroot.ledger.entries import EventInput, OpInput, new_uuid, now_us
from memroot.ledger.ledger import Ledger
from memroot.projections import requests as rq
from memroot.projections.anchors import ConversationTree
from memroot.projections.hook import MemoryHook

AGENT = rq.Actor("agent", "AI_AGENT", "ns")


def _open(path: Path) -> Ledger:
    ledger = Ledger.init(path, hooks=[ConversationTree(), MemoryHook()])
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
