"""bench/bench_verify_threads.py: the CPU seconds of each verify thread, on a small ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memroot.bench.bench_verify_threads import main, measure
from memroot.bench.ledger import batched_memroot
from memroot.ledger import _backend
from memroot.ledger.verify import store_source


def test_each_thread_is_measured_and_the_reader_is_put_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "l.ledger"
    batched_memroot(path, 3000)
    run = store_source._ChunkReader._run
    got = measure(path)
    assert store_source._ChunkReader._run is run
    assert got["entries"] == 3001
    assert got["critical_cpu_s"] == max(got["auditor_cpu_s"], got["reader_cpu_s"])
    # The reader thread runs on the native core only (the reference reads for itself).
    assert (got["reader_cpu_s"] > 0) == (_backend.NATIVE is not None)
    assert main(["--ledger", str(path), "--runs", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["entries"] for r in doc["runs"]] == [3001, 3001]
