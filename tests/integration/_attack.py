"""What the attack tests share: the attacker's process, the file's counts, the requests.

The attacker runs in a process of its own with plain ``sqlite3`` (no memroot code, no key)
and edits the ledger file as anyone with write access to it could. ``counts`` reads the
entries and checkpoints with apsw (the library memroot's own connections use: a second SQLite
library in the test process would drop their POSIX locks when it closes).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw

ATTACKER = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript(sys.argv[2])
db.commit()
db.close()
"""


def attacker(path: Path, sql: str) -> None:
    """Run ``sql`` on the ledger file in a process of its own (the attacker's)."""
    done = subprocess.run(
        [sys.executable, "-c", ATTACKER, str(path), sql], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def counts(path: Path) -> tuple[int, int]:
    """(entries, checkpoints) in the file: what an attack must leave as it found it."""
    db = apsw.Connection(str(path))
    try:
        n = db.execute("SELECT count(*) FROM entries").fetchone()[0]
        c = db.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
        return int(n), int(c)
    finally:
        db.close()


def event(content: str) -> dict[str, Any]:
    """An ``append`` request for a user's event in namespace ``alice``."""
    return {
        "kind": "event",
        "stream": "s",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "role": "USER",
        "content": content,
        "namespace_id": "alice",
    }


def op(op_type: str, payload: dict[str, Any], target: str | None = None) -> dict[str, Any]:
    """An ``append`` request for an agent's operation in namespace ``alice``."""
    d: dict[str, Any] = {
        "kind": "op",
        "op_type": op_type,
        "actor_id": "agent-7",
        "actor_type": "AI_AGENT",
        "namespace_id": "alice",
        "policy_version": "policy/1",
        "payload": payload,
    }
    if target is not None:
        d["target_id"] = target
    return d


def mcp_recall(path: Path) -> Any:
    """Call the MCP ``recall`` tool (a receipt asked for) as agent-7 in namespace ``alice``,
    through the official SDK's client and a ``memroot mcp`` server of the ledger at ``path``."""
    from mcp import Client, StdioServerParameters

    exe = Path(sys.executable).parent / "memroot"
    params = StdioServerParameters(
        command=str(exe),
        args=["-l", str(path), "mcp", "--actor", "agent-7", "--namespace", "alice"],
    )

    async def main() -> Any:
        async with Client(params) as client:
            return await client.call_tool("recall", {"receipt": True})

    return asyncio.run(main())


def fact(evidence_id: str, value: str) -> dict[str, Any]:
    """An ``append`` request for an agent's ``ASSERT`` of a fact citing ``evidence_id``."""
    return op(
        "ASSERT",
        {
            "object_type": "FACT",
            "epistemic_type": "OBSERVED",
            "source_type": "USER_STATED",
            "evidence_ids": [evidence_id],
            "value": value,
            "confidence": None,
            "salience": 0.5,
        },
    )


def two_facts(path: Path) -> Path:
    """Write a ledger at ``path`` holding two of Alice's facts, each with its evidence event."""
    import memroot

    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        said = mem.record(content="I take my tea without sugar")
        mem.remember("Alice takes tea without sugar", evidence=[said.id])
        other = mem.record(content="I live in Lyon")
        mem.remember("Alice lives in Lyon", evidence=[other.id])
    return path


def opened(path: Path) -> Any:
    """Open the memory at ``path`` as agent-7 in namespace ``alice`` (a ``memroot.Memory``)."""
    import memroot

    return memroot.open(path, actor="agent-7", namespace="alice", create=False)


AGENT = r"""
import sys, memroot
with memroot.open(sys.argv[1], actor="agent-8", namespace="alice", create=False) as mem:
    exec(sys.argv[2])
"""


def other_agent(path: Path, code: str) -> None:
    """Run ``code`` (with ``mem`` open on the ledger) in another agent's process."""
    done = subprocess.run(
        [sys.executable, "-c", AGENT, str(path), code], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
