"""The native JSON Lines event parser (``entries.parse_event_lines``) against the reference.

For every line the native parser either declines (None: the reference parses it) or returns
exactly the ``EventInput`` the reference builds (``parse_input(parse_json(line))``), its
``plain`` flag included; a line the reference refuses is always declined, so every error
keeps the reference's message. Lines are built from valid requests mutated in the ways a
hand-written parser gets wrong: escapes, surrogates, control characters, numbers, duplicate
keys, whitespace, unknown fields and bad values.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger import _backend
from memroot.ledger.entries import (
    EventInput,
    OpInput,
    parse_event_lines,
    parse_input,
    parse_json,
)
from memroot.ledger.errors import MemrootError

pytest.importorskip("memroot._native", reason="the native core is not built")
if _backend.NATIVE is None:
    pytestmark = pytest.mark.skip(reason="MEMROOT_BACKEND=python: nothing native to compare")

UUID = "0190a1b2-c3d4-7fff-bfff-ffffffffffff"
BASE: dict[str, Any] = {
    "kind": "event",
    "stream": "s",
    "actor_id": "agent",
    "actor_type": "AI_AGENT",
    "role": "ASSISTANT",
    "content": "hello",
    "namespace_id": "ns",
}


def reference(line: str) -> EventInput | OpInput | None:
    """The reference's request for ``line``, or None when it refuses the line."""
    try:
        return parse_input(parse_json(line))
    except MemrootError:
        return None


def check(lines: list[str]) -> list[EventInput | None]:
    got = parse_event_lines(lines)
    assert len(got) == len(lines)
    for line, fast in zip(lines, got, strict=True):
        if fast is not None:
            want = reference(line)
            assert type(want) is EventInput, line
            assert fast == want, line
            assert fast.plain == want.plain, line
            assert repr(fast) == repr(want), line
    return got


def test_the_common_lines_are_parsed_natively() -> None:
    lines = [
        json.dumps(BASE),
        json.dumps({**BASE, "ts": 1_700_000_000_000_000, "id": UUID, "parent_event_id": UUID}),
        json.dumps({**BASE, "content": 'caf\u00e9 \U0001f600 \u2028 \x00 \\ "'}),
        json.dumps({**BASE, "content": "caf\u00e9 \U0001f600"}, ensure_ascii=False),
        json.dumps({**BASE, "metadata": None, "context": None, "id": None, "ts": None}),
        json.dumps({**BASE, "content": ""}),
        "  " + json.dumps(BASE, separators=(",", ":")) + " \r\n",
    ]
    got = check(lines)
    assert all(g is not None for g in got)


@pytest.mark.parametrize(
    "line",
    [
        json.dumps({**BASE, "kind": "op"}),
        json.dumps({**BASE, "metadata": {"a": 1}}),
        json.dumps({**BASE, "context": {"git": {}}}),
        json.dumps({**BASE, "ts": 1.0}),
        json.dumps({**BASE, "ts": -1}),
        json.dumps({**BASE, "ts": 2**63}),
        json.dumps({**BASE, "ts": True}),
        json.dumps({**BASE, "id": UUID.upper()}),
        json.dumps({**BASE, "stream": ""}),
        json.dumps({**BASE, "stream": "a\nb"}),
        json.dumps({**BASE, "actor_id": "a\u0085"}),
        json.dumps({**BASE, "namespace_id": "x" * 4097}),
        json.dumps({**BASE, "role": "user"}),
        json.dumps({**BASE, "actor_type": "ROBOT"}),
        json.dumps({**BASE, "extra": 1}),
        json.dumps({**BASE, "extra": None}),
        json.dumps({k: v for k, v in BASE.items() if k != "content"}),
        json.dumps({k: v for k, v in BASE.items() if k != "kind"}),
        json.dumps({**BASE, "content": 5}),
        json.dumps(BASE)[:-1] + ', "content": "again"}',
        json.dumps(BASE)[:-1] + ', "ts": NaN}',
        json.dumps(BASE)[:-1] + ', "ts": 01}',
        json.dumps(BASE)[:-1] + ', "ts": 1e3}',
        json.dumps(BASE)[:-1] + ",}",
        json.dumps(BASE).replace('"hello"', '"\\ud800"'),
        json.dumps(BASE).replace('"hello"', '"\\udc00x"'),
        json.dumps(BASE).replace('"hello"', '"a\tb"'),
        json.dumps(BASE).replace('"hello"', '"\\q"'),
        "\x0c" + json.dumps(BASE),
        json.dumps(BASE) + " x",
        json.dumps([BASE]),
        "",
    ],
)
def test_anything_else_is_left_to_the_reference(line: str) -> None:
    assert check([line]) == [None]


_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",))
    | st.sampled_from(["\\", '"', "\x00", "\x1f", "\x7f", "\x85", "\u2028", "\ud800", "\udc00"]),
    max_size=12,
)
_VALUE = (
    _TEXT
    | st.sampled_from(["AI_AGENT", "HUMAN_USER", "USER", "TOOL", "event", "op", UUID])
    | st.integers(-3, 2**64)
    | st.none()
    | st.booleans()
    | st.floats(allow_nan=True)
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
)
_KEYS = st.sampled_from([*BASE, "ts", "id", "parent_event_id", "metadata", "context", "other"])


@st.composite
def lines(draw: st.DrawFn) -> str:
    """A valid event request with a few fields replaced, dropped or repeated, as JSON text."""
    fields = dict(BASE)
    for key in draw(st.lists(_KEYS, max_size=3)):
        if draw(st.booleans()):
            fields[key] = draw(_VALUE)
        else:
            fields.pop(key, None)
    text = json.dumps(fields, ensure_ascii=draw(st.booleans()), separators=draw(
        st.sampled_from([(",", ":"), (", ", ": "), (" ,\t", " :\n")])
    ))  # fmt: skip
    if draw(st.booleans()) and fields:
        key = draw(st.sampled_from(sorted(fields)))
        text = text[:-1] + f", {json.dumps(key)}: {json.dumps(draw(_VALUE))}" + "}"
    return (
        draw(st.sampled_from(["", " ", "\t", "\r"]))
        + text
        + draw(st.sampled_from(["", "\n", "\r\n", " \n", "\x0b"]))
    )


@settings(max_examples=400, deadline=None)
@given(batch=st.lists(lines(), min_size=1, max_size=8))
def test_random_lines_match_the_reference(batch: list[str]) -> None:
    check(batch)
