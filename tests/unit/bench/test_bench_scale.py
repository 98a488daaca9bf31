"""bench/bench_scale.py: the ratios to the first size and the 15% checks (no ledgers built)."""

from __future__ import annotations

import pytest

from memroot.bench.bench_scale import checks, with_ratios
from memroot.bench.results import ScaleSize


def _size(n: int, append: float, verify: float, rss: float) -> ScaleSize:
    """A measured size whose CPU rates equal its wall rates."""
    return {
        "size": n, "append_s": n / append, "append_cpu_s": n / append,
        "append_per_s": append, "append_per_cpu_s": append, "window": 1000,
        "window_per_s": append, "window_per_cpu_s": append, "append_peak_rss_mb": rss,
        "db_mb": 1.0, "verify_entries": n + 1, "verify_s": 1.0, "verify_cpu_s": 1.0,
        "verify_per_s": verify, "verify_per_cpu_s": verify, "verify_peak_rss_mb": rss,
        "ratio_append_to_first": None, "ratio_append_cpu_to_first": None,
        "ratio_verify_to_first": None, "ratio_verify_cpu_to_first": None,
        "ratio_append_rss_to_first": None, "ratio_verify_rss_to_first": None,
        "loadavg_after": [0.0, 0.0, 0.0],
    }  # fmt: skip


def test_ratios_compare_every_size_with_the_first() -> None:
    """Rates and peak RSS are divided by the first size's; the first's ratios are 1."""
    rows = with_ratios([_size(10, 100.0, 200.0, 50.0), _size(100, 80.0, 220.0, 60.0)])
    assert rows[0]["ratio_append_to_first"] == rows[0]["ratio_verify_rss_to_first"] == 1.0
    assert rows[1]["ratio_append_to_first"] == pytest.approx(0.8)
    assert rows[1]["ratio_verify_cpu_to_first"] == pytest.approx(1.1)
    assert rows[1]["ratio_append_rss_to_first"] == pytest.approx(1.2)


def test_checks_allow_15_percent_slower_and_15_percent_more_memory() -> None:
    """At 0.85 of the first rate a check is met, below it not; RSS up to 1.15 is flat."""
    rows = with_ratios(
        [
            _size(10, 100.0, 100.0, 100.0),
            _size(100, 85.0, 84.0, 115.0),
            _size(1000, 90.0, 90.0, 116.0),
        ]
    )
    out = {(c["at"], c["name"]): c["met"] for c in checks(rows)}
    assert len(out) == 12  # six checks for each size after the first
    assert out[(100, "append rate / at 10")] is True
    assert out[(100, "verify rate / at 10")] is False
    assert out[(100, "append peak RSS / at 10")] is True
    assert out[(1000, "verify peak RSS / at 10")] is False


def test_one_size_has_no_checks() -> None:
    """A run of one size has nothing to compare with."""
    assert checks(with_ratios([_size(10, 1.0, 1.0, 1.0)])) == []
