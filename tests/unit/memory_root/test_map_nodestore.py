"""Map nodes found by row number against the hash-keyed store they replace (map_nodes).

The store with locality (rows appended in write order, a parent holding its children's row
numbers) must give, for any sequence of updates, the roots and proofs the hash-keyed table
gave (``memory_map_nodes(hash, leaf, a, b)``, kept here as the reference: created by hand,
written with ``INSERT OR IGNORE`` by hash, read by ``StoredNodes`` as a table not yet
converted), whether one source reads and writes every update, a new source is opened for
each step (rows found from ``memory_map_roots``, or by walking down from them), or the old
table is converted by ``install``. Every row read stays checked: an edited row, an edited
row number, an edited or deleted start of walks, a deleted row are refused, never served.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger import map_tree
from memroot.ledger.errors import IntegrityError
from memroot.memory_root import state_map as mm
from memroot.memory_root.map_nodes import StoredNodes, find_row_unchecked, install

Changes = dict[str, dict[bytes, bytes | None]]

KEYS = [hashlib.sha256(b"k%d" % i).digest() for i in range(40)]
KEYS += [bytes([a]) + bytes(30) + bytes([b]) for a in (0, 1) for b in (0, 1, 128)]  # deep
VALUES = [hashlib.sha256(b"v%d" % i).digest() for i in range(4)]
NAMESPACES = ["a", "b", "", "ns/é"]

change_sets = st.dictionaries(
    st.sampled_from(NAMESPACES),
    st.dictionaries(st.sampled_from(KEYS), st.none() | st.sampled_from(VALUES), max_size=12),
    max_size=4,
)

_OLD_SCHEMA = (
    "CREATE TABLE memory_map_nodes(hash BLOB PRIMARY KEY, leaf INTEGER NOT NULL "
    "CHECK(leaf IN (0, 1)), a BLOB NOT NULL, b BLOB NOT NULL) STRICT, WITHOUT ROWID"
)


def _old_db() -> apsw.Connection:
    db = apsw.Connection(":memory:")
    db.execute(_OLD_SCHEMA)
    return db


def _old_put(db: apsw.Connection, nodes: Mapping[bytes, mm.Node]) -> None:
    db.executemany(
        "INSERT OR IGNORE INTO memory_map_nodes VALUES(?,?,?,?)",
        [
            (h, 1 if isinstance(n, mm.Leaf) else 0, *map_tree.row_of(n)[1:])
            for h, n in nodes.items()
        ],
    )


def _new_db() -> apsw.Connection:
    db = apsw.Connection(":memory:")
    with db:
        install(db)
    return db


def _proofs(
    source: StoredNodes, root: bytes, keys: list[bytes]
) -> tuple[list[mm.MapProof], list[mm.MapProof], list[mm.NamespaceProof]]:
    """Every key's path (batched and one by one) and every namespace's range proof."""
    many = mm.prove_many(source, [(root, k) for k in keys])
    one = [mm.prove(source, root, k) for k in keys]
    spaces = [mm.prove_namespace(source, root, ns) for ns in NAMESPACES]
    return many, one, spaces


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(change_sets, min_size=1, max_size=6))
def test_roots_and_proofs_are_the_hash_keyed_stores(steps: list[Changes]) -> None:
    """Same roots, same proofs as the hash-keyed table, read through one source or a new
    one each step, and after converting the hash-keyed table."""
    old, one, each = _old_db(), _new_db(), _new_db()
    kept = StoredNodes(one)
    root_old = root_one = root_each = mm.EMPTY
    for changes in steps:
        with old:
            u = mm.update_map(StoredNodes(old), root_old, changes)
            _old_put(old, u.nodes)
            root_old = u.root
        with one:
            u = mm.update_map(kept, root_one, changes)
            kept.put(u.nodes, (u.root,))
            root_one = u.root
        with each:
            fresh = StoredNodes(each)
            u = mm.update_map(fresh, root_each, changes)
            StoredNodes(each).put(u.nodes, (u.root,))  # another source writes them
            root_each = u.root
        assert root_old == root_one == root_each
        keys = [mm.namespace_key(ns) for ns in NAMESPACES]
        want = _proofs(StoredNodes(old), root_old, keys)
        assert _proofs(kept, root_one, keys) == want
        assert _proofs(StoredNodes(one), root_one, keys) == want
        assert _proofs(StoredNodes(each), root_each, keys) == want
        items = {
            ns: mm.verify_namespace(root_old, p) for ns, p in zip(NAMESPACES, want[2], strict=True)
        }
        for got in items.values():  # every item's own path in its item tree, too
            if got:
                item_root = mm.root_of(got)
                ks = sorted(got) + KEYS[:3]
                assert mm.prove_many(StoredNodes(each), [(item_root, k) for k in ks]) == (
                    mm.prove_many(StoredNodes(old), [(item_root, k) for k in ks])
                )
    with old:
        install(old)  # the hash-keyed table converted in place
    assert _proofs(StoredNodes(old), root_old, keys) == want
    with old:  # and it goes on from there
        u = mm.update_map(StoredNodes(old), root_old, {"a": {KEYS[0]: VALUES[1]}})
        StoredNodes(old).put(u.nodes, (u.root,))
    with one:
        u2 = mm.update_map(kept, root_one, {"a": {KEYS[0]: VALUES[1]}})
        kept.put(u2.nodes, (u2.root,))
    assert u.root == u2.root
    assert _proofs(StoredNodes(old), u.root, keys) == _proofs(kept, u2.root, keys)


def _stored_map(n: int = 80) -> tuple[apsw.Connection, bytes, dict[bytes, bytes]]:
    db = _new_db()
    items = {KEYS[i % len(KEYS)]: VALUES[i % 4] for i in range(n)}
    s = StoredNodes(db)
    with db:
        u = mm.update_map(s, mm.EMPTY, {"a": items, "b": {KEYS[1]: VALUES[2]}})
        s.put(u.nodes, (u.root,))
    return db, u.root, items


def _all_reads(db: apsw.Connection, root: bytes) -> None:
    """Read the whole map every way a reader does, each from a new source."""
    mm.prove_namespace(StoredNodes(db), root, "a")
    keys = [*KEYS, mm.namespace_key("a"), mm.namespace_key("b")]
    item_root = mm.lookup(StoredNodes(db), root, mm.namespace_key("a"))
    assert item_root is not None
    mm.prove_many(StoredNodes(db), [(item_root, k) for k in keys])
    for k in keys:
        mm.prove(StoredNodes(db), item_root, k)
    list(mm.leaves_of(StoredNodes(db), item_root))


def test_the_map_reads_whole_from_new_sources() -> None:
    db, root, items = _stored_map()
    _all_reads(db, root)
    proof = mm.prove_namespace(StoredNodes(db), root, "a")
    assert mm.verify_namespace(root, proof) == items


def test_an_edited_row_number_is_refused() -> None:
    """A parent's row number pointing at another (intact) row: the row read does not hash
    to the child the parent names."""
    db, root, _ = _stored_map()
    with db:
        rows = db.execute("SELECT at, at_a, at_b FROM memory_map_nodes WHERE leaf = 0").fetchall()
        at, _, at_b = next(r for r in rows if r[1] is not None and r[2] is not None)
        db.execute("UPDATE memory_map_nodes SET at_a = ? WHERE at = ?", (at_b, at))
    with pytest.raises(IntegrityError, match="was edited"):
        _all_reads(db, root)


def test_a_row_number_to_nowhere_is_not_stored() -> None:
    db, root, _ = _stored_map()
    with db:
        db.execute("UPDATE memory_map_nodes SET at_b = at_b + 100000 WHERE leaf = 0")
    with pytest.raises(IntegrityError, match="not stored"):
        _all_reads(db, root)


def test_an_edited_start_of_walks_is_refused() -> None:
    """``memory_map_roots`` is a cache too: a root's row number pointing at another row."""
    db, root, _ = _stored_map()
    with db:
        db.execute("UPDATE memory_map_roots SET at = at - 1 WHERE hash = ?", (root,))
    with pytest.raises(IntegrityError, match="was edited"):
        mm.prove_namespace(StoredNodes(db), root, "a")


