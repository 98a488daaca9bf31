"""Reserved operations, default hooks and input bounds at the library level (issue 11, 4-5)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.entries import (
    RESERVED_OPS,
    TS_MAX_AHEAD_US,
    TS_MAX_BEHIND_US,
    EventInput,
    OpInput,
    _library_op,
    check_ts,
    now_us,
    parse_input,
    parse_json,
)
from memroot.ledger.errors import (
    DecodeError,
    NotFoundError,
    RefusedError,
    ValidationError,
)
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType

ORIGIN = "example.org/reserved"


def _event(**over: Any) -> EventInput:
    fields: dict[str, Any] = {
        "stream": "s",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "role": "USER",
        "content": "hello",
        "namespace_id": "ns",
        **over,
    }
    return EventInput(**fields)


def _op(op_type: str, payload: dict[str, Any], **over: Any) -> OpInput:
    fields: dict[str, Any] = {
        "op_type": op_type,
        "actor_id": "mallory",
        "actor_type": "HUMAN_USER",
        "namespace_id": "ns",
        "payload": payload,
        "policy_version": "p/1",
        **over,
    }
    return OpInput(**fields)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    p = tmp_path / "r.ledger"
    Ledger.init(p, origin=ORIGIN).close()
    return p


def test_every_op_type_memroot_writes_is_reserved() -> None:
    """The reserved set covers genesis-adjacent, root, branch, merge and audit records."""
    assert set(RESERVED_OPS) == {
        t.value
        for t in (
            OpType.KEY_ROTATE,
            OpType.KEY_ADD,
            OpType.KEY_REVOKE,
            OpType.SNAPSHOT,
            OpType.SELFMODEL_SNAPSHOT,
            OpType.CASCADE,
            OpType.BRANCH_CREATE,
            OpType.BRANCH_CLOSE,
            OpType.BRANCH_MERGE,
            OpType.BRANCH_POLICY,
            OpType.MERGE_OVERRIDE,
            OpType.INTEGRITY_CHECK,
            OpType.READ_RECEIPT,
        )
    }
    assert all(RESERVED_OPS.values())


@pytest.mark.parametrize("hooks", [None, ()])
@pytest.mark.parametrize(
    "op_type", sorted(set(RESERVED_OPS) - {OpType.BRANCH_CREATE.value, OpType.CASCADE.value})
)
def test_the_api_refuses_reserved_ops_with_or_without_hooks(
    path: Path, op_type: str, hooks: tuple[()] | None
) -> None:
    """Ledger.append refuses a caller's reserved op even on the bare ledger; nothing written."""
    with Ledger.open(path, hooks=hooks) as ledger:
        size = ledger.size()
        with pytest.raises(RefusedError, match=f"{op_type} is written only by memroot"):
            ledger.append(_op(op_type, {"x": 1}))
        with pytest.raises(RefusedError, match="written only by memroot"):
            ledger.append_batch([_event(), _op(op_type, {"x": 1})])
        assert ledger.size() == size


def test_a_caller_cannot_mark_an_op_as_memroots(path: Path) -> None:
    """The mark is no argument, and dataclasses.replace of a marked op drops it."""
    with pytest.raises(TypeError):
        OpInput(**{**_fields(), "_library": True})
    marked = _library_op(Ledger.system_op(OpType.INTEGRITY_CHECK, {"ok": True}))
    copied = dataclasses.replace(marked, actor_id="mallory")
    with Ledger.open(path, hooks=()) as ledger:
        ledger.append(marked)  # memroot's own writer
        with pytest.raises(RefusedError):
            ledger.append(copied)


def _fields() -> dict[str, Any]:
    return {
        "op_type": "INTEGRITY_CHECK",
        "actor_id": "m",
        "actor_type": "HUMAN_USER",
        "namespace_id": "ns",
        "payload": {},
        "policy_version": "p",
    }


def test_a_cascade_is_refused_by_the_default_hooks(path: Path) -> None:
    """A hand-written CASCADE is refused by Ledger.open(path) (the default hook stack)."""
    with Ledger.open(path) as ledger:
        size = ledger.size()
        with pytest.raises(RefusedError, match="by: memroot cascade"):
            ledger.append(_op("CASCADE", {"touched": []}))
        assert ledger.size() == size


