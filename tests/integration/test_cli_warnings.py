"""Warnings a command raises are shown once, after it ran, and the command ends.

The root group records warnings while a command runs (a witness or publication problem after
a committed checkpoint is printed as ``warning: ...``); any other warning is shown through
``warnings.showwarning``. Shown while still recording, it was recorded again, so the list
being shown grew as it was read and the command never returned. Run in a process of its own
(a loop that never ends must fail the test by its timeout, not hang the suite).
"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import warnings
import click
from click.testing import CliRunner
from memroot.cli.main import cli
from memroot.ledger.transparency.witness import WitnessWarning

@cli.command("warn-twice")
def warn_twice():
    warnings.warn("something deprecated", DeprecationWarning, stacklevel=1)
    warnings.warn("the witness did not answer", WitnessWarning, stacklevel=1)
    click.echo("done")

result = CliRunner().invoke(cli, ["warn-twice"])
print("EXIT", result.exit_code)
print(result.output)
"""


def test_a_command_that_warns_ends_and_shows_each_warning_once() -> None:
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", SCRIPT], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "EXIT 0" in done.stdout and "done" in done.stdout, done.stdout
    assert done.stdout.count("warning: the witness did not answer") == 1, done.stdout
    assert done.stdout.count("something deprecated") == 1, done.stdout
