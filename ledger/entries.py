"""Entries: the one record type of the ledger (SPEC "Normative formats" 3).

Entry bytes are the canonical CBOR array ``[v, prev, seq, branch, ts, kind, type, body]``:

- ``v``: format version (1); ``prev``: the 32-byte entry hash of ``seq - 1`` (32 zero bytes
  for the canonical genesis, the ``BRANCH_CREATE`` entry's hash for a branch genesis);
- ``seq``: 0, 1, 2, ... per branch with no gaps; ``branch``: the branch name (``"main"`` for
  the canonical branch); ``ts``: microseconds since the Unix epoch, UTC;
- ``kind``: ``"genesis"``, ``"event"`` or ``"op"``; ``type``: ``"GENESIS"``, ``"EVENT"``
  or the operation type; ``body``: a map whose keys depend on the kind (docs/FORMAT.md).

Because ``v`` is a one-byte integer and ``prev`` a 32-byte string right after the array head,
``prev`` always sits at bytes 4..35, so a streaming verifier can check links without decoding.

This module also validates what callers ask to append (``EventInput``, ``OpInput``): a bad
field is refused with a ``ValidationError`` naming it, before anything is written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, NamedTuple

from memroot.ledger import encoding
from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.errors import DecodeError, RefusedError, ValidationError
from memroot.ledger.hashing import HASH_SIZE, EntryHash, leaf_hash
from memroot.ledger.vocab import ActorType, OpType, Role

__all__ = [
    "CANONICAL_BRANCH",
    "FIELD_DEPTH",
    "FORMAT_VERSION",
    "MAX_BODY_BYTES",
    "MAX_CONTENT_BYTES",
    "MAX_FIELD_DEPTH",
    "MAX_JSON_DEPTH",
    "MAX_SEQ",
    "MAX_SNAPSHOT_EVERY",
    "PREV_OFFSET",
    "RESERVED_OPS",
    "TS_MAX_AHEAD_US",
    "TS_MAX_BEHIND_US",
    "ZERO_HASH",
    "Entry",
    "EventInput",
    "Kind",
    "OpInput",
    "build_entry",
    "check_ts",
    "check_uuid",
    "new_uuid",
    "new_uuids",
    "now_us",
    "parse_event_lines",
    "parse_input",
    "parse_json",
    "refuse_reserved",
]

FORMAT_VERSION: Final = 1
CANONICAL_BRANCH: Final = "main"
ZERO_HASH: Final = EntryHash(bytes(HASH_SIZE))
PREV_OFFSET: Final = 4  # 0x88 (array of 8), 0x01 (v), 0x58 0x20 (bstr of 32), then prev
MAX_CONTENT_BYTES: Final = 16 * 1024 * 1024
MAX_BODY_BYTES: Final = 1024 * 1024
_UUID_RE: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
_BRANCH_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_MAX_TS: Final = 2**63 - 1
MAX_SEQ: Final = 2**40 - 1
"""The largest seq a branch can hold (the store keys an entry by branch number and 40 bits)."""
MAX_SNAPSHOT_EVERY: Final = 1_000_000
"""The largest automatic snapshot cadence (``snapshot_every``) a ledger may record."""
FIELD_DEPTH: Final = 2
"""Where a body field (``metadata``, ``context``, ``payload``) sits in its entry: the entry is an
array (depth 0) holding the body map (depth 1) holding the field (depth 2)."""
MAX_FIELD_DEPTH: Final = encoding.MAX_DEPTH - FIELD_DEPTH
"""How many maps and arrays a field's value may nest (30): what the entry's limit leaves it."""
MAX_JSON_DEPTH: Final = MAX_FIELD_DEPTH + 1
"""How deeply a JSON request (``append``/``import``) may nest: the request object, then a
field of ``MAX_FIELD_DEPTH`` levels (31)."""
TS_MAX_AHEAD_US: Final = 3_600 * 1_000_000
"""An entry's ``ts`` may be at most this far (1 hour) ahead of the clock at append."""
TS_MAX_BEHIND_US: Final = 86_400 * 1_000_000
"""An entry's ``ts`` may be at most this far (24 hours) before the previous entry's."""
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

