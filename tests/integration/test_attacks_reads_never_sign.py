"""Reads never sign, and a long-lived handle re-checks the head when the file changed under it.

The attacker (no key) runs in its own process on the file while a ``Memory`` or a LangGraph
saver is open in this one (a long-running agent or graph process). Each test asserts the
refusal through the surface, that nothing tampered was served, that no checkpoint was signed
(the checkpoints table before and after), that ``memroot verify --trusted`` fails, and that a
fresh open refuses too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner

import memroot
from memroot.cli.main import cli
from memroot.ledger.errors import IntegrityError

ATTACKER = r"""
import json, os, sqlite3, sys
from memroot.ledger import encoding
from memroot.ledger.entries import new_uuid
from memroot.ledger.hashing import content_commitment, leaf_hash

path, action = sys.argv[1], sys.argv[2]
db = sqlite3.connect(path, timeout=10)
no, size, head = db.execute("SELECT no, size, head FROM branches WHERE name = 'main'").fetchone()
if action in ("forge-tail", "forge-past-head", "forge-saver"):
    seq = size - 1
    if action == "forge-saver":
        seq = db.execute("SELECT seq FROM lg_checkpoints ORDER BY id DESC LIMIT 1").fetchone()[0]
    else:
        seq = db.execute(
            "SELECT k & ((1 << 40) - 1) FROM entries WHERE k >> 40 = ? AND content IS NOT NULL "
            "ORDER BY k DESC LIMIT 1", (no,)).fetchone()[0]
    data, content = db.execute(
        "SELECT data, content FROM entries WHERE k = ?", (no << 40 | seq,)).fetchone()
    value = encoding.decode(bytes(data))
    forged = bytes(content).replace(b"tea", b"MALLORY")
    if action == "forge-saver":
        c = json.loads(bytes(content))
        c["checkpoint_id"] = "ffffffff-ffff-6fff-8fff-ffffffffffff"
        forged = json.dumps(c, sort_keys=True, separators=(",", ":")).encode()
    salt = os.urandom(32)
    body = dict(value[7])
    body["id"] = str(new_uuid())
    body["content_commitment"] = content_commitment(salt, forged)
    value[1], value[2], value[7] = bytes(head), size, body
    raw = encoding.encode(value)
    h = leaf_hash(raw)
    db.execute(
        "INSERT INTO entries(k, hash, data, digest, salt, content, erased_by) "
        "VALUES (?, ?, ?, NULL, ?, ?, NULL)", (no << 40 | size, h, raw, salt, forged))
    if action != "forge-past-head":
        db.execute("UPDATE branches SET size = ?, head = ? WHERE no = ?", (size + 1, h, no))
elif action == "truncate":
    prev = db.execute("SELECT hash FROM entries WHERE k = ?", (no << 40 | (size - 2),)).fetchone()
    db.execute("DELETE FROM entries WHERE k = ?", (no << 40 | (size - 1),))
    db.execute("UPDATE branches SET size = ?, head = ? WHERE no = ?", (size - 1, prev[0], no))
db.commit()
db.close()
"""


def attack(path: Path, action: str) -> None:
    """Run the attacker's ``action`` on the file, in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", ATTACKER, str(path), action], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def signed(path: Path) -> list[tuple[int, int]]:
    """Every stored checkpoint (branch no, size), read with plain sqlite3."""
    # apsw, the library memroot's own connection uses: a second SQLite library in this
    # process (stdlib sqlite3) would drop that connection's POSIX locks when it closes.
    db = apsw.Connection(str(path))
    try:
        return sorted(
            (int(b), int(s)) for b, s in db.execute("SELECT branch, size FROM checkpoints")
        )
    finally:
        db.close()


