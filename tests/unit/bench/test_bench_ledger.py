"""memroot.bench.ledger: the pure parts of the ledger benchmark (windows, config, inputs)."""

from __future__ import annotations

import pytest

from memroot.bench import ledger as bench_ledger
from memroot.bench.ledger import BATCH, BenchConfig, append_growth, events


def test_growth_compares_the_last_window_with_the_first() -> None:
    """Growth takes 10,000 entries at each end and divides the last rate by the first."""
    batches = [(BATCH, 0.01)] * 10 + [(BATCH, 0.05)] * 5 + [(BATCH, 0.02)] * 10
    g = append_growth(batches, 25 * BATCH)
    assert g["window"] == 10_000
    assert g["first_per_s"] == pytest.approx(100_000)
    assert g["last_per_s"] == pytest.approx(50_000)
    assert g["ratio_last_first"] == pytest.approx(0.5)


def test_growth_below_two_batches_is_not_measured() -> None:
    """With too few batches for two windows every rate is None (the target shows '-')."""
    g = append_growth([(BATCH, 0.01)], BATCH)
    assert g == {
        "size": BATCH,
        "window": 0,
        "first_per_s": None,
        "last_per_s": None,
        "ratio_last_first": None,
    }


@pytest.mark.parametrize(
    "kwargs",
    [{"sizes": ()}, {"sizes": (0,)}, {"sizes": (10,), "durable": 0}, {"sizes": (10,), "proofs": 0}],
)
def test_config_rejects_non_positive_counts(kwargs: dict[str, object]) -> None:
    """A size or count below 1 is a programming mistake and raises ValueError."""
    with pytest.raises(ValueError):
        BenchConfig(**kwargs)  # type: ignore[arg-type]


def test_run_rejects_a_zero_size_before_writing() -> None:
    """run() refuses a zero size with ValueError."""
    with pytest.raises(ValueError, match="sizes"):
        bench_ledger.run([0])


def test_events_are_distinct_and_about_100_bytes() -> None:
    """Every benchmark event has its own ~100-byte content."""
    items = events(5, 3)
    contents = [e.content for e in items]
    assert len(set(contents)) == 3
    assert all(len(c) == bench_ledger.CONTENT_BYTES for c in contents)


def test_full_adds_one_million_entries_to_the_sizes() -> None:
    """--full adds 10^6 to the sizes (sorted, once); the largest drives phases 2-8."""
    assert bench_ledger.planned_sizes([100_000, 10_000], full=True) == (10_000, 100_000, 1_000_000)
    assert bench_ledger.planned_sizes([1_000_000, 10], full=True) == (10, 1_000_000)
    assert bench_ledger.planned_sizes([5, 5], full=False) == (5,)


def test_run_rejects_a_zero_hooked_size() -> None:
    """A hooked size below 1 is refused before anything runs."""
    with pytest.raises(ValueError, match="hooked_size"):
        bench_ledger.run([10], hooked_size=0)
