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

With the native core (``memroot.ledger._backend``), ``encode`` and ``decode`` run in Rust;
the functions here named ``_py_*`` are the reference they are tested against, and they still
produce every error: when the native core refuses a value, the reference is run for its error.
"""

from __future__ import annotations

from typing import Any, Final

import cbor2

from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.errors import DecodeError

__all__ = [
    "MAX_INT",
    "MIN_INT",
    "check",
    "decode",
    "encode",
    "encode_normalized",
    "normalize",
]

MAX_INT = 2**64 - 1
MIN_INT = -(2**64)
MAX_DEPTH: Final = 32
"""Containers may nest this deep in an encoded value (the outermost at depth 0), as the native
core's ``cbor::MAX_DEPTH``: the one nesting limit of an entry, checked when it is encoded and
when it is decoded, and from which the input fields' limit follows (``entries.MAX_FIELD_DEPTH``)."""
_MAX_DEPTH = MAX_DEPTH
_INF: Final = float("inf")


def encode(value: Any) -> bytes:
    """Return the canonical CBOR encoding of ``value``.

    Raises:
        TypeError: if ``value`` holds a type outside memroot's data model, or a non-text
            map key (a programming mistake, not bad data).
        ValueError: for a NaN or infinite float or an integer outside 64 bits.
    """
    if _N is not None:
        try:
            return _N.encode(value)
        except _N.Reject:
            pass  # the reference raises the error
    return _py_encode(value)


def _py_encode(value: Any) -> bytes:
    """Encode as the reference does: ``_scan``, then cbor2."""
    try:
        plain = _scan(value)
    except _Refused as e:
        raise (TypeError if e.is_type else ValueError)(str(e)) from None
    # With every map already in canonical key order and no floats, cbor2's plain encoder
    # emits exactly the canonical bytes (shortest heads, definite lengths) at a third of the
    # cost of its canonical mode, which re-sorts every map.
    return cbor2.dumps(value) if plain else cbor2.dumps(value, canonical=True)


def check(value: Any, depth: int = 0) -> None:
    """Check that ``value`` lies inside memroot's data model, without encoding it.

    ``depth``: where ``value`` will sit in the value that is encoded (a field of an entry's
    body is at depth 2), so its nesting is checked against what is left of ``MAX_DEPTH``.

    Raises:
        TypeError: for a type outside the data model or a non-text map key.
        ValueError: for a NaN or infinite float, an integer outside 64 bits, deep nesting.
    """
    try:
        _scan(value, depth)
    except _Refused as e:
        raise (TypeError if e.is_type else ValueError)(str(e)) from None


def normalize(value: Any, depth: int = 0) -> tuple[Any, bool]:
    """Check ``value`` and return a copy with every map in canonical key order.

    The second item is True when the value holds no float, so that ``encode_normalized`` can
    use the fast plain encoder. Inputs are normalised once, when they are validated.
    ``depth``: as for ``check``.

    Raises:
        TypeError: for a type outside the data model or a non-text map key.
        ValueError: for a NaN or infinite float, an integer outside 64 bits, deep nesting.
    """
    check(value, depth)
    return _sorted_copy(value)


def _sorted_copy(value: Any) -> tuple[Any, bool]:
    kind = type(value)
    if kind is dict:
        out = {}
        no_float = True
        for key in sorted(value, key=_key_order):
            out[key], ok = _sorted_copy(value[key])
            no_float = no_float and ok
        return out, no_float
    if kind is list:
        items = [_sorted_copy(v) for v in value]
        return [v for v, _ in items], all(ok for _, ok in items)
    return value, kind is not float


def encode_normalized(value: Any, no_float: bool) -> bytes:
    """Encode a value already checked, with every map in canonical key order (no re-scan).

    ``no_float`` must be True only when the value holds no float (see ``normalize``): the
    plain encoder then emits exactly the canonical bytes.
    """
    if _N is not None:
        try:
            return _N.encode(value)
        except _N.Reject:
            pass  # outside the model after all: the reference decides
    return cbor2.dumps(value) if no_float else cbor2.dumps(value, canonical=True)


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
    if _N is not None:
        try:
            return _N.decode(raw)
        except _N.Reject as e:
            _py_decode(raw)  # raises the reference's DecodeError and message
            raise DecodeError(f"malformed CBOR: {e}") from None  # pragma: no cover - never
    return _py_decode(raw)


