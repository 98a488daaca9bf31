"""failure-motifs version 2 on real ledger files: bounded per root whatever the sources, and a
ledger whose roots list version 1 (written before it) keeps verifying and goes on with
version 2.

The "old writer" is this memroot's own hooks with the built-ins as they were before version 2
(``failure-motifs`` v1 active): the rules, and so the roots, such a writer appended. Every
tenth entry of the mixed history is replaced by a ``VIOLATION_RECORDED`` naming a source no
earlier violation named (``bench_rootsv2.with_violations``: free-text sources, the case that
made version 1 grow).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memroot.bench.bench_rootsv2 import with_violations
from memroot.bench.hooked import BATCH, mixed_history
from memroot.ledger import encoding
from memroot.ledger.entries import EventInput, OpInput
from memroot.memory_root import stack
from memroot.projections.builtins import (
    Corrections,
    EpistemicDistribution,
    FailureMotifs,
    FailureMotifsTopK,
    FalsificationCounts,
    FalsificationState,
    LifecycleCounts,
    LifecycleTransitions,
)
from memroot.projections.projection import rule_digest
from tests.integration.test_lifecycle_v2 import (
    _append,
    _newest,
    _stored_bytes,
    hooks_with,
    memroot,
    rebuild_keeps_the_roots,
    switch_to_v2,
)

V1 = rule_digest(FailureMotifs())
V2 = rule_digest(FailureMotifsTopK())


def _old_hooks() -> list[object]:
    """The default hooks with the built-ins of before failure-motifs v2."""
    return hooks_with(
        [FailureMotifs(), Corrections(), EpistemicDistribution(), LifecycleTransitions(),
         FalsificationCounts()],
        [FalsificationState(), LifecycleCounts()],
    )  # fmt: skip


def _with_violations(n: int) -> Iterator[EventInput | OpInput]:
    """The mixed history of ``n`` entries, every 10th event a violation from a new source."""
    return with_violations(mixed_history(n))


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    path = tmp_path / "fm.ledger"
    r = memroot(path, "init")
    assert r.exit_code == 0, r.output
    return path


def test_a_root_stores_as_many_bytes_at_12000_entries_as_at_2000(ledger: Path):
    """With a new source in every violation, the newest root's summaries and fold states
    stay the size they reached once the sketch was full (version 1's grow by a source each)."""
    items = _with_violations(12 * BATCH)
    _append(ledger, items, 2, stack.default_hooks)
    early = _newest(ledger)
    _append(ledger, items, 10, stack.default_hooks)
    late = _newest(ledger)
    assert V2 in late and V1 not in late
    # Wider counts only: the summary and the fold state each hold 2 + 2 x 32 integers of the
    # sketch, each at most 2 bytes wider (< 65,536), and the other built-ins' counts 16 bytes.
    assert _stored_bytes(late) - _stored_bytes(early) <= 2 * 66 * 2 + 16
    motifs = encoding.decode(late[V2].data)["TITLE_MISMATCH"]
    assert motifs["count"] == 1200 and len(motifs["sources"]) == 32
    assert sum(c for c, _ in motifs["sources"].values()) == motifs["count"] - motifs["error"]


def test_motifs_v1_fold_state_grew_with_every_source(ledger: Path):
    """Why v1 was retired: the old writer's newest root stores a count for every source."""
    items = _with_violations(12 * BATCH)
    _append(ledger, items, 2, _old_hooks)
    early = _newest(ledger)[V1].fold_state
    _append(ledger, items, 10, _old_hooks)
    late = _newest(ledger)[V1].fold_state
    assert early is not None and late is not None
    assert len(late) - len(early) > 1000 * 40  # 100 more sources of 40 characters a batch


def test_roots_listing_v1_verify_and_the_next_ones_list_v2(ledger: Path):
    """A ledger the old writer snapshotted verifies and goes on with v2 roots
    (``switch_to_v2``), whose counts are the history's; rebuild writes the same roots."""
    newest = switch_to_v2(ledger, _with_violations(6 * BATCH), _old_hooks, V1, V2)
    assert encoding.decode(newest[V2].data)["TITLE_MISMATCH"]["count"] == 600
    rebuild_keeps_the_roots(ledger)
