"""``digest.encode_rows``: the native row encoder against the reference, in one process."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger import _backend, encoding
from memroot.projections import digest

native = pytest.importorskip("memroot._native", reason="the native core is not built")

if _backend.NATIVE is None:  # MEMROOT_BACKEND=python: the dispatchers are the reference
    pytestmark = pytest.mark.skip(reason="MEMROOT_BACKEND=python: nothing native to compare")

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.binary(max_size=40),
)
ROWS = st.lists(
    st.one_of(
        st.tuples(SCALARS, SCALARS, SCALARS),
        st.lists(SCALARS, max_size=6).map(tuple),
        st.lists(SCALARS, max_size=6),
    ),
    max_size=60,
)


def _reference(rows: list[Any], floats_as_bytes: bool) -> bytes:
    """The digest's definition: each row a list, a float as its binary64 big-endian bytes."""
    pack = struct.Struct(">d").pack
    return encoding.encode(
        [[pack(v) if floats_as_bytes and type(v) is float else v for v in r] for r in rows]
    )


@settings(max_examples=300, deadline=None)
@given(ROWS, st.booleans())
def test_native_rows_are_the_reference_bytes(rows: list[Any], floats_as_bytes: bool) -> None:
    """The same bytes from the native call, the dispatcher and the reference path."""
    want = _reference(rows, floats_as_bytes)
    assert native.encode_rows(rows, floats_as_bytes) == want
    assert digest.encode_rows(rows, floats_as_bytes=floats_as_bytes) == want


@pytest.mark.parametrize("n", [0, 1, 23, 24, 255, 256, 65535, 65536])
def test_array_head_is_the_canonical_cbor_head(n: int) -> None:
    """The head of an n-item array, as the encoder writes it (every length class)."""
    assert encoding.encode([0] * n) == digest.array_head(n) + b"\x00" * n
    assert native.encode_rows([()] * n, False) == digest.array_head(n) + b"\x80" * n


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ([(math.nan,)], ValueError),
        ([(2**64,)], ValueError),
        ([({1, 2},)], TypeError),
        ([(("nested", "tuple"),)], TypeError),
    ],
)
def test_refusals_are_the_references(
    rows: list[Any], error: type[Exception], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value outside the data model: the native core hands it back; the reference raises."""
    with pytest.raises(native.Reject):
        native.encode_rows(rows, False)
    with pytest.raises(error) as native_side:
        digest.encode_rows(rows)
    monkeypatch.setattr(digest, "_N", None)
    with pytest.raises(error) as reference_side:
        digest.encode_rows(rows)
    assert str(native_side.value) == str(reference_side.value)


def test_a_row_that_is_not_a_sequence_is_refused() -> None:
    """Rows are tuples or lists; anything else is the reference's to judge."""
    with pytest.raises(native.Reject):
        native.encode_rows(["not a row"], False)
