"""Branches at the ledger layer: BRANCH_CREATE anchors, branch chains and verify step 7."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from memroot.ledger import merkle
from memroot.ledger.backends.store import entry_key, node_key
from memroot.ledger.entries import Entry, EventInput, Kind, OpInput, build_entry
from memroot.ledger.errors import RefusedError, ValidationError
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.trust import TrustedState
from memroot.ledger.verify import verify_path


def _event(i: int) -> EventInput:
    return EventInput(
        stream="s",
        actor_id="a",
        actor_type="AI_AGENT",
        role="USER",
        content=f"event {i}",
        namespace_id="ns",
    )


def _create(name: str) -> OpInput:
    return OpInput(
        op_type="BRANCH_CREATE",
        actor_id="a",
        actor_type="AI_AGENT",
        namespace_id="ns",
        policy_version="p/1",
        payload={"branch_id": name, "branch_type": "SIMULATION", "purpose": "what if"},
    )


@pytest.fixture
def forked(tmp_path: Path) -> Path:
    path = tmp_path / "l.ledger"
    with Ledger.init(path, origin="example.org/fork", hooks=()) as ledger:
        ledger.append_batch([_event(i) for i in range(6)])
        ledger.fork(_create("sim-1"), genesis={"branch_type": "SIMULATION"})
        ledger.append_batch([_event(i) for i in range(4)], branch="sim-1")
        ledger.append_batch([_event(i) for i in range(3)])
        ledger.checkpoint()
        ledger.checkpoint("sim-1")
    return path


def test_fork_anchors_branch_genesis_to_branch_create(forked: Path):
    """The branch genesis links to the BRANCH_CREATE entry, which records the fork point."""
    with Ledger.open(forked, hooks=()) as ledger:
        create = ledger.entry(7)
        genesis = ledger.entry(0, "sim-1")
        assert create.type == "BRANCH_CREATE"
        assert genesis.kind is Kind.GENESIS and genesis.prev == create.hash
        fork = create.body["payload"]["fork"]
        assert fork == {
            "seq": 6,
            "entry_hash": ledger.entry(6).hash,
            "tree_size": 7,
            "tree_root": ledger.root(7),
        }
        assert genesis.body["anchor"] == {"branch": "main", "seq": 7, "entry_hash": create.hash}


def test_branch_writes_never_reach_parent(forked: Path):
    """Entries appended on a branch stay in the branch's own chain and tree."""
    with Ledger.open(forked, hooks=()) as ledger:
        assert ledger.size("sim-1") == 5
        assert ledger.size() == 11
        assert all(e.branch == "main" for e in ledger.entries())
        assert all(e.branch == "sim-1" for e in ledger.entries(branch="sim-1"))


def test_forked_ledger_verifies_including_nested_branches(forked: Path, tmp_path: Path):
    """A ledger with a branch of a branch passes every step, step 7 included."""
    with Ledger.open(forked, hooks=()) as ledger:
        ledger.fork(_create("plan-2"), parent="sim-1", genesis={"branch_type": "PLANNING"})
        ledger.append(_event(9), branch="plan-2")
        ledger.checkpoint("sim-1")
    report = verify_path(forked, trusted=TrustedState(tmp_path / "t.json"))
    assert report.ok, [str(f) for f in report.findings]
    assert 7 in report.steps_checked and report.branches == 3


def test_fork_refuses_existing_name_and_bad_op(forked: Path):
    """A second branch with the same id, or a fork from a non-BRANCH_CREATE op, is refused."""
    with Ledger.open(forked, hooks=()) as ledger:
        size = ledger.size()
        with pytest.raises(RefusedError, match="already exists"):
            ledger.fork(_create("sim-1"), genesis={})
        with pytest.raises(ValidationError):
            ledger.fork(
                OpInput(
                    op_type="ASSERT",
                    actor_id="a",
                    actor_type="AI_AGENT",
                    namespace_id="ns",
                    payload={"branch_id": "x"},
                    policy_version="p",
                ),
                genesis={},
            )
        with pytest.raises(ValidationError, match="branch_id"):
            ledger.fork(_create("bad name!"), genesis={})
        assert ledger.size() == size


