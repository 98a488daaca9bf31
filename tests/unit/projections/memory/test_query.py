"""Reading memory: filters, full-text search, retrieval modes, flags and as-of reads."""

from __future__ import annotations

import random
from typing import Any

import pytest

from memroot.ledger.errors import NotFoundError, ValidationError
from memroot.projections import requests as rq
from memroot.projections.epistemic import RetrievalMode, default_visible
from memroot.projections.query import Query, get_object, object_history, query

DEFAULT = RetrievalMode.DEFAULT
EXPLICIT = RetrievalMode.EXPLICIT
AUDIT = RetrievalMode.AUDIT


def ids(world: Any, **kw: Any) -> list[str]:
    return [r.object.id for r in query(world.db, Query(**kw))]


def test_filters_by_type_namespace_and_epistemic_type(world: Any) -> None:
    """Each filter narrows the result; filters combine with AND; newest first."""
    fact = world.assert_("f", type_="FACT")
    pref = world.assert_("p", type_="PREFERENCE")
    other = world.assert_("o", type_="FACT", by=rq.Actor("a", namespace_id="elsewhere"))
    inferred = world.assert_("i", type_="FACT", epistemic="INFERRED", source="SYSTEM_INFERRED")
    assert ids(world) == [inferred, other, pref, fact]
    assert ids(world, types=("FACT",)) == [inferred, other, fact]
    assert ids(world, types=("FACT", "PREFERENCE"), namespaces=("ns",)) == [inferred, pref, fact]
    assert ids(world, epistemic=("INFERRED",)) == [inferred]
    assert ids(world, limit=2) == [inferred, other]


def test_text_search_is_lexical_and_safe(world: Any) -> None:
    """--text matches words (AND, prefix with *), and FTS5 syntax in input is just text."""
    tea = world.assert_("Alice takes tea without sugar")
    coffee = world.assert_("Bob drinks coffee, black")
    accent = world.assert_("Café au lait in Montréal")
    assert ids(world, text="tea") == [tea]
    assert ids(world, text="TEA sugar") == [tea]
    assert ids(world, text="tea coffee") == []
    assert ids(world, text="cof*") == [coffee]
    assert ids(world, text="montréal") == [accent]
    assert ids(world, text='sugar" OR "black') == []
    assert ids(world, text="tea)(^") == [tea]
    assert ids(world, text="NEAR(tea") == []  # every word must occur, NEAR too
    with pytest.raises(ValidationError):
        query(world.db, Query(text="  ** "))


def test_default_mode_applies_rfc_0003(world: Any) -> None:
    """DEFAULT hides HYPOTHETICAL, DEPRECATED, UNVERIFIED <= 0.30, untrue CONDITIONAL."""
    shown = {
        world.assert_("obs"),
        world.assert_("ass", epistemic="ASSERTED"),
        world.assert_("inf", epistemic="INFERRED", source="SYSTEM_INFERRED"),
        world.assert_(
            "cond", epistemic="CONDITIONAL", confidence=0.5, condition=("weekday", "TRUE")
        ),
    }
    hidden = {
        world.assert_("hyp", epistemic="HYPOTHETICAL"),
        world.assert_("unv", epistemic="UNVERIFIED", source="TOOL_OUTPUT"),  # 0.30: not above
        world.assert_(
            "cond?", epistemic="CONDITIONAL", confidence=0.5, condition=("weekday", "UNKNOWN")
        ),
    }
    dep = world.assert_("dep", epistemic="ASSERTED")
    world.op(rq.transition(world.agent, dep, "ASSERTED", "DEPRECATED", "wrong"))
    gone = world.assert_("gone")
    world.op(rq.archive(world.agent, gone, "old", "p"))
    hidden |= {dep, gone}
    unv = world.assert_("unv2", epistemic="UNVERIFIED", source="TOOL_OUTPUT")
    world.op(rq.reinforce(world.agent, unv, "seen", 0.1, 0.35, 0.5, "tool"))
    shown.add(unv)
    results = {r.object.id: r for r in query(world.db, Query())}
    assert set(results) == shown
    inferred = next(r for r in results.values() if r.object.value == "inf")
    assert inferred.flags == ("INFERRED",)
    assert set(ids(world, mode=EXPLICIT)) == shown | hidden - {gone}
    assert set(ids(world, mode=AUDIT)) == shown | hidden
    assert ids(world, mode=EXPLICIT, states=("ARCHIVED",)) == [gone]
    with pytest.raises(ValidationError):
        Query(states=("ARCHIVED",))


