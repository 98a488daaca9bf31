"""The README's "Operating many hosts" example runs as written and ends in a passing verify."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[2] / "README.md"


def test_operating_many_hosts_runs_as_written(tmp_path: Path) -> None:
    """The section's shell block exits 0 in an empty directory, its verify says OK."""
    text = README.read_text("utf-8")
    section = text[text.index("## Operating many hosts") :]
    start = section.index("```sh\n") + len("```sh\n")
    block = section[start : section.index("```", start)]
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "MEMROOT_TRUSTED": str(tmp_path / "trusted.json"),
    }
    r = subprocess.run(
        ["bash", "-euc", block], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert "OK: every step holds" in r.stdout
