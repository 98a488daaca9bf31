"""The built-in projections: what each folds, its summary, determinism and resumability."""

from __future__ import annotations

import hashlib
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger import encoding
from memroot.ledger.entries import ZERO_HASH, Entry, Kind, OpInput, build_entry, new_uuid
from memroot.ledger.errors import ValidationError
from memroot.projections.builtins import (
    Corrections,
    CorrectionsTopK,
    EpistemicDistribution,
    FailureMotifs,
    FailureMotifsTopK,
    FalsificationCounts,
    FalsificationState,
    LifecycleCounts,
    LifecycleTransitions,
    builtin_projections,
    check_payload,
    retired_projections,
)
from memroot.projections.projection import Projection, decode_state, encode_state

_seq = iter(range(1, 10**9))


def op(
    op_type: str,
    payload: dict[str, Any] | None = None,
    *,
    target_id: str | None = None,
    target_type: str | None = None,
    ns: str = "ns",
    op_id: str | None = None,
) -> Entry:
    """Build one operation entry (chain links do not matter to projections)."""
    item = OpInput(
        op_type=op_type,
        actor_id="a",
        actor_type="AI_AGENT",
        namespace_id=ns,
        payload=payload or {},
        policy_version="p/1",
        target_id=target_id,
        target_type=target_type,
    )
    return build_entry(
        ZERO_HASH, next(_seq), "main", 1, Kind.OP, op_type, item.body(op_id or new_uuid())
    )


def run(p: Projection, entries: list[Entry]) -> Any:
    state = p.initial()
    for e in entries:
        if p.types is None or e.type in p.types:
            state = p.fold(state, e)
    return state


def value(p: Projection, entries: list[Entry]) -> tuple[Any, int]:
    s = p.summarize(run(p, entries))
    return encoding.decode(s.data), s.count


def violation(motif: str, source: str, ns: str = "ns") -> Entry:
    return op("VIOLATION_RECORDED", {"motif": motif, "source": source}, ns=ns)


def test_failure_motifs_count_by_motif_and_source():
    """Violations are counted per motif, and per source within a motif."""
    entries = [
        violation("TITLE_MISMATCH", "QCD article"),
        violation("TITLE_MISMATCH", "QCD article"),
        violation("TITLE_MISMATCH", "Spin glass"),
        violation("DEFLECTION", "topic:physics"),
        op("ASSERT", {"epistemic_type": "OBSERVED"}),
    ]
    got, count = value(FailureMotifs(), entries)
    assert got == {
        "TITLE_MISMATCH": {
            "count": 3,
            "distinct_sources": 2,
            "sources": {"QCD article": 2, "Spin glass": 1},
        },
        "DEFLECTION": {"count": 1, "distinct_sources": 1, "sources": {"topic:physics": 1}},
    }
    assert count == 2


def test_failure_motifs_list_only_the_most_frequent_sources():
    """top_sources keeps the most frequent sources (ties by name); counts stay exact."""
    entries = [violation("M", s) for s in ["b", "a", "c", "c", "d", "d", "d"]]
    got, _ = value(FailureMotifs(top_sources=2), entries)
    assert got == {"M": {"count": 7, "distinct_sources": 4, "sources": {"d": 3, "c": 2}}}
    got, _ = value(FailureMotifs(top_sources=3), entries)
    assert got["M"]["sources"] == {"d": 3, "c": 2, "a": 1}


def test_failure_motifs_slices_by_motif_and_namespace():
    """The motifs and namespaces params keep only the listed motifs / namespaces."""
    entries = [
        violation("TITLE_MISMATCH", "a"),
        violation("DEFLECTION", "b"),
        violation("TITLE_MISMATCH", "c", ns="other"),
    ]
    got, _ = value(FailureMotifs(id="failure-motifs:title", motifs=("TITLE_MISMATCH",)), entries)
    assert set(got) == {"TITLE_MISMATCH"} and got["TITLE_MISMATCH"]["count"] == 2
    got, _ = value(FailureMotifs(namespaces=("other",)), entries)
    assert got == {"TITLE_MISMATCH": {"count": 1, "distinct_sources": 1, "sources": {"c": 1}}}


