"""The memory-root commands of the CLI: snapshot, roots, root show/diff, selfmodel show/record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli

VIOLATION = {
    "kind": "op",
    "op_type": "VIOLATION_RECORDED",
    "actor_id": "verifier-1",
    "actor_type": "SYSTEM_PROCESS",
    "namespace_id": "agent-7",
    "policy_version": "policy/1",
    "payload": {"motif": "TITLE_MISMATCH", "source": "Quantum chromodynamics"},
}
CORRECTION = {
    "kind": "op",
    "op_type": "CORRECTION_APPLIED",
    "actor_id": "operator",
    "actor_type": "HUMAN_USER",
    "namespace_id": "agent-7",
    "policy_version": "policy/1",
    "payload": {
        "correction": "cite the spin-glass article",
        "accepted_by": "verifier-2",
        "motif": "TITLE_MISMATCH",
    },
}


def memroot(ledger: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(ledger), *args], catch_exceptions=False)


def ok_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    path = tmp_path / "agent.ledger"
    assert (
        memroot(path, "init", "--origin", "example.org/roots", "--snapshot-every", "4").exit_code
        == 0
    )
    return path


def _import(ledger: Path, tmp_path: Path, items: list[dict[str, Any]]) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps(i) + "\n" for i in items))
    assert memroot(ledger, "import", str(f)).exit_code == 0


def test_snapshot_roots_show_diff_end_to_end(ledger: Path, tmp_path: Path):
    """Automatic and on-demand roots are listed newest first, shown decoded and diffed."""
    _import(ledger, tmp_path, [VIOLATION] * 5)
    snap = ok_json(memroot(ledger, "snapshot", "--json"))
    assert snap["created"] and snap["checkpoint_size"] == snap["seq"] + 1
    again = ok_json(memroot(ledger, "snapshot", "--json"))
    assert not again["created"] and again["memory_root"] == snap["memory_root"]
    chain = ok_json(memroot(ledger, "roots", "--json"))
    assert chain[0]["memory_root"] == snap["memory_root"]
    assert chain[-1]["parent"] is None and all(r["state"] == "live" for r in chain)
    assert [r["seq"] for r in chain] == [7, 5]  # automatic after entry 4, then on demand
    shown = ok_json(memroot(ledger, "root", "show", snap["memory_root"][:12], "--json"))
    motifs = next(s for s in shown["summaries"] if s["id"] == "failure-motifs")
    assert motifs["summary"] == {
        "TITLE_MISMATCH": {"count": 5, "error": 0, "sources": {"Quantum chromodynamics": [5, 0]}}
    }
    assert motifs["params"] == {
        "motifs": [],
        "namespaces": [],
        "top_motifs": 32,
        "top_sources": 32,
    }
    diff = ok_json(
        memroot(ledger, "root", "diff", chain[1]["memory_root"], chain[0]["memory_root"], "--json")
    )
    assert diff["a_is_ancestor_of_b"]
    changed = {p["id"]: p for p in diff["projections"]}["failure-motifs"]
    assert changed["status"] == "changed"
    assert changed["changed"]["TITLE_MISMATCH"]["b"]["count"] == 5
    human = memroot(ledger, "root", "diff", chain[1]["memory_root"], chain[0]["memory_root"])
    assert "~ failure-motifs" in human.stdout and "= corrections" in human.stdout
    assert "TITLE_MISMATCH" in memroot(ledger, "root", "show", snap["memory_root"]).stdout
    assert snap["memory_root"] in memroot(ledger, "roots").stdout
    verified = memroot(ledger, "verify")
    assert verified.exit_code == 0 and "step  8 memory roots replayed: ok" in verified.stdout


def test_corrections_appear_in_the_next_root(ledger: Path, tmp_path: Path):
    """An accepted correction appended through the CLI is in the next root's summary."""
    _import(ledger, tmp_path, [VIOLATION, CORRECTION])
    snap = ok_json(memroot(ledger, "snapshot", "--json"))
    shown = ok_json(memroot(ledger, "root", "show", snap["memory_root"], "--json"))
    corr = next(s for s in shown["summaries"] if s["id"] == "corrections")
    [item] = corr["summary"]["recent"]
    assert item["accepted_by"] == "verifier-2" and corr["count"] == 1
    assert corr["summary"]["by_motif"] == {"TITLE_MISMATCH": [1, 0]}  # corrections v2: [c, e]


