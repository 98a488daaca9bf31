"""The memory map's paths natively (native/src/map.rs) against the reference (issue 26).

``map_tree.descend`` / ``path_root`` / ``check_rows_into`` call ``memroot._native`` when it is
built; ``_backend.reference()`` runs the pure-Python lines. For random maps and keys both must
give the same proofs (from stored rows, batched by ``state_map.prove_many``), the same roots
for every path, refuse the same bit flips, and refuse edited rows with the reference's error.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger import _backend, map_tree
from memroot.ledger.errors import IntegrityError, ProofError
from memroot.memory_root import state_map as mm
from memroot.memory_root.map_nodes import StoredNodes, find_row_unchecked, install

native = pytest.importorskip("memroot._native", reason="the native core is not built")
if _backend.NATIVE is None:
    pytestmark = pytest.mark.skip(reason="MEMROOT_BACKEND=python: nothing native to compare")

_keys = st.binary(min_size=32, max_size=32)


class _Rows:
    """A ``RowSource`` over an in-memory node table (checked rows, as StoredNodes keeps)."""

    def __init__(self, nodes: dict[bytes, mm.Node]) -> None:
        self.nodes = nodes
        self.known: dict[bytes, mm.NodeRow] = {}
        self.fetches = 0

    def fetch(self, hashes: object) -> None:
        self.fetches += 1
        for h in hashes:  # type: ignore[attr-defined]
            n = self.nodes.get(h)
            if n is not None:
                self.known[h] = map_tree.row_of(n)


def _map(leaves: dict[bytes, bytes]) -> tuple[bytes, dict[bytes, mm.Node]]:
    class _Src:
        def node(self, h: bytes) -> mm.Node | None:
            return None

    u = mm.update(_Src(), mm.EMPTY, leaves)
    return u.root, u.nodes


def _both_prove(root: bytes, nodes: dict[bytes, mm.Node], keys: list[bytes]) -> list[mm.MapProof]:
    got = mm.prove_many(_Rows(nodes), [(root, k) for k in keys])
    with _backend.reference():
        want = mm.prove_many(_Rows(nodes), [(root, k) for k in keys])
    assert got == want
    return got


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _keys, max_size=60), st.lists(_keys, max_size=5))
def test_batched_proofs_equal_the_reference_and_the_one_by_one_walk(
    leaves: dict[bytes, bytes], probes: list[bytes]
) -> None:
    """prove_many gives, natively and in the reference, the proofs state_map.prove gives."""
    root, nodes = _map(leaves)
    keys = [*leaves, *probes]
    proofs = _both_prove(root, nodes, keys)

    class _Src:
        def node(self, h: bytes) -> mm.Node | None:
            return nodes.get(h)

    for key, p in zip(keys, proofs, strict=True):
        assert p == mm.prove(_Src(), root, key)
        assert map_tree.path_root(key, p) == root
        with _backend.reference():
            assert map_tree.path_root(key, p) == root
        if key in leaves:
            mm.verify_included(root, key, leaves[key], p)
        else:
            mm.verify_absent(root, key, p)


def _flipped(p: mm.MapProof, n: int, bit: int) -> mm.MapProof:
    fields = [*p.siblings] + ([] if p.leaf is None else [p.leaf.key, p.leaf.value])
    i = n % len(fields)
    b = bytearray(fields[i])
    b[(n // len(fields)) % 32] ^= 1 << bit
    fields[i] = bytes(b)
    k = len(p.siblings)
    leaf = None if p.leaf is None else mm.Leaf(fields[k], fields[k + 1])
    return mm.MapProof(tuple(fields[:k]), leaf)


def _outcome(key: bytes, p: mm.MapProof) -> bytes | str:
    try:
        return map_tree.path_root(key, p)
    except ProofError as e:
        return f"refused: {e}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(_keys, _keys, min_size=2, max_size=40),
    st.integers(min_value=0),
    st.integers(0, 7),
)
def test_a_bit_flip_is_refused_alike(leaves: dict[bytes, bytes], n: int, bit: int) -> None:
    """A flipped bit in a sibling or the end leaf: both give the same (wrong) root or refusal."""
    root, nodes = _map(leaves)
    key = sorted(leaves)[n % len(leaves)]
    (p,) = _both_prove(root, nodes, [key])
    bad = _flipped(p, n, bit)
    got = _outcome(key, bad)
    with _backend.reference():
        want = _outcome(key, bad)
    assert got == want
    assert got != root


def test_a_leaf_off_the_path_is_refused_with_the_reference_error() -> None:
    """An end leaf that cannot sit on the key's path is the reference's ProofError."""
    k0, k1 = b"\x00" * 32, b"\x80" * 32
    p = mm.MapProof((map_tree.leaf_hash(k0, b"\x01" * 32),), mm.Leaf(k1, b"\x02" * 32))
    with pytest.raises(ProofError, match="cannot end the path"):
        map_tree.path_root(k0, p)


def test_rows_are_checked_alike(tmp_path: Path) -> None:
    """A well-formed table passes natively; an edited row is the reference's IntegrityError."""
    leaves = {bytes([i]) * 32: bytes([i + 1]) * 32 for i in range(0, 200, 3)}
    root, nodes = _map(leaves)
    db = apsw.Connection(str(tmp_path / "m.db"))
    with db:
        install(db)
        StoredNodes(db).put(nodes)
    stored = StoredNodes(db)
    proofs = mm.prove_many(stored, [(root, k) for k in leaves])
    assert all(map_tree.path_root(k, p) == root for k, p in zip(leaves, proofs, strict=True))
    rows = [(h, int(isinstance(n, mm.Leaf)), *map_tree.row_of(n)[1:]) for h, n in nodes.items()]
    got: dict[bytes, mm.NodeRow] = {}
    assert native.map_rows_into(rows, got)
    want: dict[bytes, mm.NodeRow] = {}
    with _backend.reference():
        map_tree.check_rows_into(rows, want)
    assert got == want == {h: map_tree.row_of(n) for h, n in nodes.items()}
    h = next(h for h, n in nodes.items() if isinstance(n, mm.Inner))
    with db:
        db.execute(
            "UPDATE memory_map_nodes SET a = ? WHERE at = ?",
            (b"\x07" * 32, find_row_unchecked(db, h)),
        )
    with pytest.raises(IntegrityError, match="was edited") as e:
        StoredNodes(db).fetch([h])
    with _backend.reference(), pytest.raises(IntegrityError, match="was edited") as e2:
        StoredNodes(db).fetch([h])
    assert str(e.value) == str(e2.value)
    with pytest.raises(IntegrityError, match="was edited"):
        mm.prove_many(StoredNodes(db), [(root, k) for k in leaves])