def test_failure_motifs_v2_counts_exactly_while_its_tables_have_room():
    """v2 lists every motif and source with error 0 until a table is full."""
    entries = [
        violation("TITLE_MISMATCH", "QCD article"),
        violation("TITLE_MISMATCH", "QCD article"),
        violation("TITLE_MISMATCH", "Spin glass"),
        violation("DEFLECTION", "topic:physics"),
        op("ASSERT", {"epistemic_type": "OBSERVED"}),
        op("VIOLATION_RECORDED", {"motif": "NO_SOURCE"}),
    ]
    got, count = value(FailureMotifsTopK(), entries)
    assert got == {
        "TITLE_MISMATCH": {
            "count": 3,
            "error": 0,
            "sources": {"QCD article": [2, 0], "Spin glass": [1, 0]},
        },
        "DEFLECTION": {"count": 1, "error": 0, "sources": {"topic:physics": [1, 0]}},
    }
    assert count == 2


def test_failure_motifs_v2_a_new_key_takes_the_smallest_counts_place():
    """A full table: the newcomer replaces the smallest count (of equal ones, the greatest
    key) and inherits it as its error; a motif replaced loses its sources."""
    p = FailureMotifsTopK(top_motifs=2, top_sources=2)
    got, _ = value(p, [violation("M", s) for s in ["b", "a", "a", "c"]])
    assert got["M"]["sources"] == {"a": [2, 0], "c": [2, 1]}  # b (1) left
    got, _ = value(p, [violation("M", s) for s in ["b", "a", "c"]])
    assert got["M"]["sources"] == {"a": [1, 0], "c": [2, 1]}  # a and b tied: b is greater
    got, count = value(
        p, [violation("M", "s"), violation("M", "s"), violation("N", "t"), violation("O", "u")]
    )
    assert got == {
        "M": {"count": 2, "error": 0, "sources": {"s": [2, 0]}},
        "O": {"count": 2, "error": 1, "sources": {"u": [1, 0]}},
    }
    assert count == 2


def test_failure_motifs_v2_finds_a_frequent_source_among_many_rare_ones():
    """Space-Saving's guarantee: a source seen more than N / capacity times is listed, its
    true count within [count - error, count]; the counts add up to the motif's."""
    entries = []
    for i in range(400):
        entries.append(violation("M", f"rare {i}"))
        if i % 3 == 0:
            entries.append(violation("M", "frequent"))
    got, _ = value(FailureMotifsTopK(top_sources=8), entries)
    m = got["M"]
    assert m["count"] == len(entries) and m["error"] == 0 and len(m["sources"]) == 8
    c, e = m["sources"]["frequent"]
    assert c - e <= 134 <= c
    assert sum(c for c, _ in m["sources"].values()) == m["count"]


def test_failure_motifs_v2_slices_by_motif_and_namespace():
    """The motifs and namespaces params keep only the listed motifs / namespaces."""
    entries = [
        violation("TITLE_MISMATCH", "a"),
        violation("DEFLECTION", "b"),
        violation("TITLE_MISMATCH", "c", ns="other"),
    ]
    got, _ = value(FailureMotifsTopK(motifs=("TITLE_MISMATCH",), namespaces=("ns",)), entries)
    assert got == {"TITLE_MISMATCH": {"count": 1, "error": 0, "sources": {"a": [1, 0]}}}


@pytest.mark.parametrize("params", [{"top_motifs": 0}, {"top_sources": -1}, {"top_sources": 1.5}])
def test_failure_motifs_v2_refuses_a_table_without_room(params: dict[str, Any]):
    """A capacity that is not a positive int is refused by name."""
    name = next(iter(params))
    with pytest.raises(ValueError, match=name):
        FailureMotifsTopK(**params)


