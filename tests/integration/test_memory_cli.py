"""The memory commands end to end: query, why (with proofs), rebuild, and verify's step 9."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli
from memroot.ledger import merkle
from memroot.ledger.backends.store import Store
from memroot.ledger.entries import Entry

ORIGIN = "example.org/memory-cli"


def memroot(path: Path, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], input=stdin, catch_exceptions=False)


def append(path: Path, obj: dict[str, Any]) -> dict[str, Any]:
    result = memroot(path, "append", "--json", json.dumps(obj))
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout)[0])


def event(path: Path, content: str, ns: str = "alice") -> str:
    return str(
        append(
            path,
            {
                "kind": "event",
                "stream": "s",
                "actor_id": "alice",
                "actor_type": "HUMAN_USER",
                "role": "USER",
                "content": content,
                "namespace_id": ns,
            },
        )["id"]
    )


def op(
    op_type: str,
    payload: dict[str, Any],
    target: str | None = None,
    actor: str = "agent-7",
    ns: str = "alice",
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "kind": "op",
        "op_type": op_type,
        "actor_id": actor,
        "actor_type": "AI_AGENT",
        "namespace_id": ns,
        "policy_version": "policy/1",
        "payload": payload,
    }
    if target is not None:
        d["target_id"] = target
    return d


def assert_op(evidence: list[str], value: str, **over: Any) -> dict[str, Any]:
    payload = {
        "object_type": "PREFERENCE",
        "epistemic_type": "OBSERVED",
        "source_type": "USER_STATED",
        "evidence_ids": evidence,
        "value": value,
        "confidence": None,
        "salience": 0.7,
        **over,
    }
    return op("ASSERT", payload)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "agent.ledger"
    assert memroot(path, "init", "--origin", ORIGIN).exit_code == 0
    return path


@pytest.fixture
def story(ledger: Path) -> dict[str, str]:
    """Alice states a preference, the agent remembers it, reinforces it, then a conflict."""
    ev = event(ledger, "I take my tea without sugar")
    tea = str(append(ledger, assert_op([ev], "Alice takes tea without sugar"))["id"])
    append(
        ledger,
        op(
            "REINFORCE",
            {
                "signal_type": "used",
                "delta": 0.05,
                "new_confidence": 0.95,
                "new_salience": 0.75,
                "signal_source": "chat",
            },
            tea,
        ),
    )
    ev2 = event(ledger, "Actually, two sugars please")
    sweet = str(append(ledger, assert_op([ev2], "Alice takes two sugars"))["id"])
    append(
        ledger,
        op(
            "CONTRADICTION_NOTED",
            {"object_id_a": sweet, "object_id_b": tea, "conflict_description": "sugar"},
        ),
    )
    return {"ev": ev, "tea": tea, "ev2": ev2, "sweet": sweet}


def test_query_json_and_text(ledger: Path, story: dict[str, str]) -> None:
    """query --json lists objects newest first with conflict flags; --text searches values."""
    result = memroot(ledger, "query", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert [r["id"] for r in rows] == [story["sweet"], story["tea"]]
    assert rows[1]["conflicts_with"] == [story["sweet"]] and "CONFLICT" in rows[1]["flags"]
    assert rows[1]["version"] == 2 and rows[1]["confidence"] == pytest.approx(0.95)
    found = json.loads(memroot(ledger, "query", "--text", "two sugars", "--json").stdout)
    assert [r["id"] for r in found] == [story["sweet"]]
    human = memroot(ledger, "query", "--type", "preference").stdout
    assert story["tea"] in human and "CONFLICT" in human


def test_query_as_of(ledger: Path, story: dict[str, str]) -> None:
    """query --as-of SEQ answers with the memory as it was right after entry SEQ."""
    rows = json.loads(memroot(ledger, "query", "--as-of", "2", "--json").stdout)
    assert [(r["id"], r["version"]) for r in rows] == [(story["tea"], 1)]
    assert rows[0]["flags"] == []
    late = memroot(ledger, "query", "--as-of", "999")
    assert late.exit_code == 3 and "past the last entry" in late.stderr


def test_query_modes_and_states(ledger: Path, story: dict[str, str]) -> None:
    """DEFAULT refuses non-ACTIVE states; AUDIT shows deprecated objects."""
    append(ledger, op("DEPRECATE", {"reason": "changed", "deprecated_by": "alice"}, story["tea"]))
    assert [r["id"] for r in json.loads(memroot(ledger, "query", "--json").stdout)] == [
        story["sweet"]
    ]
    bad = memroot(ledger, "query", "--state", "DEPRECATED")
    assert bad.exit_code == 3 and "EXPLICIT or AUDIT" in bad.stderr
    audit = json.loads(
        memroot(ledger, "query", "--mode", "audit", "--state", "deprecated", "--json").stdout
    )
    assert [r["id"] for r in audit] == [story["tea"]]


def test_why_proves_every_step(ledger: Path, story: dict[str, str]) -> None:
    """why --json lists every operation and evidence event with a proof that verifies."""
    result = memroot(ledger, "why", story["tea"], "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    cp = data["checkpoint"]
    assert cp["size"] == 7
    root = bytes.fromhex(cp["root"])
    ops = [(o["seq"], o["op_type"], o["version"]) for o in data["operations"]]
    assert ops == [(2, "ASSERT", 1), (3, "REINFORCE", 2), (6, "CONTRADICTION_NOTED", None)]
    [evidence] = data["evidence"]
    assert (evidence["event_id"], evidence["content"]) == (
        story["ev"],
        "I take my tea without sugar",
    )
    store = Store(ledger)
    try:
        for step in [*data["operations"], evidence]:
            raw = bytes(store.entry_row(1, step["seq"]).data)
            assert Entry.from_bytes(raw).hash.hex() == step["entry_hash"]
            proof = [bytes.fromhex(h) for h in step["proof"]]
            merkle.verify_inclusion(
                bytes.fromhex(step["entry_hash"]), step["seq"], cp["size"], proof, root
            )
    finally:
        store.close()
    assert base64.b64encode(root).decode() in cp["note"]
    human = memroot(ledger, "why", story["tea"]).stdout
    assert "REINFORCE" in human and "I take my tea without sugar" in human


def test_why_shows_erasure(ledger: Path, story: dict[str, str]) -> None:
    """After a TOMBSTONE the evidence is listed as erased, its proof still verifies."""
    refused = memroot(
        ledger,
        "append",
        json.dumps(
            op(
                "TOMBSTONE",
                {"target_event_id": story["ev"], "reason": "gdpr", "policy_ref": "art-17"},
                actor="alice",
            )
        ),
    )
    assert refused.exit_code == 3 and "on_dependents" in refused.stderr
    append(
        ledger,
        op(
            "TOMBSTONE",
            {
                "target_event_id": story["ev"],
                "reason": "gdpr",
                "policy_ref": "art-17",
                "on_dependents": "ARCHIVE",
            },
            actor="alice",
        ),
    )
    data = json.loads(memroot(ledger, "why", story["tea"], "--json").stdout)
    assert data["object"]["lifecycle_state"] == "ARCHIVED"
    [evidence] = data["evidence"]
    assert evidence["content"] is None and evidence["erased_by"] == 7 and evidence["proof"]
    assert "erased by entry 7" in memroot(ledger, "why", story["tea"]).stdout


def test_why_unknown_object(ledger: Path) -> None:
    """why of an id that never existed exits 3 with a clear message."""
    result = memroot(ledger, "why", "0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6b")
    assert result.exit_code == 3 and "no memory object" in result.stderr


def test_refused_append_names_the_rule_and_writes_nothing(
    ledger: Path, story: dict[str, str]
) -> None:
    """An append breaking a memory rule exits 3, names the rule, and the ledger is unchanged."""
    before = memroot(ledger, "log", "--json").stdout
    result = memroot(
        ledger,
        "append",
        json.dumps(op("ARCHIVE", {"reason": "x", "policy_ref": "p"}, story["sweet"])),
    )
    assert result.exit_code == 0
    again = memroot(
        ledger,
        "append",
        json.dumps(op("DEPRECATE", {"reason": "x", "deprecated_by": "a"}, story["sweet"])),
    )
    assert again.exit_code == 3 and "RFC-0001 lifecycle" in again.stderr
    assert "ARCHIVED" in again.stderr
    assert len(json.loads(memroot(ledger, "log", "--json").stdout)) == len(json.loads(before)) + 1


def test_namespace_refusal_names_actor_namespace_permission(ledger: Path) -> None:
    """In a namespace with a policy, an actor without the permission is refused by name."""
    append(
        ledger, op("NAMESPACE_CREATE", {"namespace_type": "PERSONAL"}, actor="alice", ns="vault")
    )
    ev = event(ledger, "ok", ns="elsewhere")
    result = memroot(
        ledger, "append", json.dumps({**assert_op([ev], "x"), "namespace_id": "vault"})
    )
    assert result.exit_code == 3
    assert "'agent-7'" in result.stderr and "'vault'" in result.stderr
    assert "ASSERT" in result.stderr


def test_rebuild_is_identical_and_verify_checks_step_9(
    ledger: Path, story: dict[str, str], tmp_path: Path
) -> None:
    """rebuild reproduces the digest; verify replays derived state; tampering fails step 9."""
    data = json.loads(memroot(ledger, "rebuild", "--json").stdout)
    assert data["identical"] is True and data["digest_before"] == data["digest_after"]
    assert (data["objects"], data["versions"], data["skipped"]) == (2, 3, 0)
    trusted = str(tmp_path / "trusted.json")
    ok = memroot(ledger, "verify", "--json", "--no-update", "--trusted", trusted)
    report = json.loads(ok.stdout)
    assert ok.exit_code == 0 and report["steps"]["9"]["checked"]
    db = apsw.Connection(str(ledger))
    db.execute(
        "UPDATE mem_objects SET value = 'Alice takes coffee' WHERE id = ? AND vto IS NULL",
        (story["tea"],),
    )
    db.close()
    bad = memroot(ledger, "verify", "--json", "--no-update", "--trusted", trusted)
    assert bad.exit_code == 1
    findings = json.loads(bad.stdout)["findings"]
    assert [f["step"] for f in findings] == [9]
    assert story["tea"] in findings[0]["message"] and "value" in findings[0]["message"]
    fixed = json.loads(memroot(ledger, "rebuild", "--json").stdout)
    assert fixed["identical"] is False and fixed["digest_after"] == data["digest_after"]
    assert memroot(ledger, "verify", "--no-update", "--trusted", trusted).exit_code == 0


@pytest.mark.parametrize("command", ["query", "why", "rebuild"])
def test_memory_commands_have_help_with_an_example(command: str) -> None:
    """Every memory command documents itself with an Example line."""
    result = CliRunner().invoke(cli, [command, "--help"], catch_exceptions=False)
    assert result.exit_code == 0 and "Example:" in result.output
    assert "--json" in result.output
