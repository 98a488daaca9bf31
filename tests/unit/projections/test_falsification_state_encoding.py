"""falsification-state's incremental encoding: the same bytes as encoding the whole state.

The projection keeps its summary's canonical CBOR up to date item by item (``ItemStates``)
so that an automatic snapshot does not re-encode every item named so far. What it stores and
commits must stay byte for byte what ``encoding.encode`` of the plain maps gives (the stored
summaries, fold states and summary digests of existing ledgers).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger import encoding
from memroot.ledger.entries import ZERO_HASH, Entry, Kind, OpInput, build_entry, new_uuid
from memroot.ledger.errors import DecodeError
from memroot.memory_root._fold import Folder
from memroot.projections.builtins import FalsificationState, ItemStates, builtin_projections
from memroot.projections.projection import decode_state, encode_state

# Keys of different lengths and non-ASCII text: canonical order is by encoded length, then
# bytewise, which differs from Python's string order.
_TEXT = st.sampled_from(["a", "b", "ab", "ba", "zz", "é", "aé", "memory_object", "selfmodel"])
_IDS = st.one_of(_TEXT, st.text(max_size=6), st.uuids().map(str))
_VALUE = st.fixed_dictionaries(
    {"state": st.sampled_from(["live", "stale", "falsified"]), "seq": st.integers(0, 2**40)}
)


def _reference(sets: list[tuple[str, str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The state as the projection kept it before: plain maps, set in order."""
    state: dict[str, dict[str, Any]] = {}
    for kind, item, value in sets:
        state.setdefault(kind, {})[item] = value
    return state


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_TEXT, _IDS, _VALUE), max_size=60))
def test_encoding_is_encoding_the_plain_maps(sets: list[tuple[str, str, dict[str, Any]]]) -> None:
    """After any sequence of sets (new items, changed items), the bytes are the reference's."""
    states = ItemStates()
    for i, (kind, item, value) in enumerate(sets):
        states.set(kind, item, value)
        if i % 7 == 0:  # read in between: the cached bytes must follow later changes
            assert states.encoded() == encoding.encode(_reference(sets[: i + 1]))
    ref = _reference(sets)
    assert states.encoded() == encoding.encode(ref)
    assert states.to_value() == ref
    assert states.count == sum(len(v) for v in ref.values())
    again = ItemStates.from_value(encoding.decode(states.encoded()))
    assert again == states and again.encoded() == states.encoded()
    assert again.count == states.count


@pytest.mark.parametrize("n", [0, 1, 23, 24, 255, 256, 65535, 65536])
def test_map_heads_at_every_width(n: int) -> None:
    """Maps of 23/24, 255/256 and 65535/65536 items take the head the canonical encoder does."""
    states = ItemStates()
    for i in range(n):
        states.set("memory_object", f"{i:08x}", {"state": "falsified", "seq": i})
    if n == 0:
        states = ItemStates.from_value({"memory_object": {}})
    assert states.encoded() == encoding.encode(states.to_value())
    assert len(states.to_value()["memory_object"]) == n


@pytest.mark.parametrize("bulk", [3, 300, 2000])
def test_many_new_items_at_once(bulk: int) -> None:
    """A fold that names many items between two encodings (a large CASCADE) sorts them in."""
    states = ItemStates()
    ref: list[tuple[str, str, dict[str, Any]]] = []
    for round_ in range(3):
        for i in range(bulk):
            # New ids interleave with the old ones; every 5th one names an item again.
            item = f"o{(i * 7919 + round_) % (bulk * 2):06d}" if i % 5 else f"o{i:06d}"
            value = {"state": "stale", "seq": round_ * bulk + i}
            states.set("memory_object", item, value)
            ref.append(("memory_object", item, value))
        states.set("memory_root", f"r{round_}", {"state": "falsified", "seq": round_})
        ref.append(("memory_root", f"r{round_}", {"state": "falsified", "seq": round_}))
        assert states.encoded() == encoding.encode(_reference(ref))
        # A placed item named again, before and after the next encoding.
        states.set("memory_object", ref[0][1], {"state": "live", "seq": 10**6 + round_})
        ref.append(("memory_object", ref[0][1], {"state": "live", "seq": 10**6 + round_}))
        assert states.encoded() == encoding.encode(_reference(ref))
    assert states.count == sum(len(v) for v in _reference(ref).values())


