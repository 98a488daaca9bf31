"""``memroot mcp``: start the MCP server (stdio or HTTP) and manage its bearer tokens.

Thin commands over ``memroot.integrations.mcp``: they parse options and call it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from memroot.cli.main import Context, cli, emit, pass_ctx
from memroot.ledger.backends.pg import is_url

if TYPE_CHECKING:
    from memroot.integrations.mcp import TokenStore

__all__ = ["mcp_cmd"]

_ACTOR_TYPES = ["AI_AGENT", "HUMAN_USER", "SYSTEM_PROCESS", "EXTERNAL_CONNECTOR"]
_NEEDS_SDK = "the MCP server needs the official SDK: pip install 'memroot[mcp]'"

tokens_option = click.option(
    "--tokens",
    "tokens_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The token file (default LEDGER.mcp-tokens beside a ledger file; needed for a "
    "postgresql:// ledger).",
)


def _sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as e:
        raise click.UsageError(_NEEDS_SDK) from e


def _store(ctx: Context, tokens_path: Path | None) -> TokenStore:
    from memroot.integrations.mcp import TokenStore, default_tokens_path

    if tokens_path is not None:
        return TokenStore(tokens_path)
    ledger = ctx.path()
    if is_url(str(ledger)):
        raise click.UsageError("a postgresql:// ledger keeps no files beside it: give --tokens")
    return TokenStore(default_tokens_path(ledger))


@cli.group("mcp", invoke_without_command=True)
@click.option("--actor", help="stdio: who the server writes as (fixed for its life).")
@click.option(
    "--actor-type",
    type=click.Choice(_ACTOR_TYPES, case_sensitive=False),
    default="AI_AGENT",
    show_default=True,
    help="stdio: the actor's type.",
)
@click.option("--namespace", help="stdio: the namespace it reads and writes (fixed).")
@click.option(
    "--http",
    "address",
    metavar="HOST:PORT",
    help="Serve many clients over streamable HTTP at http://HOST:PORT/mcp instead of stdio; "
    "each authenticates with a bearer token (memroot mcp token add). Port 0: a free one.",
)
@tokens_option
@click.option(
    "--trusted",
    "trusted_path",
    type=click.Path(path_type=Path),
    help="Trusted-state file for the verify tool (default as `memroot verify`).",
)
@click.pass_context
def mcp_cmd(
    click_ctx: click.Context,
    actor: str | None,
    actor_type: str,
    namespace: str | None,
    address: str | None,
    tokens_path: Path | None,
    trusted_path: Path | None,
) -> None:
    """Serve the ledger to MCP clients (Model Context Protocol).

    Over stdio (one client): the actor and namespace are fixed here with --actor and
    --namespace. Over HTTP (--http HOST:PORT, many clients): every request acts as the actor
    and namespace of its bearer token; a missing, bad or revoked token gets 401. Either way
    a client reaches only its namespace's memory. Creates the ledger if it does not exist.
    Needs the extra: pip install 'memroot[mcp]'.

    Tools: remember, recall, why, snapshot, falsify, cascade, verify, branch_create,
    branch_merge; resources memroot://root/latest and memroot://checkpoint.

    Example: memroot -l agent.ledger mcp --actor agent-7 --namespace alice

    Example: memroot -l agent.ledger mcp --http 127.0.0.1:8765 (after `mcp token add`)
    """
    if click_ctx.invoked_subcommand is not None:
        if actor or namespace or address:
            raise click.UsageError("--actor, --namespace and --http start a server: give "
                                   "them without a subcommand")  # fmt: skip
        return
    ctx = click_ctx.find_object(Context)
    assert ctx is not None
    _sdk()
    from memroot.integrations.mcp import MemrootMcp, parse_address, serve_http
    from memroot.memory import open_memory

    if address is not None:
        if actor or namespace:
            raise click.UsageError(
                "--http takes the actor and namespace from each client's token: drop "
                "--actor/--namespace (memroot mcp token add --actor A --namespace N)"
            )
        host, port = parse_address(address)
        tokens = _store(ctx, tokens_path)
        tokens.records()  # a damaged token file stops the server before it listens
        # The facade keeps the same trusted state the server audits with (--trusted).
        with open_memory(ctx.path(), key_path=ctx.key_path, trusted=trusted_path) as mem:
            serve_http(MemrootMcp(mem, trusted=trusted_path, tokens=tokens), host, port)
        return
    if not actor or not namespace:
        raise click.UsageError("a stdio server needs --actor and --namespace (or use --http)")
    with open_memory(
        ctx.path(),
        key_path=ctx.key_path,
        actor=actor,
        actor_type=actor_type,
        namespace=namespace,
        trusted=trusted_path,
    ) as mem:
        MemrootMcp(mem, trusted=trusted_path).run_stdio()


@mcp_cmd.group("token")
def token_group() -> None:
    """Bearer tokens of the HTTP server: each binds one actor and one namespace.

    Stored hashed in LEDGER.mcp-tokens (mode 0600); a token is shown once, when added.

    Example: memroot -l agent.ledger mcp token add --actor agent-7 --namespace alice
    """


def _when(us: int | None) -> str:
    if us is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(us / 1_000_000))


@token_group.command("add")
@click.option("--actor", required=True, help="Who requests with this token act as.")
@click.option("--namespace", required=True, help="The one namespace they reach.")
@click.option(
    "--actor-type",
    type=click.Choice(_ACTOR_TYPES, case_sensitive=False),
    default="AI_AGENT",
    show_default=True,
)
@tokens_option
@click.option("--json", "as_json", is_flag=True, help="Print the token and its record as JSON.")
@pass_ctx
def token_add(
    ctx: Context,
    actor: str,
    namespace: str,
    actor_type: str,
    tokens_path: Path | None,
    as_json: bool,
) -> None:
    """Make a token and print it (only now: the file keeps its hash).

    Example: memroot -l agent.ledger mcp token add --actor agent-7 --namespace alice
    """
    store = _store(ctx, tokens_path)
    token, record = store.add(actor, namespace, actor_type)
    data: dict[str, Any] = {"token": token, **record.public()}
    emit(data, as_json, token)
    if not as_json:
        click.echo(
            f"token {record.id}: {actor} ({actor_type}) in namespace {namespace!r}; shown "
            f"once, stored hashed in {store.path}",
            err=True,
        )


@token_group.command("list")
@tokens_option
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@pass_ctx
def token_list(ctx: Context, tokens_path: Path | None, as_json: bool) -> None:
    """List the tokens: id, actor, namespace, created, revoked (never the tokens).

    Example: memroot -l agent.ledger mcp token list --json
    """
    records = _store(ctx, tokens_path).records()

    def human() -> None:
        if not records:
            click.echo("no tokens (memroot mcp token add --actor A --namespace N)")
        for r in records:
            state = "active" if r.revoked_at is None else f"revoked {_when(r.revoked_at)}"
            click.echo(
                f"{r.id}\t{r.actor}\t{r.actor_type}\t{r.namespace}\t"
                f"created {_when(r.created_at)}\t{state}"
            )

    emit([r.public() for r in records], as_json, human)


@token_group.command("revoke")
@click.argument("token_id")
@tokens_option
@click.option("--json", "as_json", is_flag=True, help="Print the revoked record as JSON.")
@pass_ctx
def token_revoke(ctx: Context, token_id: str, tokens_path: Path | None, as_json: bool) -> None:
    """Revoke a token by id: a running server refuses it from its next request.

    Example: memroot -l agent.ledger mcp token revoke 0123456789abcdef
    """
    record = _store(ctx, tokens_path).revoke(token_id)
    emit(record.public(), as_json, f"revoked token {record.id} ({record.actor} in "
                                   f"{record.namespace})")  # fmt: skip
