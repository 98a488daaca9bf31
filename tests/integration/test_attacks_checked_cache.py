"""Attacks on the gate's memory of what it checked: an edit after a cached read is refused.

The read gate remembers a checked query and each checked object while nothing changed the
file (``projections.strict_rows.remembered``), so a repeated read re-checks nothing. Each test
keeps one ``Memory`` open (a long-lived agent process), reads once so the checks are
remembered, lets an attacker in its own process (plain ``sqlite3``, no memroot code, no key)
edit the file, and reads again through the same open handle: the edit must be refused, nothing
tampered served, nothing written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import memroot
from memroot.ledger.errors import IntegrityError
from memroot.projections import strict_rows
from tests.integration._attack import attacker
from tests.integration._attack import counts as sizes


@pytest.fixture
def path(tmp_path: Path) -> Path:
    p = tmp_path / "m.ledger"
    with memroot.open(p, actor="agent-7", namespace="alice", trusted=False) as mem:
        said = mem.record(content="I take my tea without sugar")
        mem.remember("Alice takes tea without sugar", evidence=[said.id])
        other = mem.record(content="I live in Lyon")
        mem.remember("Alice lives in Lyon", evidence=[other.id])
    return p


def _tea(mem: memroot.Memory) -> str:
    return next(r.object.id for r in mem.recall() if "tea" in r.object.value)


def test_cached_recall_then_value_edited_by_another_process(path: Path) -> None:
    """A recall remembered as checked, then the derived value edited: the next recall refuses."""
    with memroot.open(path, create=False, trusted=False) as mem:
        tea = _tea(mem)
        assert len(mem.recall()) == 2
        assert strict_rows._CHECKED[mem.ledger]["query"].keys  # the checks are remembered
        attacker(path, f"UPDATE mem_objects SET value = 'MALLORY sugar' WHERE id = '{tea}';")
        before = sizes(path)
        with pytest.raises(IntegrityError) as e:
            mem.recall()
        assert "MALLORY" not in str(e.value)
        with pytest.raises(IntegrityError):
            mem.recall(receipt="run-1")
        assert sizes(path) == before  # no receipt, no checkpoint


def test_cached_recall_then_row_hidden_by_another_process(path: Path) -> None:
    """A remembered recall, then a row hidden (ARCHIVED): the next recall refuses, drops nothing."""
    with memroot.open(path, create=False, trusted=False) as mem:
        tea = _tea(mem)
        mem.recall()
        attacker(path, f"UPDATE mem_objects SET lifecycle_state = 'ARCHIVED' WHERE id = '{tea}';")
        with pytest.raises(IntegrityError):
            mem.recall()


def test_cached_recall_then_evidence_content_edited_by_another_process(path: Path) -> None:
    """A remembered recall, then an evidence event's content edited: the next recall refuses."""
    with memroot.open(path, create=False, trusted=False) as mem:
        mem.recall()
        attacker(
            path,
            "UPDATE entries SET content = CAST('I take my tea with MALLORY sugar' AS BLOB) "
            "WHERE CAST(content AS TEXT) = 'I take my tea without sugar';",
        )
        with pytest.raises(IntegrityError):
            mem.recall()


def test_own_write_after_cached_recall_is_checked_again(path: Path) -> None:
    """This handle's own writes also end what was remembered (total_changes moves)."""
    with memroot.open(path, create=False, trusted=False) as mem:
        mem.recall()
        token = strict_rows._CHECKED[mem.ledger]["query"].token
        ev = mem.record(content="I moved to Nantes")
        mem.remember("Alice lives in Nantes", evidence=[ev.id])
        assert {r.object.value for r in mem.recall()} >= {"Alice lives in Nantes"}
        assert strict_rows._CHECKED[mem.ledger]["query"].token != token


def test_repeated_recall_is_served_from_what_was_checked(path: Path) -> None:
    """On an unchanged file the second recall re-checks nothing (the same token, same keys)."""
    with memroot.open(path, create=False, trusted=False) as mem:
        first = mem.recall()
        memo = strict_rows._CHECKED[mem.ledger]["query"]
        token, keys = memo.token, set(memo.keys)
        assert mem.recall() == first
        assert memo.token == token and memo.keys == keys


def test_own_record_keeps_object_checks_and_another_process_edit_is_refused(path: Path) -> None:
    """An own write keeps the objects' checks (same data_version); another process's edit
    right after still ends them, and the next recall refuses."""
    with memroot.open(path, create=False, trusted=False) as mem:
        tea = _tea(mem)
        mem.recall()
        objects = strict_rows._CHECKED[mem.ledger]["object"]
        token, keys = objects.token, set(objects.keys)
        mem.record(content="just chatting")
        mem.recall()
        assert objects.token == token and keys <= objects.keys
        attacker(path, f"UPDATE mem_objects SET confidence = 0.01 WHERE id = '{tea}';")
        with pytest.raises(IntegrityError):
            mem.recall()
