"""The native core against the Python reference, both in one process (issue 12).

Every native function must compute exactly what its reference computes: the same bytes for
encodings and hashes, the same values for decodes, the same roots and proof verdicts, and
the same refusals. Where the reference raises, the dispatching function (the one memroot
calls) must raise the reference's exception with the reference's message. The reference is
run with ``_backend.reference()``, which switches the ledger modules to the Python path.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import random
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memroot.ledger import _backend, encoding, hashing, merkle
from memroot.ledger.entries import Entry, Kind, build_entry
from memroot.ledger.errors import DecodeError, ProofError

native = pytest.importorskip("memroot._native", reason="the native core is not built")

if _backend.NATIVE is None:  # MEMROOT_BACKEND=python: the dispatchers are the reference
    pytestmark = pytest.mark.skip(reason="MEMROOT_BACKEND=python: nothing native to compare")


def _load_encoding_tests() -> Any:
    """The data-model strategy and malformed-CBOR classes of tests/unit/ledger."""
    path = Path(__file__).parents[1] / "ledger" / "test_encoding.py"
    spec = importlib.util.spec_from_file_location("_encoding_cases", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cases = _load_encoding_tests()
values = cases.values
same = cases.same


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", value)`` or ``(exception class name, message)``."""
    try:
        return "ok", fn()
    except Exception as e:
        return type(e).__name__, str(e)


def reference(fn: Callable[[], Any]) -> tuple[str, Any]:
    with _backend.reference():
        return outcome(fn)


# -- CBOR -------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(values)
def test_encode_is_byte_identical(x: Any) -> None:
    assert native.encode(x) == encoding._py_encode(x)
    assert encoding.encode(x) == encoding._py_encode(x)


@settings(max_examples=400, deadline=None)
@given(values)
def test_decode_gives_the_same_values(x: Any) -> None:
    raw = encoding._py_encode(x)
    assert same(native.decode(raw), encoding._py_decode(raw))
    assert same(encoding.decode(raw), x)


@settings(max_examples=300, deadline=None)
@given(
    st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(width=16, allow_nan=False, allow_infinity=False)
)
def test_floats_in_every_width(x: float) -> None:
    """The shortest-float rule: encodings agree, and so do decodes of each wider form."""
    assert native.encode(x) == encoding._py_encode(x)
    forms = [b"\xfb" + struct.pack(">d", x)]
    with contextlib.suppress(OverflowError):
        forms.append(b"\xfa" + struct.pack(">f", x))
    with contextlib.suppress(OverflowError):
        forms.append(b"\xf9" + struct.pack(">e", x))
    for raw in forms:
        agree_on_bytes(raw)


REFUSED_VALUES = [
    float("nan"),
    float("inf"),
    2**64,
    -(2**64) - 1,
    {1: 2},
    {b"k": 1},
    (1, 2),
    {1, 2},
    bytearray(b"x"),
    {"a": [float("nan")]},
    "\ud800",
    [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
    Kind.EVENT,
    True and {"k": object()},
]


@pytest.mark.parametrize("value", REFUSED_VALUES, ids=[type(v).__name__ for v in REFUSED_VALUES])
def test_encode_refuses_the_same_values_with_the_same_errors(value: Any) -> None:
    with pytest.raises(native.Reject):
        native.encode(value)
    assert outcome(lambda: encoding.encode(value)) == reference(lambda: encoding.encode(value))
    with pytest.raises((TypeError, ValueError)):
        encoding.encode(value)


MALFORMED = {**cases.NON_CANONICAL, **{f"appendix_a_{h}": h for h in cases.APPENDIX_A_REFUSED}}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_every_malformed_class_is_refused_with_the_reference_message(case: str) -> None:
    raw = bytes.fromhex(MALFORMED[case])
    with pytest.raises(native.Reject):
        native.decode(raw)
    got = outcome(lambda: encoding.decode(raw))
    assert got[0] == "DecodeError"
    assert got == reference(lambda: encoding.decode(raw))


def test_deep_nesting_is_refused_alike() -> None:
    for depth in (31, 32, 33, 100_000):
        raw = b"\x81" * depth + b"\x80"
        assert outcome(lambda r=raw: encoding.decode(r)) == reference(
            lambda r=raw: encoding.decode(r)
        )


def agree_on_bytes(data: bytes) -> None:
    """Native and reference accept the same bytes, with the same value or the same error."""
    mine, ref = outcome(lambda: encoding.decode(data)), reference(lambda: encoding.decode(data))
    assert mine[0] == ref[0], (data.hex(), mine, ref)
    if mine[0] == "ok":
        assert same(mine[1], ref[1])
    else:
        assert mine == ref


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=48))
def test_fuzz_arbitrary_bytes_agree(data: bytes) -> None:
    agree_on_bytes(data)


