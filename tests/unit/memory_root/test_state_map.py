"""The memory map's math (docs/FORMAT.md §6.12): roots, updates, proofs, namespace ranges."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger.errors import IntegrityError
from memroot.memory_root import state_map as mm


class Nodes:
    """A node store in a dict (what the SQL table holds, without SQL)."""

    def __init__(self) -> None:
        self.nodes: dict[bytes, mm.Node] = {}
        self.reads = 0

    def node(self, h: bytes) -> mm.Node | None:
        self.reads += 1
        return self.nodes.get(h)

    def apply(self, u: mm.Update) -> bytes:
        self.nodes.update(u.nodes)
        return u.root


def _key(i: int) -> bytes:
    return hashlib.sha256(b"k%d" % i).digest()


def _val(i: int) -> bytes:
    return hashlib.sha256(b"v%d" % i).digest()


keysets = st.dictionaries(st.integers(0, 300), st.integers(0, 5), max_size=40)


def test_empty_tree_is_the_empty_constant():
    """A tree with no key hashes to SHA-256("memroot/map/empty/v1" || 0x00)."""
    assert mm.root_of({}) == hashlib.sha256(b"memroot/map/empty/v1\x00").digest()


def test_one_key_is_its_leaf_wherever_it_sits():
    """The leaf shortcut: a tree of one key is that key's leaf hash."""
    assert mm.root_of({_key(1): _val(1)}) == mm.leaf_hash(_key(1), _val(1))


@settings(max_examples=60, deadline=None)
@given(keysets, keysets)
def test_update_gives_the_root_of_the_new_set(before, changes):
    """Updating in place (adds, changes, removals) gives exactly root_of of the new set."""
    store = Nodes()
    start = {_key(k): _val(v) for k, v in before.items()}
    root = store.apply(mm.update(store, mm.EMPTY, start))
    assert root == mm.root_of(start)
    delta: dict[bytes, bytes | None] = {
        _key(k): (None if v == 0 else _val(v)) for k, v in changes.items()
    }
    after = dict(start)
    for k, v in delta.items():
        if v is None:
            after.pop(k, None)
        else:
            after[k] = v
    assert store.apply(mm.update(store, root, delta)) == mm.root_of(after)


@settings(max_examples=40, deadline=None)
@given(keysets, st.integers(0, 300))
def test_proofs_verify_for_present_and_absent_keys(items, probe):
    """Every key has a proof: inclusion when it is in the tree, absence when it is not."""
    store = Nodes()
    leaves = {_key(k): _val(v) for k, v in items.items()}
    root = store.apply(mm.update(store, mm.EMPTY, leaves))
    key = _key(probe)
    proof = mm.prove(store, root, key)
    if key in leaves:
        mm.verify_included(root, key, leaves[key], proof)
        with pytest.raises(IntegrityError):
            mm.verify_absent(root, key, proof)
    else:
        mm.verify_absent(root, key, proof)
        with pytest.raises(IntegrityError):
            mm.verify_included(root, key, _val(0), proof)


