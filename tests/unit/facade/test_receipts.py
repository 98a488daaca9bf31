"""Read receipts: recall(..., receipt=run) records what a run was handed; verify replays it."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import memroot
from memroot.cli.main import cli
from memroot.ledger.entries import OpInput
from memroot.memory_root.receipts import readers, receipts


def _setup(tmp_path: Path) -> tuple[memroot.Memory, str]:
    mem = memroot.open(tmp_path / "r.ledger", actor="agent-7", namespace="alice")
    said = mem.record(content="I take tea")
    obj = mem.remember("Alice takes tea", evidence=[said.id])
    return mem, obj.id


def test_recall_with_receipt_names_run_query_root_and_versions(tmp_path: Path) -> None:
    """A receipt lists the run, the query, the live root and every object with version/state."""
    mem, oid = _setup(tmp_path)
    with mem:
        root = mem.snapshot().record.root
        size = mem.ledger.size()
        hits = mem.recall(text="tea", receipt="run-1")
        assert [h.object.id for h in hits] == [oid]
        e = mem.ledger.entry(size)
        assert e.type == "READ_RECEIPT" and e.body["actor_id"] == "agent-7"
        (r,) = receipts(mem.ledger)
        assert r.run_id == "run-1" and r.memory_root == root
        assert r.query == {"branch": "main", "limit": 20, "mode": "DEFAULT", "text": "tea"}
        assert r.objects == ({"id": oid, "version": 1, "state": "live"},)
        mem.recall(text="tea")  # no receipt asked: nothing appended
        assert mem.ledger.size() == size + 1
        assert mem.verify(trusted=tmp_path / "t.json").ok


def test_receipts_by_run_and_readers(tmp_path: Path) -> None:
    """receipts(run=) filters; readers(id) lists every run that was handed the object."""
    mem, oid = _setup(tmp_path)
    with mem:
        mem.recall(text="tea", receipt="run-a")
        mem.falsify(oid, "wrong")
        mem.recall(text="tea", mode="AUDIT", receipt="run-b")
        assert [r.run_id for r in receipts(mem.ledger, run="run-b")] == ["run-b"]
        assert receipts(mem.ledger, run="run-b")[0].objects[0]["state"] == "falsified"
        assert [r["run_id"] for r in readers(mem.ledger, oid)] == ["run-a", "run-b"]
        assert mem.verify(trusted=tmp_path / "t.json").ok


def test_forged_receipt_is_a_step_9_finding(tmp_path: Path) -> None:
    """A receipt naming a version that never was current (or a wrong state) fails verify step 9."""
    mem, oid = _setup(tmp_path)
    with mem:
        for version, state in ((7, "live"), (1, "falsified")):
            mem.ledger.append(
                OpInput(
                    op_type="READ_RECEIPT",
                    actor_id="agent-7",
                    actor_type="AI_AGENT",
                    namespace_id="alice",
                    payload={
                        "run_id": "forged",
                        "query": {},
                        "memory_root": None,
                        "objects": [{"id": oid, "version": version, "state": state}],
                    },
                    policy_version="memroot-receipt/1",
                )
            )
        report = mem.verify(trusted=tmp_path / "t.json")
    messages = [str(f) for f in report.findings if f.step == 9]
    assert any("version 7" in m for m in messages)
    assert any("was falsified" in m and "but it was live" in m for m in messages)


def test_bad_run_id_is_refused_and_nothing_written(tmp_path: Path) -> None:
    """A run id with spaces (or empty) is refused; the ledger does not grow."""
    import pytest

    from memroot.ledger.errors import ValidationError

    mem, _ = _setup(tmp_path)
    with mem:
        size = mem.ledger.size()
        for bad in ("", "two words"):
            with pytest.raises(ValidationError, match="run id"):
                mem.recall(text="tea", receipt=bad)
        assert mem.ledger.size() == size


def test_cli_receipts_and_why_read_by(tmp_path: Path) -> None:
    """`memroot receipts --run` lists them; `memroot why` shows which runs read the object."""
    import json

    mem, oid = _setup(tmp_path)
    with mem:
        mem.recall(text="tea", receipt="run-x")
    path = str(tmp_path / "r.ledger")
    out = CliRunner().invoke(cli, ["-l", path, "receipts", "--run", "run-x", "--json"])
    assert out.exit_code == 0, out.output
    assert [r["run_id"] for r in json.loads(out.output)] == ["run-x"]
    why = CliRunner().invoke(cli, ["-l", path, "why", oid], catch_exceptions=False)
    assert "run run-x (agent-7) v1" in why.output
