"""A real witness process on loopback: cosigning, a rollback caught and refused, a down witness.

The witness runs as `memroot witness serve --listen 127.0.0.1:0` in a subprocess (a real
HTTP server); the ledger and the auditors use the CLI in-process.
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from memroot.ledger.note import split_note
from memroot.ledger.transparency.cosignature import WitnessKey, cosignatures

ORIGIN = "example.org/agent-witnessed"
WITNESS = "witness.example.org/w1"


class Server:
    """A `memroot witness serve` subprocess on 127.0.0.1 (port chosen by the OS)."""

    def __init__(self, directory: Path, port: int = 0) -> None:
        self.directory = directory
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from memroot.cli.main import main; main()",
                "witness",
                "serve",
                str(directory),
                "--listen",
                f"127.0.0.1:{port}",
                "--quiet",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("listening on http://127.0.0.1:"):
            self.stop()
            raise AssertionError(f"witness did not start: {line!r} {self.proc.stderr}")
        self.url = line.split(" ")[-1].strip()
        self.port = int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def world(tmp_path: Path, cmd: Any) -> Iterator[dict[str, Any]]:
    """A ledger, a witness process following it, and the witness configured on the ledger."""
    ledger = tmp_path / "agent.ledger"
    cmd.ok(cmd.at(ledger, "init", "--origin", ORIGIN))
    vkey = cmd.ok(cmd.at(ledger, "vkey")).stdout.strip()
    wdir = tmp_path / "wdir"
    wvkey = cmd.ok(
        cmd.run("witness", "init", str(wdir), "--name", WITNESS, "--log", vkey)
    ).stdout.strip()
    server = Server(wdir)
    cmd.ok(cmd.at(ledger, "witness", "add", server.url, wvkey))
    world = {"ledger": ledger, "vkey": vkey, "wvkey": wvkey, "server": server, "tmp": tmp_path}
    try:
        yield world
    finally:
        server.stop()
        if world["server"] is not server:  # a test restarted the witness: stop that one too
            world["server"].stop()


def append(cmd: Any, ledger: Path, n: int) -> None:
    """Append ``n`` events and sign a checkpoint covering them."""
    for i in range(n):
        cmd.ok(cmd.at(ledger, "append", json.dumps({**cmd.EVENT, "content": f"m{i}"})))
    cmd.ok(cmd.at(ledger, "checkpoint"))


def fresh_verify(cmd: Any, w: dict[str, Any], *extra: str) -> Result:
    """`verify` by an auditor with no trusted state of their own (a new, empty file)."""
    trusted = w["tmp"] / f"fresh-{time.monotonic_ns()}.json"
    return cmd.run(
        "-l",
        str(w["ledger"]),
        "verify",
        "--trusted",
        str(trusted),
        "--vkey",
        w["vkey"],
        "--witness-vkey",
        w["wvkey"],
        "--json",
        *extra,
    )


def test_every_checkpoint_is_cosigned_and_kept_in_its_note(world: dict[str, Any], cmd: Any) -> None:
    """After appends and a checkpoint, the stored note carries the witness's cosignature."""
    append(cmd, world["ledger"], 3)
    note = cmd.ok(cmd.at(world["ledger"], "checkpoint")).stdout
    [c] = cosignatures(note, [WitnessKey.from_vkey(world["wvkey"])])
    assert c.witness == WITNESS
    status = cmd.ok_json(cmd.at(world["ledger"], "witness", "list", "--json"))
    assert [(s["cosigned_size"], s["pending"]) for s in status] == [(4, 0)]
    report = cmd.ok_json(fresh_verify(cmd, world, "--witness", world["server"].url))
    assert report["ok"] and report["trusted"]["witnesses"]["newest_cosigned_size"] == 4


