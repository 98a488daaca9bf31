"""The cheaper gated bookkeeping derives exactly what the implementation before it did.

``_gated_reference.py`` is the append path of ``memroot.projections.gated`` as of commit
0ed44e4 (before issue 15's third pass made it cheaper: one read per object giving its version
and whether it has rows, one run of the handler when the own view gives the global state,
a cheaper ``linked``). Random histories (conversation trees arriving in shuffled order, with
ASSERT, SUPERSEDE, DEDUP_RESOLVED, DEPRECATE, ARCHIVE, EPISTEMIC_TRANSITION, REINFORCE,
PENALTY, CONTRADICTION_NOTED, TOMBSTONE, FALSIFY / MARK_STALE / RESTORE, with and without
evidence, on ``main`` and on a branch) are appended entry by entry to two ledgers, one with
the current module and one with the reference patched in (its ``run``, ``on_event`` and the
falsification layer's ``own_view_state``). Every entry must be accepted by both or refused by
both with the same message, and at the end every derived table (``mem_*``, ``fz_*``) must hold
the same rows.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import count
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from memroot.ledger.entries import EventInput, OpInput, new_uuid, now_us
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import Ledger
from memroot.memory_root.falsify import FalsifyHook
from memroot.memory_root.falsify import _core as fz_core
from memroot.projections import gated
from memroot.projections import requests as rq
from memroot.projections.anchors import ConversationTree
from memroot.projections.hook import MemoryHook
from memroot.projections.model import MemoryObject
from memroot.projections.query import get_object

AGENT = rq.Actor("agent", "AI_AGENT", "ns")


def _reference() -> ModuleType:
    path = Path(__file__).with_name("_gated_reference.py")
    spec = importlib.util.spec_from_file_location("gated_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


REF = _reference()


@contextmanager
def reference_installed() -> Iterator[None]:
    """Run the reference implementation's append path (and own-view reads) meanwhile."""
    saved = gated.run, gated.on_event, fz_core.own_view_state
    gated.run, gated.on_event = REF.run, REF.on_event
    fz_core.own_view_state = REF.own_view_state
    try:
        yield
    finally:
        gated.run, gated.on_event, fz_core.own_view_state = saved


def dump(ledger: Ledger) -> dict[str, list[tuple[Any, ...]]]:
    """Every derived table of the memory model and the falsification layer, rows sorted."""
    db = ledger.store.db
    names = [
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND (name LIKE 'mem\\_%' ESCAPE '\\' OR name LIKE 'fz\\_%' ESCAPE '\\') "
            "ORDER BY name"
        )
    ]
    return {n: sorted(db.execute(f"SELECT * FROM {n}").fetchall(), key=repr) for n in names}