def test_sql_default_filter_equals_the_rfc_predicate(world: Any) -> None:
    """For many random objects, DEFAULT SQL filtering agrees with default_visible()."""
    rng = random.Random(4)
    for i in range(120):
        epi = rng.choice(
            ["OBSERVED", "ASSERTED", "INFERRED", "HYPOTHETICAL", "UNVERIFIED", "CONDITIONAL"]
        )
        src = {
            "OBSERVED": "USER_STATED",
            "ASSERTED": "TOOL_OUTPUT",
            "INFERRED": "TOOL_OUTPUT",
            "HYPOTHETICAL": "EXTERNAL_DOCUMENT",
            "UNVERIFIED": rng.choice(["SYSTEM_INFERRED", "EXTERNAL_DOCUMENT", "TOOL_OUTPUT"]),
            "CONDITIONAL": "USER_STATED",
        }[epi]
        kw: dict[str, Any] = {}
        if epi == "CONDITIONAL":
            kw = {
                "confidence": rng.random(),
                "condition": ("c", rng.choice(["TRUE", "FALSE", "UNKNOWN"])),
            }
        oid = world.assert_(f"v{i}", epistemic=epi, source=src, **kw)
        r = rng.random()
        if r < 0.15:
            world.op(rq.deprecate(world.agent, oid, "x"))
        elif r < 0.3 and epi == "UNVERIFIED":
            c = world.get(oid).confidence
            world.op(rq.reinforce(world.agent, oid, "s", 0.2, min(1.0, c + 0.1), 0.5, "t"))
    everything = query(world.db, Query(mode=AUDIT, limit=10_000))
    want = {
        r.object.id
        for r in everything
        if default_visible(
            r.object.epistemic_type,
            r.object.confidence,
            r.object.lifecycle_state,
            r.object.condition_state,
        )
    }
    assert set(ids(world, limit=10_000)) == want
    assert 0 < len(want) < len(everything)


def test_as_of_reads_what_was_believed_then(world: Any) -> None:
    """get_object and query with as_of return the versions current right after that entry."""
    oid = world.assert_("Alice lives in Paris", epistemic="ASSERTED")
    asserted_at = world.ledger.size() - 1
    world.op(rq.reinforce(world.agent, oid, "seen", 0.1, 0.9, 0.6, "chat"))
    reinforced_at = world.ledger.size() - 1
    new = world.assert_("Alice lives in Rome", epistemic="ASSERTED")
    world.op(rq.supersede(world.agent, oid, new, "moved"))
    assert get_object(world.db, oid, as_of=asserted_at).confidence == pytest.approx(0.8)
    assert get_object(world.db, oid, as_of=reinforced_at).version == 2
    assert get_object(world.db, oid).lifecycle_state == "SUPERSEDED"
    with pytest.raises(NotFoundError):
        get_object(world.db, oid, as_of=asserted_at - 1)
    assert ids(world, as_of=reinforced_at) == [oid]
    assert ids(world) == [new]
    assert ids(world, text="paris", as_of=reinforced_at) == [oid]
    assert [v.version for v in object_history(world.db, oid)] == [1, 2, 3]


def test_conflict_flags_respect_as_of(world: Any) -> None:
    """A contradiction noted later is not flagged when reading as of before it."""
    a, b = world.assert_("a"), world.assert_("b")
    before = world.ledger.size() - 1
    world.op(rq.contradiction(world.agent, a, b, "clash"))
    now = {r.object.id: r.flags for r in query(world.db, Query())}
    then = {r.object.id: r.flags for r in query(world.db, Query(as_of=before))}
    assert now[a] == ("CONFLICT",) and then[a] == ()


def test_unknown_entity_or_bad_query_is_refused(world: Any) -> None:
    """Filters outside the enumerations, bad limits and unknown entities are refused."""
    from memroot.ledger.entries import new_uuid

    with pytest.raises(NotFoundError):
        query(world.db, Query(entity=new_uuid()))
    for kw in ({"types": ("FCT",)}, {"limit": 0}, {"as_of": -1}, {"epistemic": ("X",)}):
        with pytest.raises(ValidationError):
            Query(**kw)
