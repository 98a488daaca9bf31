"""A witness configured with only the root vkey, across a rotation and writer keys.

The witness is a real `memroot witness serve` process on loopback (as in
``test_witness_loopback``); the ledger's hosts and the auditor use the CLI in-process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memroot.ledger.note import vkey_of
from memroot.ledger.signing import Ed25519Signer
from tests.integration.test_witness_loopback import ORIGIN, WITNESS, Server


def test_witness_with_the_root_vkey_cosigns_across_rotation_and_writer_keys(
    tmp_path: Path, cmd: Any
) -> None:
    """Writer keys and a rotated root key are cosigned; verify --witness passes with ROOT."""
    ledger = tmp_path / "agent.ledger"
    cmd.ok(cmd.at(ledger, "init", "--origin", ORIGIN))
    root = cmd.ok(cmd.at(ledger, "vkey")).stdout.strip()
    wdir = tmp_path / "wdir"
    wvkey = cmd.ok(
        cmd.run("witness", "init", str(wdir), "--name", WITNESS, "--log", root)
    ).stdout.strip()
    server = Server(wdir)
    try:
        cmd.ok(cmd.at(ledger, "witness", "add", server.url, wvkey))
        writer = tmp_path / "host-b.key"
        cmd.json_at(ledger, "key", "add", "--name", "host-b", "--out", str(writer))
        event = json.dumps(cmd.EVENT)
        host_b = ("-l", str(ledger), "--key", str(writer))
        cmd.ok(cmd.run(*host_b, "append", event))
        cmd.json_at(ledger, "rotate-key")
        cmd.ok(cmd.at(ledger, "append", event))
        cmd.ok(cmd.run(*host_b, "append", event))
        result = cmd.run(*host_b, "witness", "submit", "--json")
        assert result.exit_code == 0, result.output
        size = len(cmd.json_at(ledger, "log"))
        state = json.loads((wdir / "state.json").read_text())["logs"][ORIGIN]
        assert state["size"] == size  # the writer-signed head was cosigned
        learned = json.loads((wdir / "keys.json").read_text())["logs"][ORIGIN]
        assert [seq for seq, _ in learned] == [1, 3]  # the KEY_ADD and the KEY_ROTATE
        fresh = tmp_path / "fresh.json"
        report = cmd.ok_json(
            cmd.run(
                "-l", str(ledger), "verify", "--trusted", str(fresh), "--vkey", root,
                "--witness-vkey", wvkey, "--witness", server.url, "--json",
            )
        )  # fmt: skip
        assert report["ok"], report
    finally:
        server.stop()


def test_running_witness_picks_up_witness_follow(tmp_path: Path, cmd: Any) -> None:
    """`witness follow` on a served directory takes effect without a restart (a new key)."""
    ledger = tmp_path / "agent.ledger"
    cmd.ok(cmd.at(ledger, "init", "--origin", ORIGIN))
    wdir = tmp_path / "wdir"
    other = vkey_of(Ed25519Signer.generate(ORIGIN))  # the witness follows the origin, not us
    wvkey = cmd.ok(
        cmd.run("witness", "init", str(wdir), "--name", WITNESS, "--log", other)
    ).stdout.strip()
    server = Server(wdir)
    try:
        cmd.ok(cmd.at(ledger, "witness", "add", server.url, wvkey))
        r = cmd.at(ledger, "witness", "submit")
        assert r.exit_code == 3  # 403: not a key the witness has for the origin
        root = cmd.ok(cmd.at(ledger, "vkey")).stdout.strip()
        cmd.ok(cmd.run("witness", "follow", str(wdir), root))
        r = cmd.at(ledger, "witness", "submit")
        assert r.exit_code == 0, r.output
    finally:
        server.stop()
