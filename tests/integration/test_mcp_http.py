"""`memroot mcp --http`: many clients over the SDK's streamable HTTP, one bearer token each.

The server runs in its own process, bound to 127.0.0.1 on a free port; every client (the
official SDK's streamable HTTP client) runs in a process of its own too, so two clients with
two tokens talk to the server at once.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed (extra memroot[mcp])")

import httpx2

import memroot
from memroot.ledger.ledger import Ledger

MEMROOT = str(Path(sys.executable).parent / "memroot")

CLIENT = textwrap.dedent(
    """
    import asyncio, json, sys
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    url, token, calls, mode = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]

    async def main():
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        out = []
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as c:
            for name, args in calls:
                if name == "wait":  # block until the test says go on (one line on stdin)
                    print(json.dumps({"ready": out}), flush=True)
                    sys.stdin.readline()
                    continue
                try:
                    r = await c.call_tool(name, args)
                    out.append({"error": r.is_error, "text": r.content[0].text,
                                "data": r.structured_content})
                except Exception as e:  # the transport refused (e.g. 401 after a revoke)
                    out.append({"error": True, "raised": type(e).__name__, "text": str(e)})
                    break
        print(json.dumps({"done": out}), flush=True)

    asyncio.run(main())
    """
)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MEMROOT, *args], capture_output=True, text=True, timeout=120)


def _token(path: Path, actor: str, namespace: str) -> dict[str, Any]:
    done = _cli("-l", str(path), "mcp", "token", "add", "--actor", actor, "--namespace",
                namespace, "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "shared.ledger"
    assert _cli("-l", str(path), "init").returncode == 0
    return path


@pytest.fixture
def server(ledger: Path) -> Iterator[str]:
    """Start `memroot mcp --http 127.0.0.1:0` and yield its URL; stop it afterwards."""
    proc = subprocess.Popen(
        [MEMROOT, "-l", str(ledger), "mcp", "--http", "127.0.0.1:0",
         "--trusted", str(ledger.parent / "trusted.json")],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "serving http://127.0.0.1:" in line, line
    try:
        yield line.split("serving ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _client(url: str, token: str, calls: list[Any], mode: str = "auto") -> subprocess.Popen[str]:
    """Start a client process; ``mode`` "legacy" speaks the 2025 handshake era, "auto" the new."""
    return subprocess.Popen(
        [sys.executable, "-c", CLIENT, url, token, json.dumps(calls), mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finish(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return list(json.loads(out.strip().splitlines()[-1])["done"])


def _heads(path: Path) -> dict[str, tuple[int, bytes]]:
    with Ledger.open(path, readonly=True, strict=False) as ledger:
        return {b.name: (b.size, bytes(b.head)) for b in ledger.store.branches()}


def test_two_clients_with_two_tokens_at_once_are_attributed_and_isolated(
    ledger: Path, server: str
) -> None:
    """Each client writes as its token's actor into its namespace, and sees only that."""
    alice = _token(ledger, "agent-a", "alice")
    bob = _token(ledger, "agent-b", "bob")

    def work(who: str) -> list[Any]:
        calls: list[Any] = [["remember", {"value": f"{who} fact {i}"}] for i in range(4)]
        return [*calls, ["recall", {"text": "fact", "limit": 50}]]

    a = _client(server, alice["token"], work("alice"), "legacy")  # a session bound to her token
    b = _client(server, bob["token"], work("bob"))
    got_a, got_b = _finish(a), _finish(b)
    for got, who in ((got_a, "alice"), (got_b, "bob")):
        assert not any(r["error"] for r in got), got
        values = sorted(r["value"] for r in got[-1]["data"]["results"])
        assert values == [f"{who} fact {i}" for i in range(4)]
    ids_a = [r["data"]["object_id"] for r in got_a[:4]]
    ids_b = [r["data"]["object_id"] for r in got_b[:4]]

    # Each now reaches for the other's first object, at the same time.
    def attack(theirs: str) -> list[Any]:
        return [["why", {"item_id": theirs}], ["falsify", {"item_id": theirs, "reason": "mine"}]]

    before = _heads(ledger)
    a = _client(server, alice["token"], attack(ids_b[0]), "legacy")
    b = _client(server, bob["token"], attack(ids_a[0]))
    for got, theirs in ((_finish(a), ids_b[0]), (_finish(b), ids_a[0])):
        assert [r["text"] for r in got] == [f"NotFoundError: no memory object {theirs} on branch "
                                            "'main'"] * 2  # fmt: skip
    assert _heads(ledger) == before

    # Attribution, from the ledger: who wrote each object, in which namespace.
    with memroot.open(ledger, create=False) as mem:
        asserts = {
            e.body["payload"].get("object_id", e.body["id"]): e.body
            for e in mem.ledger.entries()
            if e.type == "ASSERT"
        }
        receipts = [e.body for e in mem.ledger.entries() if e.type == "READ_RECEIPT"]
        mem_objects = {r.object.id: r.object for r in mem.recall(mode="AUDIT", limit=100)}
    for ids, actor, ns in ((ids_a, "agent-a", "alice"), (ids_b, "agent-b", "bob")):
        for oid in ids:
            assert mem_objects[oid].asserted_by == actor and mem_objects[oid].namespace_id == ns
    assert {(b["actor_id"], b["namespace_id"]) for b in asserts.values()} == {
        ("agent-a", "alice"),
        ("agent-b", "bob"),
    }
    assert sorted((r["actor_id"], r["namespace_id"]) for r in receipts) == [
        ("agent-a", "alice"),
        ("agent-b", "bob"),
    ]