def test_any_bit_flip_in_a_proof_is_refused():
    """A flipped bit in a sibling, the leaf or the value makes the proof fail."""
    store = Nodes()
    leaves = {_key(i): _val(i) for i in range(200)}
    root = store.apply(mm.update(store, mm.EMPTY, leaves))
    key = _key(7)
    proof = mm.prove(store, root, key)
    mm.verify_included(root, key, _val(7), proof)
    assert proof.siblings
    for i in range(len(proof.siblings)):
        for bit in (0, 255):
            sib = bytearray(proof.siblings[i])
            sib[bit // 8] ^= 1 << (bit % 8)
            bad = mm.MapProof(
                (*proof.siblings[:i], bytes(sib), *proof.siblings[i + 1 :]), proof.leaf
            )
            with pytest.raises(IntegrityError):
                mm.verify_included(root, key, _val(7), bad)
    with pytest.raises(IntegrityError):
        mm.verify_included(root, key, _val(8), proof)


def test_absence_proof_cannot_borrow_a_leaf_off_the_path():
    """A leaf whose key does not share the path's prefix cannot end another key's path."""
    store = Nodes()
    leaves = {_key(i): _val(i) for i in range(50)}
    root = store.apply(mm.update(store, mm.EMPTY, leaves))
    proof = mm.prove(store, root, _key(3))
    assert proof.leaf is not None
    far = next(k for k in leaves if (k[0] >> 7) != (_key(3)[0] >> 7))
    with pytest.raises(IntegrityError):
        mm.verify_absent(root, far, proof)


def test_an_update_reads_and_writes_only_the_changed_paths():
    """One change in 4096 leaves writes about log2 n nodes and reads as many."""
    store = Nodes()
    leaves = {_key(i): _val(i) for i in range(4096)}
    root = store.apply(mm.update(store, mm.EMPTY, leaves))
    store.reads = 0
    u = mm.update(store, root, {_key(5): _val(9999)})
    assert len(u.nodes) <= 40
    assert store.reads <= 80


def test_namespace_range_proof_holds_every_item_and_nothing_else():
    """A namespace proof lists all its items; dropping or adding one is refused."""
    store = Nodes()
    changes = {
        "alice": {mm.item_key("object", f"a{i}"): mm.value_hash({"n": i}) for i in range(30)},
        "bob": {mm.item_key("object", f"b{i}"): mm.value_hash({"n": i}) for i in range(5)},
    }
    root = store.apply(mm.update_map(store, mm.EMPTY, changes))
    assert root == mm.map_root(changes)
    proof = mm.prove_namespace(store, root, "alice")
    assert mm.verify_namespace(root, proof) == changes["alice"]
    short = mm.NamespaceProof("alice", proof.items[1:], proof.path)
    with pytest.raises(IntegrityError):
        mm.verify_namespace(root, short)
    extra = (*proof.items, (mm.item_key("object", "x"), mm.value_hash(1)))
    with pytest.raises(IntegrityError):
        mm.verify_namespace(root, mm.NamespaceProof("alice", tuple(sorted(extra)), proof.path))
    none = mm.prove_namespace(store, root, "carol")
    assert none.items == ()
    assert mm.verify_namespace(root, none) == {}
    with pytest.raises(IntegrityError):
        mm.verify_namespace(root, mm.NamespaceProof("carol", proof.items, none.path))


def test_removing_a_namespace_last_item_removes_the_namespace():
    """A namespace with no item left is not in the map (root as if it never was)."""
    store = Nodes()
    key = mm.item_key("object", "b0")
    root = store.apply(
        mm.update_map(
            store, mm.EMPTY, {"a": {mm.item_key("object", "a0"): _val(1)}, "b": {key: _val(2)}}
        )
    )
    root = store.apply(mm.update_map(store, root, {"b": {key: None}}))
    assert root == mm.map_root({"a": {mm.item_key("object", "a0"): _val(1)}})


def test_a_missing_stored_node_is_an_integrity_error():
    """A node the path needs and the store lacks is refused, never read as empty."""
    store = Nodes()
    root = store.apply(mm.update(store, mm.EMPTY, {_key(i): _val(i) for i in range(8)}))
    store.nodes.pop(root)
    with pytest.raises(IntegrityError, match="not stored"):
        mm.lookup(store, root, _key(1))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.data())
def test_any_byte_changed_in_a_namespace_proof_is_refused(n, data):
    """Changing one byte of any listed item or of the namespace path is refused."""
    store = Nodes()
    items = {mm.item_key("object", f"i{i}"): _val(i) for i in range(n)}
    root = store.apply(mm.update_map(store, mm.EMPTY, {"ns": items, "other": {_key(1): _val(1)}}))
    proof = mm.prove_namespace(store, root, "ns")
    flat = [bytearray(b) for pair in proof.items for b in pair] + [
        bytearray(s) for s in proof.path.siblings
    ]
    which = data.draw(st.integers(0, len(flat) - 1))
    at = data.draw(st.integers(0, 31))
    flat[which][at] ^= 1 + data.draw(st.integers(0, 254))
    k = 2 * len(proof.items)
    pairs = tuple((bytes(flat[i]), bytes(flat[i + 1])) for i in range(0, k, 2))
    path = mm.MapProof(tuple(bytes(s) for s in flat[k:]), proof.path.leaf)
    with pytest.raises(IntegrityError):
        mm.verify_namespace(root, mm.NamespaceProof("ns", tuple(sorted(pairs)), path))
