"""A head check after another connection's commits reads its rows in one statement.

In a read transaction ``Store.latest_checkpoint`` brings, with the newest checkpoint, the
branch's entry rows from a few before its size to the branch's end and the meta rows, and
keeps them in the read memo: the head check's reads of the rows since the head it checked
before (and of a row stored past the head) and of its keys' markers ask nothing again. The
same snapshot, so the same findings: a row an attacker stored past the head, or edited among
the new ones, is still refused.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from memroot.ledger.backends import store as store_mod
from memroot.ledger.backends.store import entry_key
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from tests.conftest import event_input


def _pair(tmp_path: Path) -> tuple[Ledger, Ledger]:
    """A reader that checked the head after another connection's commit (so it keeps the
    tree's edge: ``StrictReader._edges``), and that writer handle, on one file."""
    path, key = tmp_path / "m.ledger", tmp_path / "m.key"
    Ledger.init(path, origin="example.org/head-read", key_path=key).close()
    reader, writer = Ledger.open(path, key_path=key), Ledger.open(path, key_path=key)
    _append(writer, 3, 1)
    reader.check_heads()
    _append(writer, 1, 9)
    reader.check_heads()
    return reader, writer


def _append(writer: Ledger, n: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(n):
        writer.append(event_input(rng, i, content=f"entry {seed}.{i}"))


def _statements(reader: Ledger) -> list[str]:
    """The statements the reader's connection runs from here on (its exec trace)."""
    seen: list[str] = []

    def trace(_cursor: object, sql: str, _bindings: object) -> bool:
        seen.append(sql)
        return True

    reader.store.db.exec_trace = trace
    return seen


_PAST = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
k, n = int(sys.argv[2]), int(sys.argv[3])
row = db.execute("SELECT hash, data, digest, salt, content, erased_by FROM entries "
                 "WHERE k = ?", (k - 1,)).fetchone()
for i in range(n):
    db.execute("INSERT INTO entries VALUES(?, ?, ?, ?, ?, ?, ?)", (k + i, *row))
db.commit()
"""


def _store_past_head(reader: Ledger, writer: Ledger, n: int) -> None:
    """The attacker (its own process, plain sqlite3, no key) stores ``n`` rows past the head."""
    k = entry_key(reader.store.branch("main").no, writer.size())
    path = str(reader.store.path)
    done = subprocess.run(
        [sys.executable, "-c", _PAST, path, str(k), str(n)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_head_check_after_other_commits_reads_one_statement(tmp_path: Path) -> None:
    """Checkpoint, the entries since and the key markers: one statement, and the same head."""
    reader, writer = _pair(tmp_path)
    try:
        _append(writer, 3, 2)
        with reader.store.read():
            seen = _statements(reader)
            head = reader.check_heads()[0]
            reader.store.db.exec_trace = None
            entries = [e.hash for e in reader.entries(head.size - 3, head.size)]
        touching = [s for s in seen if any(t in s for t in ("checkpoints", "entries", "meta"))]
        assert len(touching) == 1, touching
        assert head.size == writer.size()
        assert entries == [e.hash for e in writer.entries(head.size - 3, head.size)]
    finally:
        reader.close()
        writer.close()


@pytest.mark.parametrize("extra", [0, store_mod._META_LIMIT + 6], ids=["few", "past the limit"])
def test_meta_read_with_the_checkpoint_is_the_stored_meta(tmp_path: Path, extra: int) -> None:
    """Each meta value kept from the head's statement is the stored one; a key with no row
    is None, without a statement when every meta row came with the checkpoint (past the
    statement's limit, the rows it did not bring are read)."""
    reader, writer = _pair(tmp_path)
    try:
        _append(writer, 1, 2)
        with writer.store.write():
            for i in range(extra):
                writer.store.set_meta(f"extra {i}", i)
        keys = [str(k) for (k,) in reader.store.db.execute("SELECT key FROM meta")]
        outside = {k: reader.store.meta(k) for k in keys}
        with reader.store.read():
            reader.store.latest_checkpoint(reader.store.branch("main").no)
            seen = _statements(reader)
            inside = {k: reader.store.meta(k) for k in keys}
            assert reader.store.meta("no such key") is None
            reader.store.db.exec_trace = None
        assert inside == outside
        assert seen == [] if not extra else all("FROM meta WHERE key" in q for q in seen)
    finally:
        reader.close()
        writer.close()


@pytest.mark.parametrize("past", [1, store_mod._TAIL_LIMIT + 3], ids=["one", "past the limit"])
def test_rows_stored_past_the_head_are_refused(tmp_path: Path, past: int) -> None:
    """Rows stored past the signed head after other commits are a finding (step 2), whether
    the head's statement read them all or its limit cut them."""
    reader, writer = _pair(tmp_path)
    try:
        _append(writer, 2, 2)
        _store_past_head(reader, writer, past)
        with pytest.raises(IntegrityError) as e:
            reader.check_heads()
        assert e.value.step == 2
        assert e.value.seq == writer.size()
    finally:
        reader.close()
        writer.close()


def test_more_entries_than_the_tail_are_checked_from_the_store(tmp_path: Path) -> None:
    """More new entries than the statement's tail: the rows since are read by their own
    statement, checked as ever, and an edited one is refused."""
    reader, writer = _pair(tmp_path)
    try:
        _append(writer, store_mod._TAIL_ROWS + 4, 2)
        assert reader.check_heads()[0].size == writer.size()
        _append(writer, store_mod._TAIL_ROWS + 4, 3)
        k = entry_key(reader.store.branch("main").no, writer.size() - store_mod._TAIL_ROWS - 2)
        edit = (
            "import sqlite3, sys\n"
            "db = sqlite3.connect(sys.argv[1])\n"
            "db.execute('UPDATE entries SET data = CAST(data || x\\'00\\' AS BLOB) WHERE k = ?',"
            " (int(sys.argv[2]),))\n"
            "db.commit()\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", edit, str(reader.store.path), str(k)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        with pytest.raises(IntegrityError):
            reader.check_heads()
            with reader.store.read():
                list(reader.entries(0, writer.size()))
    finally:
        reader.close()
        writer.close()
