"""``_native.decode_chunk``: a chunk of stored entries checked natively against the reference.

``StrictReader.rows`` checks each stored row with ``_decode`` (steps 1-3: strict decoding,
the position the entry records, genesis only at 0, every ``prev`` link). The native core does
a whole chunk in one call; it must return exactly the entries the reference returns, and
refuse (``Reject``) every chunk in which the reference refuses a row, so that the reference
runs and raises its own error. Rows are a real ledger's, tampered the ways someone with
disk access would: a byte changed, rows swapped, a row replaced by another branch's.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger import _backend, strict
from memroot.ledger.backends.store import EntryRow
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, EventInput, OpInput
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger

native = pytest.importorskip("memroot._native", reason="the native core is not built")

if _backend.NATIVE is None:  # MEMROOT_BACKEND=python: nothing native to compare
    pytestmark = pytest.mark.skip(reason="MEMROOT_BACKEND=python: nothing native to compare")


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory, make_ledger: Any) -> dict[str, Any]:
    """The stored rows of a small mixed ledger with a fork: main's and the fork's."""
    path = make_ledger(tmp_path_factory.mktemp("chunk"), 60)
    with Ledger.open(path, hooks=()) as led:
        led.fork(_create("side"), genesis={"branch_type": "SIMULATION"})
        led.append_batch([_event(i) for i in range(12)], branch="side")
        with led.reading():
            main = list(led.store.iter_entry_rows(led.store.branch(CANONICAL_BRANCH).no))
            side = list(led.store.iter_entry_rows(led.store.branch("side").no))
    return {"main": main, "side": side}


def _create(name: str) -> OpInput:
    return OpInput(
        op_type="BRANCH_CREATE",
        actor_id="a",
        actor_type="AI_AGENT",
        namespace_id="ns",
        policy_version="p/1",
        payload={"branch_id": name, "branch_type": "SIMULATION", "purpose": "what if"},
    )


def _event(i: int) -> EventInput:
    return EventInput(
        stream="s",
        actor_id="a",
        actor_type="AI_AGENT",
        role="ASSISTANT",
        content=f"side {i}",
        namespace_id="ns",
    )


def _reference(
    rows: list[EntryRow], branch: str, start: int, prev: bytes | None
) -> tuple[list[Entry], list[bytes]] | None:
    """What the reference loop makes of the chunk: its entries and leaves, or None if refused."""
    reader = object.__new__(strict.StrictReader)
    head: Any = SimpleNamespace(branch=branch)
    entries, leaves = [], []
    with _backend.reference():
        for i, r in enumerate(rows):
            if r.seq != start + i:
                return None
            try:
                e = reader._decode(head, r.seq, r, prev)
            except IntegrityError:
                return None
            entries.append(e)
            prev = e.hash
            leaves.append(e.hash)
    return entries, leaves


def _native(
    rows: list[EntryRow], branch: str, start: int, prev: bytes | None
) -> tuple[list[Entry], list[bytes]] | None:
    try:
        return native.decode_chunk(
            rows, branch, start, prev, CANONICAL_BRANCH, Entry, strict._KINDS
        )
    except native.Reject:
        return None


def _same(got: tuple[list[Entry], list[bytes]] | None, want: Any) -> None:
    if want is None:
        assert got is None
        return
    assert got is not None
    entries, leaves = got
    assert leaves == want[1]
    assert [tuple(e) for e in entries] == [tuple(e) for e in want[0]]
    assert all(type(e) is Entry for e in entries)
    assert [e.kind for e in entries] == [e.kind for e in want[0]]  # the Kind members


@pytest.mark.parametrize("branch", ["main", "side"])
def test_untouched_rows_decode_as_the_reference(stored: dict[str, Any], branch: str) -> None:
    """Every chunk of a genuine ledger: the same entries, leaves and Kind members."""
    rows = stored[branch]
    for start in (0, 1, 7, len(rows) - 3):
        before = None if start == 0 else Entry.from_bytes(bytes(rows[start - 1].data)).hash
        chunk = rows[start : start + 20]
        _same(_native(chunk, branch, start, before), _reference(chunk, branch, start, before))


TAMPER = st.sampled_from(["flip", "swap", "foreign", "drop", "prev", "seq", "memoryview"])


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    branch=st.sampled_from(["main", "side"]),
    how=TAMPER,
    where=st.integers(min_value=0, max_value=10_000),
    byte=st.integers(min_value=0, max_value=255),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_tampered_chunks_are_refused_where_the_reference_refuses(
    stored: dict[str, Any], branch: str, how: str, where: int, byte: int, seed: int
) -> None:
    """Any tampering: the native core returns the reference's entries, or refuses with it."""
    rng = random.Random(seed)
    rows = list(stored[branch])
    other = stored["side" if branch == "main" else "main"]
    start = rng.randrange(0, len(rows) - 1)
    chunk = rows[start : start + rng.randrange(1, 12)]
    i = where % len(chunk)
    r = chunk[i]
    if how == "flip":
        data = bytearray(r.data)
        data[where % len(data)] ^= byte or 1
        chunk[i] = r._replace(data=bytes(data))
    elif how == "swap" and len(chunk) > 1:
        j = (i + 1) % len(chunk)
        chunk[i], chunk[j] = chunk[j]._replace(seq=r.seq), r._replace(seq=chunk[j].seq)
    elif how == "foreign":
        chunk[i] = r._replace(data=other[rng.randrange(len(other))].data)
    elif how == "drop":
        del chunk[i]
    elif how == "seq":
        chunk[i] = r._replace(seq=r.seq + 1)
    elif how == "memoryview":
        chunk[i] = r._replace(data=memoryview(r.data))  # not bytes: left to the reference
    prev = None if start == 0 else Entry.from_bytes(bytes(rows[start - 1].data)).hash
    if how == "prev":
        prev = bytes([byte]) * 32
    want = _reference(chunk, branch, start, prev)
    got = _native(chunk, branch, start, prev)
    if how == "memoryview":
        assert got is None
        return
    _same(got, want)


def test_rows_read_through_the_strict_reader_are_the_references(
    tmp_path: Path, make_ledger: Any
) -> None:
    """``Ledger.entries`` (the strict reader, chunked) gives the same entries on both paths."""
    path = make_ledger(tmp_path, 2500)  # more than two chunks of 1024
    with Ledger.open(path, hooks=()) as led:
        fast = [tuple(e) for e in led.entries()]
    with _backend.reference(), Ledger.open(path, hooks=()) as led:
        slow = [tuple(e) for e in led.entries()]
    assert fast == slow and len(fast) == 2501


def test_an_edited_entry_is_refused_with_the_references_error(
    tmp_path: Path, make_ledger: Any, raw: Any
) -> None:
    """A byte changed on disk in entry 1500: the same IntegrityError either way (step 5)."""
    path = make_ledger(tmp_path, 2000)
    with raw.db(path) as db:
        edited = bytearray(raw.row(db, 1500)["data"])
        edited[-3] ^= 0x01
        db.execute("UPDATE entries SET data = ? WHERE k = ?", (bytes(edited), raw.k(1500)))

    def error() -> tuple[int | None, int | None, str]:
        with Ledger.open(path, hooks=()) as led, pytest.raises(IntegrityError) as e:
            for _ in led.entries():
                pass
        return e.value.step, e.value.seq, str(e.value)

    fast = error()
    with _backend.reference():
        slow = error()
    assert fast == slow
    assert fast[0] == 5  # the chunk holding 1500 is not the signed tree's
