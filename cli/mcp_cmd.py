"""``memroot mcp``: a Model Context Protocol server over stdio (extra ``memroot[mcp]``).

Built on the official ``mcp`` SDK (``MCPServer``). The tools are thin calls into a
``Memory`` (``memroot.open``) whose actor and namespace are fixed when the server starts
(``--actor``, ``--namespace``): no tool takes them, so a client cannot write as someone
else or read another namespace. Library errors come back as MCP tool errors (``is_error``
results whose text names what was wrong); nothing is written when one is raised.

Tools: remember, recall, why, snapshot, falsify, cascade (a dry run unless ``apply``),
verify, branch_create, branch_merge. Resources: ``memroot://root/latest`` (the newest memory
root of main, JSON) and ``memroot://checkpoint`` (main's signed checkpoint of the current
tree, signed on read when the head moved).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from memroot.cli.commands import jsonable
from memroot.cli.main import Context, cli, pass_ctx
from memroot.ledger.errors import MemrootError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from memroot.memory import Memory

__all__ = ["build_server", "mcp_cmd"]

F = TypeVar("F", bound=Callable[..., Any])

Mode = Literal["DEFAULT", "EXPLICIT", "AUDIT"]
BranchType = Literal["SIMULATION", "COUNTERFACTUAL", "PLANNING", "SANDBOX", "TEST"]
Strategy = Literal["PRESERVE_BOTH", "PREFER_CANONICAL", "PREFER_BRANCH"]
ObjectType = Literal["FACT", "PREFERENCE", "DECISION", "TASK", "INTENT"]
Epistemic = Literal["OBSERVED", "ASSERTED", "INFERRED", "HYPOTHETICAL", "UNVERIFIED"]
Source = Literal[
    "USER_STATED", "USER_DEMONSTRATED", "SYSTEM_INFERRED", "EXTERNAL_DOCUMENT", "TOOL_OUTPUT"
]


def _tool_errors(fn: F) -> F:
    """Turn a library error into an MCP tool error naming what was wrong."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MemrootError as e:
            raise ToolError(f"{type(e).__name__}: {e}") from e

    return wrapper  # type: ignore[return-value]


