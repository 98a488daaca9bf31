"""Snapshots through the Roots API: the ticket's properties and the automatic cadence."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger import encoding, merkle
from memroot.ledger.entries import Entry, OpInput, _library_op
from memroot.ledger.errors import ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import verify_path
from memroot.ledger.vocab import OpType
from memroot.memory_root import Roots, RootsHook
from memroot.memory_root.replay import RootsReplayCheck
from memroot.memory_root.root import RootPreimage
from memroot.projections.builtins import builtin_projections
from memroot.projections.projection import Summary
from memroot.projections.registry import Registry

Make = Callable[..., tuple[Ledger, Roots]]


def _snapshots(ledger: Ledger) -> list[Entry]:
    return [e for e in ledger.entries() if e.type == "SNAPSHOT"]


def test_snapshot_is_an_entry_in_the_tree_with_a_checkpoint_after_it(mr_make: Make, mr: Any):
    """The SNAPSHOT entry carries the root, and a checkpoint signed after it proves it."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(10))
    result = roots.snapshot()
    assert result.created
    rec = result.record
    entry = ledger.entry(rec.seq)
    assert entry.type == "SNAPSHOT" and entry.body["payload"]["memory_root"] == rec.root
    pre, claimed = RootPreimage.from_payload(entry.body["payload"])
    assert pre.root() == claimed == rec.root
    assert result.checkpoint is not None and result.checkpoint.checkpoint.size == rec.seq + 1
    size = result.checkpoint.checkpoint.size
    proof = ledger.inclusion_proof(rec.seq, size)
    merkle.verify_inclusion(entry.hash, rec.seq, size, proof, result.checkpoint.checkpoint.root)


def test_root_is_stable_for_the_same_high_water(mr_make: Make, mr: Any, tmp_path: Path):
    """Recomputing at the same high-water, here or on a copy of the file, gives the same root."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(20))
    rec = roots.snapshot().record
    assert roots.compute(hw_seq=rec.high_water.seq).root() == rec.root
    assert roots.compute(hw_seq=rec.high_water.seq).root() == rec.root
    ledger.append_batch(mr.mixed(5))
    assert roots.compute(hw_seq=rec.high_water.seq).root() == rec.root
    copy = tmp_path / "copy.ledger"
    ledger.store.db.execute("VACUUM INTO ?", (str(copy),))
    shutil.copy(f"{ledger.path}.key", f"{copy}.key")
    with Ledger.open(copy, hooks=[RootsHook()]) as other:
        assert Roots(other).compute(hw_seq=rec.high_water.seq).root() == rec.root


def test_root_is_invariant_under_projection_registration_order(mr_make: Make, mr: Any):
    """A registry filled in the reverse order recomputes exactly the stored root."""
    ledger, roots = mr_make(hooks=[RootsHook(Registry(builtin_projections()))])
    ledger.append_batch(mr.mixed(30))
    rec = roots.snapshot().record
    with Ledger.open(
        ledger.path, hooks=[RootsHook(Registry(list(reversed(builtin_projections()))))]
    ) as again:
        assert Roots(again).compute(hw_seq=rec.high_water.seq).root() == rec.root


@pytest.mark.parametrize("index", range(len(builtin_projections())))
@pytest.mark.parametrize("change", ["version", "params"])
def test_changing_a_projections_version_or_params_changes_the_root(
    mr_make: Make, mr: Any, index: int, change: str
):
    """Bump a projection's version or change its params: the root at one high-water changes."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(12))
    rec = roots.snapshot().record
    projections = builtin_projections()
    p = projections[index]
    projections[index] = (
        replace(p, version=p.version + 1) if change == "version" else replace(p, namespaces=("ns",))
    )
    with Ledger.open(ledger.path, hooks=[RootsHook(Registry(projections))]) as other:
        assert Roots(other).compute(hw_seq=rec.high_water.seq).root() != rec.root


