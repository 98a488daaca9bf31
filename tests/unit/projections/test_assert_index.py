"""The read gate's index of what each object's ASSERT says (``projections.assert_index``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import memroot
from memroot.projections import assert_index, tables


def test_the_private_index_is_the_full_text_index_table() -> None:
    """The words mean to the private index what they mean to mem_fts: the same FTS5 table."""
    assert assert_index._SPEC == tables._FTS_SPEC


def _remember(path: Path, *facts: str) -> None:
    with memroot.open(path, actor="agent", namespace="ns", trusted=False) as mem:
        for fact in facts:
            said = mem.record(content=f"said: {fact}")
            mem.remember(fact, evidence=[said.id])


def _tea(path: Path) -> list[str]:
    with memroot.open(path, actor="agent", namespace="ns", create=False, trusted=False) as mem:
        return sorted(r.object.value for r in mem.recall(text="tea"))


@pytest.mark.parametrize("other", ["older_copy", "diverged_copy"])
def test_another_copy_of_the_ledger_rebuilds_the_index(tmp_path: Path, other: str) -> None:
    """A copy with the same ledger id and another history (shorter, or as long and other)
    is not answered from the index of the first: the entry it stopped at does not prove
    with the same hash, and the index is built again from that copy's log."""
    a, b = tmp_path / "a.ledger", tmp_path / "b.ledger"
    _remember(a, "green tea at noon")
    shutil.copyfile(a, b)
    shutil.copy2(a.with_name("a.ledger.key"), b.with_name("b.ledger.key"))
    b.with_name("b.ledger.key").chmod(0o600)
    _remember(a, "black tea at five", "iced tea in summer")
    if other == "diverged_copy":
        _remember(b, "mint tea at night", "coffee at eight")
    assert _tea(a) == ["black tea at five", "green tea at noon", "iced tea in summer"]
    want = ["green tea at noon"] + (["mint tea at night"] if other == "diverged_copy" else [])
    assert _tea(b) == want
    assert _tea(a) == ["black tea at five", "green tea at noon", "iced tea in summer"]


def test_values_and_types_are_read_once_and_then_only_what_is_new(tmp_path: Path) -> None:
    """A second query reads only the entries appended since; its answer has the new ASSERT."""
    path = tmp_path / "l.ledger"
    _remember(path, "green tea at noon")
    with memroot.open(path, actor="agent", namespace="ns", create=False, trusted=False) as mem:
        assert [r.object.value for r in mem.recall(text="tea")] == ["green tea at noon"]
        index = assert_index._INDEXES[mem.ledger.ledger_id]
        read = index.branches["main"].size
        assert read == mem.ledger.size("main") and index.count == 1
        said = mem.record(content="said: black tea")
        mem.remember("black tea at five", evidence=[said.id])
        got = [r.object.value for r in mem.recall(text="tea", types=["FACT"])]
        assert got == ["black tea at five", "green tea at noon"]
        assert index.count == 2 and index.branches["main"].size == mem.ledger.size("main")
