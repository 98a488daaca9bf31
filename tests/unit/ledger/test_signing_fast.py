"""``verify_signature`` asks the native strict check first: its answers must be OpenSSL's.

With the native core, a signature the strict RFC 8032 check accepts is accepted without
asking OpenSSL. That is sound only if the strict check accepts nothing OpenSSL refuses:
compared here on honest signatures, random mutations of them, a non-canonical ``S``, and
signatures that hold only because the key or ``R`` has small order (the strict check refuses
those; the answer is then OpenSSL's, whatever it is).
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger import signing
from memroot.ledger._backend import NATIVE
from memroot.ledger.signing import Ed25519Signer, verify_signature

pytestmark = pytest.mark.skipif(NATIVE is None, reason="the fast path is the native core's")

L = 2**252 + 27742317777372353535851937790883648493
IDENTITY = (1).to_bytes(32, "little")  # the neutral point: order 1
ORDER_TWO = ((2**255 - 19) - 1).to_bytes(32, "little")  # (0, -1): order 2


def _same(public_key: bytes, message: bytes, sig: bytes) -> bool:
    got = verify_signature(public_key, message, sig)
    assert got == signing._openssl_verify(public_key, message, sig), (public_key, message, sig)
    return got


def _scalar(seed: bytes) -> int:
    h = bytearray(hashlib.sha512(seed).digest()[:32])
    h[0] &= 248
    h[31] &= 127
    h[31] |= 64
    return int.from_bytes(h, "little")


def test_honest_signatures_are_accepted_both_ways() -> None:
    for i in range(20):
        signer = Ed25519Signer.from_seed("example.org/fast", bytes([i]) * 32)
        msg = b"message %d" % i
        assert _same(signer.public_key, msg, signer.sign(msg))


def test_non_canonical_s_is_refused_both_ways() -> None:
    signer = Ed25519Signer.from_seed("example.org/fast", b"\x07" * 32)
    sig = signer.sign(b"m")
    s = int.from_bytes(sig[32:], "little")
    assert not _same(signer.public_key, b"m", sig[:32] + (s + L).to_bytes(32, "little"))


@pytest.mark.parametrize("small", [IDENTITY, ORDER_TWO], ids=["identity", "order_two"])
def test_small_order_key_gets_openssls_answer(small: bytes) -> None:
    """A = a small-order point: (R = [S]B, S) holds for every message by the cofactorless
    equation. The strict check refuses it; what is accepted is what OpenSSL accepts."""
    seed = b"\x09" * 32
    r = Ed25519Signer.from_seed("example.org/fast", seed).public_key  # [a]B
    sig = r + (_scalar(seed) % L).to_bytes(32, "little")
    if _decodes(small):
        assert not NATIVE.Ed25519Verifier(small).verify_strict(b"any", sig)
    _same(small, b"any", sig)


def _decodes(raw: bytes) -> bool:
    try:
        NATIVE.Ed25519Verifier(raw)
    except NATIVE.Reject:
        return False
    return True


def test_small_order_r_gets_openssls_answer() -> None:
    signer = Ed25519Signer.from_seed("example.org/fast", b"\x0b" * 32)
    for r in (IDENTITY, ORDER_TWO):
        for s in (0, 1, L - 1):
            _same(signer.public_key, b"m", r + s.to_bytes(32, "little"))


@settings(max_examples=300, deadline=None)
@given(
    seed=st.binary(min_size=32, max_size=32),
    msg=st.binary(max_size=64),
    where=st.integers(0, 127 + 8 * 64),
    key_flip=st.booleans(),
)
def test_mutated_signatures_get_openssls_answer(
    seed: bytes, msg: bytes, where: int, key_flip: bool
) -> None:
    signer = Ed25519Signer.from_seed("example.org/fast", seed)
    sig, key, m = bytearray(signer.sign(msg)), bytearray(signer.public_key), bytearray(msg)
    if where < 512:
        sig[where // 8] ^= 1 << (where % 8)
    elif m:
        m[(where - 512) % len(m)] ^= 1
    if key_flip:
        key[where % 32] ^= 1 << (where % 8)
    _same(bytes(key), bytes(m), bytes(sig))
