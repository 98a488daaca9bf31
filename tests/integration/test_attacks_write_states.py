"""Writes validate against checked state: an edited falsification or branch state is refused.

The attacker (no key, plain ``sqlite3`` in its own process) edits a derived table so that an
operation the ledger's own entries forbid looks allowed: the ``fz_states`` row of a
falsified memory root deleted (a second FALSIFY), its state set back to ``live``, a closed
branch's ``branch_meta.state`` set back to OPEN (an append to it, a second close, a merge of
a discarded branch). Each write, through the CLI and the facade, must exit 1 / raise
``IntegrityError`` naming the edit, write nothing (entries and checkpoints unchanged), and the
honest copy must still refuse the same write by its rule (not as an integrity failure).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import memroot
from memroot.cli.main import cli
from memroot.ledger.errors import IntegrityError, MemrootError
from tests.integration._attack import attacker, counts


def run(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def keep_honest(path: Path) -> Path:
    honest = path.with_name("honest.ledger")
    shutil.copy(path, honest)
    shutil.copy(path.with_name(path.name + ".key"), honest.with_name("honest.ledger.key"))
    return honest


@pytest.fixture
def falsified_root(tmp_path: Path) -> tuple[Path, str]:
    """A ledger with one memory root, falsified."""
    path = tmp_path / "m.ledger"
    with memroot.open(path, trusted=False) as mem:
        ev = mem.record(content="I take my tea without sugar")
        mem.remember("Alice takes tea without sugar", evidence=[ev.id])
        root = mem.snapshot().record.root.hex()
        mem.falsify(root, "the snapshot was taken from a bad import")
        assert mem.state(root) == "falsified"
    return path, root


def test_falsify_again_after_state_row_deleted(falsified_root: tuple[Path, str]) -> None:
    """The FALSIFY's fz_states row deleted: a second FALSIFY is refused, CLI and facade."""
    path, root = falsified_root
    honest = keep_honest(path)
    attacker(path, f"DELETE FROM fz_states WHERE id = '{root}';")
    before = counts(path)
    r = run(path, "falsify", root, "--reason", "again")
    assert r.exit_code == 1, r.output
    assert "derived state edited" in r.output and root in r.output
    with memroot.open(path, create=False, trusted=False) as mem:
        with pytest.raises(IntegrityError) as e:
            mem.falsify(root, "again")
        assert e.value.step == 9
    assert counts(path) == before
    h = run(honest, "falsify", root, "--reason", "again")
    assert h.exit_code != 0 and "already falsified" in h.output
    assert "derived state edited" not in h.output


def test_restore_cascade_after_state_set_live(falsified_root: tuple[Path, str]) -> None:
    """The falsified root's row edited to live: MARK_STALE (allowed only on live) is refused."""
    path, root = falsified_root
    honest = keep_honest(path)
    attacker(path, f"UPDATE fz_states SET state = 'live' WHERE id = '{root}';")
    before = counts(path)
    r = run(path, "mark-stale", root, "--reason", "recheck")
    assert r.exit_code == 1, r.output
    assert "derived state edited" in r.output
    assert counts(path) == before
    with memroot.open(honest, create=False, trusted=False) as mem, pytest.raises(MemrootError):
        mem.mark_stale(root, "recheck")  # the honest ledger refuses it by its rule


def test_forged_state_row_for_a_live_root(tmp_path: Path) -> None:
    """A forged 'falsified' row for a live root (naming no such entry): RESTORE is refused."""
    path = tmp_path / "m.ledger"
    with memroot.open(path, trusted=False) as mem:
        ev = mem.record(content="I live in Lyon")
        mem.remember("Alice lives in Lyon", evidence=[ev.id])
        root = mem.snapshot().record.root.hex()
    attacker(
        path,
        "INSERT INTO fz_states VALUES('memory_root', "
        f"'{root}', 'main', 2, 'falsified', 'FALSIFY', 'mallory', 'HUMAN_USER', 'x', '[]');",
    )
    before = counts(path)
    r = run(path, "restore", root, "--reason", "back")
    assert r.exit_code == 1, r.output
    assert "derived state edited" in r.output
    assert counts(path) == before


@pytest.fixture
def discarded(tmp_path: Path) -> tuple[Path, str]:
    """A ledger with a SIMULATION branch holding one fact, then discarded."""
    path = tmp_path / "m.ledger"
    with memroot.open(path, trusted=False) as mem:
        b = mem.fork("what if", branch_type="SIMULATION")
        with memroot.open(path, branch=b, create=False, trusted=False) as sim:
            ev = sim.record(content="suppose Alice moved")
            sim.remember("Alice lives in Nantes", evidence=[ev.id])
        mem.discard_branch(b, "not needed")
    return path, b


