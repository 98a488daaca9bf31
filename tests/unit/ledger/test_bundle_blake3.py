"""The pure-Python BLAKE3 fallback that lets the offline verifier run without the blake3 package."""

from __future__ import annotations

import os
import subprocess
import sys

import blake3 as native
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger._blake3 import blake3 as fallback

# Lengths around every block (64) and chunk (1024) boundary and several tree shapes.
EDGE_LENGTHS = [0, 1, 63, 64, 65, 1023, 1024, 1025, 2047, 2048, 2049, 3072, 4097, 8192, 9217]


@pytest.mark.parametrize("n", EDGE_LENGTHS)
def test_fallback_matches_native_at_block_and_chunk_edges(n: int) -> None:
    """The fallback's plain and keyed digests equal the blake3 package's at every edge length."""
    data = os.urandom(n)
    key = os.urandom(32)
    assert fallback(data).digest() == native.blake3(data).digest()
    assert fallback(data, key=key).digest() == native.blake3(data, key=key).digest()


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=5000), st.binary(min_size=32, max_size=32))
def test_fallback_matches_native_on_random_inputs(data: bytes, key: bytes) -> None:
    """For any input and key the fallback gives the native digest."""
    assert fallback(data, key=key).digest() == native.blake3(data, key=key).digest()
    assert fallback(data).digest() == native.blake3(data).digest()


def test_fallback_refuses_a_short_key() -> None:
    """A key that is not 32 bytes is a programming mistake (ValueError)."""
    with pytest.raises(ValueError, match="32 bytes"):
        fallback(b"x", key=b"short")


def test_hashing_uses_the_fallback_when_blake3_is_missing() -> None:
    """Without the blake3 package, ledger.hashing still computes identical content commitments."""
    salt, content = os.urandom(32), b"the same content"
    code = (
        "import sys; sys.modules['blake3'] = None\n"
        "from memroot.ledger import hashing\n"
        "assert not hashing.BLAKE3_NATIVE\n"
        f"print(hashing.content_commitment({salt!r}, {content!r}).hex())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == native.blake3(content, key=salt).hexdigest()
