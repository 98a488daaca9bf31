"""``AppendedRun``: what ``append_batch`` returns; its packed runs make ``Appended`` on read."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memroot.ledger._state import Appended, AppendedRun, PackedEvents
from memroot.ledger.entries import Kind, new_uuids
from memroot.ledger.hashing import EntryHash
from memroot.ledger.ledger import Ledger
from tests.conftest import event_input


def _packed(start: int, n: int) -> tuple[PackedEvents, list[Appended]]:
    """Return a packed run of ``n`` events from ``start`` and the ``Appended`` it stands for."""
    leaves = [bytes([start + i & 255]) * 32 for i in range(n)]
    ids = new_uuids(n)
    want = [
        Appended("main", start + i, EntryHash(leaf), id_, Kind.EVENT, "EVENT")
        for i, (leaf, id_) in enumerate(zip(leaves, ids, strict=True))
    ]
    packed = PackedEvents("main", start, b"".join(leaves), "".join(ids).encode("ascii"))
    return packed, want


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=6))
def test_a_run_reads_as_the_list_of_its_parts(shape: list[tuple[bool, int]]) -> None:
    """Indexing, slicing, iterating and comparing give the parts' Appended in order."""
    parts: list[list[Appended] | PackedEvents] = []
    want: list[Appended] = []
    for packed, n in shape:
        run, items = _packed(len(want), n)
        parts.append(run if packed else items)
        want += items
    got = AppendedRun(parts)
    assert len(got) == len(want)
    assert list(got) == want and got == want and want == got
    assert [got[i] for i in range(-len(want), len(want))] == want + want
    assert got[1:-1:2] == want[1:-1:2]
    for bad in (len(want), -len(want) - 1):
        with pytest.raises(IndexError):
            got[bad]
    assert got != [*want, want[0]] if want else got == []


def test_a_packed_run_must_hold_as_many_ids_as_leaves() -> None:
    """PackedEvents refuses leaf hashes and ids of different counts."""
    with pytest.raises(ValueError, match="bytes of ids"):
        PackedEvents("main", 0, bytes(64), b"0" * 36)
    with pytest.raises(ValueError, match="bytes of ids"):
        PackedEvents("main", 0, bytes(33), b"")


def test_a_batch_without_hooks_returns_the_entries_it_wrote(tmp_path: Path) -> None:
    """The Appended of a batch without hooks name the rows stored: seq, hash and event id."""
    rng = random.Random(3)
    with Ledger.init(tmp_path / "l.ledger", hooks=()) as ledger:
        made = ledger.append_batch([event_input(rng, i) for i in range(50)])
        assert isinstance(made, AppendedRun) and len(made) == 50
        for a in made:
            assert (a.branch, a.kind, a.type) == ("main", Kind.EVENT, "EVENT")
            assert ledger.find_event(a.id) == ("main", a.seq)
            assert ledger.read(a.seq).entry.hash == a.entry_hash
        assert [a.seq for a in made] == list(range(1, 51))
