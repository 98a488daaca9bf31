"""MCP confinement: a server's client reaches only its own namespace (issue 23 point 7).

Alice's server (its own process; the official SDK's client, over stdio and over HTTP) is
asked, tool by tool, about Bob's objects, events and branches. Each answer must be the one a
missing id gets, word for word, and nothing may be written: every branch's head is unchanged.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed (extra memroot[mcp])")

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

import memroot
from memroot.ledger.ledger import Ledger
from memroot.memory_root import Roots
from memroot.projections import requests

MISSING_OBJECT = "01a23394-0000-7000-8000-00000000abcd"
MISSING_EVENT = "01a23394-0000-7000-8000-00000000dcba"
MISSING_BRANCH = "plan-000000000000"


def _heads(path: Path) -> dict[str, tuple[int, bytes]]:
    with Ledger.open(path, readonly=True, strict=False) as ledger:
        return {b.name: (b.size, bytes(b.head)) for b in ledger.store.branches()}


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Any]:
    """A ledger where Bob and Alice each hold events, objects and a branch."""
    path = tmp_path / "shared.ledger"
    w: dict[str, Any] = {"path": path}
    with memroot.open(path, actor="agent-b", namespace="bob") as bob:
        said = bob.record(content="Bob: the vault code is quokka-zebra")
        w["bob_event"] = said.id
        w["bob_object"] = bob.remember("Bob's vault code is quokka-zebra", evidence=[said.id]).id
        doomed = bob.remember("Bob's car is red", evidence=[said.id]).id
        bob.falsify(doomed, "it is blue")
        w["bob_falsified"] = doomed
        w["bob_branch"] = bob.fork("bob's plan", branch_type="PLANNING", expiry_days=2)
    with memroot.open(path, actor="agent-a", namespace="alice") as alice:
        said = alice.record(content="I take tea")
        w["alice_event"] = said.id
        w["alice_object"] = alice.remember("Alice takes tea", evidence=[said.id]).id
        # The library lets Alice cite Bob's event (his namespace has no policy); her server
        # must still not show it.
        w["alice_mixed"] = alice.remember(
            "Alice and Bob share a vault", evidence=[said.id, w["bob_event"]]
        ).id
        w["alice_branch"] = alice.fork("alice's plan", branch_type="PLANNING", expiry_days=2)
        alice.snapshot()
    with memroot.open(path, actor="agent-b", namespace="bob") as bob:
        # Bob relates his object to Alice's: an operation of his namespace touching hers.
        by = requests.Actor("agent-b", "AI_AGENT", "bob", "memroot/1")
        Roots(bob.ledger).append(requests.relate(by, "SUPPORTS", w["alice_mixed"], w["bob_object"]))
    return w


def _run(path: Path, session: Any, transport: str) -> Any:
    """Run ``session`` against Alice's server: over stdio, or over HTTP with her token."""
    exe = str(Path(sys.executable).parent / "memroot")
    trusted = str(path.parent / "trusted.json")
    if transport == "stdio":
        params = StdioServerParameters(
            command=exe,
            args=["-l", str(path), "mcp", "--actor", "agent-a", "--namespace", "alice",
                  "--trusted", trusted],
        )  # fmt: skip

        async def over_stdio() -> Any:
            async with Client(params) as client:
                return await session(client)

        return asyncio.run(over_stdio())
    added = subprocess.run(
        [exe, "-l", str(path), "mcp", "token", "add", "--actor", "agent-a", "--namespace",
         "alice"], capture_output=True, text=True, check=True,
    )  # fmt: skip
    token = added.stdout.strip()
    proc = subprocess.Popen(
        [exe, "-l", str(path), "mcp", "--http", "127.0.0.1:0", "--trusted", trusted],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    url = proc.stderr.readline().split("serving ", 1)[1].strip()

    async def over_http() -> Any:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(url, http_client=http)) as client:
            return await session(client)

    try:
        return asyncio.run(over_http())
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _pairs(w: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any], str, str]]:
    """(tool, arguments naming Bob's item, the same naming a missing one, Bob's id, missing)."""
    bo, be, bb = w["bob_object"], w["bob_event"], w["bob_branch"]
    mo, me, mb = MISSING_OBJECT, MISSING_EVENT, MISSING_BRANCH
    ao, ab = w["alice_object"], w["alice_branch"]
    return [
        ("remember", {"value": "x", "evidence": [be]}, {"value": "x", "evidence": [me]}, be, me),
        ("remember", {"value": "x", "branch": bb}, {"value": "x", "branch": mb}, bb, mb),
        ("recall", {"anchor": be}, {"anchor": me}, be, me),
        ("recall", {"branch": bb}, {"branch": mb}, bb, mb),
        ("why", {"item_id": bo}, {"item_id": mo}, bo, mo),
        ("why", {"item_id": be}, {"item_id": me}, be, me),
        ("why", {"item_id": ao, "branch": bb}, {"item_id": ao, "branch": mb}, bb, mb),
        ("snapshot", {"branch": bb}, {"branch": mb}, bb, mb),
        ("falsify", {"item_id": bo, "reason": "r"}, {"item_id": mo, "reason": "r"}, bo, mo),
        ("falsify", {"item_id": ao, "reason": "r", "evidence": [be]},
         {"item_id": ao, "reason": "r", "evidence": [me]}, be, me),
        ("cascade", {"item_id": w["bob_falsified"]}, {"item_id": mo}, w["bob_falsified"], mo),
        ("cascade", {"item_id": w["bob_falsified"], "apply": True},
         {"item_id": mo, "apply": True}, w["bob_falsified"], mo),
        ("branch_merge", {"branch": bb, "objects": [ao]}, {"branch": mb, "objects": [ao]}, bb, mb),
        ("branch_merge", {"branch": ab, "objects": [bo]}, {"branch": ab, "objects": [mo]}, bo, mo),
    ]  # fmt: skip


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_every_tool_answers_for_another_namespace_as_for_a_missing_id(
    world: dict[str, Any], transport: str
) -> None:
    """Bob's objects, events and branches: not found, word for word as a missing id; no write."""
    pairs = _pairs(world)
    before = _heads(world["path"])

    async def session(c: Any) -> list[tuple[Any, Any]]:
        out = []
        for name, foreign, missing, _, _ in pairs:
            out.append((await c.call_tool(name, foreign), await c.call_tool(name, missing)))
        return out

    answers = _run(world["path"], session, transport)
    for (name, _, _, fid, mid), (foreign, missing) in zip(pairs, answers, strict=True):
        assert foreign.is_error and missing.is_error, (name, foreign, missing)
        f_text = foreign.content[0].text.replace(fid, "ID")
        m_text = missing.content[0].text.replace(mid, "ID")
        assert f_text == m_text, (name, f_text, m_text)
        assert "NotFoundError" in f_text, (name, f_text)
        assert foreign.structured_content is None
    assert _heads(world["path"]) == before  # nothing was written on any branch


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_reads_show_nothing_of_another_namespace(world: dict[str, Any], transport: str) -> None:
    """recall, why (of an object citing Bob's event), the root resource: nothing of Bob's."""

    async def session(c: Any) -> dict[str, Any]:
        return {
            "recall": (
                await c.call_tool("recall", {"text": "vault", "mode": "AUDIT"})
            ).structured_content,
            "why": (await c.call_tool("why", {"item_id": world["alice_mixed"]})).structured_content,
            "root": (await c.read_resource("memroot://root/latest")).contents[0].text,
            "verify": (await c.call_tool("verify", {})).structured_content,
            # Her own ids pass the same checks (the controls of the refusals above).
            "cites": (
                await c.call_tool("remember", {"value": "tea", "evidence": [world["alice_event"]]})
            ).structured_content,
            "anchored": (
                await c.call_tool("recall", {"anchor": world["alice_event"], "receipt": False})
            ).structured_content,
            "falsified": (
                await c.call_tool(
                    "falsify",
                    {"item_id": world["alice_object"], "reason": "coffee now",
                     "evidence": [world["alice_event"]]},
                )
            ).structured_content,
            "on_branch": (
                await c.call_tool("snapshot", {"branch": world["alice_branch"]})
            ).structured_content,
        }  # fmt: skip

    out = _run(world["path"], session, transport)
    assert [r["value"] for r in out["recall"]["results"]] == ["Alice and Bob share a vault"]
    why = out["why"]
    assert why["object"]["evidence_ids"] == [world["alice_event"], world["bob_event"]]
    assert [e["event_id"] for e in why["evidence"]] == [world["alice_event"]]
    assert why["evidence_outside_namespace"] == 1
    assert why["operations_outside_namespace"] == 1  # Bob's RELATE: counted, not shown
    assert [o["op_type"] for o in why["operations"]] == ["ASSERT"]
    served = json.dumps(out)
    assert "quokka-zebra" not in served and "agent-b" not in served
    root = json.loads(out["root"])
    assert set(root["projections"][0]) == {"id", "rule", "digest"}  # no per-namespace counts
    assert out["verify"]["ok"] is True and isinstance(out["verify"]["findings"], int)
    assert out["cites"]["evidence_ids"] == [world["alice_event"]]
    assert {r["id"] for r in out["anchored"]["results"]} >= {world["alice_object"]}
    assert out["falsified"]["state"] == "falsified"
    assert out["on_branch"]["branch"] == world["alice_branch"]


