"""`memroot bench` runs end to end at a tiny size and reports every figure (shape, not speed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memroot.bench import ledger as bench_ledger
from memroot.cli.main import cli

_SMOKE = ["bench", "--sizes", "1000", "--durable", "20", "--proofs", "200", "--json"]


def _run(extra: list[str]) -> tuple[dict[str, Any], str]:
    result = CliRunner().invoke(cli, [*_SMOKE, *extra], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and value > 0


def test_bench_json_has_every_phase_machine_and_command(tmp_path: Path) -> None:
    """The JSON carries the five phases, the machine, the command and a target per figure."""
    out = tmp_path / "bench.json"
    data, stderr = _run(["--out", str(out)])
    assert json.loads(out.read_text(encoding="utf-8")) == data
    for phase in ("[1/5]", "[2/5]", "[3/5]", "[4/5]", "[5/5]"):
        assert phase in stderr

    machine = data["machine"]
    for key in ("nproc", "cpu_model", "python", "sqlite_apsw", "apsw"):
        assert machine[key], key
    assert data["equivalent_command"].startswith("memroot bench --sizes 1000")
    assert isinstance(data["command"], str) and data["command"]
    assert data["params"]["sizes"] == [1000]

    (batched,) = data["batched_append"]
    assert batched["size"] == 1000
    mem = batched["memroot"]
    assert mem["entries"] == 1000
    assert _positive(mem["entries_per_s"]) and _positive(mem["entries_per_s_incl_construction"])
    assert _positive(batched["raw_apsw"]["entries_per_s"])
    assert _positive(batched["ratio_memroot_raw"])
    if batched["pymerkle"] is not None:
        assert _positive(batched["pymerkle"]["entries_per_s"])
        assert _positive(batched["ratio_memroot_pymerkle"])

    durable = data["durable_append"]
    assert durable["count"] == 20
    assert _positive(durable["memroot_per_s"]) and _positive(durable["raw_apsw_per_s"])

    proofs = data["inclusion_proofs"]["memroot"]
    assert proofs["size"] == 1001  # the genesis entry plus the 1,000 appended
    assert 0 < proofs["count"] <= 200 and _positive(proofs["proofs_per_s"])

    verify = data["verify"]
    assert verify["entries"] == 1001
    assert _positive(verify["entries_per_s"]) and _positive(verify["peak_rss_mb"])

    growth = data["append_growth"]
    assert growth["size"] == 1000
    assert growth["ratio_last_first"] is None  # 1,000 entries are too few for two windows

    ref = data["reference_backend"]
    if data["machine"]["backend"] == "native":
        # The pure-Python reference is measured in the same run, beside the native figures.
        assert ref["size"] == 1000
        assert _positive(ref["batched_append_per_s"]) and _positive(ref["verify_per_s"])
        assert _positive(ref["ratio_append_native_reference"])
        assert _positive(ref["ratio_verify_native_reference"])
    else:
        assert data["machine"]["backend"] == "python" and ref is None

    names = {t["name"] for t in data["targets"]}
    assert len(names) == 6
    for t in data["targets"]:
        assert set(t) == {"name", "at", "value", "unit", "target", "met"}
        assert t["met"] in (True, False, None)


def test_bench_human_table_puts_targets_beside_figures() -> None:
    """Without --json the report is a table with each target and whether it was met."""
    result = CliRunner().invoke(
        cli,
        ["bench", "--sizes", "1000", "--durable", "10", "--proofs", "50"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    text = result.stdout
    for needle in (">= 100,000/s", ">= 0.80", ">= 10,000/s", ">= 200,000/s", "< 150 MB"):
        assert needle in text
    assert "met" in text or "UNMET" in text
    assert "raw apsw" in text


def test_bench_without_pymerkle_says_so_and_skips_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """When pymerkle is not installed the run still completes and names what it skipped."""
    monkeypatch.setattr(bench_ledger, "_import_pymerkle", lambda: None)
    data, _ = _run([])
    assert data["batched_append"][0]["pymerkle"] is None
    assert data["batched_append"][0]["ratio_memroot_pymerkle"] is None
    assert data["inclusion_proofs"]["pymerkle"] is None
    assert any("pymerkle is not installed" in note for note in data["notes"])