def memroot_cli(path: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def made(tmp_path: Path) -> tuple[Path, Path, str]:
    """A ledger with two remembered facts, its trusted state recorded by a CLI read, and an
    honest copy; returns (path, honest copy, the tea object's id)."""
    path = tmp_path / "m.ledger"
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        said = mem.record(content="I take tea")
        tea = mem.remember("Alice takes tea", evidence=[said.id]).id
        other = mem.record(content="I live in Lyon")
        mem.remember("Alice lives in Lyon", evidence=[other.id])
    assert memroot_cli(path, "verify", "--trusted", str(tmp_path / "t.json")).exit_code == 0
    honest = tmp_path / "honest.ledger"
    shutil.copy(path, honest)
    return path, honest, tea


def after(tmp_path: Path, path: Path, honest: Path, before: list[tuple[int, int]]) -> None:
    """Nothing signed; verify --trusted fails; a fresh open refuses; the honest copy reads."""
    assert signed(path) == before
    v = memroot_cli(path, "verify", "--trusted", str(tmp_path / "t.json"))
    assert v.exit_code == 1, v.output
    with pytest.raises(IntegrityError), memroot.open(path, create=False) as mem:
        mem.recall()
    assert signed(path) == before
    with memroot.open(honest, create=False, key_path=path.with_name("m.ledger.key")) as mem:
        assert len(mem.recall()) == 2


def test_open_memory_forged_tail_is_refused_and_never_signed(tmp_path: Path) -> None:
    """A forged entry appended past the signed head under an open Memory: no read signs it."""
    path, honest, tea = made(tmp_path)
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        assert len(mem.recall()) == 2
        before = signed(path)
        attack(path, "forge-tail")
        with pytest.raises(IntegrityError) as e:
            mem.why(tea)
        assert e.value.step == 6
        with pytest.raises(IntegrityError):
            mem.recall()
        with pytest.raises(IntegrityError) as e:
            mem.ledger.checkpoint()  # on request, still no signature over the forgery
        assert "MALLORY" not in str(e.value)
        assert signed(path) == before
    for cmd in (("checkpoint",), ("prove", "--index", "1"), ("export", str(tmp_path / "bundle"))):
        r = memroot_cli(path, *cmd)
        assert r.exit_code == 1 and "MALLORY" not in r.output, (cmd, r.output)
    assert not (tmp_path / "bundle").exists()
    after(tmp_path, path, honest, before)


def test_open_memory_truncated_under_it_is_refused(tmp_path: Path) -> None:
    """The newest entry cut from the file under an open Memory: its next read refuses."""
    path, honest, _ = made(tmp_path)
    with memroot.open(path, create=False) as mem:
        n = len(list(mem.ledger.entries()))
        before = signed(path)
        attack(path, "truncate")
        with pytest.raises(IntegrityError) as e:
            list(mem.ledger.entries())  # not n - 1 entries served as the whole ledger
        assert e.value.step == 5
    assert n > 1
    after(tmp_path, path, honest, before)


def test_entry_forged_past_stored_head_is_reported(tmp_path: Path) -> None:
    """An entry stored past the branch head (T5) is a finding for reads and for verify."""
    path, honest, _ = made(tmp_path)
    before = signed(path)
    attack(path, "forge-past-head")
    with pytest.raises(IntegrityError) as e, memroot.open(path, create=False) as mem:
        mem.recall()
    assert e.value.step == 2 and "past the branch head" in str(e.value)
    after(tmp_path, path, honest, before)


def test_saver_forged_checkpoint_while_open_is_never_signed(tmp_path: Path) -> None:
    """A saver open in a graph process: a forged checkpoint entry and moved head are refused."""
    pytest.importorskip("langgraph")
    from memroot.integrations.langgraph import MemrootSaver

    path = tmp_path / "g.ledger"
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    with MemrootSaver.from_conn_string(path) as saver:
        from langgraph.checkpoint.base import empty_checkpoint

        cp = empty_checkpoint()
        saver.put({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}, cp, {"step": 0}, {})
        assert saver.get_tuple(cfg) is not None
        before = signed(path)
        attack(path, "forge-saver")
        with pytest.raises(IntegrityError):
            saver.get_tuple(cfg)
        assert signed(path) == before
    v = memroot_cli(path, "verify")
    assert v.exit_code == 1, v.output
    with pytest.raises(IntegrityError), MemrootSaver.from_conn_string(path) as fresh:
        fresh.get_tuple(cfg)
    assert signed(path) == before
