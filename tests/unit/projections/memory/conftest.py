"""Fixtures of the memory model's tests: a real ledger file with the memory hook installed."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.entries import EventInput, OpInput, new_uuid, now_us
from memroot.ledger.ledger import Appended, Ledger
from memroot.projections import requests as rq
from memroot.projections.hook import MemoryHook
from memroot.projections.model import MemoryObject
from memroot.projections.query import get_object


class World:
    """A ledger with the memory hook, and short ways to append events and operations."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.db = ledger.store.db
        self.agent = rq.Actor("agent-7", "AI_AGENT", "ns")
        # Ahead of the wall clock, so ticked entries are later than ones stamped "now".
        self._clock = count(now_us() + 10**9, 1_000)

    def tick(self) -> int:
        """A strictly increasing timestamp (one millisecond per call)."""
        return next(self._clock)

    def append(self, item: EventInput | OpInput) -> Appended:
        """Append, stamping a tick when the request has no ts (so time only moves forward)."""
        if item.ts is None:
            item = dataclasses.replace(item, ts=self.tick())
        return self.ledger.append(item)

    def event(
        self, content: str = "I take tea without sugar", *, ns: str = "ns", actor: str = "alice"
    ) -> str:
        """Append an event and return its id."""
        return self.append(
            EventInput(
                stream="s",
                actor_id=actor,
                actor_type="HUMAN_USER",
                role="USER",
                content=content,
                namespace_id=ns,
                ts=self.tick(),
            )
        ).id

    def assert_(
        self,
        value: str = "Alice takes tea without sugar",
        *,
        type_: str = "FACT",
        epistemic: str = "OBSERVED",
        source: str = "USER_STATED",
        evidence: list[str] | None = None,
        by: rq.Actor | None = None,
        **kw: Any,
    ) -> str:
        """ASSERT an object (citing a new event unless ``evidence`` is given); return its id."""
        by = by or self.agent
        evidence = evidence if evidence is not None else [self.event(ns=by.namespace_id)]
        op = rq.assert_object(by, type_, epistemic, source, evidence, value, ts=self.tick(), **kw)
        return self.append(op).id

    def op(self, item: OpInput) -> Appended:
        return self.append(item)

    def get(self, object_id: str, as_of: int | None = None) -> MemoryObject:
        return get_object(self.db, object_id, as_of=as_of)

    def rows(self, table: str) -> int:
        return int(self.db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def snapshot(self) -> tuple[int, ...]:
        """Row counts of every memory table plus the ledger size: a refusal changes none."""
        tables = (
            "mem_events",
            "mem_objects",
            "mem_edges",
            "mem_entities",
            "mem_namespaces",
            "mem_grants",
            "mem_skipped",
        )
        return (self.ledger.size(), *(self.rows(t) for t in tables))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """A fresh ledger file with the memory hook (fsync off: these tests check rules)."""
    ledger = Ledger.init(tmp_path / f"{new_uuid()}.db", hooks=[MemoryHook()])
    ledger.store.db.execute("PRAGMA synchronous=OFF")
    try:
        yield World(ledger)
    finally:
        ledger.close()
