"""CASCADE (SPEC 7): explicit, bounded, deterministic, one entry, re-snapshots, replayed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger import encoding
from memroot.ledger.entries import Entry, EventInput, Kind, OpInput
from memroot.ledger.errors import NotFoundError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import verify_path
from memroot.memory_root import Roots, RootsHook, SelfModel, StaticSelfModel
from memroot.memory_root.falsify import Falsifier, FalsifyHook
from memroot.memory_root.falsify.cascade import BEYOND_LISTED, beyond_digest
from memroot.memory_root.falsify.deps import OBJECT, ROOT, SELFMODEL, SUMMARY, ItemRef
from memroot.memory_root.falsify.replay import TABLES, FalsifyReplayCheck, rebuild
from memroot.projections import requests as rq
from memroot.projections.builtins import (
    EpistemicDistribution,
    MemoryStateDigest,
    builtin_projections,
)
from memroot.projections.digest import state_digest
from memroot.projections.hook import MemoryHook
from memroot.projections.projection import Summary
from memroot.projections.query import get_object
from memroot.projections.registry import Registry
from memroot.projections.replay import replay
from memroot.projections.rules import RuleError

AGENT = rq.Actor("agent-7", "AI_AGENT", "ns")
ALL = ("memory_object", "memory_root", "selfmodel", "summary_item")


@pytest.fixture(autouse=True)
def _trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))


def _hooks(registry: Registry | None = None, selfmodel: bool = True) -> list[Any]:
    sm = [StaticSelfModel(SelfModel("agent-7"))] if selfmodel else []
    return [MemoryHook(), FalsifyHook(registry), RootsHook(registry, selfmodel_hooks=sm)]


def _ledger(path: Path, registry: Registry | None = None, selfmodel: bool = True) -> Ledger:
    return Ledger.init(path, origin=f"example.org/{path.name}", hooks=_hooks(registry, selfmodel))


def _event(ledger: Ledger, text: str = "e") -> str:
    e = EventInput(
        stream="s",
        actor_id="u",
        actor_type="HUMAN_USER",
        role="USER",
        content=text,
        namespace_id="ns",
    )
    return ledger.append(e).id


def _obj(ledger: Ledger, ev: str, kind: str = "FACT", epistemic: str = "OBSERVED") -> str:
    source = "SYSTEM_INFERRED" if epistemic == "INFERRED" else "USER_STATED"
    return ledger.append(rq.assert_object(AGENT, kind, epistemic, source, [ev], "v")).id


def _summary(ledger: Ledger, ev: str, of: list[str]) -> str:
    s = _obj(ledger, ev, "SUMMARY", "INFERRED")
    ledger.append(rq.summary_created(AGENT, s, of, (0, 1), "daily"))
    return s


def _tables(ledger: Ledger) -> dict[str, list[Any]]:
    db = ledger.store.db
    return {
        t: db.execute(f"SELECT {', '.join(c)} FROM {t} ORDER BY {', '.join(c)}").fetchall()
        for t, c in TABLES
    }


def _story(path: Path, registry: Registry | None = None) -> tuple[Ledger, dict[str, str]]:
    """o1 <- s (summary) ; o1 <- o3 (supports) ; root r1 built on o1 ; r2 child of r1."""
    ledger = _ledger(path, registry)
    roots = Roots(ledger)
    ev = _event(ledger)
    o1 = _obj(ledger, ev)
    o2 = _obj(ledger, ev, epistemic="ASSERTED")
    s = _summary(ledger, ev, [o1])
    r1 = roots.snapshot().record.root.hex()
    o3 = _obj(ledger, ev)
    ledger.append(rq.relate(AGENT, "SUPPORTS", o1, o3, 0.5))
    r2 = roots.snapshot().record.root.hex()
    return ledger, {"ev": ev, "o1": o1, "o2": o2, "s": s, "o3": o3, "r1": r1, "r2": r2}


def test_dry_run_plans_breadth_first_and_writes_nothing(tmp_path: Path) -> None:
    """A dry run lists every item with its depth (depth, then id order) and writes nothing."""
    ledger, ids = _story(tmp_path / "a.ledger")
    with ledger:
        f = Falsifier(ledger)
        f.falsify(ids["o1"], "wrong")
        size, tables = ledger.size(), _tables(ledger)
        p = f.plan(ids["o1"], 3, 1000)
        assert (ledger.size(), _tables(ledger)) == (size, tables)
        keys = [(s.depth, s.item.id, s.item.kind) for s in p.touched]
        assert keys == sorted(keys)
        at = {s.item: s.depth for s in p.touched}
        assert at[ItemRef(OBJECT, ids["s"])] == 1 and at[ItemRef(OBJECT, ids["o3"])] == 1
        assert at[ItemRef(ROOT, ids["r1"])] == 1 and at[ItemRef(ROOT, ids["r2"])] == 2
        assert {i.kind for i in at} == set(ALL)
        assert not p.beyond and not p.passed
        assert f.state(ids["r1"]) == "live"


def test_apply_appends_one_cascade_entry_that_lists_exactly_what_it_did(tmp_path: Path) -> None:
    """Applying appends exactly one CASCADE entry; the touched items, and only they, become
    stale; the entry lists them with depths, and what lay beyond (count, digest, items)."""
    ledger, ids = _story(tmp_path / "a.ledger")
    with ledger:
        f = Falsifier(ledger)
        f.falsify(ids["o1"], "wrong")
        untouched = f.state(ids["o2"])
        planned = f.plan(ids["o1"], 1, 1000)
        size = ledger.size()
        result = f.cascade(ids["o1"], 1, 1000, reason="re-check")
        assert [a.type for a in result.appended] == ["CASCADE"]
        assert ledger.size() == size + 1
        entry = ledger.entry(result.appended[0].seq)
        payload = entry.body["payload"]
        assert (entry.body["target_type"], entry.body["target_id"]) == (OBJECT, ids["o1"])
        assert payload["touched"] == [s.to_cbor() for s in planned.touched]
        assert payload["beyond"]["count"] == len(planned.beyond) > 0
        assert payload["beyond"]["digest"] == beyond_digest(planned.beyond).hex()
        assert {c["bound"] for c in payload["beyond"]["items"]} == {"depth"}
        assert payload["reason"] == "re-check"
        for s in planned.touched:
            assert f.state(s.item) == "stale"
        for c in planned.beyond:
            assert f.state(c.item) == "live"
        assert f.state(ids["o2"]) == untouched == "live"
        assert f.state(ids["o1"]) == "falsified"
        assert get_object(ledger.store.db, ids["s"]).state == "stale"
        assert Roots(ledger).get(ids["r1"]).state == "stale"


def test_bounds_cut_the_walk_and_say_which_bound(tmp_path: Path) -> None:
    """max_items stops at the item that fills it (the rest is beyond, 'items'); kinds keeps
    other kinds out ('kinds'); max_depth stops at its depth ('depth')."""
    ledger, ids = _story(tmp_path / "a.ledger")
    with ledger:
        f = Falsifier(ledger)
        f.falsify(ids["o1"], "wrong")
        full = f.plan(ids["o1"], 5, 1000)
        two = f.plan(ids["o1"], 5, 2)
        assert [s.item for s in two.touched] == [s.item for s in full.touched[:2]]
        first_cut = two.beyond[0]
        assert first_cut.bound == "items" and first_cut.item == full.touched[2].item
        objs = f.plan(ids["o1"], 5, 1000, "object")
        assert {s.item.kind for s in objs.touched} == {OBJECT}
        assert {c.bound for c in objs.beyond} == {"kinds"}
        assert {c.item.kind for c in objs.beyond} == {ROOT, SUMMARY}


def test_items_already_stale_or_falsified_are_walked_through_not_touched(tmp_path: Path) -> None:
    """A second, deeper cascade walks through what the first marked stale and touches only
    what lies past it."""
    ledger, ids = _story(tmp_path / "a.ledger")
    with ledger:
        f = Falsifier(ledger)
        f.falsify(ids["o1"], "wrong")
        first = f.cascade(ids["o1"], 1, 1000).plan
        second = f.plan(ids["o1"], 3, 1000)
        assert {s.item for s in second.passed} == {s.item for s in first.touched}
        assert not {s.item for s in second.touched} & {s.item for s in first.touched}
        assert ItemRef(ROOT, ids["r2"]) in {s.item for s in second.touched}


def test_bad_cascade_requests_are_refused_and_write_nothing(tmp_path: Path) -> None:
    """A bound of zero, a live origin, an unknown origin and an unknown kind: refused."""
    ledger, ids = _story(tmp_path / "a.ledger")
    with ledger:
        f = Falsifier(ledger)
        size, tables = ledger.size(), _tables(ledger)
        with pytest.raises(RuleError, match="is live"):
            f.cascade(ids["o1"], 2, 10)
        f.falsify(ids["o1"], "wrong")
        size, tables = ledger.size(), _tables(ledger)
        with pytest.raises(ValidationError, match="max_depth"):
            f.cascade(ids["o1"], 0, 10)
        with pytest.raises(ValidationError, match="max_items"):
            f.cascade(ids["o1"], 2, 0)
        with pytest.raises(ValidationError, match="kind"):
            f.cascade(ids["o1"], 2, 10, "object,things")
        with pytest.raises(NotFoundError):
            f.cascade("0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6b", 2, 10)
        assert (ledger.size(), _tables(ledger)) == (size, tables)


def test_a_forged_cascade_entry_is_refused(tmp_path: Path) -> None:
    """A CASCADE whose lists differ from the cascade's plan (an item added to touched) is
    refused at append, naming the field; so is one that is not first in its append."""
    ledger, ids = _story(tmp_path / "a.ledger")
    with ledger:
        f = Falsifier(ledger)
        f.falsify(ids["o1"], "wrong")
        payload = f.core.plan("main", f.request(ids["o1"], 1, 100), resnapshots=True).payload()
        forged = {
            **payload,
            "touched": [*payload["touched"], {"type": OBJECT, "id": ids["o2"], "depth": 1}],
        }

        def op(p: dict[str, Any]) -> OpInput:
            return OpInput(
                op_type="CASCADE",
                actor_id="mallory",
                actor_type="HUMAN_USER",
                namespace_id="ns",
                payload=p,
                policy_version="p/1",
                target_id=ids["o1"],
                target_type=OBJECT,
            )

        size = ledger.size()
        with pytest.raises(ValidationError) as e:
            ledger.append(op(forged))
        assert e.value.field == "payload.touched"
        with pytest.raises(ValidationError, match="first entry"):
            ledger.append_batch(
                [EventInput("s", "u", "HUMAN_USER", "USER", "x", "ns"), op(payload)]
            )
        assert ledger.size() == size
        ledger.append(op(payload))  # the genuine plan is accepted when appended raw
        assert f.state(ids["s"]) == "stale"


def test_same_ledger_and_request_give_the_same_entry(tmp_path: Path) -> None:
    """Two copies of one ledger cascading the same request append the same payload."""
    ledger, ids = _story(tmp_path / "a.ledger")
    Falsifier(ledger).falsify(ids["o1"], "wrong")
    ledger.close()
    shutil.copy(tmp_path / "a.ledger", tmp_path / "b.ledger")
    shutil.copy(tmp_path / "a.ledger.key", tmp_path / "b.ledger.key")
    payloads = []
    for name in ("a.ledger", "b.ledger"):
        with Ledger.open(tmp_path / name, hooks=_hooks()) as lg:
            a = Falsifier(lg).cascade(ids["o1"], 2, 5, reason="same").appended[0]
            payloads.append(encoding.encode(lg.entry(a.seq).body["payload"]))
    assert payloads[0] == payloads[1]


def _fold_digest(entries: list[Entry]) -> Summary:
    p = EpistemicDistribution()
    state = p.initial()
    for e in entries:
        if e.type in p.types:  # type: ignore[operator]
            state = p.fold(state, e)
    return p.summarize(state)


def test_resnapshots_leave_the_falsified_objects_out_and_chain_parents(tmp_path: Path) -> None:
    """Each affected root is recomputed over its entries minus those naming a falsified
    object (epistemic-distribution no longer counts it), links to its parent's re-snapshot,
    and is recorded as replacing the root."""
    ledger, ids = _story(tmp_path / "a.ledger")
    with ledger:
        f = Falsifier(ledger)
        f.falsify(ids["o1"], "wrong")
        p = f.cascade(ids["o1"], 3, 1000).plan
        by_old = {x.replaces: x for x in p.resnapshots}
        assert set(by_old) == {ids["r1"], ids["r2"]}
        r1x, r2x = by_old[ids["r1"]], by_old[ids["r2"]]
        assert r2x.preimage.parent is not None and r2x.preimage.parent.hex() == r1x.root
        assert r1x.preimage.high_water == Roots(ledger).get(ids["r1"]).high_water
        hw = r1x.preimage.high_water.seq
        kept = [
            e
            for e in ledger.entries(0, hw + 1)
            if not (e.kind is Kind.OP and e.type == "ASSERT" and e.body["id"] == ids["o1"])
        ]
        want = _fold_digest(kept)
        got = next(d for d in r1x.preimage.projections if d.id == "epistemic-distribution")
        assert (got.digest, got.count) == (want.digest, want.count)
        orig = next(d for d in Roots(ledger).get(ids["r1"]).projections if d.id == got.id)
        assert orig.digest != got.digest
        why = f.why(r1x.root)
        assert why.replaces == ids["r1"] and why.state == "live"
        assert [r for r, _, _ in f.why(ids["r1"]).replaced_by] == [r1x.root]
        assert not verify_path(ledger.path, checks=[FalsifyReplayCheck(ledger.path)]).findings


def test_a_cascade_from_a_falsified_root_lists_re_snapshots_and_writes_them(
    tmp_path: Path,
) -> None:
    """Issue 16.3: a cascade from a falsified root r1 marks its child r2 stale and
    re-snapshots r2 over r1's parent (never naming the falsified r1); r1 itself is not
    listed; the dry run lists exactly the roots the applied cascade replaces."""
    ledger, ids = _story(tmp_path / "a.ledger")
    with ledger:
        f = Falsifier(ledger)
        f.falsify(ids["r1"], "bad snapshot")
        dry = f.plan(ids["r1"], 1, 100, resnapshots=True)
        p = f.cascade(ids["r1"], 1, 100).plan
        assert {s.item.kind for s in p.touched} == {ROOT, SELFMODEL}
        assert ItemRef(ROOT, ids["r2"]) in {s.item for s in p.touched}
        assert p.roots == dry.roots == (ids["r2"],)
        assert [x.root for x in p.resnapshots] == [x.root for x in dry.resnapshots]
        (x,) = p.resnapshots
        assert x.replaces == ids["r2"]
        r1 = Roots(ledger).get(ids["r1"])
        assert x.preimage.parent == r1.parent  # over the falsified root's parent
        assert f.state(x.root) == "live" and f.why(x.root).replaces == ids["r2"]
        assert not verify_path(ledger.path, checks=[FalsifyReplayCheck(ledger.path)]).findings


def test_memory_state_re_snapshot_is_the_digest_of_memory_without_the_object(
    tmp_path: Path,
) -> None:
    """With memory-state registered, a re-snapshot's digest is the memory model's state
    digest of a replay that leaves out every entry naming the falsified object."""
    registry = Registry([*builtin_projections(), MemoryStateDigest()])
    ledger, ids = _story(tmp_path / "a.ledger", registry)
    with ledger:
        f = Falsifier(ledger)
        f.falsify(ids["o1"], "wrong")
        p = f.cascade(ids["o1"], 1, 100).plan
        (r1x,) = [x for x in p.resnapshots if x.replaces == ids["r1"]]
        hw = r1x.preimage.high_water.seq

        def names_o1(e: Entry) -> bool:
            b = e.body
            return e.kind is Kind.OP and (
                b.get("target_id") == ids["o1"]
                or (e.type == "ASSERT" and b["id"] == ids["o1"])
                or ids["o1"] in str(b.get("payload"))
            )

        db = replay(e for e in ledger.entries(0, hw + 1) if not names_o1(e))
        want = encoding.encode({"digest": state_digest(db, as_of=hw)})
        got = next(d for d in r1x.preimage.projections if d.id == "memory-state")
        assert got.digest == Summary(want, 1).digest


def test_verify_recomputes_cascades_and_catches_a_tampered_replacement(tmp_path: Path) -> None:
    """verify replays the cascade (plan and re-snapshots) clean; an edited re-snapshot
    record is a step 9 violation; rebuild restores identical tables."""
    ledger, ids = _story(tmp_path / "a.ledger")
    with ledger:
        f = Falsifier(ledger)
        f.falsify(ids["o1"], "wrong")
        f.cascade(ids["o1"], 3, 100)
        assert not verify_path(ledger.path, checks=[FalsifyReplayCheck(ledger.path)]).findings
        tables = _tables(ledger)
        with ledger.store.write() as db:
            db.execute("UPDATE fz_roots SET parent = NULL WHERE replaces IS NOT NULL")
        report = verify_path(ledger.path, checks=[FalsifyReplayCheck(ledger.path)])
        assert any(x.step == 9 and "fz_roots" in x.message for x in report.findings)
        rebuild(ledger)
        assert _tables(ledger) == tables


def test_the_entry_lists_at_most_the_first_beyond_items_and_commits_to_all(tmp_path: Path) -> None:
    """Beyond the bound: the entry lists the first BEYOND_LISTED items, the count and the
    digest commit to all of them."""
    with _ledger(tmp_path / "a.ledger", selfmodel=False) as ledger:
        ev = _event(ledger)
        o = _obj(ledger, ev)
        for _ in range(3):
            _summary(ledger, ev, [o])
        f = Falsifier(ledger)
        f.falsify(o, "wrong")
        p = f.plan(o, 1, 1)
        payload = p.payload()
        assert payload["beyond"]["count"] == len(p.beyond) == 2
        assert len(payload["beyond"]["items"]) == min(BEYOND_LISTED, 2)


# -- against a reference breadth-first walk ---------------------------------------------------


@st.composite
def _graphs(draw: Any) -> tuple[list[list[int]], int, set[int], int, int]:
    n = draw(st.integers(min_value=2, max_value=9))
    cites = [[]] + [
        sorted(draw(st.sets(st.integers(min_value=0, max_value=i - 1), max_size=3)))
        for i in range(1, n)
    ]
    origin = draw(st.integers(min_value=0, max_value=n - 1))
    stale = draw(st.sets(st.integers(min_value=0, max_value=n - 1), max_size=2)) - {origin}
    return cites, origin, stale, draw(st.integers(1, 4)), draw(st.integers(1, 6))


def _reference(
    ids: list[str], cites: list[list[int]], origin: int, stale: set[int], depth: int, items: int
) -> tuple[list[tuple[int, str]], list[tuple[int, str, str]]]:
    """Breadth-first over 'j cites i' edges, written from the format's words alone."""
    dependents: dict[int, list[int]] = {i: [] for i in range(len(ids))}
    for j, cited in enumerate(cites):
        for i in cited:
            dependents[i].append(j)
    seen, touched, beyond = {origin}, [], []
    level, d, full = [origin], 0, False
    while level:
        d += 1
        found = sorted({j for i in level for j in dependents[i]} - seen, key=lambda j: ids[j])
        seen.update(found)
        if d > depth:
            beyond += [(d, ids[j], "depth") for j in found]
            break
        level = []
        for j in found:
            if full:
                beyond.append((d, ids[j], "items"))
                continue
            level.append(j)
            if j not in stale:
                touched.append((d, ids[j]))
                full = len(touched) >= items
        if full:
            nxt = sorted({k for i in level for k in dependents[i]} - seen, key=lambda k: ids[k])
            seen.update(nxt)
            beyond += [(d + 1, ids[k], "depth" if d + 1 > depth else "items") for k in nxt]
            break
    return touched, beyond


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=_graphs())
def test_the_plan_equals_a_reference_breadth_first_walk(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[list[list[int]], int, set[int], int, int]
) -> None:
    """Over random graphs of SUMMARY objects (no roots), the plan is the reference BFS:
    same touched items and depths, same frontier and bounds."""
    cites, origin, stale, depth, items = case
    path = tmp_path_factory.mktemp("g") / "g.ledger"
    with _ledger(path, selfmodel=False) as ledger:
        ev = _event(ledger)
        ids: list[str] = []
        for cited in cites:
            sid = _obj(ledger, ev, "SUMMARY", "INFERRED")
            if cited:
                ledger.append(rq.summary_created(AGENT, sid, [ids[i] for i in cited], (0, 1), "d"))
            ids.append(sid)
        f = Falsifier(ledger)
        for i in sorted(stale):
            f.mark_stale(ids[i], "earlier")
        f.falsify(ids[origin], "wrong")
        p = f.plan(ids[origin], depth, items, "object")
        want_touched, want_beyond = _reference(ids, cites, origin, stale, depth, items)
        assert [(s.depth, s.item.id) for s in p.touched] == want_touched
        assert [(c.depth, c.item.id, c.bound) for c in p.beyond] == want_beyond