RESERVED_OPS: Final[dict[str, str]] = {
    OpType.KEY_ROTATE.value: "memroot rotate-key",
    OpType.KEY_ADD.value: "memroot key add",
    OpType.KEY_REVOKE.value: "memroot key revoke",
    OpType.SNAPSHOT.value: "memroot snapshot, Memory.snapshot() (and the automatic snapshot "
    "every N entries)",
    OpType.SELFMODEL_SNAPSHOT.value: "memroot selfmodel record",
    OpType.CASCADE.value: "memroot cascade, Memory.cascade()",
    OpType.BRANCH_CREATE.value: "memroot branch create, Memory.fork()",
    OpType.BRANCH_CLOSE.value: "memroot branch close/discard/archive, memroot gc, "
    "Memory.close_branch()",
    OpType.BRANCH_MERGE.value: "memroot branch merge, Memory.merge()",
    OpType.BRANCH_POLICY.value: "memroot.memory_root.branches.set_branch_policy()",
    OpType.MERGE_OVERRIDE.value: "memroot branch merge --strategy PREFER_BRANCH, Memory.merge()",
    OpType.INTEGRITY_CHECK.value: "memroot's own verification records (no command yet)",
    OpType.READ_RECEIPT.value: "memroot.open(...).recall(receipt=...) and the MCP recall tool",
}
"""Operation types only memroot writes, each with the command (and facade call) that writes it.

``append``, ``import`` and ``Ledger.append`` refuse them from callers (``refuse_reserved``):
a hand-written ``KEY_ROTATE``, ``SNAPSHOT`` or ``READ_RECEIPT`` would otherwise be in the
chain for good and fail every later audit. The genesis entry is a kind of its own that no
request can name. This is the one registry: memroot's writer of such a type marks its request
with ``_library_op``, which accepts only a type listed here, so a new writer of its own type
must list it (tests/unit/ledger/test_reserved_writers.py finds every writer in the code).
"""


class Kind(StrEnum):
    """What an entry records."""

    GENESIS = "genesis"
    EVENT = "event"
    OP = "op"


_KINDS: Final = {k.value: k for k in Kind}
_KIND_TEXT: Final = {k: k.value for k in Kind}  # plain str for the encoder, without Enum lookup
_VALID_BRANCHES: set[str] = set()  # names already matched against _BRANCH_RE


