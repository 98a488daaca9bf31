"""Tests of ledger.encoding: canonical CBOR out, strict decoding in (SPEC formats 1)."""

from __future__ import annotations

import math
import struct
from typing import Any

import cbor2
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memroot.ledger import encoding
from memroot.ledger.encoding import MAX_INT, MIN_INT, decode, encode
from memroot.ledger.errors import DecodeError

# -- the data model as a hypothesis strategy ------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(MIN_INT, MAX_INT),
    st.integers(-30, 30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(width=16, allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.binary(max_size=40),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.text(max_size=6), inner, max_size=5),
    ),
    max_leaves=30,
)


def same(a: Any, b: Any) -> bool:
    """Equal values of equal types (True is not 1, -0.0 is not 0.0), recursively."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return set(a) == set(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


@settings(max_examples=300, deadline=None)
@given(values)
def test_round_trip(x: Any) -> None:
    """decode(encode(x)) == x, types included, for every value of the data model."""
    assert same(decode(encode(x)), x)


@settings(max_examples=300, deadline=None)
@given(values)
def test_encode_is_cbor2_canonical(x: Any) -> None:
    """encode(x) is byte-identical to cbor2's canonical (RFC 8949 4.2.1) encoding."""
    assert encode(x) == cbor2.dumps(x, canonical=True)


@settings(max_examples=300, deadline=None)
@given(values)
def test_reencoding_is_identity(x: Any) -> None:
    """Decoding canonical bytes and encoding again gives the same bytes."""
    raw = encode(x)
    assert encode(decode(raw)) == raw


@settings(max_examples=300, deadline=None)
@given(values)
def test_normalized_fast_path_matches(x: Any) -> None:
    """The validate-once path (normalize + encode_normalized) emits exactly encode's bytes."""
    normalized, no_float = encoding.normalize(x)
    assert encoding.encode_normalized(normalized, no_float) == encode(x)
    encoding.check(x)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.integers(0, 3), min_size=2, max_size=8))
def test_map_keys_sorted_by_encoded_bytes(x: dict[str, int]) -> None:
    """Map keys come out in the order of their encoded bytes, whatever order they went in."""
    backwards = dict(reversed(list(x.items())))
    raw = encode(backwards)
    keys = list(decode(raw))
    assert keys == sorted(x, key=lambda k: cbor2.dumps(k))
    assert raw == encode(x)


# -- RFC 8949 Appendix A: the examples of the types memroot supports ---------------------------

APPENDIX_A = [
    (0, "00"),
    (1, "01"),
    (10, "0a"),
    (23, "17"),
    (24, "1818"),
    (25, "1819"),
    (100, "1864"),
    (1000, "1903e8"),
    (1000000, "1a000f4240"),
    (1000000000000, "1b000000e8d4a51000"),
    (18446744073709551615, "1bffffffffffffffff"),
    (-18446744073709551616, "3bffffffffffffffff"),
    (-1, "20"),
    (-10, "29"),
    (-100, "3863"),
    (-1000, "3903e7"),
    (0.0, "f90000"),
    (-0.0, "f98000"),
    (1.0, "f93c00"),
    (1.1, "fb3ff199999999999a"),
    (1.5, "f93e00"),
    (65504.0, "f97bff"),
    (100000.0, "fa47c35000"),
    (3.4028234663852886e38, "fa7f7fffff"),
    (1.0e300, "fb7e37e43c8800759c"),
    (5.960464477539063e-8, "f90001"),
    (0.00006103515625, "f90400"),
    (-4.0, "f9c400"),
    (-4.1, "fbc010666666666666"),
    (False, "f4"),
    (True, "f5"),
    (None, "f6"),
    (b"", "40"),
    (bytes.fromhex("01020304"), "4401020304"),
    ("", "60"),
    ("a", "6161"),
    ("IETF", "6449455446"),
    ('"\\', "62225c"),
    ("\u00fc", "62c3bc"),
    ("\u6c34", "63e6b0b4"),
    ("\U00010151", "64f0908591"),
    ([], "80"),
    ([1, 2, 3], "83010203"),
    ([1, [2, 3], [4, 5]], "8301820203820405"),
    (list(range(1, 26)), "98190102030405060708090a0b0c0d0e0f101112131415161718181819"),
    ({}, "a0"),
    ({"a": 1, "b": [2, 3]}, "a26161016162820203"),
    (["a", {"b": "c"}], "826161a161626163"),
    (
        {"a": "A", "b": "B", "c": "C", "d": "D", "e": "E"},
        "a56161614161626142616361436164614461656145",
    ),
]


