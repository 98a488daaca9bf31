"""cosignature/v1 (C2SP tlog-cosignature) and the add-checkpoint wire format."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from memroot.ledger.errors import DecodeError, ProofError
from memroot.ledger.note import Checkpoint, Verifier, open_checkpoint, sign_checkpoint
from memroot.ledger.signing import Ed25519Signer
from memroot.ledger.transparency.cosignature import (
    WitnessKey,
    add_cosignature_lines,
    cosign,
    cosignature_key_id,
    cosignatures,
    cosigned_message,
    parse_add_checkpoint,
    render_add_checkpoint,
)

VECTORS = Path(__file__).parents[2] / "vectors" / "memroot"
KAT = json.loads((VECTORS / "witness-kat.json").read_text("utf-8"))
LOG = Ed25519Signer.from_seed("example.org/log", bytes(32))
W1 = Ed25519Signer.from_seed("witness.example/w1", bytes(range(32)))
W2 = Ed25519Signer.from_seed("witness.example/w2", bytes(range(1, 33)))
NOTE = sign_checkpoint(Checkpoint("example.org/log", 7, b"\x07" * 32), [LOG])
BODY = Checkpoint("example.org/log", 7, b"\x07" * 32).body()


def test_regenerating_the_vectors_gives_identical_bytes() -> None:
    """The generator reproduces witness-kat.json byte for byte."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen", VECTORS / "gen_witness_kat.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.render() == (VECTORS / "witness-kat.json").read_text("utf-8")


def test_the_cosignature_vector_rederives_with_hashlib_and_cryptography() -> None:
    """An outsider re-derives key ID, message, signature and line from the seed alone."""
    v = KAT["cosignature_v1"]
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(v["witness_seed"]))
    pub = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert pub.hex() == v["witness_public_key"]
    name = v["witness_name"]
    key_id = hashlib.sha256(name.encode() + b"\n\x04" + pub).digest()[:4]
    assert v["witness_vkey"] == f"{name}+{key_id.hex()}+" + base64.b64encode(b"\x04" + pub).decode()
    text = v["checkpoint_note"].split("\n\n")[0] + "\n"
    message = f"cosignature/v1\ntime {v['timestamp']}\n{text}".encode()
    assert message.hex() == v["signed_message_hex"] and message.decode() == v["signed_message"]
    sig = key.sign(message)
    assert sig.hex() == v["signature_hex"]
    raw = key_id + v["timestamp"].to_bytes(8, "big") + sig
    assert v["cosignature_line"] == f"\u2014 {name} {base64.b64encode(raw).decode()}\n"
    assert v["cosigned_note"] == v["checkpoint_note"] + v["cosignature_line"]
    Ed25519PublicKey.from_public_bytes(pub).verify(sig, message)


def test_memroot_accepts_the_cosignature_vector() -> None:
    """The cosigned note opens with the log key and carries the witness's cosignature."""
    v = KAT["cosignature_v1"]
    found = cosignatures(v["cosigned_note"], [WitnessKey.from_vkey(v["witness_vkey"])])
    assert [(c.witness, c.timestamp) for c in found] == [(v["witness_name"], v["timestamp"])]
    open_checkpoint(v["cosigned_note"], [Verifier.from_vkey(v["log_vkey"])])


def test_the_branch_checkpoint_vector_opens_with_the_branch_vkey() -> None:
    """A plain client given the branch's own vkey verifies the branch checkpoint vector."""
    v = KAT["branch_checkpoint"]
    branch_key = Verifier.from_vkey(v["branch_vkey"])
    cp = open_checkpoint(v["note"], [branch_key], origin=branch_key.name).checkpoint
    assert cp.size == 3
    assert Verifier.from_vkey(v["log_vkey"]).public_key == branch_key.public_key


def test_cosign_and_verify_round_trip() -> None:
    """A cosignature verifies under its witness key; the key ID uses algorithm byte 0x04."""
    line = cosign(W1, BODY, 1_700_000_000)
    note = add_cosignature_lines(NOTE, line)
    key = WitnessKey.from_signer(W1)
    assert key.key_id == cosignature_key_id(W1.name, W1.public_key) != W1.key_id
    assert [c.timestamp for c in cosignatures(note, [key])] == [1_700_000_000]
    assert WitnessKey.from_vkey(key.vkey()) == key
    # the log's signature still opens; the cosignature line is ignored there
    open_checkpoint(note, [Verifier.from_signer(LOG)])


