"""Fuzzing: every parser of outside input fails only with memroot's documented errors.

The CBOR decoder, entry decoding, the signed-note, vkey, checkpoint and tlog-proof parsers,
the JSON import (``parse_input`` on any JSON value) and the bundle reader and auditor get
random and mutated input; anything but a result or a ``MemrootError`` subclass fails the test.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger import encoding
from memroot.ledger.bundle.audit import audit_bundle
from memroot.ledger.bundle.export import MANIFEST, BundleReader, export_bundle
from memroot.ledger.entries import Entry, parse_input
from memroot.ledger.errors import DecodeError, MemrootError, ProofError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import (
    Verifier,
    open_checkpoint,
    open_note,
    parse_checkpoint,
    parse_tlog_proof,
)

ORIGIN = "example.org/fuzz"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=25,
)
cbor_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.binary(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)


def mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, byte) edits: 0 flips, 1 inserts, 2 deletes, 3 truncates."""
    out = bytearray(data)
    for kind, pos, value in edits:
        if not out:
            out.append(value)
            continue
        i = pos % len(out)
        if kind == 0:
            out[i] ^= value or 1
        elif kind == 1:
            out.insert(i, value)
        elif kind == 2:
            del out[i]
        else:
            del out[i:]
    return bytes(out)


edits = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 2**16), st.integers(0, 255)), min_size=1, max_size=4
)


# -- CBOR and entries ---------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=300))
def test_cbor_decoder_on_random_bytes(data: bytes) -> None:
    """Random bytes decode to a value that re-encodes to them, or raise DecodeError."""
    try:
        value = encoding.decode(data)
    except DecodeError:
        return
    assert encoding.encode(value) == data


@FUZZ
@given(cbor_values, edits)
def test_cbor_decoder_on_mutated_encodings(value: Any, changes: list[tuple[int, int, int]]) -> None:
    """Mutated canonical encodings decode canonically or raise DecodeError, nothing else."""
    data = mutate(encoding.encode(value), changes)
    try:
        again = encoding.decode(data)
    except DecodeError:
        return
    assert encoding.encode(again) == data


@FUZZ
@given(st.binary(max_size=300) | cbor_values.map(encoding.encode))
def test_entry_decoding_on_random_input(data: bytes) -> None:
    """Anything that is not a well-formed entry raises DecodeError."""
    try:
        entry = Entry.from_bytes(data)
    except DecodeError:
        return
    assert entry.raw == data


# -- notes, keys, checkpoints, proofs -----------------------------------------------------------


