"""The writer-key vectors (``tests/vectors/memroot/key-vectors.json``, docs/FORMAT.md 7.5).

Regenerating them gives identical bytes, and every value is re-derived here with plain
``hashlib``, ``cryptography`` and ``cbor2`` (an outside auditor's tools), then checked by
memroot's own key-set fold and step 6 rule.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import cbor2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from memroot.ledger.entries import Entry
from memroot.ledger.keyset import KeySet
from memroot.ledger.note import Verifier, open_checkpoint

VECTORS = Path(__file__).parents[2] / "vectors" / "memroot"
V: dict[str, Any] = json.loads((VECTORS / "key-vectors.json").read_text("utf-8"))


def _public(vkey: str) -> Ed25519PublicKey:
    raw = base64.b64decode(vkey.split("+", 2)[2])
    assert raw[0] == 0x01
    return Ed25519PublicKey.from_public_bytes(raw[1:])


def test_generator_reproduces_the_vectors() -> None:
    """gen_key_vectors.py gives key-vectors.json byte for byte."""
    spec = importlib.util.spec_from_file_location("gen", VECTORS / "gen_key_vectors.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.render() == (VECTORS / "key-vectors.json").read_text("utf-8")


def test_statements_and_entries_rederived_with_plain_libraries() -> None:
    """Each statement is the canonical CBOR map of FORMAT 7.5, signed by the root key."""
    prev = bytes.fromhex(V["genesis"]["hash"])
    assert hashlib.sha256(b"\x00" + bytes.fromhex(V["genesis"]["bytes"])).digest() == prev
    root = _public(V["root_vkey"])
    for k in V["key_entries"]:
        data = bytes.fromhex(k["bytes"])
        # The entry hash is the RFC 9162 leaf hash of its bytes, and it links to the previous.
        assert hashlib.sha256(b"\x00" + data).hexdigest() == k["hash"]
        entry = cbor2.loads(data)
        assert entry[1] == prev and entry[2] == k["seq"] and entry[6] == k["type"]
        payload = entry[7]["payload"]
        assert payload == k["payload"]
        statement: dict[str, Any] = {
            "ctx": "memroot/key-authority/v1",
            "origin": V["origin"],
            "seq": k["seq"],
            "prev": prev,
            "type": k["type"],
            "name": payload["name"],
            "vkey": payload["vkey"],
        }
        if "branches" in payload:
            statement["branches"] = payload["branches"]
        encoded = cbor2.dumps(statement, canonical=True)
        assert encoded.hex() == k["statement"]
        root.verify(base64.b64decode(payload["sig"]), encoded)  # raises if wrong
        prev = bytes.fromhex(k["hash"])


def test_writer_checkpoint_opens_with_the_writer_vkey_line_alone() -> None:
    """A plain note verifier given the writer's vkey checks the writer-signed checkpoint."""
    note = V["writer_checkpoint"]["note"]
    body, sig_line = note.split("\n\n")
    name, b64 = sig_line.removeprefix("\u2014 ").strip().split(" ")
    raw = base64.b64decode(b64)
    pub = base64.b64decode(V["writer_vkey"].split("+", 2)[2])
    key_id = hashlib.sha256(name.encode() + b"\n\x01" + pub[1:]).digest()[:4]
    assert raw[:4] == key_id and key_id.hex() == V["writer_vkey"].split("+")[1]
    _public(V["writer_vkey"]).verify(raw[4:], (body + "\n").encode())
    leaves = [bytes.fromhex(V["genesis"]["hash"]), bytes.fromhex(V["key_entries"][0]["hash"])]
    assert (
        hashlib.sha256(b"\x01" + leaves[0] + leaves[1]).hexdigest()
        == (V["writer_checkpoint"]["root"])
    )
    # The root key alone does not open it: the writer's range comes from the log (step 6).
    root_only = [Verifier.from_vkey(V["root_vkey"])]
    try:
        open_checkpoint(note, root_only, origin=V["origin"])
    except Exception:
        pass
    else:
        raise AssertionError("the root vkey alone opened a writer's checkpoint")


def test_memroot_folds_the_vectors_into_the_key_set() -> None:
    """KeySet: host-b may sign main sizes 2..2 (added at 1, revoked at 2)."""
    ks = KeySet.start(V["origin"], V["root_vkey"])
    for k in V["key_entries"]:
        e = Entry.from_bytes(bytes.fromhex(k["bytes"]))
        ks.apply(e.seq, bytes(e.prev), e.type, e.body["payload"])
    w = ks.writers["host-b"]
    assert (w.added_by, w.revoked_by) == (1, 2)
    assert V["writer_vkey"] in ks.signers_at("main", 2)
    assert V["writer_vkey"] not in ks.signers_at("main", 3)
    assert V["writer_vkey"] not in ks.signers_at("main", 1)
