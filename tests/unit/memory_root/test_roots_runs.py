"""Step 8 fed runs of events (``RootsReplayCheck.feed_events``) replays and reports as
``feed`` on each event, findings included and in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memroot.ledger import encoding
from memroot.ledger.entries import Entry, EventInput, Kind
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport
from memroot.memory_root.replay import RootsReplayCheck
from memroot.projections.projection import Summary
from memroot.projections.registry import Registry


@dataclass
class Picky:
    """Counts entries; fails on every 7th (a projection that cannot fold some events)."""

    id: str = "picky"
    version: int = 1
    params: dict[str, Any] = field(default_factory=dict)
    types: frozenset[str] | None = None

    def initial(self) -> int:
        return 0

    def fold(self, state: int, entry: Entry) -> int:
        if entry.seq % 7 == 3:
            raise TypeError(f"cannot fold entry {entry.seq}")
        return state + entry.seq

    def summarize(self, state: int) -> Summary:
        return Summary(encoding.encode(state), 1)


def test_runs_of_events_replay_and_report_as_each_event(tmp_path: Path) -> None:
    with Ledger.init(tmp_path / "bare.ledger", hooks=()) as ledger:
        for i in range(60):
            ledger.append(
                EventInput(
                    stream="s",
                    actor_id="a",
                    actor_type="HUMAN_USER",
                    role="USER",
                    content=f"e{i}",
                    namespace_id="ns",
                )
            )
        entries = list(ledger.entries())
    one, runs = (RootsReplayCheck(registry=Registry([Picky()])) for _ in range(2))
    by_one, by_runs = AuditReport(), AuditReport()
    for e in entries:
        one.feed("main", e, by_one)
    runs.feed("main", entries[0], by_runs)
    assert all(e.kind is Kind.EVENT for e in entries[1:])
    for k in range(1, len(entries), 11):
        runs.feed_events("main", entries[k : k + 11], by_runs)
    got = [str(f) for f in by_runs.findings]
    assert got == [str(f) for f in by_one.findings]
    assert len(got) == 60 // 7 + 1 and "cannot fold entry 3" in got[0]
    a, b = one.replay.folds["main"], runs.replay.folds["main"]
    assert (a.folder.states, a.next_seq, a.last_hash) == (b.folder.states, b.next_seq, b.last_hash)
    assert a.tree_root() == b.tree_root()