def test_corrections_count_keep_the_recent_ones_and_chain_them_all():
    """Totals by motif and verifier, the last `recent` corrections, a chain over all of them."""
    ids = [new_uuid() for _ in range(4)]
    entries = [
        op(
            "CORRECTION_APPLIED",
            {
                "correction": f"fix {i}",
                "accepted_by": f"v{i % 2}",
                "motif": "TITLE_MISMATCH",
                "benchmark": "bench/titles-v3",
            },
            op_id=oid,
        )
        for i, oid in enumerate(ids)
    ]
    got, count = value(Corrections(recent=2), [*entries, violation("X", "y")])
    assert count == got["total"] == 4
    assert got["by_motif"] == {"TITLE_MISMATCH": 4} and got["by_verifier"] == {"v0": 2, "v1": 2}
    assert [c["id"] for c in got["recent"]] == ids[2:]
    assert got["recent"][-1] == {
        "id": ids[3],
        "seq": entries[3].seq,
        "correction": "fix 3",
        "accepted_by": "v1",
        "motif": "TITLE_MISMATCH",
        "benchmark": "bench/titles-v3",
    }
    chain = bytes(32)
    for e, oid in zip(entries, ids, strict=True):
        item = {"id": oid, "seq": e.seq, **e.body["payload"]}
        chain = hashlib.sha256(chain + cbor2.dumps(item, canonical=True)).digest()
    assert got["chain"] == chain
    other, _ = value(Corrections(recent=2), entries[:3] + entries[3:][::-1])
    assert other == got  # same entries, same order: same summary
    swapped, _ = value(Corrections(recent=2), [entries[1], entries[0], *entries[2:]])
    assert swapped["chain"] != got["chain"] and swapped["recent"] == got["recent"]


def _correction(verifier: str, motif: str | None = None, ns: str = "ns") -> Entry:
    payload = {"correction": "fix", "accepted_by": verifier}
    if motif is not None:
        payload["motif"] = motif
    return op("CORRECTION_APPLIED", payload, ns=ns)


def test_corrections_v2_is_v1_with_bounded_tables():
    """While the tables have room, v2 holds v1's counts as ``[c, 0]`` and the same total,
    recent list and chain; a verifier past capacity takes the place of the smallest count
    (of equal ones, the greatest text) at ``c + 1`` with error ``c``."""
    es = [
        _correction("v-a", "M1"),
        _correction("v-b", "M1"),
        _correction("v-a", "M2"),
        _correction("v-c"),
        violation("X", "y"),
        _correction("v-d", "M3", ns="other"),
    ]
    v1, n1 = value(Corrections(), es)
    v2, n2 = value(CorrectionsTopK(), es)
    assert n1 == n2 == 5
    for k in ("total", "recent", "chain"):
        assert v2[k] == v1[k]
    assert v2["by_verifier"] == {k: [c, 0] for k, c in v1["by_verifier"].items()}
    assert v2["by_motif"] == {k: [c, 0] for k, c in v1["by_motif"].items()}
    small, _ = value(CorrectionsTopK(top_motifs=1, top_verifiers=2), es)
    # v-a 2, v-b 1 full; v-c evicts v-b (the only count-1 key) at [2, 1]; v-d then evicts the
    # greater of the two count-2 keys, v-c, at [3, 2].
    assert small["by_verifier"] == {"v-a": [2, 0], "v-d": [3, 2]}
    # M1 2, then M2 evicts M1 at [3, 2], M3 evicts M2 at [4, 3].
    assert small["by_motif"] == {"M3": [4, 3]}
    sliced, n = value(CorrectionsTopK(namespaces=("other",)), es)
    assert n == 1 and sliced["by_verifier"] == {"v-d": [1, 0]}


