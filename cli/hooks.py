"""Which upper-layer hooks the CLI installs on a ledger, and which replay checks verify runs.

The ledger layer knows nothing of memory objects or roots; the CLI wires the layers together
here, in one place.
"""

from __future__ import annotations

from ledger.ledger import AppendHook, Ledger
from ledger.verify import ReplayCheck

__all__ = ["default_hooks", "replay_checks"]


def default_hooks() -> list[AppendHook]:
    """Return the append hooks every CLI command installs (derived state kept in step)."""
    return []


def replay_checks(ledger: Ledger) -> list[ReplayCheck]:
    """Return the checks of steps 7-9 that ``verify`` runs over a ledger."""
    return []
