"""Canonical CBOR, the only module that imports cbor2 (SPEC "Normative formats" 1).

Every hashed structure is CBOR in RFC 8949 section 4.2.1 core deterministic encoding: shortest
integer and length heads, definite lengths, map keys sorted by their encoded bytes, floats in
the shortest form that keeps their value. memroot narrows the data model further so that an
outside auditor has little to re-implement:

- values are ``None``, ``bool``, ``int`` in [-2**64, 2**64 - 1], finite ``float``, ``str``
  (valid UTF-8), ``bytes``, ``list`` and ``dict``;
- map keys are text strings (for text keys, sorting by encoded bytes is length-first, then
  bytewise);
- no tags, no ``undefined``, no other simple values, no NaN or Infinity.

Decoding is strict: the input must be exactly the canonical encoding of the value it decodes
to. The check decodes, validates the value, then re-encodes and compares bytes, which rejects
non-shortest heads, indefinite lengths, unsorted or duplicate keys and trailing bytes with one
rule. Errors are ``DecodeError`` naming what is wrong.
"""

from __future__ import annotations

import math
from typing import Any

import cbor2

from ledger.errors import DecodeError

__all__ = ["MAX_INT", "MIN_INT", "decode", "encode", "encode_array_head"]

MAX_INT = 2**64 - 1
MIN_INT = -(2**64)
_MAX_DEPTH = 32


def encode(value: Any) -> bytes:
    """Return the canonical CBOR encoding of ``value``.

    Raises:
        TypeError: if ``value`` holds a type outside memroot's data model, or a non-text
            map key (a programming mistake, not bad data).
        ValueError: for a NaN or infinite float or an integer outside 64 bits.
    """
    _check(value, 0, _programming_error)
    return _dumps(value)


def encode_array_head(length: int) -> bytes:
    """Return the canonical head of a CBOR array of ``length`` items (major type 4).

    Raises:
        ValueError: if ``length`` is negative.
    """
    if length < 0:
        raise ValueError("array length must not be negative")
    return _dumps([None] * length)[: -length or None] if length else b"\x80"


def decode(data: bytes) -> Any:
    """Decode canonical CBOR strictly and return the value.

    Raises:
        DecodeError: if ``data`` is not exactly the canonical encoding of one value of
            memroot's data model (malformed, truncated, trailing bytes, non-deterministic,
            duplicate keys, tags, undefined, NaN/Infinity, invalid UTF-8, non-text keys).
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"decode() takes bytes, not {type(data).__name__}")
    raw = bytes(data)
    try:
        value = cbor2.loads(raw)
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError, OverflowError) as e:
        raise DecodeError(f"malformed CBOR: {e}") from e
    _check(value, 0, _data_error)
    if _dumps(value) != raw:
        raise DecodeError(
            "CBOR is not in deterministic encoding (non-shortest head, indefinite length, "
            "unsorted or duplicate map keys, or trailing bytes)"
        )
    return value


def _dumps(value: Any) -> bytes:
    try:
        return cbor2.dumps(value, canonical=True)
    except (cbor2.CBOREncodeError, ValueError, TypeError) as e:  # pragma: no cover - _check
        raise TypeError(f"cannot encode value: {e}") from e


def _programming_error(message: str) -> Exception:
    return TypeError(message) if "type" in message or "key" in message else ValueError(message)


def _data_error(message: str) -> Exception:
    return DecodeError(message)


def _check(value: Any, depth: int, fail: Any) -> None:
    """Reject anything outside the data model; ``fail`` builds the error to raise."""
    if depth > _MAX_DEPTH:
        raise fail(f"nesting deeper than {_MAX_DEPTH} levels")
    kind = type(value)
    if kind is str or kind is bytes or kind is bool or value is None:
        return
    if kind is int:
        if not MIN_INT <= value <= MAX_INT:
            raise fail(f"integer {value} outside the 64-bit range")
        return
    if kind is float:
        if math.isnan(value) or math.isinf(value):
            raise fail("NaN and Infinity are not allowed")
        return
    if kind is list:
        for item in value:
            _check(item, depth + 1, fail)
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise fail(f"map key {key!r} is not a text string (key type {type(key).__name__})")
            _check(item, depth + 1, fail)
        return
    raise fail(f"unsupported type {kind.__name__} (tags, undefined and simple values are refused)")
