"""The writer writes v3 roots (docs/FORMAT.md §6.16), and the falsification index finds them.

A v3 ``SNAPSHOT`` holds its projection list by one hash; the dependency index (§8.7,
``fz_roots.rules``) takes the list from the root's stored records, checked against that hash,
in the append hook, catch-up, rebuild and verify's replay. A ledger whose roots switch from
v2 (written by the old writer, here through its version constant) to v3 at one root verifies,
and a cascade re-snapshots roots of both versions. A list no record vouches for is never used:
a walk through such a root is refused, never planned short.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import apsw
import pytest

from memroot.ledger import encoding
from memroot.ledger.entries import EventInput, _library_op
from memroot.ledger.errors import IntegrityError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport, verify_path
from memroot.ledger.vocab import OpType
from memroot.memory_root import Roots, RootsHook, _fold
from memroot.memory_root import records as rec
from memroot.memory_root.falsify import Falsifier, FalsifyHook, checked_deps, deps
from memroot.memory_root.falsify.deps import OBJECT, ROOT, SUMMARY, ItemRef
from memroot.memory_root.falsify.replay import TABLES, FalsifyReplayCheck, rebuild
from memroot.memory_root.replay import RootsReplayCheck
from memroot.memory_root.root import list_digest
from memroot.projections import requests as rq
from memroot.projections.hook import MemoryHook

AGENT = rq.Actor("agent-7", "AI_AGENT", "ns")


@pytest.fixture(autouse=True)
def _trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))


def _hooks() -> list[Any]:
    return [MemoryHook(), FalsifyHook(), RootsHook(selfmodel_hooks=[])]


def _obj(ledger: Ledger, ev: str) -> str:
    return ledger.append(rq.assert_object(AGENT, "FACT", "OBSERVED", "USER_STATED", [ev], "v")).id


def _ev(ledger: Ledger) -> str:
    e = EventInput(
        stream="s",
        actor_id="u",
        actor_type="HUMAN_USER",
        role="USER",
        content="e",
        namespace_id="ns",
    )
    return ledger.append(e).id


def _verify(ledger: Ledger) -> AuditReport:
    """Steps 1-7 and 10, and the roots' and the falsification layer's replays (8, 9)."""
    return verify_path(
        ledger.path, checks=[RootsReplayCheck(ledger.path), FalsifyReplayCheck(ledger.path)]
    )


def _tables(ledger: Ledger) -> dict[str, list[Any]]:
    db = ledger.store.db
    return {
        t: db.execute(f"SELECT {', '.join(c)} FROM {t} ORDER BY {', '.join(c)}").fetchall()
        for t, c in TABLES
    }


def _fz_rules(ledger: Ledger, root: bytes) -> Any:
    row = ledger.store.db.execute(
        "SELECT rules FROM fz_roots WHERE root = ?", (root.hex(),)
    ).fetchone()
    return encoding.decode(bytes(row[0]))


def _record_list(ledger: Ledger, root: bytes) -> list[list[Any]]:
    r = rec.get_root(ledger.store.db, root)
    return [[d.id, d.rule, d.digest, d.count] for d in r.projections]


def _two_versions(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Ledger, dict[str, Any]]:
    """o1 (and a summary of it), root r1 written by a v2 writer; reopened by this one: o2,
    root r2 (v3, parent r1)."""
    monkeypatch.setattr(_fold, "ROOT_VERSION", 2)  # the old writer: v2 roots
    ledger = Ledger.init(path, origin=f"example.org/{path.name}", hooks=_hooks())
    ev = _ev(ledger)
    o1 = _obj(ledger, ev)
    r1 = Roots(ledger).snapshot().record
    ledger.close()
    monkeypatch.undo()  # this writer
    ledger = Ledger.open(path, hooks=_hooks())
    o2 = _obj(ledger, ev)
    ledger.append(rq.relate(AGENT, "SUPPORTS", o1, o2, 0.5))
    r2 = Roots(ledger).snapshot().record
    return ledger, {"ev": ev, "o1": o1, "o2": o2, "r1": r1, "r2": r2}


def test_the_writer_writes_v3_and_the_index_holds_its_list(tmp_path: Path) -> None:
    """A new root is v3 (its entry holds the list's hash); the index's rules for it are the
    list of its stored records, which hash to the entry's ``projections``."""
    ledger = Ledger.init(tmp_path / "a.ledger", origin="example.org/a", hooks=_hooks())
    with ledger:
        _obj(ledger, _ev(ledger))
        r = Roots(ledger).snapshot().record
        entry = ledger.entry(r.seq)
        assert r.v == 3 and type(entry.body["payload"]["projections"]) is bytes
        assert entry.body["payload"]["projections"] == list_digest(r.projections)
        assert _fz_rules(ledger, r.root) == _record_list(ledger, r.root) != []


def test_the_writer_refuses_a_v2_snapshot_for_a_new_root(tmp_path: Path) -> None:
    """A SNAPSHOT of the replay's own v2 root is refused naming ``payload.v``: new roots are
    v3; nothing is written."""
    ledger = Ledger.init(tmp_path / "a.ledger", origin="example.org/a", hooks=_hooks())
    with ledger:
        _obj(ledger, _ev(ledger))
        roots = Roots(ledger)
        good = roots.hook.prepare_head(ledger, "main")
        assert good is not None and good.preimage.v == 3
        size = ledger.size()
        v2 = dataclasses.replace(good, v=2).preimage
        with pytest.raises(ValidationError) as e:
            ledger.append(_library_op(Ledger.system_op(OpType.SNAPSHOT, v2.payload())))
        assert e.value.field == "payload.v"
        assert ledger.size() == size
        assert roots.snapshot().record.v == 3


def test_a_ledger_switching_from_v2_to_v3_verifies_and_cascades_through_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Roots v2 then v3 at one root (the first v3 root's parent is the last v2 root) verify
    with no note about v3; a cascade from a falsified object touches both roots and their
    summary items and re-snapshots both (each in its own version); verify and rebuild agree."""
    ledger, ids = _two_versions(tmp_path / "a.ledger", monkeypatch)
    with ledger:
        r1, r2 = ids["r1"], ids["r2"]
        assert (r1.v, r2.v, r2.parent) == (2, 3, r1.root)
        report = _verify(ledger)
        assert report.ok, report.findings
        assert not [n for n in report.notes if "v3" in n.message]
        f = Falsifier(ledger)
        f.falsify(ids["o1"], "wrong")
        plan = f.plan(ids["o1"], 3, 1000, resnapshots=True)
        touched = {s.item for s in plan.touched}
        assert {ItemRef(ROOT, r1.root.hex()), ItemRef(ROOT, r2.root.hex())} <= touched
        summaries = {i.id.split(":")[0] for i in touched if i.kind == SUMMARY}
        assert summaries == {r1.root.hex(), r2.root.hex()}
        assert ItemRef(OBJECT, ids["o2"]) in touched
        done = f.cascade(ids["o1"], 3, 1000).plan
        versions = {x.replaces: x.preimage.v for x in done.resnapshots}
        assert versions == {r1.root.hex(): 2, r2.root.hex(): 3}
        assert f.state(r2.root.hex()) == "stale"
        report = _verify(ledger)
        assert report.ok, report.findings
        tables = _tables(ledger)
        rebuild(ledger)
        assert _tables(ledger) == tables


def test_catch_up_takes_a_v3_roots_list_from_its_records(tmp_path: Path) -> None:
    """Entries (a v3 root among them) folded later by the falsification hook (catch-up, as
    for a file written without it) give the index the append hook gives."""
    path = tmp_path / "a.ledger"
    ledger = Ledger.init(path, origin="example.org/a", hooks=_hooks())
    with ledger:
        ev = _ev(ledger)
        o1 = _obj(ledger, ev)
        Roots(ledger).snapshot()
        want = _tables(ledger)
    with Ledger.open(path, hooks=_hooks()) as again:
        db = again.store.db
        with again.write():
            for t, _ in TABLES:
                db.execute(f"DELETE FROM {t}")
            db.execute("DELETE FROM fz_heads")
        f = Falsifier(again)
        f.falsify(o1, "wrong")  # the hook catches up first
        got = _tables(again)
        assert got["fz_roots"] == want["fz_roots"]
        assert [r for r in got["fz_roots"] if encoding.decode(bytes(r[9])) is None] == []


def _bad_list(ledger: Ledger, root: bytes) -> None:
    """Delete one projection of a v3 root from its records and from the index's rules (a
    walk would then miss what that projection read)."""
    db = apsw.Connection(str(ledger.path))
    try:
        db.execute(
            "DELETE FROM memory_root_summaries WHERE root = ? AND projection = ?",
            (root, "epistemic-distribution"),
        )
        rules = [r for r in _fz_rules(ledger, root) if r[0] != "epistemic-distribution"]
        db.execute(
            "UPDATE fz_roots SET rules = ? WHERE root = ?", (encoding.encode(rules), root.hex())
        )
    finally:
        db.close()


def test_a_v3_roots_list_edited_in_records_and_index_is_refused_by_the_cascade(
    tmp_path: Path,
) -> None:
    """A v3 root's projection dropped from its stored summaries and from ``fz_roots``: the
    cascade (and its dry run) is refused, nothing is written; verify names the record (step
    8) and its replay does not fail; rebuild restores, and the cascade goes through."""
    ledger = Ledger.init(tmp_path / "a.ledger", origin="example.org/a", hooks=_hooks())
    with ledger:
        ev = _ev(ledger)
        o1 = _obj(ledger, ev)
        r = Roots(ledger).snapshot().record
        f = Falsifier(ledger)
        f.falsify(o1, "wrong")
        _bad_list(ledger, r.root)
        size = ledger.size()
        for fresh in (False, True):
            if fresh:  # a new process: nothing re-derived before the edit is remembered
                checked_deps._DERIVED.clear()
            with pytest.raises(IntegrityError):
                f.cascade(o1, 2, 100)
            with pytest.raises(IntegrityError):
                f.plan(o1, 2, 100)
        assert ledger.size() == size
        report = _verify(ledger)
        assert not report.ok
        assert any(x.step == 8 and x.seq == r.seq for x in report.findings)
        Roots(ledger).rebuild()
        rebuild(ledger)
        assert _verify(ledger).ok
        touched = {s.item for s in f.cascade(o1, 2, 100).plan.touched}
        assert ItemRef(ROOT, r.root.hex()) in touched


def test_a_walk_through_a_root_whose_list_is_not_known_is_refused(tmp_path: Path) -> None:
    """The index folded a v3 SNAPSHOT with no record of its list (or one that does not hash
    to it): the root is recorded without rules, and every walk that needs them is refused
    (``IntegrityError``), never planned without it; ``attach_list`` takes the right list
    only."""
    ledger = Ledger.init(tmp_path / "a.ledger", origin="example.org/a", hooks=_hooks())
    with ledger:
        ev = _ev(ledger)
        o1 = _obj(ledger, ev)
        r = Roots(ledger).snapshot().record
        entry = ledger.entry(r.seq)
        right = list(r.projections)
    db = apsw.Connection(":memory:")
    with db:
        deps.install(db)
    rules: deps.RuleInfo = {}
    wrong = [dataclasses.replace(right[0], count=right[0].count + 1), *right[1:]]
    for source in (None, lambda root: None, lambda root: wrong):
        db.execute("DELETE FROM fz_roots")
        db.execute("DELETE FROM fz_touches")
        db.execute("DELETE FROM fz_items")
        assert deps.fold(db, entry, rules, source) == r.root.hex()
        row = deps.root_row(db, r.root.hex())
        assert row is not None and row.rules is None and row.stateful
        with pytest.raises(IntegrityError, match="projection list"):
            deps.listed_rules(row)
        graph = deps.Graph(db, (("main", None),), rules, None)
        db.execute("INSERT INTO fz_touches VALUES(?, 'main', 2, 'ASSERT')", (o1,))
        with pytest.raises(IntegrityError):
            graph.dependents(ItemRef(OBJECT, o1))
        with pytest.raises(IntegrityError):
            graph.exists(ItemRef(SUMMARY, f"{r.root.hex()}:lifecycle-counts:ACTIVE"))
        assert not deps.attach_list(db, r.root.hex(), rules, lambda root: wrong)
    assert deps.attach_list(db, r.root.hex(), rules, lambda root: right)
    row = deps.root_row(db, r.root.hex())
    assert row is not None and row.rules is not None and len(row.rules) == len(right)
    assert ItemRef(ROOT, r.root.hex()) in deps.Graph(db, (("main", None),), rules, None).dependents(
        ItemRef(OBJECT, o1)
    )


def test_a_bundle_and_its_import_replay_v3_roots_with_their_lists(tmp_path: Path) -> None:
    """Every layer's hooks; a FALSIFY of a summary item of a v3 root and a cascade over v3
    roots: the bundle's audit (its falsification replay takes each list from the root's
    record) finds nothing refused, and ``import-bundle`` rebuilds the same index."""
    from memroot.ledger.bundle.audit import audit_bundle
    from memroot.ledger.bundle.export import BundleReader, export_bundle
    from memroot.ledger.bundle.importing import import_bundle
    from memroot.memory_root.stack import bundle_checks, bundle_sections, default_hooks

    path = tmp_path / "a.ledger"
    Ledger.init(path, origin="example.org/v3-bundle", hooks=default_hooks()).close()
    with Ledger.open(path, hooks=default_hooks()) as ledger:
        ev = _ev(ledger)
        o1 = _obj(ledger, ev)
        r1 = Roots(ledger).snapshot().record
        o2 = _obj(ledger, ev)
        ledger.append(rq.relate(AGENT, "SUPPORTS", o1, o2, 0.5))
        r2 = Roots(ledger).snapshot().record
        assert (r1.v, r2.v) == (3, 3)
        f = Falsifier(ledger)
        f.falsify(ItemRef(SUMMARY, f"{r2.root.hex()}:lifecycle-counts:ACTIVE"), "miscounted")
        f.falsify(o1, "wrong")
        f.cascade(o1, 3, 1000)
        export_bundle(ledger, tmp_path / "b", sections=bundle_sections(ledger))
        vkey = ledger.vkey()
        want = _tables(ledger)
    reader = BundleReader(tmp_path / "b")
    report = audit_bundle(reader, vkeys=[vkey], checks=bundle_checks(reader), update_trusted=False)
    assert report.ok, [str(x) for x in report.findings]
    assert not [n for n in report.notes if "skipped" in n.message or "v3" in n.message]
    import_bundle(tmp_path / "b", tmp_path / "c.ledger", vkeys=[vkey])
    with Ledger.open(tmp_path / "c.ledger", hooks=default_hooks()) as copy:
        copy.replay_hooks()  # as `memroot import-bundle` folds the imported entries
        got = _tables(copy)
    assert got["fz_roots"] == want["fz_roots"] and got["fz_states"] == want["fz_states"]


def test_a_branch_forked_at_a_v2_root_goes_on_with_v3_and_cascades_through_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Main's root written by the old writer (v2); a branch forked after it by this one: the
    branch's first root is v3 with the v2 root as parent; a cascade on the branch from an
    object asserted on main reaches both roots; `memroot verify` passes before and after."""
    from click.testing import CliRunner

    import memroot
    from memroot.cli.main import cli
    from memroot.memory_root.stack import default_hooks

    path = tmp_path / "f.ledger"

    def run(*args: str) -> None:
        r = CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)
        assert r.exit_code == 0, r.output

    monkeypatch.setattr(_fold, "ROOT_VERSION", 2)
    with memroot.open(path, actor="agent-7", namespace="alice", create=True) as mem:
        said = mem.record(content="I take my tea without sugar")
        o1 = mem.remember("Alice takes tea without sugar", evidence=[said.id]).id
    run("snapshot")
    monkeypatch.undo()
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        side = mem.fork("try a move", branch_type="PLANNING")
        said2 = mem.record(content="I moved to Paris", branch=side)
        mem.remember("Alice lives in Paris", evidence=[said2.id], branch=side)
    run("snapshot", "-b", side)
    run("verify")
    with Ledger.open(path, hooks=default_hooks()) as ledger:
        roots = Roots(ledger)
        [r1] = roots.chain(branch="main")
        [r2, *_] = roots.chain(branch=side)
        assert (r1.v, r2.v, r2.parent) == (2, 3, r1.root)
        f = Falsifier(ledger)
        f.falsify(o1, "wrong", branch=side)
        touched = {s.item for s in f.cascade(o1, 3, 1000, branch=side).plan.touched}
        assert {ItemRef(ROOT, r1.root.hex()), ItemRef(ROOT, r2.root.hex())} <= touched
    run("verify")