@pytest.mark.parametrize(("value", "hex_"), APPENDIX_A, ids=[h for _, h in APPENDIX_A])
def test_rfc8949_appendix_a(value: Any, hex_: str) -> None:
    """Every Appendix A example of a supported type encodes and decodes exactly."""
    raw = bytes.fromhex(hex_)
    assert encode(value) == raw
    assert same(decode(raw), value)


# Appendix A examples outside memroot's model: each decodes to a DecodeError.
APPENDIX_A_REFUSED = [
    "c249010000000000000000",  # 18446744073709551616 (bignum tag)
    "c349010000000000000000",  # -18446744073709551617
    "f97c00",
    "f97e00",
    "f9fc00",
    "fa7f800000",
    "fa7fc00000",
    "faff800000",
    "fb7ff0000000000000",
    "fb7ff8000000000000",
    "fbfff0000000000000",  # Infinity and NaN
    "f7",
    "f0",
    "f8ff",  # undefined, simple(16), simple(255)
    "c074323031332d30332d32315432303a30343a30305a",
    "c11a514b67b0",
    "c1fb41d452d9ec200000",
    "d74401020304",
    "d818456449455446",
    "d82076687474703a2f2f7777772e6578616d706c652e636f6d",
    "a201020304",  # {1: 2, 3: 4}: non-text keys
    "5f42010243030405ff",
    "7f657374726561646d696e67ff",
    "9fff",
    "9f018202039f0405ffff",
    "9f01820203820405ff",
    "83018202039f0405ff",
    "83019f0203ff820405",
    "9f0102030405060708090a0b0c0d0e0f101112131415161718181819ff",
    "bf61610161629f0203ffff",
    "826161bf61626163ff",
    "bf6346756ef563416d7421ff",
]


@pytest.mark.parametrize("hex_", APPENDIX_A_REFUSED)
def test_rfc8949_appendix_a_outside_the_model(hex_: str) -> None:
    """Tags, bignums, NaN/Infinity, undefined, simple values, indefinite lengths are refused."""
    with pytest.raises(DecodeError):
        decode(bytes.fromhex(hex_))


# -- every class of non-canonical or malformed input --------------------------------------------

NON_CANONICAL = {
    # non-shortest integer heads
    "int_1_in_1_byte": "1801",
    "int_23_in_1_byte": "1817",
    "int_in_2_bytes": "190001",
    "int_in_4_bytes": "1a00000001",
    "int_in_8_bytes": "1b0000000000000001",
    "neg_in_1_byte": "3800",
    "neg_in_2_bytes": "3900ff",
    # non-shortest lengths
    "text_len": "780161",
    "bytes_len": "5801ff",
    "array_len": "980101",
    "map_len": "b801616101",
    "text_len_2_bytes": "79000161",
    # non-shortest floats
    "float_single_for_half": "fa3f800000",
    "float_double_for_half": "fb3ff0000000000000",
    "float_double_for_single": "fb40f86a0000000000",
    # indefinite lengths
    "indef_bytes": "5f4101ff",
    "indef_text": "7f6161ff",
    "indef_array": "9f01ff",
    "indef_map": "bf616101ff",
    "indef_empty_array": "9fff",
    # map keys
    "unsorted_keys": "a2616201616101",
    "length_first": "a262616101616202",  # {"aa": 1, "b": 2}: "b" is shorter, goes first
    "duplicate_keys": "a2616101616102",
    "int_key": "a10102",
    "bytes_key": "a1416101",
    "array_key": "a18001",
    # tags, undefined, simple values
    "tag_0": "c06130",
    "tag_1": "c101",
    "tag_bignum_small": "c24101",
    "tag_self_describe": "d9d9f701",
    "tag_unknown": "d9ffff01",
    "undefined": "f7",
    "simple_0": "e0",
    "simple_19": "f3",
    "simple_32": "f820",
    # NaN and Infinity in every width
    "nan_half": "f97e00",
    "nan_other_payload": "f97e01",
    "inf_half": "f97c00",
    "neg_inf_half": "f9fc00",
    "nan_single": "fa7fc00000",
    "inf_double": "fb7ff0000000000000",
    # invalid UTF-8
    "utf8_ff": "61ff",
    "utf8_truncated": "62c328",
    "utf8_overlong": "62c0af",
    "utf8_surrogate": "63eda080",
    "utf8_in_key": "a161ff01",
    # trailing bytes
    "trailing_zero": "0000",
    "trailing_null": "f6f6",
    "trailing_after_map": "a0ff",
    # truncated input
    "empty": "",
    "int_head_only": "19",
    "int_short": "1901",
    "text_short": "6261",
    "array_short": "8201",
    "map_no_value": "a16161",
    "float_short": "fa3f80",
    # reserved and invalid heads
    "reserved_28": "1c",
    "reserved_29": "3d",
    "reserved_30": "5e",
    "indef_int": "1f",
    "lone_break": "ff",
}


