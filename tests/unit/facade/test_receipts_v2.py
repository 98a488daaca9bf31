"""Read receipts, format 2 (issue 25.4): the root in force after a cascade, value digests.

Also: version-1 receipts keep verifying, `memroot receipts --run` shows the values read back
strictly, and a receipt whose value was changed under it is refused (never shown).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner

import memroot
from memroot.cli.main import cli
from memroot.ledger.entries import OpInput, _library_op
from memroot.memory_root.receipts import (
    VALUE_TAG,
    handed,
    receipts,
    root_in_force,
    root_in_force_at,
    value_digest,
)

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "memroot"
MEMROOT = str(Path(sys.executable).with_name("memroot"))


def _own_receipt(**fields: Any) -> OpInput:
    """A READ_RECEIPT written as memroot's own (a caller's is refused at append): the forgery
    of someone who runs code with the key, or a receipt of an older format."""
    return _library_op(OpInput(**fields))


def _setup(tmp_path: Path) -> tuple[memroot.Memory, str]:
    mem = memroot.open(tmp_path / "r.ledger", actor="agent-7", namespace="alice")
    said = mem.record(content="I take tea")
    obj = mem.remember("Alice takes tea", evidence=[said.id], structured_value={"sugar": 0})
    return mem, obj.id


def test_receipt_after_a_cascade_names_the_live_replacement_root(tmp_path: Path) -> None:
    """After a cascade staled the root, a receipt names the live re-snapshot that replaced it."""
    mem, oid = _setup(tmp_path)
    with mem:
        said = mem.record(content="I like green tea")
        other = mem.remember("Alice likes green tea", evidence=[said.id])
        stale = mem.snapshot().record.root
        mem.falsify(oid, "she takes sugar now")
        mem.cascade(oid, reason="propagate")
        assert mem.state(stale.hex()) == "stale"
        force = root_in_force(mem.ledger)
        assert force is not None and force.replaces == stale and force.state == "live"
        hits = mem.recall(text="green", receipt="run-after")
        assert [h.object.id for h in hits] == [other.id]
        (r,) = receipts(mem.ledger, run="run-after")
        assert r.memory_root == force.root
        assert mem.verify(trusted=tmp_path / "t.json").ok


def test_value_digest_vectors() -> None:
    """The committed vectors re-derive with plain hashlib and regenerate byte for byte."""
    data = json.loads((VECTORS / "receipt-vectors.json").read_text())
    assert data["tag"] == VALUE_TAG
    for d in data["digests"]:
        cbor = bytes.fromhex(d["cbor"])
        assert hashlib.sha256(VALUE_TAG.encode() + b"\x00" + cbor).hexdigest() == d["value_digest"]
    spec = importlib.util.spec_from_file_location("gen", VECTORS / "gen_receipt_vectors.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.render() == (VECTORS / "receipt-vectors.json").read_text()


def test_a_version_1_receipt_still_verifies(tmp_path: Path) -> None:
    """An honest receipt of format 1 (no digests, no v) decodes and passes verify step 9."""
    mem, oid = _setup(tmp_path)
    with mem:
        mem.ledger.append(
            _own_receipt(
                op_type="READ_RECEIPT",
                actor_id="agent-7",
                actor_type="AI_AGENT",
                namespace_id="alice",
                payload={
                    "run_id": "old-run",
                    "query": {"branch": "main", "text": "tea"},
                    "memory_root": None,
                    "objects": [{"id": oid, "version": 1, "state": "live"}],
                },
                policy_version="memroot-receipt/1",
            )
        )
        (r,) = receipts(mem.ledger, run="old-run")
        assert r.version == 1
        with mem.ledger.reading():
            assert [h.value for h in handed(mem.ledger, r)] == ["Alice takes tea"]
        assert mem.verify(trusted=tmp_path / "t.json").ok


def test_forged_value_digest_is_a_step_9_finding(tmp_path: Path) -> None:
    """A receipt whose digest is not the digest of the named version's value fails step 9."""
    mem, oid = _setup(tmp_path)
    with mem:
        mem.ledger.append(
            _own_receipt(
                op_type="READ_RECEIPT",
                actor_id="agent-7",
                actor_type="AI_AGENT",
                namespace_id="alice",
                payload={
                    "v": 2,
                    "run_id": "forged",
                    "query": {"branch": "main"},
                    "memory_root": None,
                    "objects": [
                        {"id": oid, "version": 1, "state": "live", "value_digest": bytes(32)}
                    ],
                },
                policy_version="memroot-receipt/2",
            )
        )
        report = mem.verify(trusted=tmp_path / "t.json", update_trusted=False)
    assert any(f.step == 9 and "value digest" in str(f) for f in report.findings)
    out = CliRunner().invoke(cli, ["-l", str(tmp_path / "r.ledger"), "receipts", "--run", "forged"])
    assert out.exit_code == 1 and "digest differs" in out.output and "Alice takes" not in out.stdout