def test_append_to_discarded_branch_set_open(discarded: tuple[Path, str]) -> None:
    """A discarded branch set back to OPEN in branch_meta: an append to it is refused."""
    path, b = discarded
    honest = keep_honest(path)
    attacker(path, f"UPDATE branch_meta SET state = 'OPEN' WHERE branch_id = '{b}';")
    before = counts(path)
    event = {
        "kind": "event",
        "stream": "s",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "role": "USER",
        "content": "more",
        "namespace_id": "default",
    }
    r = run(path, "append", "-b", b, "--json", json.dumps(event))
    assert r.exit_code == 1, r.output
    assert "derived state edited" in r.output and "DISCARDED" in r.output
    with (
        memroot.open(path, branch=b, create=False, trusted=False) as sim,
        pytest.raises(IntegrityError),
    ):
        sim.record(content="more")
    assert counts(path) == before
    h = run(honest, "append", "-b", b, "--json", json.dumps(event))
    assert h.exit_code != 0 and "derived state edited" not in h.output


def test_close_and_merge_discarded_branch_set_open(discarded: tuple[Path, str]) -> None:
    """A discarded branch set back to OPEN: closing it again and merging it are refused."""
    path, b = discarded
    attacker(path, f"UPDATE branch_meta SET state = 'OPEN' WHERE branch_id = '{b}';")
    before = counts(path)
    r = run(path, "branch", "close", b, "--reason", "again")
    assert r.exit_code == 1 and "derived state edited" in r.output, r.output
    with memroot.open(path, create=False, trusted=False) as mem:
        with pytest.raises(IntegrityError):
            mem.close_branch(b, "again")
        with memroot.open(path, branch=b, create=False, trusted=False) as sim:
            fact = sim.recall()[0].object.id
        with pytest.raises(IntegrityError):
            mem.merge(b, [fact])
    assert counts(path) == before


def test_state_row_deleted_after_a_remembered_scan(tmp_path: Path) -> None:
    """An open handle that already scanned the log (kept per branch) still refuses the edit."""
    path = tmp_path / "m.ledger"
    with memroot.open(path, trusted=False) as mem:
        ev = mem.record(content="I take my tea without sugar")
        mem.remember("Alice takes tea without sugar", evidence=[ev.id])
        first = mem.snapshot().record.root.hex()
        mem.falsify(first, "bad import")  # its scan of the log is kept
        ev2 = mem.record(content="I live in Lyon")
        mem.remember("Alice lives in Lyon", evidence=[ev2.id])
        second = mem.snapshot().record.root.hex()
        attacker(path, f"DELETE FROM fz_states WHERE id = '{first}';")
        before = counts(path)
        with pytest.raises(IntegrityError):
            mem.falsify(first, "again")
        assert counts(path) == before
        mem.falsify(second, "also bad")  # an honest one still lands (the rows it reads hold)


def test_state_and_why_of_a_root_whose_row_was_deleted(falsified_root: tuple[Path, str]) -> None:
    """Reads of an item's state refuse the edit too: `why ROOT` and Memory.state, Memory.why."""
    path, root = falsified_root
    attacker(path, f"DELETE FROM fz_states WHERE id = '{root}';")
    before = counts(path)
    for args in (("why", root), ("why", root, "--json")):
        r = run(path, *args)
        assert r.exit_code == 1, (args, r.output)
        assert "derived state edited" in r.output and "live" not in r.stdout
    with memroot.open(path, create=False, trusted=False) as mem:
        with pytest.raises(IntegrityError):
            mem.state(root)
        with pytest.raises(IntegrityError):
            mem.why(root)
    assert counts(path) == before


def test_branch_sees_parent_state_and_refuses_its_deleted_row(
    falsified_root: tuple[Path, str],
) -> None:
    """A fork inherits the root's falsified state; with the parent's row deleted, a FALSIFY
    on the fork is refused; a root falsified in main after the fork stays live there."""
    path, root = falsified_root
    with memroot.open(path, create=False, trusted=False) as mem:
        b = mem.fork("what if")
        with memroot.open(path, branch=b, create=False, trusted=False) as sim:
            assert sim.state(root) == "falsified"
    attacker(path, f"DELETE FROM fz_states WHERE id = '{root}' AND branch = 'main';")
    before = counts(path)
    with (
        memroot.open(path, branch=b, create=False, trusted=False) as sim,
        pytest.raises(IntegrityError),
    ):
        sim.falsify(root, "again on the fork")
    assert counts(path) == before


def test_root_falsified_after_the_fork_is_live_on_it(tmp_path: Path) -> None:
    """Honest: a root falsified in main after a fork is live on the fork, and falsifiable."""
    path = tmp_path / "m.ledger"
    with memroot.open(path, trusted=False) as mem:
        ev = mem.record(content="I live in Lyon")
        mem.remember("Alice lives in Lyon", evidence=[ev.id])
        root = mem.snapshot().record.root.hex()
        b = mem.fork("what if")
        mem.falsify(root, "wrong in main")
        with memroot.open(path, branch=b, create=False, trusted=False) as sim:
            assert sim.state(root) == "live"
            sim.falsify(root, "wrong here too")
            assert sim.state(root) == "falsified"
        assert mem.verify().ok