def test_a_deleted_start_of_walks_is_found_or_refused() -> None:
    """Without its ``memory_map_roots`` row, a root no other root reaches is not stored."""
    db, root, _ = _stored_map()
    with db:
        db.execute("DELETE FROM memory_map_roots WHERE hash = ?", (root,))
    with pytest.raises(IntegrityError, match="not stored"):
        mm.prove_namespace(StoredNodes(db), root, "a")
    with db:
        db.execute("DELETE FROM memory_map_roots")
    with pytest.raises(IntegrityError, match="not stored"):
        mm.prove_many(StoredNodes(db), [(root, KEYS[0])])


def test_an_edited_or_deleted_row_under_a_new_source_is_refused() -> None:
    db, root, _ = _stored_map()
    leaf = mm.namespace_key("a")
    item_root = mm.lookup(StoredNodes(db), root, leaf)
    assert item_root is not None
    at = find_row_unchecked(db, item_root)
    assert at is not None
    with db:
        db.execute("UPDATE memory_map_nodes SET a = zeroblob(32) WHERE at = ?", (at,))
    with pytest.raises(IntegrityError, match="was edited"):
        _all_reads(db, root)
    with db:
        db.execute("DELETE FROM memory_map_nodes WHERE at = ?", (at,))
    with pytest.raises(IntegrityError, match="not stored"):
        _all_reads(db, root)


