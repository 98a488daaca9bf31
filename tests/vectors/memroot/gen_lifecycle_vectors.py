"""Generate lifecycle-vectors.json: ``lifecycle-counts`` versions 1 and 2 (docs/FORMAT.md §6.13).

Ten fixed entries (a stand-in genesis, then nine operations, in namespace ``agent-7`` unless
said):
three ``ASSERT`` (objects a, b, c), a ``DEPRECATE`` of a, an ``ARCHIVE`` of a (deprecated),
a ``SUPERSEDE`` of b by c, an ``ARCHIVE`` of c (active), an ``ASSERT`` in namespace ``other``
and a ``RELATE`` (no lifecycle operation). For each version, at default params and with
``namespaces = ["agent-7"]``: the rule's bytes and digest, the summary's bytes, digest and
count, and the encoded fold state after entry 4 and after the last (version 1's names the
deprecated ids it still remembers, a after entry 4; version 2's is its counts: not normative,
shown because it is what each snapshot stores again). Then the v2 root at high-water 9 with
the built-ins of then (``builtins_then``): the map root, the preimage and the root.
Run: ``python tests/vectors/memroot/gen_lifecycle_vectors.py > lifecycle-vectors.json``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from memroot.ledger.entries import ZERO_HASH, Entry, Kind, OpInput, build_entry
from memroot.ledger.hashing import EntryHash, TreeRoot
from memroot.ledger.merkle import CompactRange
from memroot.memory_root.root import HighWater, compute_root
from memroot.memory_root.root_v2 import MapAt, leaf_changes
from memroot.memory_root.state_map import EMPTY
from memroot.projections.builtins import (
    Corrections,
    EpistemicDistribution,
    FailureMotifs,
    FalsificationCounts,
    LifecycleCounts,
    LifecycleTransitions,
)
from memroot.projections.projection import Projection, encode_state, rule_digest, rule_preimage

TS = 1_780_000_000_000_000  # fixed microseconds
A, B, C, D = (f"00000000-0000-7000-8000-0000000000{x}" for x in ("a1", "b1", "c1", "d1"))


class _NoNodes:
    def node(self, h: bytes) -> None:
        del h


def _op(
    op_type: str, payload: dict[str, Any], n: int, target: str | None, ns: str = "agent-7"
) -> OpInput:
    return OpInput(
        op_type=op_type,
        actor_id="agent-7",
        actor_type="AI_AGENT",
        namespace_id=ns,
        payload=payload,
        policy_version="policy/1",
        target_id=target,
        target_type="memory_object",
        id=f"00000000-0000-7000-8000-{n:012d}",
    )


def _fact(value: str) -> dict[str, Any]:
    return {
        "object_type": "FACT",
        "epistemic_type": "OBSERVED",
        "source_type": "USER_STATED",
        "evidence_ids": [],
        "value": value,
    }


def chain(origin: str, ops: list[OpInput]) -> list[Entry]:
    """A stand-in genesis naming ``origin``, then ``ops`` at seqs 1, 2, ..., chained."""
    genesis = build_entry(
        ZERO_HASH,
        0,
        "main",
        TS,
        Kind.GENESIS,
        "GENESIS",
        {"format": 1, "origin": origin, "snapshot_every": 1000},
    )
    out = [genesis]
    for i, item in enumerate(ops, start=1):
        out.append(
            build_entry(
                out[-1].hash, i, "main", TS + i, Kind.OP, item.op_type, item.body(item.id or "")
            )
        )
    return out


def entries() -> list[Entry]:
    """The ten fixed entries, chained."""
    return chain(
        "example.org/lifecycle",
        [
            _op("ASSERT", _fact("a"), 1, A),
            _op("ASSERT", _fact("b"), 2, B),
            _op("ASSERT", _fact("c"), 3, C),
            _op("DEPRECATE", {"reason": "old", "deprecated_by": "agent-7"}, 4, A),
            _op("ARCHIVE", {"reason": "retention", "policy_ref": "policy/1"}, 5, A),
            _op("SUPERSEDE", {"new_object_id": C, "reason": "newer"}, 6, B),
            _op("ARCHIVE", {"reason": "retention", "policy_ref": "policy/1"}, 7, C),
            _op("ASSERT", _fact("d"), 8, D, ns="other"),
            _op("RELATE", {"edge_type": "SUPPORTS", "to_id": A}, 9, D),
        ],
    )


def builtins_then() -> list[Projection]:
    """The built-ins when these vectors were published (lifecycle-counts v2, failure-motifs v1).

    ``failure-motifs`` went to version 2 later (``gen_motifs_vectors.py``); these vectors
    keep the rules they were published with.
    """
    return [
        FailureMotifs(),
        Corrections(),
        EpistemicDistribution(),
        LifecycleTransitions(),
        FalsificationCounts(),
    ]


def root_v2(es: list[Entry], projections: list[Projection], v: int = 2) -> dict[str, Any]:
    """The v2 root of ``es`` (high-water: the last) listing ``projections``, as vector fields.

    With ``v`` 3 the v3 root (FORMAT §6.16) of the same list.
    """
    changes = [c for e in es for c in leaf_changes(e)]
    map_root = MapAt(EMPTY, None, changes).apply(_NoNodes())[0]
    hw_seq = len(es) - 1
    tree = CompactRange()
    for e in es:
        tree.append(e.hash)
    hw = HighWater(hw_seq, EntryHash(es[hw_seq].hash), hw_seq + 1, TreeRoot(tree.root()))
    pairs = [(p, p.summarize(fold(p, es))) for p in projections]
    pre = compute_root("main", None, hw, pairs, map_root, v=v)
    return {
        "map_root": map_root.hex(),
        "projections": [
            {"id": p.id, "rule": rule_digest(p).hex(), "summary": s.data.hex(), "count": s.count}
            for p, s in sorted(pairs, key=lambda x: x[0].id)
        ],
        "preimage": pre.preimage().hex(),
        "memory_root": pre.root().hex(),
    }


def fold(p: Projection, es: list[Entry]) -> Any:
    """Fold ``es`` with ``p`` from its initial state."""
    state = p.initial()
    for e in es:
        if p.types is None or e.type in p.types:
            state = p.fold(state, e)
    return state


def rule_vector(p: Projection, es: list[Entry], at: int, params: dict[str, Any]) -> dict[str, Any]:
    """One rule's vector fields: its version, ``params`` as given, rule bytes and digest, the
    summary's bytes, digest and count over ``es``, and the fold state at the end and after
    entry ``at`` (``fold_state_at_<at>``)."""
    state = fold(p, es)
    s = p.summarize(state)
    return {
        "version": p.version,
        **params,
        "rule_cbor": rule_preimage(p).hex(),
        "rule": rule_digest(p).hex(),
        "summary": s.data.hex(),
        "summary_digest": s.digest.hex(),
        "count": s.count,
        "fold_state": encode_state(p, state).hex(),
        f"fold_state_at_{at}": encode_state(p, fold(p, es[: at + 1])).hex(),
    }


def main() -> None:
    """Print the vectors as JSON."""
    es = entries()
    rules = []
    for p in (
        LifecycleCounts(),
        LifecycleCounts(namespaces=("agent-7",)),
        LifecycleTransitions(),
        LifecycleTransitions(namespaces=("agent-7",)),
    ):
        rules.append(rule_vector(p, es, 4, {"namespaces": list(p.namespaces)}))
    doc = {
        "about": "memroot lifecycle-counts vectors, versions 1 (retired) and 2 (docs/FORMAT.md "
        "§6.13); generated by gen_lifecycle_vectors.py",
        "entries": [
            {"seq": e.seq, "type": e.type, "entry_cbor": e.raw.hex(), "entry_hash": e.hash.hex()}
            for e in es
        ],
        "lifecycle_counts": rules,
        **root_v2(es, builtins_then()),
    }
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
