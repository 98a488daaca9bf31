"""Tests for ledger.note: signed notes, vkeys, checkpoints and tlog-proof@v1."""

from __future__ import annotations

import base64
import contextlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger.errors import DecodeError, ProofError
from memroot.ledger.note import (
    MAX_NOTE_SIZE,
    MAX_SIGNATURES,
    TLOG_PROOF_HEADER,
    Checkpoint,
    TlogProof,
    Verifier,
    format_tlog_proof,
    open_checkpoint,
    open_note,
    parse_checkpoint,
    parse_tlog_proof,
    sign_checkpoint,
    sign_note,
    vkey_of,
)
from memroot.ledger.signing import Ed25519Signer, key_hash

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
SUMDB_NOTE = (VECTORS / "signed-note" / "sumdb-checkpoint.txt").read_bytes()
SUMDB_VKEY = (VECTORS / "signed-note" / "sumdb.vkey").read_text().removesuffix("\n")
SUMDB_ORIGIN = "go.sum database tree"
KAT_PATH = VECTORS / "memroot" / "checkpoint-kat.txt"
KAT_GENERATOR = VECTORS / "memroot" / "gen_checkpoint_kat.py"

ORIGIN = "example.org/log"
LOG_KEY = Ed25519Signer.from_seed(ORIGIN, bytes(range(32)))
LOG = Verifier.from_signer(LOG_KEY)
WITNESS_KEY = Ed25519Signer.from_seed("witness.example", bytes(range(1, 33)))
WITNESS = Verifier.from_signer(WITNESS_KEY)
ROOT = bytes(range(32))

MALFORMED_OR_UNVERIFIED = (DecodeError, ProofError)

# Lines that can sit in a note text: anything but newline, ASCII controls and surrogates.
line_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, exclude_categories=["Cs"]), max_size=30
)
nonempty_line = line_text.filter(bool)
checkpoints = st.builds(
    Checkpoint,
    origin=nonempty_line,
    size=st.integers(min_value=0, max_value=2**64 - 1),
    root=st.binary(min_size=32, max_size=32),
    extensions=st.lists(nonempty_line, max_size=3).map(tuple),
)


def _sumdb_verifier() -> Verifier:
    return Verifier.from_vkey(SUMDB_VKEY)


def _checkpoint_note(size: int = 5, signers: tuple[Ed25519Signer, ...] = (LOG_KEY,)) -> str:
    return sign_checkpoint(Checkpoint(ORIGIN, size, ROOT), list(signers))


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_checkpoint_kat", KAT_GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_kat() -> dict[str, str]:
    text = KAT_PATH.read_text(encoding="utf-8")
    head, note = text.split("note\n", 1)
    fields = dict(line.split(" ", 1) for line in head.splitlines())
    fields["note"] = note
    return fields


# --------------------------------------------------------------------------- the Go sumdb note


def test_sumdb_note_opens_with_its_vkey_and_origin() -> None:
    """The real Go checksum database checkpoint verifies with its published vkey."""
    signed = open_checkpoint(SUMDB_NOTE, [_sumdb_verifier()], origin=SUMDB_ORIGIN)
    assert signed.signer_names == ("sum.golang.org",)
    assert signed.checkpoint.origin == SUMDB_ORIGIN
    assert signed.checkpoint.size == 63096908
    assert signed.checkpoint.root == base64.b64decode(
        "8lHrQPRYe4KT4WQ9/Qk8/taKnD6IRHbFgfN7vQE2Y54="
    )
    assert signed.checkpoint.extensions == ()
    assert signed.note == SUMDB_NOTE.decode()


def test_sumdb_note_text_is_the_checkpoint_body() -> None:
    """open_note returns the signed text, which re-renders byte for byte from the checkpoint."""
    note = open_note(SUMDB_NOTE.decode(), [_sumdb_verifier()])
    assert parse_checkpoint(note.text).body() == note.text
    assert SUMDB_NOTE.decode().startswith(note.text + "\n\u2014 ")


def test_sumdb_note_rejects_every_single_byte_change() -> None:
    """Replacing any one byte of the note with any other value is rejected."""
    verifiers = [_sumdb_verifier()]
    for position in range(len(SUMDB_NOTE)):
        for value in range(256):
            if value == SUMDB_NOTE[position]:
                continue
            changed = bytearray(SUMDB_NOTE)
            changed[position] = value
            with pytest.raises(MALFORMED_OR_UNVERIFIED):
                open_checkpoint(bytes(changed), verifiers, origin=SUMDB_ORIGIN)


def test_sumdb_note_rejects_every_bit_flip_in_body_and_signature() -> None:
    """Flipping any bit of any byte in the body or the signature line is rejected."""
    verifiers = [_sumdb_verifier()]
    for position in range(len(SUMDB_NOTE)):
        for bit in range(8):
            changed = bytearray(SUMDB_NOTE)
            changed[position] ^= 1 << bit
            with pytest.raises(MALFORMED_OR_UNVERIFIED):
                open_note(bytes(changed), verifiers)


