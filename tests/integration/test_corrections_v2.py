"""corrections version 2 on real ledger files: bounded per root whatever the verifiers and
motifs a history names, and a ledger whose roots list version 1 (written before it) keeps
verifying and goes on with version 2.

The "old writer" is this memroot's own hooks with the built-ins as they were before version 2
(``corrections`` v1 active): the rules, and so the roots, such a writer appended. Every
tenth entry of the mixed history is replaced by a ``CORRECTION_APPLIED`` accepted by a
verifier, and of a motif, that no earlier correction named (free text: the case that made
version 1 grow).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from memroot.bench.hooked import BATCH, mixed_history
from memroot.ledger import encoding
from memroot.ledger.entries import EventInput, OpInput
from memroot.memory_root import stack
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

V1 = rule_digest(Corrections())
V2 = rule_digest(CorrectionsTopK())


def _old_hooks() -> list[object]:
    """The default hooks with the built-ins of before corrections v2."""
    return hooks_with(
        [FailureMotifsTopK(), Corrections(), EpistemicDistribution(), LifecycleTransitions(),
         FalsificationCounts()],
        [FailureMotifs(), FalsificationState(), LifecycleCounts()],
    )  # fmt: skip


def _with_corrections(items: Iterable[EventInput | OpInput]) -> Iterator[EventInput | OpInput]:
    """Yield ``items``, every 10th event a correction by a new verifier, of a new motif."""
    for i, item in enumerate(items):
        if i % 10 == 4 and isinstance(item, EventInput):
            yield OpInput(
                op_type="CORRECTION_APPLIED",
                actor_id="operator-1",
                actor_type="HUMAN_USER",
                namespace_id="agent-7",
                policy_version="policy/1",
                payload={
                    "correction": f"title fixed in answer {i:06d}",
                    "accepted_by": f"https://example.org/verifiers/check-{i:06d}",
                    "motif": f"MOTIF_{i:06d}",
                },
            )
        else:
            yield item


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    path = tmp_path / "corr.ledger"
    r = memroot(path, "init")
    assert r.exit_code == 0, r.output
    return path


def test_a_root_stores_as_many_bytes_at_12000_entries_as_at_2000(ledger: Path):
    """With a new verifier and motif in every correction, the newest root's summaries and
    fold states stay the size they reached once the tables were full (v1's grow by two
    counts a correction)."""
    items = _with_corrections(mixed_history(12 * BATCH))
    _append(ledger, items, 2, stack.default_hooks)
    early = _newest(ledger)
    _append(ledger, items, 10, stack.default_hooks)
    late = _newest(ledger)
    assert V2 in late and V1 not in late
    # Wider counts only: the summary and the fold state each hold 2 x 32 [c, e] pairs and a
    # total, each at most 1 byte wider (< 256 -> < 65,536), and the other built-ins' counts.
    assert _stored_bytes(late) - _stored_bytes(early) <= 2 * (2 * 64 + 2) + 16
    summary = encoding.decode(late[V2].data)
    assert summary["total"] == 1200
    assert len(summary["by_verifier"]) == 32 and len(summary["by_motif"]) == 32
    assert sum(c for c, _ in summary["by_verifier"].values()) == 1200


def test_corrections_v1_fold_state_grew_with_every_verifier(ledger: Path):
    """Why v1 was retired: the old writer's newest root stores a count per verifier and motif."""
    items = _with_corrections(mixed_history(12 * BATCH))
    _append(ledger, items, 2, _old_hooks)
    early = _newest(ledger)[V1]
    _append(ledger, items, 10, _old_hooks)
    late = _newest(ledger)[V1]
    assert len(late.data) - len(early.data) > 1000 * 50  # 100 more of each, ~56 bytes a pair


def test_roots_listing_v1_verify_and_the_next_ones_list_v2(ledger: Path):
    """A ledger the old writer snapshotted verifies and goes on with v2 roots
    (``switch_to_v2``), whose counts are the history's; rebuild writes the same roots."""
    newest = switch_to_v2(ledger, _with_corrections(mixed_history(6 * BATCH)), _old_hooks, V1, V2)
    assert encoding.decode(newest[V2].data)["total"] == 600
    rebuild_keeps_the_roots(ledger)
