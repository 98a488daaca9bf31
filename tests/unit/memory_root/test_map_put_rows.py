"""``StoredNodes.put`` natively (``map_put_rows``) against its Python reference (``_put_rows``).

The native rows must be the reference's, row for row: the same row numbers for the new
nodes, the same children's row numbers (new, met on the walk, found from the starts, or none),
the same item-tree starts and the same roots of the nodes written, whether one source reads
and writes every update (the positions met are known) or a new source writes each one (the
children are looked for from the starts). Two files written the two ways hold the same bytes
in both node tables, and a node of another shape is left to the reference.
"""

from __future__ import annotations

from unittest import mock

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger._backend import NATIVE
from memroot.memory_root import map_nodes
from memroot.memory_root import state_map as mm
from memroot.memory_root.map_nodes import StoredNodes, install
from tests.unit.memory_root.test_map_nodestore import KEYS, VALUES, change_sets

needs_native = pytest.mark.skipif(NATIVE is None, reason="the native core is not built")


def _db() -> apsw.Connection:
    db = apsw.Connection(":memory:")
    with db:
        install(db)
    return db


def _tables(db: apsw.Connection) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    return (
        list(db.execute("SELECT * FROM memory_map_nodes ORDER BY at")),
        list(db.execute("SELECT * FROM memory_map_roots ORDER BY hash")),
    )


def _run(steps: list[dict[str, dict[bytes, bytes | None]]], *, kept: bool) -> apsw.Connection:
    """Apply ``steps`` to a new file, through one source (``kept``) or a new one each step."""
    db = _db()
    source = StoredNodes(db)
    root = mm.EMPTY
    for changes in steps:
        with db:
            if not kept:
                source = StoredNodes(db)
            u = mm.update_map(source, root, changes)
            writer = source if kept else StoredNodes(db)
            writer.put(u.nodes, (u.root,))
            root = u.root
    return db


@needs_native
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(change_sets, min_size=1, max_size=6), st.booleans())
def test_native_rows_are_the_references(
    steps: list[dict[str, dict[bytes, bytes | None]]], kept: bool
) -> None:
    """Files written through the native rows and through the reference are the same bytes."""
    native = _run(steps, kept=kept)
    with mock.patch.object(map_nodes, "_N", None):
        reference = _run(steps, kept=kept)
    assert _tables(native) == _tables(reference)


@needs_native
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(change_sets, min_size=2, max_size=5), st.booleans())
def test_one_put_gives_the_references_rows_and_positions(
    steps: list[dict[str, dict[bytes, bytes | None]]], fresh_source: bool
) -> None:
    """For one update, the native plan is the reference's: rows, starts, roots, positions."""
    db = _run(steps[:-1], kept=True)
    root = list(db.execute("SELECT hash FROM memory_map_roots ORDER BY at DESC LIMIT 1"))
    start = bytes(root[0][0]) if root else mm.EMPTY
    reader = StoredNodes(db)
    u = mm.update_map(reader, start, steps[-1])
    one = StoredNodes(db) if fresh_source else reader
    two = StoredNodes(db)
    two._at = dict(one._at)
    assert NATIVE is not None
    base = 1 + int(next(iter(db.execute("SELECT coalesce(max(at), 0) FROM memory_map_nodes")))[0])
    got = NATIVE.map_put_rows(
        u.nodes, one._at, base, one._places_of, one._stored_starts, mm.Leaf, mm.Inner
    )
    want = two._put_rows(u.nodes, base)
    assert got == want
    assert one._at == two._at


@needs_native
def test_a_node_of_another_shape_is_left_to_the_reference() -> None:
    """A node that is neither ``Leaf`` nor ``Inner`` is refused natively, ``put`` still writes."""
    assert NATIVE is not None
    leaf = mm.Leaf(KEYS[0], VALUES[0])
    h = mm.leaf_hash(KEYS[0], VALUES[0])
    db = _db()
    s = StoredNodes(db)
    with pytest.raises(NATIVE.Reject):
        NATIVE.map_put_rows(
            {h: (True, KEYS[0], VALUES[0])},
            {},
            1,
            s._places_of,
            s._stored_starts,
            mm.Leaf,
            mm.Inner,
        )
    with pytest.raises(NATIVE.Reject):
        NATIVE.map_put_rows({h: leaf}, {}, 1, s._places_of, s._stored_starts, mm.Inner, mm.Inner)
    with db:
        assert s.put({h: leaf}, (h,)) == 1
    assert mm.lookup(StoredNodes(db), h, KEYS[0]) == VALUES[0]
