"""Stored memory-map nodes (memory_root.map_nodes): shared subtrees, every read re-hashed."""

from __future__ import annotations

import hashlib

import apsw
import pytest

from memroot.ledger import map_tree
from memroot.ledger.errors import IntegrityError
from memroot.memory_root import state_map as mm
from memroot.memory_root.map_nodes import StoredNodes, find_row_unchecked, install


def _db(tmp_path):
    db = apsw.Connection(str(tmp_path / "nodes.db"))
    with db:
        install(db)
    return db


def _items(n: int, salt: bytes = b"") -> dict[bytes, bytes]:
    return {
        mm.item_key("object", f"o{i}"): hashlib.sha256(salt + b"%d" % i).digest() for i in range(n)
    }


def test_a_second_snapshot_stores_only_its_changed_paths(tmp_path):
    """After 2000 items, changing 3 adds a few dozen rows; the tree reads back whole."""
    db = _db(tmp_path)
    nodes = StoredNodes(db)
    with db:
        u = mm.update_map(nodes, mm.EMPTY, {"ns": _items(2000)})
        assert nodes.put(u.nodes) == len(u.nodes)
    changed = dict(list(_items(2000, b"x").items())[:3])
    with db:
        u2 = mm.update_map(nodes, u.root, {"ns": changed})
        added = nodes.put(u2.nodes)
    assert 0 < added <= 3 * 30
    want = {**_items(2000), **changed}
    proof = mm.prove_namespace(nodes, u2.root, "ns")
    assert mm.verify_namespace(u2.root, proof) == want
    assert u2.root == mm.map_root({"ns": want})


def test_map_node_row_edited_is_refused(tmp_path):
    """A stored node whose bytes were changed does not hash to its key: IntegrityError."""
    db = _db(tmp_path)
    nodes = StoredNodes(db)
    with db:
        u = mm.update_map(nodes, mm.EMPTY, {"ns": _items(50)})
        nodes.put(u.nodes)
    with db:
        db.execute("UPDATE memory_map_nodes SET b = zeroblob(32) WHERE leaf = 1")
    with pytest.raises(IntegrityError, match="edited"):
        mm.prove_namespace(nodes, u.root, "ns")


def test_map_node_row_deleted_is_refused(tmp_path):
    """A stored node that is gone is refused, never read as an empty subtree."""
    db = _db(tmp_path)
    nodes = StoredNodes(db)
    with db:
        u = mm.update_map(nodes, mm.EMPTY, {"ns": _items(50)})
        nodes.put(u.nodes)
    with db:
        db.execute("DELETE FROM memory_map_nodes WHERE leaf = 1")
    with pytest.raises(IntegrityError, match="not stored"):
        mm.prove_namespace(nodes, u.root, "ns")


def test_a_read_leaves_out_an_absent_hash_and_names_an_edited_row(tmp_path):
    """fetch reads a chunk in one joined query and pairs each row with the hash asked for; a
    chunk with an absent hash, or whose pairing does not hash (an edited row), is read
    again by key: the absent hash is left out and the rest kept, the edited row is named,
    and nothing of that chunk is kept."""
    db = _db(tmp_path)
    with db:
        u = mm.update_map(StoredNodes(db), mm.EMPTY, {"ns": _items(60)})
        StoredNodes(db).put(u.nodes)
    every = {h: map_tree.row_of(n) for h, n in u.nodes.items()}
    order = sorted(every)
    absent = b"\x09" * 32
    stored = StoredNodes(db)
    stored.fetch([*order[:20], absent, *order[20:]])
    assert stored.known == every
    shuffled = StoredNodes(db)
    shuffled.fetch(order[::-1])  # any order asked for: each row is paired with its own hash
    assert shuffled.known == every
    h = order[7]
    with db:
        db.execute(
            "UPDATE memory_map_nodes SET b = ? WHERE at = ?",
            (b"\x07" * 32, find_row_unchecked(db, h)),
        )
    edited = StoredNodes(db)
    with pytest.raises(IntegrityError, match=f"{h.hex()} was edited"):
        edited.fetch(order)
    assert edited.known == {}


def test_a_sorted_load_stores_the_rows_put_would(tmp_path):
    """Snapshots staged by SortedLoad (repeated nodes too) give the rows StoredNodes.put gives."""
    from memroot.memory_root.map_nodes import SortedLoad

    def rows(db):
        return sorted(db.execute("SELECT leaf, a, b FROM memory_map_nodes").fetchall())

    ref, db = _db(tmp_path), apsw.Connection(str(tmp_path / "sorted.db"))
    nodes = StoredNodes(ref)
    updates = []
    root = mm.EMPTY
    with ref:
        for k in range(4):
            u = mm.update_map(nodes, root, {"ns": dict(list(_items(300, b"%d" % k).items())[:50])})
            nodes.put(u.nodes)
            updates.append(u.nodes)
            root = u.root
    with db:
        load = SortedLoad(db)
        for staged in [*updates, updates[0]]:  # a node given twice is stored once
            load.put(staged)
        assert not db.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'memory_map_nodes'"
        ).fetchall()
        assert load.close() == len(rows(ref))
    assert rows(db) == rows(ref)
    assert mm.prove_namespace(StoredNodes(db), root, "ns") == mm.prove_namespace(nodes, root, "ns")
    assert not db.execute("SELECT 1 FROM temp.sqlite_master").fetchall()  # the stage is gone


def test_a_sorted_load_rolled_back_leaves_nothing(tmp_path):
    """A load whose transaction rolls back stores no row and drops its stage."""
    from memroot.memory_root.map_nodes import SortedLoad

    db = _db(tmp_path)
    u = mm.update_map(StoredNodes(db), mm.EMPTY, {"ns": _items(50)})
    with pytest.raises(RuntimeError), db:
        load = SortedLoad(db)
        load.put(u.nodes)
        load.close()
        raise RuntimeError("the rebuild failed")
    assert not db.execute("SELECT 1 FROM memory_map_nodes").fetchall()
    assert not db.execute("SELECT 1 FROM temp.sqlite_master").fetchall()