def test_high_water_progresses_and_matches_the_tree(mr_make: Make, mr: Any):
    """Each root's high-water is later than its parent's and names the entry and tree exactly."""
    ledger, roots = mr_make()
    seen = []
    for n in (3, 7, 1):
        ledger.append_batch(mr.mixed(n))
        seen.append(roots.snapshot().record)
    assert [r.high_water.seq for r in seen] == sorted({r.high_water.seq for r in seen})
    for r in seen:
        hw = r.high_water
        assert hw.seq == r.seq - 1 and hw.tree_size == hw.seq + 1
        assert hw.entry_hash == ledger.entry(hw.seq).hash
        assert hw.tree_root == ledger.root(hw.tree_size)


def test_parent_chain_traverses_to_the_first_root(mr_make: Make, mr: Any):
    """chain() walks parent links from the newest root back to the first (parent null)."""
    ledger, roots = mr_make(every=4)
    ledger.append_batch(mr.mixed(9))
    ledger.append_batch(mr.mixed(2))
    roots.snapshot()
    chain = roots.chain()
    assert len(chain) == len(_snapshots(ledger)) >= 3
    assert [r.seq for r in chain] == sorted((r.seq for r in chain), reverse=True)
    for child, parent in itertools.pairwise(chain):
        assert child.parent == parent.root
    assert chain[-1].parent is None
    assert [r.root for r in roots.chain(chain[1].root.hex()[:10])] == [r.root for r in chain[1:]]


def test_snapshot_twice_is_idempotent(mr_make: Make, mr: Any):
    """A second snapshot with nothing new returns the same root and writes nothing."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(5))
    first = roots.snapshot()
    size, checkpoints = ledger.size(), len(ledger.checkpoints())
    again = roots.snapshot()
    assert not again.created and again.record == first.record
    assert ledger.size() == size and len(ledger.checkpoints()) == checkpoints


def test_a_forged_snapshot_is_refused_at_append_and_nothing_is_written(mr_make: Make, mr: Any):
    """A SNAPSHOT whose root, summary or parent does not replay is refused by field."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(6))
    hook = roots.hook
    good = hook.prepare_head(ledger, "main")
    assert good is not None
    pre = good.preimage
    forged_count = replace(
        pre,
        projections=tuple(
            replace(d, count=d.count + 1) if d.id == "failure-motifs" else d
            for d in pre.projections
        ),
    )
    forged_parent = replace(pre, parent=b"\x07" * 32)
    size = ledger.size()
    for payload, field_name in [
        ({**pre.payload(), "memory_root": b"\x01" * 32}, "payload.memory_root"),
        # A v3 root commits to its list by one hash: a forged count is no list's hash.
        (forged_count.payload(), "payload.projections"),
        (forged_parent.payload(), "payload.parent"),
        (replace(pre, projections=pre.projections[1:]).payload(), "payload.projections"),
    ]:
        with pytest.raises(ValidationError) as e:
            ledger.append(_library_op(Ledger.system_op(OpType.SNAPSHOT, payload)))
        assert e.value.field == field_name
    assert ledger.size() == size
    assert roots.snapshot().created


def test_automatic_snapshots_follow_the_cadence(mr_make: Make, mr: Any):
    """With N = 5 a SNAPSHOT follows every entry that is N entries after the last SNAPSHOT."""
    ledger, roots = mr_make(every=5)
    roots.append_batch(mr.mixed(17))
    snaps = _snapshots(ledger)
    assert [e.seq for e in snaps] == [6, 12, 18]
    for e in snaps:
        assert e.body["payload"]["high_water"]["seq"] == e.seq - 1
    assert ledger.store.latest_checkpoint(1)[0] == ledger.size()  # type: ignore[index]


def test_the_cadence_is_deterministic_whatever_the_batching(mr_make: Make, mr: Any):
    """Same inputs appended one by one, in one batch or in a bulk: same snapshots, same digests."""
    items = mr.mixed(23)
    results = []
    for name, how in [("one", "single"), ("batch", "batch"), ("bulk", "bulk")]:
        ledger, roots = mr_make(f"{name}.ledger", every=4)
        if how == "single":
            for it in items:
                roots.append(it)
        elif how == "batch":
            roots.append_batch(items)
        else:
            with roots.bulk():
                for i in range(0, len(items), 5):
                    roots.append_batch(items[i : i + 5])
        results.append(
            [
                (
                    e.seq,
                    # v3: the hash of the list of every (id, rule, digest, count)
                    e.body["payload"]["projections"],
                )
                for e in _snapshots(ledger)
            ]
        )
    assert results[0] == results[1] == results[2]
    assert [seq for seq, _ in results[0]] == [5, 10, 15, 20, 25]


