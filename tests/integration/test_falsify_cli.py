"""The falsification commands of the CLI: falsify, mark-stale, restore, cascade, why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli


def memroot(ledger: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(ledger), *args], catch_exceptions=False)


def ok_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _append(ledger: Path, item: dict[str, Any]) -> str:
    return str(ok_json(memroot(ledger, "append", json.dumps(item), "--json"))[0]["id"])


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A ledger with an event, two facts, a summary of the first, and a root."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    path = tmp_path / "agent.ledger"
    assert memroot(path, "init", "--origin", "example.org/falsify").exit_code == 0
    ev = _append(
        path,
        {
            "kind": "event",
            "stream": "s",
            "actor_id": "alice",
            "actor_type": "HUMAN_USER",
            "role": "USER",
            "content": "I take tea without sugar",
            "namespace_id": "alice",
        },
    )

    def fact(kind: str, epistemic: str, source: str) -> str:
        return _append(
            path,
            {
                "kind": "op",
                "op_type": "ASSERT",
                "actor_id": "agent-7",
                "actor_type": "AI_AGENT",
                "namespace_id": "alice",
                "policy_version": "policy/1",
                "payload": {
                    "object_type": kind,
                    "epistemic_type": epistemic,
                    "source_type": source,
                    "evidence_ids": [ev],
                    "value": "Alice takes tea without sugar",
                    "confidence": None,
                    "salience": 0.5,
                },
            },
        )

    o1 = fact("PREFERENCE", "OBSERVED", "USER_STATED")
    o2 = fact("PREFERENCE", "ASSERTED", "USER_STATED")
    s = fact("SUMMARY", "INFERRED", "SYSTEM_INFERRED")
    _append(
        path,
        {
            "kind": "op",
            "op_type": "SUMMARY_CREATED",
            "actor_id": "agent-7",
            "actor_type": "AI_AGENT",
            "namespace_id": "alice",
            "policy_version": "policy/1",
            "target_id": s,
            "payload": {
                "object_ids_summarised": [o1],
                "time_window": {"from": 0, "to": 1},
                "summary_type": "daily",
            },
        },
    )
    root = ok_json(memroot(path, "snapshot", "--json"))["memory_root"]
    return {"path": path, "ev": ev, "o1": o1, "o2": o2, "s": s, "root": root}


def test_falsify_restore_and_why_show_the_whole_history(world: dict[str, Any]) -> None:
    """falsify, mark-stale and restore print the new state; why lists every change with
    its reason and evidence; dependents keep their state."""
    path, o1 = world["path"], world["o1"]
    out = ok_json(
        memroot(
            path, "falsify", o1, "--reason", "she takes sugar", "--evidence", world["ev"], "--json"
        )
    )
    assert (out["type"], out["state"]) == ("memory_object", "falsified")
    assert ok_json(memroot(path, "why", world["root"][:10], "--json"))["state"] == "live"
    assert (
        ok_json(memroot(path, "restore", o1, "--reason", "she stopped", "--json"))["state"]
        == "live"
    )
    stale = memroot(path, "mark-stale", o1, "--reason", "recheck", "--actor", "bob")
    assert stale.exit_code == 0 and "is now stale" in stale.stdout
    why = ok_json(memroot(path, "why", o1, "--json"))
    assert [(h["op"], h["state"], h["reason"]) for h in why["states"]] == [
        ("FALSIFY", "falsified", "she takes sugar"),
        ("RESTORE", "live", "she stopped"),
        ("MARK_STALE", "stale", "recheck"),
    ]
    assert why["states"][0]["evidence_ids"] == [world["ev"]]
    human = memroot(path, "why", o1)
    assert "MARK_STALE" in human.stdout and "by bob" in human.stdout
    assert memroot(path, "verify").exit_code == 0


def test_refusals_exit_3_and_write_nothing(world: dict[str, Any]) -> None:
    """Unknown id, falsifying twice, restoring a live item, a zero bound and a cascade from
    a live item: exit 3 with a message, and the log does not grow."""
    path, o1 = world["path"], world["o1"]
    size = len(ok_json(memroot(path, "log", "--json")))
    cases = [
        (["falsify", "0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6b", "--reason", "x"], "does not exist"),
        (["restore", o1, "--reason", "x"], "is live"),
        (["cascade", o1], "is live"),
        (["falsify", "zz", "--reason", "x"], "not an item id"),
    ]
    for args, message in cases:
        r = memroot(path, *args)
        assert r.exit_code == 3, (args, r.output)
        assert message in r.stderr
    assert memroot(path, "falsify", o1, "--reason", "wrong").exit_code == 0
    for args, message in [
        (["falsify", o1, "--reason", "again"], "already falsified"),
        (["cascade", o1, "--max-depth", "0"], "--max-depth"),
        (["cascade", o1, "--max-items", "0"], "--max-items"),
        (["cascade", o1, "--kinds", "object,nope"], "unknown kind"),
    ]:
        r = memroot(path, *args)
        assert r.exit_code == 3, (args, r.output)
        assert message in r.stderr
    assert len(ok_json(memroot(path, "log", "--json"))) == size + 1


def test_cascade_dry_run_then_apply(world: dict[str, Any]) -> None:
    """--dry-run prints the plan and writes nothing; applying appends one CASCADE entry,
    marks the touched items stale, and lists the re-snapshot of the affected root."""
    path, o1 = world["path"], world["o1"]
    assert memroot(path, "falsify", o1, "--reason", "wrong").exit_code == 0
    size = len(ok_json(memroot(path, "log", "--json")))
    plan = ok_json(memroot(path, "cascade", o1, "--max-depth", "1", "--dry-run", "--json"))
    assert plan["dry_run"] is True
    touched = {(t["type"], t["id"]) for t in plan["touched"]}
    assert ("memory_object", world["s"]) in touched and ("memory_root", world["root"]) in touched
    assert len(ok_json(memroot(path, "log", "--json"))) == size
    human = memroot(path, "cascade", o1, "--max-depth", "1", "--dry-run")
    assert "would touch" in human.stdout and "nothing was written" in human.stdout
    done = ok_json(
        memroot(path, "cascade", o1, "--max-depth", "1", "--reason", "recheck", "--json")
    )
    assert done["touched"] == plan["touched"] and done["beyond"] == plan["beyond"]
    assert [x["replaces"] for x in done["resnapshots"]] == [world["root"]]
    log = ok_json(memroot(path, "log", "--json"))
    assert len(log) == size + 1 and log[-1]["type"] == "CASCADE"
    why = ok_json(memroot(path, "why", world["root"][:12], "--json"))
    assert why["state"] == "stale"
    assert why["replaced_by"][0]["memory_root"] == done["resnapshots"][0]["memory_root"]
    item = f"{world['root'][:8]}:epistemic-distribution:OBSERVED"
    assert ok_json(memroot(path, "why", item, "--json"))["value"] == 1
    assert ok_json(memroot(path, "why", world["s"], "--json"))["states"][0]["op"] == "CASCADE"
    listed = ok_json(memroot(path, "roots", "--json"))
    assert [(r["memory_root"], r["state"], r["replaces"]) for r in listed[:2]] == [
        (done["resnapshots"][0]["memory_root"], "live", world["root"]),
        (world["root"], "stale", None),
    ]
    assert memroot(path, "verify").exit_code == 0


def test_verify_fails_on_a_tampered_state(world: dict[str, Any]) -> None:
    """A state row edited in the file makes verify exit 1 with a step 9 finding naming the
    table."""
    import apsw

    path, o1 = world["path"], world["o1"]
    assert memroot(path, "falsify", o1, "--reason", "wrong").exit_code == 0
    db = apsw.Connection(str(path))
    db.execute("UPDATE fz_states SET state = 'live'")
    db.close()
    r = memroot(path, "verify", "--json")
    assert r.exit_code == 1
    findings = json.loads(r.stdout)["findings"]
    assert any(f["step"] == 9 and "fz_states" in f["message"] for f in findings)


def test_why_folds_entries_appended_without_the_falsification_hook(tmp_path: Path) -> None:
    """`why` on a ledger a library caller appended to with MemoryHook only works (it used to
    fold the falsification layer inside its read transaction: a storage error, exit 4)."""
    from memroot.ledger.entries import EventInput
    from memroot.ledger.ledger import Ledger
    from memroot.projections import requests as rq
    from memroot.projections.memory import MemoryHook

    ledger = tmp_path / "agent.ledger"
    assert memroot(ledger, "init").exit_code == 0
    with Ledger.open(ledger, hooks=[MemoryHook()]) as lg:
        said = EventInput(
            stream="s1", actor_id="alice", actor_type="HUMAN_USER", role="USER",
            content="I take tea", namespace_id="alice",
        )  # fmt: skip
        ev = lg.append(said)
        agent = rq.Actor("agent-7", "AI_AGENT", namespace_id="alice")
        tea = lg.append(rq.assert_object(agent, "PREFERENCE", "OBSERVED", "USER_STATED",
                                         [ev.id], "Alice takes tea")).id  # fmt: skip
    why = ok_json(memroot(ledger, "why", tea, "--json"))
    assert why["states"] == [] and why["evidence"][0]["content"] == "I take tea"
