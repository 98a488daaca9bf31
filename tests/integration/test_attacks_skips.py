"""A recorded skip is judged again: a forged skip row hides no honest operation.

Every replay records an entry that is not a valid operation (appended without the hooks) as
skipped (``mem_skipped``, ``fz_skipped``) instead of refusing it. Those rows are derived: the
attacker (no key, plain ``sqlite3`` in its own process) adds one for an honest operation and
deletes the rows it made, so the operation reads as never applied: an honest ``FALSIFY`` of a
memory object (the object reads live again), an honest ``ASSERT`` (the fact is gone). Strict
reads (``Memory.state``, ``Memory.recall``, ``memroot why``, ``memroot query``) and writes
(a second ``FALSIFY``) refuse, nothing is written, verify fails; a skip an honest replay makes
too (a bare append the rules refuse) is no false alarm.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import memroot
from memroot.cli.main import cli
from memroot.ledger.entries import EventInput, OpInput, parse_input
from memroot.ledger.errors import IntegrityError, MemrootError
from memroot.ledger.ledger import Ledger
from tests.integration._attack import attacker, counts, fact


def run(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def keep_honest(path: Path) -> Path:
    honest = path.with_name("honest.ledger")
    shutil.copy(path, honest)
    shutil.copy(path.with_name(path.name + ".key"), honest.with_name("honest.ledger.key"))
    return honest


def opened(path: Path) -> memroot.Memory:
    return memroot.open(path, actor="agent-7", namespace="alice", create=False)


@pytest.fixture
def story(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, str, int]:
    """Two facts; the second falsified (its FALSIFY's seq returned)."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    path = tmp_path / "m.ledger"
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        ev = mem.record(content="I take my tea without sugar")
        tea = mem.remember("Alice takes tea without sugar", evidence=[ev.id]).id
        ev2 = mem.record(content="I live in Lyon")
        lyon = mem.remember("Alice lives in Lyon", evidence=[ev2.id]).id
        seq = mem.falsify(lyon, "she moved to Nantes").seq
    return path, tea, lyon, seq


def test_skip_row_hides_object_falsify(story: tuple[Path, str, str, int]) -> None:
    """A FALSIFY's state row swapped for a forged skip row: state, why and a second
    FALSIFY are refused; nothing written; verify fails; the honest copy reads falsified."""
    path, _, lyon, seq = story
    honest = keep_honest(path)
    attacker(
        path,
        f"DELETE FROM fz_states WHERE id = '{lyon}'; "
        f"INSERT INTO fz_skipped VALUES('main', {seq}, 'FALSIFY', 'not a valid operation');",
    )
    before = counts(path)
    with opened(path) as mem:
        with pytest.raises(IntegrityError) as e:
            mem.state(lyon)
        assert e.value.step == 9 and f"main:{seq}" in str(e.value)
        with pytest.raises(MemrootError):  # the memory model's checked row refuses it first
            mem.falsify(lyon, "again")
    r = run(path, "why", lyon)
    assert r.exit_code == 1 and "derived state edited" in r.output, r.output
    assert counts(path) == before
    assert run(path, "verify").exit_code == 1
    with opened(honest) as mem:
        assert mem.state(lyon) == "falsified"


def test_skip_row_hides_assert(story: tuple[Path, str, str, int]) -> None:
    """An ASSERT's rows deleted and a forged skip row added: recall and query refuse."""
    path, tea, _, _ = story
    honest = keep_honest(path)
    attacker(
        path,
        f"DELETE FROM mem_objects WHERE id = '{tea}'; "
        f"DELETE FROM mem_edges WHERE source_id = '{tea}'; "
        f"INSERT INTO mem_skipped SELECT 'main', seq, 'ASSERT', 'not a valid operation' "
        f"FROM fz_items WHERE id = '{tea}';",
    )
    before = counts(path)
    with opened(path) as mem:
        with pytest.raises(IntegrityError) as e:
            mem.recall(receipt="run-1")
        assert e.value.step == 9
    r = run(path, "query", "--namespace", "alice")
    assert r.exit_code == 1 and "tea" not in r.stdout, r.output
    assert counts(path) == before  # no READ_RECEIPT, no checkpoint
    assert run(path, "verify").exit_code == 1
    with opened(honest) as mem:
        assert len(mem.recall()) == 1  # the live fact (Lyon is falsified)


def _bare(path: Path, op: OpInput | EventInput) -> None:
    with Ledger.open(path, hooks=()) as bare:
        bare.append(op)


def test_honest_skipped_assert_is_no_false_alarm(story: tuple[Path, str, str, int]) -> None:
    """An ASSERT citing no event, appended without the hooks, is skipped by every replay:
    its map leaf is explained, recall serves the honest facts, verify passes with a note."""
    path, tea, _, _ = story
    _bare(path, parse_input(fact(str(uuid.uuid4()), "cites an event that does not exist")))
    with opened(path) as mem:
        assert [r.object.id for r in mem.recall()] == [tea]
    r = run(path, "query", "--namespace", "alice")
    assert r.exit_code == 0, r.output
    assert run(path, "verify").exit_code == 0


def test_honest_skipped_falsify_is_no_false_alarm(story: tuple[Path, str, str, int]) -> None:
    """A FALSIFY of a live fact citing an event that does not exist, appended without the
    hooks, is skipped by the falsification layer's every replay: its skip row is explained,
    the fact's state reads, verify passes."""
    path, tea, _, _ = story
    _bare(
        path,
        OpInput(
            op_type="FALSIFY",
            actor_id="mallory",
            actor_type="HUMAN_USER",
            namespace_id="alice",
            policy_version="p/1",
            target_id=tea,
            target_type="memory_object",
            payload={"reason": "no such evidence", "evidence_ids": [str(uuid.uuid4())]},
        ),
    )
    with opened(path) as mem:
        assert mem.state(tea) == "live"
    assert run(path, "verify").exit_code == 0


_BARE = r"""
import sys
from memroot.ledger.entries import EventInput, OpInput, parse_input
from memroot.ledger.ledger import Ledger
with Ledger.open(sys.argv[1], hooks=()) as bare:
    bare.append(OpInput(
        op_type=sys.argv[2], actor_id="mallory", actor_type="HUMAN_USER", namespace_id="alice",
        policy_version="p/1", target_id=sys.argv[3], target_type="memory_object",
        payload={"reason": "bare", "evidence_ids": [sys.argv[4]]},
    ))
"""

_HOOKED_FALSIFY = r"""
import sys, memroot
with memroot.open(sys.argv[1], actor="agent-7", namespace="alice", create=False) as mem:
    print(mem.falsify(sys.argv[2], "honest, from another process").seq)
"""


def _in_own_process(code: str, *args: str) -> str:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_skips_judged_on_a_long_lived_handle_as_the_log_grows(
    story: tuple[Path, str, str, int],
) -> None:
    """The judge of recorded skips is kept and fed only what is new: a handle that judged
    the log once (a skipped bare FALSIFY) judges a skip appended later by another process
    (no false alarm), and a forged skip row for an honest FALSIFY appended later by another
    process is refused on the same handle, nothing written."""
    path, tea, _, _ = story
    missing = str(uuid.uuid4())
    _in_own_process(_BARE, str(path), "FALSIFY", tea, missing)
    with opened(path) as mem:
        assert mem.state(tea) == "live"
        assert [r.object.id for r in mem.recall()] == [tea]  # judged: the skip is genuine
        with memroot.open(path, actor="agent-7", namespace="alice", create=False) as other:
            ev = other.record(content="I like green tea").id
            green = other.remember("Alice likes green tea", evidence=[ev]).id
            fact = other.remember("Alice drinks green tea", evidence=[ev])
        _in_own_process(_BARE, str(path), "FALSIFY", green, missing)  # skipped: no such event
        assert {r.object.id for r in mem.recall()} == {tea, green, fact.id}  # judged again
        assert mem.state(green) == "live"
        seq = int(_in_own_process(_HOOKED_FALSIFY, str(path), fact.id))
        attacker(
            path,
            f"DELETE FROM fz_states WHERE id = '{fact.id}'; "
            f"INSERT INTO fz_skipped VALUES('main', {seq}, 'FALSIFY', 'not a valid operation');",
        )
        before = counts(path)
        with pytest.raises(IntegrityError) as e:
            mem.state(fact.id)
        assert e.value.step == 9 and f"main:{seq}" in str(e.value)
        with pytest.raises(IntegrityError):
            mem.recall(receipt="run-2")
        assert counts(path) == before
