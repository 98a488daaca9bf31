"""Tests of ledger.entries: request validation, UUIDv7 ids and the entry byte format."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger import encoding
from memroot.ledger.entries import (
    FORMAT_VERSION,
    MAX_CONTENT_BYTES,
    PREV_OFFSET,
    ZERO_HASH,
    Entry,
    EventInput,
    Kind,
    OpInput,
    build_entry,
    check_uuid,
    new_uuid,
    parse_input,
)
from memroot.ledger.errors import DecodeError, ValidationError
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.vocab import ActorType, OpType, Role

EVENT: dict[str, Any] = {
    "kind": "event",
    "stream": "s1",
    "actor_id": "alice",
    "actor_type": "HUMAN_USER",
    "role": "USER",
    "content": "hello",
    "namespace_id": "ns",
}
OP: dict[str, Any] = {
    "kind": "op",
    "op_type": "ASSERT",
    "actor_id": "agent",
    "actor_type": "AI_AGENT",
    "namespace_id": "ns",
    "payload": {"value": 1},
    "policy_version": "p/1",
}
EVENT_REQUIRED = ("stream", "actor_id", "actor_type", "role", "content", "namespace_id")
OP_REQUIRED = ("op_type", "actor_id", "actor_type", "namespace_id", "payload", "policy_version")
UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\Z")


def refused(obj: Any) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        parse_input(obj)
    return info.value


# -- validation: every required field, every enumeration ------------------------------------------


@pytest.mark.parametrize("name", EVENT_REQUIRED)
def test_event_missing_field_is_named(name: str) -> None:
    """An event without a required field is refused naming that field."""
    err = refused({k: v for k, v in EVENT.items() if k != name})
    assert err.field == name and name in str(err)


@pytest.mark.parametrize("name", OP_REQUIRED)
def test_op_missing_field_is_named(name: str) -> None:
    """An operation without a required field is refused naming that field."""
    err = refused({k: v for k, v in OP.items() if k != name})
    assert err.field == name and name in str(err)


@pytest.mark.parametrize("name", EVENT_REQUIRED)
def test_event_null_field_is_named(name: str) -> None:
    """A required event field given as null is refused naming it."""
    assert refused({**EVENT, name: None}).field == name


@pytest.mark.parametrize(
    ("base", "name", "value"),
    [
        (EVENT, "stream", ""),
        (EVENT, "stream", 7),
        (EVENT, "actor_id", "x" * 4097),
        (EVENT, "namespace_id", ["ns"]),
        (EVENT, "content", 5),
        (EVENT, "content", "\ud800"),
        (EVENT, "metadata", "not a map"),
        (EVENT, "metadata", {"x": float("nan")}),
        (EVENT, "metadata", {"x": {1, 2}}),
        (EVENT, "context", [1]),
        (EVENT, "parent_event_id", "nope"),
        (EVENT, "id", "01890A5D-AC96-774B-BCCE-B302099A8057"),
        (EVENT, "ts", -1),
        (EVENT, "ts", True),
        (EVENT, "ts", 2**63),
        (EVENT, "ts", 1.5),
        (OP, "payload", [1]),
        (OP, "payload", {"n": 2**64}),
        (OP, "policy_version", ""),
        (OP, "target_id", 3),
        (OP, "target_type", ""),
        (OP, "context", "x"),
    ],
)
def test_bad_value_is_named(base: dict[str, Any], name: str, value: Any) -> None:
    """A field of the wrong type, shape or range is refused naming that field."""
    assert refused({**base, name: value}).field == name


@pytest.mark.parametrize(
    ("base", "name", "enum"),
    [
        (EVENT, "actor_type", ActorType),
        (EVENT, "role", Role),
        (OP, "actor_type", ActorType),
        (OP, "op_type", OpType),
    ],
)
def test_every_enumeration_is_checked(base: dict[str, Any], name: str, enum: Any) -> None:
    """Every value of an enumeration is accepted; anything else (case too) is refused, named."""
    for member in enum:
        assert getattr(parse_input({**base, name: member.value}), name) == member.value
    for bad in ("NOT_A_VALUE", next(iter(enum)).value.lower(), 3):
        err = refused({**base, name: bad})
        assert err.field == name
        assert next(iter(enum)).value in str(err)  # the message lists what is allowed


def test_unknown_field_is_named() -> None:
    """A field that is not part of the request is refused naming it (not silently dropped)."""
    assert refused({**EVENT, "contnet": "typo"}).field == "contnet"
    assert refused({**OP, "payload_": {}}).field == "payload_"
    assert refused({**OP, "content": "ops have none"}).field == "content"


@pytest.mark.parametrize("obj", [[EVENT], "event", None, {**EVENT, "kind": "EVENT"}, {"a": 1}])
def test_not_a_request(obj: Any) -> None:
    """A non-object or an object without kind event/op is refused."""
    err = refused(obj)
    assert err.field in (None, "kind")


def test_content_size_limit() -> None:
    """Content over the limit is refused naming content; content at the limit is accepted."""
    assert refused({**EVENT, "content": "x" * (MAX_CONTENT_BYTES + 1)}).field == "content"
    assert len(parse_input({**EVENT, "content": "é" * (MAX_CONTENT_BYTES // 2)}).content) > 0


def test_constructors_validate() -> None:
    """EventInput and OpInput validate at construction, as parse_input does."""
    with pytest.raises(ValidationError) as info:
        EventInput(
            stream="s", actor_id="a", actor_type="ROBOT", role="USER", content="c", namespace_id="n"
        )
    assert info.value.field == "actor_type"
    with pytest.raises(ValidationError) as info:
        OpInput(
            op_type="ASSERT",
            actor_id="a",
            actor_type="AI_AGENT",
            namespace_id="n",
            payload={},
            policy_version="",
        )
    assert info.value.field == "policy_version"


def test_valid_inputs_keep_their_fields() -> None:
    """A valid request keeps every field it was given."""
    ev = parse_input(
        {
            **EVENT,
            "metadata": {"b": 1, "a": [1.5, None]},
            "id": new_uuid(),
            "ts": 123,
            "parent_event_id": new_uuid(),
            "context": {"git": "main"},
        }
    )
    assert isinstance(ev, EventInput)
    assert (ev.stream, ev.role, ev.ts, ev.metadata) == (
        "s1",
        "USER",
        123,
        {"a": [1.5, None], "b": 1},
    )
    op = parse_input({**OP, "target_id": "t", "target_type": "MEMORY_OBJECT"})
    assert isinstance(op, OpInput)
    assert (op.op_type, op.target_id, op.payload) == ("ASSERT", "t", {"value": 1})


# -- ids ---------------------------------------------------------------------------------------


def test_new_uuid_is_version_7() -> None:
    """new_uuid gives lowercase RFC 9562 UUIDv7 text: version 7, variant 10, time prefix."""
    before = time.time_ns() // 1_000_000
    ids = [new_uuid() for _ in range(2000)]
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids)
    for text in ids:
        assert UUID7.match(text), text
        u = uuid.UUID(text)
        assert (u.version, u.variant) == (7, uuid.RFC_4122)
        assert str(u) == text
        assert before <= u.int >> 80 <= after
        check_uuid(text, "id")
    prefixes = [uuid.UUID(t).int >> 80 for t in ids]
    assert prefixes == sorted(prefixes)  # time-ordered at millisecond resolution


def test_new_uuid_random_bits_vary() -> None:
    """All 74 random bits of UUIDv7 are used: every random hex digit takes many values."""
    ids = [new_uuid().replace("-", "") for _ in range(400)]
    for pos in [13, 14, 15, *range(17, 32)]:
        assert len({t[pos] for t in ids}) > 8, pos
    assert {t[16] for t in ids} == set("89ab")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "not-a-uuid",
        "01890A5D-AC96-774B-BCCE-B302099A8057",
        "01890a5dac96774bbcceb302099a8057",
        "01890a5d-ac96-774b-bcce-b302099a805",
        "01890a5d-ac96-774b-bcce-b302099a8057\n",
        5,
        None,
        b"01890a5d-ac96-774b-bcce-b302099a8057",
    ],
)
def test_check_uuid_rejects(bad: Any) -> None:
    """check_uuid refuses anything but canonical lowercase UUID text, naming the field."""
    with pytest.raises(ValidationError) as info:
        check_uuid(bad, "payload.target_event_id")
    assert info.value.field == "payload.target_event_id"


# -- entry bytes -------------------------------------------------------------------------------


def entry_value(**over: Any) -> list[Any]:
    fields = {
        "v": 1,
        "prev": bytes(range(32)),
        "seq": 5,
        "branch": "main",
        "ts": 10,
        "kind": "op",
        "type": "ASSERT",
        "body": {"id": "x"},
    }
    fields.update(over)
    return list(fields.values())


def test_build_entry_format() -> None:
    """Entry bytes are the canonical array [v, prev, seq, branch, ts, kind, type, body]."""
    prev = bytes(range(32))
    e = build_entry(prev, 5, "main", 10, Kind.OP, "ASSERT", {"id": "x", "a": 1.5})
    assert e.raw == encoding.encode(
        [FORMAT_VERSION, prev, 5, "main", 10, "op", "ASSERT", {"a": 1.5, "id": "x"}]
    )
    assert e.raw[PREV_OFFSET : PREV_OFFSET + 32] == prev  # fixed offset for streaming links
    assert e.hash == leaf_hash(e.raw)
    again = Entry.from_bytes(e.raw)
    assert again == e


def test_prev_offset_holds_for_every_seq_and_body() -> None:
    """prev sits at bytes 4..35 whatever the other fields are."""
    for seq in (0, 23, 24, 2**32, 2**40 - 1):
        e = build_entry(ZERO_HASH, seq, "branch-x", 2**62, Kind.EVENT, "EVENT", {"k": "v" * 300})
        assert e.raw[:PREV_OFFSET] == b"\x88\x01\x58\x20"
        assert e.raw[PREV_OFFSET : PREV_OFFSET + 32] == ZERO_HASH


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"v": 2}, "version"),
        ({"v": True}, "version"),
        ({"prev": bytes(31)}, "prev"),
        ({"prev": "00" * 32}, "prev"),
        ({"seq": -1}, "seq"),
        ({"seq": "1"}, "seq"),
        ({"branch": ""}, "branch"),
        ({"branch": "-x"}, "branch"),
        ({"branch": "a b"}, "branch"),
        ({"branch": "x" * 65}, "branch"),
        ({"branch": ["main"]}, "branch"),
        ({"branch": {"main": 1}}, "branch"),
        ({"ts": -1}, "ts"),
        ({"ts": 2**63}, "ts"),
        ({"ts": 1.0}, "ts"),
        ({"kind": "EVENT"}, "kind"),
        ({"kind": ["op"]}, "kind"),
        ({"type": ""}, "type"),
        ({"type": 3}, "type"),
        ({"body": []}, "body"),
        ({"body": None}, "body"),
    ],
)
def test_from_bytes_rejects_malformed_entry(over: dict[str, Any], message: str) -> None:
    """Well-formed CBOR that is not a well-formed entry is a DecodeError naming the field."""
    with pytest.raises(DecodeError, match=message):
        Entry.from_bytes(encoding.encode(entry_value(**over)))


@pytest.mark.parametrize("value", [entry_value()[:7], [*entry_value(), 1], {"v": 1}, 1])
def test_from_bytes_rejects_wrong_shape(value: Any) -> None:
    """Anything but an array of exactly 8 items is not an entry."""
    with pytest.raises(DecodeError, match="array of 8"):
        Entry.from_bytes(encoding.encode(value))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_from_bytes_garbage_is_decode_error(data: bytes) -> None:
    """Arbitrary bytes give an Entry or a DecodeError, never another exception."""
    with contextlib.suppress(DecodeError):
        Entry.from_bytes(data)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-(2**64), 2**64 - 1),
            st.text(max_size=5),
            st.binary(max_size=33),
            st.lists(st.integers(0, 9), max_size=2),
            st.dictionaries(st.text(max_size=2), st.integers(0, 9), max_size=2),
        ),
        min_size=8,
        max_size=8,
    )
)
def test_from_bytes_wrong_types_are_decode_errors(value: list[Any]) -> None:
    """Any canonical 8-item array decodes to an Entry or is a DecodeError (never a crash)."""
    raw = encoding.encode(value)
    try:
        e = Entry.from_bytes(raw)
    except DecodeError:
        return
    assert e.raw == raw and e.hash == leaf_hash(raw)