def test_bad_audit_record_is_refused_with_the_field(ledger: Path):
    """A VIOLATION_RECORDED without a source exits 3 naming the field; nothing is written."""
    bad = {**VIOLATION, "payload": {"motif": "TITLE_MISMATCH"}}
    result = memroot(ledger, "append", json.dumps(bad))
    assert result.exit_code == 3 and "source" in result.stderr
    assert ok_json(memroot(ledger, "log", "--json"))[-1]["type"] == "GENESIS"


def test_unknown_or_ambiguous_root_is_a_clear_error(ledger: Path):
    """root show with a root that is not stored, or not hex, exits 3 with a message."""
    result = memroot(ledger, "root", "show", "ab" * 32)
    assert result.exit_code == 3 and "no memory_root" in result.stderr
    result = memroot(ledger, "root", "show", "xyz1")
    assert result.exit_code == 3 and "hex" in result.stderr


def test_selfmodel_record_and_show(ledger: Path, tmp_path: Path):
    """A SelfModel recorded from JSON cites the latest live root and shows its claims."""
    assert "no SelfModel" in memroot(ledger, "selfmodel", "show").stdout
    _import(ledger, tmp_path, [VIOLATION] * 2)
    root = ok_json(memroot(ledger, "snapshot", "--json"))["memory_root"]
    model = tmp_path / "selfmodel.json"
    model.write_text(
        json.dumps(
            {
                "agent_id": "agent-7",
                "identity": {"name": "Arborist research agent"},
                "capabilities": [
                    {
                        "name": "cite-sources",
                        "claim": "cites the article a claim comes from",
                        "evidence": ["bench/titles-v3"],
                    }
                ],
            }
        )
    )
    recorded = ok_json(memroot(ledger, "selfmodel", "record", str(model), "--json"))
    assert recorded["memory_root"] == root
    shown = ok_json(memroot(ledger, "selfmodel", "show", "--json"))
    assert shown == recorded and shown["memory_root_state"] == "live"
    human = memroot(ledger, "selfmodel", "show").stdout
    assert "claims cite-sources" in human and root in human
    model.write_text(json.dumps({"agent_id": "agent-7", "colour": "red"}))
    assert memroot(ledger, "selfmodel", "record", str(model)).exit_code == 3


def test_branch_option_snapshots_a_branch(ledger: Path, tmp_path: Path):
    """--branch snapshots one branch; its first root links to main's root at the fork."""
    _import(ledger, tmp_path, [VIOLATION] * 2)
    main_root = ok_json(memroot(ledger, "snapshot", "--json"))["memory_root"]
    created = memroot(
        ledger,
        "branch",
        "create",
        "--type",
        "SIMULATION",
        "--purpose",
        "what if",
        "--id",
        "sim-1",
        "--json",
    )
    assert created.exit_code == 0, created.output
    snap = ok_json(memroot(ledger, "snapshot", "--branch", "sim-1", "--json"))
    assert snap["branch"] == "sim-1" and snap["parent"] == main_root
    chain = ok_json(memroot(ledger, "roots", "--branch", "sim-1", "--json"))
    assert [r["memory_root"] for r in chain] == [snap["memory_root"], main_root]


@pytest.mark.parametrize(
    "command",
    [
        ["snapshot"],
        ["roots"],
        ["root", "show"],
        ["root", "diff"],
        ["selfmodel", "show"],
        ["selfmodel", "record"],
    ],
)
def test_every_command_has_help_with_an_example(command: list[str]):
    """Each command documents itself, with an Example line."""
    result = CliRunner().invoke(cli, [*command, "--help"], catch_exceptions=False)
    assert result.exit_code == 0 and "Example:" in result.stdout
