"""bench_rootsv2's two ways to the root layer's bytes per snapshot agree with each other."""

from __future__ import annotations

from pathlib import Path

import pytest

from memroot.bench.bench_rootsv2 import run, writer_only


def test_writer_only_figures_match_the_hooked_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's fold alone stores the same summaries per snapshot as the hooked append
    of the same history, and about as many map nodes (object ids are random UUIDs)."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    hooked = run(6000, 3, tmp_path)
    alone = writer_only(6000, 3)
    assert alone["window_batches"] == hooked["window_batches"] == 3
    summaries = {r["root_bytes"] - 97 * r["node_rows"] for r in (hooked, alone)}
    assert max(summaries) - min(summaries) <= 16  # rounding and counts' widths only
    assert abs(alone["node_rows"] - hooked["node_rows"]) <= 0.1 * hooked["node_rows"]
