"""The MCP server over the SDK's streamable HTTP transport, one bearer token per client.

``serve_http(server, host, port)`` runs the SDK's streamable HTTP app (endpoint ``/mcp``)
with its bearer-token middleware: every request's ``Authorization: Bearer`` token is looked
up in the server's ``TokenStore``; without a valid, unrevoked token the request gets 401 and
no handler runs. A session stays bound to the token that opened it (the SDK refuses another
token on it). Bound to a loopback address the SDK also turns on DNS-rebinding protection.
"""

from __future__ import annotations

import socket
import sys
from typing import TYPE_CHECKING

import anyio
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from pydantic import AnyHttpUrl

from memroot.ledger.errors import ValidationError

if TYPE_CHECKING:
    from .server import MemrootMcp
    from .tokens import TokenStore

__all__ = ["TokenVerifier", "parse_address", "serve_http"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class TokenVerifier:
    """The SDK's ``TokenVerifier`` over a ``TokenStore`` (``client_id`` is the token id)."""

    def __init__(self, tokens: TokenStore) -> None:
        """Verify bearer tokens against ``tokens`` (re-read when the file changes)."""
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        """Return the token's access record, or None for a missing, bad or revoked token."""
        record = await anyio.to_thread.run_sync(self.tokens.find, token)
        if record is None:
            return None
        return AccessToken(
            token=token,
            client_id=record.id,
            scopes=[],
            subject=record.actor,
            claims={"namespace": record.namespace, "actor_type": record.actor_type},
        )


def parse_address(text: str) -> tuple[str, int]:
    """Return ``(host, port)`` of ``HOST:PORT`` (``[::1]:8000`` for IPv6; port 0: any free).

    Raises:
        ValidationError: not HOST:PORT, or a port outside 0-65535.
    """
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValidationError(
            f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:8765; port 0 picks a free one)",
            field="http",
        )
    return host, int(port)


def serve_http(server: MemrootMcp, host: str, port: int) -> None:
    """Serve ``server`` over streamable HTTP at ``http://HOST:PORT/mcp`` until interrupted.

    Prints ``memroot mcp: serving http://HOST:PORT/mcp`` on stderr once listening (with the
    port chosen when ``port`` is 0).

    Raises:
        ValueError: the server has no ``TokenStore``.
        StorageError: the address cannot be bound.
    """
    import uvicorn

    from memroot.ledger.errors import StorageError

    if server.tokens is None:
        raise ValueError("an HTTP server needs a TokenStore: every client needs a token")
    app = server.server.streamable_http_app(
        host=host,
        auth=AuthSettings(
            # No OAuth server: tokens are static; the SDK requires an issuer all the same.
            issuer_url=AnyHttpUrl(f"http://{'localhost' if ':' in host else host}:{port or 1}"),
            resource_server_url=None,
        ),
        token_verifier=TokenVerifier(server.tokens),
    )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise StorageError(f"cannot listen on {host}:{port}: {e}") from None
    sock.listen(128)  # connections queue from now on, before uvicorn starts accepting
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    if host not in _LOOPBACK:
        sys.stderr.write(
            f"memroot mcp: warning: {host} is not a loopback address; bearer tokens travel in "
            "clear over plain HTTP: put TLS in front of it\n"
        )
    sys.stderr.write(f"memroot mcp: serving http://{shown}:{bound}/mcp\n")
    sys.stderr.flush()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