def test_a_rebuild_load_gives_the_rows_a_source_finds() -> None:
    """SortedLoad (the rebuild's writer) numbers rows so that every read gives the same."""
    from memroot.memory_root.map_nodes import SortedLoad

    ref = _new_db()
    s = StoredNodes(ref)
    staged = []
    root = mm.EMPTY
    with ref:
        for k in range(5):
            u = mm.update_map(s, root, {"a": {KEYS[k + i]: VALUES[k % 4] for i in range(9)}})
            s.put(u.nodes, (u.root,))
            staged.append((u.nodes, u.root))
            root = u.root
    db = _new_db()
    with db:
        load = SortedLoad(db)
        for nodes, top in staged:
            load.put(nodes, (top,))
        load.close()
    for _, top in staged:  # every snapshot's root, not only the last
        keys = [mm.namespace_key("a"), *KEYS]
        assert _proofs(StoredNodes(db), top, keys) == _proofs(StoredNodes(ref), top, keys)
    got = db.execute("SELECT * FROM memory_map_nodes ORDER BY at").fetchall()
    assert got == ref.execute("SELECT * FROM memory_map_nodes ORDER BY at").fetchall()
    assert sorted(db.execute("SELECT * FROM memory_map_roots").fetchall()) == sorted(
        ref.execute("SELECT * FROM memory_map_roots").fetchall()
    )


def test_a_source_whose_writes_were_rolled_back_writes_them_again() -> None:
    """A put rolled back (a transaction, or a savepoint inside one) takes its rows away: the
    source that wrote them does not take them for stored, nor trust their row numbers."""
    db = _new_db()
    s = StoredNodes(db)
    first = {"a": {KEYS[i]: VALUES[0] for i in range(20)}}
    with db:
        u = mm.update_map(s, mm.EMPTY, first)
        s.put(u.nodes, (u.root,))
    more = {"a": {KEYS[i]: VALUES[1] for i in range(5)}}
    with pytest.raises(RuntimeError), db:
        u2 = mm.update_map(s, u.root, more)
        s.put(u2.nodes, (u2.root,))
        raise RuntimeError("the append failed")
    with db:
        db.execute("SAVEPOINT op")
        u3 = mm.update_map(s, u.root, more)
        assert u3.root == u2.root
        s.put(u3.nodes, (u3.root,))
        db.execute("ROLLBACK TO op")
        db.execute("RELEASE op")
    other = {"b": {KEYS[30]: VALUES[2]}}  # another snapshot takes the row numbers meanwhile
    with db:
        u4 = mm.update_map(StoredNodes(db), u.root, other)
        StoredNodes(db).put(u4.nodes, (u4.root,))
    with db:
        u5 = mm.update_map(s, u.root, more)
        assert u5.root == u2.root
        s.put(u5.nodes, (u5.root,))
    keys = [mm.namespace_key("a"), mm.namespace_key("b")]
    assert _proofs(StoredNodes(db), u5.root, keys) == _proofs(s, u5.root, keys)
    got = mm.prove_namespace(StoredNodes(db), u5.root, "a")
    assert mm.verify_namespace(u5.root, got) == {**first["a"], **more["a"]}


