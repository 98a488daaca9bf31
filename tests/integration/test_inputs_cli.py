"""Reserved operations, bounded input, branch lifecycle, falsified memory and erasure notes.

Each test drives the CLI over a real ledger file (issue 11, points 4, 5, 7, 8 and 9).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli
from memroot.ledger.entries import now_us
from memroot.ledger.ledger import Ledger

EVENT = {
    "kind": "event",
    "stream": "s",
    "actor_id": "alice",
    "actor_type": "HUMAN_USER",
    "role": "USER",
    "content": "I take tea",
    "namespace_id": "ns",
}


def run(ledger: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(ledger), *args])


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "in.ledger"
    assert run(path, "init").exit_code == 0
    return path


def _op(op_type: str, payload: dict[str, Any], **over: Any) -> str:
    return json.dumps(
        {
            "kind": "op",
            "op_type": op_type,
            "actor_id": "mallory",
            "actor_type": "HUMAN_USER",
            "namespace_id": "ns",
            "policy_version": "p/1",
            "payload": payload,
            **over,
        }
    )


def _event_id(ledger: Path, **over: Any) -> str:
    r = run(ledger, "append", json.dumps({**EVENT, **over}), "--json")
    assert r.exit_code == 0, r.output
    return str(json.loads(r.stdout)[0]["id"])


def _assert(ledger: Path, event_id: str, value: str) -> str:
    payload = {
        "object_type": "FACT",
        "epistemic_type": "OBSERVED",
        "source_type": "USER_STATED",
        "evidence_ids": [event_id],
        "value": value,
        "confidence": 0.9,
        "salience": 0.5,
    }
    r = run(ledger, "append", _op("ASSERT", payload, actor_type="AI_AGENT"), "--json")
    assert r.exit_code == 0, r.output
    return str(json.loads(r.stdout)[0]["id"])


def _size(ledger: Path) -> int:
    with Ledger.open(ledger, readonly=True) as led:
        return led.size()


# -- point 4: reserved operations ----------------------------------------------------------------


@pytest.mark.parametrize(
    "op_type,command",
    [
        ("KEY_ROTATE", "memroot rotate-key"),
        ("SNAPSHOT", "memroot snapshot"),
        ("SELFMODEL_SNAPSHOT", "memroot selfmodel record"),
        ("CASCADE", "memroot cascade"),
        ("BRANCH_CLOSE", "memroot branch close"),
        ("BRANCH_MERGE", "memroot branch merge"),
        ("BRANCH_POLICY", "set_branch_policy"),
        ("MERGE_OVERRIDE", "memroot branch merge"),
        ("INTEGRITY_CHECK", "memroot's own verification records"),
    ],
)
def test_append_refuses_reserved_operations_naming_the_command(
    ledger: Path, op_type: str, command: str
) -> None:
    """append refuses a hand-written reserved op (exit 3), names its command, writes nothing."""
    size = _size(ledger)
    r = run(ledger, "append", _op(op_type, {"new_vkey": "x", "branch_id": "b"}))
    assert r.exit_code == 3, r.output
    assert command in r.stderr and "Traceback" not in r.stderr
    assert _size(ledger) == size


def test_import_refuses_a_reserved_operation_and_writes_nothing(
    ledger: Path, tmp_path: Path
) -> None:
    """A KEY_ROTATE line in an import file refuses the whole file, naming rotate-key."""
    lines = tmp_path / "in.jsonl"
    lines.write_text(json.dumps(EVENT) + "\n" + _op("KEY_ROTATE", {"new_vkey": "x"}) + "\n")
    size = _size(ledger)
    r = run(ledger, "import", str(lines))
    assert r.exit_code == 3 and "memroot rotate-key" in r.stderr
    assert _size(ledger) == size


def _assert_line(evidence: str) -> str:
    payload = {
        "object_type": "FACT",
        "epistemic_type": "OBSERVED",
        "source_type": "USER_STATED",
        "evidence_ids": [evidence],
        "value": "v",
        "confidence": 0.9,
        "salience": 0.5,
    }
    return _op("ASSERT", payload, actor_type="AI_AGENT")


def test_import_from_a_pipe_names_the_refused_line_and_writes_nothing(ledger: Path) -> None:
    """stdin is a real pipe (not seekable): the refused line is still named, nothing lands.

    The import reads a batch at a time; naming the line re-reads the input, so a pipe is
    first copied to a temporary file.
    """
    import subprocess
    import sys

    events = [json.dumps({**EVENT, "content": f"e{i}"}) for i in range(7)]
    unknown = "01900000-0000-7000-8000-000000000000"  # evidence that is no event of the ledger
    text = "\n".join([*events, "", _assert_line(unknown), json.dumps(EVENT)]) + "\n"
    size = _size(ledger)
    exe = Path(sys.executable).parent / "memroot"
    done = subprocess.run(
        [str(exe), "-l", str(ledger), "import", "-", "--batch-size", "3"],
        input=text.encode(),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert b"line 9:" in done.stderr and b"Traceback" not in done.stderr
    assert _size(ledger) == size
    # the same input without the bad line imports whole, in batches of 3
    good = "\n".join(events) + "\n"
    done = subprocess.run(
        [str(exe), "-l", str(ledger), "import", "-", "--batch-size", "3", "--json"],
        input=good.encode(),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == 7 and [r["seq"] for r in rows] == list(range(size, size + 7))
    assert _size(ledger) == size + 7


def test_the_library_still_writes_its_own_reserved_operations(ledger: Path) -> None:
    """snapshot, rotate-key and branch create/close write SNAPSHOT, KEY_ROTATE, BRANCH_*."""
    _event_id(ledger)
    assert run(ledger, "snapshot").exit_code == 0
    assert run(ledger, "rotate-key").exit_code == 0
    r = run(ledger, "branch", "create", "--type", "SIMULATION", "--purpose", "p", "--json")
    assert r.exit_code == 0, r.output
    branch = json.loads(r.stdout)["branch_id"]
    assert run(ledger, "branch", "close", branch, "--reason", "done").exit_code == 0
    with Ledger.open(ledger, readonly=True) as led:
        types = {e.type for e in led.entries()}
    assert {"SNAPSHOT", "KEY_ROTATE", "BRANCH_CREATE", "BRANCH_CLOSE"} <= types
    assert run(ledger, "verify", "--no-update").exit_code == 0


# -- point 5: bounded input ----------------------------------------------------------------------


def test_a_ts_far_in_the_future_is_refused_and_log_still_works(ledger: Path) -> None:
    """ts 9000000000000000000 is refused naming the bound; nothing written; log lists."""
    size = _size(ledger)
    r = run(ledger, "append", json.dumps({**EVENT, "ts": 9_000_000_000_000_000_000}))
    assert r.exit_code == 3 and "ahead of the clock" in r.stderr
    assert _size(ledger) == size
    assert run(ledger, "log").exit_code == 0


def test_a_ts_long_before_the_previous_entry_is_refused(ledger: Path) -> None:
    """A ts more than 24 hours before the branch's previous entry is refused; within is fine."""
    r = run(ledger, "append", json.dumps({**EVENT, "ts": 1_700_000_000_000_000}))
    assert r.exit_code == 3 and "before the branch's previous entry" in r.stderr
    recent = now_us() - 3_600_000_000
    assert run(ledger, "append", json.dumps({**EVENT, "ts": recent})).exit_code == 0


