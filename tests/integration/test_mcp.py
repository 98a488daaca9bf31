"""`memroot mcp`: the MCP server over stdio, driven by the official SDK's own client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed (extra memroot[mcp])")

from mcp import Client, StdioServerParameters

import memroot
from tests._mcp import server_params

TOOLS = {
    "remember",
    "recall",
    "why",
    "snapshot",
    "falsify",
    "cascade",
    "verify",
    "branch_create",
    "branch_merge",
}


def _params(tmp_path: Path, *extra: str) -> StdioServerParameters:
    params: StdioServerParameters = server_params(
        tmp_path / "mcp.ledger", trusted=tmp_path / "trusted.json", after=extra
    )
    return params


def _run(tmp_path: Path, session: Any) -> Any:
    async def main() -> Any:
        async with Client(_params(tmp_path)) as client:
            return await session(client)

    return asyncio.run(main())


def test_tools_have_schemas_and_a_full_session_works(tmp_path: Path) -> None:
    """Every tool is listed with a JSON schema, and a whole session of tool calls works."""

    async def session(c: Any) -> dict[str, Any]:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        out: dict[str, Any] = {"tools": tools}
        made = await c.call_tool("remember", {"value": "Alice takes tea", "source": "I take tea"})
        out["made"] = made.structured_content
        out["recall"] = (await c.call_tool("recall", {"text": "tea"})).structured_content
        oid = out["made"]["object_id"]
        out["why"] = (await c.call_tool("why", {"item_id": oid})).structured_content
        out["snapshot"] = (await c.call_tool("snapshot", {})).structured_content
        out["falsify"] = (
            await c.call_tool("falsify", {"item_id": oid, "reason": "she switched"})
        ).structured_content
        out["dry"] = (await c.call_tool("cascade", {"item_id": oid})).structured_content
        out["applied"] = (
            await c.call_tool("cascade", {"item_id": oid, "apply": True})
        ).structured_content
        out["verify"] = (await c.call_tool("verify", {})).structured_content
        root = await c.read_resource("memroot://root/latest")
        out["root"] = json.loads(root.contents[0].text)
        cp = await c.read_resource("memroot://checkpoint")
        out["checkpoint"] = cp.contents[0].text
        return out

    out = _run(tmp_path, session)
    assert set(out["tools"]) == TOOLS
    for t in out["tools"].values():
        assert t.input_schema["type"] == "object" and t.description
    assert out["tools"]["cascade"].input_schema["properties"]["apply"]["default"] is False
    assert "actor" not in json.dumps([t.input_schema for t in out["tools"].values()])
    assert [r["value"] for r in out["recall"]["results"]] == ["Alice takes tea"]
    assert out["recall"]["run_id"].startswith("mcp-")
    assert out["why"]["evidence"][0]["content"] == "I take tea"
    assert [r["run_id"] for r in out["why"]["read_by"]] == [out["recall"]["run_id"]]
    assert out["falsify"]["state"] == "falsified"
    assert out["dry"]["dry_run"] is True and out["applied"]["dry_run"] is False
    assert out["verify"]["ok"] is True
    assert out["root"]["memory_root"] == out["snapshot"]["memory_root"]
    assert out["checkpoint"].count("\n") >= 4
    with memroot.open(tmp_path / "mcp.ledger") as mem:
        types = [e.type for e in mem.ledger.entries()]
        assert types.count("CASCADE") == 1  # the dry run wrote nothing
        ops = [e for e in mem.ledger.entries() if e.kind.value == "op" and e.type == "ASSERT"]
        assert ops[0].body["actor_id"] == "agent-7" and ops[0].body["namespace_id"] == "alice"
        receipts = [e for e in mem.ledger.entries() if e.type == "READ_RECEIPT"]
        assert len(receipts) == 1  # recall keeps a receipt by default
        assert receipts[0].body["payload"]["objects"][0]["id"] == oid_of(out)


def oid_of(out: dict[str, Any]) -> str:
    return str(out["made"]["object_id"])


def test_errors_are_tool_errors_and_write_nothing(tmp_path: Path) -> None:
    """Bad input comes back as an is_error result naming the problem; the server keeps going."""

    async def session(c: Any) -> list[Any]:
        return [
            await c.call_tool("falsify", {"item_id": "nope", "reason": "x"}),
            await c.call_tool("remember", {"value": "x", "evidence": ["not-a-uuid"]}),
            await c.call_tool("recall", {"mode": "EVERYTHING"}),
            await c.call_tool("remember", {"value": "x", "epistemic_type": "INFERRED"}),
            await c.call_tool("recall", {"receipt": False}),
        ]

    bad_id, bad_evidence, bad_mode, bad_rule, ok = _run(tmp_path, session)
    assert bad_id.is_error and "item_id: 'nope' is not a UUID" in bad_id.content[0].text
    assert bad_evidence.is_error and "evidence" in bad_evidence.content[0].text
    assert bad_mode.is_error
    # Refused by the rules after its evidence event was appended: that event is undone too.
    assert bad_rule.is_error and "INFERRED from a USER_STATED source" in bad_rule.content[0].text
    assert not ok.is_error
    with memroot.open(tmp_path / "mcp.ledger") as mem:
        assert mem.ledger.size() == 1  # the genesis only


def test_actor_cannot_be_chosen_by_a_client(tmp_path: Path) -> None:
    """An actor or namespace passed in a tool call is an unknown argument: refused, unwritten."""

    async def session(c: Any) -> Any:
        return await c.call_tool(
            "remember", {"value": "x", "actor_id": "root", "namespace_id": "bob", "actor": "r"}
        )

    result = _run(tmp_path, session)
    assert result.is_error
    text = result.content[0].text
    for name in ("actor_id", "namespace_id", "actor"):
        assert f"{name}: unknown argument" in text
    with memroot.open(tmp_path / "mcp.ledger") as mem:
        assert mem.ledger.size() == 1  # the genesis only


def test_branches_over_mcp(tmp_path: Path) -> None:
    """branch_create forks; branch_merge brings a branch object into main."""
    with memroot.open(tmp_path / "mcp.ledger", actor="agent-7", namespace="alice") as mem:
        b = mem.fork("plan", branch_type="PLANNING", expiry_days=2)
        ev = mem.record(content="plan B", branch=b)
        obj = mem.remember("plan B", evidence=[ev.id], branch=b)

    async def session(c: Any) -> list[Any]:
        made = await c.call_tool("branch_create", {"purpose": "what if", "expiry_days": 1})
        merged = await c.call_tool("branch_merge", {"branch": b, "objects": [obj.id]})
        return [made.structured_content, merged.structured_content]

    made, merged = _run(tmp_path, session)
    assert made["branch_id"].startswith("simu-")
    assert merged["items"][0]["outcome"] == "IMPORTED"


def test_a_rewritten_evidence_event_is_refused_to_the_agent(tmp_path: Path, raw: Any) -> None:
    """`why` over MCP reads strictly: a rewritten evidence event is a tool error, not served."""
    path = tmp_path / "mcp.ledger"
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        said = mem.record(content="I take tea")
        oid = mem.remember("Alice takes tea", evidence=[said.id]).id
        mem.record(content="and more")
    raw.rewrite(path, said.seq)

    async def session(c: Any) -> Any:
        return await c.call_tool("why", {"item_id": oid})

    why = _run(tmp_path, session)
    assert why.is_error and "strict read refused" in why.content[0].text
    assert "mallory" not in json.dumps(why.structured_content or {})


def test_a_rewritten_head_stops_the_server_before_it_serves(tmp_path: Path, raw: Any) -> None:
    """The head disagrees with its signed checkpoint: the server exits 1, naming why."""
    import subprocess

    path = tmp_path / "mcp.ledger"
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        mem.record(content="I take tea")
    raw.rewrite(path)
    params = _params(tmp_path)
    done = subprocess.run(
        [params.command, *params.args], input="", capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and done.stdout == ""
    assert "strict read refused" in done.stderr and "Traceback" not in done.stderr


def test_schemas_publish_strictness_bounds_hints_and_the_version(tmp_path: Path) -> None:
    """Every tool refuses extra properties and publishes its bounds, output schema and hints."""

    async def session(c: Any) -> Any:
        return (await c.list_tools()).tools, c.server_info

    tools_list, info = _run(tmp_path, session)
    tools = {t.name: t for t in tools_list}
    assert info.version == memroot.__version__ and info.name == "memroot"
    for t in tools.values():
        assert t.input_schema["additionalProperties"] is False, t.name
        assert t.output_schema is not None and t.output_schema["type"] == "object", t.name
        assert t.output_schema.get("additionalProperties") is False, t.name
        assert "\n" not in t.description and "  " not in t.description, t.name
        assert t.annotations is not None and t.annotations.open_world_hint is False
    props = {n: t.input_schema["properties"] for n, t in tools.items()}

    def bounds(tool: str, arg: str) -> tuple[Any, Any]:
        p = props[tool][arg]
        p = next((a for a in p.get("anyOf", [p]) if a.get("type") != "null"), p)
        return p.get("minimum"), p.get("maximum")

    assert bounds("remember", "salience") == (0.0, 1.0)
    assert bounds("remember", "confidence") == (0.0, 1.0)
    assert bounds("recall", "limit") == (1, 10_000)
    assert bounds("recall", "as_of") == (0, None)
    assert bounds("cascade", "max_depth") == (1, 10_000)
    assert bounds("cascade", "max_items") == (1, 100_000)
    assert bounds("branch_create", "expiry_days") == (1, 3650)
    assert "branch" in props["remember"] and "branch" in props["recall"]
    assert "pattern" in json.dumps(props["remember"]["value"])
    hints = {n: t.annotations for n, t in tools.items()}
    assert hints["recall"].read_only_hint is False and "READ_RECEIPT" in tools["recall"].description
    assert hints["why"].read_only_hint is True and hints["why"].idempotent_hint is True
    assert hints["falsify"].destructive_hint is True and hints["cascade"].destructive_hint is True
    assert hints["remember"].destructive_hint is False
    assert hints["snapshot"].idempotent_hint is True


def test_out_of_bounds_and_control_characters_are_refused_server_side(tmp_path: Path) -> None:
    """Bounds and control characters hold even for a client that ignores the schema."""
    calls: list[tuple[str, dict[str, Any], str]] = [
        ("remember", {"value": "x", "salience": 1.5}, "salience: Input should be less than"),
        ("remember", {"value": "x", "confidence": -0.1}, "confidence: Input should be greater"),
        ("remember", {"value": "tea\x00sugar"}, "value: control character U+0000 at position 3"),
        ("remember", {"value": "x", "source": "a\x1bb"}, "source: control character U+001B"),
        ("remember", {"value": "x", "salience": "0.5"}, "salience: Input should be a valid"),
        ("remember", {"value": ""}, "value: String should have at least 1 character"),
        ("recall", {"limit": 0}, "limit: Input should be greater than or equal to 1"),
        ("recall", {"limit": 10_001}, "limit: Input should be less than or equal to 10000"),
        ("recall", {"text": "a\x7fb"}, "text: control character U+007F"),
        ("cascade", {"item_id": "0" * 8 + "-0000-7000-8000-" + "0" * 12, "max_depth": 0},
         "max_depth: Input should be greater than or equal to 1"),
        ("branch_create", {"purpose": "p", "expiry_days": 0}, "expiry_days: Input should be"),
        ("branch_create", {"purpose": "p\x00"}, "purpose: control character U+0000"),
        ("falsify", {"item_id": "0" * 8 + "-0000-7000-8000-" + "0" * 12, "reason": "r\x00"},
         "reason: control character U+0000"),
        ("recall", {"bogus": 1}, "bogus: unknown argument"),
    ]  # fmt: skip

    async def session(c: Any) -> list[Any]:
        return [await c.call_tool(name, args) for name, args, _ in calls]

    results = _run(tmp_path, session)
    for (name, _, words), r in zip(calls, results, strict=True):
        assert r.is_error, name
        text = r.content[0].text
        assert text.startswith(f"invalid arguments for {name}: ") and words in text, text
        assert "Traceback" not in text
    with memroot.open(tmp_path / "mcp.ledger") as mem:
        assert mem.ledger.size() == 1  # the genesis only


def test_remember_and_recall_take_a_branch(tmp_path: Path) -> None:
    """remember {branch} writes on that branch, recall {branch} reads it, main does not see it."""

    async def session(c: Any) -> dict[str, Any]:
        b = (await c.call_tool("branch_create", {"purpose": "what if"})).structured_content
        branch = b["branch_id"]
        made = await c.call_tool("remember", {"value": "plan B holds", "branch": branch})
        on_branch = await c.call_tool("recall", {"text": "plan", "branch": branch})
        on_main = await c.call_tool("recall", {"text": "plan"})
        merged = await c.call_tool(
            "branch_merge", {"branch": branch, "objects": [made.structured_content["object_id"]]}
        )
        after = await c.call_tool("recall", {"text": "plan"})
        return {
            "branch": branch,
            "made": made.structured_content,
            "on_branch": on_branch.structured_content["results"],
            "on_main": on_main.structured_content["results"],
            "merged": merged.structured_content,
            "after": after.structured_content["results"],
        }

    out = _run(tmp_path, session)
    assert out["made"]["branch"] == out["branch"]
    assert [r["value"] for r in out["on_branch"]] == ["plan B holds"]
    assert out["on_main"] == []
    assert out["merged"]["imported"] == [out["made"]["object_id"]]
    assert [r["value"] for r in out["after"]] == ["plan B holds"]


def test_actor_type_is_matched_without_regard_to_case(tmp_path: Path) -> None:
    """`mcp --actor-type system_process` is SYSTEM_PROCESS (README "Names and case")."""

    async def main() -> Any:
        params = _params(tmp_path, "--actor-type", "system_process")
        async with Client(params) as client:
            return await client.call_tool("remember", {"value": "disk is full", "source": "df"})

    made = asyncio.run(main())
    assert not made.is_error, made.content
    with memroot.open(tmp_path / "mcp.ledger", create=False) as mem:
        ops = [e for e in mem.ledger.entries() if e.type == "ASSERT"]
        assert [e.body["actor_type"] for e in ops] == ["SYSTEM_PROCESS"]


def test_token_actor_type_is_matched_without_regard_to_case(tmp_path: Path) -> None:
    """`mcp token add --actor-type Human_User` stores the canonical HUMAN_USER."""
    from click.testing import CliRunner

    from memroot.cli.main import cli

    ledger = str(tmp_path / "mcp.ledger")
    runner = CliRunner()
    assert runner.invoke(cli, ["-l", ledger, "init"], catch_exceptions=False).exit_code == 0
    args = ["-l", ledger, "mcp", "token", "add", "--actor", "ann", "--namespace", "alice"]
    added = runner.invoke(cli, [*args, "--actor-type", "Human_User", "--json"])
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["actor_type"] == "HUMAN_USER"
    wrong = runner.invoke(cli, [*args, "--actor-type", "robot"])
    assert wrong.exit_code == 2 and "'robot' is not one of" in wrong.output
