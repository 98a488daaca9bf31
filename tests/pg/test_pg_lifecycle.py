"""Strict reads of inherited objects on a fork of a PostgreSQL ledger (issue 28 point 1)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from memroot.cli.main import cli


def _ok(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output)
    return result


def test_inherited_object_on_a_fork_reads_strictly_on_postgres(pg_url: str, pg_key: Path) -> None:
    """query/why --branch (and --anchor) serve an inherited object; a merge lands; verify OK."""
    base = ["-l", pg_url, "--key", str(pg_key)]
    _ok(*base, "init", "--origin", "example.org/pg-lifecycle")
    event = {
        "kind": "event",
        "stream": "s",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "role": "USER",
        "content": "I like tea",
        "namespace_id": "alice",
    }
    e = json.loads(_ok(*base, "append", json.dumps(event), "--json").stdout)[0]["id"]
    payload = {
        "object_type": "FACT",
        "epistemic_type": "ASSERTED",
        "source_type": "USER_STATED",
        "evidence_ids": [e],
        "value": "Alice likes tea",
        "confidence": None,
        "salience": 0.5,
    }
    op = {
        "kind": "op",
        "op_type": "ASSERT",
        "actor_id": "agent",
        "actor_type": "AI_AGENT",
        "namespace_id": "alice",
        "policy_version": "p/1",
        "payload": payload,
    }
    o = json.loads(_ok(*base, "append", json.dumps(op), "--json").stdout)[0]["id"]
    b = _ok(*base, "branch", "create", "--type", "SIMULATION", "--purpose", "p").stdout.strip()
    for extra in ((), ("--anchor", e)):
        got = json.loads(_ok(*base, "query", "--branch", b, *extra, "--json").stdout)
        assert [r["id"] for r in got] == [o]
    assert json.loads(_ok(*base, "why", o, "--branch", b, "--json").stdout)["object"]["id"] == o
    f = json.loads(
        _ok(*base, "append", "-b", b, json.dumps({**event, "parent_event_id": e}), "--json").stdout
    )[0]["id"]
    x = json.loads(
        _ok(
            *base,
            "append",
            "-b",
            b,
            json.dumps({**op, "payload": {**payload, "evidence_ids": [f]}}),
            "--json",
        ).stdout
    )[0]["id"]
    merged = json.loads(
        _ok(*base, "branch", "merge", b, "--objects", x, "--actor", "alice", "--json").stdout
    )
    new = merged["items"][0]["new_object_id"]
    got = json.loads(_ok(*base, "query", "--anchor", e, "--json").stdout)
    assert {r["id"] for r in got} == {o, new}
    assert json.loads(_ok(*base, "verify", "--json").stdout)["ok"]
