"""Generate roots-kat.json: known-answer vectors for rule, summary, memory and SelfModel roots.

The example is fixed (no clock, no randomness): six ledger entries with fixed ids and
timestamps, folded by the five built-in projections at their default parameters, give two
snapshots (high-water at entries 3 and 5, the second the child of the first) and a SelfModel
citing the second. Everything an outside auditor needs is in the file: the entry bytes (to
hash and fold), each rule's CBOR, each summary's bytes, each root's preimage. Regenerating must
give byte-identical output (tests/unit/memory_root/test_roots_kat.py checks it).

    cd tests/unit/memory_root/vectors && python gen_roots_kat.py > roots-kat.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from memroot.ledger import encoding
from memroot.ledger.entries import ZERO_HASH, Entry, Kind, OpInput, build_entry
from memroot.ledger.hashing import EntryHash, TreeRoot
from memroot.ledger.merkle import CompactRange
from memroot.memory_root.root import HighWater, MemoryRoot, RootPreimage, compute_root
from memroot.memory_root.selfmodel import Capability, SelfModel, selfmodel_payload
from memroot.projections.builtins import (
    Corrections,
    EpistemicDistribution,
    FailureMotifs,
    FalsificationState,
    LifecycleCounts,
)
from memroot.projections.projection import rule_digest, rule_preimage

TS = 1_780_000_000_000_000  # fixed microseconds


def _v1_builtins() -> list[Any]:
    """The built-ins at version 1, as v1 roots listed them (every one at version 1)."""
    return [
        FailureMotifs(),
        Corrections(),
        EpistemicDistribution(),
        LifecycleCounts(),
        FalsificationState(),
    ]


def _op(
    op_type: str,
    payload: dict[str, Any],
    n: int,
    target_id: str | None = None,
    target_type: str | None = None,
) -> OpInput:
    return OpInput(
        op_type=op_type,
        actor_id="verifier-1",
        actor_type="SYSTEM_PROCESS",
        namespace_id="agent-7",
        payload=payload,
        policy_version="policy/1",
        target_id=target_id,
        target_type=target_type,
        id=f"00000000-0000-7000-8000-{n:012d}",
    )


def entries() -> list[Entry]:
    """The six fixed entries (a stand-in genesis, then five operations), chained."""
    genesis = build_entry(
        ZERO_HASH,
        0,
        "main",
        TS,
        Kind.GENESIS,
        "GENESIS",
        {"format": 1, "origin": "example.org/kat", "snapshot_every": 1000},
    )
    obj = "00000000-0000-7000-8000-0000000000aa"
    ops = [
        _op(
            "VIOLATION_RECORDED",
            {
                "motif": "TITLE_MISMATCH",
                "source": "Quantum chromodynamics",
                "detail": "spin glass cited from the QCD article",
            },
            1,
        ),
        _op(
            "ASSERT",
            {
                "object_type": "FACT",
                "epistemic_type": "HYPOTHETICAL",
                "source_type": "SYSTEM_INFERRED",
                "value": "spin glasses are frustrated",
                "confidence": 0.25,
                "salience": 0.5,
                "evidence_ids": ["00000000-0000-7000-8000-0000000000ee"],
            },
            2,
            target_id=obj,
        ),
        _op(
            "CORRECTION_APPLIED",
            {
                "correction": "cite the spin-glass article",
                "accepted_by": "verifier-2",
                "motif": "TITLE_MISMATCH",
                "benchmark": "bench/titles-v3",
            },
            3,
        ),
        _op(
            "EPISTEMIC_TRANSITION",
            {
                "from_type": "HYPOTHETICAL",
                "to_type": "ASSERTED",
                "reason": "confirmed",
                "evidence_ids": [],
            },
            4,
            target_id=obj,
        ),
        _op("FALSIFY", {"reason": "wrong source"}, 5, target_id=obj, target_type="memory_object"),
    ]
    out = [genesis]
    for i, item in enumerate(ops, start=1):
        out.append(
            build_entry(
                out[-1].hash, i, "main", TS + i, Kind.OP, item.op_type, item.body(item.id or "")
            )
        )
    return out


def snapshot(es: list[Entry], hw_seq: int, parent: MemoryRoot | None) -> tuple[RootPreimage, Any]:
    """The root of the built-ins over es[0..hw_seq], with the per-projection details."""
    projections = _v1_builtins()
    details = []
    pairs = []
    for p in projections:
        state = p.initial()
        for e in es[: hw_seq + 1]:
            if p.types is None or e.type in p.types:
                state = p.fold(state, e)
        s = p.summarize(state)
        pairs.append((p, s))
        details.append(
            {
                "id": p.id,
                "rule_cbor": rule_preimage(p).hex(),
                "rule_digest": rule_digest(p).hex(),
                "summary": s.data.hex(),
                "count": s.count,
                "summary_digest": s.digest.hex(),
            }
        )
    tree = CompactRange()
    for e in es[: hw_seq + 1]:
        tree.append(e.hash)
    hw = HighWater(hw_seq, EntryHash(es[hw_seq].hash), hw_seq + 1, TreeRoot(tree.root()))
    pre = compute_root("main", parent, hw, pairs)
    return pre, sorted(details, key=lambda d: d["id"])


def main() -> None:
    """Print the vectors as JSON."""
    es = entries()
    first, d1 = snapshot(es, 3, None)
    second, d2 = snapshot(es, 5, first.root())
    model = SelfModel(
        "agent-7",
        {"name": "Arborist research agent", "model": "m-2026-05"},
        (Capability("cite-sources", "cites the article a claim comes from", ("bench/titles-v3",)),),
    )
    sm = selfmodel_payload(model, second.root(), "main")
    doc = {
        "about": "memroot memory_root known-answer vectors (docs/FORMAT.md §6); "
        "generated by gen_roots_kat.py",
        "tags": {
            "rule": "memroot/rule/v1",
            "summary": "memroot/summary/v1",
            "root": "memroot/root/v1",
            "selfmodel": "memroot/selfmodel/v1",
        },
        "entries": [
            {"seq": e.seq, "type": e.type, "entry_cbor": e.raw.hex(), "entry_hash": e.hash.hex()}
            for e in es
        ],
        "roots": [
            {
                "high_water_seq": 3,
                "projections": d1,
                "preimage": first.preimage().hex(),
                "memory_root": first.root().hex(),
            },
            {
                "high_water_seq": 5,
                "projections": d2,
                "preimage": second.preimage().hex(),
                "memory_root": second.root().hex(),
            },
        ],
        "selfmodel": {
            "body_cbor": encoding.encode(sm["body"]).hex(),
            "selfmodel_root": sm["selfmodel_root"].hex(),
        },
    }
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