@pytest.mark.parametrize(
    "text,what",
    [
        ('{"kind": "event", "kind": "op"}', "duplicate JSON key 'kind'"),
        (json.dumps({**EVENT, "actor_id": "eve\nseq 9"}), "control characters"),
        (json.dumps({**EVENT, "metadata": {"x": json.loads("[" * 40 + "]" * 40)}}), "31 levels"),
        ("[" * 100_000 + "]" * 100_000, "MAX_JSON_DEPTH"),
        ('{"kind": "event", "ts": NaN}', "NaN"),
        (
            json.dumps({**EVENT, "parent_event_id": "01890a5d-ac96-774b-bcce-b302099a8057"}),
            "names no event",
        ),
    ],
)
def test_hostile_json_is_refused_naming_the_rule(ledger: Path, text: str, what: str) -> None:
    """Duplicate keys, control characters, deep nesting, NaN and a dangling parent: exit 3."""
    size = _size(ledger)
    r = run(ledger, "append", text)
    assert r.exit_code == 3, r.output
    assert what in r.stderr and "Traceback" not in r.stderr
    assert _size(ledger) == size


def test_a_parent_event_earlier_in_the_ledger_is_accepted(ledger: Path) -> None:
    """parent_event_id naming an existing event appends."""
    parent = _event_id(ledger)
    _event_id(ledger, parent_event_id=parent)


