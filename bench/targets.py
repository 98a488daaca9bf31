"""Issue 2's speed targets, each put beside the figure a ``memroot bench`` run measured."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from memroot.bench.results import LedgerBench, TargetJSON

__all__ = [
    "TARGET_APPEND_PER_S",
    "TARGET_DURABLE_RATIO",
    "TARGET_GROWTH_RATIO",
    "TARGET_PROOFS_PER_S",
    "TARGET_VERIFY_PER_S",
    "TARGET_VERIFY_RSS_MB",
    "Target",
    "targets",
]

# Targets of issue 2 ("Speed"), on a 2-core machine.
TARGET_APPEND_PER_S: Final = 100_000
TARGET_DURABLE_RATIO: Final = 0.80
TARGET_PROOFS_PER_S: Final = 10_000
TARGET_VERIFY_PER_S: Final = 200_000
TARGET_VERIFY_RSS_MB: Final = 150
TARGET_GROWTH_RATIO: Final = 0.85


@dataclass(frozen=True, slots=True)
class Target:
    """One issue-2 target beside the figure measured for it (``met`` is None: not measured)."""

    name: str
    at: int | None
    value: float | None
    unit: str
    target: str
    met: bool | None

    def to_json(self) -> TargetJSON:
        """Return the target as a JSON object."""
        return {
            "name": self.name,
            "at": self.at,
            "value": self.value,
            "unit": self.unit,
            "target": self.target,
            "met": self.met,
        }


def _ge(value: float | None, bound: float) -> bool | None:
    return None if value is None else value >= bound


def targets(r: LedgerBench) -> list[Target]:
    """Put every issue-2 target beside the figure the run ``r`` measured for it."""
    out = [
        Target(
            "batched append (memroot, inputs prebuilt)",
            b["size"],
            b["memroot"]["entries_per_s"],
            "entries/s",
            f">= {TARGET_APPEND_PER_S:,}/s",
            _ge(b["memroot"]["entries_per_s"], TARGET_APPEND_PER_S),
        )
        for b in r["batched_append"]
    ]
    d = r["durable_append"]
    out.append(
        Target(
            "durable append, memroot / raw apsw",
            d["count"],
            d["ratio_memroot_raw"],
            "ratio",
            f">= {TARGET_DURABLE_RATIO:.2f}",
            _ge(d["ratio_memroot_raw"], TARGET_DURABLE_RATIO),
        )
    )
    p = r["inclusion_proofs"]["memroot"]
    out.append(
        Target(
            "inclusion proof generate + verify",
            p["size"],
            p["proofs_per_s"],
            "proofs/s",
            f">= {TARGET_PROOFS_PER_S:,}/s",
            _ge(p["proofs_per_s"], TARGET_PROOFS_PER_S),
        )
    )
    v = r["verify"]
    out.append(
        Target(
            "full verify (steps 1-6, 10)",
            v["entries"],
            v["entries_per_s"],
            "entries/s",
            f">= {TARGET_VERIFY_PER_S:,}/s",
            _ge(v["entries_per_s"], TARGET_VERIFY_PER_S),
        )
    )
    out.append(
        Target(
            "full verify peak RSS",
            v["entries"],
            v["peak_rss_mb"],
            "MB",
            f"< {TARGET_VERIFY_RSS_MB} MB",
            v["peak_rss_mb"] < TARGET_VERIFY_RSS_MB,
        )
    )
    g = r["append_growth"]
    out.append(
        Target(
            "append rate at size / empty",
            g["size"],
            g["ratio_last_first"],
            "ratio",
            f">= {TARGET_GROWTH_RATIO:.2f}",
            _ge(g["ratio_last_first"], TARGET_GROWTH_RATIO),
        )
    )
    return out
