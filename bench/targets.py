"""Issue 2's speed targets, each put beside the figure a ``memroot bench`` run measured."""

from __future__ import annotations

from typing import Final

from memroot.bench.results import LedgerBench, TargetJSON

__all__ = [
    "BATCHED",
    "DURABLE",
    "GROWTH",
    "PROOFS",
    "TARGET_APPEND_PER_S",
    "TARGET_DURABLE_RATIO",
    "TARGET_GROWTH_RATIO",
    "TARGET_PROOFS_PER_S",
    "TARGET_VERIFY_PER_S",
    "TARGET_VERIFY_RSS_MB",
    "VERIFY",
    "VERIFY_RSS",
    "targets",
]

# Targets of issue 2 ("Speed"), on a 2-core machine.
TARGET_APPEND_PER_S: Final = 100_000
TARGET_DURABLE_RATIO: Final = 0.80
TARGET_PROOFS_PER_S: Final = 10_000
TARGET_VERIFY_PER_S: Final = 200_000
TARGET_VERIFY_RSS_MB: Final = 150
TARGET_GROWTH_RATIO: Final = 0.85


# The targets' names: the JSON's ``targets[].name`` and the keys the human table looks up.
BATCHED: Final = "batched append (memroot, inputs prebuilt)"
DURABLE: Final = "durable append, memroot / raw apsw"
PROOFS: Final = "inclusion proof generate + verify"
VERIFY: Final = "full verify (steps 1-6, 10)"
VERIFY_RSS: Final = "full verify peak RSS"
GROWTH: Final = "append rate at size / empty"


def _at_least(
    name: str, at: int | None, value: float | None, unit: str, bound: float
) -> TargetJSON:
    """Return the target ``value >= bound`` (``met`` is None when nothing was measured)."""
    shown = f"{bound:.2f}" if unit == "ratio" else f"{bound:,}/s"
    met = None if value is None else value >= bound
    return {
        "name": name,
        "at": at,
        "value": value,
        "unit": unit,
        "target": f">= {shown}",
        "met": met,
    }


def targets(r: LedgerBench) -> list[TargetJSON]:
    """Put every issue-2 target beside the figure the run ``r`` measured for it."""
    d, p = r["durable_append"], r["inclusion_proofs"]["memroot"]
    v, g = r["verify"], r["append_growth"]
    out = [
        _at_least(
            BATCHED, b["size"], b["memroot"]["entries_per_s"], "entries/s", TARGET_APPEND_PER_S
        )
        for b in r["batched_append"]
    ]
    out.append(
        _at_least(DURABLE, d["count"], d["ratio_memroot_raw"], "ratio", TARGET_DURABLE_RATIO)
    )
    out.append(_at_least(PROOFS, p["size"], p["proofs_per_s"], "proofs/s", TARGET_PROOFS_PER_S))
    out.append(
        _at_least(VERIFY, v["entries"], v["entries_per_s"], "entries/s", TARGET_VERIFY_PER_S)
    )
    rss = v["peak_rss_mb"]
    rss_target = f"< {TARGET_VERIFY_RSS_MB} MB"
    out.append(
        TargetJSON(name=VERIFY_RSS, at=v["entries"], value=rss, unit="MB", target=rss_target,
                   met=rss < TARGET_VERIFY_RSS_MB)
    )  # fmt: skip
    out.append(_at_least(GROWTH, g["size"], g["ratio_last_first"], "ratio", TARGET_GROWTH_RATIO))
    return out
