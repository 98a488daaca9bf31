r"""C2SP tlog-cosignature ``cosignature/v1`` (Ed25519) and the tlog-witness wire format.

- A **cosignature** is a signed-note signature line
  ``— <witness name> base64(key ID || u64 timestamp || Ed25519 signature)`` where the key ID is
  ``SHA-256(name || 0x0A || 0x04 || public key)[:4]`` and the signed message is
  ``"cosignature/v1\n" "time <timestamp>\n"`` followed by the checkpoint's note text. Witness
  vkeys use the algorithm byte 0x04: ``<name>+<hex key ID>+base64(0x04 || public key)``.
- An **add-checkpoint** request body is ``old <size>``, up to 63 consistency-proof lines, a
  blank line and the signed checkpoint; a 409 answer's body (``text/x.tlog.size``) is the
  witness's size and a newline.

Pure text and bytes: the client is ``memroot.ledger.transparency.witness``, the server
``memroot.ledger.transparency.witness_server``; docs/FORMAT.md section 9 is the normative text,
with a vector.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from memroot.ledger.errors import DecodeError, ProofError
from memroot.ledger.hashing import sha256
from memroot.ledger.note import MAX_SIGNATURES, split_note
from memroot.ledger.signing import (
    KEY_ID_SIZE,
    PUBLIC_KEY_SIZE,
    SIGNATURE_SIZE,
    Signer,
    is_valid_key_name,
    verify_signature,
)

__all__ = [
    "COSIGNATURE_ALG",
    "COSIGNATURE_HEADER",
    "MAX_REQUEST",
    "SIG_PREFIX",
    "SIZE_CONTENT_TYPE",
    "Cosignature",
    "WitnessKey",
    "add_cosignature_lines",
    "cosign",
    "cosignature_key_id",
    "cosignatures",
    "cosigned_message",
    "parse_add_checkpoint",
    "parse_size_body",
    "render_add_checkpoint",
]

COSIGNATURE_ALG: Final = 0x04  # C2SP tlog-cosignature: Ed25519 cosignature/v1 key IDs
COSIGNATURE_HEADER: Final = "cosignature/v1"
SIZE_CONTENT_TYPE: Final = "text/x.tlog.size"  # C2SP tlog-witness: the body of a 409
MAX_TIMESTAMP: Final = (1 << 63) - 1
MAX_PROOF_LINES: Final = 63  # C2SP tlog-witness: a client sends at most 63 proof hashes
MAX_REQUEST: Final = (1 << 20) + 64 * 64  # a note (1 MiB) plus the old line and a proof
SIG_PREFIX: Final = "\u2014 "  # a signed-note signature line starts with an em dash, space
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]{0,19}")
_HEX8: Final = re.compile(r"[0-9a-f]{8}")
_TIMESTAMP_SIZE: Final = 8


# --------------------------------------------------------------------------- cosignature/v1


def cosignature_key_id(name: str, public_key: bytes) -> bytes:
    """Return ``SHA-256(name || 0x0A || 0x04 || public key)[:4]`` (C2SP tlog-cosignature).

    Raises:
        ValueError: if the name is not a valid key name or the key is not 32 bytes.

    """
    if not is_valid_key_name(name):
        raise ValueError(f"invalid witness name {name!r}: need non-empty, no spaces, no '+'")
    if len(public_key) != PUBLIC_KEY_SIZE:
        raise ValueError(f"an Ed25519 public key is {PUBLIC_KEY_SIZE} bytes")
    return sha256(name.encode("utf-8") + b"\n" + bytes([COSIGNATURE_ALG]) + public_key)[
        :KEY_ID_SIZE
    ]


def cosigned_message(body: str, timestamp: int) -> bytes:
    """Return the bytes a cosignature/v1 signs: header, time line, then the note text.

    Raises:
        ValueError: if the timestamp is outside ``0 .. 2**63 - 1`` or the text does not end
            in a newline.

    """
    if isinstance(timestamp, bool) or not 0 <= timestamp <= MAX_TIMESTAMP:
        raise ValueError(f"a cosignature timestamp is 0 .. 2**63 - 1, got {timestamp!r}")
    if not body.endswith("\n"):
        raise ValueError("a checkpoint note text ends with a newline")
    return f"{COSIGNATURE_HEADER}\ntime {timestamp}\n{body}".encode()


@dataclass(frozen=True, slots=True)
class WitnessKey:
    """A witness's cosignature/v1 verifier key: name, 4-byte key ID (alg 0x04), public key.

    Raises:
        ValueError: if the name is invalid, a size is wrong or the key ID does not match.

    """

    name: str
    key_id: bytes
    public_key: bytes

    def __post_init__(self) -> None:
        expected = cosignature_key_id(self.name, self.public_key)
        if self.key_id != expected:
            raise ValueError(
                f"witness key ID {self.key_id.hex()} does not match {self.name!r} and the key "
                f"(expected {expected.hex()})"
            )

    @classmethod
    def from_signer(cls, signer: Signer) -> WitnessKey:
        """Return the cosignature key of ``signer``'s Ed25519 key under its name."""
        return cls(
            signer.name, cosignature_key_id(signer.name, signer.public_key), signer.public_key
        )

    @classmethod
    def from_vkey(cls, text: str) -> WitnessKey:
        """Parse ``<name>+<hex8 key ID>+base64(0x04 || 32-byte Ed25519 key)``, strictly.

        Raises:
            DecodeError: naming what is wrong (a log vkey, algorithm 0x01, is refused here).

        """
        parts = text.strip().split("+", 2) if isinstance(text, str) else []
        if len(parts) != 3:
            raise DecodeError("witness vkey must have the form <name>+<hex8 key ID>+<base64 key>")
        name, id_hex, key64 = parts
        if not is_valid_key_name(name) or not _HEX8.fullmatch(id_hex):
            raise DecodeError(f"witness vkey {text[:80]!r} has a bad name or key ID")
        raw = _b64decode(key64, "witness vkey key data")
        if len(raw) != 1 + PUBLIC_KEY_SIZE or raw[0] != COSIGNATURE_ALG:
            raise DecodeError(
                "witness vkey key data must be 0x04 (cosignature/v1 Ed25519) and a 32-byte "
                f"key; got {len(raw)} bytes starting 0x{raw[0] if raw else 0:02x}"
                + (" (that is a log key, algorithm 0x01)" if raw[:1] == b"\x01" else "")
            )
        key = raw[1:]
        expected = cosignature_key_id(name, key)
        if expected.hex() != id_hex:
            raise DecodeError(
                f"witness vkey key ID {id_hex} does not match its name and key "
                f"(computed {expected.hex()})",
                expected=expected.hex(),
                actual=id_hex,
            )
        return cls(name, expected, key)

    def vkey(self) -> str:
        """Render the witness vkey ``<name>+<hex8>+base64(0x04 || key)``."""
        key64 = base64.b64encode(bytes([COSIGNATURE_ALG]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{key64}"

    def __str__(self) -> str:
        return f"{self.name}+{self.key_id.hex()}"


@dataclass(frozen=True, slots=True)
class Cosignature:
    """A verified cosignature: which witness, and the time it states (POSIX seconds)."""

    witness: str
    key_id: bytes
    timestamp: int


def cosign(signer: Signer, body: str, timestamp: int) -> str:
    r"""Return the cosignature/v1 line ``— <name> base64(...)\n`` of ``signer`` over ``body``.

    ``body`` is the checkpoint's note text (without signature lines). The signature is checked
    against the public key before it is returned.

    Raises:
        ValueError: for a bad timestamp or text, or a signature that does not verify.

    """
    message = cosigned_message(body, timestamp)
    signature = signer.sign(message)
    if not verify_signature(signer.public_key, message, signature):
        raise ValueError(f"witness {signer.name} produced a signature that does not verify")
    key_id = cosignature_key_id(signer.name, signer.public_key)
    raw = key_id + timestamp.to_bytes(_TIMESTAMP_SIZE, "big") + signature
    return f"{SIG_PREFIX}{signer.name} {base64.b64encode(raw).decode()}\n"


def cosignatures(note: str, keys: Sequence[WitnessKey]) -> list[Cosignature]:
    """Return the valid cosignatures on ``note`` by the given witness keys (one per key).

    Lines by other keys are ignored (C2SP signed-note). A line whose name and key ID are a
    given key's must verify.

    Raises:
        DecodeError: if the note is malformed.
        ProofError: if a line by a given key does not verify (a forged or damaged
            cosignature), or states a timestamp above 2**63 - 1.

    """
    text, lines = split_note(note)
    known = {(k.name, k.key_id): k for k in keys}
    found: dict[tuple[str, bytes], Cosignature] = {}
    for name, key_id, sig in lines:
        key = known.get((name, key_id))
        if key is None:
            continue
        if len(sig) != _TIMESTAMP_SIZE + SIGNATURE_SIZE:
            raise ProofError(f"the cosignature by {key} is {len(sig)} bytes, not 72")
        timestamp = int.from_bytes(sig[:_TIMESTAMP_SIZE], "big")
        if timestamp > MAX_TIMESTAMP:
            raise ProofError(f"the cosignature by {key} states a timestamp above 2**63 - 1")
        message = cosigned_message(text, timestamp)
        if not verify_signature(key.public_key, message, sig[_TIMESTAMP_SIZE:]):
            raise ProofError(
                f"the cosignature by witness {key} does not verify: the checkpoint was "
                "changed or the cosignature is not genuine",
                expected=str(key),
            )
        old = found.get((name, key_id))
        if old is None or timestamp > old.timestamp:
            found[(name, key_id)] = Cosignature(name, key_id, timestamp)
    return list(found.values())


def add_cosignature_lines(note: str, lines: str) -> str:
    """Return ``note`` with the signature ``lines`` appended (lines already there are kept once).

    Raises:
        DecodeError: if the note or the lines are malformed, or there would be more than
            100 signatures.

    """
    text, _ = split_note(note)
    present = note[len(text) + 1 :].splitlines(keepends=True)
    new = [line for line in lines.splitlines(keepends=True) if line not in present]
    for line in new:
        if not line.startswith(SIG_PREFIX) or not line.endswith("\n"):
            raise DecodeError(f"not a note signature line: {line[:80]!r}")
    if len(present) + len(new) > MAX_SIGNATURES:
        raise DecodeError(f"a note carries at most {MAX_SIGNATURES} signatures")
    merged = note + "".join(new)
    split_note(merged)  # the result must still be a well-formed note
    return merged


# --------------------------------------------------------------------------- add-checkpoint


def render_add_checkpoint(old: int, proof: Sequence[bytes], note: str) -> bytes:
    """Return the body of an add-checkpoint request (C2SP tlog-witness).

    Raises:
        ValueError: for a negative old size or a proof of more than 63 hashes.

    """
    if old < 0 or len(proof) > MAX_PROOF_LINES:
        raise ValueError(f"bad old size {old} or proof of {len(proof)} hashes")
    lines = [f"old {old}\n"] + [base64.b64encode(h).decode() + "\n" for h in proof]
    return ("".join(lines) + "\n" + note).encode("utf-8")


def parse_add_checkpoint(body: bytes) -> tuple[int, list[bytes], str]:
    """Parse an add-checkpoint request body into ``(old size, proof hashes, note)``.

    Raises:
        DecodeError: if the body is malformed (the witness answers 400).

    """
    if len(body) > MAX_REQUEST:
        raise DecodeError(f"request body is {len(body)} bytes, more than {MAX_REQUEST}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError("request body is not UTF-8") from e
    head, blank, note = text.partition("\n\n")
    if not blank:
        raise DecodeError("request has no blank line before the checkpoint")
    lines = head.split("\n")
    if not lines[0].startswith("old ") or not _DECIMAL.fullmatch(lines[0][4:]):
        raise DecodeError("request does not start with 'old <decimal size>'")
    old = int(lines[0][4:])
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise DecodeError(f"request has {len(lines) - 1} proof lines, more than 63")
    proof = [_b64decode(line, "consistency proof line") for line in lines[1:]]
    if any(len(h) != 32 for h in proof):
        raise DecodeError("a consistency proof line is not a 32-byte hash")
    return old, proof, note


def parse_size_body(text: str) -> int:
    """Parse the body of a 409 answer (a decimal size and a newline).

    Raises:
        DecodeError: if it is not one.

    """
    if not text.endswith("\n") or not _DECIMAL.fullmatch(text[:-1]):
        raise DecodeError(f"not a tree size line: {text[:40]!r}")
    return int(text[:-1])


def _b64decode(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise DecodeError(f"{what} is not valid base64") from e
    if base64.b64encode(raw).decode() != text:
        raise DecodeError(f"{what} is not canonical base64")
    return raw
