"""Known-answer vectors for memory roots, re-derived with nothing but hashlib and cbor2."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cbor2

from tests.vectors.generators import printed

HERE = Path(__file__).parent / "vectors"
KAT = json.loads((HERE / "roots-kat.json").read_text())


def _tagged(tag: str, data: bytes) -> str:
    return hashlib.sha256(tag.encode() + b"\x00" + data).hexdigest()


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 section 2.1.1 Merkle tree hash, written out independently."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << (len(leaves) - 1).bit_length() - 1
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def test_regenerating_the_vectors_gives_identical_bytes():
    """gen_roots_kat.py reproduces roots-kat.json byte for byte."""
    assert printed(HERE / "gen_roots_kat.py") == (HERE / "roots-kat.json").read_text()


def test_every_digest_re_derives_from_the_published_bytes():
    """Entry hashes, tree roots, rule, summary, memory and SelfModel roots all re-derive."""
    leaves = []
    for e in KAT["entries"]:
        h = hashlib.sha256(b"\x00" + bytes.fromhex(e["entry_cbor"])).digest()
        assert h.hex() == e["entry_hash"]
        leaves.append(h)
    parent = None
    for root in KAT["roots"]:
        pre = bytes.fromhex(root["preimage"])
        decoded: dict[str, Any] = cbor2.loads(pre)
        assert cbor2.dumps(decoded, canonical=True) == pre
        hw = root["high_water_seq"]
        assert decoded["v"] == 1 and decoded["branch"] == "main" and decoded["parent"] == parent
        assert decoded["high_water"] == {
            "seq": hw,
            "entry_hash": leaves[hw],
            "tree_size": hw + 1,
            "tree_root": _mth(leaves[: hw + 1]),
        }
        items = []
        for p in root["projections"]:
            assert _tagged("memroot/rule/v1", bytes.fromhex(p["rule_cbor"])) == p["rule_digest"]
            rule = cbor2.loads(bytes.fromhex(p["rule_cbor"]))
            assert rule["id"] == p["id"] and rule["version"] == 1
            assert _tagged("memroot/summary/v1", bytes.fromhex(p["summary"])) == p["summary_digest"]
            items.append(
                {
                    "id": p["id"],
                    "rule": bytes.fromhex(p["rule_digest"]),
                    "digest": bytes.fromhex(p["summary_digest"]),
                    "count": p["count"],
                }
            )
        assert decoded["projections"] == sorted(items, key=lambda x: x["id"])
        assert _tagged("memroot/root/v1", pre) == root["memory_root"]
        parent = bytes.fromhex(root["memory_root"])
    body = bytes.fromhex(KAT["selfmodel"]["body_cbor"])
    assert cbor2.loads(body)["memory_root"] == parent
    assert _tagged("memroot/selfmodel/v1", body) == KAT["selfmodel"]["selfmodel_root"]
