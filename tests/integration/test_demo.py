"""`memroot demo`: the quick-start story runs, verifies every step and catches the tamper."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from memroot.cli.main import cli


def test_demo_verifies_and_catches_tampering(tmp_path: Path):
    """The demo ends with a clean ten-step verification and a content edit caught by verify and
    refused by a plain read."""
    work = tmp_path / "demo"
    result = CliRunner().invoke(cli, ["demo", "--keep", str(work)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "steps [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] checked, 0 violations" in out
    assert "caught: step 4: branch main entry 4" in out
    assert "a plain read refuses it: strict read refused: branch main entry 4: step 4" in out
    assert "canonical root unchanged by it: True" in out
    assert "CASCADE entry seq" in out and "depth 1: memory_root" in out
    assert (work / "agent.ledger").exists() and (work / "tampered.ledger").exists()
    key = work / "agent.ledger.key"
    assert key.stat().st_mode & 0o077 == 0
    secret = key.read_text().strip().split("+", 4)[4]  # base64 may itself contain "+"
    assert "PRIVATE+KEY" not in out and secret not in out
