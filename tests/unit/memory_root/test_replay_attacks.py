"""Verify step 8 against attacks on SNAPSHOT entries and on the stored root records."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import apsw
import pytest

from memroot.ledger import encoding
from memroot.ledger.bundle.audit import audit_bundle
from memroot.ledger.bundle.export import export_bundle
from memroot.ledger.entries import _library_op
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport, verify_path
from memroot.ledger.vocab import OpType
from memroot.memory_root import Roots, RootsHook, SelfModel, StaticSelfModel
from memroot.memory_root.replay import RootsReplayCheck

Make = Callable[..., tuple[Ledger, Roots]]


def _audit(path: Path) -> AuditReport:
    return verify_path(path, checks=[RootsReplayCheck(path)])


def _step8(report: AuditReport) -> list[Any]:
    return [f for f in report.findings if f.step == 8]


@pytest.fixture
def rooted(mr_make: Make, mr: Any) -> tuple[Ledger, Roots]:
    """A ledger with two automatic roots, an on-demand root and a SelfModel snapshot."""
    hook = RootsHook(selfmodel_hooks=[StaticSelfModel(SelfModel("agent-7", {"model": "m1"}))])
    ledger, roots = mr_make(every=6, hooks=[hook])
    roots.append_batch(mr.mixed(14))
    roots.snapshot()
    assert len(roots.chain()) == 3
    assert _audit(ledger.path).ok
    return ledger, roots


def _sql(ledger: Ledger, sql: str, params: tuple[Any, ...] = ()) -> None:
    db = apsw.Connection(str(ledger.path))
    try:
        db.execute(sql, params)
    finally:
        db.close()


def test_snapshot_forged_by_a_writer_without_the_hook(rooted: tuple[Ledger, Roots], mr: Any):
    """A self-consistent SNAPSHOT with a wrong summary digest is caught at its seq (step 8).

    A v3 root commits to its list by one hash: the finding names ``payload.projections``
    (no list of the replay's summaries hashes to it), not the one projection forged."""
    ledger, roots = rooted
    ledger.append(mr.event(99))
    good = roots.hook.prepare_head(ledger, "main")
    assert good is not None
    pre = good.preimage
    forged = replace(
        pre,
        projections=tuple(
            replace(d, digest=b"\x00" * 32) if d.id == "corrections" else d for d in pre.projections
        ),
    )
    with Ledger.open(ledger.path, hooks=()) as raw:  # no hooks: nothing refuses the entry
        seq = raw.append(_library_op(Ledger.system_op(OpType.SNAPSHOT, forged.payload()))).seq
    found = _step8(_audit(ledger.path))
    assert found and found[0].branch == "main" and found[0].seq == seq
    assert pre.v == 3 and "payload.projections" in found[0].message


def test_snapshot_with_a_root_that_does_not_hash_its_preimage(
    rooted: tuple[Ledger, Roots], mr: Any
):
    """A SNAPSHOT whose memory_root is not the hash of its own fields is reported."""
    ledger, roots = rooted
    ledger.append(mr.event(99))
    good = roots.hook.prepare_head(ledger, "main")
    assert good is not None
    with Ledger.open(ledger.path, hooks=()) as raw:
        seq = raw.append(
            _library_op(
                Ledger.system_op(
                    OpType.SNAPSHOT, {**good.preimage.payload(), "memory_root": b"\x01" * 32}
                )
            )
        ).seq
    found = _step8(_audit(ledger.path))
    assert [(f.branch, f.seq) for f in found] == [("main", seq)]
    assert found[0].actual == "01" * 32


def test_stored_record_parent_rewritten(rooted: tuple[Ledger, Roots]):
    """Editing a stored root's parent is reported against that root's SNAPSHOT entry."""
    ledger, roots = rooted
    victim = roots.chain()[0]
    _sql(ledger, "UPDATE memory_roots SET parent = ? WHERE root = ?", (b"\x05" * 32, victim.root))
    found = _step8(_audit(ledger.path))
    assert [(f.branch, f.seq) for f in found] == [("main", victim.seq)]


def test_stored_summary_bytes_swapped(rooted: tuple[Ledger, Roots]):
    """Stored summary bytes that are not what the root commits to are named by projection."""
    ledger, roots = rooted
    victim = roots.chain()[1]
    fake = encoding.encode({"TITLE_MISMATCH": {"count": 0, "sources": {}}})
    _sql(
        ledger,
        "UPDATE memory_root_summaries SET data = ? WHERE root = ? AND projection = ?",
        (fake, victim.root, "failure-motifs"),
    )
    found = _step8(_audit(ledger.path))
    assert len(found) == 1 and found[0].seq == victim.seq
    assert "data" in found[0].message and "failure-motifs" in found[0].message


def test_fold_state_poisoned(rooted: tuple[Ledger, Roots]):
    """A stored fold state that is not the replayed one (it seeds the next snapshot) is caught."""
    ledger, roots = rooted
    victim = roots.chain()[0]
    _sql(
        ledger,
        "UPDATE memory_root_summaries SET fold_state = ? WHERE root = ? AND "
        "projection = 'epistemic-distribution'",
        (encoding.encode({"OBSERVED": 99}), victim.root),
    )
    found = _step8(_audit(ledger.path))
    assert len(found) == 1 and "fold_state" in found[0].message


def test_stored_record_deleted(rooted: tuple[Ledger, Roots]):
    """A SNAPSHOT whose record is gone is reported (and rebuild restores it)."""
    ledger, roots = rooted
    victim = roots.chain()[2]
    _sql(ledger, "DELETE FROM memory_roots WHERE root = ?", (victim.root,))
    found = _step8(_audit(ledger.path))
    assert [(f.seq, "no stored record" in f.message) for f in found] == [(victim.seq, True)]
    roots.rebuild()
    assert _audit(ledger.path).ok


def test_stored_record_injected(rooted: tuple[Ledger, Roots]):
    """A stored root that no SNAPSHOT entry replays to is reported with its claimed seq."""
    ledger, _ = rooted
    _sql(
        ledger,
        "INSERT INTO memory_roots(root, branch, seq, parent, hw_seq, hw_hash, tree_size, "
        "tree_root, v, state) VALUES(?, 'main', 99, NULL, 3, ?, 4, ?, 1, 'live')",
        (b"\x0a" * 32, b"\x0b" * 32, b"\x0c" * 32),
    )
    found = _step8(_audit(ledger.path))
    assert [(f.branch, f.seq) for f in found] == [("main", 99)]


def test_selfmodel_record_rewritten(rooted: tuple[Ledger, Roots]):
    """A stored SelfModel that differs from its SELFMODEL_SNAPSHOT entry is reported."""
    ledger, roots = rooted
    view = roots.selfmodel()
    assert view is not None
    _sql(
        ledger,
        "UPDATE selfmodel_snapshots SET selfmodel_root = ? WHERE seq = ?",
        (b"\x00" * 32, view.record.seq),
    )
    found = _step8(_audit(ledger.path))
    assert [(f.branch, f.seq) for f in found] == [("main", view.record.seq)]


def test_snapshot_entry_bytes_edited(rooted: tuple[Ledger, Roots]):
    """Editing the root inside a stored SNAPSHOT entry breaks the chain and fails step 8."""
    ledger, roots = rooted
    victim = roots.chain()[1]
    raw = ledger.entry(victim.seq).raw
    edited = raw.replace(victim.root, bytes([victim.root[0] ^ 1]) + victim.root[1:])
    assert edited != raw
    _sql(ledger, "UPDATE entries SET data = ? WHERE k = ?", (edited, 1 << 40 | victim.seq))
    report = _audit(ledger.path)
    assert {3, 8} <= {f.step for f in report.findings}
    assert any(f.step == 8 and f.seq == victim.seq for f in report.findings)


def test_rebuild_refuses_a_ledger_whose_snapshot_does_not_replay(
    rooted: tuple[Ledger, Roots], mr: Any
):
    """rebuild raises IntegrityError (step 8, branch, seq) and changes nothing."""
    ledger, roots = rooted
    ledger.append(mr.event(99))
    good = roots.hook.prepare_head(ledger, "main")
    assert good is not None
    with Ledger.open(ledger.path, hooks=()) as raw:
        seq = raw.append(
            _library_op(
                Ledger.system_op(OpType.SNAPSHOT, replace(good.preimage, parent=None).payload())
            )
        ).seq
    with pytest.raises(IntegrityError) as e:
        roots.rebuild()
    assert (e.value.step, e.value.branch, e.value.seq) == (8, "main", seq)
    assert len(roots.chain()) == 3


def test_missing_automatic_snapshot_is_a_note_not_a_violation(mr_make: Make, mr: Any):
    """Entries appended without the hook skip a due snapshot: reported as a note only."""
    ledger, roots = mr_make(every=3)
    roots.append_batch(mr.mixed(2))
    with Ledger.open(ledger.path, hooks=()) as raw:
        raw.append_batch(mr.mixed(4))
    roots.append_batch(mr.mixed(1))
    report = _audit(ledger.path)
    assert report.ok, [str(f) for f in report.findings]
    assert any(n.step == 8 and "missing" in n.message for n in report.notes)


def test_bundle_audit_replays_every_root(rooted: tuple[Ledger, Roots], tmp_path: Path):
    """An auditor's bundle (no stored records) still replays and checks every SNAPSHOT."""
    ledger, _ = rooted
    export_bundle(ledger, tmp_path / "bundle")
    report = audit_bundle(tmp_path / "bundle", checks=[RootsReplayCheck()])
    assert report.ok, [str(f) for f in report.findings]
    assert 8 in report.steps_checked


def test_snapshot_with_a_malformed_payload(rooted: tuple[Ledger, Roots]):
    """A SNAPSHOT whose payload lacks the preimage fields is a step 8 finding, not a crash."""
    ledger, _ = rooted
    with Ledger.open(ledger.path, hooks=()) as raw:
        seq = raw.append(
            _library_op(Ledger.system_op(OpType.SNAPSHOT, {"memory_root": "not bytes"}))
        ).seq
    found = _step8(_audit(ledger.path))
    assert [(f.branch, f.seq) for f in found] == [("main", seq)]