def test_branch_anchor_altered(forked: Path, tmp_path: Path):
    """A branch re-anchored elsewhere (chain and tree recomputed) is caught by step 7."""
    db = apsw.Connection(str(forked))
    no = db.execute("SELECT no FROM branches WHERE name='sim-1'").fetchone()[0]
    rows = db.execute(
        "SELECT k, data FROM entries WHERE k >= ? AND k < ? ORDER BY k",
        (entry_key(no, 0), entry_key(no + 1, 0)),
    ).fetchall()
    fake_prev = bytes(32)
    compact = merkle.CompactRange()
    db.execute("BEGIN")
    db.execute(
        "DELETE FROM nodes WHERE k >= ? AND k < ?", (node_key(no, 0, 0), node_key(no + 1, 0, 0))
    )
    for k, data in rows:
        e = Entry.from_bytes(data)
        body = dict(e.body)
        if e.kind is Kind.GENESIS:
            body["anchor"] = {**body["anchor"], "seq": 3, "entry_hash": fake_prev}
        new = build_entry(fake_prev, e.seq, e.branch, e.ts, e.kind, e.type, body)
        db.execute("UPDATE entries SET data=?, hash=? WHERE k=?", (new.raw, new.hash, k))
        for level, index, h in compact.append(leaf_hash(new.raw)):
            db.execute("INSERT INTO nodes VALUES(?, ?)", (node_key(no, level, index), h))
        fake_prev = new.hash
    db.execute("UPDATE branches SET head=? WHERE no=?", (fake_prev, no))
    db.execute("DELETE FROM checkpoints WHERE branch=?", (no,))
    db.execute("COMMIT")
    db.close()
    report = verify_path(forked, trusted=TrustedState(tmp_path / "t.json"))
    step7 = [f for f in report.findings if f.step == 7]
    assert step7 and step7[0].branch == "sim-1" and step7[0].seq == 0


def test_refused_tombstone_never_erases_later(tmp_path: Path):
    """A TOMBSTONE in a refused batch erases nothing, not even in the next transaction."""
    path = tmp_path / "t.ledger"
    with Ledger.init(path, origin="example.org/fork", hooks=()) as ledger:
        kept = ledger.append(_event(1))
        tomb = OpInput(
            op_type="TOMBSTONE",
            actor_id="a",
            actor_type="HUMAN_USER",
            namespace_id="ns",
            policy_version="p/1",
            payload={"target_event_id": kept.id, "reason": "r", "policy_ref": "p"},
        )
        duplicate = EventInput(
            stream="s",
            actor_id="a",
            actor_type="AI_AGENT",
            role="USER",
            content="again",
            namespace_id="ns",
            id=kept.id,
        )
        with pytest.raises(RefusedError, match="already exists"):
            ledger.append_batch([tomb, duplicate])
        ledger.fork(_create("after"), genesis={})
        ledger.append(_event(2))
        assert ledger.content(kept.seq) == "event 1"
        assert ledger.store.entry_row(ledger.branch_row().no, kept.seq).erased_by is None


@pytest.mark.parametrize("stored", [True, False], ids=["target stored", "target in the batch"])
def test_a_second_tombstone_in_one_batch_is_refused_naming_the_first(
    tmp_path: Path, stored: bool
) -> None:
    """Two TOMBSTONEs of one event in a batch: refused whole, naming the first erasure, alike
    whether the event was stored before or appended earlier in the same batch."""

    def tombstone_input(event_id: str) -> OpInput:
        payload = {"target_event_id": event_id, "reason": "r", "policy_ref": "p"}
        return OpInput(
            op_type="TOMBSTONE",
            actor_id="a",
            actor_type="HUMAN_USER",
            namespace_id="ns",
            policy_version="p/1",
            payload=payload,
        )

    path = tmp_path / "t.ledger"
    with Ledger.init(path, origin="example.org/fork", hooks=()) as ledger:
        event = EventInput(
            stream="s",
            actor_id="a",
            actor_type="HUMAN_USER",
            role="USER",
            content="erase me",
            namespace_id="ns",
            id="01900000-0000-7000-8000-0000000000e1",
        )
        assert event.id is not None
        before: list[EventInput | OpInput] = []
        if stored:
            ledger.append(event)
        else:
            before = [event]
        size = ledger.size()
        first = size + len(before)
        batch = [*before, tombstone_input(event.id), tombstone_input(event.id)]
        with pytest.raises(RefusedError, match=f"already erased by entry {first}$"):
            ledger.append_batch(batch)
        assert ledger.size() == size
        if stored:
            assert ledger.content(size - 1) == "erase me"