def test_a_missing_node_is_named(tmp_path: Path) -> None:
    """A node the batched walk needs and the table lacks is an IntegrityError naming it."""
    leaves = {bytes([i]) * 32: bytes([i + 1]) * 32 for i in range(0, 100, 7)}
    root, nodes = _map(leaves)
    rows = _Rows({h: n for h, n in nodes.items() if h != root})
    with pytest.raises(IntegrityError, match=f"{root.hex()} is not stored"):
        mm.prove_many(rows, [(root, k) for k in leaves])


def test_the_batched_walk_reads_per_level_not_per_node() -> None:
    """prove_many of 300 keys reads each level in one fetch: rounds, not nodes."""
    leaves = {map_tree.item_key("object", str(i)): map_tree.value_hash(i) for i in range(300)}
    root, nodes = _map(leaves)
    rows = _Rows(nodes)
    mm.prove_many(rows, [(root, k) for k in leaves])
    assert rows.fetches <= 24
    assert len(rows.known) == len(nodes)


def _descend_rounds(
    root: bytes, nodes: dict[bytes, mm.Node], keys: list[bytes]
) -> list[tuple[list[int], list[bytes], list[list[bytes]], list[mm.Leaf | None]]]:
    """Every round of ``descend_all`` over ``keys`` (the nodes revealed one level a round)."""
    rows = _Rows(nodes)
    heads = [root] * len(keys)
    siblings: list[list[bytes]] = [[] for _ in keys]
    ends: list[mm.Leaf | None] = [None] * len(keys)
    active = list(range(len(keys)))
    out = []
    while active:
        active, missing = map_tree.descend_all(keys, heads, siblings, ends, active, rows.known)
        out.append((list(active), list(missing), [list(s) for s in siblings], list(ends)))
        rows.fetch(missing)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _keys, max_size=50), st.lists(_keys, max_size=5))
def test_each_round_of_the_walk_and_the_nodes_it_waits_for_equal_the_reference(
    leaves: dict[bytes, bytes], probes: list[bytes]
) -> None:
    """descend_all, natively and in the reference: the same waiting walks, the same sorted
    distinct hashes they wait for (the next read's keys), the same siblings and ends."""
    root, nodes = _map(leaves)
    keys = [*leaves, *probes, *leaves]  # a key twice: its walks wait on the same nodes
    got = _descend_rounds(root, nodes, keys)
    with _backend.reference():
        want = _descend_rounds(root, nodes, keys)
    assert got == want
    for _, missing, _, _ in got:
        assert missing == sorted(set(missing))


@pytest.mark.parametrize(
    "siblings",
    [
        (b"\x01" * 31,),
        (b"\x01" * 32, b"\x02" * 33),
        (bytearray(32),),
        ("a" * 32,),
        (b"\x01" * 32,) * 257,
    ],
    ids=["short", "long", "bytearray", "text", "257 siblings"],
)
def test_a_malformed_proof_is_refused_alike(siblings: tuple[object, ...]) -> None:
    """MapProof's construction check (native map_hashes_ok, else the reference) refuses the
    same siblings with the reference's ValueError; a well-formed one passes both."""
    with pytest.raises(ValueError, match="sibling") as e:
        mm.MapProof(siblings, None)  # type: ignore[arg-type]
    with _backend.reference(), pytest.raises(ValueError, match="sibling") as e2:
        mm.MapProof(siblings, None)  # type: ignore[arg-type]
    assert str(e.value) == str(e2.value)
    assert not native.map_hashes_ok(siblings)
    assert native.map_hashes_ok((b"\x01" * 32,) * 256)
    assert mm.MapProof((b"\x01" * 32,) * 256, None).siblings[0] == b"\x01" * 32
