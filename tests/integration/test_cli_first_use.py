"""What a user meets first: show by id, log --tail/--type, the sample file, stdin, line numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "events.jsonl"


def run(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


@pytest.fixture
def ledger(tmp_path: Path) -> str:
    path = str(tmp_path / "first.ledger")
    assert run("-l", path, "init").exit_code == 0
    result = run("-l", path, "import", str(SAMPLE))
    assert result.exit_code == 0, result.output
    return path


def test_sample_file_is_the_readme_one_and_imports(ledger: str) -> None:
    """examples/events.jsonl (named in the README) imports: 3 events, 2 memories."""
    assert "memroot import examples/events.jsonl" in (ROOT / "README.md").read_text()
    rows = json.loads(run("-l", ledger, "log", "--json").output)
    assert [r["type"] for r in rows] == ["GENESIS", "EVENT", "EVENT", "EVENT", "ASSERT", "ASSERT"]
    hits = json.loads(run("-l", ledger, "query", "--text", "tea", "--json").output)
    assert [h["value"] for h in hits] == ["Alice takes tea without sugar"]


def test_show_takes_an_event_or_operation_id(ledger: str) -> None:
    """show accepts a seq, an event id or an operation id, and says so when none matches."""
    by_id = json.loads(
        run("-l", ledger, "show", "01900000-0000-7000-8000-0000000000a2", "--json").output
    )
    assert by_id["seq"] == 2 and by_id["content"] == "Noted: tea, no sugar."
    op_id = json.loads(run("-l", ledger, "show", "4", "--json").output)["id"]
    assert json.loads(run("-l", ledger, "show", op_id, "--json").output)["seq"] == 4
    missing = run("-l", ledger, "show", "01900000-0000-7000-8000-0000000000ff")
    assert missing.exit_code == 3 and "no entry with id" in missing.output
    bad = run("-l", ledger, "show", "sevent")
    assert bad.exit_code == 3 and "entry" in bad.output


def test_log_tail_and_type(ledger: str) -> None:
    """--tail N lists the last N entries; --type keeps only the types named."""
    tail = json.loads(run("-l", ledger, "log", "--tail", "2", "--json").output)
    assert [r["seq"] for r in tail] == [4, 5]
    events = json.loads(run("-l", ledger, "log", "--type", "event", "--json").output)
    assert [r["seq"] for r in events] == [1, 2, 3]
    last = json.loads(run("-l", ledger, "log", "--type", "EVENT", "--tail", "1", "--json").output)
    assert [r["seq"] for r in last] == [3]
    limited = run("-l", ledger, "log", "--type", "EVENT", "--limit", "2", "--json").output
    assert [r["seq"] for r in json.loads(limited)] == [1, 2]


def test_import_refusal_names_the_line_and_writes_nothing(ledger: str, tmp_path: Path) -> None:
    """A line the memory model refuses (unknown evidence) is named; nothing lands."""
    bad = tmp_path / "bad.jsonl"
    good = SAMPLE.read_text().splitlines()[0].replace("a1", "b1")
    wrong = json.loads(SAMPLE.read_text().splitlines()[3])
    wrong["payload"]["evidence_ids"] = ["01900000-0000-7000-8000-0000000000ff"]
    bad.write_text(good + "\n\n" + json.dumps(wrong) + "\n")
    before = len(json.loads(run("-l", ledger, "log", "--json").output))
    result = CliRunner().invoke(cli, ["-l", ledger, "import", str(bad)])
    assert result.exit_code == 3
    assert "line 3:" in result.output and "evidence" in result.output
    assert len(json.loads(run("-l", ledger, "log", "--json").output)) == before


def test_selfmodel_record_reads_stdin(ledger: str) -> None:
    """selfmodel record - takes the SelfModel JSON from stdin."""
    model = {"agent_id": "agent-7", "identity": {"name": "Seven"}, "capabilities": []}
    result = run("-l", ledger, "selfmodel", "record", "-", "--json", input=json.dumps(model))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["body"]["agent_id"] == "agent-7"


def test_branch_show_prints_no_python_reprs(ledger: str) -> None:
    """branch show prints nested fields as indented lines, never dict or None reprs."""
    made = run("-l", ledger, "branch", "create", "--type", "PLANNING", "--purpose", "q3")
    branch = made.output.strip()
    out = run("-l", ledger, "branch", "show", branch).output
    assert "{" not in out and "None" not in out and "[" not in out
    assert "expiry:\n  max_age_days:" in out
