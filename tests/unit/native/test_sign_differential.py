"""The native Ed25519 signer and self-check against the reference (OpenSSL), one process.

Every commit signs its seal; with the native core the signature is made and checked by
``memroot._native``. RFC 8032 signatures are deterministic, so both backends must sign the
same 64 bytes, and the native self-check must accept exactly the signatures of the key and
message and refuse any changed one.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger import _backend, signing
from memroot.ledger.note import Verifier, open_note, sign_note
from memroot.ledger.signing import Ed25519Signer, check_own_signature, verify_signature

native = pytest.importorskip("memroot._native", reason="the native core is not built")

if _backend.NATIVE is None:  # MEMROOT_BACKEND=python: the dispatchers are the reference
    pytestmark = pytest.mark.skip(reason="MEMROOT_BACKEND=python: nothing native to compare")

# RFC 8032 section 7.1, TEST 2: a one-byte message.
_SEED = bytes.fromhex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
_PUBLIC = bytes.fromhex("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c")
_SIG = bytes.fromhex(
    "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
    "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
)


def test_the_native_signer_signs_the_rfc_8032_vector() -> None:
    signer = Ed25519Signer.from_seed("k", _SEED)
    assert signer.public_key == _PUBLIC
    assert signer.sign(b"\x72") == _SIG
    assert check_own_signature(_PUBLIC, b"\x72", _SIG)


@settings(max_examples=60, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(max_size=600))
def test_both_backends_sign_the_same_bytes(seed: bytes, message: bytes) -> None:
    signer = Ed25519Signer.from_seed("example.org/log", seed)
    fast = signer.sign(message)
    with _backend.reference():
        assert signing._N is None
        slow = Ed25519Signer.from_seed("example.org/log", seed).sign(message)
        assert signer.sign(message) == slow  # the same signer object, switched
    assert fast == slow
    assert verify_signature(signer.public_key, message, fast)
    assert check_own_signature(signer.public_key, message, fast)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.binary(min_size=32, max_size=32),
    message=st.binary(min_size=1, max_size=200),
    flip=st.integers(min_value=0, max_value=64 * 8 - 1),
)
def test_the_native_self_check_refuses_what_the_reference_refuses(
    seed: bytes, message: bytes, flip: int
) -> None:
    signer = Ed25519Signer.from_seed("k", seed)
    good = signer.sign(message)
    bad = bytearray(good)
    bad[flip // 8] ^= 1 << (flip % 8)
    assert not verify_signature(signer.public_key, message, bytes(bad))
    assert not check_own_signature(signer.public_key, message, bytes(bad))
    assert not check_own_signature(signer.public_key, message[:-1], good)
    other = Ed25519Signer.from_seed("k", bytes(31) + b"\x01").public_key
    assert not check_own_signature(other, message, good)
    assert not check_own_signature(signer.public_key[:31], message, good)
    not_a_point = bytes([2]) + bytes(31)  # no curve point has this encoding
    assert not verify_signature(not_a_point, message, good)
    assert not check_own_signature(not_a_point, message, good)
    assert not check_own_signature(signer.public_key, message, good[:63])


class _Faulty:
    """A signer whose signatures are corrupted (a fault during signing)."""

    def __init__(self, inner: Ed25519Signer) -> None:
        self.inner = inner
        self.name, self.key_id, self.public_key = inner.name, inner.key_id, inner.public_key

    def sign(self, message: bytes) -> bytes:
        sig = bytearray(self.inner.sign(message))
        sig[40] ^= 0x10
        return bytes(sig)


def test_a_faulty_signature_is_never_published_on_either_backend() -> None:
    signer = Ed25519Signer.from_seed("example.org/log", _SEED)
    note = sign_note("hello\n", [signer])
    assert open_note(note, [Verifier.from_signer(signer)]).text == "hello\n"
    with pytest.raises(ValueError, match="does not verify"):
        sign_note("hello\n", [_Faulty(signer)])
    with _backend.reference(), pytest.raises(ValueError, match="does not verify"):
        sign_note("hello\n", [_Faulty(signer)])
    with _backend.reference():
        assert sign_note("hello\n", [signer]) == note
