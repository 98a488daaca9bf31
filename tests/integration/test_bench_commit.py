"""`bench/bench_commit.py` measures a durable append piece by piece (shape, not speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from memroot.bench import bench_commit

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_commit.py"


def test_bench_commit_counts_statements_and_frames_of_both_sides() -> None:
    """memroot's append runs the 9-10 statements of a sealed commit; raw apsw's its 3."""
    out = bench_commit.run(count=5, rounds=1)
    stmts = out["statements_per_append"]
    assert stmts["raw_apsw"] == 3.0
    assert 9.0 <= stmts["memroot"] <= 10.0  # the nodes insert is left out when none completes
    frames = out["wal_frames_per_append"]
    assert frames["memroot"] > frames["raw_apsw"] >= 1.0
    assert out["cpu_us"]["memroot"] > out["cpu_us"]["raw_apsw"] > 0
    assert out["sign_us"] > 0 and out["self_check_us"] > 0 and out["fsync_us"] > 0
    assert 0 < out["ratio_bound_at_fsync"] <= 1


def test_bench_commit_script_prints_json() -> None:
    """The script runs as documented (`python bench/bench_commit.py ... --json`)."""
    done = subprocess.run(
        [sys.executable, str(BENCH), "--count", "3", "--rounds", "1", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert set(json.loads(done.stdout)) >= {"cpu_us", "statements_per_append", "fsync_us"}
