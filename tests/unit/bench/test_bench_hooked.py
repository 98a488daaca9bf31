"""memroot.bench.hooked: the mixed history, the events file and issue 12's targets."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from memroot.bench import hooked
from memroot.bench.results import LedgerBench
from memroot.bench.targets import targets
from memroot.ledger.entries import EventInput, OpInput, parse_input
from memroot.ledger.ledger import Ledger


def _kind(item: EventInput | OpInput) -> str:
    return "EVENT" if isinstance(item, EventInput) else item.op_type


def test_mixed_history_has_the_stated_mix() -> None:
    """Per 100 entries: 90 events, 7 ASSERT, one SUPERSEDE, DEPRECATE and FALSIFY each."""
    items = list(hooked.mixed_history(2000))
    assert len(items) == 2000
    counts = Counter(_kind(i) for i in items)
    assert counts == {k: v * 20 for k, v in hooked.MIX.items()}


def test_mixed_history_only_touches_live_objects_once() -> None:
    """Each lifecycle op targets an asserted object no earlier op retired; evidence precedes."""
    items = list(hooked.mixed_history(5000))
    asserted: set[str] = set()
    retired: set[str] = set()
    seen_events: dict[str, int] = {}
    for pos, item in enumerate(items):
        if isinstance(item, EventInput):
            assert item.id is not None
            seen_events[item.id] = pos
            continue
        if item.op_type == "ASSERT":
            assert item.target_id is not None
            asserted.add(item.target_id)
            (ev,) = item.payload["evidence_ids"]
            assert ev in seen_events
            continue
        assert item.target_id in asserted and item.target_id not in retired
        retired.add(item.target_id)
        if item.op_type == "SUPERSEDE":
            new = item.payload["new_object_id"]
            assert new in asserted and new not in retired
        if item.op_type == "FALSIFY" and pos >= hooked.BATCH:
            (ev,) = item.payload["evidence_ids"]
            # The evidence is in an earlier batch than the FALSIFY (see mixed_history).
            assert seen_events[ev] < pos - pos % hooked.BATCH


def test_mixed_history_is_accepted_by_the_default_hooks(tmp_path: Path) -> None:
    """The whole history appends through every default hook, in batches, without a refusal."""
    items = list(hooked.mixed_history(2000))
    with Ledger.init(tmp_path / "m.ledger") as ledger:
        for start in range(0, len(items), hooked.BATCH):
            ledger.append_batch(items[start : start + hooked.BATCH])
        assert ledger.size() >= 2001


def test_events_file_is_json_lines_the_cli_reads(tmp_path: Path) -> None:
    """write_events_jsonl writes one event request a line, each distinct."""
    path = tmp_path / "ev.jsonl"
    size = hooked.write_events_jsonl(path, 25)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert size == path.stat().st_size and len(lines) == 25
    items = [parse_input(json.loads(line)) for line in lines]
    assert all(isinstance(i, EventInput) for i in items)
    assert len({i.content for i in items if isinstance(i, EventInput)}) == 25


def _without_hooked() -> LedgerBench:
    """A run document with phases 1-5 only and no reference (pure-Python, --no-hooked)."""
    rate = {"entries": 10, "seconds": 1.0, "entries_per_s": 10.0}
    return {  # type: ignore[typeddict-item]
        "batched_append": [
            {"size": 10, "memroot": {"entries_per_s": 10.0}, "raw_apsw": rate,
             "pymerkle": None, "ratio_memroot_raw": 0.1, "ratio_memroot_pymerkle": None}
        ],
        "durable_append": {"count": 10, "ratio_memroot_raw": 0.9},
        "inclusion_proofs": {"memroot": {"size": 11, "proofs_per_s": 5.0}, "pymerkle": None},
        "verify": {"entries": 11, "entries_per_s": 5.0, "peak_rss_mb": 40.0},
        "append_growth": {"size": 10, "ratio_last_first": None},
        "reference_backend": None,
        "hooked": None,
    }  # fmt: skip


def test_issue12_targets_are_unmeasured_without_hooked_phases_or_reference() -> None:
    """With no phases 6-9 and no reference, every issue-12 target says 'not measured'."""
    out = {t["name"]: t for t in targets(_without_hooked())}
    for name in (
        "issue 27: memroot import-bundle of the mixed history's bundle",
        "memroot import of events, every CLI hook",
        "mixed history append, every hook",
        "memroot verify (all ten steps), mixed history",
        "memroot verify (all ten steps), mixed, peak RSS",
        "memroot rebuild, mixed history",
        "native / reference, batched append",
        "native / reference, rebuild",
    ):
        assert out[name]["value"] is None and out[name]["met"] is None, name


@pytest.mark.parametrize(("rate", "met"), [(29_999.0, False), (30_000.0, True)])
def test_mixed_target_is_30000_per_s(rate: float, met: bool) -> None:
    """The mixed-history target is met at 30,000 entries/s and not below."""
    doc = _without_hooked()
    run = {"entries_per_s": rate, "peak_rss_mb": 10.0}
    doc["hooked"] = {  # type: ignore[typeddict-item]
        "size": 100,
        "import_events": run,
        "verify_mixed": run,
        "mixed_append": run,
        "rebuild": run,
        "import_bundle": run,
    }
    out = {t["name"]: t for t in targets(doc)}
    assert out["mixed history append, every hook"]["met"] is met
    assert out["memroot verify (all ten steps), mixed, peak RSS"]["met"] is True
    assert out["memroot rebuild, mixed history"]["met"] is False  # below 100,000/s


@pytest.mark.parametrize(("rate", "met"), [(49_999.0, False), (50_000.0, True)])
def test_import_bundle_target_is_50000_per_s(rate: float, met: bool) -> None:
    """Issue 27's import-bundle target is met at 50,000 entries/s and not below."""
    doc = _without_hooked()
    run = {"entries_per_s": 1.0, "peak_rss_mb": 10.0}
    doc["hooked"] = {  # type: ignore[typeddict-item]
        "size": 100_000,
        "import_events": run,
        "verify_mixed": run,
        "mixed_append": run,
        "rebuild": run,
        "import_bundle": {"entries_per_s": rate, "peak_rss_mb": 10.0},
    }
    got = {t["name"]: t for t in targets(doc)}[
        "issue 27: memroot import-bundle of the mixed history's bundle"
    ]
    assert got["met"] is met and got["value"] == rate and got["at"] == 100_000