@pytest.fixture(scope="module")
def sample() -> Iterator[dict[str, Any]]:
    """A small real ledger: a checkpoint note, a tlog proof, its vkey, and a bundle."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "l.db"
        with Ledger.init(path, origin=ORIGIN) as ledger:
            from memroot.ledger.entries import EventInput

            for i in range(20):
                ledger.append(
                    EventInput(
                        stream="s",
                        actor_id="a",
                        actor_type="AI_AGENT",
                        role="USER",
                        content=f"c{i}",
                        namespace_id="ns",
                    )
                )
            note = ledger.checkpoint().note
            proof = ledger.tlog_proof(3)
            vkey = ledger.vkey()
            export_bundle(ledger, Path(d) / "bundle")
        yield {"note": note, "proof": proof, "vkey": vkey, "bundle": Path(d) / "bundle"}


def texts_near(sample_text: str) -> st.SearchStrategy[str]:
    raw = sample_text.encode()
    return st.text(max_size=200) | edits.map(lambda e: mutate(raw, e).decode("utf-8", "replace"))


NOTE_ERRORS = (DecodeError, ProofError)


@FUZZ
@given(data=st.data())
def test_note_and_checkpoint_parsers(sample: dict[str, Any], data: st.DataObject) -> None:
    """Random or mutated notes fail only with DecodeError or ProofError."""
    text = data.draw(texts_near(sample["note"]))
    verifier = Verifier.from_vkey(sample["vkey"])
    for parse in (
        lambda: open_note(text, [verifier]),
        lambda: open_checkpoint(text, [verifier], origin=ORIGIN),
        lambda: parse_checkpoint(text),
        lambda: parse_checkpoint(text.split("\n\n")[0] + "\n"),
    ):
        with contextlib.suppress(NOTE_ERRORS):
            parse()


@FUZZ
@given(data=st.data())
def test_tlog_proof_and_vkey_parsers(sample: dict[str, Any], data: st.DataObject) -> None:
    """Random or mutated tlog proofs and vkeys fail only with DecodeError."""
    proof_text = data.draw(texts_near(sample["proof"]))
    vkey_text = data.draw(texts_near(sample["vkey"]))
    for parse in (lambda: parse_tlog_proof(proof_text), lambda: Verifier.from_vkey(vkey_text)):
        with contextlib.suppress(DecodeError):
            parse()


# -- the JSON import ----------------------------------------------------------------------------

EVENT = {
    "kind": "event",
    "stream": "s",
    "actor_id": "a",
    "actor_type": "AI_AGENT",
    "role": "USER",
    "content": "c",
    "namespace_id": "ns",
}


@FUZZ
@given(json_values)
def test_parse_input_on_any_json_value(value: Any) -> None:
    """Any JSON value is an entry request or a ValidationError, nothing else."""
    with contextlib.suppress(ValidationError):
        parse_input(value)


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            [*EVENT, "metadata", "id", "ts", "op_type", "payload", "context", "parent_event_id"]
        ),
        json_values,
        max_size=6,
    ),
    st.sampled_from(["event", "op"]),
)
def test_parse_input_on_near_valid_requests(changes: dict[str, Any], kind: str) -> None:
    """Valid requests with random fields replaced are accepted or refused with ValidationError."""
    with contextlib.suppress(ValidationError):
        parse_input({**EVENT, "kind": kind, **changes})


@FUZZ
@given(st.text(max_size=200))
def test_json_lines_as_the_import_reads_them(line: str) -> None:
    """A line of text is parsed as JSON and then as a request: only documented errors escape."""
    try:
        parse_input(json.loads(line))
    except (json.JSONDecodeError, RecursionError):
        pass  # the CLI turns a JSON syntax error into a DecodeError naming the line
    except ValidationError:
        pass


# -- the bundle reader and auditor --------------------------------------------------------------

BUNDLE_FILES = [
    MANIFEST,
    "branches/main/entries",
    "branches/main/entries.idx",
    "branches/main/content",
    "branches/main/checkpoints",
]


def read_everything(path: Path) -> None:
    reader = BundleReader(path)
    for b in reader.branches():
        for _ in reader.iter_entry_rows(b.no):
            pass
        reader.checkpoints(b.no)
        for seq in (0, b.size // 2, b.size - 1):
            reader.entry_row(b.no, seq)
    for name in reader.section_names():
        list(reader.section(name))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BUNDLE_FILES), edits)
def test_bundle_with_a_damaged_file(
    sample: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, name: str, changes: Any
) -> None:
    """Any change to a data file is reported by the audit; the reader raises only MemrootError."""
    path = tmp_path_factory.mktemp("b") / "bundle"
    shutil.copytree(sample["bundle"], path)
    target = path / name
    before = target.read_bytes()
    target.write_bytes(mutate(before, changes))
    with contextlib.suppress(MemrootError):
        read_everything(path)
    report = audit_bundle(path, vkeys=[sample["vkey"]], update_trusted=False)
    if name != MANIFEST and target.read_bytes() != before:
        assert not report.ok, "a changed bundle file went unnoticed"


def pick(key: str, n: int) -> int:
    """A deterministic index in ``range(n)`` drawn from a text (hash() is salted per run)."""
    return sum(key.encode()) % n


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=12), min_size=1, max_size=3), json_values)
def test_bundle_with_a_forged_manifest_field(
    sample: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, keys: list[str], value: Any
) -> None:
    """Any manifest field set to any JSON value: the reader raises MemrootError, audit reports."""
    path = tmp_path_factory.mktemp("b") / "bundle"
    shutil.copytree(sample["bundle"], path)
    manifest = json.loads((path / MANIFEST).read_text())
    node: Any = manifest
    for key in keys[:-1]:
        if isinstance(node, dict) and node:
            node = node[sorted(node)[pick(key, len(node))]]
        elif isinstance(node, list) and node:
            node = node[len(key) % len(node)]
    if isinstance(node, dict):
        target = sorted(node)[pick(keys[-1], len(node))] if node and keys[-1] else keys[-1]
        node[target] = value
    elif isinstance(node, list) and node:
        node[len(keys[-1]) % len(node)] = value
    (path / MANIFEST).write_text(json.dumps(manifest))
    with contextlib.suppress(MemrootError):
        read_everything(path)
    audit_bundle(path, vkeys=[sample["vkey"]], update_trusted=False)