def test_corrections_v2_fold_state_stops_growing_with_new_verifiers():
    """A new verifier in every correction: the encoded state stops growing at capacity."""
    p = CorrectionsTopK(recent=1, top_motifs=4, top_verifiers=4)
    sizes = []
    state = p.initial()
    for i in range(200):
        state = p.fold(state, _correction(f"verifier-{i:04d}", f"M{i:04d}"))
        sizes.append(len(encoding.encode([state["by_verifier"], state["by_motif"]])))
    # Every count and error is a two-byte CBOR integer (24-255) from entry 120 on, and no
    # key is added past capacity: the tables' bytes stay the same.
    assert sizes[199] == sizes[120]
    assert len(state["by_verifier"]) == 4 and len(state["by_motif"]) == 4
    assert sum(c - e for c, e in state["by_verifier"].values()) <= 200
    assert sum(c for c, _ in state["by_verifier"].values()) == 200


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_corrections_v2_refuses_a_table_without_room(bad: Any):
    with pytest.raises(ValueError, match="positive int"):
        CorrectionsTopK(top_verifiers=bad)


def test_epistemic_distribution_follows_asserts_and_transitions():
    """ASSERT adds to its type; EPISTEMIC_TRANSITION moves one object between types."""
    entries = [
        op("ASSERT", {"epistemic_type": "HYPOTHETICAL"}),
        op("ASSERT", {"epistemic_type": "HYPOTHETICAL"}),
        op("ASSERT", {"epistemic_type": "OBSERVED"}),
        op("EPISTEMIC_TRANSITION", {"from_type": "HYPOTHETICAL", "to_type": "ASSERTED"}),
    ]
    got, count = value(EpistemicDistribution(), entries)
    assert got == {"HYPOTHETICAL": 1, "OBSERVED": 1, "ASSERTED": 1}
    assert count == 3
    entries.append(
        op("EPISTEMIC_TRANSITION", {"from_type": "HYPOTHETICAL", "to_type": "DEPRECATED"})
    )
    got, _ = value(EpistemicDistribution(), entries)
    assert "HYPOTHETICAL" not in got and got["DEPRECATED"] == 1


def test_lifecycle_counts_follow_the_state_machine():
    """v1 (retired): ASSERT -> ACTIVE; DEPRECATE, SUPERSEDE leave ACTIVE; ARCHIVE knows whence."""
    a, b, c, d = (new_uuid() for _ in range(4))
    entries = [op("ASSERT", {"epistemic_type": "OBSERVED"}, target_id=x) for x in (a, b, c, d)]
    entries += [
        op("DEPRECATE", {"reason": "old"}, target_id=a),
        op("ARCHIVE", {"reason": "r"}, target_id=a),
        op("SUPERSEDE", {"new_object_id": d, "reason": "r"}, target_id=b),
        op("ARCHIVE", {"reason": "r"}, target_id=c),
    ]
    got, count = value(LifecycleCounts(), entries)
    assert got == {"ACTIVE": 1, "SUPERSEDED": 1, "ARCHIVED": 2}
    assert count == 3


def test_lifecycle_counts_v2_count_each_move_into_a_state():
    """v2: each ASSERT, DEPRECATE, SUPERSEDE and ARCHIVE of the slice counts the state it enters."""
    a, b, c, d = (new_uuid() for _ in range(4))
    entries = [op("ASSERT", {"epistemic_type": "OBSERVED"}, target_id=x) for x in (a, b, c, d)]
    entries += [
        op("DEPRECATE", {"reason": "old"}, target_id=a),
        op("ARCHIVE", {"reason": "r"}, target_id=a),
        op("SUPERSEDE", {"new_object_id": d, "reason": "r"}, target_id=b),
        op("ARCHIVE", {"reason": "r"}, target_id=c),
        op("DEPRECATE", {"reason": "elsewhere"}, target_id=d, ns="other"),
        op("RELATE", {"edge_type": "SUPPORTS"}, target_id=d),
    ]
    got, count = value(LifecycleTransitions(namespaces=("ns",)), entries)
    assert got == {"ACTIVE": 4, "DEPRECATED": 1, "SUPERSEDED": 1, "ARCHIVED": 2}
    assert count == 4
    got, _ = value(LifecycleTransitions(), entries)
    assert got["DEPRECATED"] == 2
    assert value(LifecycleTransitions(), [])[0] == {}


