"""Tests for ledger.signing: Ed25519 keys, key IDs, key files and signature checks."""

from __future__ import annotations

import base64
import os
import pickle
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memroot.ledger.errors import KeyFileError
from memroot.ledger.signing import (
    Ed25519Signer,
    Signer,
    is_valid_key_name,
    key_hash,
    verify_signature,
)

VECTORS = Path(__file__).resolve().parents[2] / "vectors"

# golang.org/x/mod/sumdb/note package documentation, "Example": a published key pair and the
# note it signs, so our key formats and signatures are checked against Go's, byte for byte.
GO_DOC_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_DOC_VKEY_DATA = "ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_DOC_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_DOC_SIG = (
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
)

# RFC 8032 section 7.1, TEST 1 (empty message).
RFC8032_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC8032_SIG = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b4"
    "6bd25bf5f0595bbe24655141438e7a100b"
)

SEED = bytes(range(1, 33))


def _key_text(name: str = "example.org/log") -> str:
    return Ed25519Signer.from_seed(name, SEED).private_key_text()


def _write(path: Path, data: str | bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    os.chmod(path, mode)
    return path


# --------------------------------------------------------------------------- key names, IDs


@pytest.mark.parametrize(
    "name", ["sum.golang.org", "example.org/memroot/test", "PeterNeumann", "ünïcödé/λ", "a"]
)
def test_valid_key_names(name: str) -> None:
    """Names that are non-empty UTF-8 without spaces or '+' are valid."""
    assert is_valid_key_name(name)


@pytest.mark.parametrize(
    "name",
    ["", "a+b", "a b", "a\tb", "a\nb", "a\u00a0b", "a\u3000b", "a\u2028b", "\ud800", "a\x00b"],
)
def test_invalid_key_names(name: str) -> None:
    """Empty names and names with '+', Unicode spaces, controls or surrogates are invalid."""
    assert not is_valid_key_name(name)


def test_key_hash_matches_go_sumdb_vkey() -> None:
    """key_hash reproduces the key ID 033de0ae published in the Go checksum database vkey."""
    name, id_hex, key64 = (VECTORS / "signed-note" / "sumdb.vkey").read_text().strip().split("+", 2)
    raw = base64.b64decode(key64)
    assert raw[0] == 0x01
    assert key_hash(name, raw[1:]).hex() == id_hex == "033de0ae"


def test_key_hash_rejects_bad_input() -> None:
    """key_hash refuses an invalid name or a public key that is not 32 bytes."""
    with pytest.raises(ValueError):
        key_hash("a b", bytes(32))
    with pytest.raises(ValueError):
        key_hash("a", bytes(31))


# --------------------------------------------------------------------------- signing


def test_rfc8032_test_vector() -> None:
    """Signing is plain RFC 8032 Ed25519 (section 7.1, TEST 1)."""
    signer = Ed25519Signer.from_seed("rfc8032", RFC8032_SEED)
    assert signer.public_key == RFC8032_PUBLIC
    assert signer.sign(b"") == RFC8032_SIG
    assert verify_signature(RFC8032_PUBLIC, b"", RFC8032_SIG)


def test_go_doc_private_key_signs_like_go() -> None:
    """The Go sumdb/note example key loads, has Go's key ID and reproduces Go's signature."""
    signer = Ed25519Signer.from_private_key_text(GO_DOC_SKEY)
    assert signer.name == "PeterNeumann"
    assert signer.key_id.hex() == "c74f20a3"
    assert base64.b64encode(b"\x01" + signer.public_key).decode() == GO_DOC_VKEY_DATA
    sig = base64.b64decode(GO_DOC_SIG)
    assert sig[:4] == signer.key_id
    assert signer.sign(GO_DOC_TEXT.encode()) == sig[4:]
    assert signer.private_key_text() == GO_DOC_SKEY


def test_ed25519_signer_is_a_signer() -> None:
    """Ed25519Signer provides the Signer protocol: name, 4-byte key ID, 32-byte key, sign."""
    signer: Signer = Ed25519Signer.generate("example.org/log")
    assert signer.name == "example.org/log"
    assert len(signer.key_id) == 4
    assert signer.key_id == key_hash(signer.name, signer.public_key)
    assert len(signer.public_key) == 32
    assert verify_signature(signer.public_key, b"m", signer.sign(b"m"))


def test_generate_gives_distinct_keys() -> None:
    """Two generated keys differ."""
    a = Ed25519Signer.generate("x")
    b = Ed25519Signer.generate("x")
    assert a.public_key != b.public_key


def test_generate_rejects_invalid_name() -> None:
    """A key cannot be created under an invalid signed-note name."""
    for name in ["", "a+b", "a b"]:
        with pytest.raises(ValueError):
            Ed25519Signer.generate(name)


def test_from_seed_rejects_wrong_size() -> None:
    """A seed must be exactly 32 bytes."""
    with pytest.raises(ValueError):
        Ed25519Signer.from_seed("x", bytes(31))


def test_from_seed_is_deterministic() -> None:
    """The same seed and name give the same key and the same signatures."""
    a = Ed25519Signer.from_seed("x", SEED)
    b = Ed25519Signer.from_seed("x", SEED)
    assert a.public_key == b.public_key
    assert a.sign(b"msg") == b.sign(b"msg")


def test_verify_signature_rejects_wrong_message_key_or_signature() -> None:
    """verify_signature is False for another message, key or a changed signature."""
    signer = Ed25519Signer.from_seed("x", SEED)
    other = Ed25519Signer.from_seed("x", bytes(32))
    sig = signer.sign(b"message")
    assert verify_signature(signer.public_key, b"message", sig)
    assert not verify_signature(signer.public_key, b"messagf", sig)
    assert not verify_signature(other.public_key, b"message", sig)
    changed = bytes([sig[0] ^ 1]) + sig[1:]
    assert not verify_signature(signer.public_key, b"message", changed)
    assert not verify_signature(signer.public_key, b"message", sig[:63])
    assert not verify_signature(signer.public_key[:31], b"message", sig)


@given(st.binary(max_size=40), st.binary(max_size=64), st.binary(max_size=70))
def test_verify_signature_never_raises(public_key: bytes, message: bytes, sig: bytes) -> None:
    """verify_signature returns False, never raises, for arbitrary keys and signatures."""
    assert verify_signature(public_key, message, sig) is False


# --------------------------------------------------------------------------- private key text


def test_private_key_text_round_trip() -> None:
    """A key's private key text loads back to the same name, key ID and key."""
    signer = Ed25519Signer.generate("example.org/log")
    text = signer.private_key_text()
    assert text.startswith("PRIVATE+KEY+example.org/log+" + signer.key_id.hex() + "+")
    again = Ed25519Signer.from_private_key_text(text)
    assert (again.name, again.key_id, again.public_key) == (
        signer.name,
        signer.key_id,
        signer.public_key,
    )
    assert again.sign(b"m") == signer.sign(b"m")


def _bad_key_texts() -> list[tuple[str, str]]:
    good = _key_text()
    prefix, key64 = good.rsplit("+", 1)
    head = "PRIVATE+KEY+example.org/log+"
    id_hex = good[len(head) : len(head) + 8]
    raw = base64.b64decode(key64)
    b64 = base64.b64encode
    return [
        ("no prefix", good[len("PRIVATE+KEY+") :]),
        ("lowercase prefix", "private+key+" + good[len("PRIVATE+KEY+") :]),
        ("missing parts", "PRIVATE+KEY+example.org/log"),
        ("empty name", f"PRIVATE+KEY++{id_hex}+{key64}"),
        ("name with space", f"PRIVATE+KEY+a b+{id_hex}+{key64}"),
        ("uppercase hash", f"{head}{id_hex.upper()}+{key64}"),
        ("short hash", f"{head}{id_hex[:7]}+{key64}"),
        ("not base64", f"{head}{id_hex}+!!!!"),
        ("truncated base64", f"{prefix}+{key64[:-1]}"),
        ("base64 with newline", f"{prefix}+{key64[:20]}\n{key64[20:]}"),
        ("url-safe base64", f"{prefix}+{key64.replace('/', '_').replace('+', '-')}_"),
        ("seed too short", f"{prefix}+{b64(raw[:-1]).decode()}"),
        ("wrong algorithm", f"{prefix}+{b64(bytes([2]) + raw[1:]).decode()}"),
        ("hash mismatch", f"{head}{int(id_hex, 16) ^ 1:08x}+{key64}"),
        ("other name", good.replace("example.org/log", "example.org/loh")),
        ("trailing space", good + " "),
    ]


@pytest.mark.parametrize(("case", "text"), _bad_key_texts(), ids=[c for c, _ in _bad_key_texts()])
def test_from_private_key_text_rejects_malformed(case: str, text: str) -> None:
    """Malformed private key text raises KeyFileError that does not reveal the key data."""
    with pytest.raises(KeyFileError) as info:
        Ed25519Signer.from_private_key_text(text)
    key64 = _key_text().rsplit("+", 1)[1]
    assert key64[:20] not in str(info.value)


def test_hash_mismatch_is_reported_as_such() -> None:
    """A key hash that does not match the key says so."""
    good = _key_text()
    head, key64 = good.rsplit("+", 1)
    bad = head[:-8] + "00000000+" + key64
    with pytest.raises(KeyFileError, match="does not match"):
        Ed25519Signer.from_private_key_text(bad)


def test_repr_does_not_reveal_private_key() -> None:
    """repr and str show the name and key ID but never the private key."""
    signer = Ed25519Signer.from_seed("example.org/log", SEED)
    key64 = signer.private_key_text().rsplit("+", 1)[1]
    for shown in (repr(signer), str(signer), f"{signer!r}"):
        assert "example.org/log" in shown
        assert key64 not in shown
        assert SEED.hex() not in shown
        assert "PRIVATE" not in shown


def test_signer_cannot_be_pickled() -> None:
    """Pickling a signer is refused, so the key is not copied into a pickle by accident."""
    with pytest.raises(TypeError):
        pickle.dumps(Ed25519Signer.from_seed("x", SEED))


# --------------------------------------------------------------------------- key files


def test_save_then_load_round_trip(tmp_path: Path) -> None:
    """save writes a 0600 file holding the private key text; load reads the same key."""
    signer = Ed25519Signer.generate("example.org/log")
    path = tmp_path / "log.key"
    signer.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == signer.private_key_text() + "\n"
    loaded = Ed25519Signer.load(path)
    assert (loaded.name, loaded.key_id, loaded.public_key) == (
        signer.name,
        signer.key_id,
        signer.public_key,
    )


def test_save_is_0600_even_with_permissive_umask(tmp_path: Path) -> None:
    """The key file mode is 0600 whatever the process umask is."""
    old = os.umask(0)
    try:
        Ed25519Signer.generate("x").save(tmp_path / "k")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o600


def test_save_refuses_to_overwrite(tmp_path: Path) -> None:
    """save refuses an existing path and leaves the existing file untouched."""
    path = _write(tmp_path / "log.key", "precious")
    with pytest.raises(KeyFileError, match="already exists"):
        Ed25519Signer.generate("x").save(path)
    assert path.read_text() == "precious"


def test_save_refuses_dangling_symlink(tmp_path: Path) -> None:
    """save refuses a path that is a symlink, even one pointing nowhere."""
    link = tmp_path / "log.key"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(KeyFileError, match="already exists"):
        Ed25519Signer.generate("x").save(link)
    assert not (tmp_path / "elsewhere").exists()


def test_save_leaves_no_temporary_files(tmp_path: Path) -> None:
    """After save, the directory holds only the key file."""
    Ed25519Signer.generate("x").save(tmp_path / "log.key")
    assert [p.name for p in tmp_path.iterdir()] == ["log.key"]


def test_save_into_missing_directory_fails_cleanly(tmp_path: Path) -> None:
    """save into a directory that does not exist raises KeyFileError."""
    with pytest.raises(KeyFileError):
        Ed25519Signer.generate("x").save(tmp_path / "missing" / "log.key")


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_load_accepts_owner_only_modes(tmp_path: Path, mode: int) -> None:
    """A key file only its owner can access loads."""
    path = _write(tmp_path / "k", _key_text() + "\n", mode)
    assert Ed25519Signer.load(path).name == "example.org/log"


def test_load_accepts_text_without_final_newline(tmp_path: Path) -> None:
    """A key file whose text has no trailing newline (as Go writes it) loads."""
    path = _write(tmp_path / "k", _key_text())
    assert Ed25519Signer.load(path).name == "example.org/log"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o602, 0o620, 0o601, 0o610])
