"""What the read path remembers between reads lets no tamper through (issue 23, readcost).

A long-lived handle keeps, between reads: each checkpoint note it opened (by its text, its
origin and the keys it was opened with: ``StrictReader.check_head``), each served object's
check (by every field of its row: ``strict_rows._row_key``), and the replays that judge skip
records, fed only the entries appended since (``strict_rows.kept_replay``). Each test keeps
one handle open, reads so that is remembered, lets another agent commit (an honest handle in
its own process) and an attacker in its own process (plain ``sqlite3``, no memroot code, no
key) edit the file, and reads again through the open handle: refused, nothing served,
nothing written; the honest commit alone is no false alarm.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import memroot
from memroot.ledger.entries import Entry
from memroot.ledger.errors import IntegrityError
from memroot.projections import strict_rows
from tests.integration._attack import attacker, opened, other_agent, two_facts
from tests.integration._attack import counts as sizes


@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    return two_facts(tmp_path / "m.ledger")


def _refused(mem: memroot.Memory, path: Path, step: int, **asked: Any) -> IntegrityError:
    """A recall with a receipt is refused at ``step``; nothing is written (no receipt)."""
    before = sizes(path)
    with pytest.raises(IntegrityError) as e:
        mem.recall(receipt="run-1", **asked)
    assert e.value.step == step
    assert sizes(path) == before
    return e.value


_CAT = "ev = mem.record(content='I have a cat'); mem.remember('Alice has a cat', evidence=[ev.id])"
"""Another agent's event and the fact it remembers from it."""


# -- checkpoint notes opened once ----------------------------------------------------------------

_MAIN = "(SELECT no FROM branches WHERE CAST(name AS TEXT) = 'main')"
_NEWEST = f"(SELECT max(size) FROM checkpoints WHERE branch = {_MAIN})"

_EDIT_NOTE = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
size, note = db.execute(
    "SELECT size, note FROM checkpoints WHERE branch = "
    "(SELECT no FROM branches WHERE CAST(name AS TEXT) = 'main') ORDER BY size DESC LIMIT 1"
).fetchone()
lines = note.split("\n")
root = lines[2]
lines[2] = ("B" if root[0] != "B" else "C") + root[1:]  # the root line, one character
db.execute(
    "UPDATE checkpoints SET note = ? WHERE size = ? AND branch = "
    "(SELECT no FROM branches WHERE CAST(name AS TEXT) = 'main')",
    ("\n".join(lines), size),
)
db.commit()
db.close()
"""


def _edit_newest_note(path: Path) -> None:
    """Change one character of the newest checkpoint note's root line (the attacker's)."""
    done = subprocess.run(
        [sys.executable, "-c", _EDIT_NOTE, str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_note_edited_after_it_was_opened(path: Path) -> None:
    """The newest checkpoint note, opened by a read, then edited in place (its root line
    changed, the signature kept): the edited text is not the one remembered, so it is
    opened again and refused (step 6); nothing served or written."""
    with opened(path) as mem:
        assert len(mem.recall()) == 2
        _edit_newest_note(path)
        _refused(mem, path, 6)


def test_note_swapped_for_an_older_one_it_opened(path: Path) -> None:
    """The newest checkpoint row deleted after the handle opened both it and the one before
    (another agent's commit in between): the older note is one the reader remembers, yet
    it covers fewer entries than the branch holds, so the read is refused (step 6)."""
    with opened(path) as mem:
        mem.recall()
        other_agent(path, "mem.record(content='how are you')")
        assert len(mem.recall()) == 2  # the new note opened; the old one was opened before
        attacker(path, f"DELETE FROM checkpoints WHERE branch = {_MAIN} AND size = {_NEWEST};")
        assert "no signed checkpoint" in str(_refused(mem, path, 6))


def test_unchanged_note_is_not_opened_again(path: Path) -> None:
    """A commit that leaves the branch's checkpoint as it was (the attacker's no-op write):
    the heads are checked again, the note is not re-verified, and the read is served."""
    from memroot.ledger import note

    with opened(path) as mem:
        mem.recall()
        attacker(path, "UPDATE meta SET value = value WHERE 0;  CREATE TABLE x(a); DROP TABLE x;")
        calls: list[int] = []

        def counted(*a: Any, **k: Any) -> note.SignedCheckpoint:
            calls.append(1)
            return note.open_checkpoint(*a, **k)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("memroot.ledger.strict.open_checkpoint", counted)
            assert len(mem.recall()) == 2
        assert calls == []


# -- served objects keyed by their fields; hidden rows ------------------------------------------


def test_confidence_nudged_after_another_commit(path: Path) -> None:
    """A served row's confidence moved by a hair after another agent's commit: the row is a
    new key (every field), checked again, refused."""
    with opened(path) as mem:
        tea = next(r.object.id for r in mem.recall() if "tea" in r.object.value)
        other_agent(path, "mem.record(content='how are you')")
        mem.recall()
        other_agent(path, "mem.record(content='still there?')")
        attacker(path, f"UPDATE mem_objects SET confidence = confidence - 1e-9 WHERE id = '{tea}';")
        with pytest.raises(IntegrityError) as e:
            mem.recall()
        assert e.value.step == 9


def test_row_hidden_inside_a_full_page_then_own_write(tmp_path: Path, path: Path) -> None:
    """25 facts, a page of 20: one row inside the page archived by the attacker, then the
    handle's own write, then a read: the hidden row (left out by the state filter, older
    than none of the page) is found by the hidden-row scan and refused; nothing written."""
    with opened(path) as mem:
        for i in range(23):
            ev = mem.record(content=f"fact number {i}")
            mem.remember(f"fact {i} holds", evidence=[ev.id])
        page = mem.recall(limit=20)
        inside = page[7].object.id
        attacker(
            path, f"UPDATE mem_objects SET lifecycle_state = 'ARCHIVED' WHERE id = '{inside}';"
        )
        mem.record(content="an own write after the edit")
        _refused(mem, path, 9, limit=20)


# -- kept replays: only an extension of the log they folded is fed ------------------------------


_EDIT_ENTRY = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
old, new = sys.argv[2].encode(), sys.argv[3].encode()
(k, data), = [r for r in db.execute("SELECT k, data FROM entries") if old in r[1]]
db.execute("UPDATE entries SET data = ? WHERE k = ?", (data.replace(old, new), k))
db.commit()
db.close()
"""