def test_the_bounded_versions_are_the_built_ins_and_v1_are_retired():
    """New roots run failure-motifs, lifecycle-counts and falsification-state v2; their v1
    stay to replay."""
    active = {p.id: p for p in builtin_projections()}
    assert isinstance(active["lifecycle-counts"], LifecycleTransitions)
    assert active["lifecycle-counts"].version == 2
    assert isinstance(active["falsification-state"], FalsificationCounts)
    assert isinstance(active["failure-motifs"], FailureMotifsTopK)
    assert active["failure-motifs"].version == 2
    assert isinstance(active["corrections"], CorrectionsTopK)
    assert active["corrections"].version == 2
    retired = {(p.id, p.version) for p in retired_projections()}
    assert retired == {
        ("lifecycle-counts", 1),
        ("falsification-state", 1),
        ("failure-motifs", 1),
        ("corrections", 1),
    }


def test_falsification_state_records_what_each_operation_says():
    """FALSIFY / MARK_STALE / RESTORE set the target's state; CASCADE marks touched items."""
    root, obj = "ab" * 32, new_uuid()
    entries = [
        op("FALSIFY", {"reason": "wrong"}, target_id=root, target_type="memory_root"),
        op("MARK_STALE", {"reason": "r"}, target_id=obj, target_type="memory_object"),
        op("RESTORE", {"reason": "r"}, target_id=obj, target_type="memory_object"),
        op(
            "CASCADE",
            {
                "touched": [
                    {"type": "memory_object", "id": "o2"},
                    {"type": "selfmodel", "id": "s1"},
                    "junk",
                ]
            },
        ),
    ]
    got, count = value(FalsificationState(), entries)
    assert got["memory_root"][root]["state"] == "falsified"
    assert got["memory_object"][obj] == {"state": "live", "seq": entries[2].seq}
    assert got["memory_object"]["o2"]["state"] == "stale"
    assert got["selfmodel"]["s1"]["state"] == "stale"
    assert count == 4


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"source": "s"}, "payload.motif"),
        ({"motif": "TITLE MISMATCH", "source": "s"}, "payload.motif"),
        ({"motif": "M", "source": ""}, "payload.source"),
        ({"motif": "M", "source": "s", "colour": "red"}, "payload.colour"),
        ({"motif": "M", "source": "s", "evidence_ids": ["not-a-uuid"]}, "payload.evidence_ids"),
    ],
)
def test_violation_payload_is_validated(payload: dict[str, Any], field: str):
    """A VIOLATION_RECORDED missing, misspelling or malforming a field is refused by name."""
    with pytest.raises(ValidationError) as e:
        check_payload("VIOLATION_RECORDED", payload)
    assert e.value.field == field


def test_correction_payload_is_validated():
    """CORRECTION_APPLIED needs correction and accepted_by; violation_id must be a UUID."""
    check_payload(
        "CORRECTION_APPLIED", {"correction": "c", "accepted_by": "op", "violation_id": new_uuid()}
    )
    with pytest.raises(ValidationError) as e:
        check_payload("CORRECTION_APPLIED", {"correction": "c"})
    assert e.value.field == "payload.accepted_by"
    with pytest.raises(ValidationError) as e:
        check_payload(
            "CORRECTION_APPLIED", {"correction": "c", "accepted_by": "x", "violation_id": "v1"}
        )
    assert e.value.field == "payload.violation_id"
    check_payload("ASSERT", {"anything": 1})  # not ours: passes untouched


