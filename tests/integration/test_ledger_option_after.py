"""``-l/--ledger`` after the subcommand (``memroot log -l L``), and which one wins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli

EVENT = {
    "kind": "event",
    "stream": "s1",
    "actor_id": "alice",
    "actor_type": "HUMAN_USER",
    "role": "USER",
    "content": "I take tea without sugar",
    "namespace_id": "alice",
}


def run(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def ok_json(args: list[str], env: dict[str, str] | None = None) -> Any:
    result = run(args, env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


A_SEQS = [0, 1]  # genesis and the one event of ``ledger``
B_SEQS = [0, 1, 2, 3]  # genesis and the three events of ``other``


def _seqs(log: list[dict[str, Any]]) -> list[int]:
    return [row["seq"] for row in log]


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """A real ledger with one event, made with -l after every subcommand."""
    path = tmp_path / "a.ledger"
    assert run(["init", "-l", str(path), "--origin", "example.org/after"]).exit_code == 0
    (row,) = ok_json(["append", "-l", str(path), json.dumps(EVENT), "--json"])
    assert row["seq"] == 1
    return path


@pytest.fixture
def other(tmp_path: Path) -> Path:
    """A second, longer ledger, to tell which -l a command used."""
    path = tmp_path / "b.ledger"
    assert run(["-l", str(path), "init", "--origin", "example.org/other"]).exit_code == 0
    for text in ("one", "two", "three"):
        assert (
            run(["-l", str(path), "append", json.dumps({**EVENT, "content": text})]).exit_code == 0
        )
    return path


def test_ledger_commands_take_the_option_after_their_name(ledger: Path) -> None:
    """log, show, verify and query read the ledger named after the subcommand."""
    assert _seqs(ok_json(["log", "-l", str(ledger), "--json"])) == A_SEQS
    shown = ok_json(["show", "-l", str(ledger), "1", "--json"])
    assert shown["seq"] == 1
    verified = run(["verify", "-l", str(ledger)])
    assert verified.exit_code == 0, verified.output
    assert "checked 2 entries" in verified.stdout
    assert isinstance(ok_json(["query", "-l", str(ledger), "--json"]), list)


def test_group_subcommands_take_the_option_after_their_name(ledger: Path) -> None:
    """branch create/list and root show accept -l after the subcommand, and after the group."""
    made = ok_json(
        ["branch", "create", "-l", str(ledger), "--type", "PLANNING", "--purpose", "Q3", "--json"]
    )
    listed = ok_json(["branch", "list", "-l", str(ledger), "--json"])
    assert [b["branch_id"] for b in listed] == [made["branch_id"]]
    assert ok_json(["branch", "-l", str(ledger), "list", "--json"]) == listed

    snap = ok_json(["snapshot", "-l", str(ledger), "--json"])
    shown = ok_json(["root", "show", "-l", str(ledger), snap["memory_root"], "--json"])
    assert shown["memory_root"] == snap["memory_root"]


def test_the_value_after_the_subcommand_wins(ledger: Path, other: Path) -> None:
    """With -l before and after the subcommand, the one after it is used."""
    assert _seqs(ok_json(["-l", str(other), "log", "-l", str(ledger), "--json"])) == A_SEQS
    assert _seqs(ok_json(["-l", str(ledger), "log", "-l", str(other), "--json"])) == B_SEQS
    made = ok_json(
        ["branch", "create", "-l", str(ledger), "--type", "PLANNING", "--purpose", "x", "--json"]
    )
    nested = ["-l", str(other), "branch", "-l", str(other), "list", "-l", str(ledger), "--json"]
    assert [b["branch_id"] for b in ok_json(nested)] == [made["branch_id"]]
    inner_group = ["-l", str(ledger), "branch", "-l", str(other), "list", "--json"]
    assert ok_json(inner_group) == []  # the group's -l wins over the root's
    missing = run(["-l", str(ledger.parent / "missing.ledger"), "verify", "-l", str(ledger)])
    assert missing.exit_code == 0, missing.output


def test_the_environment_never_overrides_an_explicit_option(ledger: Path, other: Path) -> None:
    """MEMROOT_LEDGER fills in when no -l is given, wherever -l would go, and only then."""
    env = {"MEMROOT_LEDGER": str(other)}
    assert _seqs(ok_json(["log", "--json"], env)) == B_SEQS
    assert _seqs(ok_json(["-l", str(ledger), "log", "--json"], env)) == A_SEQS
    assert _seqs(ok_json(["log", "-l", str(ledger), "--json"], env)) == A_SEQS


def test_no_ledger_anywhere_is_a_usage_error_naming_the_option() -> None:
    """Without -l at any level or MEMROOT_LEDGER, a ledger command says what is missing."""
    result = CliRunner().invoke(cli, ["log"], env={"MEMROOT_LEDGER": None})
    assert result.exit_code == 2
    assert "-l/--ledger" in result.output