def test_a_cascade_reaching_another_namespace_is_refused(tmp_path: Path) -> None:
    """Bob built on Alice's object: her cascade from it is refused, Bob's id unnamed, no write."""
    path = tmp_path / "shared.ledger"
    with memroot.open(path, actor="agent-a", namespace="alice") as alice:
        said = alice.record(content="the bridge is open")
        hers = alice.remember("The bridge is open", evidence=[said.id]).id
    with memroot.open(path, actor="agent-b", namespace="bob") as bob:
        said = bob.record(content="I will drive over the bridge")
        his = bob.remember("Bob drives over the bridge", evidence=[said.id]).id
        by = requests.Actor("agent-b", "AI_AGENT", "bob", "memroot/1")
        Roots(bob.ledger).append(requests.relate(by, "SUPPORTS", hers, his))
    with memroot.open(path, actor="agent-a", namespace="alice") as alice:
        alice.falsify(hers, "the bridge is closed")
    before = _heads(path)

    async def session(c: Any) -> list[Any]:
        return [
            await c.call_tool("cascade", {"item_id": hers}),
            await c.call_tool("cascade", {"item_id": hers, "apply": True}),
        ]

    for r in _run(path, session, "stdio"):
        assert r.is_error
        text = r.content[0].text
        assert "RefusedError: the cascade reaches 1 memory object(s) of other namespaces" in text
        assert his not in text
    assert _heads(path) == before