_ops = st.one_of(
    st.builds(
        violation,
        st.sampled_from(["A", "B", "C"]),
        st.sampled_from(["s1", "s2", "s3"]),
        st.sampled_from(["ns", "other"]),
    ),
    st.builds(
        lambda t: op("ASSERT", {"epistemic_type": t}, target_id=new_uuid()),
        st.sampled_from(["OBSERVED", "INFERRED", "HYPOTHETICAL"]),
    ),
    st.builds(
        lambda f, t: op("EPISTEMIC_TRANSITION", {"from_type": f, "to_type": t}),
        st.sampled_from(["INFERRED", "HYPOTHETICAL"]),
        st.just("ASSERTED"),
    ),
    st.builds(
        lambda k: op(k, {"reason": "r"}, target_id="x", target_type="memory_object"),
        st.sampled_from(["FALSIFY", "MARK_STALE", "RESTORE"]),
    ),
    st.builds(lambda: op("CORRECTION_APPLIED", {"correction": "c", "accepted_by": "v"})),
    st.builds(
        lambda k, t: op(k, {"reason": "r"}, target_id=t),
        st.sampled_from(["DEPRECATE", "ARCHIVE", "SUPERSEDE"]),
        st.sampled_from(["x", "y", "z"]),
    ),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(_ops, max_size=30), st.integers(min_value=0, max_value=30))
def test_resuming_from_a_persisted_state_equals_folding_from_scratch(entries, cut):
    """Fold to any point, store and reload the state, fold the rest: same summary and state."""
    cut = min(cut, len(entries))
    small = FailureMotifsTopK(top_motifs=2, top_sources=2)  # its tables fill: replacements
    for p in [*builtin_projections(), *retired_projections(), small]:
        whole = p.summarize(run(p, entries))
        saved = decode_state(p, encode_state(p, run(p, entries[:cut])))
        state = saved
        for e in entries[cut:]:
            if p.types is None or e.type in p.types:
                state = p.fold(state, e)
        assert p.summarize(state) == whole, p.id
        assert encode_state(p, state) == encode_state(p, run(p, entries)), p.id


@settings(max_examples=30, deadline=None)
@given(st.lists(_ops, max_size=20))
def test_summaries_are_canonical_cbor_and_repeatable(entries):
    """Summaries decode strictly (canonical CBOR) and two runs give identical bytes."""
    small = FailureMotifsTopK(top_motifs=2, top_sources=2)
    for p in [*builtin_projections(), *retired_projections(), small]:
        a, b = p.summarize(run(p, entries)), p.summarize(run(p, entries))
        assert a == b
        assert encoding.encode(encoding.decode(a.data)) == a.data


def test_fold_ignores_types_it_does_not_declare():
    """Each built-in leaves its state untouched for entry types outside ``types``."""
    stranger = op("RELATE", {"edge_type": "SUPPORTS"})
    for p in builtin_projections():
        assert p.types is not None and "RELATE" not in p.types
        assert p.fold(p.initial(), stranger) == p.initial()


def test_lifecycle_state_round_trips_through_its_compact_encoding():
    """Deprecated ids are stored as one text in log order and read back in that order."""
    p = LifecycleCounts()
    ids = [new_uuid() for _ in range(5)]
    entries = [op("DEPRECATE", {"reason": "r"}, target_id=i) for i in reversed(ids)]
    entries.append(op("ARCHIVE", {"reason": "r"}, target_id=ids[2]))
    state = run(p, entries)
    data = encode_state(p, state)
    kept = [i for i in reversed(ids) if i != ids[2]]
    assert encoding.decode(data) == {
        "counts": {"ACTIVE": -5, "DEPRECATED": 4, "ARCHIVED": 1},
        "deprecated": "\n".join(kept),
    }
    assert list(decode_state(p, data)["deprecated"]) == kept
    assert decode_state(p, encode_state(p, p.initial())) == p.initial()


