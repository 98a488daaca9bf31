"""Generate ``gated-vectors.json``: invalidation gated by provenance (docs/FORMAT.md §12).

A small conversation tree from fixed inputs (ids and timestamps): root, A "Chengdu", B
"Hangzhou" (A's sibling), B2 (B's child); facts F1 (root), F2 (A), F3 (B), F4 (B2); then
``SUPERSEDE F1 -> F2`` (provenance A), ``SUPERSEDE F1 -> F3`` (provenance B: valid in B's view,
not applied globally), ``PENALTY F3`` with ``evidence_ids`` [B2], ``DEPRECATE F1`` with
``evidence_ids`` [B2] (refused: F1 is SUPERSEDED on B2's path) and a ``REINFORCE F2`` without
evidence (applies everywhere). The file gives each entry's input (JSON) and whether it was
accepted, the ``mem_gated`` and ``mem_conv`` rows (``gated_rows``), the ``gated_digest`` of
``main`` and, per anchor, every visible object's lifecycle state, ``superseded_by``,
confidence and version. Deterministic: running this again must give identical bytes
(``tests/unit/projections/test_gated_vectors.py`` checks).

Usage, from the repository root: ``python tests/vectors/memroot/gen_gated_vectors.py``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import Ledger
from memroot.projections import requests as rq
from memroot.projections.anchors import ConversationTree
from memroot.projections.epistemic import RetrievalMode
from memroot.projections.gated import gated_digest, gated_rows
from memroot.projections.hook import MemoryHook
from memroot.projections.query import Query, query

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds
VECTORS_PATH = Path(__file__).with_name("gated-vectors.json")
AGENT = rq.Actor("agent", "AI_AGENT", "ns", "memroot/1")


def _id(n: int) -> str:
    return f"01900000-0000-7000-8000-{n:012d}"


ROOT, A, B, B2 = _id(1), _id(2), _id(3), _id(4)
F1, F2, F3, F4 = _id(11), _id(12), _id(13), _id(14)


def _inputs() -> list[EventInput | OpInput]:
    def event(eid: str, parent: str | None, text: str) -> EventInput:
        return EventInput(
            stream="chat",
            actor_id="alice",
            actor_type="HUMAN_USER",
            role="USER",
            content=text,
            namespace_id="ns",
            id=eid,
            parent_event_id=parent,
        )

    def fact(oid: str, value: str, evidence: str) -> OpInput:
        return rq.assert_object(
            AGENT, "FACT", "ASSERTED", "USER_STATED", [evidence], value, object_id=oid
        )

    items: list[EventInput | OpInput] = [
        event(ROOT, None, "where am I moving?"),
        event(A, ROOT, "I'm moving to Chengdu"),
        event(B, ROOT, "I'm moving to Hangzhou"),
        event(B2, B, "in March"),
        fact(F1, "moving somewhere", ROOT),
        fact(F2, "moving to Chengdu", A),
        fact(F3, "moving to Hangzhou", B),
        fact(F4, "moving to Hangzhou in March", B2),
        rq.supersede(AGENT, F1, F2, "edited on A"),
        rq.supersede(AGENT, F1, F3, "edited on B"),
        rq.penalty(AGENT, F3, "unsure", 0.2, 0.7, "said 'maybe'", evidence_ids=[B2]),
        rq.deprecate(AGENT, F1, "stale", evidence_ids=[B2]),
        rq.reinforce(AGENT, F2, "used", 0.1, 0.85, 0.55, "chat"),
    ]
    out: list[EventInput | OpInput] = []
    for n, item in enumerate(items):
        ts = T0 + 1000 * (n + 1)
        if isinstance(item, OpInput):
            item = dataclasses.replace(item, ts=ts, id=_id(100 + n))
        else:
            item = dataclasses.replace(item, ts=ts)
        out.append(item)
    return out


def _input_json(item: EventInput | OpInput) -> dict[str, Any]:
    d = {
        f.name: getattr(item, f.name)
        for f in dataclasses.fields(item)
        if f.init and getattr(item, f.name) is not None
    }
    d["kind"] = "event" if isinstance(item, EventInput) else "op"
    return d


def build(directory: Path) -> dict[str, Any]:
    """Append the inputs to a new ledger there and return the vectors.

    The ledger's clock is pinned to ``T0`` (the genesis and the append rules' ``ts`` window,
    docs/FORMAT.md §3.1), so the fixed timestamps are accepted and the bytes never change.
    """
    with mock.patch("memroot.ledger._appending.now_us", lambda: T0):
        return _build(directory)


def _build(directory: Path) -> dict[str, Any]:
    ledger = Ledger.init(directory / "gated.ledger", hooks=[ConversationTree(), MemoryHook()])
    try:
        entries = []
        for item in _inputs():
            try:
                seq: int | None = ledger.append(item).seq
            except RefusedError as e:
                seq = None
                refused = str(e).split(":")[0]
            entries.append(
                {"input": _input_json(item), "seq": seq, "refused": None if seq else refused}
            )
        db = ledger.store.db
        anchors = {}
        for name, anchor in (("root", ROOT), ("A", A), ("B", B), ("B2", B2)):
            anchors[name] = [
                {
                    "id": r.object.id,
                    "lifecycle_state": r.object.lifecycle_state,
                    "superseded_by": r.object.superseded_by,
                    "confidence": r.object.confidence,
                    "version": r.object.version,
                }
                for r in sorted(
                    query(db, Query(anchor=anchor, mode=RetrievalMode.AUDIT)),
                    key=lambda r: r.object.id,
                )
            ]
        return {
            "description": "gated invalidation: docs/FORMAT.md section 12",
            "entries": entries,
            "gated_rows": gated_rows(db, "main"),
            "gated_digest": gated_digest(db, "main").hex(),
            "at_anchor": anchors,
        }
    finally:
        ledger.close()


def render() -> str:
    """Return the full text of ``gated-vectors.json``."""
    with tempfile.TemporaryDirectory() as tmp:
        return json.dumps(build(Path(tmp)), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    VECTORS_PATH.write_text(render())
    sys.stdout.write(f"wrote {VECTORS_PATH}\n")