def test_sumdb_note_with_renamed_signer_has_no_trusted_signature() -> None:
    """Changing the key name on the signature line makes it unknown, so nothing is trusted."""
    renamed = SUMDB_NOTE.replace(b"\xe2\x80\x94 sum.golang.org ", b"\xe2\x80\x94 sum.golang.orh ")
    assert renamed != SUMDB_NOTE
    with pytest.raises(ProofError, match="no signature by a trusted key") as info:
        open_note(renamed, [_sumdb_verifier()])
    assert "sum.golang.org+033de0ae" in str(info.value)


def test_sumdb_note_with_other_origin_is_refused() -> None:
    """A genuine checkpoint for another log is refused when an origin is expected."""
    with pytest.raises(ProofError, match="not the expected"):
        open_checkpoint(SUMDB_NOTE, [_sumdb_verifier()], origin="example.org/log")


def test_sumdb_vkey_round_trips() -> None:
    """The sumdb vkey parses and renders back to the same text."""
    verifier = _sumdb_verifier()
    assert verifier.name == "sum.golang.org"
    assert verifier.key_id.hex() == "033de0ae"
    assert verifier.vkey() == SUMDB_VKEY


def test_sumdb_vkey_with_changed_name_or_hash_is_refused() -> None:
    """A vkey whose key name or key hash was changed fails to parse: the hash binds them."""
    name, id_hex, key64 = SUMDB_VKEY.split("+", 2)
    changed = [f"sum.golang.orh+{id_hex}+{key64}", f"{name}x+{id_hex}+{key64}"]
    changed += [f"{name}+{int(id_hex, 16) ^ (1 << bit):08x}+{key64}" for bit in range(32)]
    for vkey in changed:
        with pytest.raises(DecodeError, match="does not match"):
            Verifier.from_vkey(vkey)


def test_sumdb_vkey_any_single_byte_change_cannot_open_the_note() -> None:
    """After any one-byte change, the vkey is refused or no longer opens the sumdb note."""
    raw = SUMDB_VKEY.encode()
    for position in range(len(raw)):
        for value in range(256):
            if value == raw[position]:
                continue
            changed = bytearray(raw)
            changed[position] = value
            try:
                verifier = Verifier.from_vkey(bytes(changed))
            except DecodeError:
                continue
            with pytest.raises(ProofError):
                open_note(SUMDB_NOTE, [verifier])


def test_sumdb_note_needs_the_sumdb_key_not_just_its_name() -> None:
    """Another key under the name sum.golang.org does not open the sumdb note."""
    impostor = Verifier.from_signer(Ed25519Signer.generate("sum.golang.org"))
    with pytest.raises(ProofError, match="no signature by a trusted key"):
        open_note(SUMDB_NOTE, [impostor])


def test_same_key_under_another_name_is_unknown() -> None:
    """The sumdb public key published under another name is a different, unknown key."""
    real = _sumdb_verifier()
    name = "sum.golang.org.evil"
    renamed = Verifier(name, key_hash(name, real.public_key), real.public_key)
    with pytest.raises(ProofError):
        open_note(SUMDB_NOTE, [renamed])


# --------------------------------------------------------------------------- vkeys


def test_vkey_round_trip() -> None:
    """vkey_of renders a vkey that parses back to the signer's name, key ID and key."""
    text = vkey_of(LOG_KEY)
    verifier = Verifier.from_vkey(text)
    assert verifier == LOG
    assert (verifier.name, verifier.key_id, verifier.public_key) == (
        LOG_KEY.name,
        LOG_KEY.key_id,
        LOG_KEY.public_key,
    )
    assert verifier.vkey() == text


def _bad_vkeys() -> list[tuple[str, str, str]]:
    name, id_hex, key64 = vkey_of(LOG_KEY).split("+", 2)
    raw = base64.b64decode(key64)

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    def with_key(data: bytes) -> str:
        return f"{name}+{key_hash(name, data[1:]).hex()}+{b64(data)}"

    return [
        ("one part", name, "form"),
        ("two parts", f"{name}+{id_hex}", "form"),
        ("empty name", f"+{id_hex}+{key64}", "name"),
        ("name with space", f"a b+{id_hex}+{key64}", "name"),
        ("name with tab", f"a\tb+{id_hex}+{key64}", "name"),
        ("name with nbsp", f"a\u00a0b+{id_hex}+{key64}", "name"),
        ("uppercase hash", f"{name}+{id_hex.upper()}+{key64}", "hex"),
        ("short hash", f"{name}+{id_hex[:7]}+{key64}", "hex"),
        ("long hash", f"{name}+0{id_hex}+{key64}", "hex"),
        ("0x hash", f"{name}+0x{id_hex[:6]}+{key64}", "hex"),
        ("not base64", f"{name}+{id_hex}+{key64[:-2]}!!", "base64"),
        ("truncated key data", f"{name}+{id_hex}+{key64[:-1]}", "base64"),
        ("empty key", f"{name}+{id_hex}+", "empty"),
        ("algorithm 2", with_key(bytes([2]) + raw[1:]), "algorithm"),
        ("short key", f"{name}+{id_hex}+{b64(raw[:-1])}", "bytes"),
        ("long key", f"{name}+{id_hex}+{b64(raw + b'x')}", "bytes"),
        ("trailing newline", vkey_of(LOG_KEY) + "\n", "base64"),
        ("leading space", " " + vkey_of(LOG_KEY), "name"),
        ("wrong hash", f"{name}+{int(id_hex, 16) ^ 1:08x}+{key64}", "does not match"),
    ]