def test_a_quorum_counts_distinct_witnesses() -> None:
    """Two witnesses' lines give two cosignatures; an unknown key's line is ignored."""
    note = add_cosignature_lines(NOTE, cosign(W1, BODY, 1) + cosign(W2, BODY, 2))
    keys = [WitnessKey.from_signer(W1), WitnessKey.from_signer(W2)]
    assert sorted(c.witness for c in cosignatures(note, keys)) == [W1.name, W2.name]
    assert cosignatures(note, keys[:1])[0].witness == W1.name


def test_a_cosignature_on_another_checkpoint_fails() -> None:
    """A cosignature moved onto a different checkpoint (another root) does not verify."""
    other = sign_checkpoint(Checkpoint("example.org/log", 7, b"\x08" * 32), [LOG])
    forged = other + cosign(W1, BODY, 5)
    with pytest.raises(ProofError, match="does not verify"):
        cosignatures(forged, [WitnessKey.from_signer(W1)])


def test_a_changed_timestamp_fails() -> None:
    """The timestamp is signed: changing it breaks the cosignature."""
    line = cosign(W1, BODY, 5)
    name, sig64 = line[2:-1].split(" ")
    raw = bytearray(base64.b64decode(sig64))
    raw[11] ^= 1
    forged = NOTE + f"\u2014 {name} {base64.b64encode(bytes(raw)).decode()}\n"
    with pytest.raises(ProofError):
        cosignatures(forged, [WitnessKey.from_signer(W1)])


def test_a_log_vkey_is_not_a_witness_vkey() -> None:
    """A vkey with algorithm 0x01 (a log key) is refused where a witness key is expected."""
    with pytest.raises(DecodeError, match="log key"):
        WitnessKey.from_vkey(Verifier.from_signer(LOG).vkey())
    with pytest.raises(DecodeError, match="key ID"):
        good = WitnessKey.from_signer(W1).vkey()
        WitnessKey.from_vkey(good.replace(good.split("+")[1], "00000000"))


def test_the_signed_message_is_header_time_and_body() -> None:
    """cosignature/v1 signs two lines and then the note text, exactly."""
    assert cosigned_message("o\n1\nAA==\n", 42) == b"cosignature/v1\ntime 42\no\n1\nAA==\n"
    with pytest.raises(ValueError):
        cosigned_message("o\n1\nAA==\n", 1 << 63)


def test_add_checkpoint_body_round_trips() -> None:
    """old line, proof lines, blank line, note: parsed back exactly."""
    body = render_add_checkpoint(3, [b"\x01" * 32, b"\x02" * 32], NOTE)
    assert body.startswith(b"old 3\n")
    assert parse_add_checkpoint(body) == (3, [b"\x01" * 32, b"\x02" * 32], NOTE)
    assert parse_add_checkpoint(render_add_checkpoint(0, [], NOTE)) == (0, [], NOTE)


@pytest.mark.parametrize(
    "body",
    [b"old 03\n\nx", b"new 3\n\nx", b"old 3\nAAA=\n\nx", b"old 3\n", b"\xff\xfe"],
    ids=["leading-zero", "no-old", "short-hash", "no-blank-line", "not-utf8"],
)
def test_malformed_add_checkpoint_bodies_are_refused(body: bytes) -> None:
    """Every malformed request body is a DecodeError (the witness answers 400)."""
    with pytest.raises(DecodeError):
        parse_add_checkpoint(body)


def test_format_md_quotes_the_vectors_exactly() -> None:
    """docs/FORMAT.md section 11 shows the vector's key, message, signature and lines as is."""
    doc = (Path(__file__).parents[3] / "docs" / "FORMAT.md").read_text("utf-8")
    v = KAT["cosignature_v1"]
    for text in (
        v["witness_vkey"],
        v["witness_public_key"],
        v["signature_hex"],
        v["cosignature_line"].strip(),
        v["signed_message"].split("\n", 2)[1],
        KAT["branch_checkpoint"]["branch_vkey"],
        KAT["branch_checkpoint"]["note"].strip().split("\n")[-1],
    ):
        assert text in doc, text
    blocks = ["".join(block.split()) for block in doc.split("```")[1::2]]
    assert any(v["signed_message_hex"] in block for block in blocks)
