"""One nesting limit everywhere: limit-1 and limit pass every surface, limit+1 is refused.

An entry's canonical CBOR nests at most ``MAX_DEPTH`` (32) containers, checked by the encoder
and the decoder, native and reference alike. A body field (``metadata``, ``context``,
``payload``) sits at depth 2 of its entry, so it may nest ``MAX_FIELD_DEPTH`` (30) levels, and
a JSON request (the object, then its field) ``MAX_JSON_DEPTH`` (31). Each surface (``memroot
append``, ``memroot import``, the facade's ``record``, the library's ``EventInput``/
``OpInput``) is tried on every nested field at limit-1, limit and limit+1: accepted and read
back (``verify`` OK), or refused with exit 3 / ``ValidationError`` naming the limit, nothing
written, never a traceback (issue 23 point 9: 31 levels in metadata passed the check and ended
in a ValueError traceback).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import memroot
from memroot.cli.main import cli
from memroot.ledger import encoding
from memroot.ledger._backend import NATIVE
from memroot.ledger.entries import (
    MAX_FIELD_DEPTH,
    MAX_JSON_DEPTH,
    EventInput,
    OpInput,
    parse_input,
    parse_json,
)
from memroot.ledger.errors import DecodeError, ValidationError
from memroot.ledger.ledger import Ledger

ORIGIN = "example.org/depth"
EVENT: dict[str, Any] = {
    "kind": "event",
    "stream": "s",
    "actor_id": "alice",
    "actor_type": "HUMAN_USER",
    "role": "USER",
    "content": "c",
    "namespace_id": "alice",
}
OP: dict[str, Any] = {
    "kind": "op",
    "op_type": "RELATE",
    "actor_id": "alice",
    "actor_type": "HUMAN_USER",
    "namespace_id": "alice",
    "policy_version": "p/1",
}
# (request, field): every field of a request that holds nested values.
FIELDS = [("event", "metadata"), ("event", "context"), ("op", "payload"), ("op", "context")]
DEPTHS = [MAX_FIELD_DEPTH - 1, MAX_FIELD_DEPTH, MAX_FIELD_DEPTH + 1]


def nested(levels: int) -> dict[str, Any]:
    """A map nesting ``levels`` maps and arrays in all (itself included)."""
    value: Any = "leaf"
    for i in range(levels - 1):
        value = [value] if i % 2 else {"k": value}
    return {"top": value}


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


def request(kind: str, field: str, levels: int) -> dict[str, Any]:
    base = dict(EVENT if kind == "event" else OP)
    if kind == "op" and field != "payload":
        base["payload"] = {"x": 1}
    base[field] = nested(levels)
    assert depth_of(base[field]) == levels
    return base


def memroot_cli(ledger: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(ledger), *args], catch_exceptions=False)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "d.ledger"
    assert memroot_cli(path, "init", "--origin", ORIGIN).exit_code == 0
    return path


def size(path: Path) -> int:
    with Ledger.open(path, readonly=True) as led:
        return led.size()


def accepted_and_read_back(path: Path, before: int, field: str, value: Any) -> None:
    assert size(path) == before + 1
    with Ledger.open(path, readonly=True) as led:
        entry = led.entry(before)
        assert entry.body[field] == value
    result = memroot_cli(path, "verify", "--no-update", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["ok"] is True, result.output


@pytest.mark.parametrize("levels", DEPTHS)
@pytest.mark.parametrize("kind,field", FIELDS)
@pytest.mark.parametrize("surface", ["append", "import"])
def test_cli_depth_boundary(
    ledger: Path, tmp_path: Path, surface: str, kind: str, field: str, levels: int
) -> None:
    """`memroot append`/`import`: a field of limit-1 or limit levels is stored, limit+1 exit 3."""
    req = request(kind, field, levels)
    line = json.dumps(req)
    before = size(ledger)
    if kind == "op" and levels <= MAX_FIELD_DEPTH:
        # Every operation type's hooks name the payload fields it takes, so a free nested
        # value is refused by them, not by depth: the op fields within the limit are stored
        # through the library on a bare ledger (test_facade_and_library_depth_boundary).
        pytest.skip("no operation type takes a free nested payload through the hooks")
    if surface == "append":
        result = memroot_cli(ledger, "append", line)
    else:
        (tmp_path / "in.jsonl").write_text(line + "\n")
        result = memroot_cli(ledger, "import", str(tmp_path / "in.jsonl"))
    assert "Traceback" not in result.output
    if levels <= MAX_FIELD_DEPTH:
        assert result.exit_code == 0, result.output
        accepted_and_read_back(ledger, before, field, req[field])
    else:
        assert result.exit_code == 3, result.output
        assert f"{MAX_JSON_DEPTH} levels" in result.stderr
        assert size(ledger) == before


@pytest.mark.parametrize("levels", DEPTHS)
@pytest.mark.parametrize("kind,field", FIELDS)
def test_facade_and_library_depth_boundary(
    ledger: Path, kind: str, field: str, levels: int
) -> None:
    """The facade's record and EventInput/OpInput: the same limit, a ValidationError past it."""
    req = request(kind, field, levels)
    before = size(ledger)
    fields = {k: v for k, v in req.items() if k != "kind"}
    make = EventInput if kind == "event" else OpInput
    if levels <= MAX_FIELD_DEPTH:
        item = make(**fields)
        if kind == "event":
            with memroot.open(ledger) as mem:
                mem.record(req)
        else:
            with Ledger.open(ledger, hooks=()) as bare:  # no layer names the payload's fields
                bare.append(item)
        accepted_and_read_back(ledger, before, field, req[field])
    else:
        with pytest.raises(ValidationError, match=f"deeper than {MAX_FIELD_DEPTH} levels"):
            make(**fields)
        with pytest.raises(ValidationError, match=f"deeper than {MAX_FIELD_DEPTH} levels"):
            parse_input(req)
        with memroot.open(ledger) as mem, pytest.raises(ValidationError, match="deeper"):
            mem.record(req)
        with pytest.raises(ValidationError, match="MAX_JSON_DEPTH"):
            parse_json(json.dumps(req))
        assert size(ledger) == before


@pytest.mark.parametrize(
    "levels", [encoding.MAX_DEPTH - 1, encoding.MAX_DEPTH, encoding.MAX_DEPTH + 1]
)
def test_cbor_encoder_and_decoder_share_the_limit(levels: int) -> None:
    """Encoder and decoder, native and reference: MAX_DEPTH levels round-trip, one more fails."""
    value = nested(levels)
    if levels <= encoding.MAX_DEPTH:
        data = encoding.encode(value)
        assert encoding._py_encode(value) == data
        assert encoding.decode(data) == value and encoding._py_decode(data) == value
        return
    with pytest.raises(ValueError, match="nesting deeper"):
        encoding.encode(value)
    with pytest.raises(ValueError, match="nesting deeper"):
        encoding._py_encode(value)
    # Bytes of one more level than the limit, built by hand (no encoder writes them).
    data = encoding.encode(nested(encoding.MAX_DEPTH))
    deeper = b"\x81" + data  # an array of one item around the deepest allowed value
    with pytest.raises(DecodeError):
        encoding._py_decode(deeper)
    if NATIVE is not None:
        with pytest.raises(DecodeError):
            encoding.decode(deeper)
