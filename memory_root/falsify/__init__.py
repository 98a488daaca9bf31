"""Falsification (SPEC 7): item states, the dependency index, bounded cascades, replay.

    from memroot.memory_root.falsify import Falsifier, FalsifyHook

Module map, lower modules first (each imports only those above it):

==================  ==========================================================================
``deps``            items (``ItemRef``, the four kinds), branch views, the dependency index
                    folded from entries, and ``Graph`` (what cites what, what was built on it)
``states``          item states ``live | stale | falsified`` and their history (``fz_states``)
``cascade``         the bounded walk (``CascadeRequest``, ``plan``, ``Plan.payload``) and the
                    re-snapshots of the affected roots without the falsified inputs
``_fold_cache``     fold states kept every ``FOLD_SPACING`` entries, where re-snapshots start
``_core``           the rules applied to one entry (``FalsifyCore``), shared by the hook, the
                    replay and ``rebuild``; the tables (``install``); the core over a ledger
``hook``            ``FalsifyHook``, the append hook that keeps the tables and refuses
``replay``          verify step 9 (``FalsifyReplayCheck``), ``rebuild``, and the skips a replay
                    makes (``replayed_skips``: the judge of a recorded skip)
``checked``         the stored states a state operation or a read relies on, checked against
                    the ledger's own operations (a skip row re-judged)
``checked_deps``    the dependency index a cascade walks, checked against its re-derivation
``api``             ``Falsifier``: resolve, read (state, history, why), falsify, cascade
==================  ==========================================================================

The names below are re-exported here; the lower-level ones live in their modules. The
operations' formats are in docs/FORMAT.md §8, the user's guide in docs/falsify.md.
"""

from memroot.memory_root.falsify.api import (
    KIND_ALIASES,
    POLICY_VERSION,
    CascadeResult,
    Falsifier,
    ItemWhy,
    RestoreResult,
    parse_kinds,
)
from memroot.memory_root.falsify.cascade import (
    CascadeRequest,
    Cut,
    Plan,
    Resnapshot,
    RestorePlan,
    Step,
)
from memroot.memory_root.falsify.deps import (
    EVENT,
    KINDS,
    OBJECT,
    ROOT,
    SELFMODEL,
    SUMMARY,
    ItemRef,
    Located,
)
from memroot.memory_root.falsify.hook import FalsifyHook
from memroot.memory_root.falsify.replay import FalsifyReplayCheck, RebuildResult, rebuild
from memroot.memory_root.falsify.states import FALSIFIED, LIVE, STALE, STATES, StateChange

__all__ = [
    "EVENT",
    "FALSIFIED",
    "KINDS",
    "KIND_ALIASES",
    "LIVE",
    "OBJECT",
    "POLICY_VERSION",
    "ROOT",
    "SELFMODEL",
    "STALE",
    "STATES",
    "SUMMARY",
    "CascadeRequest",
    "CascadeResult",
    "Cut",
    "Falsifier",
    "FalsifyHook",
    "FalsifyReplayCheck",
    "ItemRef",
    "ItemWhy",
    "Located",
    "Plan",
    "RebuildResult",
    "Resnapshot",
    "RestorePlan",
    "RestoreResult",
    "StateChange",
    "Step",
    "parse_kinds",
    "rebuild",
]