def test_cli_receipts_show_the_values(tmp_path: Path) -> None:
    """`memroot receipts --run R` prints each object with version, state and value."""
    mem, oid = _setup(tmp_path)
    with mem:
        (hit,) = mem.recall(text="tea", receipt="run-v")
    path = str(tmp_path / "r.ledger")
    human = CliRunner().invoke(cli, ["-l", path, "receipts", "--run", "run-v"])
    assert human.exit_code == 0, human.output
    assert f"    {oid}  v1  live       Alice takes tea\n" in human.stdout
    assert "(1 receipt)" in human.stderr
    data = json.loads(CliRunner().invoke(cli, ["-l", path, "receipts", "--json"]).stdout)
    (h,) = data[0]["handed"]
    assert h["value"] == "Alice takes tea" and h["structured_value"] == {"sugar": 0}
    assert h["value_digest"] == value_digest(hit.object).hex()


def test_receipts_of_an_edited_value_are_refused(tmp_path: Path) -> None:
    """An attacker edits the derived value a receipt names: `receipts --run` exits 1, shows none."""
    mem, _oid = _setup(tmp_path)
    with mem:
        mem.recall(text="tea", receipt="run-e")
        size = mem.ledger.size()
    path = tmp_path / "r.ledger"
    attack = (
        "import apsw, sys\n"
        "db = apsw.Connection(sys.argv[1])\n"
        "db.execute(\"UPDATE mem_objects SET value = 'Alice takes coffee'\")\n"
        "db.close()\n"
    )
    subprocess.run([sys.executable, "-c", attack, str(path)], check=True)
    r = subprocess.run(
        [MEMROOT, "-l", str(path), "receipts", "--run", "run-e"], capture_output=True, text=True
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "coffee" not in r.stdout and "Alice takes" not in r.stdout
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    assert db.execute("SELECT count(*) FROM entries").fetchone()[0] >= size
    db.close()
    with memroot.open(path, create=False) as again:
        assert again.ledger.size() == size


def test_receipt_naming_a_replaced_root_is_a_step_9_finding(tmp_path: Path) -> None:
    """A version-2 receipt naming the stale root a cascade replaced (not the one in force)
    fails verify step 9; so does one naming no root while one was in force."""
    mem, oid = _setup(tmp_path)
    with mem:
        said = mem.record(content="I like green tea")
        other = mem.remember("Alice likes green tea", evidence=[said.id])
        stale = mem.snapshot().record.root
        mem.falsify(oid, "she takes sugar now")
        mem.cascade(oid, reason="propagate")
        (hit,) = mem.recall(text="green")
        for root in (bytes(stale), None):
            mem.ledger.append(
                _own_receipt(
                    op_type="READ_RECEIPT",
                    actor_id="agent-7",
                    actor_type="AI_AGENT",
                    namespace_id="alice",
                    payload={
                        "v": 2,
                        "run_id": "forged-root",
                        "query": {"branch": "main", "text": "green"},
                        "memory_root": root,
                        "objects": [
                            {
                                "id": other.id,
                                "version": 1,
                                "state": "live",
                                "value_digest": value_digest(hit.object),
                            }
                        ],
                    },
                    policy_version="memroot-receipt/2",
                )
            )
        report = mem.verify(trusted=tmp_path / "t.json", update_trusted=False)
    found = [str(f) for f in report.findings if f.step == 9 and "root in force" in str(f)]
    assert len(found) == 2, [str(f) for f in report.findings]
    assert any(stale.hex()[:16] in m for m in found) and any("root none" in m for m in found)


@pytest.mark.parametrize("seed", range(4))
def test_receipts_on_random_honest_ledgers_verify(tmp_path: Path, seed: int) -> None:
    """Receipts amid snapshots, falsifications, cascades and restores never fail step 9."""
    rng = random.Random(seed)
    with memroot.open(tmp_path / "h.ledger", actor="agent-7", namespace="alice") as mem:
        objects: list[str] = []
        for step in range(30):
            choice = rng.choice(["learn", "learn", "snapshot", "falsify", "restore", "read"])
            if choice == "learn" or not objects:
                said = mem.record(content=f"fact {step} about tea")
                objects.append(mem.remember(f"tea fact {step}", evidence=[said.id]).id)
            elif choice == "snapshot":
                mem.snapshot()
            elif choice == "falsify":
                oid = rng.choice(objects)
                if mem.state(oid) == "live":
                    mem.falsify(oid, "wrong")
                    mem.cascade(oid, reason="propagate")
            elif choice == "restore":
                oid = rng.choice(objects)
                if mem.state(oid) != "live":
                    mem.restore(oid, "right after all", cascade=rng.random() < 0.5)
            mem.recall(text="tea", mode="AUDIT", receipt=f"run-{step}")
        report = mem.verify(trusted=tmp_path / "t.json", update_trusted=False)
        assert report.ok, [str(f) for f in report.findings]
        for r in receipts(mem.ledger):
            assert r.memory_root == root_in_force_at(mem.ledger, r.branch, r.seq)
