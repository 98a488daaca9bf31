"""The README's examples for the facade, receipts and report run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _block(name: str, lang: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"<!-- example: {re.escape(name)} -->\n```{lang}\n(.*?)```", text, re.S)
    assert m is not None, name
    return m.group(1)


def _env(tmp_path: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "MEMROOT_TRUSTED": str(tmp_path / "trusted.json"),
    }


def test_lifecycle_example_runs(tmp_path: Path) -> None:
    """The lifecycle example: stale, restore, forget with its policy, branches, closing."""
    out = subprocess.run(
        [sys.executable, "-c", _block("facade-lifecycle", "python")],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "on_dependents" in out.stdout and "this Memory is closed" in out.stdout


def test_receipts_example_runs(tmp_path: Path) -> None:
    """The receipts example prints the value the run was handed, then the JSON."""
    out = subprocess.run(
        ["bash", "-e", "-c", _block("receipts", "sh")],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert re.search(r"v1  live       Alice takes tea\n", out.stdout)
    assert '"value": "Alice takes tea"' in out.stdout


def test_report_safety_example_runs(tmp_path: Path) -> None:
    """The report example refuses to overwrite the ledger and replaces its own page."""
    out = subprocess.run(
        ["bash", "-e", "-c", _block("report-safety", "sh")],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "refused (exit 3)" in out.stdout
    assert out.stdout.count("wrote safe-report.html") == 2
    assert (tmp_path / "safe.ledger").read_bytes()[:16] == b"SQLite format 3\x00"
