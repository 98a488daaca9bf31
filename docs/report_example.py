"""Build the small ledger behind docs/report.png and write its report.

Run from anywhere: python docs/report_example.py OUT_DIR. It makes OUT_DIR/agent.ledger
(events, memories, two memory roots, a planning branch merged back, a simulation branch, a
falsification with its cascade) and OUT_DIR/report.html (`memroot report`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from click.testing import CliRunner

import memroot
from memroot.cli.main import cli


def build(out: Path) -> Path:
    """Write the example ledger and its report into ``out``; return the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "agent.ledger"
    with memroot.open(path, origin="example.org/agent-7", actor="agent-7", namespace="alice") as m:
        said = m.record(content="I take tea without sugar", actor="alice", role="USER",
                        actor_type="HUMAN_USER")  # fmt: skip
        tea = m.remember("Alice takes tea without sugar", evidence=[said.id],
                         object_type="PREFERENCE")  # fmt: skip
        met = m.record(content="My manager is Bob", actor="alice", role="USER",
                       actor_type="HUMAN_USER")  # fmt: skip
        m.remember("Alice reports to Bob", evidence=[met.id])
        m.snapshot()
        plan = m.fork("plan the Q3 offsite", branch_type="PLANNING", expiry_days=14)
        idea = m.record(content="Offsite in Lisbon?", branch=plan)
        venue = m.remember("Offsite venue: Lisbon", evidence=[idea.id], branch=plan,
                           object_type="DECISION")  # fmt: skip
        m.merge(plan, [venue.id])
        m.fork("what if Alice moved teams?", branch_type="SIMULATION")
        m.record(content="Actually I switched to coffee", actor="alice", role="USER",
                 actor_type="HUMAN_USER")  # fmt: skip
        m.snapshot()
        m.recall(text="tea", receipt="run-morning-brief")
        m.falsify(tea.id, "Alice switched to coffee")
        m.cascade(tea.id, max_depth=2, reason="roots built on the old preference")
    report = out / "report.html"
    CliRunner().invoke(cli, ["-l", str(path), "report", str(report)], catch_exceptions=False)
    return report


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
