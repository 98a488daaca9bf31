"""``Memory.recall``'s one-statement answer to "is there anything to catch up?" on a file.

A recall on a ledger file asks, in the read transaction it reads in, whether both layers'
derived state already holds every entry (``projections.checked.current_in_file``); only
when not does it run the catch-up (``projections.hook.sync``, ``Falsifier.sync``). Its
answer must be the layers' own check's in every state a file can be in, and an entry
appended without the hooks must be caught up before anything is served.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import memroot
from memroot.ledger.entries import parse_input
from memroot.ledger.ledger import Ledger
from memroot.memory_root.falsify import Falsifier
from memroot.memory_root.falsify._core import has_table
from memroot.projections.checked import current_in_file
from memroot.projections.hook import current, sync
from tests.integration._attack import event, fact


def _layers_say(mem: memroot.Memory, branch: str = "main") -> bool:
    """What each layer's own check says (the path a PostgreSQL ledger takes)."""
    ledger = mem.ledger
    with ledger.reading() as db:
        if not current(ledger, db) or not has_table(db, "fz_states"):
            return False
        return bool(Falsifier(ledger).core.head(branch) == ledger.size(branch))


def _one_statement(mem: memroot.Memory, branch: str = "main") -> tuple[int, bool] | None:
    with mem.ledger.reading() as db:
        return current_in_file(db, branch)


@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    p = tmp_path / "m.ledger"
    with memroot.open(p, actor="agent-7", namespace="alice") as mem:
        ev = mem.record(content="I take my tea without sugar")
        mem.remember("Alice takes tea without sugar", evidence=[ev.id])
    return p


def _bare_fact(path: Path, value: str) -> None:
    """An event and an ASSERT citing it, appended without the hooks (no derived row)."""
    with Ledger.open(path, hooks=()) as bare:
        ev = bare.append(parse_input(event(value)))
        bare.append(parse_input(fact(ev.id, value)))


def test_the_same_answer_as_each_layer(path: Path) -> None:
    """Behind before the first recall (the text index); current after it; behind after a bare
    append; current again after the catch-up; behind with the text index's mark gone; None
    for a branch that does not exist. Each time the one statement and the layers' own checks
    agree."""
    with memroot.open(path, create=False) as mem:
        size = mem.ledger.size()
        # The text index is built by the first catch-up (a recall's): behind until then.
        assert _one_statement(mem) == (size, False) and not _layers_say(mem)
        mem.recall()
        assert _one_statement(mem) == (size, True) and _layers_say(mem)
        _bare_fact(path, "Alice has a cat")
        assert _one_statement(mem) == (size + 2, False) and not _layers_say(mem)
        sync(mem.ledger)
        Falsifier(mem.ledger).sync("main")
        assert _one_statement(mem) == (size + 2, True) and _layers_say(mem)
        with mem.ledger.write() as db:
            db.execute("DELETE FROM mem_meta WHERE key = 'fts_rid'")
        assert _one_statement(mem) == (size + 2, False) and not _layers_say(mem)
        assert _one_statement(mem, "no-such-branch") is None


def test_falsification_layer_behind_alone(path: Path) -> None:
    """The memory model current, the falsification layer one entry behind: not current."""
    with memroot.open(path, create=False) as mem:
        mem.recall()
        with mem.ledger.write() as db:
            db.execute("UPDATE fz_heads SET size = size - 1 WHERE branch = 'main'")
        assert _one_statement(mem) == (mem.ledger.size(), False) and not _layers_say(mem)


def test_recall_catches_up_a_bare_append(path: Path) -> None:
    """A fact appended without the hooks by another handle: the next recall of an open
    memory folds it first and serves it, checked."""
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        assert [r.object.value for r in mem.recall()] == ["Alice takes tea without sugar"]
        _bare_fact(path, "Alice has a cat")
        assert {r.object.value for r in mem.recall()} == {
            "Alice takes tea without sugar",
            "Alice has a cat",
        }


def test_recall_as_of_past_the_head_is_refused(path: Path) -> None:
    """An ``as_of`` past the last entry is refused on the one-statement path too."""
    with memroot.open(path, create=False) as mem:
        size = mem.ledger.size()
        with pytest.raises(
            memroot.ValidationError, match=f"past the last entry of main \\({size - 1}\\)"
        ):
            mem.recall(as_of=size)
        assert uuid.UUID(mem.recall(as_of=size - 1)[0].object.id)
