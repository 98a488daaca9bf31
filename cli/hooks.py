"""Which upper-layer hooks the CLI installs on a ledger, and which replay checks verify runs.

The ledger layer knows nothing of memory objects or roots; the CLI wires the layers together
here, in one place.
"""

from __future__ import annotations

from memroot.ledger.bundle.export import BundleReader, BundleSection
from memroot.ledger.ledger import AppendHook, Ledger
from memroot.ledger.verify import ReplayCheck

__all__ = [
    "bundle_checks",
    "bundle_sections",
    "default_hooks",
    "replay_checks",
]


def default_hooks() -> list[AppendHook]:
    """Return the append hooks every CLI command installs (derived state kept in step).

    The same list ``Ledger.open(path)`` installs by default (``memroot.memory_root.stack``),
    so the CLI and the library validate alike.
    """
    from memroot.memory_root.stack import default_hooks as stack

    return stack()


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
    from memroot.integrations.langgraph._check import LangGraphTablesCheck
    from memroot.memory_root.erasure import ErasureCheck
    from memroot.memory_root.falsify.replay import FalsifyReplayCheck
    from memroot.memory_root.replay import RootsReplayCheck
    from memroot.memory_root.tables_check import LayerTablesCheck
    from memroot.projections.replay import MemoryReplayCheck
    from memroot.receipts import ReceiptsCheck

    memory = MemoryReplayCheck(ledger.path, restricted=restricted, ledger=on)
    return [
        RootsReplayCheck(ledger.path, restricted=restricted, ledger=on),
        memory,
        # Its own views read the memory model's replay: shared, not folded twice.
        FalsifyReplayCheck(ledger.path, memory=memory, ledger=on),
        ReceiptsCheck(ledger.path, ledger=on),
        ErasureCheck(ledger.path, restricted=restricted, ledger=on),
        LayerTablesCheck(ledger.path, restricted=restricted, ledger=on),
        LangGraphTablesCheck(ledger.path, restricted=restricted, ledger=on),
    ]


def bundle_sections(ledger: Ledger) -> list[BundleSection]:
    """Return the sections of the layers above that ``export`` writes into a bundle."""
    from memroot.memory_root.bundle_section import RootsSection

    return [RootsSection()]


def bundle_checks(bundle: BundleReader) -> list[ReplayCheck]:
    """Return the checks of steps 7-9 that ``audit`` runs over a bundle (reading its sections)."""
    from memroot.memory_root.bundle_section import RootsSectionCheck
    from memroot.memory_root.falsify.replay import FalsifyReplayCheck
    from memroot.memory_root.replay import RootsReplayCheck

    return [RootsReplayCheck(), RootsSectionCheck(bundle), FalsifyReplayCheck()]
