"""The default hook stack: what every ledger opened without explicit hooks validates.

``Ledger.open(path)`` and ``Ledger.init(path)`` install ``default_hooks()`` (the ledger names
this factory in ``memroot.ledger.ledger.DEFAULT_HOOKS`` and imports it only when it opens a
ledger, so the ledger layer imports nothing above it). The CLI installs the same list
(``memroot.cli.hooks.default_hooks``), so the library and the command line validate an
append identically.
"""

from __future__ import annotations

from typing import Any

import apsw

from memroot.ledger.entries import RESERVED_OPS, Entry, Kind, OpInput
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import AppendHook, Ledger
from memroot.ledger.vocab import OpType

__all__ = ["CascadeGuard", "default_hooks"]


def default_hooks() -> list[AppendHook]:
    """Return the append hooks of every layer, in the order they must fold an entry."""
    from memroot.memory_root.branches import BranchRegistry
    from memroot.memory_root.falsify import FalsifyHook
    from memroot.memory_root.hook import RootsHook
    from memroot.projections.anchors import ConversationTree
    from memroot.projections.gitctx import GitContextHook
    from memroot.projections.hook import MemoryHook

    falsify = FalsifyHook()
    # The guard first, so a refused CASCADE is refused before any layer reads it. RootsHook
    # last: an automatic snapshot is taken after every other layer folded the entry.
    # FalsifyHook after MemoryHook (objects' state column) and before RootsHook.
    return [
        CascadeGuard(falsify),
        BranchRegistry(),
        ConversationTree(),
        GitContextHook(),
        MemoryHook(),
        falsify,
        RootsHook(),
    ]


class CascadeGuard:
    """Refuse a CASCADE that ``Falsifier.cascade`` did not announce to its hook.

    A CASCADE is reserved (``RESERVED_OPS``); the falsification layer announces the one it
    writes (``FalsifyHook.expect``) right before the append, so an unannounced one came from
    a caller.
    """

    def __init__(self, falsify: Any) -> None:
        """Watch ``falsify`` (the stack's ``FalsifyHook``) for announced cascades."""
        self.falsify = falsify

    def install(self, db: apsw.Connection) -> None:
        """Nothing to create."""

    def apply(
        self, db: apsw.Connection, ledger: Ledger, entry: Entry, content: str | None
    ) -> list[OpInput]:
        """Refuse an unannounced CASCADE (nothing is written); pass every other entry."""
        if entry.kind is Kind.OP and entry.type == OpType.CASCADE:
            memo = getattr(self.falsify, "_memo", None)
            if memo is None or memo[0] != entry.branch or memo[1] != entry.prev:
                raise RefusedError(
                    f"CASCADE is written only by memroot itself (by: {RESERVED_OPS['CASCADE']}); "
                    "it cannot be appended directly"
                )
        return []
