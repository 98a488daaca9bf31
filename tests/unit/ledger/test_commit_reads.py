"""What a sealed commit reads: nothing for unconfigured features, yet every change is seen."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from memroot.ledger.backends.store import Store
from memroot.ledger.entries import Entry
from memroot.ledger.ledger import Ledger
from memroot.ledger.transparency.tiles import set_publish
from memroot.ledger.transparency.witness import WitnessWarning, add_witness
from memroot.ledger.transparency.witness_server import init_witness
from memroot.ledger.verify import audit

ORIGIN = "example.org/commit-reads"


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger.init(tmp_path / "l.db", origin=ORIGIN, hooks=()) as led:
        yield led


def _statements(ledger: Ledger, item: Any) -> list[str]:
    """Append ``item`` durably and return the SQL statements the ledger's connection ran."""
    seen: list[str] = []

    def trace(_cursor: apsw.Cursor, sql: str, _bindings: Any) -> bool:
        seen.append(sql)
        return True

    ledger.store.db.exec_trace = trace
    try:
        ledger.append(item)
    finally:
        ledger.store.db.exec_trace = None
    return seen


def _prev(ledger: Ledger, seq: int) -> bytes:
    """The ``prev`` of stored entry ``seq`` of main, read without the strict checks."""
    return Entry.from_bytes(ledger.store.entry_row(ledger.branch_row().no, seq).data).prev


def test_a_durable_append_reads_nothing_for_unconfigured_features(
    ledger: Ledger, inputs: Any
) -> None:
    """After the first append, one append runs no SELECT and reads data_version once."""
    ledger.append(inputs.event(random.Random(1), 0))
    seen = _statements(ledger, inputs.event(random.Random(2), 1))
    assert [s for s in seen if s.lstrip().upper().startswith("SELECT")] == []
    assert seen.count("PRAGMA data_version") == 1
    assert seen[0] == "BEGIN IMMEDIATE" and seen[-1] == "COMMIT"


def test_another_connections_publish_setting_is_seen_at_the_next_append(
    ledger: Ledger, inputs: Any, tmp_path: Path
) -> None:
    """A publish setting made by another process publishes this writer's next checkpoint."""
    ledger.append(inputs.event(random.Random(1), 0))
    ledger.append(inputs.event(random.Random(2), 1))  # the "not set" answer is cached now
    out = tmp_path / "log"
    with Ledger.open(ledger.path, hooks=()) as other:
        set_publish(other, out, ["main"])
    ledger.append(inputs.event(random.Random(3), 2))
    assert (out / "checkpoint").read_text() == ledger.latest_checkpoint()


def test_this_connections_publish_setting_is_seen_at_once(
    ledger: Ledger, inputs: Any, tmp_path: Path
) -> None:
    """Setting, then clearing, the publish setting on the writer's own connection is seen."""
    ledger.append(inputs.event(random.Random(1), 0))
    out = tmp_path / "log"
    set_publish(ledger, out, ["main"])
    ledger.append(inputs.event(random.Random(2), 1))
    assert (out / "checkpoint").read_text() == ledger.latest_checkpoint()
    set_publish(ledger, None)
    ledger.append(inputs.event(random.Random(3), 2))
    assert (out / "checkpoint").read_text() != ledger.latest_checkpoint()


def test_another_connections_witness_is_seen_at_the_next_append(
    ledger: Ledger, inputs: Any, tmp_path: Path
) -> None:
    """A witness added by another process is submitted to after this writer's next append."""
    ledger.append(inputs.event(random.Random(1), 0))
    ledger.append(inputs.event(random.Random(2), 1))  # "no witness tables" is cached now
    vkey = init_witness(tmp_path / "w", "witness.example/down")
    with Ledger.open(ledger.path, hooks=()) as other:
        add_witness(other, "http://127.0.0.1:9/", vkey)  # nothing listens: it stays pending
    with pytest.warns(WitnessWarning, match="pending"):
        ledger.append(inputs.event(random.Random(3), 2))