def test_a_restored_older_copy_is_caught_by_a_fresh_auditor_and_refused_by_the_witness(
    world: dict[str, Any],
    cmd: Any,
) -> None:
    """Roll the ledger back to an older copy: a verifier with no state of its own fails it
    (step 10, from the witness), and the witness refuses what the old copy signs next."""
    ledger: Path = world["ledger"]
    append(cmd, ledger, 2)
    backup = world["tmp"] / "backup"
    backup.mkdir()
    for suffix in ("", ".key"):
        shutil.copy(f"{ledger}{suffix}", backup / f"agent.ledger{suffix}")
    append(cmd, ledger, 3)
    assert cmd.ok(fresh_verify(cmd, world, "--witness", world["server"].url))
    # The operator (or an attacker) puts the older copy back.
    for suffix in ("", ".key"):
        shutil.copy(backup / f"agent.ledger{suffix}", f"{ledger}{suffix}")
    for suffix in ("-wal", "-shm"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    # Without the witness, a fresh auditor cannot tell: the old copy is self-consistent.
    alone = fresh_verify(cmd, world)
    assert alone.exit_code == 0, alone.output
    caught = fresh_verify(cmd, world, "--witness", world["server"].url)
    assert caught.exit_code == 1
    report = json.loads(caught.stdout)
    [finding] = report["findings"]
    assert finding["step"] == 10 and "rollback" in finding["message"]
    assert (finding["expected"], finding["actual"]) == ("6", "3")
    # The old copy grows on: the witness refuses to cosign its fork.
    for i in range(4):
        cmd.ok(cmd.at(ledger, "append", json.dumps({**cmd.EVENT, "content": f"fork {i}"})))
    signed = cmd.at(ledger, "checkpoint")
    assert signed.exit_code == 0  # the checkpoint is committed and kept
    assert "warning: witness" in signed.stderr and "refused" in signed.stderr
    assert len(split_note(signed.stdout)[1]) == 1  # the log's signature only
    retried = cmd.at(ledger, "witness", "submit", "--json")
    assert retried.exit_code == 1
    [sub] = json.loads(retried.stdout)
    assert sub["status"] == "conflict" and sub["pending"] == 1
    # The witness still vouches for the real history (size 6), not the fork (size 7).
    state = json.loads((world["server"].directory / "state.json").read_text())
    assert state["logs"][ORIGIN]["size"] == 6
    evidence = (world["server"].directory / "evidence.jsonl").read_text().splitlines()
    assert evidence and all(ORIGIN in line for line in evidence)


def test_a_down_witness_is_queued_reported_and_retried(world: dict[str, Any], cmd: Any) -> None:
    """With the witness down, the checkpoint is still signed and kept (exit 0, a warning);
    `witness submit` exits 4 while it is down; once it is back, the queue drains."""
    ledger: Path = world["ledger"]
    world["server"].stop()
    for i in range(2):
        # Every append signs its own checkpoint and submits it: each one warns, none fails.
        appended = cmd.ok(cmd.at(ledger, "append", json.dumps({**cmd.EVENT, "content": f"d{i}"})))
        assert "unreachable" in appended.stderr
    signed = cmd.at(ledger, "checkpoint", "--json")
    assert signed.exit_code == 0
    assert "unreachable" in signed.stderr and "pending" in signed.stderr
    assert json.loads(signed.stdout)["size"] == 3
    down = cmd.at(ledger, "witness", "submit")
    assert down.exit_code == 4 and "unreachable" in down.stderr
    [row] = cmd.ok_json(cmd.at(ledger, "witness", "list", "--json"))
    # Tried by the two appends, the checkpoint and the submit.
    assert row["pending"] == 1 and row["failed_attempts"] == 4 and row["last_error"]
    strict = fresh_verify(cmd, world)
    assert strict.exit_code == 1  # the newest checkpoint lacks its cosignature
    assert "0 valid witness cosignature(s), 1 required" in strict.stdout
    world["server"] = Server(world["server"].directory, world["server"].port)
    cmd.ok(cmd.at(ledger, "witness", "submit"))
    [row] = cmd.ok_json(cmd.at(ledger, "witness", "list", "--json"))
    assert (row["pending"], row["cosigned_size"], row["last_error"]) == (0, 3, None)
    assert cmd.ok(fresh_verify(cmd, world, "--witness", world["server"].url))


def test_a_bundle_carries_the_cosignatures(world: dict[str, Any], cmd: Any) -> None:
    """An exported bundle audits with --witness-vkey; a quorum above the keys is refused."""
    append(cmd, world["ledger"], 2)
    out = world["tmp"] / "bundle"
    cmd.ok(cmd.at(world["ledger"], "export", str(out)))
    trusted = str(world["tmp"] / "t.json")
    args = ["audit", str(out), "--vkey", world["vkey"], "--trusted", trusted]
    audited = cmd.run(*args, "--witness-vkey", world["wvkey"], "--witness", world["server"].url)
    assert audited.exit_code == 0, audited.output
    too_many = cmd.run(*args, "--witness-vkey", world["wvkey"], "--quorum", "2")
    assert too_many.exit_code == 3 and "--quorum 2" in too_many.stderr
    no_key = cmd.run(*args, "--witness", world["server"].url)
    assert no_key.exit_code == 3 and "--witness-vkey" in no_key.stderr
