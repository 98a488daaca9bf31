"""The native, level-synchronous ``update_map`` against its reference (issue 27).

``state_map.update_map`` runs ``memroot._native.map_update`` when the core is built: every
changed path of every tree walked level by level, one batched read per level. It must give
the root and the set of new nodes ``update_map_reference`` gives, for any map and any
changes (empty maps, single leaves, emptied namespaces, removals of absent keys, subtrees
that collapse to a shortcut leaf, paths hundreds of levels deep), over every kind of source,
and refuse a missing or edited node exactly where the reference does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from functools import partial

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.errors import IntegrityError
from memroot.memory_root import state_map as mm
from memroot.memory_root._fold import MemNodes
from memroot.memory_root.map_nodes import StoredNodes, find_row_unchecked, install

pytestmark = pytest.mark.skipif(_N is None, reason="memroot._native is not built")

Changes = dict[str, dict[bytes, bytes | None]]


def _hashed(i: int) -> bytes:
    return hashlib.sha256(b"k%d" % i).digest()


def _deep(a: int, b: int) -> bytes:
    # Keys sharing their first 31 bytes but for ``a``'s top bits: paths 240+ levels deep.
    return bytes([a]) + bytes(30) + bytes([b])


KEYS = [_hashed(i) for i in range(24)] + [_deep(a, b) for a in (0, 1) for b in (0, 1, 2, 128)]
VALUES = [hashlib.sha256(b"v%d" % i).digest() for i in range(4)]
NAMESPACES = ["a", "b", "", "ns/é"]

keys = st.sampled_from(KEYS)
values = st.sampled_from(VALUES)
maps = st.dictionaries(
    st.sampled_from(NAMESPACES), st.dictionaries(keys, values, max_size=12), max_size=4
)
change_sets = st.dictionaries(
    st.sampled_from(NAMESPACES),
    st.dictionaries(keys, st.none() | values, max_size=10),
    max_size=4,
)


class Plain:
    """A ``NodeSource`` with no batched read: one ``node`` call per hash."""

    def __init__(self, nodes: Mapping[bytes, mm.Node]) -> None:
        self.nodes = dict(nodes)

    def node(self, h: bytes) -> mm.Node | None:
        return self.nodes.get(h)


def _stored(nodes: Mapping[bytes, mm.Node]) -> StoredNodes:
    db = apsw.Connection(":memory:")
    s = StoredNodes(db)
    with db:
        install(db)
        s.put(nodes)
    return s


def _mem(nodes: Mapping[bytes, mm.Node]) -> MemNodes:
    m = MemNodes()
    m.nodes.update(nodes)
    return m


def _mem_over_stored(nodes: Mapping[bytes, mm.Node]) -> MemNodes:
    # Half the nodes in memory, the other half stored below.
    items = sorted(nodes.items())
    m = MemNodes(_stored(dict(items[1::2])))
    m.nodes.update(items[::2])
    return m


SOURCES: list[Callable[[Mapping[bytes, mm.Node]], mm.NodeSource]] = [
    Plain,
    _stored,
    _mem,
    _mem_over_stored,
]


def _initial(before: Changes) -> mm.Update:
    """The map of ``before`` and every node of it, built from empty by the reference."""
    return mm.update_map_reference(Plain({}), mm.EMPTY, before)


def _native(source: mm.NodeSource, root: bytes, changes: Changes) -> mm.Update:
    """``_N.map_update`` itself, with no fallback to the reference."""
    assert _N is not None
    held, read = mm.reads_of(source)
    known = held if isinstance(held, dict) else {}
    groups = [(mm.namespace_key(ns), items) for ns, items in changes.items()]
    out, made = _N.map_update(root, groups, known, read, mm.Leaf, mm.Inner)
    return mm.Update(mm.MapHash(out), made)


def _final(before: Changes, changes: Changes) -> dict[str, dict[bytes, bytes]]:
    state = {ns: dict(items) for ns, items in before.items()}
    for ns, items in changes.items():
        got = state.setdefault(ns, {})
        for k, v in items.items():
            if v is None:
                got.pop(k, None)
            else:
                got[k] = v
    return state


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(maps, change_sets, st.sampled_from(range(len(SOURCES))), st.booleans())
def test_native_update_gives_the_reference_root_and_nodes(
    before: Changes, changes: Changes, which: int, empty_one: bool
) -> None:
    if empty_one and before:
        ns = sorted(before)[0]  # remove every item of one namespace
        changes = {**changes, ns: {**changes.get(ns, {}), **dict.fromkeys(before[ns])}}
    start = _initial(before)
    ref = mm.update_map_reference(SOURCES[which](start.nodes), start.root, changes)
    new = _native(SOURCES[which](start.nodes), start.root, changes)
    assert new.root == ref.root
    assert new.nodes == ref.nodes
    assert new.root == mm.map_root(_final(before, changes))
    # And through the public entry point (the native path or, on refusal, the reference).
    public = mm.update_map(SOURCES[which](start.nodes), start.root, changes)
    assert (public.root, public.nodes) == (ref.root, ref.nodes)


@settings(max_examples=100, deadline=None)
@given(maps, change_sets, change_sets)
def test_two_updates_in_a_row_agree(before: Changes, first: Changes, second: Changes) -> None:
    start = _initial(before)
    src = _mem(start.nodes)
    ref_src = _mem(start.nodes)
    root, ref_root = start.root, start.root
    for changes in (first, second):
        new = _native(src, root, changes)
        ref = mm.update_map_reference(ref_src, ref_root, changes)
        assert (new.root, new.nodes) == (ref.root, ref.nodes)
        src.nodes.update(new.nodes)
        ref_src.nodes.update(ref.nodes)
        root, ref_root = new.root, ref.root


def _outcome(run: Callable[[], mm.Update]) -> tuple[bytes, dict[bytes, mm.Node]] | str:
    try:
        u = run()
    except IntegrityError:
        return "IntegrityError"
    return u.root, u.nodes


@settings(max_examples=200, deadline=None)
@given(maps, change_sets, st.data())
def test_a_missing_node_is_refused_where_the_reference_refuses_it(
    before: Changes, changes: Changes, data: st.DataObject
) -> None:
    start = _initial(before)
    if not start.nodes:
        return
    gone = data.draw(st.sampled_from(sorted(start.nodes)))
    left = {h: n for h, n in start.nodes.items() if h != gone}
    for make in SOURCES:
        ref = _outcome(partial(mm.update_map_reference, make(left), start.root, changes))
        new = _outcome(partial(mm.update_map, make(left), start.root, changes))
        assert new == ref
        # The native walk alone refuses it too (Reject: the reference then decides).
        try:
            got = _native(make(left), start.root, changes)
        except (_N.Reject, IntegrityError):  # type: ignore[union-attr]
            continue
        assert (got.root, got.nodes) == ref


@settings(max_examples=100, deadline=None)
@given(maps, change_sets, st.data())
def test_an_edited_stored_node_is_refused_where_the_reference_refuses_it(
    before: Changes, changes: Changes, data: st.DataObject
) -> None:
    start = _initial(before)
    if not start.nodes:
        return
    edited = data.draw(st.sampled_from(sorted(start.nodes)))

    def source() -> StoredNodes:
        s = _stored(start.nodes)
        with s.db:
            s.db.execute(
                "UPDATE memory_map_nodes SET b = ? WHERE at = ?",
                (bytes(32), find_row_unchecked(s.db, edited)),
            )
        return s

    ref = _outcome(lambda: mm.update_map_reference(source(), start.root, changes))
    new = _outcome(lambda: mm.update_map(source(), start.root, changes))
    assert new == ref


def test_an_edited_node_on_a_changed_path_is_an_integrity_error() -> None:
    start = _initial({"a": {k: VALUES[0] for k in KEYS[:8]}})
    s = _stored(start.nodes)
    with s.db:
        s.db.execute(
            "UPDATE memory_map_nodes SET b = ? WHERE at = ?",
            (bytes(32), find_row_unchecked(s.db, start.root)),
        )
    with pytest.raises(IntegrityError, match="edited"):
        mm.update_map(s, start.root, {"a": {KEYS[0]: None}})


def test_a_missing_root_is_an_integrity_error() -> None:
    start = _initial({"a": {k: VALUES[0] for k in KEYS[:8]}})
    with pytest.raises(IntegrityError, match="not stored"):
        mm.update_map(_mem({}), start.root, {"a": {KEYS[0]: None}})
    with pytest.raises(_N.Reject):  # type: ignore[union-attr]
        _native(_mem({}), start.root, {"a": {KEYS[0]: None}})


def test_bad_changes_are_refused_as_the_reference_refuses_them() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        mm.update_map(_mem({}), mm.EMPTY, {"a": {b"short": VALUES[0]}})
    with pytest.raises(ValueError, match="32 bytes"):
        mm.update_map(_mem({}), mm.EMPTY, {"a": {KEYS[0]: b"short"}})


def test_each_level_is_one_batched_read() -> None:
    # 2,000 items, 200 changed: the native walk reads each level's nodes in one call.
    items = {hashlib.sha256(b"i%d" % i).digest(): VALUES[i % 4] for i in range(2000)}
    start = _initial({"a": items})
    calls: list[int] = []
    s = _stored(start.nodes)
    held, read = s.map_reads()

    def counting(hashes: list[bytes]) -> list[mm.Node | mm.NodeRow | None]:
        calls.append(len(hashes))
        return read(hashes)

    class Counted:
        def node(self, h: bytes) -> mm.Node | None:
            raise AssertionError("the native walk reads in batches")

        def map_reads(self) -> tuple[Mapping[bytes, mm.Node | mm.NodeRow], mm.BatchRead]:
            return held, counting

    changes = {"a": {k: VALUES[3] for k in list(items)[:200]}}
    new = mm.update_map(Counted(), start.root, changes)
    ref = mm.update_map_reference(_stored(start.nodes), start.root, changes)
    assert (new.root, new.nodes) == (ref.root, ref.nodes)
    # The namespace path, then one read per item level (about log2(2000) + a few).
    assert 0 < len(calls) < 40
    assert max(calls) > 100