@settings(max_examples=1000, deadline=None)
@given(values, st.data())
def test_fuzz_mutated_canonical_bytes_agree(x: Any, data: st.DataObject) -> None:
    raw = bytearray(encoding._py_encode(x))
    how = data.draw(st.sampled_from(["flip", "insert", "delete"]))
    pos = data.draw(st.integers(0, len(raw) - (0 if how == "insert" else 1)))
    if how == "flip":
        raw[pos] ^= data.draw(st.integers(1, 255))
    elif how == "insert":
        raw.insert(pos, data.draw(st.integers(0, 255)))
    else:
        assume(len(raw) > 0)
        del raw[pos]
    agree_on_bytes(bytes(raw))


# -- entries ----------------------------------------------------------------------------------

branches = st.sampled_from(["main", "b-1", "x.y_z", "A" * 64])
bodies = st.dictionaries(st.text(max_size=8), values, max_size=4)


def entry_value(prev: bytes, seq: int, branch: str, ts: int, kind: str, type_: str, body: Any):
    return [1, prev, seq, branch, ts, kind, type_, body]


@settings(max_examples=300, deadline=None)
@given(
    st.binary(min_size=32, max_size=32),
    st.integers(0, 2**40),
    branches,
    st.integers(0, 2**63 - 1),
    st.sampled_from(list(Kind)),
    st.text(min_size=1, max_size=10),
    bodies,
)
def test_entries_are_byte_identical(
    prev: bytes, seq: int, branch: str, ts: int, kind: Kind, type_: str, body: dict[str, Any]
) -> None:
    mine = build_entry(prev, seq, branch, ts, kind, type_, body)
    with _backend.reference():
        ref = build_entry(prev, seq, branch, ts, kind, type_, body)
        ref_decoded = Entry.from_bytes(ref.raw)
    assert mine.raw == ref.raw and mine.hash == ref.hash == hashing.leaf_hash(ref.raw)
    decoded = Entry.from_bytes(mine.raw)
    assert decoded[:7] == ref_decoded[:7] and decoded[8:] == ref_decoded[8:]
    assert same(decoded.body, ref_decoded.body)
    assert type(decoded.kind) is Kind


ENTRY_FIELD_CASES: list[list[Any]] = [
    [2, bytes(32), 1, "main", 0, "event", "EVENT", {}],
    [True, bytes(32), 1, "main", 0, "event", "EVENT", {}],
    [1.0, bytes(32), 1, "main", 0, "event", "EVENT", {}],
    [1, bytes(31), 1, "main", 0, "event", "EVENT", {}],
    [1, "x" * 32, 1, "main", 0, "event", "EVENT", {}],
    [1, bytes(32), -1, "main", 0, "event", "EVENT", {}],
    [1, bytes(32), False, "main", 0, "event", "EVENT", {}],
    [1, bytes(32), 1, "-main", 0, "event", "EVENT", {}],
    [1, bytes(32), 1, "a" * 65, 0, "event", "EVENT", {}],
    [1, bytes(32), 1, ["main"], 0, "event", "EVENT", {}],
    [1, bytes(32), 1, "main", -1, "event", "EVENT", {}],
    [1, bytes(32), 1, "main", 2**63, "event", "EVENT", {}],
    [1, bytes(32), 1, "main", 0, "other", "EVENT", {}],
    [1, bytes(32), 1, "main", 0, b"event", "EVENT", {}],
    [1, bytes(32), 1, "main", 0, "event", "", {}],
    [1, bytes(32), 1, "main", 0, "event", 5, {}],
    [1, bytes(32), 1, "main", 0, "event", "EVENT", []],
    [1, bytes(32), 1, "main", 0, "event", "EVENT"],
    {"not": "an array"},
]


