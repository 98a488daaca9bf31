"""``-l/--ledger`` after the subcommand (``memroot log -l L``), and which one wins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

A_SEQS = [0, 1]  # genesis and the one event of ``ledger``
B_SEQS = [0, 1, 2, 3]  # genesis and the three events of ``other``


def _seqs(log: list[dict[str, Any]]) -> list[int]:
    return [row["seq"] for row in log]


@pytest.fixture
def ledger(tmp_path: Path, cmd: Any) -> Path:
    """A real ledger with one event, made with -l after every subcommand."""
    path = tmp_path / "a.ledger"
    assert cmd.run("init", "-l", str(path), "--origin", "example.org/after").exit_code == 0
    (row,) = cmd.ok_json(cmd.run("append", "-l", str(path), json.dumps(cmd.EVENT), "--json"))
    assert row["seq"] == 1
    return path


@pytest.fixture
def other(tmp_path: Path, cmd: Any) -> Path:
    """A second, longer ledger, to tell which -l a command used."""
    path = tmp_path / "b.ledger"
    assert cmd.run("-l", str(path), "init", "--origin", "example.org/other").exit_code == 0
    for text in ("one", "two", "three"):
        assert (
            cmd.run("-l", str(path), "append", json.dumps({**cmd.EVENT, "content": text})).exit_code
            == 0
        )
    return path


def test_ledger_commands_take_the_option_after_their_name(ledger: Path, cmd: Any) -> None:
    """log, show, verify and query read the ledger named after the subcommand."""
    assert _seqs(cmd.ok_json(cmd.run("log", "-l", str(ledger), "--json"))) == A_SEQS
    shown = cmd.ok_json(cmd.run("show", "-l", str(ledger), "1", "--json"))
    assert shown["seq"] == 1
    verified = cmd.run("verify", "-l", str(ledger))
    assert verified.exit_code == 0, verified.output
    assert "checked 2 entries" in verified.stdout
    assert isinstance(cmd.ok_json(cmd.run("query", "-l", str(ledger), "--json")), list)


def test_group_subcommands_take_the_option_after_their_name(ledger: Path, cmd: Any) -> None:
    """branch create/list and root show accept -l after the subcommand, and after the group."""
    made = cmd.ok_json(
        cmd.run(
            "branch", "create", "-l", str(ledger), "--type", "PLANNING", "--purpose", "Q3", "--json"
        )
    )
    listed = cmd.ok_json(cmd.run("branch", "list", "-l", str(ledger), "--json"))
    assert [b["branch_id"] for b in listed] == [made["branch_id"]]
    assert cmd.ok_json(cmd.run("branch", "-l", str(ledger), "list", "--json")) == listed

    snap = cmd.ok_json(cmd.run("snapshot", "-l", str(ledger), "--json"))
    shown = cmd.ok_json(cmd.run("root", "show", "-l", str(ledger), snap["memory_root"], "--json"))
    assert shown["memory_root"] == snap["memory_root"]


def test_the_value_after_the_subcommand_wins(ledger: Path, other: Path, cmd: Any) -> None:
    """With -l before and after the subcommand, the one after it is used."""
    assert (
        _seqs(cmd.ok_json(cmd.run("-l", str(other), "log", "-l", str(ledger), "--json"))) == A_SEQS
    )
    assert (
        _seqs(cmd.ok_json(cmd.run("-l", str(ledger), "log", "-l", str(other), "--json"))) == B_SEQS
    )
    made = cmd.ok_json(
        cmd.run(
            "branch", "create", "-l", str(ledger), "--type", "PLANNING", "--purpose", "x", "--json"
        )
    )
    nested = ["-l", str(other), "branch", "-l", str(other), "list", "-l", str(ledger), "--json"]
    assert [b["branch_id"] for b in cmd.ok_json(cmd.run(*nested))] == [made["branch_id"]]
    inner_group = ["-l", str(ledger), "branch", "-l", str(other), "list", "--json"]
    assert cmd.ok_json(cmd.run(*inner_group)) == []  # the group's -l wins over the root's
    missing = cmd.run("-l", str(ledger.parent / "missing.ledger"), "verify", "-l", str(ledger))
    assert missing.exit_code == 0, missing.output


def test_the_environment_never_overrides_an_explicit_option(
    ledger: Path, other: Path, cmd: Any
) -> None:
    """MEMROOT_LEDGER fills in when no -l is given, wherever -l would go, and only then."""
    env = {"MEMROOT_LEDGER": str(other)}
    assert _seqs(cmd.ok_json(cmd.run("log", "--json", env=env))) == B_SEQS
    assert _seqs(cmd.ok_json(cmd.run("-l", str(ledger), "log", "--json", env=env))) == A_SEQS
    assert _seqs(cmd.ok_json(cmd.run("log", "-l", str(ledger), "--json", env=env))) == A_SEQS


def test_no_ledger_anywhere_is_a_usage_error_naming_the_option(cmd: Any) -> None:
    """Without -l at any level or MEMROOT_LEDGER, a ledger command says what is missing."""
    result = cmd.run("log", env={"MEMROOT_LEDGER": None})
    assert result.exit_code == 2
    assert "-l/--ledger" in result.output
