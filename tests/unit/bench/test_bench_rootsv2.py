"""bench_rootsv2's two ways to the root layer's bytes per snapshot agree with each other."""

from __future__ import annotations

from pathlib import Path

import pytest

from memroot.bench.bench_rootsv2 import run, writer_only
from memroot.memory_root.map_nodes import ROOT_ROW_BYTES, ROW_BYTES


def test_writer_only_figures_match_the_hooked_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's fold alone stores the same summaries per snapshot as the hooked append
    of the same history, and about as many map nodes (object ids are random UUIDs)."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    hooked = run(6000, 3, tmp_path)
    alone = writer_only(6000, 3)
    assert alone["window_batches"] == hooked["window_batches"] == 3
    summaries = {
        r["root_bytes"] - ROW_BYTES * r["node_rows"] - ROOT_ROW_BYTES * r.get("start_rows", 0)
        for r in (hooked, alone)
    }
    assert max(summaries) - min(summaries) <= 16  # rounding and counts' widths only
    assert abs(alone["node_rows"] - hooked["node_rows"]) <= 0.1 * hooked["node_rows"]


def test_violations_from_new_sources_grow_v1_snapshots_not_v2() -> None:
    """``--violations``: with a new source every 10 entries, the writer before failure-motifs
    v2 stores at least 40 bytes more per source met (its fold state counts every one); v2
    stores as many bytes at 6,000 entries as at 4,000 (its tables are full)."""
    new = [writer_only(n, 1, violations=True) for n in (4000, 6000)]
    old = [writer_only(n, 1, violations=True, motifs_v1=True) for n in (4000, 6000)]
    summaries = [
        [r["root_bytes"] - ROW_BYTES * r["node_rows"] for r in runs] for runs in (new, old)
    ]
    assert abs(summaries[0][1] - summaries[0][0]) <= 8  # counts' widths only
    assert summaries[1][1] - summaries[1][0] >= 200 * 40  # 200 more sources of 40 characters
    assert summaries[1][1] > summaries[0][1] + 300 * 40