@pytest.mark.parametrize("value", ENTRY_FIELD_CASES, ids=range(len(ENTRY_FIELD_CASES)))
def test_malformed_entries_are_refused_with_the_reference_message(value: Any) -> None:
    raw = encoding._py_encode(value)
    with pytest.raises(native.Reject):
        native.decode_entry(raw)
    got = outcome(lambda: Entry.from_bytes(raw))
    assert got[0] == "DecodeError"
    assert got == reference(lambda: Entry.from_bytes(raw))


@settings(max_examples=500, deadline=None)
@given(bodies, st.data())
def test_fuzz_mutated_entries_agree(body: dict[str, Any], data: st.DataObject) -> None:
    raw = bytearray(build_entry(bytes(32), 3, "main", 7, Kind.OP, "T", body).raw)
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= data.draw(st.integers(1, 255))
    mine = outcome(lambda: Entry.from_bytes(bytes(raw)))
    ref = reference(lambda: Entry.from_bytes(bytes(raw)))
    assert mine[0] == ref[0]
    if mine[0] == "ok":
        assert mine[1][:7] == ref[1][:7] and same(mine[1].body, ref[1].body)
    else:
        assert mine == ref


# -- hashes -----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.binary(min_size=32, max_size=32), st.binary(max_size=300))
def test_hashes_are_byte_identical(data: bytes, salt: bytes, other: bytes) -> None:
    sha = hashlib.sha256
    assert native.leaf_hash(data) == sha(b"\x00" + data).digest() == hashing.leaf_hash(data)
    assert native.node_hash(data, other) == sha(b"\x01" + data + other).digest()
    assert native.sha256(data) == sha(data).digest() == hashing.sha256(data)
    assert native.domain_hash(b"tag", data) == sha(b"tag\x00" + data).digest()
    assert hashing.domain_hash("tag", data) == sha(b"tag\x00" + data).digest()
    assert native.content_digest(data) == blake3.blake3(data).digest()
    assert hashing.content_digest(data) == blake3.blake3(data).digest()
    keyed = blake3.blake3(data, key=salt).digest()
    assert native.content_commitment(salt, data) == keyed == hashing.content_commitment(salt, data)
    with _backend.reference():
        assert hashing.leaf_hash(data) == native.leaf_hash(data)
        assert hashing.node_hash(salt, salt) == native.node_hash(salt, salt)


def test_large_content_hashes_with_the_gil_released() -> None:
    data = random.Random(3).randbytes(1 << 20)
    assert native.content_digest(data) == blake3.blake3(data).digest()
    key = bytes(range(32))
    assert native.content_commitment(key, data) == blake3.blake3(data, key=key).digest()


def test_bytes_like_inputs_take_the_reference() -> None:
    data = bytearray(b"abc")
    assert hashing.leaf_hash(data) == hashlib.sha256(b"\x00abc").digest()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="salt must be 32 bytes"):
        hashing.content_commitment(b"short", b"x")


# -- Merkle -----------------------------------------------------------------------------------


