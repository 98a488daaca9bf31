"""``_native.PayloadPlan`` and ``_native.derived_id`` against the reference in ``projections``.

Every operation a replay or an append folds has its payload validated against its schema
(``ops.validate_payload``) and every edge it creates gets a derived id
(``engine.derived_id``). The native core does both in one call; it must return exactly what
the reference returns (same keys in schema order, same values of the same types) or refuse
(``Reject``), so that the reference runs and raises or accepts what it always did. A native
result for a payload the reference refuses is a failure.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger import _backend
from memroot.ledger.errors import ValidationError
from memroot.projections import engine, ops

native = pytest.importorskip("memroot._native", reason="the native core is not built")

if _backend.NATIVE is None:  # MEMROOT_BACKEND=python: nothing native to compare
    pytestmark = pytest.mark.skip(reason="MEMROOT_BACKEND=python: nothing native to compare")

_UUIDS = st.uuids().map(str)
_ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.binary(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**80), 2**80),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=5),
        st.binary(max_size=2),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 3)), inner, max_size=3),
    ),
    max_leaves=12,
)
_CONTROLS = st.sampled_from(["\x00", "\x1f", "\x7f", "\x9f", "\u2028", "\u2029", "\ud800", "é"])


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _texts(f: ops.Field) -> st.SearchStrategy[Any]:
    limit = f.arg if f.kind in ("text", "name") else ops.MAX_TEXT
    plain = st.text(max_size=8)
    edges = st.sampled_from(["", "a" * limit, "b" * (limit + 1), "é" * limit])
    mixed = st.tuples(plain, _CONTROLS, plain).map("".join)
    return st.one_of(plain, edges, mixed)


def _valid_ish(f: ops.Field) -> st.SearchStrategy[Any]:
    """Values near the field's kind: valid ones, and ones just outside it."""
    kind = f.kind
    if kind in ("text", "name"):
        return _texts(f)
    if kind == "uuid":
        return st.one_of(_UUIDS, _UUIDS.map(str.upper), _UUIDS.map(lambda u: u + "\n"))
    if kind == "uuids":
        return st.one_of(
            st.lists(_UUIDS, max_size=4),
            st.lists(st.sampled_from(["00000000-0000-4000-8000-000000000001"]), max_size=3),
            st.lists(st.one_of(_UUIDS, _UUIDS.map(str.upper), st.integers()), max_size=3),
            st.tuples(_UUIDS),
        )
    if kind == "enum":
        return st.one_of(st.sampled_from(f.arg), st.sampled_from(f.arg).map(str.lower))
    if kind in ("unit", "unit?", "nonneg"):
        return st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.floats(0, 1),
            st.sampled_from([0, 1, 2, -1, 0.0, -0.0, 1.0, True, False, 2**63, 2**70, 10**400]),
        )
    if kind == "ts":
        return st.one_of(st.integers(-5, 2**64), st.sampled_from([0, 2**63 - 1, 2**63, 1.0, True]))
    if kind == "json":
        return st.one_of(_JSON, st.sampled_from([_deep(32), _deep(33), _deep(31)]))
    if kind in ("texts", "names"):
        return st.lists(_texts(f), max_size=3)
    if kind == "condition":
        return st.fixed_dictionaries({"text": st.text(max_size=4)})
    if kind == "window":
        return st.fixed_dictionaries({"from": st.integers(0, 9), "to": st.integers(0, 9)})
    return st.fixed_dictionaries({"branch": st.text(max_size=3), "object_id": _UUIDS})


@st.composite
def _payloads(draw: st.DrawFn) -> tuple[str, Any]:
    op_type = draw(st.sampled_from(sorted(ops.SCHEMAS)))
    payload: dict[Any, Any] = {}
    for f in ops.SCHEMAS[op_type]:
        choice = draw(st.integers(0, 9))
        if choice == 0:
            continue  # absent
        payload[f.name] = draw(_ODD if choice == 1 else _valid_ish(f))
    if draw(st.integers(0, 15)) == 0:
        payload[draw(st.one_of(st.text(max_size=4), st.integers()))] = 1
    wrap = draw(st.integers(0, 30))
    return op_type, (payload if wrap else list(payload.items()))


