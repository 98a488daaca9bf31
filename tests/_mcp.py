"""The ``memroot mcp`` server as the official SDK's stdio client starts it, for the tests."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def server_params(
    ledger: str | Path,
    *opts: str,
    trusted: Path,
    after: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Any:
    """Return the ``StdioServerParameters`` of ``memroot -l LEDGER OPTS mcp ... AFTER`` as
    agent-7 of namespace alice, keeping its trusted state in ``trusted`` (``env``: the
    server's environment; None: the SDK's default)."""
    from mcp import StdioServerParameters

    exe = Path(sys.executable).parent / "memroot"
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "memroot.cli.main"]
    return StdioServerParameters(
        command=command[0],
        args=[
            *command[1:],
            "-l",
            str(ledger),
            *opts,
            "mcp",
            "--actor",
            "agent-7",
            "--namespace",
            "alice",
            "--trusted",
            str(trusted),
            *after,
        ],
        env=env,
    )