_NAMING = [
    "ASSERT",
    "DEPRECATE",
    "SUPERSEDE",
    "ARCHIVE",
    "FALSIFY",
    "MARK_STALE",
    "CASCADE",
    "VIOLATION_RECORDED",
]


def _naming(kind: str, seq: int, item: str) -> Entry:
    """An operation of type ``kind`` at ``seq`` naming the object ``item`` (a violation names
    it as its source, and at even seqs as its motif too)."""
    target: str | None
    payload: dict[str, Any]
    if kind == "VIOLATION_RECORDED":
        payload = {"motif": item if seq % 2 == 0 else "M", "source": item}
        target = None
    elif kind == "CASCADE":
        payload = {"touched": [{"type": "memory_object", "id": item}] * 3}
        target = None
    elif kind == "ASSERT":
        payload, target = {"epistemic_type": "OBSERVED"}, item
    else:
        payload, target = {"reason": "r"}, item
    body = OpInput(
        op_type=kind,
        actor_id="a",
        actor_type="AI_AGENT",
        namespace_id="ns",
        payload=payload,
        policy_version="p/1",
        target_id=target,
        target_type="memory_object",
    ).body("00000000-0000-7000-8000-000000000000")
    return build_entry(ZERO_HASH, seq, "main", 1, Kind.OP, kind, body)


def _full_sketch(p: FailureMotifsTopK) -> int:
    """The longest state ``p`` can hold in ``test_no_built_in_remembers_the_objects_it_counts``:
    every place of both tables taken by a 36-character text, every count and error < 256."""
    sources = {f"{i:036d}": [255, 255] for i in range(p.top_sources)}
    motif = {"count": 255, "error": 255, "sources": sources}
    return len(encoding.encode({f"{i:036d}": motif for i in range(p.top_motifs)}))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(_NAMING), min_size=1, max_size=80))
def test_no_built_in_remembers_the_objects_it_counts(kinds):
    """Every active built-in's fold state and summary are as long when each operation names a
    new object (a violation: a new source, and a new motif at even seqs) as when all name one:
    nothing kept grows with the objects or sources a history names. failure-motifs v2 keeps
    at most its tables' places: its state is bounded by a full sketch (small tables here, so
    the histories fill them), whichever the history."""
    fresh = [_naming(k, i + 1, new_uuid()) for i, k in enumerate(kinds)]
    same = [_naming(k, i + 1, "00000000-0000-7000-8000-00000000000a") for i, k in enumerate(kinds)]
    small = FailureMotifsTopK(top_motifs=2, top_sources=3)
    for p in [*builtin_projections(), small]:
        a, b = run(p, fresh), run(p, same)
        if isinstance(p, FailureMotifsTopK):
            bound = _full_sketch(p)
            for state in (a, b):
                assert len(encode_state(p, state)) <= bound, p
                assert len(p.summarize(state).data) <= bound, p
            continue
        assert len(encode_state(p, a)) == len(encode_state(p, b)), p.id
        assert len(p.summarize(a).data) == len(p.summarize(b).data), p.id
    v1 = LifecycleCounts()  # why it was retired: it remembers every deprecated object
    if kinds.count("DEPRECATE") >= 2 and "ARCHIVE" not in kinds:
        assert len(encode_state(v1, run(v1, fresh))) > len(encode_state(v1, run(v1, same)))
    m1 = FailureMotifs()  # likewise: it counts every source it met
    under_m = [k for i, k in enumerate(kinds) if i % 2 == 0 and k == "VIOLATION_RECORDED"]
    if len(under_m) >= 2:  # two sources of motif M: one in ``same``
        assert len(encode_state(m1, run(m1, fresh))) > len(encode_state(m1, run(m1, same)))
    violations = kinds.count("VIOLATION_RECORDED")
    if violations > 2 * 3 * 2:  # more new sources than the small tables hold, twice over
        assert len(encode_state(m1, run(m1, fresh))) > _full_sketch(small)
