"""A write that waits for another writer's lock says so on stderr after a second."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import apsw
from click.testing import CliRunner

from memroot.cli.main import cli

EVENT = {
    "kind": "event",
    "stream": "s1",
    "actor_id": "alice",
    "actor_type": "HUMAN_USER",
    "role": "USER",
    "content": "written while another process held the lock",
    "namespace_id": "alice",
}


def _memroot(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "from memroot.cli.main import main; main()", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_append_waiting_for_the_write_lock_says_so_and_then_commits(tmp_path: Path) -> None:
    """Another connection holds the write lock until the append says it is waiting: the append
    prints the notice, waits, and commits once the lock is released (exit 0, the entry is
    there). The lock is released on the notice, not after a fixed time, so a slow start of the
    child on a loaded machine cannot let it in before the holder has let go."""
    ledger = tmp_path / "a.ledger"
    assert CliRunner().invoke(cli, ["-l", str(ledger), "init"]).exit_code == 0
    holder = apsw.Connection(str(ledger))
    holder.execute("BEGIN IMMEDIATE")
    try:
        proc = _memroot("-l", str(ledger), "append", json.dumps(EVENT), "--json")
        assert proc.stderr is not None
        seen: list[str] = []
        while not any("waiting for the write lock on" in line for line in seen):
            line = proc.stderr.readline()
            if not line:
                break  # the child ended without the notice: the asserts below say so
            seen.append(line)
        held = time.monotonic()
        time.sleep(0.5)  # the child is waiting now; it must still be waiting after this
        assert proc.poll() is None, "the append did not wait for the holder"
        holder.execute("ROLLBACK")
        out, err = proc.communicate(timeout=120)
        err = "".join(seen) + err
        waited = time.monotonic() - held
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode == 0, err
    assert "waiting for the write lock on" in err and str(ledger) in err
    assert waited < 60  # it went on once the lock was free
    (row,) = json.loads(out)
    assert row["seq"] == 1


def test_no_notice_when_the_lock_is_free(tmp_path: Path) -> None:
    """An append that gets the lock at once prints no notice."""
    ledger = tmp_path / "a.ledger"
    assert CliRunner().invoke(cli, ["-l", str(ledger), "init"]).exit_code == 0
    proc = _memroot("-l", str(ledger), "append", json.dumps(EVENT))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "waiting for the write lock" not in err