def test_audit_chain_verifies_after_snapshots(mr_make: Make, mr: Any):
    """A ledger with automatic and on-demand snapshots passes every verify step, 8 included."""
    ledger, roots = mr_make(every=7)
    roots.append_batch(mr.mixed(30))
    roots.snapshot()
    report = verify_path(ledger.path, checks=[RootsReplayCheck(ledger.path)])
    assert report.ok, [str(f) for f in report.findings]
    assert 8 in report.steps_checked
    assert not [n for n in report.notes if n.step == 8]


@dataclass
class Spy:
    """A projection that remembers which entries it was asked to fold (to see incrementality)."""

    seen: list[int] = field(default_factory=list)
    id: str = "spy"
    version: int = 1
    params: dict[str, Any] = field(default_factory=dict)
    types: frozenset[str] | None = None

    def initial(self) -> int:
        return 0

    def fold(self, state: int, entry: Entry) -> int:
        self.seen.append(entry.seq)
        return state + 1

    def summarize(self, state: int) -> Summary:
        return Summary(encoding.encode(state), 1)


def test_next_snapshot_folds_only_entries_after_the_previous_high_water(mr_make: Make, mr: Any):
    """Reopened cold, the hook resumes from the persisted state instead of refolding."""
    ledger, roots = mr_make(hooks=[RootsHook(Registry([*builtin_projections(), Spy()]))])
    ledger.append_batch(mr.mixed(40))
    first = roots.snapshot().record
    spy = Spy()
    with Ledger.open(
        ledger.path, hooks=[RootsHook(Registry([*builtin_projections(), spy]))]
    ) as again:
        r = Roots(again)
        again.append_batch(mr.mixed(5))
        second = r.snapshot().record
        assert min(spy.seen) > first.high_water.seq
        assert r.compute(hw_seq=second.high_water.seq).root() == second.root


def test_a_projection_registered_later_is_folded_from_the_start(mr_make: Make, mr: Any):
    """A new projection has no persisted state: it folds the whole branch at the next snapshot."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(15))
    roots.snapshot()
    spy = Spy()
    with Ledger.open(
        ledger.path, hooks=[RootsHook(Registry([*builtin_projections(), spy]))]
    ) as again:
        again.append_batch(mr.mixed(2))
        rec = Roots(again).snapshot().record
        assert "spy" in [d.id for d in rec.projections]
        assert Roots(again).compute(hw_seq=rec.high_water.seq).root() == rec.root
        assert min(spy.seen) == 0


def test_a_rolled_back_batch_leaves_no_trace_in_the_next_root(mr_make: Make, mr: Any):
    """A batch refused half-way (bad audit record) does not leak into the fold state."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(4))
    bad = mr.op("VIOLATION_RECORDED", {"motif": "TITLE_MISMATCH"})  # no source
    with pytest.raises(ValidationError):
        ledger.append_batch([mr.violation(), mr.violation(), bad])
    ledger.append_batch(mr.mixed(3))
    rec = roots.snapshot().record
    assert roots.compute(hw_seq=rec.high_water.seq).root() == rec.root
    motifs = roots.show(rec.root).summaries
    assert next(s for s in motifs if s.id == "failure-motifs").value["TITLE_MISMATCH"]["count"] == 3