@pytest.mark.parametrize(
    ("case", "vkey", "says"), _bad_vkeys(), ids=[c for c, _, _ in _bad_vkeys()]
)
def test_from_vkey_rejects_malformed(case: str, vkey: str, says: str) -> None:
    """Every way a vkey can be malformed raises DecodeError naming the problem."""
    with pytest.raises(DecodeError, match=says):
        Verifier.from_vkey(vkey)


def test_verifier_construction_checks_key_id() -> None:
    """A Verifier whose key ID does not match its name and key cannot be constructed."""
    with pytest.raises(ValueError):
        Verifier(ORIGIN, b"\x00\x00\x00\x00", LOG_KEY.public_key)
    with pytest.raises(ValueError):
        Verifier("other.example", LOG_KEY.key_id, LOG_KEY.public_key)
    with pytest.raises(ValueError):
        Verifier(ORIGIN, LOG_KEY.key_id, LOG_KEY.public_key[:31])


# --------------------------------------------------------------------------- signed notes


@given(st.lists(line_text, min_size=1, max_size=6))
def test_sign_then_open_round_trip(lines: list[str]) -> None:
    """Any valid text signs into a note that opens to the same text."""
    text = "\n".join(lines) + "\n"
    note = sign_note(text, [LOG_KEY])
    opened = open_note(note, [LOG])
    assert opened.text == text
    assert opened.signer_names == (ORIGIN,)


def test_sign_note_layout() -> None:
    """A signed note is the text, a blank line, and one em-dash line per signer."""
    note = sign_note("hello\n", [LOG_KEY, WITNESS_KEY])
    text, sigs = note.split("\n\n")
    assert text == "hello"
    lines = sigs.splitlines()
    assert [line.split(" ")[:2] for line in lines] == [
        ["\u2014", ORIGIN],
        ["\u2014", "witness.example"],
    ]
    raw = base64.b64decode(lines[0].split(" ")[2])
    assert raw[:4] == LOG_KEY.key_id
    assert LOG.verify(b"hello\n", raw[4:])


def test_note_text_may_contain_blank_lines() -> None:
    """The text is split from the signatures at the last blank line."""
    text = "a\n\nb\n\n"
    assert open_note(sign_note(text, [LOG_KEY]), [LOG]).text == text


@pytest.mark.parametrize(
    "text",
    ["", "no newline", "tab\there\n", "cr\r\n", "nul\x00\n", "surrogate \ud800\n"],
    ids=["empty", "no-newline", "tab", "cr", "nul", "surrogate"],
)
def test_sign_note_rejects_invalid_text(text: str) -> None:
    """sign_note refuses text a verifier would reject."""
    with pytest.raises(ValueError):
        sign_note(text, [LOG_KEY])


def test_sign_note_rejects_bad_signer_lists() -> None:
    """sign_note needs at least one signer and no two with the same key."""
    with pytest.raises(ValueError):
        sign_note("x\n", [])
    with pytest.raises(ValueError):
        sign_note("x\n", [LOG_KEY, LOG_KEY])


class _WrongKeySigner:
    """A Signer whose signatures come from another key than the one it reports."""

    def __init__(self, reported: Ed25519Signer, actual: Ed25519Signer) -> None:
        self.name = reported.name
        self.key_id = reported.key_id
        self.public_key = reported.public_key
        self._actual = actual

    def sign(self, message: bytes) -> bytes:
        return self._actual.sign(message)


def test_sign_note_refuses_a_signature_that_does_not_verify() -> None:
    """sign_note checks each signature against the signer's public key before emitting it."""
    with pytest.raises(ValueError, match="does not verify"):
        sign_note("x\n", [_WrongKeySigner(LOG_KEY, WITNESS_KEY)])


def test_sign_note_refuses_notes_over_the_size_limit() -> None:
    """sign_note never produces a note larger than open_note accepts."""
    with pytest.raises(ValueError):
        sign_note("x" * MAX_NOTE_SIZE + "\n", [LOG_KEY])


