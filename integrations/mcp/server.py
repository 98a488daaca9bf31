"""The memroot MCP server: the tools of ``tools`` over one ledger, for one client or many.

Built on the official ``mcp`` SDK's low-level ``Server`` (extra ``memroot[mcp]``), so that
every published schema is exactly what the server enforces: tool arguments are validated
against their strict models before anything runs, results are built through their models.

Who a call acts as is never taken from the call:

- over stdio (``serve_stdio``) the server has one client, whose actor and namespace are fixed
  when it starts (``memroot mcp --actor A --namespace N``);
- over streamable HTTP (``serve_http``) every request carries a bearer token
  (``memroot.integrations.mcp.tokens``) bound to one actor and one namespace, checked on
  every request by the SDK's auth middleware (a missing, unknown or revoked token gets 401
  before any handler runs) and again when the call is dispatched.

Each call then runs inside a ``Scope`` of that namespace (``memroot.integrations.mcp.scope``):
another namespace's objects, events and branches are not found. Library errors come back as
tool errors (``isError`` results naming what was wrong); nothing is written when one is
raised. Calls are serialised on one lock: the ledger has one connection.

Tools: remember, recall, why, snapshot, falsify, cascade, verify, branch_create,
branch_merge. Resources: ``memroot://root/latest`` (the newest memory root of main, its
commitment only) and ``memroot://checkpoint`` (main's signed checkpoint of the tree).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pydantic
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListResourcesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    TextContent,
    TextResourceContents,
    Tool,
)

from memroot import __version__
from memroot.ledger.entries import new_uuid
from memroot.ledger.errors import MemrootError

from .scope import Scope
from .tools import TOOLS, Call, ToolSpec, root_json

if TYPE_CHECKING:
    from memroot.memory import Memory

    from .tokens import TokenStore

__all__ = ["Identity", "MemrootMcp", "build_server"]

log = logging.getLogger("memroot.mcp")

ROOT_URI = "memroot://root/latest"
CHECKPOINT_URI = "memroot://checkpoint"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a call acts as: an actor inside one namespace (and the token that says so)."""

    actor: str
    actor_type: str
    namespace: str
    token_id: str | None = None


class _Refused(Exception):
    """A call refused before it reached the library (the text says why)."""


def _explain(name: str, error: pydantic.ValidationError) -> str:
    """Say, per argument, what is wrong with a call's arguments (no input values echoed)."""
    parts = []
    for e in error.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in e["loc"]) or "arguments"
        message = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            message = "unknown argument (not in the tool's schema)"
        parts.append(f"{where}: {message}")
    return f"invalid arguments for {name}: " + "; ".join(parts)


