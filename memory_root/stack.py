"""The layers a ledger is opened with: its append hooks, replay checks and bundle sections.

One module below the facade and the CLI, so that the library, ``memroot.open`` (the facade),
the integrations and the ``memroot`` command all take the same lists from here:

- ``default_hooks``: what every ledger opened without explicit hooks validates.
  ``Ledger.open(path)`` and ``Ledger.init(path)`` install it (the ledger names this factory in
  ``memroot.ledger.ledger.DEFAULT_HOOKS`` and imports it only when it opens a ledger, so the
  ledger layer imports nothing above it); so do the facade (``memroot.memory.ledger_hooks``)
  and every CLI command, so the library and the command line validate an append identically.
- ``replay_checks``: the checks of steps 7-9 that ``verify`` runs over a ledger (the
  integrations' own, ``INTEGRATION_CHECKS``, named by string: they sit above).
- ``bundle_sections`` / ``bundle_checks``: what ``export`` writes into a bundle for the layers
  above the ledger, and what ``audit`` checks in it.

``memroot.cli.hooks`` re-exports these four (the README documented that path first).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from memroot.ledger.bundle.export import BundleReader, BundleSection
    from memroot.ledger.ledger import AppendHook, Ledger
    from memroot.ledger.verify import ReplayCheck

__all__ = [
    "INTEGRATION_CHECKS",
    "bundle_checks",
    "bundle_sections",
    "default_hooks",
    "replay_checks",
]

INTEGRATION_CHECKS: Final = ("memroot.integrations.langgraph._check:LangGraphTablesCheck",)
"""The replay checks of the integrations' own tables, run after the layers' (``replay_checks``).

Named here and imported when ``verify`` runs: the integrations sit above this layer, which
imports none of them (docs/architecture.md, "Late bindings").
"""


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


def replay_checks(
    ledger: Ledger, *, restricted: bool = False, share: bool = False
) -> list[ReplayCheck]:
    """Return the checks of steps 7-9 that ``verify`` runs over a ledger.

    ``restricted``: the audit covers some branches only (``verify --branch``). ``share``:
    the checks read ``ledger``'s own connection (the caller audits inside one read
    transaction of it, so every check sees the snapshot the steps see) instead of opening
    the file again each.
    """
    on = ledger if share else None
    from memroot.memory_root.erasure import ErasureCheck
    from memroot.memory_root.falsify.replay import FalsifyReplayCheck
    from memroot.memory_root.receipts import ReceiptsCheck
    from memroot.memory_root.replay import RootsReplayCheck
    from memroot.memory_root.tables_check import LayerTablesCheck
    from memroot.projections.replay import MemoryReplayCheck

    memory = MemoryReplayCheck(ledger.path, restricted=restricted, ledger=on)
    checks: list[ReplayCheck] = [
        RootsReplayCheck(ledger.path, restricted=restricted, ledger=on),
        memory,
        # Its own views read the memory model's replay: shared, not folded twice.
        FalsifyReplayCheck(ledger.path, memory=memory, ledger=on),
        ReceiptsCheck(ledger.path, ledger=on),
        ErasureCheck(ledger.path, restricted=restricted, ledger=on),
        LayerTablesCheck(ledger.path, restricted=restricted, ledger=on),
    ]
    for spec in INTEGRATION_CHECKS:
        module, _, name = spec.partition(":")
        check = getattr(importlib.import_module(module), name)
        checks.append(check(ledger.path, restricted=restricted, ledger=on))
    return checks


def bundle_sections(ledger: Ledger) -> list[BundleSection]:
    """Return the sections of the layers above that ``export`` writes into a bundle."""
    from memroot.memory_root.bundle_section import RootsSection

    return [RootsSection()]


def bundle_checks(bundle: BundleReader) -> list[ReplayCheck]:
    """Return the checks of steps 7-9 that ``audit`` runs over a bundle (reading its sections)."""
    from memroot.memory_root.bundle_section import RootsSectionCheck, bundle_lists
    from memroot.memory_root.falsify.replay import FalsifyReplayCheck
    from memroot.memory_root.replay import RootsReplayCheck

    # A v3 root's projection list is in its record (FORMAT §6.16), not in its entry.
    return [
        RootsReplayCheck(),
        RootsSectionCheck(bundle),
        FalsifyReplayCheck(lists=bundle_lists(bundle)),
    ]