def build_server(mem: Memory, trusted: Path | None = None) -> MCPServer:
    """Return the MCP server over ``mem`` (its actor and namespace are the server's).

    ``trusted`` is the trusted-state file ``verify`` uses (default as ``memroot verify``).
    """
    from mcp.server.mcpserver import MCPServer

    from memroot.cli.falsify_cmds import _plan_json
    from memroot.cli.root_cmds import _record_json
    from memroot.ledger.entries import new_uuid
    from memroot.memory_root import Roots

    session_run = f"mcp-{new_uuid()}"
    server = MCPServer(
        "memroot",
        instructions=(
            f"Audited memory of actor {mem.actor!r} in namespace {mem.namespace!r}: every "
            "write is a signed, hash-chained ledger entry. Remember facts with their source, "
            "recall before answering, falsify what turns out wrong."
        ),
    )

    @server.tool()
    @_tool_errors
    def remember(
        value: str,
        source: str | None = None,
        evidence: list[str] | None = None,
        object_type: ObjectType = "FACT",
        epistemic_type: Epistemic = "ASSERTED",
        source_type: Source = "USER_STATED",
        salience: float = 0.5,
    ) -> dict[str, Any]:
        """Remember a memory object, citing the events it was learned from.

        evidence: ids of events already in the ledger. Without it, ``source`` (or the value
        itself) is first recorded as an event, and the memory cites that event.
        """
        ids = list(evidence or [])
        recorded = None
        if not ids:
            recorded = mem.record(content=source or value, role="USER")
            ids = [recorded.id]
        made = mem.remember(
            value,
            evidence=ids,
            object_type=object_type,
            epistemic_type=epistemic_type,
            source_type=source_type,
            salience=salience,
        )
        return {
            "object_id": made.id,
            "seq": made.seq,
            "entry_hash": made.entry_hash.hex(),
            "evidence_ids": ids,
            "recorded_event": None if recorded is None else recorded.id,
        }

    @server.tool()
    @_tool_errors
    def recall(
        text: str | None = None,
        anchor: str | None = None,
        branch: str | None = None,
        as_of: int | None = None,
        types: list[ObjectType] | None = None,
        mode: Mode = "DEFAULT",
        limit: int = 20,
        run_id: str | None = None,
        receipt: bool = True,
    ) -> dict[str, Any]:
        """Recall memory objects of this server's namespace, most recently changed first.

        text: words to find; anchor: a conversation event (only memories derived from its
        path); as_of: memory as it was right after that entry seq. Unless receipt is false,
        a READ_RECEIPT entry records what was returned, under run_id (default: this server
        session's run id).
        """
        results = mem.recall(
            text,
            anchor=anchor,
            branch=branch,
            as_of=as_of,
            types=types or (),
            namespaces=(mem.namespace,),
            mode=mode,
            limit=limit,
            receipt=(run_id or session_run) if receipt else None,
        )
        return {
            "results": [r.to_dict() for r in results],
            "run_id": (run_id or session_run) if receipt else None,
        }

    @server.tool()
    @_tool_errors
    def why(item_id: str, branch: str | None = None) -> dict[str, Any]:
        """Explain an item: its operations and evidence events, each with an inclusion proof.

        item_id: a memory object's UUID, a memory root's hex, or ROOT:projection:key.
        read_by lists the runs whose read receipts name it.
        """
        from memroot.memory_root.receipts import readers

        out = dict(jsonable(mem.why(item_id, branch=branch).to_dict()))
        out["read_by"] = readers(mem.ledger, item_id)
        return out

    @server.tool()
    @_tool_errors
    def snapshot(branch: str | None = None) -> dict[str, Any]:
        """Take a memory_root snapshot now and sign a checkpoint (no-op when nothing changed)."""
        result = mem.snapshot(branch=branch)
        return {**_record_json(result.record), "created": result.created}

    @server.tool()
    @_tool_errors
    def falsify(item_id: str, reason: str, evidence: list[str] | None = None) -> dict[str, Any]:
        """Mark one item falsified; nothing that depends on it changes until a cascade."""
        a = mem.falsify(item_id, reason, evidence=evidence or ())
        return {"item_id": item_id, "state": mem.state(item_id), "seq": a.seq,
                "entry_hash": a.entry_hash.hex()}  # fmt: skip

    @server.tool()
    @_tool_errors
    def cascade(
        item_id: str,
        max_depth: int = 3,
        max_items: int = 1000,
        reason: str | None = None,
        apply: bool = False,
    ) -> dict[str, Any]:
        """Walk what depends on a falsified item within the bound (a dry run unless apply)."""
        from memroot.memory_root.falsify import CascadeResult

        out = mem.cascade(
            item_id, max_depth=max_depth, max_items=max_items, reason=reason, dry_run=not apply
        )
        if isinstance(out, CascadeResult):
            return dict(_plan_json(out.plan, out))
        return dict(_plan_json(out, None))

    @server.tool()
    @_tool_errors
    def verify() -> dict[str, Any]:
        """Run every auditor step over the ledger; ok is false on any violation."""
        report = mem.verify(trusted=trusted)
        return {"ok": report.ok, **report.to_json()}

    @server.tool()
    @_tool_errors
    def branch_create(
        purpose: str, branch_type: BranchType = "SIMULATION", expiry_days: int | None = None
    ) -> dict[str, Any]:
        """Fork a branch of memory for simulation or planning; returns its id."""
        return {"branch_id": mem.fork(purpose, branch_type=branch_type, expiry_days=expiry_days)}

    @server.tool()
    @_tool_errors
    def branch_merge(
        branch: str, objects: list[str], strategy: Strategy = "PRESERVE_BOTH",
        reason: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Merge the named objects of a branch into its parent (selective merge)."""
        return dict(mem.merge(branch, objects, strategy=strategy, reason=reason).to_json())

    @server.resource("memroot://root/latest", mime_type="application/json")
    def latest_root() -> dict[str, Any] | None:
        """Return the newest memory root of main (null before the first snapshot)."""
        record = Roots(mem.ledger).latest()
        return None if record is None else _record_json(record)

    @server.resource("memroot://checkpoint", mime_type="text/plain")
    def checkpoint() -> str:
        """Return main's signed checkpoint of the current tree (a C2SP note; signed if needed)."""
        return mem.ledger.checkpoint().note

    return server


@cli.command("mcp")
@click.option("--actor", required=True, help="Who the server writes as (fixed for its life).")
@click.option(
    "--actor-type",
    type=click.Choice(["AI_AGENT", "HUMAN_USER", "SYSTEM_PROCESS", "EXTERNAL_CONNECTOR"]),
    default="AI_AGENT",
    show_default=True,
)
@click.option("--namespace", required=True, help="The namespace it reads and writes (fixed).")
@click.option(
    "--trusted",
    "trusted_path",
    type=click.Path(path_type=Path),
    help="Trusted-state file for the verify tool (default as `memroot verify`).",
)
@pass_ctx
def mcp_cmd(
    ctx: Context, actor: str, actor_type: str, namespace: str, trusted_path: Path | None
) -> None:
    """Serve the ledger to an MCP client over stdio (Model Context Protocol).

    Tools: remember, recall, why, snapshot, falsify, cascade, verify, branch_create,
    branch_merge; resources memroot://root/latest and memroot://checkpoint. The actor and
    namespace are fixed here and never taken from a tool call. Creates the ledger if it
    does not exist. Needs the extra: pip install 'memroot[mcp]'.

    Example: memroot -l agent.ledger mcp --actor agent-7 --namespace alice
    """
    try:
        import mcp  # noqa: F401
    except ImportError as e:
        raise click.UsageError(
            "the MCP server needs the official SDK: pip install 'memroot[mcp]'"
        ) from e
    from memroot.memory import open_memory

    path = ctx.path()  # a file (created if missing) or a PostgreSQL URL
    with open_memory(
        path, key_path=ctx.key_path, actor=actor, actor_type=actor_type, namespace=namespace
    ) as mem:
        build_server(mem, trusted_path).run("stdio")