def _py_decode(raw: bytes) -> Any:
    """Decode as the reference does: cbor2, ``_scan``, then re-encode and compare."""
    try:
        value = cbor2.loads(raw, allow_indefinite=False, allow_duplicate_keys=False)
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError, OverflowError) as e:
        raise DecodeError(f"malformed CBOR: {e}") from e
    try:
        plain = _scan(value)
    except _Refused as e:
        raise DecodeError(str(e)) from None
    # Decoded maps keep the order of the input, so re-encoding with the plain encoder
    # reproduces the input exactly when every head is shortest and nothing trails; _scan has
    # checked that map keys are in canonical order. Floats need canonical mode (shortest
    # float width), and so do unsorted maps, which then fail the comparison.
    again = cbor2.dumps(value) if plain else cbor2.dumps(value, canonical=True)
    if again != raw:
        raise DecodeError(
            "CBOR is not in deterministic encoding (non-shortest head or float, unsorted "
            "map keys, or trailing bytes)"
        )
    return value


class _Refused(Exception):
    def __init__(self, message: str, *, is_type: bool) -> None:
        super().__init__(message)
        self.is_type = is_type


_PLAIN_SCALARS: Final = frozenset({str, bytes, bool, type(None)})


def _key_order(key: str) -> tuple[int, bytes]:
    raw = key.encode("utf-8")
    return len(raw), raw


def _in_order(a: str, b: str) -> bool:
    """Return True when text key ``a`` sorts before ``b`` in canonical (encoded) order."""
    if a.isascii() and b.isascii():
        return len(a) < len(b) or (len(a) == len(b) and a < b)
    return _key_order(a) < _key_order(b)


_ORDERED_KEYS: set[tuple[str, ...]] = set()
_ORDERED_KEYS_MAX: Final = 4096


def _keys_in_order(keys: tuple[Any, ...]) -> bool:
    """Check a map's keys are text; return True when they are in canonical order.

    Raises:
        _Refused: for a key that is not a text string.
    """
    prev: str | None = None
    ordered = True
    for key in keys:
        if type(key) is not str:
            raise _Refused(
                f"map key {key!r} is not a text string (key type {type(key).__name__})",
                is_type=True,
            )
        if prev is not None and ordered:
            ordered = _in_order(prev, key)
        prev = key
    return ordered


def _scan(value: Any, start: int = 0) -> bool:
    """Reject anything outside the data model; return True when plain encoding is canonical.

    Plain means: no floats anywhere and every map's keys already in canonical order. This runs
    for every entry encoded or verified, so text and byte strings (most values) are passed
    over inline instead of being pushed on the work stack.
    """
    plain = True
    stack: list[tuple[Any, int]] = [(value, start)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        kind = type(item)
        if kind in _PLAIN_SCALARS:
            continue
        if kind is int:
            if not MIN_INT <= item <= MAX_INT:
                raise _Refused(f"integer {item} outside the 64-bit range", is_type=False)
            continue
        if depth >= _MAX_DEPTH:
            raise _Refused(f"nesting deeper than {_MAX_DEPTH - start} levels", is_type=False)
        if kind is dict:
            keys = tuple(item)
            if keys not in _ORDERED_KEYS:
                # Entries repeat a few key sets: each one is checked once, then remembered.
                if _keys_in_order(keys):
                    if len(_ORDERED_KEYS) < _ORDERED_KEYS_MAX:
                        _ORDERED_KEYS.add(keys)
                else:
                    plain = False
            for sub in item.values():
                sub_kind = type(sub)
                if sub_kind is not str and sub_kind is not bytes:
                    push((sub, depth + 1))
            continue
        if kind is list:
            for sub in item:
                sub_kind = type(sub)
                if sub_kind is not str and sub_kind is not bytes:
                    push((sub, depth + 1))
            continue
        if kind is float:
            if item != item or item in (_INF, -_INF):
                raise _Refused("NaN and Infinity are not allowed", is_type=False)
            plain = False
            continue
        raise _Refused(
            f"unsupported type {kind.__name__} (tags, undefined and simple values are refused)",
            is_type=True,
        )
    return plain