def test_load_refuses_group_or_other_access(tmp_path: Path, mode: int) -> None:
    """A key file readable or writable by group or others is refused with the chmod fix."""
    path = _write(tmp_path / "k", _key_text() + "\n", mode)
    with pytest.raises(KeyFileError, match=r"chmod 600"):
        Ed25519Signer.load(path)


def test_load_missing_file(tmp_path: Path) -> None:
    """A missing key file raises KeyFileError saying it does not exist."""
    with pytest.raises(KeyFileError, match="does not exist"):
        Ed25519Signer.load(tmp_path / "nope")


def test_load_directory_is_refused(tmp_path: Path) -> None:
    """A directory at the key path is refused as not a regular file."""
    directory = tmp_path / "k"
    directory.mkdir(mode=0o700)
    with pytest.raises(KeyFileError):
        Ed25519Signer.load(directory)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_load_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO at the key path is refused (and opening it does not hang)."""
    fifo = tmp_path / "k"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(KeyFileError, match="not a regular file"):
        Ed25519Signer.load(fifo)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can read anything")
def test_load_unreadable_file(tmp_path: Path) -> None:
    """A key file the process may not read raises KeyFileError."""
    path = _write(tmp_path / "k", _key_text(), 0o000)
    with pytest.raises(KeyFileError, match="not readable"):
        Ed25519Signer.load(path)


@pytest.mark.parametrize(
    "content",
    [b"", b"\n", b"hello\n", b"\xff\xfe\n", b"PRIVATE+KEY+x\n", b"x" * 5000],
    ids=["empty", "newline", "text", "not-utf8", "truncated", "too-large"],
)
def test_load_malformed_content(tmp_path: Path, content: bytes) -> None:
    """A key file that does not hold a private key raises KeyFileError naming the file."""
    path = _write(tmp_path / "k", content)
    with pytest.raises(KeyFileError, match="key file"):
        Ed25519Signer.load(path)


def test_load_two_trailing_newlines_is_malformed(tmp_path: Path) -> None:
    """Only one trailing newline is tolerated."""
    path = _write(tmp_path / "k", _key_text() + "\n\n")
    with pytest.raises(KeyFileError):
        Ed25519Signer.load(path)


def test_load_hash_mismatch(tmp_path: Path) -> None:
    """A key file whose key hash does not match its key is refused as corrupt."""
    head, key64 = _key_text().rsplit("+", 1)
    path = _write(tmp_path / "k", head[:-8] + "deadbeef+" + key64 + "\n")
    with pytest.raises(KeyFileError, match="does not match"):
        Ed25519Signer.load(path)