def test_plain_open_validates_like_the_cli(path: Path) -> None:
    """Ledger.open(path) refuses an ASSERT citing no event and a FALSIFY with an unknown field."""
    with Ledger.open(path) as ledger:
        size = ledger.size()
        bogus = "01890a5d-ac96-774b-bcce-b302099a8057"
        payload = {
            "object_type": "FACT",
            "epistemic_type": "OBSERVED",
            "source_type": "USER_STATED",
            "evidence_ids": [bogus],
            "value": "v",
            "confidence": 0.9,
            "salience": 0.5,
        }
        with pytest.raises(RefusedError, match=bogus):
            ledger.append(_op("ASSERT", payload, actor_type="AI_AGENT"))
        event = ledger.append(_event()).id
        obj = ledger.append(
            _op("ASSERT", {**payload, "evidence_ids": [event]}, actor_type="AI_AGENT")
        ).id
        with pytest.raises(ValidationError, match="colour"):
            ledger.append(
                _op(
                    "FALSIFY",
                    {"reason": "wrong", "colour": "red"},
                    target_id=obj,
                    target_type="memory_object",
                )
            )
        assert ledger.size() == size + 2


def test_explicit_empty_hooks_is_the_bare_ledger(path: Path) -> None:
    """hooks=() installs nothing: an ASSERT the memory model would refuse is appended."""
    with Ledger.open(path, hooks=()) as ledger:
        assert ledger.hooks == []
        ledger.append(_op("ASSERT", {"anything": 1}))
    with Ledger.open(path, readonly=True) as ledger:
        assert ledger.hooks == []


def test_ts_window() -> None:
    """ts at most 1 h ahead of the clock and at most 24 h before the previous entry."""
    now = 10**15
    check_ts(now + TS_MAX_AHEAD_US, now, now)
    check_ts(now - TS_MAX_BEHIND_US, now, now)
    check_ts(0, None, now)
    with pytest.raises(ValidationError, match="ahead of the clock") as e:
        check_ts(now + TS_MAX_AHEAD_US + 1, None, now)
    assert e.value.field == "ts"
    with pytest.raises(ValidationError, match="before the branch's previous entry"):
        check_ts(now - TS_MAX_BEHIND_US - 1, now, now)


def test_append_applies_the_ts_window_and_writes_nothing(path: Path) -> None:
    """A batch with one out-of-window ts is refused whole."""
    with Ledger.open(path, hooks=()) as ledger:
        size = ledger.size()
        with pytest.raises(ValidationError, match="ts"):
            ledger.append_batch([_event(), _event(ts=9_000_000_000_000_000_000)])
        with pytest.raises(ValidationError, match="ts"):
            ledger.append(_event(ts=now_us() - 2 * TS_MAX_BEHIND_US))
        assert ledger.size() == size
        ledger.append(_event(ts=now_us() - 60_000_000))


def test_parent_event_must_exist_or_come_earlier_in_the_batch(path: Path) -> None:
    """A dangling parent_event_id is refused; a parent earlier in the same batch is fine."""
    with Ledger.open(path, hooks=()) as ledger:
        with pytest.raises(NotFoundError, match="names no event"):
            ledger.append(_event(parent_event_id="01890a5d-ac96-774b-bcce-b302099a8057"))
        parent = "01890a5d-ac96-774b-bcce-b302099a8058"
        ledger.append_batch([_event(id=parent), _event(parent_event_id=parent)])


@pytest.mark.parametrize("name", ["actor_id", "stream", "namespace_id"])
@pytest.mark.parametrize("bad", ["a\nb", "a\x00", "\x1b[31m", "a\u2028b", "a\x85"])
def test_control_characters_in_identifiers_are_refused(name: str, bad: str) -> None:
    """Identifiers with control characters are refused naming the field."""
    with pytest.raises(ValidationError, match="control characters") as e:
        _event(**{name: bad})
    assert e.value.field == name


def test_content_may_hold_newlines() -> None:
    """Content is text, not an identifier: newlines are fine."""
    assert _event(content="line 1\nline 2").content == "line 1\nline 2"


@pytest.mark.parametrize(
    "text,error,what",
    [
        ('{"a": 1, "a": 2}', ValidationError, "duplicate JSON key 'a'"),
        ('{"a": NaN}', ValidationError, "NaN"),
        ('{"a": -Infinity}', ValidationError, "Infinity"),
        ("[" * 50_000 + "]" * 50_000, ValidationError, "MAX_JSON_DEPTH"),
        ("{", DecodeError, "not valid JSON"),
    ],
)
def test_parse_json_is_strict(text: str, error: type[Exception], what: str) -> None:
    """Duplicate keys, NaN/Infinity and runaway nesting are refused, naming the rule."""
    with pytest.raises(error, match=what):
        parse_json(text)


def test_deep_metadata_is_refused_naming_the_limit() -> None:
    """A field nesting deeper than MAX_FIELD_DEPTH (30, what the entry's 32 leave it) is refused."""
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    request = {
        "kind": "event",
        "stream": "s",
        "actor_id": "a",
        "actor_type": "HUMAN_USER",
        "role": "USER",
        "content": "c",
        "namespace_id": "ns",
        "metadata": {"deep": deep},
    }
    with pytest.raises(ValidationError, match="deeper than 30 levels"):
        parse_input(request)