def _edit_entry(path: Path, old: bytes, new: bytes) -> None:
    """Replace ``old`` by ``new`` in the one entry whose bytes hold it (the attacker's)."""
    done = subprocess.run(
        [sys.executable, "-c", _EDIT_ENTRY, str(path), old.decode(), new.decode()],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


class _Judge:
    """A kept replay's cache and a ``Replaying`` that records what it is fed (the judge
    itself is not under test here: ``kept_replay`` deciding what to feed it is)."""

    def __init__(self) -> None:
        self.fed: list[list[tuple[str, int]]] = []
        self.closed = 0
        self.cache: dict[str, strict_rows.Kept] = {}

    def feed(self, entries: list[Entry]) -> None:
        self.fed.append([(e.branch, e.seq) for e in entries])

    def skipped(self) -> frozenset[tuple[str, int]]:
        return frozenset()

    def close(self) -> None:
        self.closed += 1

    def judge(self, mem: memroot.Memory) -> None:
        with mem.ledger.reading():
            strict_rows.kept_replay(self.cache, mem.ledger, lambda: self)


def test_kept_replay_fed_only_the_extension(path: Path) -> None:
    """Another agent appends: the kept replay is fed exactly the new entries, in order."""
    j = _Judge()
    with opened(path) as mem:
        j.judge(mem)
        size = mem.ledger.size()
        assert j.fed == [[("main", s) for s in range(size)]]
        other_agent(path, _CAT)
        j.judge(mem)
        assert j.fed[1] == [("main", s) for s in range(size, mem.ledger.size())]
        assert j.closed == 0


def test_kept_replay_refuses_an_edited_extension(path: Path) -> None:
    """Another agent appends an ASSERT; the attacker edits the appended entry's bytes (its
    value, same length: it still decodes) before the handle reads: the extension's strict
    read refuses it (step 5), the edited entry is never fed, the kept replay is closed and
    forgotten, and the next read (recall with a receipt) refuses too, nothing written."""
    j = _Judge()
    with opened(path) as mem:
        j.judge(mem)
        other_agent(path, _CAT)
        _edit_entry(path, b"Alice has a cat", b"Alice has a rat")
        with pytest.raises(IntegrityError) as e:
            j.judge(mem)
        assert e.value.step == 5
        assert len(j.fed) == 1  # nothing of the edited extension was folded
        assert j.closed == 1 and mem.ledger.ledger_id not in j.cache
        _refused(mem, path, 5)


def test_kept_replay_restarts_when_the_log_is_not_an_extension(path: Path) -> None:
    """The kept heads no longer extended (the kept head's hash is not the stored entry's: a
    forged earlier state of the cache): the kept replay is closed and a new one is fed the
    whole log, from the genesis, never the entries after a rewritten head."""
    j = _Judge()
    with opened(path) as mem:
        j.judge(mem)
        kept = j.cache[mem.ledger.ledger_id]
        # As if the replay had folded another history: its head entry's hash differs.
        name, size, _ = kept.heads[0]
        j.cache[mem.ledger.ledger_id] = kept._replace(
            heads=((name, size - 1, bytes(32)), *kept.heads[1:])
        )
        other_agent(path, "mem.record(content='how are you')")
        j.judge(mem)
        assert j.closed == 1
        assert j.fed[1] == [("main", s) for s in range(mem.ledger.size())]


# -- the head checked again after another commit: the entries since, in one read ---------------


def test_entry_past_head_after_another_commit(path: Path) -> None:
    """Another agent commits, and the attacker stores a copy of the newest entry past the
    head: the head check that reads the entries since the head it checked before reads the
    slot past the head too, and refuses (step 2); nothing served or written."""
    with opened(path) as mem:
        mem.recall()
        other_agent(path, "mem.record(content='how are you')")
        attacker(
            path,
            "INSERT INTO entries SELECT k + 1, hash, data, digest, salt, content, erased_by "
            f"FROM entries WHERE k = (SELECT max(k) FROM entries WHERE k >> 40 = {_MAIN});",
        )
        assert "past the branch head" in str(_refused(mem, path, 2))


def test_appended_entry_edited_before_the_read(path: Path) -> None:
    """Another agent remembers a fact; the attacker edits the ASSERT it appended before the
    handle reads: the entries since the head checked before do not prove in the new signed
    tree, and the read is refused; nothing served or written."""
    with opened(path) as mem:
        mem.recall()
        other_agent(path, _CAT)
        _edit_entry(path, b"Alice has a cat", b"Alice has a rat")
        _refused(mem, path, 5)


def test_entry_edited_after_it_was_proven_at_the_same_root(path: Path) -> None:
    """The handle reads after another agent's commit (the entries since proven in the new
    signed tree and remembered for that root); the attacker then edits the newest entry (no
    new checkpoint: the root is the same): its leaf is not the one proven, so it is proven
    again and refused (step 5)."""
    with opened(path) as mem:
        mem.recall()
        other_agent(path, _CAT)
        assert len(mem.recall()) == 3
        _edit_entry(path, b"Alice has a cat", b"Alice has a rat")
        with pytest.raises(IntegrityError) as e:
            mem.recall()
        assert e.value.step == 5


def test_stored_head_moved_after_another_commit(path: Path) -> None:
    """Another agent commits; the attacker points the stored chain head at the entry before:
    refused (step 3)."""
    with opened(path) as mem:
        mem.recall()
        other_agent(path, "mem.record(content='how are you')")
        attacker(
            path,
            "UPDATE branches SET head = (SELECT hash FROM entries WHERE k = "
            f"(SELECT max(k) - 1 FROM entries WHERE k >> 40 = {_MAIN})) WHERE no = {_MAIN};",
        )
        with pytest.raises(IntegrityError) as e:
            mem.recall()
        assert e.value.step == 3


def test_row_hidden_after_the_scan_was_kept_across_own_writes(path: Path) -> None:
    """The hidden-row scan is kept across the handle's own writes (no other connection
    committed): a row the attacker archives after that is still refused by the next read,
    whose scan runs again (the file changed under the handle); nothing written."""
    with opened(path) as mem:
        tea = next(r.object.id for r in mem.recall() if "tea" in r.object.value)
        mem.record(content="an own write")
        assert len(mem.recall()) == 2  # the scan kept: only own writes since
        attacker(path, f"UPDATE mem_objects SET lifecycle_state = 'ARCHIVED' WHERE id = '{tea}';")
        mem.record(content="another own write after the edit")
        _refused(mem, path, 9)


def test_own_writes_hide_no_row_falsely(path: Path) -> None:
    """An own FALSIFY hides a served object (honestly) while the scan is kept: served no
    more, no false alarm; another agent's commit then makes the next read scan again, with
    no false alarm either."""
    with opened(path) as mem:
        tea = next(r.object.id for r in mem.recall() if "tea" in r.object.value)
        mem.falsify(tea, "she takes sugar now")
        assert [r.object.value for r in mem.recall()] == ["Alice lives in Lyon"]
        other_agent(path, "mem.record(content='how are you')")
        assert [r.object.value for r in mem.recall()] == ["Alice lives in Lyon"]