class Entry(NamedTuple):
    """One decoded ledger entry together with the exact bytes it was decoded from.

    Build one with ``build_entry`` (to append) or ``Entry.from_bytes`` (to verify). ``hash``
    is always computed from ``raw``: the bytes as stored, never a re-serialisation.

    An immutable named tuple rather than a frozen dataclass: one is built for every entry
    appended or verified, and a tuple is built in a fraction of the time.
    """

    v: int
    prev: EntryHash
    seq: int
    branch: str
    ts: int
    kind: Kind
    type: str
    body: dict[str, Any]
    raw: bytes
    hash: EntryHash

    def __repr__(self) -> str:
        return (
            f"Entry(branch={self.branch!r}, seq={self.seq}, kind={self.kind.value!r}, "
            f"type={self.type!r}, hash={self.hash.hex()})"
        )

    @classmethod
    def from_bytes(cls, raw: bytes, entry_hash: bytes | None = None) -> Entry:
        """Decode entry bytes strictly (auditor's step 1).

        ``entry_hash`` may pass in ``leaf_hash(raw)`` when the caller already computed it.

        Raises:
            DecodeError: if the bytes are not canonical CBOR or not a well-formed entry.
        """
        if _N is not None and type(raw) is bytes and type(entry_hash) in (bytes, type(None)):
            try:
                v, prev, seq, branch, ts, kind, type_, body, h = _N.decode_entry(raw, entry_hash)
            except _N.Reject:
                pass  # the reference below raises the DecodeError and its message
            else:
                k = _KINDS[kind]
                return cls(v, EntryHash(prev), seq, branch, ts, k, type_, body, raw, EntryHash(h))
        value = encoding.decode(raw)
        if type(value) is not list or len(value) != 8:
            raise DecodeError("an entry is a CBOR array of 8 items")
        v, prev, seq, branch, ts, kind, type_, body = value
        if v != FORMAT_VERSION or type(v) is not int:
            raise DecodeError(f"unsupported entry format version {v!r}")
        if type(prev) is not bytes or len(prev) != HASH_SIZE:
            raise DecodeError("entry prev must be a 32-byte string")
        if type(seq) is not int or seq < 0:
            raise DecodeError("entry seq must be a non-negative integer")
        if type(branch) is not str or branch not in _VALID_BRANCHES:  # a list is unhashable
            if type(branch) is not str or not _BRANCH_RE.match(branch):
                raise DecodeError(f"entry branch {branch!r} is not a valid branch name")
            if len(_VALID_BRANCHES) < 1024:
                _VALID_BRANCHES.add(branch)
        if type(ts) is not int or not 0 <= ts <= _MAX_TS:
            raise DecodeError("entry ts must be a non-negative integer (microseconds)")
        kind_ = _KINDS.get(kind) if type(kind) is str else None
        if kind_ is None:
            raise DecodeError(f"unknown entry kind {kind!r}")
        if type(type_) is not str or not type_:
            raise DecodeError("entry type must be a non-empty text string")
        if type(body) is not dict:
            raise DecodeError("entry body must be a map")
        return cls(
            v,
            EntryHash(prev),
            seq,
            branch,
            ts,
            kind_,
            type_,
            body,
            raw,
            EntryHash(entry_hash) if entry_hash is not None else leaf_hash(raw),
        )


def build_entry(
    prev: bytes,
    seq: int,
    branch: str,
    ts: int,
    kind: Kind,
    type_: str,
    body: dict[str, Any],
    *,
    plain: bool | None = None,
) -> Entry:
    """Encode a new entry canonically and return it with its hash.

    ``plain`` is for bodies built by this module from validated inputs, whose maps are already
    in canonical key order (``EventInput.body``, ``OpInput.body``): True when they hold no
    float. It lets the encoder skip re-checking the body; None checks everything.

    Raises:
        ValidationError: if the encoded entry exceeds the size limit.
        TypeError, ValueError: if a value is outside the data model (a programming mistake;
            inputs are validated before they get here).
    """
    value = [FORMAT_VERSION, prev, seq, branch, ts, _KIND_TEXT[kind], type_, body]
    h: bytes | None = None
    if _N is not None:
        try:
            raw, h = _N.encode_leaf(value)
        except _N.Reject:
            raw = encoding.encode(value)  # the reference raises the TypeError or ValueError
    else:
        raw = encoding.encode(value) if plain is None else encoding.encode_normalized(value, plain)
    if len(raw) > MAX_BODY_BYTES + 1024:
        raise ValidationError(
            f"entry is {len(raw)} bytes; the limit is {MAX_BODY_BYTES} for the body", field="body"
        )
    return Entry(
        FORMAT_VERSION,
        EntryHash(prev),
        seq,
        branch,
        ts,
        kind,
        type_,
        body,
        raw,
        EntryHash(h) if h is not None else leaf_hash(raw),
    )


def now_us() -> int:
    """Return the current time in microseconds since the Unix epoch, UTC."""
    return time.time_ns() // 1000


def new_uuid() -> str:
    """Return a new UUIDv7 (RFC 9562) as lowercase text.

    Version 7 ids start with the time, so ids assigned in order insert at the end of an index.
    """
    return new_uuids(1)[0]


