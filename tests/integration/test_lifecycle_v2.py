"""lifecycle-counts version 2 on real ledger files: bounded per root, and a ledger whose roots
list version 1 (written before it) keeps verifying and goes on with version 2.

The "old writer" is this memroot's own hooks with the built-ins as they were before version 2
(``lifecycle-counts`` v1 active): the rules, and so the roots, such a writer appended.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner, Result

from memroot.bench.hooked import BATCH, mixed_history
from memroot.cli.main import cli
from memroot.ledger import encoding
from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.ledger import Ledger
from memroot.memory_root import Roots, records, stack
from memroot.memory_root.hook import RootsHook
from memroot.projections.builtins import (
    Corrections,
    EpistemicDistribution,
    FailureMotifs,
    FalsificationCounts,
    FalsificationState,
    LifecycleCounts,
    LifecycleTransitions,
)
from memroot.projections.projection import rule_digest
from memroot.projections.registry import Registry

V1 = rule_digest(LifecycleCounts())
V2 = rule_digest(LifecycleTransitions())


def memroot(ledger: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(ledger), *args], catch_exceptions=False)


def hooks_with(active: list[Any], retired: list[Any]) -> list[object]:
    """The default hooks, their roots hook running ``active`` (``retired`` kept to replay):
    the writer of an earlier memroot, whose built-ins were those."""
    old = Registry(active)
    for p in retired:
        old.register(p, retired=True)
    return [RootsHook(old) if isinstance(h, RootsHook) else h for h in stack.default_hooks()]


def _old_hooks() -> list[object]:
    """The default hooks with the built-ins of before lifecycle-counts v2."""
    return hooks_with(
        [FailureMotifs(), Corrections(), EpistemicDistribution(), LifecycleCounts(),
         FalsificationCounts()],
        [FalsificationState()],
    )  # fmt: skip


def stored_roots(ledger: Path) -> list[tuple[int, bytes, frozenset[bytes]]]:
    """Every stored root of ``ledger``: its seq, root and the rules of its summaries."""
    db = apsw.Connection(str(ledger), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [
            (int(s), bytes(x), frozenset(bytes(r) for (r,) in db.execute(
                "SELECT rule FROM memory_root_summaries WHERE root = ?", (x,))))
            for s, x in db.execute("SELECT seq, root FROM memory_roots ORDER BY seq")
        ]  # fmt: skip
    finally:
        db.close()


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    path = tmp_path / "lc.ledger"
    r = memroot(path, "init")
    assert r.exit_code == 0, r.output
    return path


def _append(
    path: Path, items: Iterator[EventInput | OpInput], batches: int, hooks: Callable[[], list]
) -> None:
    """Append ``batches`` batches of ``items`` through a fresh set of ``hooks()``."""
    with Ledger.open(path, hooks=hooks()) as led:
        roots = Roots(led)
        for _ in range(batches):
            led.append_batch(list(itertools.islice(items, BATCH)))
            roots.sign_pending()


def _newest(path: Path) -> dict[bytes, records.StoredSummary]:
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        latest = records.latest_root(db, "main")
        assert latest is not None
        return {s.rule: s for s in records.summaries(db, latest.root)}
    finally:
        db.close()


def _stored_bytes(summaries: dict[bytes, records.StoredSummary]) -> int:
    return sum(len(s.data) + len(s.fold_state or b"") for s in summaries.values())


def test_a_root_stores_as_many_bytes_at_12000_entries_as_at_2000(ledger: Path):
    """No built-in's summary or fold state stored with the newest root grows with the
    history: 10x the entries (and the deprecated objects) add only wider counts."""
    items = mixed_history(12 * BATCH)
    hooks = stack.default_hooks
    _append(ledger, items, 2, hooks)
    early = _newest(ledger)
    _append(ledger, items, 10, hooks)
    late = _newest(ledger)
    assert V2 in late and V1 not in late
    assert _stored_bytes(late) - _stored_bytes(early) <= 16
    assert all(s.fold_state is not None for s in late.values())


def test_lifecycle_v1_fold_state_grew_with_every_deprecated_object(ledger: Path):
    """Why v1 was retired: the old writer's newest root stores every deprecated id again."""
    items = mixed_history(12 * BATCH)
    hooks = _old_hooks
    _append(ledger, items, 2, hooks)
    early = _newest(ledger)[V1].fold_state
    _append(ledger, items, 10, hooks)
    late = _newest(ledger)[V1].fold_state
    assert early is not None and late is not None
    assert len(late) - len(early) > 100 * 36  # ~10 more deprecated ids per 1,000 entries


def switch_to_v2(
    ledger: Path,
    items: Iterator[EventInput | OpInput],
    old_hooks: Callable[[], list],
    v1: bytes,
    v2: bytes,
) -> dict[bytes, records.StoredSummary]:
    """Three batches by ``old_hooks`` (their roots list ``v1``; verify passes), then three by
    the default hooks (their roots list ``v2``, folded from the genesis: no stored state has
    its rule); the newest root's summaries, for the caller to check ``v2``'s counts."""
    _append(ledger, items, 3, old_hooks)
    assert v1 in _newest(ledger) and v2 not in _newest(ledger)
    r = memroot(ledger, "verify")
    assert r.exit_code == 0, r.output
    _append(ledger, items, 3, stack.default_hooks)
    newest = _newest(ledger)
    assert v2 in newest and v1 not in newest
    rules = [r for _, _, r in stored_roots(ledger)]
    assert [v1 in r for r in rules] == [True] * 3 + [False] * 3
    assert [v2 in r for r in rules] == [False] * 3 + [True] * 3
    return newest


def rebuild_keeps_the_roots(ledger: Path) -> None:
    """Verify passes; rebuild writes the same roots and summaries; verify passes again."""
    before, newest = stored_roots(ledger), _newest(ledger)
    r = memroot(ledger, "verify")
    assert r.exit_code == 0, r.output
    r = memroot(ledger, "rebuild")
    assert r.exit_code == 0, r.output
    assert stored_roots(ledger) == before
    assert _newest(ledger) == newest
    r = memroot(ledger, "verify")
    assert r.exit_code == 0, r.output


def test_roots_listing_v1_verify_and_the_next_ones_list_v2(ledger: Path):
    """A ledger the old writer snapshotted verifies and goes on with v2 roots
    (``switch_to_v2``), whose counts are the history's; rebuild writes the same roots."""
    newest = switch_to_v2(ledger, mixed_history(6 * BATCH), _old_hooks, V1, V2)
    with Ledger.open(ledger) as led:
        latest = records.latest_root(led.derived.db, "main")
        assert latest is not None
        moves = Counter(e.type for e in led.entries(0, latest.high_water.seq + 1, "main"))
    assert encoding.decode(newest[V2].data) == {
        "ACTIVE": moves["ASSERT"],
        "DEPRECATED": moves["DEPRECATE"],
        "SUPERSEDED": moves["SUPERSEDE"],
    }
    rebuild_keeps_the_roots(ledger)