def test_open_note_accepts_str_and_bytes() -> None:
    """open_note takes the note as str or as UTF-8 bytes."""
    note = sign_note("hello\n", [LOG_KEY])
    assert open_note(note, [LOG]) == open_note(note.encode(), [LOG])


def test_open_note_skips_unknown_signatures() -> None:
    """Signatures by keys the verifier does not know are ignored."""
    note = sign_note("hello\n", [WITNESS_KEY, LOG_KEY])
    assert open_note(note, [LOG]).signer_names == (ORIGIN,)
    assert open_note(note, [WITNESS]).signer_names == ("witness.example",)
    assert open_note(note, [LOG, WITNESS]).signer_names == ("witness.example", ORIGIN)


def test_key_rotation_same_name() -> None:
    """A note signed by an old and a new key of one log opens with either verifier alone."""
    old = Ed25519Signer.generate(ORIGIN)
    new = Ed25519Signer.generate(ORIGIN)
    note = sign_checkpoint(Checkpoint(ORIGIN, 3, ROOT), [old, new])
    for trusted in ([Verifier.from_signer(old)], [Verifier.from_signer(new)]):
        assert open_checkpoint(note, trusted, origin=ORIGIN).signer_names == (ORIGIN,)
    both = [Verifier.from_signer(old), Verifier.from_signer(new)]
    assert open_checkpoint(note, both, origin=ORIGIN).checkpoint.size == 3


def test_key_rotation_refuses_a_key_that_did_not_sign() -> None:
    """With only a verifier for a key that did not sign, the note is refused, naming it."""
    old = Ed25519Signer.generate(ORIGIN)
    new = Ed25519Signer.generate(ORIGIN)
    other = Verifier.from_signer(Ed25519Signer.generate(ORIGIN))
    note = sign_checkpoint(Checkpoint(ORIGIN, 3, ROOT), [old, new])
    with pytest.raises(ProofError, match="no signature by a trusted key") as info:
        open_checkpoint(note, [other], origin=ORIGIN)
    assert str(other) in str(info.value)


def test_no_verifiers_means_no_trusted_signature() -> None:
    """A note opened with no trusted keys is refused."""
    with pytest.raises(ProofError, match="no signature by a trusted key"):
        open_note(sign_note("x\n", [LOG_KEY]), [])


def _replace_signature(note: str, signer: Ed25519Signer, signature: bytes) -> str:
    prefix = f"\u2014 {signer.name} "
    lines = note.split("\n")
    out = []
    for line in lines:
        if line.startswith(prefix):
            b64 = base64.b64encode(signer.key_id + signature).decode()
            line = prefix + b64
        out.append(line)
    return "\n".join(out)


def test_bad_signature_by_a_known_key_rejects_the_note() -> None:
    """A known key's failing signature rejects the note, even if another trusted key verified."""
    note = sign_note("hello\n", [LOG_KEY, WITNESS_KEY])
    forged = _replace_signature(note, WITNESS_KEY, WITNESS_KEY.sign(b"other\n"))
    with pytest.raises(ProofError, match="does not verify"):
        open_note(forged, [LOG, WITNESS])
    assert open_note(forged, [LOG]).signer_names == (ORIGIN,)


def test_duplicate_signature_lines_must_all_verify() -> None:
    """A second, forged signature line for the same key rejects the note."""
    note = sign_note("hello\n", [LOG_KEY])
    forged_line = _replace_signature(note, LOG_KEY, bytes(64)).split("\n\n")[1]
    with pytest.raises(ProofError):
        open_note(note + forged_line, [LOG])
    assert open_note(note + note.split("\n\n")[1], [LOG]).signer_names == (ORIGIN,)


def test_duplicate_identical_verifiers_are_fine() -> None:
    """Passing the same verifier twice is not an ambiguity."""
    assert open_note(sign_note("x\n", [LOG_KEY]), [LOG, LOG]).signer_names == (ORIGIN,)


def _unknown_sig_line(i: int) -> str:
    return f"\u2014 unknown{i}.example {base64.b64encode(bytes(68)).decode()}\n"


def test_open_note_accepts_up_to_100_signatures() -> None:
    """A note with 100 signature lines (99 unknown, 1 trusted) opens."""
    note = sign_note("x\n", [LOG_KEY])
    padded = note + "".join(_unknown_sig_line(i) for i in range(MAX_SIGNATURES - 1))
    assert open_note(padded, [LOG]).signer_names == (ORIGIN,)


def test_open_note_rejects_more_than_100_signatures() -> None:
    """A note with 101 signature lines is refused before any verification."""
    note = sign_note("x\n", [LOG_KEY])
    padded = note + "".join(_unknown_sig_line(i) for i in range(MAX_SIGNATURES))
    with pytest.raises(DecodeError, match="more than 100"):
        open_note(padded, [LOG])