def new_uuids(n: int) -> list[str]:
    """Return ``n`` new UUIDv7s sharing one clock reading and one read of random bytes."""
    ms = time.time_ns() // 1_000_000
    head = f"{ms >> 16 & 0xFFFFFFFF:08x}-{ms & 0xFFFF:04x}-7"
    rand = os.urandom(10 * n).hex()
    out = []
    for i in range(0, 20 * n, 20):
        r = rand[i : i + 20]
        # 48-bit ms | version 7 + 12 random bits | variant 0b10 + 62 random bits
        out.append(f"{head}{r[:3]}-{_VARIANT[r[3]]}{r[4:7]}-{r[7:19]}")
    return out


_VARIANT: Final = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}


def check_uuid(value: Any, name: str) -> str:
    """Return ``value`` if it is a UUID in canonical lowercase text form.

    Raises:
        ValidationError: naming ``name`` otherwise.
    """
    if type(value) is not str or not _UUID_RE.match(value):
        raise ValidationError(f"{name} must be a lowercase UUID string, got {value!r}", field=name)
    return value


def _text(obj: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = obj.get(name)
    if value is None:
        if required:
            raise ValidationError(f"missing required field {name!r}", field=name)
        return None
    if type(value) is not str or not value or len(value) > 4096:
        raise ValidationError(
            f"{name} must be a non-empty string of at most 4096 characters, got {value!r}",
            field=name,
        )
    if _CONTROL_RE.search(value):
        # An identifier with a newline or an escape sequence forges lines of `log` output
        # and of the terminal that shows it.
        raise ValidationError(
            f"{name} must not contain control characters, got {value!r}", field=name
        )
    return value


def _enum(obj: Mapping[str, Any], name: str, enum: type[StrEnum]) -> str:
    value = obj.get(name)
    if value is None:
        raise ValidationError(f"missing required field {name!r}", field=name)
    try:
        return enum(value).value
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise ValidationError(f"{name} {value!r} is not one of {allowed}", field=name) from None


def check_ts(ts: int, previous: int | None, now: int) -> None:
    """Check an entry's ``ts`` against the append window (docs/FORMAT.md "Time").

    ``ts`` may be at most ``TS_MAX_AHEAD_US`` ahead of ``now`` and at most
    ``TS_MAX_BEHIND_US`` before ``previous`` (the ts of the branch's previous entry; None for
    a genesis).

    Raises:
        ValidationError: naming ``ts`` and the bound it breaks.
    """
    if ts > now + TS_MAX_AHEAD_US:
        raise ValidationError(
            f"ts {ts} is {(ts - now) // 1_000_000} s ahead of the clock; at most "
            f"{TS_MAX_AHEAD_US // 1_000_000} s ahead is accepted",
            field="ts",
        )
    if previous is not None and ts < previous - TS_MAX_BEHIND_US:
        raise ValidationError(
            f"ts {ts} is {(previous - ts) // 1_000_000} s before the branch's previous entry "
            f"(ts {previous}); at most {TS_MAX_BEHIND_US // 1_000_000} s before is accepted",
            field="ts",
        )


def _library_op(op: OpInput) -> OpInput:
    """Mark ``op`` as written by memroot itself, so a ``RESERVED_OPS`` type is accepted.

    For memroot's own writers only (snapshots, key rotation, branches, merges, cascades,
    read receipts); the op is returned for chaining.

    Raises:
        ValueError: if ``op``'s type is not in ``RESERVED_OPS`` (a programming mistake: a type
            memroot writes itself must be reserved, or any caller could forge it).
    """
    if op.op_type not in RESERVED_OPS:
        raise ValueError(f"{op.op_type} is not in RESERVED_OPS: reserve it before writing it")
    object.__setattr__(op, "_library", True)
    return op


def refuse_reserved(op: OpInput) -> None:
    """Refuse an operation type that only memroot writes, unless memroot wrote this request.

    Raises:
        RefusedError: naming the type and the command that writes it.
    """
    command = RESERVED_OPS.get(op.op_type)
    if command is not None and not op._library:
        raise RefusedError(
            f"{op.op_type} is written only by memroot itself (by: {command}); it cannot be "
            "appended directly"
        )


def _ts(obj: Mapping[str, Any]) -> int | None:
    value = obj.get("ts")
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= _MAX_TS:
        raise ValidationError(
            f"ts must be an integer count of microseconds since the epoch, got {value!r}",
            field="ts",
        )
    return value


def _map(obj: Mapping[str, Any], name: str, *, required: bool) -> dict[str, Any] | None:
    """Validate an object-valued field; return it normalised (maps in canonical key order)."""
    value = obj.get(name)
    if value is None:
        if required:
            raise ValidationError(f"missing required field {name!r}", field=name)
        return None
    if type(value) is not dict:
        raise ValidationError(f"{name} must be an object, got {type(value).__name__}", field=name)
    try:
        # Checked where it will sit in the entry, so a value that passes here also encodes
        # (one limit: the entry's, encoding.MAX_DEPTH).
        normalized, _ = encoding.normalize(value, FIELD_DEPTH)
    except (TypeError, ValueError) as e:
        raise ValidationError(f"{name} holds a value memroot cannot store: {e}", field=name) from e
    return normalized  # type: ignore[no-any-return]


def _validate_input(
    item: Any,
    parse: Callable[[Mapping[str, Any]], dict[str, Any]],
    names: tuple[str, ...],
    maps: tuple[str, ...],
) -> None:
    """Validate a frozen input's fields; store its maps normalised and whether it is plain."""
    fields = parse({k: getattr(item, k) for k in names if getattr(item, k) is not None})
    for name in maps:
        object.__setattr__(item, name, fields[name])
    object.__setattr__(item, "plain", not any(_has_float(fields[name]) for name in maps))


def _has_float(value: Any) -> bool:
    kind = type(value)
    if kind is float:
        return True
    if kind is dict:
        return any(_has_float(v) for v in value.values())
    if kind is list:
        return any(_has_float(v) for v in value)
    return False


def _no_extra(obj: Mapping[str, Any], allowed: frozenset[str], what: str) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        raise ValidationError(f"unknown field {extra[0]!r} in {what}", field=extra[0])


@dataclass(frozen=True, slots=True)
class EventInput:
    """An RFC-0001 event to append; validated at construction.

    ``content`` is stored outside the entry, content-addressed by BLAKE3; the entry commits to
    a salted BLAKE3 commitment instead (SPEC 2). ``id`` and ``ts`` are assigned when absent.
    ``context`` carries optional agent context (e.g. git branch and commit) that is committed.

    Raises:
        ValidationError: naming the first missing or bad field.
    """

    stream: str
    actor_id: str
    actor_type: str
    role: str
    content: str
    namespace_id: str
    metadata: dict[str, Any] | None = None
    parent_event_id: str | None = None
    id: str | None = None
    ts: int | None = None
    context: dict[str, Any] | None = None
    plain: bool = field(default=True, init=False, repr=False, compare=False)
    """True when no float is present: the entry body encodes with the fast plain encoder."""

    def __post_init__(self) -> None:
        _validate_input(self, parse_event, _EVENT_INPUT_FIELDS, ("metadata", "context"))

    def body(self, event_id: str, commitment: bytes) -> dict[str, Any]:
        """Return the entry body for this event (the content replaced by its commitment)."""
        # Keys in canonical order (length first, then bytewise: RFC 8949 section 4.2.1 for
        # text keys), so the encoder's fast path applies.
        body: dict[str, Any] = {"id": event_id, "role": self.role, "stream": self.stream}
        if self.context is not None:
            body["context"] = self.context
        body["actor_id"] = self.actor_id
        if self.metadata is not None:
            body["metadata"] = self.metadata
        body["actor_type"] = self.actor_type
        body["namespace_id"] = self.namespace_id
        if self.parent_event_id is not None:
            body["parent_event_id"] = self.parent_event_id
        body["content_commitment"] = commitment
        return body


@dataclass(frozen=True, slots=True)
class OpInput:
    """An RFC-0002 operation (or one of memroot's own) to append; validated at construction.

    Every operation records actor, namespace, optional target and a mandatory policy_version.
    The payload's own fields are validated by the layer that understands the operation.

    Raises:
        ValidationError: naming the first missing or bad field.
    """

    op_type: str
    actor_id: str
    actor_type: str
    namespace_id: str
    payload: dict[str, Any]
    policy_version: str
    target_id: str | None = None
    target_type: str | None = None
    id: str | None = None
    ts: int | None = None
    context: dict[str, Any] | None = None
    plain: bool = field(default=True, init=False, repr=False, compare=False)
    """True when no float is present: the entry body encodes with the fast plain encoder."""
    _library: bool = field(default=False, init=False, repr=False, compare=False)
    """Set only by ``_library_op``: memroot itself wrote this request (``RESERVED_OPS``).

    Not an argument, and ``dataclasses.replace`` resets it, so no caller sets it by accident.
    """

    def __post_init__(self) -> None:
        _validate_input(self, parse_op, _OP_INPUT_FIELDS, ("payload", "context"))

    def body(self, op_id: str) -> dict[str, Any]:
        """Return the entry body for this operation."""
        # Keys in canonical order (see EventInput.body).
        body: dict[str, Any] = {"id": op_id}
        if self.context is not None:
            body["context"] = self.context
        body["payload"] = self.payload
        body["actor_id"] = self.actor_id
        if self.target_id is not None:
            body["target_id"] = self.target_id
        body["actor_type"] = self.actor_type
        if self.target_type is not None:
            body["target_type"] = self.target_type
        body["namespace_id"] = self.namespace_id
        body["policy_version"] = self.policy_version
        return body


# The fields a request may carry: the inputs' own (derived from the dataclasses), plus
# "kind" in the JSON form.
_EVENT_INPUT_FIELDS: Final = tuple(f.name for f in dataclasses.fields(EventInput) if f.init)
_OP_INPUT_FIELDS: Final = tuple(f.name for f in dataclasses.fields(OpInput) if f.init)
_EVENT_FIELDS: Final = frozenset({*_EVENT_INPUT_FIELDS, "kind"})
_OP_FIELDS: Final = frozenset({*_OP_INPUT_FIELDS, "kind"})


def parse_event(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the fields of an event request and return them normalised.

    Raises:
        ValidationError: naming the first missing or bad field.
    """
    _no_extra(obj, _EVENT_FIELDS, "an event")
    content = obj.get("content")
    if type(content) is not str:
        raise ValidationError(
            "missing required field 'content'"
            if content is None
            else f"content must be a string, got {type(content).__name__}",
            field="content",
        )
    size = len(content.encode("utf-8", "surrogatepass"))
    if size > MAX_CONTENT_BYTES:
        raise ValidationError(
            f"content is {size} bytes; the limit is {MAX_CONTENT_BYTES}", field="content"
        )
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValidationError("content is not valid Unicode text", field="content") from e
    out: dict[str, Any] = {
        "stream": _text(obj, "stream"),
        "actor_id": _text(obj, "actor_id"),
        "actor_type": _enum(obj, "actor_type", ActorType),
        "role": _enum(obj, "role", Role),
        "content": content,
        "namespace_id": _text(obj, "namespace_id"),
        "metadata": _map(obj, "metadata", required=False),
        "parent_event_id": (
            None
            if obj.get("parent_event_id") is None
            else check_uuid(obj["parent_event_id"], "parent_event_id")
        ),
        "id": None if obj.get("id") is None else check_uuid(obj["id"], "id"),
        "ts": _ts(obj),
        "context": _map(obj, "context", required=False),
    }
    return out


def parse_op(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the envelope fields of an operation request and return them normalised.

    Raises:
        ValidationError: naming the first missing or bad field.
    """
    _no_extra(obj, _OP_FIELDS, "an operation")
    return {
        "op_type": _enum(obj, "op_type", OpType),
        "actor_id": _text(obj, "actor_id"),
        "actor_type": _enum(obj, "actor_type", ActorType),
        "namespace_id": _text(obj, "namespace_id"),
        "payload": _map(obj, "payload", required=True),
        "policy_version": _text(obj, "policy_version"),
        "target_id": _text(obj, "target_id", required=False),
        "target_type": _text(obj, "target_type", required=False),
        "id": None if obj.get("id") is None else check_uuid(obj["id"], "id"),
        "ts": _ts(obj),
        "context": _map(obj, "context", required=False),
    }


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValidationError(f"duplicate JSON key {key!r}", field=key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValidationError(f"{name} is not a JSON number memroot stores")


def parse_json(text: str) -> Any:
    """Parse one JSON request strictly: no duplicate key, no NaN/Infinity, bounded nesting.

    Raises:
        DecodeError: if ``text`` is not JSON.
        ValidationError: for a duplicate key, a NaN or Infinity, or nesting deeper than
            ``MAX_JSON_DEPTH``.
    """
    too_deep = f"JSON nests deeper than {MAX_JSON_DEPTH} levels (MAX_JSON_DEPTH)"
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise DecodeError(f"not valid JSON: {e}") from e
    except RecursionError as e:
        raise ValidationError(too_deep) from e
    if _json_depth(value) > MAX_JSON_DEPTH:
        raise ValidationError(too_deep)
    return value


def _json_depth(value: Any) -> int:
    """Return how many arrays and objects ``value`` nests (0 for a scalar), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if type(item) is dict:
            items: Any = item.values()
        elif type(item) is list:
            items = item
        else:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_JSON_DEPTH:
            stack.extend((v, depth + 1) for v in items)
    return deepest


def parse_input(obj: Any) -> EventInput | OpInput:
    """Turn one JSON object (as the CLI reads it) into an event or operation request.

    ``{"kind": "event", ...}`` or ``{"kind": "op", ...}``; see the README for the fields.

    Raises:
        ValidationError: if ``obj`` is not an object, has no valid ``kind``, or a field is bad.
    """
    if not isinstance(obj, dict):
        raise ValidationError(f"an entry request must be a JSON object, got {type(obj).__name__}")
    kind = obj.get("kind")
    fields = {k: v for k, v in obj.items() if k != "kind" and v is not None}
    # Every field is passed, absent ones as None, so that a missing required field reaches
    # __post_init__ (a ValidationError naming it) instead of failing the call (a TypeError).
    if kind == "event":
        _no_extra(obj, _EVENT_FIELDS, "an event")
        return EventInput(**{**dict.fromkeys(_EVENT_INPUT_FIELDS), **fields})
    if kind == "op":
        _no_extra(obj, _OP_FIELDS, "an operation")
        return OpInput(**{**dict.fromkeys(_OP_INPUT_FIELDS), **fields})
    raise ValidationError(f"kind must be 'event' or 'op', got {kind!r}", field="kind")


_ACTOR_TYPES: Final = [m.value for m in ActorType]
_ROLES: Final = [m.value for m in Role]


def parse_event_lines(lines: list[str]) -> list[EventInput | None]:
    """Parse the common JSON Lines event request natively: each line's ``EventInput`` or None.

    A line gets its ``EventInput`` (equal to ``parse_input(parse_json(line))``) when it is a
    flat event object the native core validates in full: string, integer and null values, no
    duplicate key, no ``metadata`` or ``context``. Every other line gets None, and the caller
    parses it with ``parse_json`` and ``parse_input``, which accept it or raise their own error.
    All None on the pure-Python reference.
    """
    if _N is None:
        return [None] * len(lines)
    out: list[EventInput | None] = _N.event_inputs(
        lines, EventInput, object.__setattr__, _ACTOR_TYPES, _ROLES, MAX_CONTENT_BYTES
    )
    return out
