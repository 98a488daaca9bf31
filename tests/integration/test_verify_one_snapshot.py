"""verify reads the ledger in place, in one read transaction shared by every check.

No copy of the file is made (``Store.copy_snapshot`` is for PostgreSQL ledgers only), and
the layers' checks read the auditor's connection: entries committed by a writer after the
audit's snapshot began are seen by no step and no check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.backends.store import Store
from memroot.ledger.ledger import Ledger
from memroot.ledger.strict import relaxed
from memroot.ledger.verify import audit
from memroot.memory_root import stack as hooks

ORIGIN = "example.org/verify-one-snapshot"


def _history(cmd: Any, path: Path, tag: str) -> None:
    """Import 30 events through every CLI hook (memory model and conversation tree)."""
    lines = [json.dumps({**cmd.CHAT_EVENT, "content": f"{tag} message {i}"}) for i in range(30)]
    cmd.ok(cmd.at(path, "import", "-", input="\n".join(lines) + "\n"))


@pytest.fixture
def ledger(cmd: Any, tmp_path: Path) -> Path:
    path = tmp_path / "agent.ledger"
    cmd.ok(cmd.at(path, "init", "--origin", ORIGIN))
    _history(cmd, path, "first")
    return path


def test_verify_makes_no_copy_of_a_sqlite_ledger(
    cmd: Any, ledger: Path, trusted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All ten steps run on the file itself: copying it would fail this run."""

    def no_copy(self: Store, dst: Path) -> None:
        raise AssertionError(f"verify copied the ledger to {dst}")

    monkeypatch.setattr(Store, "copy_snapshot", no_copy)
    data = cmd.json_at(ledger, "verify", "--no-update")
    assert data["ok"] is True, data["findings"]
    assert all(data["steps"][str(k)]["checked"] for k in range(1, 11))


@pytest.mark.parametrize("share", [True, False])
def test_checks_share_the_audits_snapshot(cmd: Any, ledger: Path, share: bool) -> None:
    """A writer commits after the snapshot began: no step and no sharing check sees it.

    Checks that open the file themselves (``share=False``) read the newer derived state
    and report it as disagreeing with the entries the steps read.
    """
    with relaxed(), Ledger.open(ledger, readonly=True, strict=False) as reader:
        with reader.store.read():
            size = sum(b.size for b in reader.store.branches())  # the snapshot starts here
            _history(cmd, ledger, "later")  # committed by another connection meanwhile
            checks = hooks.replay_checks(reader, share=share)
            report = audit(reader.store, origin=ORIGIN, checks=checks, update_trusted=False)
        assert report.entries == size
        assert sum(b.size for b in reader.store.branches()) > size  # the writer did commit
    if share:
        assert report.ok, [str(f) for f in report.findings]
    else:
        assert not report.ok
        assert {f.step for f in report.findings if f.severity == "error"} >= {9}