def _initialize(url: str, headers: dict[str, str]) -> httpx2.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    return httpx2.post(
        url,
        json=body,
        headers={"Accept": "application/json, text/event-stream", **headers},
        timeout=30,
    )


def test_missing_bad_and_revoked_tokens_get_401_and_nothing_is_done(
    ledger: Path, server: str
) -> None:
    """No token, a malformed one, an unknown one, a revoked one: 401; a valid one: 200."""
    good = _token(ledger, "agent-a", "alice")
    gone = _token(ledger, "agent-x", "alice")
    assert _cli("-l", str(ledger), "mcp", "token", "revoke", gone["id"]).returncode == 0
    forged = "mrt_" + good["id"] + "_" + "A" * 43  # the right id, the wrong secret
    before = _heads(ledger)
    for headers in (
        {},
        {"Authorization": "Bearer nonsense"},
        {"Authorization": "Basic " + good["token"]},
        {"Authorization": f"Bearer {forged}"},
        {"Authorization": f"Bearer {gone['token']}"},
    ):
        r = _initialize(server, headers)
        assert r.status_code == 401, (headers, r.status_code)
        assert r.json()["error"] == "invalid_token"
    assert _initialize(server, {"Authorization": f"Bearer {good['token']}"}).status_code == 200
    assert _heads(ledger) == before


def test_a_token_revoked_mid_session_is_refused_from_its_next_request(
    ledger: Path, server: str
) -> None:
    """A client's session outlives its token by not one request: the write after is refused."""
    tok = _token(ledger, "agent-a", "alice")
    proc = _client(
        server,
        tok["token"],
        [["remember", {"value": "before"}], ["wait", {}], ["remember", {"value": "after"}]],
        "legacy",  # a stateful session: it must not outlive the token
    )
    assert proc.stdout is not None and proc.stdin is not None
    ready = json.loads(proc.stdout.readline())["ready"]
    assert not ready[0]["error"]
    before = _heads(ledger)
    assert _cli("-l", str(ledger), "mcp", "token", "revoke", tok["id"]).returncode == 0
    proc.stdin.write("go\n")
    proc.stdin.flush()
    done = _finish(proc)
    assert len(done) == 2 and done[-1].get("raised") == "MCPError", done  # the SDK's 401 error
    assert _heads(ledger) == before
    assert _initialize(server, {"Authorization": f"Bearer {tok['token']}"}).status_code == 401
    with memroot.open(ledger, create=False) as mem:
        values = [r.object.value for r in mem.recall(namespaces=("alice",), mode="AUDIT")]
    assert values == ["before"]


