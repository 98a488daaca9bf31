"""memroot over the Model Context Protocol (extra ``memroot[mcp]``, the official ``mcp`` SDK).

``MemrootMcp(mem)`` serves one ``Memory`` to one client over stdio (``run_stdio``), acting
as ``mem``'s actor inside ``mem``'s namespace; ``MemrootMcp(mem, tokens=TokenStore(path))``
with ``serve_http`` serves many clients over streamable HTTP, each acting as the actor and
namespace of its bearer token. Every tool acts only inside the caller's namespace
(``scope``). The ``memroot mcp`` command (``memroot.cli.mcp_cmd``) starts either.
"""

from __future__ import annotations

from .http import parse_address, serve_http
from .scope import Scope
from .server import Identity, MemrootMcp, build_server
from .tokens import TokenRecord, TokenStore, default_tokens_path
from .tools import TOOLS

__all__ = [
    "TOOLS",
    "Identity",
    "MemrootMcp",
    "Scope",
    "TokenRecord",
    "TokenStore",
    "build_server",
    "default_tokens_path",
    "parse_address",
    "serve_http",
]