def test_re_snapshots_from_cached_fold_states_equal_a_fold_from_the_genesis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fold states cached every few entries, re-snapshots start from the nearest cache
    before the falsified input and come out exactly as folding from the genesis does."""
    import memroot.memory_root.falsify._fold_cache as fold_cache

    monkeypatch.setattr(fold_cache, "FOLD_SPACING", 4)
    with _ledger(tmp_path / "a.ledger", selfmodel=False) as ledger:
        roots = Roots(ledger)
        ev = _event(ledger)
        for i in range(6):
            _obj(ledger, ev, epistemic="ASSERTED" if i % 2 else "OBSERVED")
            _event(ledger)
            roots.snapshot()
        late = _obj(ledger, ev)
        roots.snapshot()
        _summary(ledger, ev, [late])
        roots.snapshot()
        assert (
            ledger.store.db.execute("SELECT count(DISTINCT hi) FROM fz_folds").fetchall()[0][0] >= 2
        )
        f = Falsifier(ledger)
        f.falsify(late, "wrong")
        request = f.request(late, 3, 100)
        find = f.core.checkpoint
        assert find is not None
        used: list[Any] = []
        f.core.checkpoint = lambda *a: used.append(find(*a)) or used[-1]
        cached = f.core.plan("main", request, resnapshots=True)
        assert used and used[0] is not None and used[0][0] > 0
        f.core.checkpoint = None
        fresh = f.core.plan("main", request, resnapshots=True)
        assert cached.resnapshots and cached.payload() == fresh.payload()
        f.cascade(late, 3, 100)
        assert not verify_path(ledger.path, checks=[FalsifyReplayCheck(ledger.path)]).findings


def test_restore_cascade_leaves_alone_what_changed_since_and_continues_deeper(
    tmp_path: Path,
) -> None:
    """restore --cascade restores only items still stale from the origin's cascades: one
    restored (or re-staled) by hand since is left out; depth 1 first, then a larger depth
    continues with what is left; each RESTORE is checked by the verifier."""
    ledger, ids = _story(tmp_path / "a.ledger")
    with ledger:
        f = Falsifier(ledger)
        f.falsify(ids["o1"], "wrong")
        touched = {s.item: s.depth for s in f.cascade(ids["o1"], 3, 1000).plan.touched}
        s_item = ItemRef(OBJECT, ids["s"])
        f.restore(s_item, "checked by hand")
        f.mark_stale(s_item, "and re-checking")  # its staleness is no longer the cascade's
        first = f.restore_cascade(ids["o1"], "not wrong after all", 1).plan
        assert s_item not in {x.item for x in first.restored}
        assert {x.depth for x in first.restored} == {1}
        assert {x.item for x in first.beyond} == {i for i, d in touched.items() if d > 1}
        assert f.state(ids["o1"]) == "live" and f.state(s_item) == "stale"
        assert f.state(ids["r2"]) == "stale"  # depth 2: beyond the bound
        assert all(f.state(x.item) == "live" for x in first.restored)
        f.falsify(ids["o1"], "wrong again")
        with pytest.raises(ValidationError, match="max_depth"):
            f.restore_cascade(ids["o1"], "x", 0)
        second = f.restore_cascade(ids["o1"], "fine", 5).plan
        assert {x.item for x in second.restored} == {x.item for x in first.beyond}
        assert not second.beyond and f.state(ids["r2"]) == "live"
        assert not verify_path(ledger.path, checks=[FalsifyReplayCheck(ledger.path)]).findings
