"""Generate ``map-vectors.json``: the memory map of docs/FORMAT.md §6.12 on fixed inputs.

Two namespaces (``alice`` with five items, ``bob`` with two), items of two kinds (a memory
object's state and a falsification state), every key, value hash and leaf hash, each item
tree's root and the map root; the inclusion proof of one item (its path in ``alice``'s item
tree, and ``alice``'s path in the namespace tree), the absence proof of an id the map does not
hold, ``bob``'s range proof, and the map root after an update (one item changed, one
removed, one added). Deterministic: running this again must give identical bytes
(``tests/unit/memory_root/test_map_vectors.py`` checks it, and re-derives every value with
nothing but ``hashlib`` and ``cbor2`` from the rules of FORMAT.md).

Usage, from the repository root: ``python tests/vectors/memroot/gen_map_vectors.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from memroot.ledger import encoding
from memroot.memory_root import state_map as mm

VECTORS_PATH = Path(__file__).with_name("map-vectors.json")


def _id(n: int) -> str:
    return f"01900000-0000-7000-8000-{n:012d}"


ITEMS: dict[str, list[tuple[str, str, Any]]] = {
    "alice": [
        ("object", _id(1), {"lifecycle": "ACTIVE", "seq": 3}),
        ("object", _id(2), {"lifecycle": "DEPRECATED", "seq": 9}),
        ("object", _id(3), {"lifecycle": "ACTIVE", "seq": 5}),
        ("state/memory_object", _id(2), {"state": "falsified", "seq": 8}),
        ("state/memory_object", _id(3), {"state": "stale", "seq": 11}),
    ],
    "bob": [
        ("object", _id(21), {"lifecycle": "ACTIVE", "seq": 12}),
        ("state/memory_object", _id(21), {"state": "live", "seq": 14}),
    ],
}


class _Nodes:
    def __init__(self) -> None:
        self.nodes: dict[bytes, mm.Node] = {}

    def node(self, h: bytes) -> mm.Node | None:
        return self.nodes.get(h)


def _proof(p: mm.MapProof) -> dict[str, Any]:
    return {
        "siblings": [s.hex() for s in p.siblings],
        "leaf": None if p.leaf is None else {"key": p.leaf.key.hex(), "value": p.leaf.value.hex()},
    }


def build() -> dict[str, Any]:
    """Return the vectors as a JSON-ready map."""
    store = _Nodes()
    items_out: dict[str, list[dict[str, Any]]] = {}
    leaves: dict[str, dict[bytes, bytes]] = {}
    for ns, items in ITEMS.items():
        items_out[ns] = []
        leaves[ns] = {}
        for kind, item_id, state in items:
            key = mm.item_key(kind, item_id)
            value = mm.value_hash(state)
            leaves[ns][key] = value
            items_out[ns].append(
                {
                    "kind": kind,
                    "id": item_id,
                    "state": state,
                    "state_cbor": encoding.encode(state).hex(),
                    "key": key.hex(),
                    "value": value.hex(),
                    "leaf_hash": mm.leaf_hash(key, value).hex(),
                }
            )
    u = mm.update_map(store, mm.EMPTY, leaves)
    store.nodes.update(u.nodes)
    root = u.root
    alice = mm.lookup(store, root, mm.namespace_key("alice"))
    assert alice is not None
    probe = mm.item_key("object", _id(2))
    absent = mm.item_key("object", _id(99))
    changed = {
        "alice": {
            mm.item_key("object", _id(3)): mm.value_hash({"lifecycle": "ARCHIVED", "seq": 20}),
            mm.item_key("state/memory_object", _id(3)): None,
        },
        "bob": {mm.item_key("object", _id(22)): mm.value_hash({"lifecycle": "ACTIVE", "seq": 21})},
    }
    after = mm.update_map(store, root, changed)
    bob = mm.prove_namespace(store, root, "bob")
    return {
        "tags": {
            "empty": mm.EMPTY_TAG,
            "leaf": mm.LEAF_TAG,
            "node": mm.NODE_TAG,
            "namespace_key": mm.NS_TAG,
            "item_key": mm.ITEM_TAG,
            "value": mm.VALUE_TAG,
        },
        "empty": mm.EMPTY.hex(),
        "namespaces": {
            ns: {
                "key": mm.namespace_key(ns).hex(),
                "item_root": mm.root_of(leaves[ns]).hex(),
                "items": items_out[ns],
            }
            for ns in ITEMS
        },
        "map_root": root.hex(),
        "inclusion": {
            "namespace": "alice",
            "kind": "object",
            "id": _id(2),
            "item_path": _proof(mm.prove(store, alice, probe)),
            "namespace_path": _proof(mm.prove(store, root, mm.namespace_key("alice"))),
        },
        "absence": {
            "namespace": "alice",
            "kind": "object",
            "id": _id(99),
            "key": absent.hex(),
            "item_path": _proof(mm.prove(store, alice, absent)),
        },
        "namespace_range": {
            "namespace": "bob",
            "items": [[k.hex(), v.hex()] for k, v in bob.items],
            "namespace_path": _proof(bob.path),
        },
        "update": {
            "changes": [
                {
                    "namespace": "alice",
                    "kind": "object",
                    "id": _id(3),
                    "state": {"lifecycle": "ARCHIVED", "seq": 20},
                },
                {"namespace": "alice", "kind": "state/memory_object", "id": _id(3), "state": None},
                {
                    "namespace": "bob",
                    "kind": "object",
                    "id": _id(22),
                    "state": {"lifecycle": "ACTIVE", "seq": 21},
                },
            ],
            "map_root": after.root.hex(),
            "nodes_written": len(after.nodes),
        },
    }


def render() -> str:
    """Return the full text of ``map-vectors.json``."""
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    VECTORS_PATH.write_text(render())
    sys.stdout.write(f"wrote {VECTORS_PATH}\n")