def test_tokens_are_stored_hashed_listed_without_secrets_and_revocable(ledger: Path) -> None:
    """The token file (0600) holds hashes only; list shows no secret; revoke names bad ids."""
    tok = _token(ledger, "agent-a", "alice")
    file = Path(f"{ledger}.mcp-tokens")
    assert stat.S_IMODE(os.stat(file).st_mode) == 0o600
    assert tok["token"] not in file.read_text()
    secret = tok["token"].removeprefix(f"mrt_{tok['id']}_")  # base64url: may hold "_" itself
    assert len(secret) == 43 and secret not in file.read_text()
    listed = _cli("-l", str(ledger), "mcp", "token", "list", "--json")
    assert listed.returncode == 0
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["actor"], r["namespace"], r["revoked_at"]) for r in rows] == [
        (tok["id"], "agent-a", "alice", None)
    ]
    assert "sha256" not in listed.stdout and tok["token"] not in listed.stdout
    bad = _cli("-l", str(ledger), "mcp", "token", "revoke", "0123456789abcdef")
    assert bad.returncode == 3 and "no MCP token '0123456789abcdef'" in bad.stderr
    assert "Traceback" not in bad.stderr
    revoked = _cli("-l", str(ledger), "mcp", "token", "revoke", tok["id"], "--json")
    assert revoked.returncode == 0 and json.loads(revoked.stdout)["revoked_at"] is not None
    human = _cli("-l", str(ledger), "mcp", "token", "list")
    assert f"{tok['id']}\tagent-a\tAI_AGENT\talice\t" in human.stdout and "revoked" in human.stdout


def test_bad_server_options_and_a_damaged_token_file_stop_before_listening(
    ledger: Path,
) -> None:
    """A bad address, identity options with --http, or a damaged token file: a clear error."""
    bad = _cli("-l", str(ledger), "mcp", "--http", "localhost")
    assert bad.returncode == 3 and "'localhost' is not HOST:PORT" in bad.stderr
    mixed = _cli("-l", str(ledger), "mcp", "--http", "127.0.0.1:0", "--actor", "a")
    assert mixed.returncode == 2 and "--http takes the actor and namespace" in mixed.stderr
    alone = _cli("-l", str(ledger), "mcp")
    assert alone.returncode == 2 and "needs --actor and --namespace" in alone.stderr
    Path(f"{ledger}.mcp-tokens").write_text("{not json")
    damaged = _cli("-l", str(ledger), "mcp", "--http", "127.0.0.1:0")
    assert damaged.returncode == 4 and "is damaged" in damaged.stderr
    assert "serving" not in damaged.stderr
    for r in (bad, mixed, alone, damaged):
        assert "Traceback" not in r.stderr and r.stdout == ""


def test_another_token_cannot_ride_a_session(ledger: Path, server: str) -> None:
    """Bob's token on Alice's session id is answered as an unknown session; nothing is done."""
    alice = _token(ledger, "agent-a", "alice")
    bob = _token(ledger, "agent-b", "bob")
    opened = _initialize(server, {"Authorization": f"Bearer {alice['token']}"})
    assert opened.status_code == 200
    session = opened.headers["mcp-session-id"]
    before = _heads(ledger)
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "remember", "arguments": {"value": "Bob writes as Alice"}},
    }
    ride = httpx2.post(
        server,
        json=call,
        headers={
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {bob['token']}",
            "mcp-session-id": session,
            "mcp-protocol-version": "2025-06-18",
        },
        timeout=30,
    )
    assert ride.status_code == 404
    assert _heads(ledger) == before