def tree(n: int, seed: int = 0) -> tuple[list[bytes], dict[tuple[int, int], bytes]]:
    """``n`` leaves and every complete node (level, index) -> hash, by the reference."""
    rng = random.Random(seed)
    leaves = [rng.randbytes(32) for _ in range(n)]
    nodes: dict[tuple[int, int], bytes] = {(0, i): h for i, h in enumerate(leaves)}
    with _backend.reference():
        cr = merkle.CompactRange()
        for leaf in leaves:
            for level, index, h in cr.append(leaf):
                nodes[(level, index)] = h
    return leaves, nodes


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 300), st.integers(1, 40))
def test_compact_range_and_roots_are_identical(n: int, batch: int) -> None:
    leaves, _ = tree(n, n)
    mine = merkle.CompactRange()
    nodes_mine = []
    for i in range(0, n, batch):
        nodes_mine += mine.append_many(leaves[i : i + batch])
    with _backend.reference():
        ref = merkle.CompactRange()
        nodes_ref = ref.append_many(leaves)
        ref_root = ref.root()
    assert mine.hashes == ref.hashes and mine.size == ref.size == n
    assert nodes_mine == nodes_ref
    assert mine.root() == ref_root
    assert native.root_from_subtrees(list(ref.hashes)) == ref_root


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200), st.data())
def test_proofs_verify_and_fail_alike(size: int, data: st.DataObject) -> None:
    leaves, nodes = tree(size, size)

    def read(ids: Any) -> list[bytes]:
        return [nodes[i] for i in ids]

    root = merkle.tree_root(size, read)
    index = data.draw(st.integers(0, size - 1))
    proof = merkle.inclusion_proof(index, size, read)
    size1 = data.draw(st.integers(1, size))
    cons = merkle.consistency_proof(size1, size, read)
    with _backend.reference():  # the same proofs and roots from the reference
        assert merkle.tree_root(size, read) == root
        assert merkle.inclusion_proof(index, size, read) == proof
        assert merkle.consistency_proof(size1, size, read) == cons
    assert merkle.root_from_inclusion_proof(leaves[index], index, size, proof) == root
    tampered = [list(proof), proof[:-1], [*proof, root]]
    if proof:
        pos = data.draw(st.integers(0, len(proof) - 1))
        tampered.append([p if i != pos else bytes(32) for i, p in enumerate(proof)])
    for bad_index, bad_proof in [(index, p) for p in tampered] + [(size, proof)]:

        def check(i: int = bad_index, p: list[bytes] = bad_proof) -> None:
            merkle.verify_inclusion(leaves[index], i, size, p, root)

        assert outcome(check) == reference(check)
    root1 = merkle.tree_root(size1, read)
    for bad in [cons, cons[:-1], [*cons, root], [bytes(32), *cons[1:]]]:

        def check_c(p: list[bytes] = bad) -> None:
            merkle.verify_consistency(size1, size, p, root1, root)

        assert outcome(check_c) == reference(check_c)
    assert outcome(lambda: merkle.verify_consistency(size1, size, cons, root1, root))[0] == "ok"


def test_proof_errors_are_the_reference_errors() -> None:
    leaves, _ = tree(5)
    with pytest.raises(ProofError, match="not in a tree of size"):
        merkle.root_from_inclusion_proof(leaves[0], 5, 5, [])
    with pytest.raises(ProofError, match="is 31 bytes"):
        merkle.root_from_inclusion_proof(leaves[0][:31], 0, 5, [])
    with pytest.raises(DecodeError):
        encoding.decode(b"\xff")


# -- index helpers ----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.uuids().map(str) | st.text(max_size=40) | st.uuids().map(lambda u: str(u).upper()))
def test_uuid_bytes_parses_canonical_text_only(text: str) -> None:
    (raw,) = native.uuid_bytes([text])
    canonical = re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", text)
    assert (raw is not None) == (canonical is not None)
    if raw is not None:
        assert raw == bytes.fromhex(text.replace("-", ""))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 2**30)), max_size=20))
def test_node_keys_and_mismatches(ids: list[tuple[int, int]]) -> None:
    from memroot.ledger.backends.store import level_node_key, node_key

    nodes = [(level, index, bytes([level % 256]) * 32) for level, index in ids]
    assert native.node_keys(3, nodes, False) == [level_node_key(3, lv, i) for lv, i, _ in nodes]
    if any((i + 1) << lv > 1 << 40 for lv, i, _ in nodes):  # past a branch's 2**40 entries
        with pytest.raises(native.Reject):
            native.node_keys(3, nodes, True)
        nodes = [n for n in nodes if (n[1] + 1) << n[0] <= 1 << 40]
    keys = native.node_keys(3, nodes, True)
    assert keys == [node_key(3, level, index) for level, index, _ in nodes]
    found = {k: h for k, (_, _, h) in zip(keys[::2], nodes[::2], strict=True)}
    bad = native.mismatches(keys, [h for _, _, h in nodes], found)
    assert bad == [i for i, k in enumerate(keys) if found.get(k) != nodes[i][2]]
