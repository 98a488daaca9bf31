"""`why --branch`: a branch object's history and evidence, each proven in its own branch's tree."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from memroot.cli.main import cli
from memroot.ledger import merkle
from memroot.ledger.note import Verifier, open_checkpoint


def run(path: Path, *args: str) -> dict | list:
    result = CliRunner().invoke(cli, ["-l", str(path), *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _event(content: str) -> str:
    """A user's event request, as `memroot append` takes it."""
    return json.dumps(
        {
            "kind": "event",
            "stream": "s",
            "actor_id": "alice",
            "actor_type": "HUMAN_USER",
            "role": "USER",
            "content": content,
            "namespace_id": "ns",
        }
    )


def _assert(event_id: str, epistemic: str, value: str) -> str:
    """An agent's ASSERT of a fact citing ``event_id``, as `memroot append` takes it."""
    return json.dumps(
        {
            "kind": "op",
            "op_type": "ASSERT",
            "actor_id": "agent",
            "actor_type": "AI_AGENT",
            "namespace_id": "ns",
            "policy_version": "p/1",
            "payload": {
                "object_type": "FACT",
                "epistemic_type": epistemic,
                "source_type": "USER_STATED",
                "evidence_ids": [event_id],
                "value": value,
                "confidence": None,
                "salience": 0.5,
            },
        }
    )


def test_why_in_a_branch_proves_each_step_in_its_own_tree(tmp_path: Path):
    """Evidence from before the fork is proven in main's tree, the branch's ASSERT in its own."""
    path = tmp_path / "w.ledger"
    vkey = run(path, "init")["vkey"]
    event = run(path, "append", _event("I might move to Hangzhou"))[0]
    branch = run(path, "branch", "create", "--type", "SIMULATION", "--purpose", "move?")
    bid = branch["branch_id"]
    made = run(
        path, "append", "-b", bid, _assert(event["id"], "HYPOTHETICAL", "Alice moves to Hangzhou")
    )[0]
    data = run(path, "why", made["id"], "--branch", bid)
    assert data["object"]["id"] == made["id"]
    [op] = data["operations"]
    [ev] = data["evidence"]
    assert (op["branch"], op["seq"]) == (bid, made["seq"])
    assert (ev["branch"], ev["seq"]) == ("main", event["seq"])
    verifier = Verifier.from_vkey(vkey)
    for step in (op, ev):
        cp = open_checkpoint(data["checkpoints"][step["branch"]]["note"], [verifier]).checkpoint
        merkle.verify_inclusion(
            bytes.fromhex(step["entry_hash"]),
            step["seq"],
            cp.size,
            [bytes.fromhex(h) for h in step["proof"]],
            cp.root,
        )
    missing = CliRunner().invoke(cli, ["-l", str(path), "why", made["id"]], catch_exceptions=False)
    assert missing.exit_code == 3  # the branch's object is not on main


def test_why_in_a_branch_shows_the_branch_s_falsification_states(tmp_path: Path):
    """A falsification on a branch is in `why --branch`'s states, not in main's."""
    path = tmp_path / "w.ledger"
    run(path, "init")
    event = run(path, "append", _event("I live in Chengdu"))[0]
    made = run(path, "append", _assert(event["id"], "OBSERVED", "Alice lives in Chengdu"))[0]
    bid = run(path, "branch", "create", "--type", "SIMULATION", "--purpose", "what if")["branch_id"]
    run(path, "falsify", made["id"], "-b", bid, "--reason", "not in this world")
    on_branch = run(path, "why", made["id"], "--branch", bid)
    assert [s["state"] for s in on_branch["states"]] == ["falsified"]
    assert on_branch["states"][0]["branch"] == bid
    assert run(path, "why", made["id"])["states"] == []
