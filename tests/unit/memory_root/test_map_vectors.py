"""The memory-map vectors of docs/FORMAT.md §6.12 regenerate identically and re-derive.

The second half is an outside auditor's check, written from FORMAT.md alone with hashlib and
cbor2 (no memroot import): keys, value hashes, leaves, roots, and every proof in the file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cbor2
import pytest

from tests.vectors.generators import generator

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "memroot"
V = json.loads((VECTORS / "map-vectors.json").read_text())


def test_regenerating_gives_identical_bytes():
    """Running the generator again reproduces map-vectors.json byte for byte."""
    assert (
        generator(VECTORS / "gen_map_vectors.py").render()
        == (VECTORS / "map-vectors.json").read_text()
    )


# -- an outside auditor's implementation, from FORMAT.md §6.12 -------------------------------


def _h(tag: str, data: bytes) -> bytes:
    return hashlib.sha256(tag.encode() + b"\x00" + data).digest()


EMPTY = _h("memroot/map/empty/v1", b"")


def _leaf(key: bytes, value: bytes) -> bytes:
    return _h("memroot/map/leaf/v1", key + value)


def _node(left: bytes, right: bytes) -> bytes:
    return _h("memroot/map/node/v1", left + right)


def _bit(key: bytes, i: int) -> int:
    return (int.from_bytes(key, "big") >> (255 - i)) & 1


def _root(leaves: dict[bytes, bytes], depth: int = 0) -> bytes:
    if not leaves:
        return EMPTY
    if len(leaves) == 1:
        ((k, v),) = leaves.items()
        return _leaf(k, v)
    zero = {k: v for k, v in leaves.items() if not _bit(k, depth)}
    one = {k: v for k, v in leaves.items() if _bit(k, depth)}
    return _node(_root(zero, depth + 1), _root(one, depth + 1))


def _walk(key: bytes, proof: dict[str, Any]) -> tuple[bytes, bytes | None]:
    """Return (root, the key of the leaf the path ends at, None for an empty end)."""
    sib = [bytes.fromhex(s) for s in proof["siblings"]]
    end = proof["leaf"]
    if end is None:
        h, other = EMPTY, None
    else:
        other, value = bytes.fromhex(end["key"]), bytes.fromhex(end["value"])
        assert all(_bit(other, i) == _bit(key, i) for i in range(len(sib)))
        h = _leaf(other, value)
    for i in reversed(range(len(sib))):
        h = _node(sib[i], h) if _bit(key, i) else _node(h, sib[i])
    return h, other


def _ns_key(ns: str) -> bytes:
    return _h("memroot/map/ns/v1", ns.encode())


def _item_key(kind: str, item_id: str) -> bytes:
    return _h("memroot/map/item/v1", cbor2.dumps([kind, item_id], canonical=True))


def _value(state: Any) -> bytes:
    return _h("memroot/map/value/v1", cbor2.dumps(state, canonical=True))


def _leaves(ns: str) -> dict[bytes, bytes]:
    return {_item_key(i["kind"], i["id"]): _value(i["state"]) for i in V["namespaces"][ns]["items"]}


def test_keys_values_and_roots_rederive():
    """Every key, value hash, leaf, item root and the map root follow from the rules."""
    assert EMPTY.hex() == V["empty"]
    top = {}
    for ns, n in V["namespaces"].items():
        assert _ns_key(ns).hex() == n["key"]
        for i in n["items"]:
            key, value = _item_key(i["kind"], i["id"]), _value(i["state"])
            assert cbor2.dumps(i["state"], canonical=True).hex() == i["state_cbor"]
            assert (key.hex(), value.hex()) == (i["key"], i["value"])
            assert _leaf(key, value).hex() == i["leaf_hash"]
        assert _root(_leaves(ns)).hex() == n["item_root"]
        top[_ns_key(ns)] = _root(_leaves(ns))
    assert _root(top).hex() == V["map_root"]


def test_inclusion_proof_checks_from_the_document():
    """The item's path gives alice's item root, whose leaf's path gives the map root."""
    inc = V["inclusion"]
    key = _item_key(inc["kind"], inc["id"])
    item_root, other = _walk(key, inc["item_path"])
    assert other == key
    want = next(i for i in V["namespaces"]["alice"]["items"] if i["key"] == key.hex())
    assert inc["item_path"]["leaf"]["value"] == want["value"]
    root, ns_other = _walk(_ns_key("alice"), inc["namespace_path"])
    assert ns_other == _ns_key("alice")
    assert bytes.fromhex(inc["namespace_path"]["leaf"]["value"]) == item_root
    assert root.hex() == V["map_root"]


def test_absence_proof_checks_from_the_document():
    """The missing id's path ends at an empty subtree (or another key) under alice's root."""
    ab = V["absence"]
    key = _item_key(ab["kind"], ab["id"])
    got, other = _walk(key, ab["item_path"])
    assert other != key
    assert got.hex() == V["namespaces"]["alice"]["item_root"]


def test_namespace_range_rebuilds_the_namespace_leaf():
    """bob's listed items rebuild the value of bob's leaf on a path to the map root."""
    rng = V["namespace_range"]
    items = {bytes.fromhex(k): bytes.fromhex(v) for k, v in rng["items"]}
    assert items == _leaves("bob")
    root, other = _walk(_ns_key("bob"), rng["namespace_path"])
    assert other == _ns_key("bob")
    assert bytes.fromhex(rng["namespace_path"]["leaf"]["value"]) == _root(items)
    assert root.hex() == V["map_root"]


def test_update_root_is_the_root_of_the_changed_set():
    """The map root after the listed changes is the root of the changed sets, from scratch."""
    sets = {ns: _leaves(ns) for ns in V["namespaces"]}
    for c in V["update"]["changes"]:
        key = _item_key(c["kind"], c["id"])
        if c["state"] is None:
            sets[c["namespace"]].pop(key)
        else:
            sets[c["namespace"]][key] = _value(c["state"])
    top = {_ns_key(ns): _root(s) for ns, s in sets.items() if s}
    assert _root(top).hex() == V["update"]["map_root"]


@pytest.mark.parametrize("where", ["item_path", "namespace_path"])
def test_bit_flip_in_a_vector_proof_is_refused_by_the_auditor(where):
    """Flipping one bit of any sibling of the inclusion proof no longer gives the roots."""
    inc = V["inclusion"]
    key = _item_key(inc["kind"], inc["id"]) if where == "item_path" else _ns_key("alice")
    want = V["namespaces"]["alice"]["item_root"] if where == "item_path" else V["map_root"]
    for i, s in enumerate(inc[where]["siblings"]):
        raw = bytearray.fromhex(s)
        raw[31] ^= 1
        bad = dict(inc[where], siblings=[*inc[where]["siblings"][:i], raw.hex(),
                                         *inc[where]["siblings"][i + 1 :]])  # fmt: skip
        assert _walk(key, bad)[0].hex() != want


def test_format_md_shows_the_vectors_constants():
    """docs/FORMAT.md §6.12 quotes EMPTY and the map root exactly as the vectors give them."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "FORMAT.md").read_text("utf-8")
    section = doc[doc.index("### 6.12 The memory map") : doc.index("### 6.13")]
    assert f"`{V['empty']}`" in section
    assert f"`{V['map_root']}`" in section