def _shape(value: Any) -> Any:
    """A value with the type of every part spelled out (0 and 0.0, -0.0 and 0.0 differ)."""
    if isinstance(value, dict):
        return ("dict", [(k, _shape(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_shape(v) for v in value])
    if isinstance(value, float):
        return ("float", repr(value), math.copysign(1.0, value))
    return (type(value).__name__, value)


@settings(max_examples=3000, deadline=None)
@given(case=_payloads())
def test_a_payload_plan_returns_what_the_reference_returns_or_refuses(
    case: tuple[str, Any],
) -> None:
    """The native plan's result equals the reference's, field for field and type for type."""
    op_type, payload = case
    plan = ops._NATIVE_PLAN[op_type]
    try:
        got = plan.validate(payload)
    except native.Reject:
        got = None
    saved = dict(ops._NATIVE_PLAN)
    ops._NATIVE_PLAN.clear()
    try:
        want = ops.validate_payload(op_type, payload)
    except (ValidationError, OverflowError, TypeError, AttributeError):
        # ValidationError names the field; the others are the reference's own failures on
        # inputs no caller gives it (a list, mixed-type keys, an int beyond a float).
        assert got is None, f"native accepted a payload the reference refuses: {payload!r}"
        return
    finally:
        ops._NATIVE_PLAN.update(saved)
    if got is not None:
        assert _shape(got) == _shape(want)
    # The public function answers the same with the native plan in place.
    assert _shape(ops.validate_payload(op_type, payload)) == _shape(want)


def test_the_usual_payloads_are_taken_natively() -> None:
    """An ASSERT, a SUPERSEDE and a FALSIFY as the bench writes them need no reference run."""
    cited = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    assert_payload = {
        "object_type": "FACT",
        "epistemic_type": "ASSERTED",
        "source_type": "USER_STATED",
        "evidence_ids": [cited],
        "value": "fact 1",
        "confidence": None,
        "salience": 0.5,
    }
    got = ops._NATIVE_PLAN["ASSERT"].validate(assert_payload)
    assert got["evidence_ids"] == (cited,) and got["salience"] == 0.5 and got["imported"] is None
    assert list(got) == [f.name for f in ops.SCHEMAS["ASSERT"]]
    got = ops._NATIVE_PLAN["SUPERSEDE"].validate({"new_object_id": cited, "reason": "newer"})
    assert got == {"new_object_id": cited, "reason": "newer"}
    assert ops._NATIVE_PLAN["FALSIFY"].validate({"reason": "r"}) == {
        "reason": "r",
        "evidence_ids": None,
    }
    with pytest.raises(native.Reject):  # a kind only the reference checks
        ops._NATIVE_PLAN["ASSERT"].validate({**assert_payload, "condition": {"text": "x"}})


@settings(max_examples=500, deadline=None)
@given(
    op_id=st.one_of(_UUIDS, st.text(max_size=40)),
    n=st.one_of(st.integers(0, 50), st.integers(-(2**63), 2**63 - 1)),
)
def test_derived_id_equals_the_reference(op_id: str, n: int) -> None:
    """The native derived id is the reference's, or the reference runs (lone surrogates)."""
    try:
        got: str | None = native.derived_id(op_id, n)
    except native.Reject:
        got = None
    with pytest.MonkeyPatch.context() as m:
        m.setattr(engine, "_N", None)
        try:
            want: str | None = engine.derived_id(op_id, n)
        except UnicodeEncodeError:
            want = None
    assert got == want
    if want is not None:  # the public function, native inside, says the same
        assert engine.derived_id(op_id, n) == want