@pytest.mark.parametrize("value", [[], {"memory_object": []}, {"memory_object": 1}, 7])
def test_a_fold_state_that_is_not_maps_of_maps_is_refused(value: Any) -> None:
    """A stored fold state of another shape is refused (not silently re-encoded otherwise)."""
    with pytest.raises(DecodeError):
        FalsificationState().decode_state(encoding.encode(value))


def _op(op_type: str, seq: int, **body: Any) -> Entry:
    item = OpInput(
        op_type=op_type,
        actor_id="a",
        actor_type="HUMAN_USER",
        namespace_id=body.pop("ns", "ns"),
        payload=body.pop("payload", {"reason": "r"}),
        policy_version="p/1",
        **body,
    )
    return build_entry(ZERO_HASH, seq, "main", 1, Kind.OP, op_type, item.body(new_uuid()))


_ENTRY = st.one_of(
    st.tuples(
        st.sampled_from(["FALSIFY", "MARK_STALE", "RESTORE"]),
        st.sampled_from(["memory_object", "memory_root", "selfmodel"]),
        st.sampled_from(["o1", "o2", "o3", "é1", "long-object-id"]),
        st.sampled_from(["ns", "other"]),
    ),
    st.lists(st.sampled_from(["o1", "o4", "é1"]), max_size=3).map(lambda ids: ("CASCADE", ids)),
)


def _entries(specs: list[Any]) -> list[Entry]:
    out = []
    for seq, spec in enumerate(specs, start=1):
        if spec[0] == "CASCADE":
            touched = [{"type": "memory_object", "id": i} for i in spec[1]]
            out.append(_op("CASCADE", seq, payload={"touched": touched}))
        else:
            op_type, kind, item, ns = spec
            out.append(_op(op_type, seq, target_type=kind, target_id=item, ns=ns))
    return out


def _old_fold(p: FalsificationState, entries: list[Entry]) -> dict[str, dict[str, Any]]:
    """The projection's fold as it was, into plain maps (the reference for the bytes)."""
    state: dict[str, dict[str, Any]] = {}
    names = {"FALSIFY": "falsified", "MARK_STALE": "stale", "RESTORE": "live"}
    for e in entries:
        if p.namespaces and e.body.get("namespace_id") not in p.namespaces:
            continue
        if e.type == "CASCADE":
            for t in e.body["payload"]["touched"]:
                state.setdefault(t["type"], {})[t["id"]] = {"state": "stale", "seq": e.seq}
        else:
            value = {"state": names[e.type], "seq": e.seq}
            state.setdefault(e.body["target_type"], {})[e.body["target_id"]] = value
    return state


@settings(max_examples=100, deadline=None)
@given(st.lists(_ENTRY, max_size=40), st.booleans())
def test_summary_and_stored_state_are_the_old_bytes(specs: list[Any], sliced: bool) -> None:
    """Summary, count and the writer's stored state are what the plain-map fold encoded."""
    p = FalsificationState(namespaces=("ns",) if sliced else ())
    entries = _entries(specs)
    state = p.initial()
    for e in entries:
        state = p.fold(state, e)
    ref = _old_fold(p, entries)
    summary = p.summarize(state)
    assert summary.data == encoding.encode(ref)
    assert summary.count == sum(len(v) for v in ref.values())
    assert encode_state(p, state) == summary.data
    assert decode_state(p, summary.data) == state


@settings(max_examples=30, deadline=None)
@given(st.lists(_ENTRY, min_size=1, max_size=30))
def test_the_writers_outputs_are_unchanged(specs: list[Any]) -> None:
    """Folder.outputs(writer=True): every built-in's summary and state bytes as before."""
    entries = _entries(specs)
    folder = Folder(builtin_projections())
    folder.fold_all(entries)
    for p, summary, state in folder.outputs(writer=True):
        assert encoding.encode(encoding.decode(summary.data)) == summary.data, p.id
        if isinstance(p, FalsificationState):
            assert summary.data == state == encoding.encode(_old_fold(p, entries))
        else:
            assert state is not None
            assert encode_state(p, decode_state(p, state)) == state, p.id