def test_the_conversion_reports_its_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """``install`` converts a hash-keyed table chunk by chunk, telling ``progress`` each one."""
    from memroot.memory_root import map_nodes

    old = _old_db()
    u = mm.update_map(StoredNodes(old), mm.EMPTY, {"a": {k: VALUES[0] for k in KEYS}})
    with old:
        _old_put(old, u.nodes)
    monkeypatch.setattr(map_nodes, "MIGRATE_CHUNK", 10)
    seen: list[tuple[int, int]] = []
    with old:
        install(old, progress=lambda done, total: seen.append((done, total)))
    total = len(u.nodes)
    assert seen == [(min(total, d), total) for d in range(10, total + 10, 10)]
    assert next(r[1] for r in old.execute("PRAGMA table_info(memory_map_nodes)")) == "at"
    keys = [mm.namespace_key("a"), *KEYS]
    assert mm.prove_many(StoredNodes(old), [(u.root, k) for k in keys]) == mm.prove_many(
        _with(u.nodes), [(u.root, k) for k in keys]
    )


def _with(nodes: Mapping[bytes, mm.Node]) -> StoredNodes:
    db = _new_db()
    s = StoredNodes(db)
    with db:
        s.put(nodes)
    return s


def test_a_source_forgets_positions_another_connection_renumbered(tmp_path) -> None:
    """Another connection's rebuild numbers the rows again: a source that met the old row
    numbers lets them go when its next update starts, and reads and writes what is stored."""
    from memroot.memory_root.map_nodes import SortedLoad

    path = str(tmp_path / "m.db")
    a, b = apsw.Connection(path), apsw.Connection(path)
    with a:
        install(a)
    s = StoredNodes(a)
    staged = []
    root = mm.EMPTY
    for k in range(3):
        with a:
            u = mm.update_map(s, root, {"a": {KEYS[k * 5 + i]: VALUES[k % 4] for i in range(5)}})
            s.put(u.nodes, (u.root,))
        staged.append((u.nodes, u.root))
        root = u.root
    s = StoredNodes(a)  # a source that met the row numbers by reading only
    mm.prove_many(s, [(root, k) for k in KEYS])
    mm.update_map(s, root, {"a": {KEYS[1]: VALUES[2]}})  # an update not written
    with b:  # the rebuild, in another connection: the same nodes, the last snapshot's first
        b.execute("DELETE FROM memory_map_nodes; DELETE FROM memory_map_roots")
        load = SortedLoad(b)
        for nodes, top in reversed(staged):
            load.put(nodes, (top,))
        load.close()
    more = {"b": {KEYS[40]: VALUES[3]}, "a": {KEYS[0]: None}}
    with a:
        u = mm.update_map(s, root, more)
        s.put(u.nodes, (u.root,))
    keys = [mm.namespace_key("a"), mm.namespace_key("b")]
    assert _proofs(s, u.root, keys) == _proofs(StoredNodes(b), u.root, keys)
    proof = mm.prove_namespace(StoredNodes(b), u.root, "a")
    assert KEYS[0] not in dict(proof.items) and len(proof.items) == 14