def test_branch_create_bounds_expiry_days_and_list_keeps_working(ledger: Path) -> None:
    """--expiry-days 100000000 is a usage error (exit 2), nothing written; branch list works."""
    size = _size(ledger)
    args = ["branch", "create", "--type", "SIMULATION", "--purpose", "p"]
    r = run(ledger, *args, "--expiry-days", "100000000")
    assert r.exit_code == 2 and "3650" in r.output
    assert _size(ledger) == size
    assert run(ledger, *args, "--expiry-days", "3650").exit_code == 0
    assert run(ledger, "branch", "list").exit_code == 0


@pytest.mark.parametrize(
    "args",
    [
        ["show", str(2**63)],
        ["log", "--start", str(2**64)],
        ["log", "--limit", str(10**12)],
        ["prove", "--index", str(2**70)],
        ["query", "--as-of", str(2**64)],
        ["gc", "--now", str(10**30)],
        ["gc", "--now", "not-a-time"],
    ],
)
def test_out_of_range_integers_are_usage_errors(ledger: Path, args: list[str]) -> None:
    """An integer outside its documented range is exit 2 with the option named."""
    r = run(ledger, *args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output


def test_init_bounds_snapshot_every(tmp_path: Path) -> None:
    """--snapshot-every over 1000000 is a usage error and no ledger file is created."""
    path = tmp_path / "n.ledger"
    assert run(path, "init", "--snapshot-every", "1000001").exit_code == 2
    assert not path.exists()


# -- point 7: branch lifecycle ------------------------------------------------------------------


def _branch(ledger: Path, *extra: str) -> str:
    r = run(ledger, "branch", "create", "--type", "SIMULATION", "--purpose", "p", "--json", *extra)
    assert r.exit_code == 0, r.output
    return str(json.loads(r.stdout)["branch_id"])


def test_closing_a_branch_with_open_children_is_refused_naming_them(ledger: Path) -> None:
    """branch close of a parent with an open child: exit 3 naming the child; after, it closes."""
    parent = _branch(ledger)
    child = _branch(ledger, "--parent", parent)
    r = run(ledger, "branch", "close", parent, "--reason", "done")
    assert r.exit_code == 3 and child in r.stderr
    assert run(ledger, "branch", "close", child, "--reason", "done").exit_code == 0
    assert run(ledger, "branch", "close", parent, "--reason", "done").exit_code == 0


def test_gc_dry_run_writes_nothing_and_gc_closes_children_before_parents(ledger: Path) -> None:
    """gc --dry-run lists what is due and appends nothing; gc then closes child then parent."""
    parent = _branch(ledger, "--expiry-days", "1")
    child = _branch(ledger, "--parent", parent, "--expiry-days", "1")
    later = str(now_us() + 3 * 86_400 * 1_000_000)
    size = _size(ledger)
    r = run(ledger, "gc", "--now", later, "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    planned = json.loads(r.stdout)
    assert [p["branch_id"] for p in planned] == [child, parent]
    assert all(p["dry_run"] and p["seq"] is None for p in planned)
    assert _size(ledger) == size
    r = run(ledger, "gc", "--now", later, "--json")
    assert r.exit_code == 0, r.output
    assert [d["branch_id"] for d in json.loads(r.stdout)] == [child, parent]
    states = json.loads(run(ledger, "branch", "list", "--json").stdout)
    assert {b["branch_id"]: b["state"] for b in states} == {parent: "ARCHIVED", child: "ARCHIVED"}


def test_gc_reports_a_branch_it_cannot_close_and_handles_the_others(ledger: Path) -> None:
    """A due parent whose child is not due is reported (exit 3); another due branch closes."""
    parent = _branch(ledger, "--expiry-days", "1")
    _branch(ledger, "--parent", parent, "--expiry-days", "30")
    other = _branch(ledger, "--expiry-days", "1")
    later = str(now_us() + 3 * 86_400 * 1_000_000)
    r = run(ledger, "gc", "--now", later, "--json")
    assert r.exit_code == 3
    done = {d["branch_id"]: d for d in json.loads(r.stdout)}
    assert done[parent]["error"] and "open child branches" in done[parent]["error"]
    assert done[other]["error"] is None and done[other]["seq"] is not None


# -- point 8: falsified memory is not served as live --------------------------------------------


def test_default_query_leaves_out_falsified_and_flags_stale(ledger: Path) -> None:
    """DEFAULT hides a falsified object and flags a stale one; EXPLICIT/AUDIT show both."""
    event = _event_id(ledger)
    wrong = _assert(ledger, event, "Alice takes sugar")
    unsure = _assert(ledger, event, "Alice takes milk")
    before = _size(ledger) - 1
    assert run(ledger, "falsify", wrong, "--reason", "she said no").exit_code == 0
    assert run(ledger, "mark-stale", unsure, "--reason", "re-check").exit_code == 0
    earlier = json.loads(run(ledger, "query", "--as-of", str(before), "--json").stdout)
    assert {o["id"]: o["flags"] for o in earlier} == {wrong: [], unsure: []}  # live back then
    default = json.loads(run(ledger, "query", "--json").stdout)
    assert [(o["id"], o["flags"]) for o in default] == [(unsure, ["STALE"])]
    human = run(ledger, "query").stdout
    assert wrong not in human and "[STALE]" in human
    for mode in ("EXPLICIT", "AUDIT"):
        rows = json.loads(run(ledger, "query", "--mode", mode, "--json").stdout)
        flags = {o["id"]: (o["state"], o["flags"]) for o in rows}
        assert flags[wrong] == ("falsified", ["FALSIFIED"])
        assert flags[unsure] == ("stale", ["STALE"])


# -- point 9: erasure notes ---------------------------------------------------------------------


def test_erasure_note_names_the_erased_entry_and_the_erasing_one(ledger: Path) -> None:
    """verify notes "content of entry E erased by entry T", E the event, T the TOMBSTONE."""
    event = _event_id(ledger)
    with Ledger.open(ledger, readonly=True) as led:
        erased_seq = led.size() - 1
    tomb = {"target_event_id": event, "reason": "gdpr", "policy_ref": "p"}
    r = run(ledger, "append", _op("TOMBSTONE", tomb, actor_id="alice"), "--json")
    assert r.exit_code == 0, r.output
    tomb_seq = json.loads(r.stdout)[0]["seq"]
    r = run(ledger, "verify", "--no-update", "--json")
    notes = [n for n in json.loads(r.stdout)["notes"] if "erased by" in n["message"]]
    assert [n["seq"] for n in notes] == [erased_seq]
    assert f"content of entry {erased_seq} erased by entry {tomb_seq}" in notes[0]["message"]


def test_log_and_show_survive_an_entry_written_before_ts_had_bounds(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An old entry with ts in year 287168 lists and shows (no 'year out of range' crash)."""
    import memroot.ledger._appending as appending_module

    far = 9_000_000_000_000_000_000
    monkeypatch.setattr(appending_module, "now_us", lambda: far)  # the clock of an older release
    with Ledger.open(ledger, hooks=()) as led:
        seq = led.append(
            appending_module.EventInput(**{k: v for k, v in EVENT.items() if k != "kind"}, ts=far)
        ).seq
    monkeypatch.undo()
    r = run(ledger, "log")
    assert r.exit_code == 0 and "outside the calendar" in r.stdout
    assert run(ledger, "show", str(seq)).exit_code == 0


def test_branch_list_survives_a_branch_recorded_before_expiry_had_bounds(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored branch with 100000000 expiry days lists, shows and closes."""
    import memroot.memory_root.branches as branches

    monkeypatch.setattr(branches, "MAX_EXPIRY_DAYS", 10**9)
    with Ledger.open(ledger) as led:
        _, genesis = branches.create_branch(
            led, branch_type="SIMULATION", purpose="p", actor_id="u", expiry_days=100_000_000
        )
    monkeypatch.undo()
    r = run(ledger, "branch", "list")
    assert r.exit_code == 0 and genesis.branch in r.stdout
    assert run(ledger, "branch", "show", genesis.branch).exit_code == 0
    # Folded again (verify step 9's registry replay, rebuild), its expiry stands as accepted.
    assert run(ledger, "verify", "--no-update").exit_code == 0
    assert run(ledger, "rebuild").exit_code == 0
    assert run(ledger, "branch", "close", genesis.branch, "--reason", "r").exit_code == 0
