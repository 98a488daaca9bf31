"""Roots v2 in the writer and the auditor: the map each root commits to, its nodes, forks."""

from __future__ import annotations

from typing import Any

from memroot.ledger.entries import Kind
from memroot.memory_root import root_v2
from memroot.memory_root.replay import RootsReplay
from memroot.memory_root.state_map import EMPTY, map_root
from memroot.projections.registry import default_registry


def test_every_root_has_a_map_and_its_map_is_the_logs(mr_make: Any, mr: Any):
    """Each automatic root commits to the map of the leaves the log gives (from scratch),
    its nodes are stored, and an auditor's replay (collecting its in-memory nodes at every
    snapshot) recomputes every root."""
    ledger, roots = mr_make(every=10)
    ledger.append_batch(mr.mixed(95))
    chain = roots.chain()
    # The writer writes v3 roots (FORMAT §6.16): v2's map, the list by its hash.
    assert len(chain) >= 9 and all(r.v == 3 and r.map_root is not None for r in chain)
    newest = chain[0]
    leaves: dict[str, dict[bytes, bytes]] = {}
    for e in ledger.entries(0, newest.high_water.seq + 1):
        for c in root_v2.leaf_changes(e):
            leaves.setdefault(c.namespace, {})[c.key] = c.value
    assert leaves and newest.map_root == map_root(leaves) != EMPTY
    info = root_v2.root_info(ledger, newest.root)
    assert (info.seq, info.map_root) == (newest.seq, newest.map_root)
    assert info.preimage == newest.preimage().preimage()
    nodes = root_v2.map_nodes(ledger)
    for ns, items in leaves.items():
        from memroot.memory_root import state_map as mm

        proof = mm.prove_namespace(nodes, newest.map_root, ns)
        assert mm.verify_namespace(newest.map_root, proof) == items
    replay = RootsReplay(default_registry())
    replay._gc_at = 0  # collect at every snapshot: the maps must survive it
    got = []
    for e in ledger.entries(0, None):
        r = replay.feed(e)
        if r is not None and e.kind is Kind.OP and e.type == "SNAPSHOT":
            got.append(r.root)  # type: ignore[union-attr]
    assert got == [r.root for r in reversed(chain)]