def test_another_writer_between_appends_is_picked_up(mr_make: Make, mr: Any):
    """A second Ledger object appending to the same file does not confuse the first's hook."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(3))
    with Ledger.open(ledger.path, hooks=[RootsHook()]) as other:
        other.append_batch(mr.mixed(4))
    ledger.append_batch(mr.mixed(2))
    rec = roots.snapshot().record
    assert roots.compute(hw_seq=rec.high_water.seq).root() == rec.root


def _create(mr: Any, name: str, memory_root: bytes | None = None) -> OpInput:
    payload: dict[str, Any] = {"branch_id": name, "branch_type": "SIMULATION", "purpose": "what if"}
    if memory_root is not None:
        payload["memory_root"] = memory_root
    return mr.op("BRANCH_CREATE", payload)


def test_a_branch_first_root_links_to_the_parent_root_at_the_fork(mr_make: Make, mr: Any):
    """On a branch, the first root's parent is the parent branch's newest root at the fork."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(5))
    main_root = roots.snapshot().record.root
    ledger.fork(_create(mr, "sim-1", main_root), genesis={"branch_type": "SIMULATION"})
    ledger.append_batch(mr.mixed(3))
    roots.snapshot()  # a later main root must not become the branch's parent
    ledger.append_batch(mr.mixed(4), branch="sim-1")
    rec = roots.snapshot("sim-1").record
    assert rec.branch == "sim-1" and rec.parent == main_root
    assert [r.root for r in roots.chain(branch="sim-1")][1] == main_root
    report = verify_path(ledger.path, checks=[RootsReplayCheck(ledger.path)])
    assert report.ok, [str(f) for f in report.findings]


def test_branch_create_naming_another_root_is_refused(mr_make: Make, mr: Any):
    """BRANCH_CREATE's memory_root, when given, must be the parent's latest root."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(5))
    roots.snapshot()
    with pytest.raises(ValidationError) as e:
        ledger.fork(_create(mr, "sim-2", b"\x05" * 32), genesis={"branch_type": "SIMULATION"})
    assert e.value.field == "payload.memory_root"


def test_rebuild_reproduces_the_stored_records(mr_make: Make, mr: Any):
    """Dropping the records and replaying the log writes exactly the same rows."""
    ledger, roots = mr_make(every=6)
    roots.append_batch(mr.mixed(25))
    roots.snapshot()
    tables = ("memory_roots", "memory_root_summaries", "selfmodel_snapshots")

    def dump() -> list[Any]:
        return [
            ledger.store.db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in tables
        ]

    before = dump()
    assert roots.rebuild() == len(_snapshots(ledger))
    assert dump() == before
    ledger.append_batch(mr.mixed(3))
    assert roots.snapshot().created


def test_only_the_newest_root_of_a_branch_keeps_fold_states(mr_make: Make, mr: Any):
    """Fold states are stored for the newest root only, so the file grows with summaries."""
    ledger, roots = mr_make(every=5)
    roots.append_batch(mr.mixed(16))
    newest = roots.snapshot().record.root

    def holders() -> set[bytes]:
        rows = ledger.store.db.execute(
            "SELECT DISTINCT root FROM memory_root_summaries WHERE fold_state IS NOT NULL"
        ).fetchall()
        return {r[0] for r in rows}

    assert len(roots.chain()) > 2
    assert holders() == {newest}
    roots.rebuild()
    assert holders() == {newest}


def test_a_cold_reload_sees_events_and_erased_events(mr_make: Make, mr: Any):
    """Reopened cold, new events (even erased ones) still make the next snapshot a new root."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(6))
    first = roots.snapshot().record
    victim = ledger.append(mr.event(100))
    ledger.append(
        mr.op(
            "TOMBSTONE",
            {"target_event_id": victim.id, "reason": "erasure request", "policy_ref": "gdpr/17"},
        )
    )
    with Ledger.open(ledger.path, hooks=[RootsHook()]) as again:
        r = Roots(again)
        second = r.snapshot()
        assert second.created and second.record.parent == first.root
        assert r.compute(hw_seq=second.record.high_water.seq).root() == second.record.root
    with Ledger.open(ledger.path, hooks=[RootsHook()]) as again:
        again.append(mr.event(101))
    with Ledger.open(ledger.path, hooks=[RootsHook()]) as again:
        assert Roots(again).snapshot().created


def test_an_automatic_snapshot_appended_through_ledger_is_sealed_at_once(mr_make: Make, mr: Any):
    """Appended through Ledger directly, the snapshot is covered by the append's own seal."""
    ledger, roots = mr_make(every=3)
    ledger.append_batch(mr.mixed(3))
    snap = _snapshots(ledger)[-1]
    assert snap.seq == ledger.size() - 1
    assert ledger.store.latest_checkpoint(1)[0] == snap.seq + 1  # type: ignore[index]
    result = roots.snapshot()
    assert not result.created and result.record.seq == snap.seq
    assert result.checkpoint is None  # nothing owed: the seal already covers the snapshot
    assert roots.sign_pending() is None
