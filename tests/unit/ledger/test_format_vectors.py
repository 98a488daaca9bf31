"""The FORMAT.md known-answer vectors: regenerated identically, and re-derivable without memroot."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
from pathlib import Path

import blake3
import cbor2

from memroot.ledger import merkle
from memroot.ledger.entries import Entry
from memroot.ledger.note import Verifier, open_checkpoint

VECTORS = Path(__file__).parents[2] / "vectors" / "memroot"


def _load() -> dict:
    return json.loads((VECTORS / "format-vectors.json").read_text())


def test_regenerating_gives_identical_bytes():
    """Running the generator again reproduces format-vectors.json byte for byte."""
    spec = importlib.util.spec_from_file_location("gen", VECTORS / "gen_format_vectors.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.render() == (VECTORS / "format-vectors.json").read_text()


def test_entry_hashes_rederive_with_plain_hashlib():
    """Each entry hash is SHA-256(0x00 || cbor) and each prev is the hash before it."""
    v = _load()
    prev = bytes(32)
    for item in v["entries"]:
        raw = bytes.fromhex(item["cbor"])
        assert hashlib.sha256(b"\x00" + raw).hexdigest() == item["entry_hash"]
        assert raw[:4] == b"\x88\x01\x58\x20"  # array(8), v=1, bstr(32): prev at offset 4
        assert raw[4:36] == prev
        decoded = cbor2.loads(raw)
        assert cbor2.dumps(decoded, canonical=True) == raw
        assert decoded[2] == item["seq"] and decoded[6] == item["type"]
        prev = bytes.fromhex(item["entry_hash"])


def test_entries_decode_strictly():
    """Every vector entry passes memroot's strict entry decoder."""
    for item in _load()["entries"]:
        e = Entry.from_bytes(bytes.fromhex(item["cbor"]))
        assert e.hash.hex() == item["entry_hash"]


def test_content_commitment_rederives_with_blake3():
    """The event's commitment is BLAKE3 keyed by the salt; the digest is plain BLAKE3."""
    v = _load()["event"]
    data = v["content_utf8"].encode()
    salt = bytes.fromhex(v["salt"])
    assert blake3.blake3(data, key=salt).hexdigest() == v["content_commitment_blake3_keyed"]
    assert blake3.blake3(data).hexdigest() == v["content_digest_blake3"]
    event = cbor2.loads(bytes.fromhex(_load()["entries"][1]["cbor"]))
    assert event[7]["content_commitment"].hex() == v["content_commitment_blake3_keyed"]


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 section 2.1.1 MTH, written plainly."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def test_roots_proofs_and_checkpoint():
    """Roots match plain MTH; the proofs verify; the checkpoint opens with the vkey."""
    v = _load()
    leaves = [bytes.fromhex(e["entry_hash"]) for e in v["entries"]]
    for size, root in v["roots"].items():
        assert _mth(leaves[: int(size)]).hex() == root
    assert v["empty_root"] == hashlib.sha256(b"").hexdigest()
    inc = v["inclusion"]
    merkle.verify_inclusion(
        leaves[inc["index"]],
        inc["index"],
        inc["size"],
        [bytes.fromhex(h) for h in inc["proof"]],
        bytes.fromhex(v["roots"][str(inc["size"])]),
    )
    con = v["consistency"]
    merkle.verify_consistency(
        con["size1"],
        con["size2"],
        [bytes.fromhex(h) for h in con["proof"]],
        bytes.fromhex(v["roots"][str(con["size1"])]),
        bytes.fromhex(v["roots"][str(con["size2"])]),
    )
    cp = open_checkpoint(v["checkpoint_note"], [Verifier.from_vkey(v["vkey"])]).checkpoint
    assert cp.size == 4 and base64.b64encode(cp.root).decode() in v["checkpoint_note"]
    assert cp.root.hex() == v["roots"]["4"]
