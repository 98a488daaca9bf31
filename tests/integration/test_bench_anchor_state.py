"""bench_anchor_state runs end to end on a tiny workload (figures are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_anchor_state.py"


def test_bench_anchor_state_reports_both_phases() -> None:
    """--json prints the append and query phases; every workload entry is accepted."""
    args = ["--events", "60", "--objects", "300", "--ops", "90", "--repeat", "1", "--runs", "2"]
    out = subprocess.run(
        [sys.executable, str(BENCH), *args, "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    report = json.loads(out.stdout)
    append = report["append"]
    assert append["accepted_gated"] == append["accepted_plain"] == append["entries"]
    assert append["gated_rows"] > 0
    assert all(isinstance(append[f"statement_cache_misses_{k}"], int) for k in ("plain", "gated"))
    assert report["query"]["results_median"] > 0


def test_bench_anchor_state_single_build() -> None:
    """--single appends the workload once, in the mode named, and says so."""
    args = ["--events", "30", "--objects", "150", "--ops", "45", "--single", "gated"]
    out = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, check=True, timeout=600
    )
    assert out.stdout.startswith("gated: ") and out.stdout.rstrip().endswith(" 0 refused")
