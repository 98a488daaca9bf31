"""Erasure follows evidence across branches (issue 16.1): merge targets, forks, closed ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from memroot.ledger.entries import OpInput
from memroot.ledger.ledger import Ledger
from memroot.memory_root.erasure import ErasureHook
from memroot.memory_root.stack import default_hooks

NS = "alice"


def memroot(ledger: Path, *args: str) -> Result:
    from memroot.cli.main import cli

    return CliRunner().invoke(cli, ["-l", str(ledger), *args], catch_exceptions=False)


def ok_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _append(path: Path, item: dict[str, Any], branch: str = "main") -> str:
    return str(ok_json(memroot(path, "append", "-b", branch, json.dumps(item), "--json"))[0]["id"])


def _event(path: Path, branch: str = "main") -> str:
    return _append(
        path,
        {
            "kind": "event",
            "stream": "s",
            "actor_id": "alice",
            "actor_type": "HUMAN_USER",
            "role": "USER",
            "content": "my address is 1 Main St",
            "namespace_id": NS,
        },
        branch,
    )


def _fact(path: Path, ev: str, branch: str = "main") -> str:
    return _append(
        path,
        {
            "kind": "op",
            "op_type": "ASSERT",
            "actor_id": "agent-7",
            "actor_type": "AI_AGENT",
            "namespace_id": NS,
            "policy_version": "policy/1",
            "payload": {
                "object_type": "FACT",
                "epistemic_type": "OBSERVED",
                "source_type": "USER_STATED",
                "evidence_ids": [ev],
                "value": "Alice lives at 1 Main St",
                "confidence": None,
                "salience": 0.5,
            },
        },
        branch,
    )


def _tombstone(ev: str, mode: str | None) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "target_event_id": ev,
        "reason": "right to erasure",
        "policy_ref": "gdpr-17",
    }
    if mode is not None:
        payload["on_dependents"] = mode
    return {
        "kind": "op",
        "op_type": "TOMBSTONE",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "namespace_id": NS,
        "policy_version": "policy/1",
        "target_id": ev,
        "payload": payload,
    }


def _objects(path: Path, branch: str = "main") -> dict[str, Any]:
    rows = ok_json(memroot(path, "query", "-b", branch, "--mode", "AUDIT", "--json"))
    return {r["id"]: r for r in rows}


def _branch(path: Path, btype: str = "SIMULATION") -> str:
    r = memroot(path, "branch", "create", "--type", btype, "--purpose", "what if")
    assert r.exit_code == 0, r.output
    return r.stdout.strip()


@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    p = tmp_path / "agent.ledger"
    assert memroot(p, "init", "--origin", "example.org/erasure").exit_code == 0
    return p


def _merged(path: Path) -> tuple[str, str, str]:
    """A branch event, a branch fact citing it, and that fact merged into main."""
    b = _branch(path)
    ev = _event(path, b)
    fact = _fact(path, ev, b)
    merged = ok_json(memroot(path, "branch", "merge", b, "--objects", fact, "--json"))
    (imported,) = [i["new_object_id"] for i in merged["items"]]
    return b, ev, imported


def test_an_erasure_in_a_branch_reaches_the_object_merged_into_main(path: Path) -> None:
    """Issue 16.1 (a): the branch erases the event its merged fact cites (DEPRECATE): main's
    import is deprecated by a DEPRECATE entry on main that names the erasure and its
    branch, flagged EVIDENCE_ERASED; `why` names the erasing entry and branch; verify
    passes."""
    b, ev, imported = _merged(path)
    done = ok_json(
        memroot(path, "append", "-b", b, json.dumps(_tombstone(ev, "DEPRECATE")), "--json")
    )
    tomb = done[0]
    main_log = ok_json(memroot(path, "log", "--json"))
    last = main_log[-1]
    assert last["type"] == "DEPRECATE"
    body = ok_json(memroot(path, "show", str(last["seq"]), "--json"))["body"]
    assert body["target_id"] == imported
    assert f"TOMBSTONE entry {tomb['seq']} on branch {b}" in body["payload"]["reason"]
    row = _objects(path)[imported]
    assert row["lifecycle_state"] == "DEPRECATED" and "EVIDENCE_ERASED" in row["flags"]
    why = memroot(path, "why", imported)
    assert f"erased by entry {tomb['seq']} on {b}" in why.stdout and "DEPRECATE" in why.stdout
    assert memroot(path, "verify").exit_code == 0


def test_an_erasure_in_main_reaches_a_branch_object_citing_a_pre_fork_event(path: Path) -> None:
    """Issue 16.1 (b): main erases an event a branch object cites (ARCHIVE): the open
    branch gets an ARCHIVE entry of its own; a closed branch takes none and its object is
    flagged EVIDENCE_ERASED at read (verify notes it); without on_dependents the erasure
    is refused naming the branch, and nothing is written."""
    ev = _event(path)
    b = _branch(path)
    closed = _branch(path, "PLANNING")
    mine = _fact(path, ev, b)
    theirs = _fact(path, ev, closed)
    assert memroot(path, "branch", "close", closed, "--reason", "done").exit_code == 0
    size = len(ok_json(memroot(path, "log", "--json")))
    refused = memroot(path, "append", json.dumps(_tombstone(ev, None)))
    assert refused.exit_code == 3 and repr(b) in refused.stderr and mine in refused.stderr
    assert len(ok_json(memroot(path, "log", "--json"))) == size
    assert memroot(path, "append", json.dumps(_tombstone(ev, "ARCHIVE"))).exit_code == 0
    branch_log = ok_json(memroot(path, "log", "-b", b, "--json"))
    assert branch_log[-1]["type"] == "ARCHIVE"
    shown = ok_json(memroot(path, "show", "-b", b, str(branch_log[-1]["seq"]), "--json"))
    assert "on branch main" in shown["body"]["payload"]["reason"]
    assert _objects(path, b)[mine]["lifecycle_state"] == "ARCHIVED"
    other = _objects(path, closed)[theirs]
    assert other["lifecycle_state"] == "ACTIVE" and "EVIDENCE_ERASED" in other["flags"]
    report = ok_json(memroot(path, "verify", "--json"))
    assert report["ok"] is True
    notes = [f for f in report["notes"] if f["step"] == 9 and theirs in f["message"]]
    assert notes and notes[0]["branch"] == closed, report


def test_keep_is_refused_when_an_object_on_another_branch_would_lose_all_evidence(
    path: Path,
) -> None:
    """on_dependents KEEP is refused when an object on another branch has no other
    unerased evidence, naming the object and its branch; nothing is written."""
    b, ev, imported = _merged(path)
    (own,) = list(_objects(path, b))  # the branch's own copy is retired; main's import is not
    retire = {
        "kind": "op",
        "op_type": "DEPRECATE",
        "actor_id": "agent-7",
        "actor_type": "AI_AGENT",
        "namespace_id": NS,
        "policy_version": "policy/1",
        "target_id": own,
        "payload": {"reason": "merged", "deprecated_by": "agent-7"},
    }
    _append(path, retire, b)
    size = len(ok_json(memroot(path, "log", "-b", b, "--json")))
    r = memroot(path, "append", "-b", b, json.dumps(_tombstone(ev, "KEEP")))
    assert r.exit_code == 3 and imported in r.stderr and "'main'" in r.stderr, r.output
    assert len(ok_json(memroot(path, "log", "-b", b, "--json"))) == size


def test_verify_reports_an_active_object_resting_only_on_erased_evidence(path: Path) -> None:
    """Step 9: a ledger written without the erasure hook (main's import left ACTIVE after
    the branch erased its only evidence) fails verify, naming the object and the erasure."""
    b, ev, imported = _merged(path)
    hooks = [h for h in default_hooks() if not isinstance(h, ErasureHook)]
    with Ledger.open(path, hooks=hooks) as ledger:
        t = _tombstone(ev, "DEPRECATE")
        ledger.append(
            OpInput(
                op_type="TOMBSTONE",
                actor_id="alice",
                actor_type="HUMAN_USER",
                namespace_id=NS,
                payload=t["payload"],
                policy_version="policy/1",
                target_id=ev,
            ),
            branch=b,
        )
    assert _objects(path)[imported]["lifecycle_state"] == "ACTIVE"
    r = memroot(path, "verify", "--json")
    assert r.exit_code == 1, r.output
    found = [
        f
        for f in json.loads(r.stdout)["findings"]
        if f["step"] == 9 and imported in f["message"] and f["severity"] == "error"
    ]
    assert found and f"on {b}" in found[0]["message"] and found[0]["branch"] == "main"


def test_an_erasure_is_never_blocked_by_a_branch_limit(path: Path) -> None:
    """A full branch (max_events reached) still takes a TOMBSTONE of its own and the
    DEPRECATE an erasure in main carries to it; other appends stay refused."""
    ev = _event(path)
    made = memroot(
        path, "branch", "create", "--type", "SIMULATION", "--purpose", "p", "--max-events", "2"
    )
    b = made.stdout.strip()
    own = _event(path, b)
    mine = _fact(path, ev, b)  # the branch is full now
    assert memroot(path, "append", "-b", b, json.dumps(_tombstone(own, None))).exit_code == 0
    assert memroot(path, "append", json.dumps(_tombstone(ev, "DEPRECATE"))).exit_code == 0
    assert _objects(path, b)[mine]["lifecycle_state"] == "DEPRECATED"
    refused = memroot(path, "append", "-b", b, json.dumps(_tombstone(own, None)))
    assert refused.exit_code == 3  # already erased; and an event would be over the limit
    r = memroot(
        path,
        "append",
        "-b",
        b,
        json.dumps(
            {
                "kind": "event",
                "stream": "s",
                "actor_id": "alice",
                "actor_type": "HUMAN_USER",
                "role": "USER",
                "content": "more",
                "namespace_id": NS,
            }
        ),
    )
    assert r.exit_code == 3 and "max_events = 2" in r.stderr
    assert memroot(path, "verify").exit_code == 0
