"""Generate cascade-kat.json: vectors for re-snapshots, their chain and ``restore --cascade``.

docs/FORMAT.md §6.4 (a CASCADE or a RESTORE with a cascade part relinks the branch's next
SNAPSHOT), §8.2 (the RESTORE ``cascade`` part) and §8.5 (a falsified root is passed over:
its child re-snapshots over its parent). Fixed entries (no clock, no randomness), all
operations:

    0 genesis   1 VIOLATION_RECORDED   2 SNAPSHOT r1   3 VIOLATION_RECORDED   4 SNAPSHOT r2
    5 FALSIFY r1                       6 CASCADE from r1: r2 stale, re-snapshot r2x of r2
                                          over r1's parent (null)

then two continuations of that prefix:

- ``relinked``:  7 VIOLATION_RECORDED, 8 SNAPSHOT r3 whose parent is r2x (not the stale r2);
- ``restored``:  7 RESTORE r1 with a cascade part (r2 live again, r2x withdrawn),
  8 VIOLATION_RECORDED, 9 SNAPSHOT r3 whose parent is r2 again.

Regenerating must give byte-identical output (tests/unit/memory_root/test_cascade_kat.py).

    cd tests/unit/memory_root/vectors && python gen_cascade_kat.py > cascade-kat.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from memroot.ledger import encoding
from memroot.ledger.entries import ZERO_HASH, Entry, Kind, OpInput, build_entry
from memroot.ledger.hashing import EntryHash, TreeRoot, domain_hash
from memroot.ledger.merkle import CompactRange
from memroot.memory_root.root import HighWater, MemoryRoot, RootPreimage, compute_root
from memroot.projections.builtins import (
    Corrections,
    EpistemicDistribution,
    FailureMotifs,
    FalsificationState,
    LifecycleCounts,
)

TS = 1_780_000_000_000_000
KINDS = ["memory_object", "memory_root", "selfmodel", "summary_item"]


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
    actor: str = "verifier-1",
) -> OpInput:
    return OpInput(
        op_type=op_type,
        actor_id=actor,
        actor_type="SYSTEM_PROCESS",
        namespace_id="system" if target_type else "agent-7",
        payload=payload,
        policy_version="memroot-falsify/1" if target_type else "policy/1",
        target_id=target_id,
        target_type=target_type,
        id=f"00000000-0000-7000-8000-{n:012d}",
    )


def _violation(n: int) -> OpInput:
    return _op("VIOLATION_RECORDED", {"motif": "TITLE_MISMATCH", "source": f"article {n}"}, n)


def _add(es: list[Entry], item: OpInput) -> Entry:
    seq = len(es)
    e = build_entry(
        es[-1].hash, seq, "main", TS + seq, Kind.OP, item.op_type, item.body(item.id or "")
    )
    es.append(e)
    return e


def _root(es: list[Entry], hw_seq: int, parent: MemoryRoot | None) -> RootPreimage:
    pairs = []
    for p in _v1_builtins():
        state = p.initial()
        for e in es[: hw_seq + 1]:
            if p.types is None or e.type in p.types:
                state = p.fold(state, e)
        pairs.append((p, p.summarize(state)))
    tree = CompactRange()
    for e in es[: hw_seq + 1]:
        tree.append(e.hash)
    hw = HighWater(hw_seq, EntryHash(es[hw_seq].hash), hw_seq + 1, TreeRoot(tree.root()))
    return compute_root("main", parent, hw, pairs)


def _snapshot(es: list[Entry], n: int, parent: MemoryRoot | None) -> RootPreimage:
    pre = _root(es, len(es) - 1, parent)
    snap = OpInput(
        op_type="SNAPSHOT",
        actor_id="memroot",
        actor_type="SYSTEM_PROCESS",
        namespace_id="system",
        payload=pre.payload(),
        policy_version="memroot/1",
        id=f"00000000-0000-7000-8000-{n:012d}",
    )
    _add(es, snap)
    return pre


def prefix() -> tuple[list[Entry], RootPreimage, RootPreimage, RootPreimage]:
    """Entries 0-6 and the roots r1, r2 and the re-snapshot r2x."""
    genesis = build_entry(
        ZERO_HASH,
        0,
        "main",
        TS,
        Kind.GENESIS,
        "GENESIS",
        {"format": 1, "origin": "example.org/cascade-kat", "snapshot_every": 1000},
    )
    es = [genesis]
    _add(es, _violation(1))
    r1 = _snapshot(es, 2, None)
    _add(es, _violation(3))
    r2 = _snapshot(es, 4, r1.root())
    r1x, r2x_parent = r1.root().hex(), r1.parent  # r1 is falsified: r2 re-links over it
    _add(es, _op("FALSIFY", {"reason": "bad snapshot"}, 5, r1x, "memory_root"))
    r2x = RootPreimage(r2.branch, r2x_parent, r2.high_water, r2.projections, r2.v)
    beyond: list[Any] = []
    cascade = {
        "max_depth": 3,
        "max_items": 1000,
        "kinds": KINDS,
        "touched": [{"type": "memory_root", "id": r2.root().hex(), "depth": 1}],
        "beyond": {
            "count": 0,
            "digest": domain_hash("memroot/cascade-beyond/v1", encoding.encode(beyond)).hex(),
            "items": [],
        },
        "resnapshots": [
            {"replaces": r2.root().hex(), "memory_root": r2x.root().hex(), "parent": None}
        ],
    }
    _add(es, _op("CASCADE", cascade, 6, r1x, "memory_root"))
    return es, r1, r2, r2x


def main() -> None:
    """Print the vectors as JSON."""
    es, r1, r2, r2x = prefix()
    relinked = list(es)
    _add(relinked, _violation(7))
    r3 = _snapshot(relinked, 8, r2x.root())
    restored = list(es)
    part = {
        "max_depth": 1,
        "restored": [{"type": "memory_root", "id": r2.root().hex(), "depth": 1}],
        "beyond": {"count": 0, "items": []},
        "withdrawn": [{"memory_root": r2x.root().hex(), "replaces": r2.root().hex()}],
    }
    restore = _op(
        "RESTORE", {"reason": "fine after all", "cascade": part}, 7, r1.root().hex(), "memory_root"
    )
    _add(restored, restore)
    _add(restored, _violation(8))
    r3b = _snapshot(restored, 9, r2.root())

    def rows(entries: list[Entry], start: int) -> list[dict[str, Any]]:
        return [
            {"seq": e.seq, "type": e.type, "entry_cbor": e.raw.hex(), "entry_hash": e.hash.hex()}
            for e in entries[start:]
        ]

    doc = {
        "about": "memroot re-snapshot chain and RESTORE cascade vectors (docs/FORMAT.md §6.4, "
        "§8.2, §8.5); generated by gen_cascade_kat.py",
        "prefix": rows(es, 0),
        "roots": {
            "r1": r1.root().hex(),
            "r2": r2.root().hex(),
            "r2x": r2x.root().hex(),
            "r2x_preimage": r2x.preimage().hex(),
        },
        "relinked": {"entries": rows(relinked, len(es)), "r3": r3.root().hex()},
        "restored": {
            "entries": rows(restored, len(es)),
            "cascade_part_cbor": encoding.encode(part).hex(),
            "r3": r3b.root().hex(),
        },
    }
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
