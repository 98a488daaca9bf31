"""The head check hands the entries it read to the strict read that follows, in one snapshot.

After another connection's commit the head check reads the entries since the head it
checked before and decodes them (``StrictReader._since_before``); the strict read of the same
range in the same read transaction (``strict_rows.appended_since``) takes them from the
store's read memo instead of reading them again. A row this connection writes in the
transaction drops the memo: the read then reads and checks the stored row itself.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memroot.ledger._backend import NATIVE
from memroot.ledger.backends.store import entry_key
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from tests.conftest import event_input


def _two_handles(tmp_path: Path) -> tuple[Ledger, Ledger, tuple[int, int]]:
    """A reader that checked the head, then another handle's commit of two entries."""
    path, key = tmp_path / "m.ledger", tmp_path / "m.key"
    Ledger.init(path, origin="example.org/memo", key_path=key).close()
    reader, writer = Ledger.open(path, key_path=key), Ledger.open(path, key_path=key)
    reader.check_heads()
    before = reader.size()
    writer.append(event_input(random.Random(1), 1, content="one"))
    writer.append(event_input(random.Random(2), 2, content="two"))
    return reader, writer, (before - 1, writer.size())


def test_head_check_hands_its_entries_to_the_read(tmp_path: Path) -> None:
    """The entries since come out of the memo once, the same as read from the store (only
    with the native core, which decodes them in the head check; without it they are read)."""
    reader, writer, (lo, size) = _two_handles(tmp_path)
    try:
        with reader.store.read():
            head = reader.check_heads()[0]
            memo = reader.store.read_memo()
            assert memo is not None
            assert (("strict", head.no, head.root, lo, size) in memo) == (NATIVE is not None)
            handed = [(e.seq, e.hash) for e in reader.entries(lo, size)]
            assert ("strict", head.no, head.root, lo, size) not in memo  # taken once
            again = [(e.seq, e.hash) for e in reader.entries(lo, size)]
        assert handed == again == [(e.seq, e.hash) for e in writer.entries(lo, size)]
    finally:
        reader.close()
        writer.close()


def test_an_own_write_in_the_snapshot_drops_the_handed_entries(tmp_path: Path) -> None:
    """The newest entry's bytes rewritten by this connection inside the read transaction:
    the read does not take the decoded entries, it reads the row and refuses it."""
    reader, writer, (lo, size) = _two_handles(tmp_path)
    try:
        with reader.store.read():
            head = reader.check_heads()[0]
            k = entry_key(head.no, size - 1)
            data = bytes(
                reader.store.db.execute("SELECT data FROM entries WHERE k = ?", (k,)).fetchone()[0]
            )
            edited = data.replace(b"session-", b"sessiom-")
            assert edited != data
            reader.store.db.execute("UPDATE entries SET data = ? WHERE k = ?", (edited, k))
            with pytest.raises(IntegrityError):
                list(reader.entries(lo, size))
            reader.store.db.execute("ROLLBACK")
    finally:
        reader.close()
        writer.close()
