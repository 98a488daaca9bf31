"""audit(branch=B): verify one branch and its ancestors only."""

from __future__ import annotations

from pathlib import Path

import apsw

from memroot.ledger.backends.store import entry_key
from memroot.ledger.entries import EventInput, OpInput
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


def _fork(ledger: Ledger, name: str, parent: str = "main") -> None:
    op = OpInput(
        op_type="BRANCH_CREATE",
        actor_id="a",
        actor_type="AI_AGENT",
        namespace_id="ns",
        policy_version="p/1",
        payload={"branch_id": name, "branch_type": "SIMULATION", "purpose": "p"},
    )
    ledger.fork(op, parent=parent, genesis={"branch_type": "SIMULATION"})


def _ledger(tmp_path: Path) -> Path:
    path = tmp_path / "v.ledger"
    with Ledger.init(path, origin="example.org/vb", hooks=()) as ledger:
        ledger.append_batch([_event(i) for i in range(3)])
        _fork(ledger, "a")
        _fork(ledger, "b")
        ledger.append_batch([_event(i) for i in range(3)], branch="a")
        _fork(ledger, "a1", parent="a")
        ledger.append_batch([_event(i) for i in range(3)], branch="a1")
        ledger.append_batch([_event(i) for i in range(3)], branch="b")
        for name in ("main", "a", "b", "a1"):
            ledger.checkpoint(name)
    return path


def _tamper(path: Path, branch: str, seq: int) -> None:
    db = apsw.Connection(str(path))
    no = db.execute("SELECT no FROM branches WHERE name = ?", (branch,)).fetchone()[0]
    data = bytearray(
        db.execute("SELECT data FROM entries WHERE k = ?", (entry_key(no, seq),)).fetchone()[0]
    )
    data[-1] ^= 1
    db.execute("UPDATE entries SET data = ? WHERE k = ?", (bytes(data), entry_key(no, seq)))
    db.close()


def test_a_restricted_audit_covers_the_branch_and_its_ancestors(tmp_path: Path):
    """verify a1 checks a1, a and main (from the genesis anchors), not the sibling b."""
    path = _ledger(tmp_path)
    report = verify_path(path, branch="a1", update_trusted=False)
    assert report.ok and report.branches == 3
    # main: genesis, 3 events, 2 BRANCH_CREATE; a: genesis, 3, BRANCH_CREATE a1; a1: genesis, 3
    assert report.entries == 6 + 5 + 4
    assert verify_path(path, branch="main", update_trusted=False).branches == 1


def test_a_tampered_sibling_is_outside_a_restricted_audit(tmp_path: Path):
    """entry_tampered on b: verify a1 passes, verify b and the full audit fail."""
    path = _ledger(tmp_path)
    _tamper(path, "b", 2)
    assert verify_path(path, branch="a1", update_trusted=False).ok
    assert not verify_path(path, branch="b", update_trusted=False).ok
    assert not verify_path(path, update_trusted=False).ok


def test_a_tampered_ancestor_fails_a_restricted_audit(tmp_path: Path):
    """entry_tampered on a (a1's parent): verify a1 fails."""
    path = _ledger(tmp_path)
    _tamper(path, "a", 2)
    report = verify_path(path, branch="a1", update_trusted=False)
    assert not report.ok and any(f.branch == "a" for f in report.findings)


def test_an_unknown_branch_is_a_finding(tmp_path: Path):
    """Asking to verify a branch that does not exist is reported, not passed."""
    path = _ledger(tmp_path)
    report = verify_path(path, branch="nope", update_trusted=False)
    assert not report.ok and any("nope" in str(f) for f in report.findings)


def test_a_restricted_audit_trusts_only_the_branches_it_checked(tmp_path: Path):
    """After verify a, the trusted state holds main and a, not b or a1."""
    path = _ledger(tmp_path)
    trusted = TrustedState(tmp_path / "t.json")
    assert verify_path(path, branch="a", trusted=trusted).ok
    origin = "example.org/vb"
    assert trusted.get(origin) is not None and trusted.get(f"{origin}/branch/a") is not None
    assert trusted.get(f"{origin}/branch/b") is None and trusted.get(f"{origin}/branch/a1") is None
