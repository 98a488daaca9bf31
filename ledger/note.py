"""Signed notes, verifier keys, checkpoints and tlog proofs: the C2SP text formats.

SPEC "Normative formats" 5. Everything here is text parsing and rendering; the cryptography
is in ``memroot.ledger.signing`` (the only importer of ``cryptography``).

- c2sp.org/signed-note: a text ending in newline, a blank line, then signature lines
  ``U+2014 U+0020 <key name> U+0020 base64(key ID || signature) U+000A``. The whole note is
  valid UTF-8 without ASCII control characters other than newline. Signatures from unknown
  keys are ignored; a signature from a known key (name *and* key ID) must verify, or the
  whole note is rejected; a note with no verified signature from a trusted key is rejected.
- The verifier key (``vkey``) of Go's ``golang.org/x/mod/sumdb/note``:
  ``<name>+<hex8 key ID>+base64(0x01 || 32-byte Ed25519 public key)``.
- c2sp.org/tlog-checkpoint: the note text is ``origin``, tree size in decimal, base64 root
  hash, then optional non-empty extension lines. The key name SHOULD be the origin, so a
  branch checkpoint (origin ``O/branch/B``) is signed by the log's key under the key name
  ``O/branch/B`` (docs/FORMAT.md section 5, "Branch checkpoint key names"): one Ed25519 key,
  one name per origin, so a plain C2SP client given the vkey of ``O/branch/B`` verifies it.
- c2sp.org/tlog-proof@v1: the header line, an optional ``extra`` line, ``index N``, the
  inclusion proof hashes in base64 one per line, a blank line and the signed checkpoint.

Parsing is strict and bounded: base64 must be canonical standard base64 with padding (so no
two encodings of the same bytes are accepted), decimals have no sign and no leading zeros,
and a note is at most 1 MiB with at most 100 signatures. Malformed input raises
``DecodeError``; input that parses but does not verify raises ``ProofError``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass

from memroot.ledger.errors import DecodeError, ProofError
from memroot.ledger.hashing import HASH_SIZE
from memroot.ledger.signing import (
    ALG_ED25519,
    KEY_ID_SIZE,
    PUBLIC_KEY_SIZE,
    Signer,
    check_own_signature,
    is_valid_key_name,
    key_hash,
    verify_signature,
)

__all__ = [
    "MAX_NOTE_SIZE",
    "MAX_PROOF_HASHES",
    "MAX_SIGNATURES",
    "MAX_TREE_SIZE",
    "TLOG_PROOF_HEADER",
    "Checkpoint",
    "Note",
    "SignedCheckpoint",
    "TlogProof",
    "Verifier",
    "branch_of_origin",
    "format_tlog_proof",
    "open_checkpoint",
    "open_note",
    "parse_checkpoint",
    "parse_tlog_proof",
    "sign_checkpoint",
    "sign_note",
    "split_note",
    "vkey_of",
]

MAX_NOTE_SIZE = 1 << 20  # bytes; C2SP signed-note: verifiers SHOULD bound a note's size
MAX_SIGNATURES = 100  # the bound of Go's note.Open; the spec requires accepting at least 16
MAX_TREE_SIZE = (1 << 64) - 1  # sizes and indexes are uint64 in every C2SP implementation
MAX_PROOF_HASHES = 64  # an RFC 9162 inclusion path in a tree of < 2**64 leaves
TLOG_PROOF_HEADER = "c2sp.org/tlog-proof@v1"
# A proof file is a signed checkpoint plus a few short lines and the extra data.
_MAX_TLOG_PROOF_SIZE = 2 * MAX_NOTE_SIZE

_SIG_PREFIX = "\u2014 "  # em dash, space: C2SP signed-note "Format"
_MIN_SIG_BYTES = KEY_ID_SIZE + 1  # a key ID and a non-empty signature
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")  # ASCII controls other than newline
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")
_BRANCH_INFIX = "/branch/"
_BRANCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_HEX8 = re.compile(r"[0-9a-f]{8}")


# --------------------------------------------------------------------------- helpers


def _as_text(data: str | bytes, what: str, limit: int) -> str:
    """Return ``data`` as a str that is valid UTF-8 and at most ``limit`` bytes long.

    Raises:
        DecodeError: if the bytes are not UTF-8, the str holds lone surrogates, or it is
            longer than ``limit`` bytes.
        TypeError: if ``data`` is neither str nor bytes.

    """
    if isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
        if len(raw) > limit:
            raise DecodeError(f"{what} is {len(raw)} bytes, more than the limit of {limit}")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"{what} is not valid UTF-8 (byte offset {e.start})") from e
    if not isinstance(data, str):
        raise TypeError(f"{what} must be str or bytes, not {type(data).__name__}")
    if len(data) > limit:
        raise DecodeError(f"{what} is more than the limit of {limit} bytes")
    try:
        size = len(data.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise DecodeError(f"{what} is not valid UTF-8 (character offset {e.start})") from e
    if size > limit:
        raise DecodeError(f"{what} is {size} bytes, more than the limit of {limit}")
    return data


def _check_no_controls(text: str, what: str) -> None:
    """Refuse ASCII control characters other than newline (C2SP signed-note "Format").

    Raises:
        DecodeError: naming the first offending character and its offset.

    """
    m = _CONTROL.search(text)
    if m is not None:
        raise DecodeError(
            f"{what} contains the control character 0x{ord(m.group()):02x} "
            f"at offset {m.start()}; only newline is allowed"
        )


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str, what: str) -> bytes:
    """Decode canonical standard base64 with padding (RFC 4648 section 4).

    Canonical means re-encoding gives back ``text``: padding bits are zero and nothing is
    optional, so a single changed character always changes the decoded bytes.

    Raises:
        DecodeError: if ``text`` is not canonical standard base64.

    """
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise DecodeError(f"{what} is not valid base64") from e
    if _b64encode(raw) != text:
        raise DecodeError(f"{what} is not canonical base64 (non-zero padding bits)")
    return raw


def _parse_uint64(text: str, what: str) -> int:
    """Parse an ASCII decimal without sign or leading zeros, at most ``2**64 - 1``.

    Raises:
        DecodeError: if ``text`` is not such a decimal.

    """
    if not _DECIMAL.fullmatch(text):
        raise DecodeError(
            f"{what} {text[:40]!r} is not a decimal number without sign or leading zeros"
        )
    value = int(text)
    if value > MAX_TREE_SIZE:
        raise DecodeError(f"{what} {text} does not fit in 64 bits")
    return value


def _check_line(value: str, what: str, *, allow_empty: bool = False) -> None:
    """Check that ``value`` can be one line of a note text.

    Raises:
        ValueError: if it is empty (unless allowed), holds a newline or control character,
            or is not valid UTF-8.
        TypeError: if it is not a str.

    """
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value and not allow_empty:
        raise ValueError(f"{what} must not be empty")
    if "\n" in value or _CONTROL.search(value):
        raise ValueError(f"{what} must be one line without control characters: {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} is not valid UTF-8: {value!r}") from e


# --------------------------------------------------------------------------- verifier keys


@dataclass(frozen=True, slots=True)
class Verifier:
    """A trusted Ed25519 note verifier key: a key name, its 4-byte key ID and public key.

    Constructing one checks that ``key_id`` is the signed-note key ID of the name and key,
    so a name or key ID cannot be swapped without the key.

    Raises:
        ValueError: if the name is invalid, the sizes are wrong or the key ID does not match.

    """

    name: str
    key_id: bytes
    public_key: bytes

    def __post_init__(self) -> None:
        if not is_valid_key_name(self.name):
            raise ValueError(f"invalid key name {self.name!r}: need non-empty, no spaces, no '+'")
        if not isinstance(self.key_id, bytes) or len(self.key_id) != KEY_ID_SIZE:
            raise ValueError(f"a key ID is {KEY_ID_SIZE} bytes")
        if not isinstance(self.public_key, bytes) or len(self.public_key) != PUBLIC_KEY_SIZE:
            raise ValueError(f"an Ed25519 public key is {PUBLIC_KEY_SIZE} bytes")
        expected = key_hash(self.name, self.public_key)
        if self.key_id != expected:
            raise ValueError(
                f"key ID {self.key_id.hex()} does not match name {self.name!r} and the key "
                f"(expected {expected.hex()})"
            )

    @classmethod
    def from_signer(cls, signer: Signer) -> Verifier:
        """Return the verifier of ``signer``'s public key.

        Raises:
            ValueError: if the signer reports a key ID that does not match its key.

        """
        return cls(signer.name, signer.key_id, signer.public_key)

    @classmethod
    def from_vkey(cls, text: str | bytes) -> Verifier:
        """Parse a verifier key ``<name>+<hex8>+<base64(0x01 || 32-byte public key)>``.

        Strict: the name is a valid key name, the key ID is 8 lowercase hex digits, the key
        data is canonical base64 of the Ed25519 algorithm byte 0x01 and 32 bytes, and the
        key ID equals ``SHA-256(name || 0x0A || 0x01 || key)[:4]``. No surrounding
        whitespace is allowed (strip a file's final newline before calling this).

        Raises:
            DecodeError: naming what is wrong with the vkey.

        """
        vkey = _as_text(text, "vkey", 4096)
        parts = vkey.split("+", 2)
        if len(parts) != 3:
            raise DecodeError("vkey must have the form <name>+<hex8 key ID>+<base64 key>")
        name, id_hex, key64 = parts
        if not is_valid_key_name(name):
            raise DecodeError(
                f"vkey name {name[:80]!r} is invalid: it must be non-empty UTF-8 "
                "without spaces or '+'"
            )
        if not _HEX8.fullmatch(id_hex):
            raise DecodeError(f"vkey key ID {id_hex[:40]!r} is not 8 lowercase hex digits")
        raw = _b64decode(key64, "vkey key data")
        if not raw:
            raise DecodeError("vkey key data is empty")
        if raw[0] != ALG_ED25519:
            raise DecodeError(
                f"vkey algorithm byte is 0x{raw[0]:02x}; only 0x01 (Ed25519) is supported"
            )
        public_key = raw[1:]
        if len(public_key) != PUBLIC_KEY_SIZE:
            raise DecodeError(
                f"vkey public key is {len(public_key)} bytes, expected {PUBLIC_KEY_SIZE}"
            )
        expected = key_hash(name, public_key)
        if expected.hex() != id_hex:
            raise DecodeError(
                f"vkey key ID {id_hex} does not match the name {name!r} and key "
                f"(computed {expected.hex()}): the name, key ID or key was changed",
                expected=expected.hex(),
                actual=id_hex,
            )
        return cls(name, bytes.fromhex(id_hex), public_key)

    def for_origin(self, origin: str) -> Verifier:
        """Return this key under the key name ``origin`` (a branch origin of this key's log).

        A log's key signs its branch checkpoints under the branch's origin (FORMAT.md 5):
        same public key, another name, so another key ID.

        Raises:
            ValueError: if ``origin`` is neither this key's name nor ``<name>/branch/<B>``.

        """
        if origin == self.name:
            return self
        if branch_of_origin(self.name, origin) is None:
            raise ValueError(f"{origin!r} is not a branch origin of the log {self.name!r}")
        return Verifier(origin, key_hash(origin, self.public_key), self.public_key)

    def vkey(self) -> str:
        """Render the verifier key text ``<name>+<hex8>+<base64(0x01 || public key)>``."""
        key64 = _b64encode(bytes([ALG_ED25519]) + self.public_key)
        return f"{self.name}+{self.key_id.hex()}+{key64}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Return whether ``signature`` is this key's Ed25519 signature of ``message``."""
        return verify_signature(self.public_key, message, signature)

    def __str__(self) -> str:
        return f"{self.name}+{self.key_id.hex()}"


def branch_of_origin(log_origin: str, origin: str) -> str | None:
    """Return ``B`` when ``origin`` is ``<log_origin>/branch/<B>`` with a valid branch name."""
    prefix = log_origin + _BRANCH_INFIX
    if not origin.startswith(prefix):
        return None
    branch = origin[len(prefix) :]
    return branch if _BRANCH_NAME.fullmatch(branch) else None


def vkey_of(signer: Signer) -> str:
    """Return the verifier key text to publish for ``signer``.

    Raises:
        ValueError: if the signer reports a key ID that does not match its key.

    """
    return Verifier.from_signer(signer).vkey()


# --------------------------------------------------------------------------- signed notes


@dataclass(frozen=True, slots=True)
class Note:
    """A note text whose signatures were verified, with the names of the trusted signers."""

    text: str
    signer_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _SignatureLine:
    name: str
    key_id: bytes
    signature: bytes


def _split_note(note: str) -> tuple[str, list[_SignatureLine]]:
    """Split a signed note into its text and parsed signature lines, without verifying.

    Raises:
        DecodeError: if the note is not a well-formed signed note.

    """
    _check_no_controls(note, "note")
    # C2SP signed-note: the text is separated from the signatures by the last empty line.
    split = note.rfind("\n\n")
    if split < 0:
        raise DecodeError("note has no blank line before its signature lines")
    text, block = note[: split + 1], note[split + 2 :]
    if not block:
        raise DecodeError("note has no signature lines")
    if not block.endswith("\n"):
        raise DecodeError("note's last signature line does not end with a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise DecodeError(f"note has {len(lines)} signatures, more than {MAX_SIGNATURES}")
    parsed: list[_SignatureLine] = []
    for number, line in enumerate(lines, start=1):
        if not line.startswith(_SIG_PREFIX):
            raise DecodeError(f"signature line {number} does not start with an em dash and space")
        name, space, sig64 = line[len(_SIG_PREFIX) :].partition(" ")
        if not space or not sig64:
            raise DecodeError(f"signature line {number} has no signature after the key name")
        if not is_valid_key_name(name):
            raise DecodeError(f"signature line {number} has an invalid key name {name[:80]!r}")
        raw = _b64decode(sig64, f"signature line {number}")
        if len(raw) < _MIN_SIG_BYTES:
            raise DecodeError(f"signature line {number} is too short: {len(raw)} bytes")
        parsed.append(_SignatureLine(name, raw[:KEY_ID_SIZE], raw[KEY_ID_SIZE:]))
    return text, parsed


def split_note(note: str | bytes) -> tuple[str, list[tuple[str, bytes, bytes]]]:
    """Return a signed note's text and its signature lines ``(key name, key ID, signature)``.

    Nothing is verified (a cosignature's signed message is not the note text, so its checker
    needs the lines themselves); the note must be well formed as for :func:`open_note`.

    Raises:
        DecodeError: if the note is malformed, over 1 MiB or has over 100 signatures.

    """
    text, lines = _split_note(_as_text(note, "note", MAX_NOTE_SIZE))
    return text, [(x.name, x.key_id, x.signature) for x in lines]


def _index_verifiers(verifiers: Sequence[Verifier]) -> dict[tuple[str, bytes], Verifier]:
    """Map ``(name, key ID)`` to its verifier.

    Raises:
        ValueError: if two different keys share a name and key ID (an ambiguous trust list).
        TypeError: if an element is not a Verifier.

    """
    known: dict[tuple[str, bytes], Verifier] = {}
    for v in verifiers:
        if not isinstance(v, Verifier):
            raise TypeError(f"verifiers must be Verifier objects, not {type(v).__name__}")
        key = (v.name, v.key_id)
        if key in known and known[key] != v:
            raise ValueError(f"two trusted keys share the name and key ID {v}")
        known[key] = v
    return known


def open_note(note: str | bytes, verifiers: Sequence[Verifier]) -> Note:
    """Parse a signed note and verify its signatures against the trusted ``verifiers``.

    C2SP signed-note "Signatures": a signature line whose key name and key ID are not both
    those of a trusted key is ignored (that is how keys rotate and witnesses cosign). Every
    signature by a trusted key must verify, and at least one must be present.

    Raises:
        DecodeError: if the note is malformed, over 1 MiB or has over 100 signatures.
        ProofError: if a trusted key's signature fails to verify, or no trusted key signed.
        ValueError: if ``verifiers`` holds two different keys with one name and key ID.

    """
    text, lines = _split_note(_as_text(note, "note", MAX_NOTE_SIZE))
    known = _index_verifiers(verifiers)
    message = text.encode("utf-8")
    names: list[str] = []
    for line in lines:
        verifier = known.get((line.name, line.key_id))
        if verifier is None:
            continue
        # Every known-key signature is checked, not only the first (Go checks only the
        # first per key): a forged duplicate line must not ride along unnoticed.
        if not verifier.verify(message, line.signature):
            raise ProofError(
                f"the signature by trusted key {verifier} does not verify: "
                "the note was changed or the signature is not genuine",
                expected=str(verifier),
            )
        if verifier.name not in names:
            names.append(verifier.name)
    if not names:
        trusted = ", ".join(str(v) for v in known.values()) or "(no trusted keys given)"
        present = ", ".join(f"{x.name[:80]}+{x.key_id.hex()}" for x in lines[:10])
        if len(lines) > 10:
            present += f" and {len(lines) - 10} more"
        raise ProofError(
            f"no signature by a trusted key: expected one by {trusted}; "
            f"the note is signed only by {present}",
            expected=trusted,
            actual=present,
        )
    return Note(text=text, signer_names=tuple(names))


def sign_note(text: str, signers: Sequence[Signer]) -> str:
    """Sign ``text`` with every signer and return the signed note.

    The text must be valid UTF-8, end in a newline and hold no control characters other
    than newline; the signed note must stay within 1 MiB and 100 signatures, so that
    :func:`open_note` accepts every note this function produces.

    Each signature is verified against the signer's public key before it is emitted.

    Raises:
        ValueError: if the text or a signer is unsuitable (invalid name, key ID not matching
            its key, a signature that does not verify), no signer is given, or two signers
            share a key name and key ID.

    """
    if not isinstance(text, str) or not text.endswith("\n"):
        raise ValueError("a note text must be a str ending in a newline")
    try:
        message = text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("a note text must be valid UTF-8") from e
    if _CONTROL.search(text):
        raise ValueError("a note text must not contain control characters other than newline")
    if not signers:
        raise ValueError("a note needs at least one signer")
    if len(signers) > MAX_SIGNATURES:
        raise ValueError(f"a note can carry at most {MAX_SIGNATURES} signatures")
    seen: set[tuple[str, bytes]] = set()
    lines: list[str] = []
    for signer in signers:
        name, key_id = signer.name, signer.key_id
        if not is_valid_key_name(name):
            raise ValueError(f"invalid signer key name {name!r}")
        if len(key_id) != KEY_ID_SIZE or key_id != key_hash(name, signer.public_key):
            raise ValueError(f"signer {name}'s key ID does not match its name and public key")
        if (name, key_id) in seen:
            raise ValueError(f"two signers share the key {name}+{key_id.hex()}")
        seen.add((name, key_id))
        signature = signer.sign(message)
        # Check our own signature before publishing it: a faulty signer (or a fault during
        # signing) must not put a note out that its own vkey cannot open.
        if not check_own_signature(signer.public_key, message, signature):
            raise ValueError(f"signer {name} produced a signature that does not verify")
        lines.append(f"{_SIG_PREFIX}{name} {_b64encode(key_id + signature)}\n")
    note = text + "\n" + "".join(lines)
    if len(note.encode("utf-8")) > MAX_NOTE_SIZE:
        raise ValueError(f"the signed note would be larger than {MAX_NOTE_SIZE} bytes")
    return note


# --------------------------------------------------------------------------- checkpoints


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A C2SP tlog-checkpoint body: the log origin, tree size and RFC 9162 root hash.

    Raises:
        ValueError: if the origin or an extension line is empty or not a single line, the
            size is outside ``0 .. 2**64 - 1``, or the root is not 32 bytes.
        TypeError: if a field has the wrong type.

    """

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_line(self.origin, "checkpoint origin")
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise TypeError("checkpoint size must be an int")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise ValueError(f"checkpoint size {self.size} is outside 0 .. 2**64 - 1")
        if not isinstance(self.root, bytes) or len(self.root) != HASH_SIZE:
            raise ValueError(f"checkpoint root must be {HASH_SIZE} bytes")
        if not isinstance(self.extensions, tuple):
            raise TypeError("checkpoint extensions must be a tuple of str")
        for line in self.extensions:
            _check_line(line, "checkpoint extension line")

    def body(self) -> str:
        """Return the note text: origin, size and base64 root lines, then extension lines."""
        head = f"{self.origin}\n{self.size}\n{_b64encode(self.root)}\n"
        return head + "".join(f"{line}\n" for line in self.extensions)


@dataclass(frozen=True, slots=True)
class SignedCheckpoint:
    """A checkpoint whose note verified, the signed note as received, and who signed it."""

    checkpoint: Checkpoint
    note: str
    signer_names: tuple[str, ...]


def parse_checkpoint(body: str | bytes) -> Checkpoint:
    """Parse a checkpoint note text (C2SP tlog-checkpoint "Note text"), strictly.

    Raises:
        DecodeError: if there are fewer than three lines, the text does not end in a
            newline, the origin is empty, the size is not a canonical decimal below 2**64,
            the root is not canonical base64 of 32 bytes, or an extension line is empty.

    """
    text = _as_text(body, "checkpoint", MAX_NOTE_SIZE)
    _check_no_controls(text, "checkpoint")
    if not text.endswith("\n"):
        raise DecodeError("checkpoint text does not end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise DecodeError(f"checkpoint has {len(lines)} lines; it needs origin, size and root")
    origin, size_text, root_text, *extensions = lines
    if not origin:
        raise DecodeError("checkpoint origin line is empty")
    size = _parse_uint64(size_text, "checkpoint tree size")
    root = _b64decode(root_text, "checkpoint root hash")
    if len(root) != HASH_SIZE:
        raise DecodeError(f"checkpoint root hash is {len(root)} bytes, expected {HASH_SIZE}")
    for number, line in enumerate(extensions, start=4):
        if not line:
            raise DecodeError(f"checkpoint line {number} (an extension line) is empty")
    return Checkpoint(origin=origin, size=size, root=root, extensions=tuple(extensions))


class _NamedSigner:
    """A signer's key under another key name (its log's branch origin): same key, new key ID."""

    __slots__ = ("_inner", "_key_id", "_name")

    def __init__(self, inner: Signer, name: str) -> None:
        self._inner = inner
        self._name = name
        self._key_id = key_hash(name, inner.public_key)

    @property
    def name(self) -> str:
        return self._name

    @property
    def key_id(self) -> bytes:
        return self._key_id

    @property
    def public_key(self) -> bytes:
        return self._inner.public_key

    def sign(self, message: bytes) -> bytes:
        return self._inner.sign(message)


def sign_checkpoint(checkpoint: Checkpoint, signers: Sequence[Signer]) -> str:
    """Return ``checkpoint`` as a signed note signed by every signer.

    A signer named for a log ``O`` signs a branch checkpoint (origin ``O/branch/B``) under
    the key name ``O/branch/B``: C2SP tlog-checkpoint asks that the key name match the
    origin (FORMAT.md 5). Other signers sign under their own names.

    Raises:
        ValueError: as :func:`sign_note`.

    """
    origin = checkpoint.origin
    named: list[Signer] = [
        _NamedSigner(s, origin) if branch_of_origin(s.name, origin) is not None else s
        for s in signers
    ]
    return sign_note(checkpoint.body(), named)


def open_checkpoint(
    note: str | bytes, verifiers: Sequence[Verifier], origin: str | None = None
) -> SignedCheckpoint:
    """Verify a signed checkpoint note and parse its body.

    The signatures are verified before the body is parsed; ``origin``, when given, must
    equal the checkpoint's origin (the log identity, which outlives any one key). A trusted
    key named for a log ``O`` also verifies a checkpoint whose origin line is
    ``O/branch/B`` when the signature line names ``O/branch/B`` (FORMAT.md 5; the origin line
    is part of the signed text, so the rename cannot move a signature to another log).

    Raises:
        DecodeError: if the note or the checkpoint body is malformed.
        ProofError: if the signatures do not verify (see :func:`open_note`) or the origin
            is not the expected one.
        ValueError: if ``verifiers`` holds two different keys with one name and key ID.

    """
    text = _as_text(note, "note", MAX_NOTE_SIZE)
    opened = open_note(text, _with_branch_names(text, verifiers))
    checkpoint = parse_checkpoint(opened.text)
    if origin is not None and checkpoint.origin != origin:
        raise ProofError(
            f"checkpoint is for log {checkpoint.origin!r}, not the expected {origin!r}",
            expected=origin,
            actual=checkpoint.origin,
        )
    return SignedCheckpoint(checkpoint=checkpoint, note=text, signer_names=opened.signer_names)


def _with_branch_names(note: str, verifiers: Sequence[Verifier]) -> list[Verifier]:
    """Add, for a note whose origin line is ``O/branch/B``, each ``O`` key under that name.

    The origin is read from the unverified text only to choose the key names to accept;
    the signatures are then checked over the whole text, origin line included.
    """
    out = list(verifiers)
    origin = note.split("\n", 1)[0]
    for v in verifiers:
        if isinstance(v, Verifier) and branch_of_origin(v.name, origin) is not None:
            out.append(v.for_origin(origin))
    return out


# --------------------------------------------------------------------------- tlog proofs


def _check_checkpoint_note(note: str) -> None:
    """Check that ``note`` is a well-formed signed checkpoint note (signatures unverified).

    Raises:
        DecodeError: if it is not.

    """
    text, _ = _split_note(_as_text(note, "checkpoint note", MAX_NOTE_SIZE))
    parse_checkpoint(text)


@dataclass(frozen=True, slots=True)
class TlogProof:
    """A c2sp.org/tlog-proof@v1 proof: index, inclusion path, signed checkpoint, extra data.

    Nothing in it is verified: open ``checkpoint_note`` with :func:`open_checkpoint` and
    check the inclusion path against its root. ``extra`` is unauthenticated.

    Raises:
        ValueError: if the index is outside ``0 .. 2**64 - 1``, a hash is not 32 bytes,
            there are more than 64 hashes, or ``checkpoint_note`` is not a well-formed
            signed checkpoint.
        TypeError: if a field has the wrong type.

    """

    index: int
    proof: tuple[bytes, ...]
    checkpoint_note: str
    extra: bytes | None = None

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, int):
            raise TypeError("proof index must be an int")
        if not 0 <= self.index <= MAX_TREE_SIZE:
            raise ValueError(f"proof index {self.index} is outside 0 .. 2**64 - 1")
        if not isinstance(self.proof, tuple):
            raise TypeError("proof hashes must be a tuple of bytes")
        if len(self.proof) > MAX_PROOF_HASHES:
            raise ValueError(f"an inclusion proof has at most {MAX_PROOF_HASHES} hashes")
        for h in self.proof:
            if not isinstance(h, bytes) or len(h) != HASH_SIZE:
                raise ValueError(f"every proof hash must be {HASH_SIZE} bytes")
        if self.extra is not None and not isinstance(self.extra, bytes):
            raise TypeError("proof extra data must be bytes or None")
        if not isinstance(self.checkpoint_note, str):
            raise TypeError("checkpoint_note must be a str")
        try:
            _check_checkpoint_note(self.checkpoint_note)
        except DecodeError as e:
            raise ValueError(f"checkpoint_note is not a signed checkpoint: {e}") from e

    def format(self) -> str:
        """Render the proof text (c2sp.org/tlog-proof "Format")."""
        lines = [TLOG_PROOF_HEADER]
        if self.extra is not None:
            lines.append(f"extra {_b64encode(self.extra)}")
        lines.append(f"index {self.index}")
        lines.extend(_b64encode(h) for h in self.proof)
        return "\n".join(lines) + "\n\n" + self.checkpoint_note


def format_tlog_proof(
    index: int, proof: Sequence[bytes], checkpoint_note: str, extra: bytes | None = None
) -> str:
    """Render a c2sp.org/tlog-proof@v1 proof.

    ``proof`` is the RFC 9162 inclusion path from the leaf's sibling up to the root's
    child; ``checkpoint_note`` is the signed checkpoint, included verbatim.

    Raises:
        ValueError: as :class:`TlogProof`.
        TypeError: as :class:`TlogProof`.

    """
    return TlogProof(index, tuple(proof), checkpoint_note, extra).format()


def parse_tlog_proof(text: str | bytes) -> TlogProof:
    """Parse a c2sp.org/tlog-proof@v1 proof, strictly; verifies nothing.

    Raises:
        DecodeError: if the header, extra line, index line, a hash line or the embedded
            signed checkpoint is malformed, or the proof is too large.

    """
    proof_text = _as_text(text, "tlog proof", _MAX_TLOG_PROOF_SIZE)
    _check_no_controls(proof_text, "tlog proof")
    # Every line before the checkpoint is non-empty, so the first blank line ends them.
    head, blank, checkpoint_note = proof_text.partition("\n\n")
    if not blank:
        raise DecodeError("tlog proof has no blank line before the checkpoint")
    lines = head.split("\n")
    if lines[0] != TLOG_PROOF_HEADER:
        raise DecodeError(f"tlog proof does not start with the line {TLOG_PROOF_HEADER!r}")
    position = 1
    extra: bytes | None = None
    if position < len(lines) and lines[position].startswith("extra "):
        extra = _b64decode(lines[position][len("extra ") :], "tlog proof extra data")
        position += 1
    if position >= len(lines) or not lines[position].startswith("index "):
        raise DecodeError("tlog proof has no 'index N' line")
    index = _parse_uint64(lines[position][len("index ") :], "tlog proof index")
    hash_lines = lines[position + 1 :]
    if len(hash_lines) > MAX_PROOF_HASHES:
        raise DecodeError(f"tlog proof has {len(hash_lines)} hashes, more than {MAX_PROOF_HASHES}")
    hashes: list[bytes] = []
    for number, line in enumerate(hash_lines, start=1):
        h = _b64decode(line, f"tlog proof hash {number}")
        if len(h) != HASH_SIZE:
            raise DecodeError(f"tlog proof hash {number} is {len(h)} bytes, expected {HASH_SIZE}")
        hashes.append(h)
    _check_checkpoint_note(checkpoint_note)
    return TlogProof(index=index, proof=tuple(hashes), checkpoint_note=checkpoint_note, extra=extra)