class Twin:
    """Two ledgers fed the same entries: the current gated module and the reference."""

    def __init__(self, tmp: Path, seed: int) -> None:
        hooks = [ConversationTree(), MemoryHook(), FalsifyHook()]
        self.new = Ledger.init(tmp / "new.ledger", hooks=hooks)
        self.old = Ledger.init(
            tmp / "old.ledger", hooks=[ConversationTree(), MemoryHook(), FalsifyHook()]
        )
        for led in (self.new, self.old):
            led.store.db.execute("PRAGMA synchronous=OFF")
        self.rng = random.Random(seed)
        self.clock = count(now_us() - 10**10, 1_000)
        self.accepted = self.refused = 0
        self.events: dict[str, list[str]] = {"main": []}
        self.objects: dict[str, list[str]] = {"main": []}

    def close(self) -> None:
        self.new.close()
        self.old.close()

    def append(self, item: EventInput | OpInput, branch: str = "main") -> bool:
        """Append to both; both must accept, or refuse with the same message."""
        item = dataclasses.replace(item, id=item.id or new_uuid(), ts=next(self.clock))
        got: list[str | None] = []
        for led, ref in ((self.new, False), (self.old, True)):
            try:
                if ref:
                    with reference_installed():
                        led.append(item, branch=branch)
                else:
                    led.append(item, branch=branch)
                got.append(None)
            except RefusedError as e:
                got.append(f"{type(e).__name__}: {e}")
        assert got[0] == got[1], (item, got)
        if got[0] is None:
            self.accepted += 1
        else:
            self.refused += 1
        return got[0] is None

    def fork(self, name: str) -> None:
        op = OpInput(
            op_type="BRANCH_CREATE",
            actor_id="u",
            actor_type="HUMAN_USER",
            namespace_id="ns",
            policy_version="p/1",
            payload={"branch_id": name, "branch_type": "SIMULATION", "purpose": "what if"},
            id=new_uuid(),
            ts=next(self.clock),
        )
        self.new.fork(op, genesis={"branch_type": "SIMULATION"})
        with reference_installed():
            self.old.fork(op, genesis={"branch_type": "SIMULATION"})
        self.events[name] = list(self.events["main"])
        self.objects[name] = list(self.objects["main"])

    def tree(self, branch: str) -> None:
        rng = self.rng
        n = rng.randrange(8, 30)
        ids = [new_uuid() for _ in range(n)]
        parent: dict[str, str | None] = {}
        for i, node in enumerate(ids):
            if i == 0 or rng.random() < 0.05:
                parent[node] = None
            elif rng.random() < 0.6:
                parent[node] = ids[i - 1]
            else:
                parent[node] = ids[rng.randrange(i)]
        children: dict[str | None, list[str]] = {}
        for node in ids:
            children.setdefault(parent[node], []).append(node)
        ready = list(children.get(None, []))
        while ready:
            node = ready.pop(rng.randrange(len(ready)))
            ready.extend(children.get(node, []))
            event = EventInput(
                stream="chat",
                actor_id="u",
                actor_type="HUMAN_USER",
                role="USER",
                content=f"turn {node[:8]}",
                namespace_id="ns",
                id=node,
                parent_event_id=parent[node],
            )
            if self.append(event, branch):
                self.events[branch].append(node)
            for _ in range(rng.randrange(0, 5)):
                self.op(branch)

    def evidence(self, branch: str) -> list[str]:
        rng = self.rng
        recent = self.events[branch][-40:]
        return sorted(set(rng.sample(recent, min(len(recent), rng.randrange(1, 3)))))

    def op(self, branch: str) -> None:
        rng = self.rng
        objs = self.objects[branch]
        if len(objs) < 3 or rng.random() < 0.3:
            oid = new_uuid()
            item = rq.assert_object(
                AGENT, "FACT", "ASSERTED", "USER_STATED", self.evidence(branch), "f", object_id=oid
            )
            if self.append(item, branch):
                objs.append(oid)
            return
        target = rng.choice(objs[-60:])
        other = rng.choice(objs[-60:])
        mine = self.evidence(branch) if rng.random() < 0.6 else []
        kind = rng.randrange(13)
        cur = get_object(self.new.store.db, target, branch=branch)
        item: OpInput
        if kind <= 1:
            item = rq.supersede(AGENT, target, other, "corrected")
        elif kind == 2:
            item = rq.dedup_resolved(AGENT, other, [target], "MERGE")
        elif kind == 3:
            item = rq.deprecate(AGENT, target, "wrong", evidence_ids=mine)
        elif kind == 4:
            item = rq.archive(AGENT, target, "old", "p", evidence_ids=mine)
        elif kind == 5:
            frm, to = ("ASSERTED", "OBSERVED") if rng.random() < 0.8 else ("OBSERVED", "ASSERTED")
            item = rq.transition(AGENT, target, frm, to, "seen", mine or self.evidence(branch))
        elif kind == 6:
            c = round(min(1.0, cur.confidence + rng.uniform(0, 0.1)), 6)
            s = round(min(1.0, cur.salience + rng.uniform(0, 0.1)), 6)
            item = rq.reinforce(AGENT, target, "used", 0.1, c, s, "chat", evidence_ids=mine)
        elif kind == 7:
            c = round(max(0.0, cur.confidence - rng.uniform(0, 0.2)), 6)
            item = rq.penalty(AGENT, target, "wrong", 0.2, c, "said so", evidence_ids=mine)
        elif kind == 8:
            item = rq.contradiction(AGENT, target, other, "conflict")
        elif kind == 9 and rng.random() < 0.2:
            event = rng.choice(self.events[branch][-40:])
            item = rq.tombstone(AGENT, event, "erase", "p", rng.choice([None, "DEPRECATE"]))
        else:
            op_type = ("FALSIFY", "MARK_STALE", "RESTORE", "RESTORE")[kind % 4]
            payload: dict[str, Any] = {"reason": "checked"}
            if mine:
                payload["evidence_ids"] = mine
            item = OpInput(
                op_type, "agent", "AI_AGENT", "ns", payload, "memroot/1", target, "memory_object"
            )
        self.append(item, branch)


@pytest.fixture(params=[20261201, 15])
def twin(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Twin]:
    t = Twin(tmp_path, request.param)
    try:
        yield t
    finally:
        t.close()


def test_current_bookkeeping_equals_the_reference(twin: Twin) -> None:
    """Same acceptances, same refusals (same messages), same derived tables, byte for byte."""
    for _ in range(12):
        twin.tree("main")
    twin.fork("b1")
    for _ in range(4):
        twin.tree("b1")
        twin.tree("main")
    new, old = dump(twin.new), dump(twin.old)
    assert new.keys() == old.keys()
    for name in new:
        assert new[name] == old[name], name
    gated_rows = new["mem_gated"]
    # The histories exercise what changed: objects with rows on both branches, operations
    # not applied globally, refusals, and falsification ops decided in their own view.
    assert {r[0] for r in gated_rows} == {"main", "b1"}
    assert any(r[9] == 0 for r in gated_rows)
    assert new["fz_unapplied"] and twin.refused > 0 and twin.accepted > 800
    assert gated.gated_digest(twin.new.store.db, "b1") == gated.gated_digest(
        twin.old.store.db, "b1"
    )


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"superseded_by": "01900000-0000-7000-8000-00000000000a", "valid_to": 17},
        {"confidence": 1.0, "salience": 0.1 + 0.2, "lifecycle_state": "SUPERSEDED"},
        {"confidence": 1e-7, "salience": 0.0, "evidence_ids": ("a", 'b\u00e9\\"')},
        {"confidence": 1, "salience": True, "version": 3},  # not floats: the encoder writes it
    ],
)
def test_base_text_is_what_the_encoder_writes(changes: dict[str, Any]) -> None:
    """The first row's base, written directly, is byte for byte the encoder's (FORMAT §12.4)."""
    o = MemoryObject(
        id="01900000-0000-7000-8000-000000000001",
        type="FACT",
        version=1,
        epistemic_type="ASSERTED",
        source_type="USER_STATED",
        evidence_ids=("01900000-0000-7000-8000-000000000002",),
        asserted_by="agent",
        valid_from=1_700_000_000_000_000,
        valid_to=None,
        created_at=1_700_000_000_000_000,
        last_modified_at=1_700_000_000_000_001,
        lifecycle_state="ACTIVE",
        superseded_by=None,
        confidence=0.8,
        salience=0.5,
        namespace_id="ns",
        value="v",
    )
    o = dataclasses.replace(o, **changes)
    assert gated._base_text(o) == gated._S.of(o).to_json()
