"""The step bench of the checked read switches a step off only for the read it times."""

from __future__ import annotations

from memroot.bench import bench_checked_steps
from memroot.ledger import note, strict
from memroot.ledger.backends.store import Store
from memroot.projections import checked


def _gate() -> tuple[object, ...]:
    return (
        getattr(checked, "check_results"),  # noqa: B009  # not exported: the module's own
        checked._kept_on_rows,
        checked._check_complete,
        Store.entry_row_tuples,
        Store.iter_entry_rows,
        getattr(strict, "open_checkpoint"),  # noqa: B009
        strict.StrictReader.check_head,
        getattr(note, "verify_signature"),  # noqa: B009
    )


def test_every_step_is_back_after_the_bench() -> None:
    """Both measurements run, and every function they replaced is the gate's own again."""
    before = _gate()
    got = bench_checked_steps.steps(objects=5, reads=1, commits=1)
    assert set(got) == set(bench_checked_steps._VARIANTS)
    parts = bench_checked_steps.head(objects=5, reads=1, commits=1)
    assert [label for label, _, _ in bench_checked_steps._HEAD_PARTS] == list(parts)
    assert _gate() == before