def test_open_note_rejects_notes_over_1_mib() -> None:
    """A note larger than 1 MiB is refused, as str or bytes."""
    big = "x" * MAX_NOTE_SIZE + "\n\n" + _unknown_sig_line(0)
    with pytest.raises(DecodeError, match="limit"):
        open_note(big, [LOG])
    with pytest.raises(DecodeError, match="limit"):
        open_note(big.encode(), [LOG])


def _set_padding_bit(b64: str) -> str:
    """Return ``b64`` with a non-zero padding bit: the same bytes, a non-canonical encoding."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    body = b64.rstrip("=")
    last = alphabet[alphabet.index(body[-1]) | 1]
    changed = body[:-1] + last + "=" * (len(b64) - len(body))
    assert changed != b64
    assert base64.b64decode(changed) == base64.b64decode(b64)
    return changed


def _malformed_notes() -> list[tuple[str, str | bytes]]:
    good = sign_note("hello\n", [LOG_KEY])
    text, sig = good.split("\n\n")
    sig64 = sig.split(" ")[2].removesuffix("\n")
    assert sig64.endswith("=") and not sig64.endswith("==")  # 68 bytes: two padding bits
    return [
        ("empty", ""),
        ("text only", "hello\n"),
        ("no blank line", text + "\n" + sig),
        ("no signature lines", text + "\n\n"),
        ("no final newline", good[:-1]),
        ("hyphens", good.replace("\u2014", "--")),
        ("en dash", good.replace("\u2014", "\u2013")),
        ("no space after dash", good.replace("\u2014 ", "\u2014")),
        ("two spaces", good.replace(f"{ORIGIN} ", f"{ORIGIN}  ")),
        ("no signature", good.replace(" " + sig64, "")),
        ("empty signature", good.replace(sig64, "")),
        ("signature too short", good.replace(sig64, base64.b64encode(bytes(4)).decode())),
        ("unpadded signature", good.replace(sig64, sig64.rstrip("="))),
        ("non-canonical base64", good.replace(sig64, _set_padding_bit(sig64))),
        ("url-safe base64", good.replace(sig64, "-" + sig64[1:])),
        ("space in base64", good.replace(sig64, sig64[:10] + " " + sig64[10:])),
        ("name with plus", good.replace(ORIGIN, "example.org+log")),
        ("carriage return", good.replace("hello\n", "hello\r\n")),
        ("tab in text", good.replace("hello", "hel\tlo")),
        ("nul in text", good.replace("hello", "hel\x00lo")),
        ("escape in signature line", good.replace(ORIGIN, ORIGIN + "\x1b")),
        ("not utf-8", good.encode().replace(b"hello", b"hel\xfflo")),
        ("overlong utf-8", good.encode().replace(b"hello", b"hel\xc0\xaflo")),
        ("surrogate", good.replace("hello", "hel\ud800lo")),
        ("junk after signatures", good + "junk\n"),
        ("blank line after signatures", good + "\n"),
    ]


@pytest.mark.parametrize(
    ("case", "note"), _malformed_notes(), ids=[c for c, _ in _malformed_notes()]
)
def test_open_note_rejects_malformed(case: str, note: str | bytes) -> None:
    """Malformed notes raise DecodeError (or, where the text changed, ProofError)."""
    with pytest.raises(MALFORMED_OR_UNVERIFIED):
        open_note(note, [LOG])


@pytest.mark.parametrize(
    "case", ["no signature lines", "hyphens", "non-canonical base64", "not utf-8", "empty"]
)
def test_open_note_structural_errors_are_decode_errors(case: str) -> None:
    """Structurally malformed notes raise DecodeError specifically."""
    note = dict(_malformed_notes())[case]
    with pytest.raises(DecodeError):
        open_note(note, [LOG])


# --------------------------------------------------------------------------- checkpoints


def test_checkpoint_body_format() -> None:
    """The body is origin, decimal size and base64 root, each ending in a newline."""
    cp = Checkpoint("example.org/log", 5, b"\xaa" * 32)
    assert cp.body() == "example.org/log\n5\nqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqo=\n"
    with_ext = Checkpoint("o", 0, bytes(32), ("ext one", "two"))
    assert with_ext.body().endswith("=\next one\ntwo\n")


@given(checkpoints)
def test_parse_checkpoint_inverts_body(cp: Checkpoint) -> None:
    """parse_checkpoint(cp.body()) == cp for every valid checkpoint."""
    assert parse_checkpoint(cp.body()) == cp
    assert parse_checkpoint(cp.body().encode()) == cp


@given(checkpoints)
@settings(max_examples=50)
def test_sign_open_checkpoint_round_trip(cp: Checkpoint) -> None:
    """A signed checkpoint opens to the same checkpoint with its origin."""
    note = sign_checkpoint(cp, [LOG_KEY])
    signed = open_checkpoint(note, [LOG], origin=cp.origin)
    assert signed.checkpoint == cp
    assert signed.note == note
    assert signed.signer_names == (ORIGIN,)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"origin": ""}, ValueError),
        ({"origin": "a\nb"}, ValueError),
        ({"origin": "a\tb"}, ValueError),
        ({"origin": "\ud800"}, ValueError),
        ({"size": -1}, ValueError),
        ({"size": 2**64}, ValueError),
        ({"size": True}, TypeError),
        ({"size": 1.0}, TypeError),
        ({"root": bytes(31)}, ValueError),
        ({"root": bytes(33)}, ValueError),
        ({"root": "a" * 32}, ValueError),
        ({"extensions": ["x"]}, TypeError),
        ({"extensions": ("",)}, ValueError),
        ({"extensions": ("a\nb",)}, ValueError),
    ],
)
def test_checkpoint_validates_at_construction(kwargs: dict[str, object], error: type) -> None:
    """A Checkpoint with an invalid field cannot be constructed."""
    fields: dict[str, object] = {"origin": ORIGIN, "size": 1, "root": ROOT}
    fields.update(kwargs)
    with pytest.raises(error):
        Checkpoint(**fields)  # type: ignore[arg-type]


def test_parse_checkpoint_accepts_zero_size_and_max_size() -> None:
    """Sizes 0 and 2**64 - 1 parse."""
    root64 = base64.b64encode(ROOT).decode()
    assert parse_checkpoint(f"o\n0\n{root64}\n").size == 0
    assert parse_checkpoint(f"o\n{2**64 - 1}\n{root64}\n").size == 2**64 - 1


def _bad_bodies() -> list[tuple[str, str]]:
    r = base64.b64encode(b"\xaa" * 32).decode()  # ends in "o=": padding bits are zero
    return [
        ("empty", ""),
        ("two lines", "o\n5\n"),
        ("no final newline", f"o\n5\n{r}"),
        ("empty origin", f"\n5\n{r}\n"),
        ("leading zero", f"o\n05\n{r}\n"),
        ("plus sign", f"o\n+5\n{r}\n"),
        ("minus sign", f"o\n-5\n{r}\n"),
        ("space before size", f"o\n 5\n{r}\n"),
        ("space after size", f"o\n5 \n{r}\n"),
        ("arabic digit", f"o\n\u0665\n{r}\n"),
        ("underscore", f"o\n1_000\n{r}\n"),
        ("hex size", f"o\n0x5\n{r}\n"),
        ("empty size", f"o\n\n{r}\n"),
        ("size 2**64", f"o\n{2**64}\n{r}\n"),
        ("huge size", f"o\n{'9' * 5000}\n{r}\n"),
        ("root unpadded", f"o\n5\n{r.rstrip('=')}\n"),
        ("root non-canonical", f"o\n5\n{r[:-2]}p=\n"),
        ("root url-safe", f"o\n5\n{'_' * 43}=\n"),
        ("root 31 bytes", f"o\n5\n{base64.b64encode(bytes(31)).decode()}\n"),
        ("root 33 bytes", f"o\n5\n{base64.b64encode(bytes(33)).decode()}\n"),
        ("root hex", f"o\n5\n{bytes(32).hex()}\n"),
        ("empty extension", f"o\n5\n{r}\n\n"),
        ("empty extension between", f"o\n5\n{r}\na\n\nb\n"),
        ("crlf", f"o\r\n5\r\n{r}\r\n"),
        ("tab in origin", f"o\tx\n5\n{r}\n"),
    ]


@pytest.mark.parametrize(("case", "body"), _bad_bodies(), ids=[c for c, _ in _bad_bodies()])
def test_parse_checkpoint_rejects_malformed(case: str, body: str) -> None:
    """Malformed checkpoint bodies raise DecodeError."""
    with pytest.raises(DecodeError):
        parse_checkpoint(body)


def test_open_checkpoint_of_a_note_that_is_not_a_checkpoint() -> None:
    """A validly signed note whose text is not a checkpoint raises DecodeError."""
    with pytest.raises(DecodeError):
        open_checkpoint(sign_note("hello\n", [LOG_KEY]), [LOG])


def test_open_checkpoint_without_origin_accepts_any_origin() -> None:
    """Without an expected origin, the signatures alone decide."""
    note = sign_checkpoint(Checkpoint("another.example/log", 1, ROOT), [LOG_KEY])
    assert open_checkpoint(note, [LOG]).checkpoint.origin == "another.example/log"
    with pytest.raises(ProofError):
        open_checkpoint(note, [LOG], origin=ORIGIN)


# --------------------------------------------------------------------------- tlog proofs


def test_format_tlog_proof_layout() -> None:
    """The proof is header, extra, index, hashes, a blank line, then the checkpoint verbatim."""
    note = _checkpoint_note()
    text = format_tlog_proof(3, [b"\x00" * 32, b"\xff" * 32], note, extra=b"hi")
    assert text == (
        f"{TLOG_PROOF_HEADER}\n"
        "extra aGk=\n"
        "index 3\n"
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"
        "//////////////////////////////////////////8=\n"
        "\n" + note
    )


def test_format_tlog_proof_without_extra_or_hashes() -> None:
    """Without extra data the line is omitted; an empty path leaves just the blank line."""
    note = _checkpoint_note(size=1)
    text = format_tlog_proof(0, [], note)
    assert text == f"{TLOG_PROOF_HEADER}\nindex 0\n\n{note}"
    assert parse_tlog_proof(text) == TlogProof(0, (), note, None)


@pytest.mark.parametrize("extra", [None, b"", b"\x00", b"extra data" * 10])
def test_tlog_proof_round_trip(extra: bytes | None) -> None:
    """parse_tlog_proof(format_tlog_proof(...)) gives back every field."""
    note = _checkpoint_note(signers=(LOG_KEY, WITNESS_KEY))
    hashes = [bytes([i]) * 32 for i in range(5)]
    proof = parse_tlog_proof(format_tlog_proof(17, hashes, note, extra))
    assert proof == TlogProof(17, tuple(hashes), note, extra)
    signed = open_checkpoint(proof.checkpoint_note, [LOG, WITNESS], origin=ORIGIN)
    assert signed.signer_names == (ORIGIN, "witness.example")


@given(
    index=st.integers(min_value=0, max_value=2**64 - 1),
    hashes=st.lists(st.binary(min_size=32, max_size=32), max_size=64),
    cp=checkpoints,
    extra=st.none() | st.binary(max_size=100),
)
@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
def test_parse_tlog_proof_inverts_format(
    index: int, hashes: list[bytes], cp: Checkpoint, extra: bytes | None
) -> None:
    """parse(format(x)) == x for every valid proof, and format(parse(t)) == t."""
    note = sign_checkpoint(cp, [LOG_KEY])
    proof = TlogProof(index, tuple(hashes), note, extra)
    text = format_tlog_proof(index, hashes, note, extra)
    assert text == proof.format()
    assert parse_tlog_proof(text) == proof
    assert parse_tlog_proof(text.encode()).format() == text


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((-1, [], "NOTE"), ValueError),
        ((2**64, [], "NOTE"), ValueError),
        ((True, [], "NOTE"), TypeError),
        ((0, [bytes(31)], "NOTE"), ValueError),
        ((0, [bytes(32)] * 65, "NOTE"), ValueError),
        ((0, [], "not a note\n"), ValueError),
        ((0, [], sign_note("hello\n", [LOG_KEY])), ValueError),
    ],
)
def test_format_tlog_proof_validates(args: tuple[object, ...], error: type) -> None:
    """format_tlog_proof refuses an invalid index, hash, path length or checkpoint note."""
    index, hashes, note = args
    if note == "NOTE":
        note = _checkpoint_note()
    with pytest.raises(error):
        format_tlog_proof(index, hashes, note)  # type: ignore[arg-type]


def _bad_proofs() -> list[tuple[str, str]]:
    note = _checkpoint_note()
    h = base64.b64encode(bytes(32)).decode()
    good = format_tlog_proof(1, [bytes(32)], note)
    return [
        ("empty", ""),
        ("no header", good.split("\n", 1)[1]),
        ("v2 header", good.replace("@v1", "@v2")),
        ("header with space", good.replace(TLOG_PROOF_HEADER, TLOG_PROOF_HEADER + " ")),
        ("no index", f"{TLOG_PROOF_HEADER}\n{h}\n\n{note}"),
        ("index without value", good.replace("index 1", "index ")),
        ("index leading zero", good.replace("index 1", "index 01")),
        ("index negative", good.replace("index 1", "index -1")),
        ("index 2**64", good.replace("index 1", f"index {2**64}")),
        ("index tab", good.replace("index 1", "index\t1")),
        ("extra after index", good.replace("index 1\n", "index 1\nextra aGk=\n")),
        ("extra not base64", good.replace("index 1", "extra !!\nindex 1")),
        ("extra unpadded", good.replace("index 1", "extra aGk\nindex 1")),
        ("two extra lines", good.replace("index 1", "extra aGk=\nextra aGk=\nindex 1")),
        ("hash 31 bytes", good.replace(h, base64.b64encode(bytes(31)).decode())),
        ("hash non-canonical", good.replace(h, h[:-2] + "B=")),
        ("65 hashes", format_tlog_proof(1, [], note).replace("\n\n", f"\n{h}" * 65 + "\n\n", 1)),
        ("no blank line", good.replace(f"{h}\n\n", f"{h}\n")),
        ("two blank lines", good.replace(f"{h}\n\n", f"{h}\n\n\n")),
        ("no checkpoint", good.split("\n\n")[0] + "\n\n"),
        ("unsigned checkpoint", good.split("\n\n")[0] + "\n\n" + note.split("\n\n")[0] + "\n"),
        ("checkpoint not a checkpoint", good.replace(note, sign_note("hi\n", [LOG_KEY]))),
        ("crlf", good.replace("\n", "\r\n")),
        ("trailing junk", good + "junk\n"),
    ]


@pytest.mark.parametrize(("case", "text"), _bad_proofs(), ids=[c for c, _ in _bad_proofs()])
def test_parse_tlog_proof_rejects_malformed(case: str, text: str) -> None:
    """Malformed proofs raise DecodeError."""
    with pytest.raises(DecodeError):
        parse_tlog_proof(text)


# --------------------------------------------------------------------------- fuzzing


def _only_our_errors(parse: Callable[[str | bytes], object], data: str | bytes) -> None:
    with contextlib.suppress(DecodeError, ProofError):
        parse(data)


@st.composite
def _mutations(draw: st.DrawFn, base: bytes) -> bytes:
    data = bytearray(base)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        position = draw(st.integers(min_value=0, max_value=len(data)))
        op = draw(st.sampled_from(["replace", "insert", "delete"]))
        if op == "insert" or position == len(data):
            data[position:position] = draw(st.binary(min_size=1, max_size=3))
        elif op == "replace":
            data[position] = draw(st.integers(min_value=0, max_value=255))
        else:
            del data[position : position + draw(st.integers(min_value=1, max_value=3))]
    return bytes(data)


GOOD_NOTE = sign_note(Checkpoint(ORIGIN, 9, ROOT, ("ext",)).body(), [LOG_KEY, WITNESS_KEY])
GOOD_PROOF = format_tlog_proof(4, [bytes(32), b"\x01" * 32], GOOD_NOTE, b"x")
inputs: st.SearchStrategy[str | bytes] = st.one_of(st.text(), st.binary())


@given(st.one_of(inputs, _mutations(GOOD_NOTE.encode()), _mutations(SUMDB_NOTE)))
@settings(max_examples=300)
def test_fuzz_open_note(data: str | bytes) -> None:
    """open_note raises only DecodeError or ProofError on arbitrary input."""
    _only_our_errors(lambda d: open_note(d, [LOG, WITNESS, _sumdb_verifier()]), data)
    _only_our_errors(lambda d: open_checkpoint(d, [LOG], origin=ORIGIN), data)


@given(st.one_of(inputs, _mutations(Checkpoint(ORIGIN, 9, ROOT, ("e",)).body().encode())))
@settings(max_examples=300)
def test_fuzz_parse_checkpoint(data: str | bytes) -> None:
    """parse_checkpoint raises only DecodeError on arbitrary input."""
    with contextlib.suppress(DecodeError):
        parse_checkpoint(data)


@given(st.one_of(inputs, _mutations(SUMDB_VKEY.encode()), _mutations(vkey_of(LOG_KEY).encode())))
@settings(max_examples=300)
def test_fuzz_from_vkey(data: str | bytes) -> None:
    """Verifier.from_vkey raises only DecodeError on arbitrary input."""
    with contextlib.suppress(DecodeError):
        Verifier.from_vkey(data)


@given(st.one_of(inputs, _mutations(GOOD_PROOF.encode())))
@settings(max_examples=300)
def test_fuzz_parse_tlog_proof(data: str | bytes) -> None:
    """parse_tlog_proof raises only DecodeError on arbitrary input."""
    with contextlib.suppress(DecodeError):
        parse_tlog_proof(data)


# --------------------------------------------------------------------------- known answers


def test_kat_file_is_what_the_generator_produces() -> None:
    """Regenerating checkpoint-kat.txt gives identical bytes (Ed25519 is deterministic)."""
    generator = _load_generator()
    assert generator.render().encode("utf-8") == KAT_PATH.read_bytes()


def test_kat_note_opens_with_kat_vkey() -> None:
    """The committed KAT note verifies with the committed vkey and holds the stated tree."""
    kat = _read_kat()
    assert kat["seed"] == bytes(range(1, 33)).hex()
    verifier = Verifier.from_vkey(kat["vkey"])
    signed = open_checkpoint(kat["note"], [verifier], origin="example.org/memroot/test")
    assert signed.checkpoint == Checkpoint("example.org/memroot/test", 5, b"\xaa" * 32)
    assert signed.signer_names == ("example.org/memroot/test",)


def test_kat_keys_derive_from_the_seed() -> None:
    """The KAT's private key text and vkey are those of the stated seed."""
    kat = _read_kat()
    signer = Ed25519Signer.from_private_key_text(kat["skey"])
    assert signer.public_key == Ed25519Signer.from_seed(signer.name, bytes(range(1, 33))).public_key
    assert vkey_of(signer) == kat["vkey"]
    assert sign_checkpoint(Checkpoint(signer.name, 5, b"\xaa" * 32), [signer]) == kat["note"]