@pytest.mark.parametrize("case", sorted(NON_CANONICAL))
def test_non_canonical_or_malformed_is_refused(case: str) -> None:
    """Every class of non-deterministic or malformed CBOR is a DecodeError."""
    with pytest.raises(DecodeError):
        decode(bytes.fromhex(NON_CANONICAL[case]))


def test_non_canonical_inputs_are_really_decodable_cbor() -> None:
    """The non-canonical cases that are valid CBOR would decode in a lax decoder (so the test
    checks strictness, not a malformed fixture)."""
    lax_ok = [
        "int_in_2_bytes",
        "text_len",
        "float_single_for_half",
        "indef_array",
        "unsorted_keys",
        "length_first",
        "tag_1",
        "trailing_zero",
    ]
    for case in lax_ok:
        raw = bytes.fromhex(NON_CANONICAL[case])
        if case == "trailing_zero":
            raw = raw[:1]
        cbor2.loads(raw)


def test_nesting_limit() -> None:
    """32 levels of nesting decode; deeper input (even very deep) is a DecodeError."""
    ok = b"\x81" * 31 + b"\x80"
    assert decode(ok) is not None
    for depth in (33, 100, 100_000):
        with pytest.raises(DecodeError):
            decode(b"\x81" * depth + b"\x80")
    value: Any = []
    for _ in range(40):
        value = [value]
    with pytest.raises(ValueError, match="nesting"):
        encode(value)


def test_decode_takes_bytes_like_only() -> None:
    """decode accepts bytes, bytearray and memoryview; anything else is a TypeError."""
    raw = encode({"a": [1, b"x"]})
    assert decode(bytearray(raw)) == decode(memoryview(raw)) == {"a": [1, b"x"]}
    with pytest.raises(TypeError):
        decode("a0")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (-math.inf, ValueError),
        (MAX_INT + 1, ValueError),
        (MIN_INT - 1, ValueError),
        ({1: 2}, TypeError),
        ({b"k": 1}, TypeError),
        ((1, 2), TypeError),
        ({1, 2}, TypeError),
        (object(), TypeError),
        ({"a": [float("nan")]}, ValueError),
    ],
    ids=[
        "nan",
        "inf",
        "-inf",
        "int_too_big",
        "int_too_small",
        "int_key",
        "bytes_key",
        "tuple",
        "set",
        "object",
        "nested_nan",
    ],
)
def test_encode_refuses_outside_the_model(value: Any, error: type[Exception]) -> None:
    """encode refuses NaN, Infinity, out-of-range integers, non-text keys and foreign types."""
    with pytest.raises(error):
        encode(value)
    with pytest.raises(error):
        encoding.check(value)


# -- fuzzing: arbitrary bytes give a value or a DecodeError, nothing else ----------------------


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    """Arbitrary bytes decode to a value whose encoding is those bytes, or a DecodeError."""
    try:
        value = decode(data)
    except DecodeError:
        return
    assert encode(value) == data


@settings(max_examples=500, deadline=None)
@given(values, st.data())
def test_fuzz_mutated_canonical_bytes(x: Any, data: st.DataObject) -> None:
    """A byte changed, inserted or removed in canonical bytes: a canonical value or DecodeError."""
    raw = bytearray(encode(x))
    how = data.draw(st.sampled_from(["flip", "insert", "delete"]))
    pos = data.draw(st.integers(0, len(raw) - (0 if how == "insert" else 1)))
    if how == "flip":
        raw[pos] ^= data.draw(st.integers(1, 255))
    elif how == "insert":
        raw.insert(pos, data.draw(st.integers(0, 255)))
    else:
        assume(len(raw) > 0)
        del raw[pos]
    try:
        value = decode(bytes(raw))
    except DecodeError:
        return
    assert encode(value) == bytes(raw)
