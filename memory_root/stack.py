"""The default hook stack: what every ledger opened without explicit hooks validates.

``Ledger.open(path)`` and ``Ledger.init(path)`` install ``default_hooks()`` (the ledger names
this factory in ``memroot.ledger.ledger.DEFAULT_HOOKS`` and imports it only when it opens a
ledger, so the ledger layer imports nothing above it). The CLI installs the same list
(``memroot.cli.hooks.default_hooks``), so the library and the command line validate an
append identically.
"""

from __future__ import annotations

from memroot.ledger.ledger import AppendHook

__all__ = ["default_hooks"]


def default_hooks() -> list[AppendHook]:
    """Return the append hooks of every layer, in the order they must fold an entry."""
    from memroot.memory_root.branches import BranchRegistry
    from memroot.memory_root.erasure import ErasureHook
    from memroot.memory_root.falsify import FalsifyHook
    from memroot.memory_root.hook import RootsHook
    from memroot.projections.anchors import ConversationTree
    from memroot.projections.gitctx import GitContextHook
    from memroot.projections.hook import MemoryHook

    # RootsHook after the layers it snapshots: an automatic snapshot is taken after every
    # other layer folded the entry. FalsifyHook after MemoryHook (objects' state column).
    return [
        BranchRegistry(),
        ConversationTree(),
        GitContextHook(),
        MemoryHook(),
        FalsifyHook(),
        RootsHook(),
        # Last: a TOMBSTONE is folded by every layer before its consequences are appended
        # on the other branches (memory_root.erasure).
        ErasureHook(),
    ]
