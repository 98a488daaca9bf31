"""The layers the CLI opens a ledger with: re-exported from ``memroot.memory_root.stack``.

The default hooks, replay checks and bundle sections live below the CLI and the facade
(``memroot.memory_root.stack``), which every command, ``memroot.open`` and the integrations
take them from. This module keeps the import path the README documented first working.
"""

from __future__ import annotations

from memroot.memory_root.stack import bundle_checks, bundle_sections, default_hooks, replay_checks

__all__ = [
    "bundle_checks",
    "bundle_sections",
    "default_hooks",
    "replay_checks",
]