class MemrootMcp:
    """The server over one open ``Memory``: one client (stdio) or token clients (HTTP).

    ``tokens`` None: every call acts as ``mem``'s actor in ``mem``'s namespace. Otherwise
    each call acts as the identity of the request's bearer token, read from ``tokens``
    (re-read when the file changes, so a revocation holds from the next request).
    """

    def __init__(
        self, mem: Memory, *, trusted: Path | None = None, tokens: TokenStore | None = None
    ) -> None:
        """Serve ``mem``; ``trusted`` is the trusted-state file the ``verify`` tool uses."""
        self.mem = mem
        self.trusted = trusted
        self.tokens = tokens
        self._lock = threading.Lock()
        self._scopes: dict[Identity, Scope] = {}
        self._runs: dict[Identity, str] = {}
        if tokens is None:
            who = f"actor {mem.actor!r} in namespace {mem.namespace!r}"
        else:
            who = "the actor and namespace of the client's bearer token"
        self.server: Server[Any] = Server(
            "memroot",
            version=__version__,
            title="memroot",
            instructions=(
                f"Audited memory of {who}: every write is a signed, hash-chained ledger "
                "entry, and only that namespace's memory is visible. Remember facts with "
                "their source, recall before answering, falsify what turns out wrong."
            ),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            get_tool_input_schema=self._input_schema,
        )

    # -- who is calling ------------------------------------------------------------------------

    def identity(self, ctx: ServerRequestContext[Any, Any]) -> Identity:
        """Return who the request acts as.

        Raises:
            _Refused: an HTTP request without a valid, unrevoked token (the auth middleware
                lets none through; checked again here so that no path skips it).
        """
        if self.tokens is None:
            m = self.mem
            return Identity(m.actor, m.actor_type, m.namespace)
        request = ctx.request
        user = None if request is None else getattr(request, "scope", {}).get("user")
        if not isinstance(user, AuthenticatedUser):
            raise _Refused("this server needs a bearer token (memroot mcp token add)")
        record = self.tokens.find(user.access_token.token)
        if record is None:
            raise _Refused("the bearer token is unknown or revoked")
        return Identity(record.actor, record.actor_type, record.namespace, record.id)

    def scope(self, who: Identity) -> Scope:
        """Return the ``Scope`` of an identity (one ``Memory`` view per identity)."""
        from memroot.memory import Memory

        found = self._scopes.get(who)
        if found is None:
            base = self.mem
            found = Scope(
                Memory(
                    base.ledger,
                    actor=who.actor,
                    actor_type=who.actor_type,
                    namespace=who.namespace,
                    stream=base.stream,
                    policy_version=base.policy_version,
                )
            )
            self._scopes[who] = found
            self._runs[who] = f"mcp-{new_uuid()}"
        return found

    # -- tools ---------------------------------------------------------------------------------

    @staticmethod
    def _tool(spec: ToolSpec) -> Tool:
        return Tool(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            input_schema=spec.args.model_json_schema(),
            output_schema=spec.result.model_json_schema(),
            annotations=spec.annotations,
        )

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        spec = TOOLS.get(name)
        return None if spec is None else spec.args.model_json_schema()

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=[self._tool(t) for t in TOOLS.values()])

    @staticmethod
    def _error(text: str) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        spec = TOOLS.get(params.name)
        if spec is None:
            return self._error(f"unknown tool {params.name!r}: see tools/list")
        try:
            args = spec.args.model_validate(params.arguments or {})
        except pydantic.ValidationError as e:
            return self._error(_explain(spec.name, e))
        try:
            who = self.identity(ctx)
        except _Refused as e:
            return self._error(str(e))
        try:
            out = await anyio.to_thread.run_sync(self._run, spec, who, args)
        except MemrootError as e:
            return self._error(f"{type(e).__name__}: {e}")
        except Exception:
            log.exception("tool %s failed", spec.name)
            return self._error(f"{spec.name} failed inside the server (see its log); nothing "
                               "was written")  # fmt: skip
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(out, sort_keys=True))],
            structured_content=out,
        )

    def _run(self, spec: ToolSpec, who: Identity, args: Any) -> dict[str, Any]:
        with self._lock:
            scope = self.scope(who)
            raw = spec.body(Call(scope, self._runs[who], self.trusted), args)
        return spec.result.model_validate(raw).model_dump(mode="json")

    # -- resources -----------------------------------------------------------------------------

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        return ListResourcesResult(
            resources=[
                Resource(
                    uri=ROOT_URI,
                    name="latest_root",
                    description="The newest memory root of main (its commitment; null before "
                    "the first snapshot).",
                    mime_type="application/json",
                ),
                Resource(
                    uri=CHECKPOINT_URI,
                    name="checkpoint",
                    description="Main's signed checkpoint of the current tree (a C2SP note).",
                    mime_type="text/plain",
                ),
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        from mcp.shared.exceptions import MCPError

        uri = str(params.uri)
        if uri not in (ROOT_URI, CHECKPOINT_URI):
            raise MCPError(code=INVALID_PARAMS, message=f"no resource {uri}")
        try:
            who = self.identity(ctx)
            text, mime = await anyio.to_thread.run_sync(self._resource, uri, who)
        except (_Refused, MemrootError) as e:
            raise MCPError(code=INVALID_PARAMS, message=str(e)) from None
        return ReadResourceResult(
            contents=[TextResourceContents(uri=uri, text=text, mime_type=mime)]
        )

    def _resource(self, uri: str, who: Identity) -> tuple[str, str]:
        from memroot.memory_root import Roots

        with self._lock:
            mem = self.scope(who).mem
            if uri == ROOT_URI:
                record = Roots(mem.ledger).latest()
                body = None if record is None else root_json(record)
                return json.dumps(body, sort_keys=True), "application/json"
            return mem.ledger.checkpoint().note, "text/plain"

    # -- transports ----------------------------------------------------------------------------

    def run_stdio(self) -> None:
        """Serve one client over stdin/stdout until it closes them."""
        from mcp.server.stdio import stdio_server

        async def main() -> None:
            async with stdio_server() as (read, write):
                await self.server.run(read, write, self.server.create_initialization_options())

        anyio.run(main)


def build_server(mem: Memory, trusted: Path | None = None) -> Server[Any]:
    """Return the low-level MCP server of one stdio client: ``mem``'s actor and namespace.

    ``trusted`` is the trusted-state file ``verify`` uses (default as ``memroot verify``).
    """
    return MemrootMcp(mem, trusted=trusted).server