def test_another_connections_head_change_is_seen_by_the_next_append(
    ledger: Ledger, inputs: Any
) -> None:
    """The writer's cached head is not trusted once another connection moved the branch row."""
    ledger.append(inputs.event(random.Random(1), 0))
    ledger.append(inputs.event(random.Random(2), 1))
    other = Store(ledger.path)
    try:
        with other.write():
            other.db.execute("UPDATE branches SET head = zeroblob(32)")
    finally:
        other.close()
    seq = ledger.append(inputs.event(random.Random(3), 2)).seq
    # The new entry links to the head as stored now (a break verify reports), not as cached.
    assert _prev(ledger, seq) == bytes(32)


def test_a_change_on_the_writers_own_connection_is_seen_by_the_next_append(
    ledger: Ledger, inputs: Any
) -> None:
    """A write on the ledger's own connection (no data_version change) also drops the cache."""
    ledger.append(inputs.event(random.Random(1), 0))
    ledger.append(inputs.event(random.Random(2), 1))
    with ledger.store.write() as db:
        db.execute("UPDATE branches SET head = zeroblob(32)")
    seq = ledger.append(inputs.event(random.Random(3), 2)).seq
    assert _prev(ledger, seq) == bytes(32)


def test_appends_of_two_writers_interleave_into_one_valid_chain(
    ledger: Ledger, inputs: Any
) -> None:
    """Two ledgers on one file appending in turn each see the other's head: the chain holds."""
    with Ledger.open(ledger.path, hooks=()) as other:
        for i in range(6):
            writer = ledger if i % 3 else other
            writer.append(inputs.event(random.Random(i), i))
        assert other.size() == ledger.size() == 7
    assert audit(ledger.store, origin=ORIGIN, update_trusted=False).ok


def test_own_rows_are_the_rows_the_transaction_wrote(ledger: Ledger, inputs: Any) -> None:
    """own_rows hands back what the open write appended, as stored; the size is its head."""
    ledger.append(inputs.event(random.Random(1), 0))
    with ledger.write():
        start = ledger.size()
        added = ledger.append_batch([inputs.event(random.Random(i), i) for i in range(2, 5)])
        assert ledger.size() == start + 3 == ledger.store.branch("main").size
        mine = ledger.own_rows("main", start + 1)
        assert mine is not None and [e.seq for e, _ in mine] == [a.seq for a in added[1:]]
        for (entry, content), a in zip(mine, added[1:], strict=True):
            row = ledger.store.entry_row(ledger.branch_row().no, a.seq)
            assert entry.raw == bytes(row.data) and content == bytes(row.content)
        assert ledger.own_rows("main", start - 1) is None  # not all of it this write's
        assert ledger.own_rows("main", start + 3) is None
    assert ledger.own_rows("main", start) is None  # committed: no open write


def test_own_rows_after_an_erasure_are_read_from_the_file(ledger: Ledger, inputs: Any) -> None:
    """A write that erased content says so (None): its rows are not what it appended."""
    first = ledger.append(inputs.event(random.Random(1), 0))
    with ledger.write():
        start = ledger.size()
        ledger.append(inputs.event(random.Random(2), 1))
        ledger.append(inputs.tombstone(first.id))
        assert ledger.own_rows("main", start) is None


def test_a_registered_append_check_refuses_and_nothing_is_written(
    ledger: Ledger, inputs: Any
) -> None:
    """An AppendCheck sees the head read from the file (at first, after another commit)."""
    from memroot.ledger.backends.store import BranchRow
    from memroot.ledger.errors import IntegrityError

    seen: list[int] = []

    class Refuse:
        def check_head(self, led: Ledger, row: BranchRow) -> None:
            seen.append(row.size)
            if row.size >= 3:
                raise IntegrityError("refused by the check", branch=row.name, step=10)

    with Ledger.open(ledger.path, hooks=()) as other:
        other.before_append(Refuse())
        other.append(inputs.event(random.Random(1), 0))  # read from the file: size 1
        other.append(inputs.event(random.Random(2), 1))  # its own head, from memory
        assert seen == [1]
        ledger.append(inputs.event(random.Random(3), 2))  # another connection commits
        with pytest.raises(IntegrityError, match="refused by the check"):
            other.append(inputs.event(random.Random(4), 3))
        assert seen == [1, 4]
        assert other.size() == 4  # nothing of the refused append was written
    assert audit(ledger.store, origin=ORIGIN, update_trusted=False).ok
