"""Memory roots v2 vectors (docs/FORMAT.md §6.13), re-derived with nothing but hashlib and cbor2.

Written from the document, as an outside auditor would: decode each entry, apply the leaf
table of §6.13, hash keys and values as §6.12 says, build the map, and hash the v2 preimage.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cbor2
import pytest

from tests.vectors.generators import printed

HERE = Path(__file__).parents[2] / "vectors" / "memroot"
VEC = json.loads((HERE / "rootsv2-vectors.json").read_text())
STATES = {"FALSIFY": "falsified", "MARK_STALE": "stale", "RESTORE": "live"}


def _h(tag: str, data: bytes) -> bytes:
    return hashlib.sha256(tag.encode() + b"\x00" + data).digest()


def _c(x: Any) -> bytes:
    return cbor2.dumps(x, canonical=True)


EMPTY = _h("memroot/map/empty/v1", b"")


def _bit(key: bytes, i: int) -> int:
    return (int.from_bytes(key, "big") >> (255 - i)) & 1


def _root(leaves: dict[bytes, bytes], depth: int = 0) -> bytes:
    if not leaves:
        return EMPTY
    if len(leaves) == 1:
        ((k, v),) = leaves.items()
        return _h("memroot/map/leaf/v1", k + v)
    zero = {k: v for k, v in leaves.items() if not _bit(k, depth)}
    one = {k: v for k, v in leaves.items() if _bit(k, depth)}
    return _h("memroot/map/node/v1", _root(zero, depth + 1) + _root(one, depth + 1))


def _mth(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << (len(leaves) - 1).bit_length() - 1
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def _leaves_of(entry: list[Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """§6.13's leaf table, from the decoded entry [v, prev, seq, branch, ts, kind, type, body]."""
    _, _, seq, branch, _, kind, op, body = entry
    if kind != "op":
        return []
    ns = body["namespace_id"]
    if op == "ASSERT":
        return [(ns, "object", body.get("target_id") or body["id"], {"branch": branch, "seq": seq})]
    if op in STATES:
        t = body["target_type"]
        return [(ns, "state/" + t, body["target_id"], {"state": STATES[op], "seq": seq})]
    if op == "CASCADE":
        return [
            (ns, "state/" + x["type"], x["id"], {"state": "stale", "seq": seq})
            for x in body["payload"]["touched"]
        ]
    return []


def test_regenerating_gives_identical_bytes() -> None:
    """gen_rootsv2_vectors.py reproduces rootsv2-vectors.json byte for byte."""
    assert printed(HERE / "gen_rootsv2_vectors.py") == (HERE / "rootsv2-vectors.json").read_text()


def test_leaves_map_and_root_rederive_from_the_entries() -> None:
    """Leaves from the entries, the map of §6.12, the v2 preimage and its root."""
    hashes, leaves = [], []
    for e in VEC["entries"]:
        raw = bytes.fromhex(e["entry_cbor"])
        hashes.append(hashlib.sha256(b"\x00" + raw).digest())
        assert hashes[-1].hex() == e["entry_hash"]
        leaves += _leaves_of(cbor2.loads(raw))
    assert [(x["namespace"], x["kind"], x["id"], x["state"]) for x in VEC["leaves"]] == leaves
    by_ns: dict[str, dict[bytes, bytes]] = {}
    for (ns, kind, item, state), published in zip(leaves, VEC["leaves"], strict=True):
        key = _h("memroot/map/item/v1", _c([kind, item]))
        value = _h("memroot/map/value/v1", _c(state))
        assert (key.hex(), value.hex()) == (published["key"], published["value"])
        by_ns.setdefault(ns, {})[key] = value
    map_root = _root({_h("memroot/map/ns/v1", ns.encode()): _root(i) for ns, i in by_ns.items()})
    assert map_root.hex() == VEC["map_root"]
    pre = bytes.fromhex(VEC["preimage"])
    decoded = cbor2.loads(pre)
    assert _c(decoded) == pre
    hw = len(hashes) - 1
    assert decoded == {
        "v": 2,
        "branch": "main",
        "parent": None,
        "map": map_root,
        "high_water": {
            "seq": hw,
            "entry_hash": hashes[hw],
            "tree_size": hw + 1,
            "tree_root": _mth(hashes),
        },
        "projections": [
            {
                "id": p["id"],
                "rule": bytes.fromhex(p["rule"]),
                "digest": _h("memroot/summary/v1", bytes.fromhex(p["summary"])),
                "count": p["count"],
            }
            for p in VEC["projections"]
        ],
    }
    assert _h("memroot/root/v2", pre).hex() == VEC["memory_root"]
    fs = next(p for p in VEC["projections"] if p["id"] == "falsification-state")
    assert cbor2.loads(bytes.fromhex(fs["summary"])) == {
        "memory_object": {"falsified": 1, "stale": 1}
    }


@pytest.mark.parametrize("field", ["map_root", "memory_root"])
def test_a_bit_flip_is_refused(field: str) -> None:
    """The auditor's recomputation disagrees with a vector whose root has one bit flipped."""
    flipped = bytearray(bytes.fromhex(VEC[field]))
    flipped[0] ^= 1
    pre = bytes.fromhex(VEC["preimage"])
    got = _h("memroot/root/v2", pre) if field == "memory_root" else cbor2.loads(pre)["map"]
    assert got != bytes(flipped)
