"""An MCP client (the official SDK, stdio) of a server over a PostgreSQL ledger whose host cache
file was edited by another process (issue 23 points 1 and 3, through the MCP surface).

The host's derived state lives in its local cache file; an attacker without the key edits it
with ``sqlite3`` in a process of its own (a fact's value rewritten). Every tool that reads
memory (``recall``, ``why``, and ``falsify`` / ``cascade``, which read an object's state
before acting) answers with a tool error naming the edited cache and the way back; no edited
value reaches the client, no read receipt (nor anything else) is written to PostgreSQL, and
another host, with a cache of its own, still reads the honest memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed (memroot[mcp])")

from mcp import Client

from tests._mcp import server_params

FACTS = ["Alice takes tea without sugar", "Alice owns a cat"]

ATTACKER = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
done = db.execute("UPDATE mem_objects SET value = '\"MALLORY\"' WHERE id = ?", (sys.argv[2],))
assert done.rowcount >= 1
db.commit()
db.close()
"""


def _params(url: str, key: Path, tmp_path: Path) -> Any:
    env = {**os.environ, "MEMROOT_CACHE": str(tmp_path / "host.cache")}
    return server_params(url, "--key", str(key), trusted=tmp_path / "trusted.json", env=env)


def _ledger_rows(url: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as db:
        return [
            tuple(r)
            for r in db.execute(
                "SELECT 'e', k, md5(data) FROM entries UNION ALL "
                "SELECT 'c', branch, md5(note) FROM checkpoints UNION ALL "
                "SELECT 'b', no, md5(head) FROM branches ORDER BY 1, 2"
            )
        ]


class Edited:
    """A PostgreSQL ledger of two facts whose host cache file an attacker edited."""

    def __init__(self, tmp_path: Path, url: str, key: Path) -> None:
        import memroot
        from memroot.ledger.ledger import Ledger

        self.tmp, self.url, self.key = tmp_path, url, key
        self.cache = tmp_path / "host.cache"
        Ledger.init(
            url, origin="example.org/pg-mcp-cache", key_path=key, cache_path=self.cache
        ).close()
        os.environ["MEMROOT_CACHE"] = str(self.cache)
        try:
            with memroot.open(url, key_path=key, trusted=False, namespace="alice") as mem:
                said = mem.record(content="I take my tea without sugar; my cat is Tom")
                self.ids = [mem.remember(v, evidence=[said.id]).id for v in FACTS]
                mem.snapshot()
        finally:
            del os.environ["MEMROOT_CACHE"]
        done = subprocess.run(
            [sys.executable, "-c", ATTACKER, str(self.cache), self.ids[0]],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        self.before = _ledger_rows(url)

    def calls(self, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
        """Run the tool calls in one MCP session (a server over this ledger, this cache)."""

        async def session() -> list[Any]:
            async with Client(_params(self.url, self.key, self.tmp)) as c:
                return [await c.call_tool(name, args) for name, args in calls]

        return asyncio.run(session())


@pytest.fixture
def edited(tmp_path: Path, pg_url: str, pg_key: Path) -> Edited:
    return Edited(tmp_path, pg_url, pg_key)


def _text(got: Any) -> str:
    return " ".join(getattr(part, "text", "") for part in got.content)


def test_mcp_tools_refuse_an_edited_host_cache(edited: Edited) -> None:
    oid, cache, pg_url, pg_key, tmp_path = (
        edited.ids[0],
        edited.cache,
        edited.url,
        edited.key,
        edited.tmp,
    )
    tools = [
        ("recall", {}),
        ("recall", {"receipt": False}),
        ("why", {"item_id": oid}),
        ("falsify", {"item_id": oid, "reason": "r"}),
        ("cascade", {"item_id": oid}),
    ]
    for (tool, _), got in zip(tools, edited.calls(*tools), strict=True):
        text = _text(got)
        assert got.is_error, (tool, text)
        assert "is edited" in text and str(cache) in text and "Delete the file" in text, (
            tool,
            text,
        )
        assert "MALLORY" not in text and "MALLORY" not in json.dumps(got.structured_content)
    assert _ledger_rows(pg_url) == edited.before  # no receipt, nothing at all written

    # The honest ledger is untouched: another host (its own cache) reads the facts as written.
    env = {**os.environ, "MEMROOT_CACHE": str(tmp_path / "other.cache")}
    exe = str(Path(sys.executable).with_name("memroot"))
    q, v = (
        subprocess.run(
            [exe, "-l", pg_url, "--key", str(pg_key), command, "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
        )
        for command in ("query", "verify")
    )
    assert q.returncode == 0, q.stderr
    assert sorted(r["value"] for r in json.loads(q.stdout)) == sorted(FACTS)
    assert v.returncode == 0, v.stdout + v.stderr


def test_mcp_recall_by_text_refuses_a_value_edited_out_of_its_words(edited: Edited) -> None:
    (got,) = edited.calls(("recall", {"text": "tea", "receipt": False}))
    assert "MALLORY" not in _text(got)
    assert got.is_error, _text(got)
