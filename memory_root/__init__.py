"""memory_root: snapshots of deterministic projections committed as memory roots (SPEC 6).

Public API: ``Roots`` (snapshot, chain, show, diff, SelfModel) over a ledger opened with a
``RootsHook``; the pure format in ``memory_root.root``; SelfModel hooks in
``memory_root.selfmodel``; verify step 8 in ``memory_root.replay``.
"""

from __future__ import annotations

from memory_root.hook import RootsHook
from memory_root.records import RootRecord, SelfModelRecord
from memory_root.replay import RootsReplayCheck
from memory_root.root import HighWater, MemoryRoot, ProjectionDigest, RootPreimage
from memory_root.roots import (
    ProjectionDiff,
    RootDiff,
    Roots,
    RootView,
    SelfModelView,
    SnapshotResult,
    SummaryView,
)
from memory_root.selfmodel import (
    Capability,
    SelfModel,
    SelfModelHook,
    StaticSelfModel,
    selfmodel_root,
)

__all__ = [
    "Capability",
    "HighWater",
    "MemoryRoot",
    "ProjectionDiff",
    "ProjectionDigest",
    "RootDiff",
    "RootPreimage",
    "RootRecord",
    "RootView",
    "Roots",
    "RootsHook",
    "RootsReplayCheck",
    "SelfModel",
    "SelfModelHook",
    "SelfModelRecord",
    "SelfModelView",
    "SnapshotResult",
    "StaticSelfModel",
    "SummaryView",
    "selfmodel_root",
]
