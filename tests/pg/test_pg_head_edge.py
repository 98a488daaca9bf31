"""On PostgreSQL too, a long-lived handle proves another host's entries on the edge it kept.

A PostgreSQL store has no ``data_version``: a handle checks its head again when a read needs
entries past it. That check starts from the head it checked before (``StrictReader.head``
hands it to ``_since_before``, as a file's ``data_version`` does), so the new entries are
read once and proven on the kept edge: no stored node is read (each a round trip), and the
strict read of the same entries that follows proves nothing again. An entry another host's
attacker edits in its own process is still refused.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from memroot.ledger.backends.pg import PgStore
from memroot.ledger.entries import EventInput
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from tests.conftest import event_input
from tests.unit.ledger.test_strict_edge import _node_reads


def _event(i: int) -> EventInput:
    return event_input(random.Random(i), i)


def _pair(tmp_path: Path, url: str, key: Path, checked: int = 2) -> tuple[Ledger, Ledger]:
    """A reader and a writer host; the reader checked its head after each of the writer's
    last ``checked`` appends (of four), the second of which kept the edge."""
    Ledger.init(url, origin="example.org/pg-edge", key_path=key, cache_path=tmp_path / "i.cache")
    reader = Ledger.open(url, key_path=key, hooks=[], cache_path=tmp_path / "r.cache")
    writer = Ledger.open(url, key_path=key, hooks=[], cache_path=tmp_path / "w.cache")
    for i in range(4):
        writer.append(_event(i))
        if i >= 4 - checked:
            reader.check_heads()
    return reader, writer


def test_another_hosts_entries_are_proven_without_reading_stored_nodes(
    tmp_path: Path, pg_url: str, pg_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader, writer = _pair(tmp_path, pg_url, pg_key)
    try:
        reads = _node_reads(monkeypatch, PgStore)
        for i in range(6, 12):
            writer.append(_event(i))
            with reader.store.read():
                head = reader.check_heads()[0]
                new = [e.seq for e in reader.entries(head.size - 2, head.size)]
                assert new == [head.size - 2, head.size - 1]
        assert reads == []
        monkeypatch.undo()
        with Ledger.open(pg_url, key_path=pg_key, hooks=[], cache_path=tmp_path / "f.cache") as f:
            assert f.check_heads() == [head]
    finally:
        reader.close()
        writer.close()


_EDIT = r"""
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as db:
    db.execute(
        "UPDATE entries SET data = overlay(data placing '\\x00'::bytea from 40 for 1) "
        "WHERE k = (SELECT max(k) FROM entries)"
    )
"""


def test_an_entry_edited_after_the_edge_was_kept_is_refused(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    reader, writer = _pair(tmp_path, pg_url, pg_key)
    try:
        writer.append(_event(5))
        subprocess.run([sys.executable, "-c", _EDIT, pg_url], check=True)
        with pytest.raises(IntegrityError), reader.store.read():
            head = reader.check_heads()[0]
            list(reader.entries(head.size - 2, head.size))
    finally:
        reader.close()
        writer.close()


def test_the_new_entries_come_with_the_newest_checkpoint(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    """The head check after another host appended a few entries sends one statement for the
    checkpoint and the entries since the head it checked before (``_TAIL_ROWS``)."""
    reader, writer = _pair(tmp_path, pg_url, pg_key)
    try:
        for i in range(5, 8):
            writer.append(_event(i))
        with reader.store.read():
            assert isinstance(reader.store, PgStore)
            before = reader.store.db.statements
            head = reader.check_heads()[0]
            assert reader.store.db.statements - before == 1
            assert [e.seq for e in reader.entries(head.size - 4, head.size)] == list(
                range(head.size - 4, head.size)
            )
            assert reader.store.db.statements - before == 1
    finally:
        reader.close()
        writer.close()


_PAST = r"""
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as db:
    k, h, data = db.execute("SELECT k, hash, data FROM entries ORDER BY k DESC LIMIT 1").fetchone()
    db.execute("INSERT INTO entries(k, hash, data) VALUES (%s, %s, %s)", (k + 1, h, data))
"""


def test_an_entry_stored_past_the_signed_head_is_refused(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    """An attacker's row past the head (agmi T5) is no row the checkpoint's read gave: the
    head check reads the range itself and refuses it."""
    reader, writer = _pair(tmp_path, pg_url, pg_key, checked=1)
    try:
        writer.append(_event(4))
        subprocess.run([sys.executable, "-c", _PAST, pg_url], check=True)
        with pytest.raises(IntegrityError, match="past"), reader.store.read():
            reader.check_heads()
    finally:
        reader.close()
        writer.close()
