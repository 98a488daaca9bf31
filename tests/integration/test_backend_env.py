"""A bad MEMROOT_BACKEND is refused by name with a usage error, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("value", ["bogus", "rust"])
def test_a_bad_backend_value_is_a_usage_error_without_traceback(value: str) -> None:
    """``MEMROOT_BACKEND=bogus memroot --version`` exits 2 naming the variable and the value."""
    env = {**os.environ, "MEMROOT_BACKEND": value}
    done = subprocess.run(
        [sys.executable, "-c", "from memroot.cli import run; run()", "--version"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "error: MEMROOT_BACKEND must be 'native' or 'python'" in done.stderr
    assert repr(value) in done.stderr


def test_the_console_script_runs_through_the_guard() -> None:
    """``memroot.cli.run`` with a valid backend runs the CLI (``--version`` names it)."""
    done = subprocess.run(
        [sys.executable, "-c", "from memroot.cli import run; run()", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "backend:" in done.stdout
