"""memory_root: snapshots of deterministic projections committed as memory roots (SPEC 6).

Public API: ``Roots`` (snapshot, chain, show, diff, SelfModel) over a ledger opened with a
``RootsHook``; the pure format in ``memroot.memory_root.root``; SelfModel hooks in
``memroot.memory_root.selfmodel``; verify step 8 in ``memroot.memory_root.replay``.
"""

from __future__ import annotations

from memroot.memory_root.hook import RootsHook
from memroot.memory_root.records import RootRecord, SelfModelRecord
from memroot.memory_root.replay import RootsReplayCheck
from memroot.memory_root.root import HighWater, MemoryRoot, ProjectionDigest, RootPreimage
from memroot.memory_root.roots import (
    ProjectionDiff,
    RootDiff,
    Roots,
    RootView,
    SelfModelView,
    SnapshotResult,
    SummaryView,
)
from memroot.memory_root.selfmodel import (
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
