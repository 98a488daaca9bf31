"""Keys for a fleet through the ``memroot`` command: writer keys, revocation, rotation, auditors.

One ledger file plays a fleet: the root key beside it (``LEDGER.key``), writer key files for
hosts, a branch, a revocation and a rotation. An auditor handed only the genesis (root) vkey
verifies it all (verify, audit of a bundle, audit of a tiles directory); attackers holding a
revoked or a writer key, each in its own process, are caught.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.ledger import Ledger

ORIGIN = "example.org/fleet"


@dataclass
class Fleet:
    """The fleet's ledger, its root vkey, and the host key files."""

    ledger: Path
    root_vkey: str
    b_key: Path  # revoked at ``revoke_seq``
    c_key: Path  # added after the rotation, in force
    branch: str
    revoke_seq: int
    retired_key: Path


def _size(path: Path, branch: str = "main") -> int:
    with Ledger.open(path, readonly=True) as ledger:
        return ledger.size(branch)


@pytest.fixture
def fleet(tmp_path: Path, cmd: Any) -> Fleet:
    """Build the fleet's history: writer keys, a branch, a revocation, a rotation."""
    led = tmp_path / "fleet.ledger"
    event = json.dumps(cmd.EVENT)
    cmd.json_at(led, "init", "--origin", ORIGIN)
    root_vkey = cmd.ok(cmd.at(led, "vkey")).stdout.strip()
    b_key, c_key = tmp_path / "host-b.key", tmp_path / "host-c.key"
    cmd.json_at(led, "key", "add", "--name", "host-b", "--out", str(b_key))
    for _ in range(2):
        cmd.ok(cmd.run("-l", str(led), "--key", str(b_key), "append", event))
    branch = cmd.json_at(led, "branch", "create", "--type", "SIMULATION", "--purpose", "p")[
        "branch_id"
    ]
    cmd.ok(cmd.run("-l", str(led), "--key", str(b_key), "append", "-b", branch, event))
    revoke_seq = cmd.json_at(led, "key", "revoke", "host-b")["seq"]
    cmd.ok(cmd.at(led, "append", event))
    rotation = cmd.json_at(led, "rotate-key")
    cmd.json_at(led, "key", "add", "--name", "host-c", "--out", str(c_key))
    cmd.ok(cmd.run("-l", str(led), "--key", str(c_key), "append", event))
    cmd.ok(cmd.run("-l", str(led), "--key", str(c_key), "append", "-b", branch, event))
    return Fleet(
        led, root_vkey, b_key, c_key, branch, revoke_seq, Path(rotation["retired_key_file"])
    )


def test_auditor_with_only_the_root_vkey_verifies_across_rotation_writers_and_revocation(
    fleet: Fleet, cmd: Any, tmp_path: Path
) -> None:
    """verify, audit BUNDLE and audit --tiles pass given only the genesis root vkey."""
    report = cmd.json_at(fleet.ledger, "verify", "--vkey", fleet.root_vkey, "--no-update")
    assert report["ok"] and report["findings"] == []
    bundle = tmp_path / "bundle"
    cmd.json_at(fleet.ledger, "export", str(bundle))
    audited = cmd.json_at(fleet.ledger, "audit", str(bundle), "--vkey", fleet.root_vkey)
    assert audited["ok"], audited
    tiles = tmp_path / "tiles"
    cmd.ok(cmd.at(fleet.ledger, "publish", str(tiles)))
    tiled = cmd.ok_json(
        cmd.run("audit", "--tiles", str(tiles), "--vkey", fleet.root_vkey, "--no-update", "--json")
    )
    assert tiled["ok"], tiled


def test_revoked_hosts_append_is_refused_exit_5_naming_the_revoke(fleet: Fleet, cmd: Any) -> None:
    """A revoked writer key is refused on main and on a branch; nothing is written."""
    before = (_size(fleet.ledger), _size(fleet.ledger, fleet.branch))
    for branch in ("main", fleet.branch):
        r = cmd.run(
            "-l", str(fleet.ledger), "--key", str(fleet.b_key), "append", "-b", branch,
            json.dumps(cmd.EVENT),
        )  # fmt: skip
        assert r.exit_code == 5, r.output
        assert f"revoked by entry {fleet.revoke_seq}" in r.output
    assert (_size(fleet.ledger), _size(fleet.ledger, fleet.branch)) == before


def test_retired_key_file_put_back_is_refused(fleet: Fleet, cmd: Any) -> None:
    """``--key LEDGER.key.XXXX.retired append`` exits 5 naming the rotation; nothing written."""
    before = _size(fleet.ledger)
    r = cmd.run(
        "-l", str(fleet.ledger), "--key", str(fleet.retired_key), "append", json.dumps(cmd.EVENT)
    )
    assert r.exit_code == 5 and "retired by entry" in r.output
    assert _size(fleet.ledger) == before


def test_a_writer_key_cannot_add_or_revoke_keys(fleet: Fleet, cmd: Any, tmp_path: Path) -> None:
    """key add / key revoke need the root key: a writer key is refused (exit 5)."""
    before = _size(fleet.ledger)
    key = ("-l", str(fleet.ledger), "--key", str(fleet.c_key))
    r = cmd.run(*key, "key", "add", "--name", "host-d", "--out", str(tmp_path / "d.key"))
    assert r.exit_code == 5 and "needs the root key" in r.output
    assert not (tmp_path / "d.key").exists()
    assert cmd.run(*key, "key", "revoke", "host-c").exit_code == 5
    assert _size(fleet.ledger) == before


def test_key_list_and_vkey_all_show_every_range(fleet: Fleet, cmd: Any) -> None:
    """key list / vkey --all: two roots (one retired), host-b revoked, host-c in force."""
    rows = cmd.json_at(fleet.ledger, "key", "list")
    assert [(r["role"], r["name"]) for r in rows] == [
        ("root", "root"),
        ("root", "root"),
        ("writer", "host-b"),
        ("writer", "host-c"),
    ]
    b = rows[2]
    assert b["revoked_at_entry"] == fleet.revoke_seq and b["max_size"] == fleet.revoke_seq
    assert rows[3]["revoked_at_entry"] is None
    assert rows[0]["vkey"] == fleet.root_vkey and rows[0]["retired_at_entry"] is not None
    shown = cmd.json_at(fleet.ledger, "vkey", "--all")
    assert shown["vkey"] == fleet.root_vkey and shown["keys"] == rows
    assert shown["root_in_force"] == rows[1]["vkey"]


def test_vkey_after_import_bundle_with_no_key_file(fleet: Fleet, cmd: Any, tmp_path: Path) -> None:
    """A ledger restored by import-bundle, with no key file, prints its root vkey and keys."""
    bundle = tmp_path / "bundle"
    cmd.json_at(fleet.ledger, "export", str(bundle))
    restored = tmp_path / "restored" / "copy.ledger"
    restored.parent.mkdir()
    cmd.json_at(restored, "import-bundle", str(bundle), "--vkey", fleet.root_vkey)
    assert not Path(f"{restored}.key").exists()
    assert cmd.ok(cmd.at(restored, "vkey")).stdout.strip() == fleet.root_vkey
    assert cmd.json_at(restored, "key", "list") == cmd.json_at(fleet.ledger, "key", "list")
    report = cmd.json_at(restored, "verify", "--vkey", fleet.root_vkey, "--no-update")
    assert report["ok"], report


def test_vkey_on_a_read_only_ledger(fleet: Fleet, cmd: Any) -> None:
    """vkey reads the ledger only: a read-only file (and directory) answers the same."""
    fleet.ledger.chmod(0o444)
    try:
        assert cmd.ok(cmd.at(fleet.ledger, "vkey")).stdout.strip() == fleet.root_vkey
    finally:
        fleet.ledger.chmod(0o644)


# -- attackers in their own process -----------------------------------------------------------

_ATTACKER = textwrap.dedent(
    """
    import json, sys
    from memroot.ledger.ledger import Ledger
    from memroot.ledger.entries import EventInput

    path, key, branch, forge_key_add = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    with Ledger.open(path, key_path=key, strict=False, hooks=()) as ledger:
        # The attacker's own build of memroot: the key checks are cut out.
        signer = ledger.signer
        ledger._require_key = lambda *a, **k: signer
        if forge_key_add != "no":
            from memroot.ledger.entries import _library_op
            from memroot.ledger.keyset import authority_statement, sign_statement
            from memroot.ledger.note import vkey_of
            from memroot.ledger.signing import Ed25519Signer
            from memroot.ledger.vocab import OpType

            # "yes": a new key of mallory's; otherwise the vkey given, added again as "twin".
            name, vkey = ("mallory", vkey_of(Ed25519Signer.generate(ledger.origin))) \
                if forge_key_add == "yes" else ("twin", forge_key_add)
            head = ledger.store.branch("main")
            stmt = authority_statement(
                origin=ledger.origin, seq=head.size, prev=bytes(head.head),
                op_type="KEY_ADD", name=name, vkey=vkey,
            )
            payload = {"name": name, "vkey": vkey,
                       "root_vkey": ledger.current_vkey(), "sig": sign_statement(signer, stmt)}
            ledger.append(_library_op(ledger.system_op(OpType.KEY_ADD, payload)))
        else:
            ledger.append(
                EventInput(stream="s1", actor_id="eve", actor_type="HUMAN_USER",
                           role="USER", namespace_id="alice", content="forged"),
                branch=branch,
            )
    """
)


def _attack(fleet: Fleet, key: Path, branch: str, forge_key_add: bool | str = False) -> None:
    """Run the attacker; ``forge_key_add``: True a new key, a vkey string that key again."""
    forge = forge_key_add if isinstance(forge_key_add, str) else "yes" if forge_key_add else "no"
    r = subprocess.run(
        [sys.executable, "-c", _ATTACKER, str(fleet.ledger), str(key), branch, forge],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("branch", ["main", "sim"])
def test_revoked_key_forged_entry(fleet: Fleet, cmd: Any, branch: str) -> None:
    """revoked_key_forged_entry: a signature by a revoked key fails verify; reads refuse it."""
    target = fleet.branch if branch == "sim" else "main"
    _attack(fleet, fleet.b_key, target)
    r = cmd.at(fleet.ledger, "verify", "--vkey", fleet.root_vkey, "--no-update", "--json")
    report = json.loads(r.stdout)
    assert r.exit_code == 1 and not report["ok"]
    assert any(f["step"] == 6 and f["branch"] == target for f in report["findings"]), report
    r = cmd.at(fleet.ledger, "log", "-b", target)
    assert r.exit_code == 1 and "strict read refused" in r.output
    assert "forged" not in r.stdout


def test_writer_key_self_authorizes_a_key(fleet: Fleet, cmd: Any) -> None:
    """writer_self_authorizes_a_key: a KEY_ADD signed by a writer, not the root, trusts nothing."""
    _attack(fleet, fleet.c_key, "main", forge_key_add=True)
    r = cmd.at(fleet.ledger, "verify", "--vkey", fleet.root_vkey, "--no-update", "--json")
    report = json.loads(r.stdout)
    assert r.exit_code == 1
    assert any(
        f["step"] == 6 and "KEY_ADD is not valid" in f["message"] for f in report["findings"]
    ), report


def test_root_key_adds_a_key_the_log_already_has(fleet: Fleet, cmd: Any) -> None:
    """key_added_twice: a root-signed KEY_ADD of a writer key already in force, under a new name.

    Strict reads and verify's step 6 share one rule for what a KEY_ADD may add
    (``keyset.check_new_writer``): both refuse it, so no read accepts what verify reports.
    """
    with Ledger.open(fleet.ledger, readonly=True) as ledger:
        c_vkey = ledger.key_set().writers["host-c"].vkey
    _attack(fleet, fleet.ledger.with_name(fleet.ledger.name + ".key"), "main", forge_key_add=c_vkey)
    r = cmd.at(fleet.ledger, "verify", "--vkey", fleet.root_vkey, "--no-update", "--json")
    report = json.loads(r.stdout)
    assert r.exit_code == 1
    assert any(
        f["step"] == 6 and "already a key of this log" in f["message"] for f in report["findings"]
    ), report
    r = cmd.at(fleet.ledger, "log")
    assert r.exit_code == 1 and "already a key of this log" in r.output, r.output


def test_key_cache_omits_revocation(fleet: Fleet, cmd: Any) -> None:
    """key_cache_omits_revocation: a key cache edited to drop the KEY_REVOKE fails step 5."""
    import apsw

    db = apsw.Connection(str(fleet.ledger))
    (raw,) = db.execute("SELECT value FROM meta WHERE key = 'key_entries'").fetchone()
    seqs = [s for s in json.loads(raw) if s != fleet.revoke_seq]
    db.execute("UPDATE meta SET value = ? WHERE key = 'key_entries'", (json.dumps(seqs),))
    db.close()
    r = cmd.at(fleet.ledger, "verify", "--vkey", fleet.root_vkey, "--no-update", "--json")
    report = json.loads(r.stdout)
    assert r.exit_code == 1
    assert any(f["step"] == 5 and "key cache" in f["message"] for f in report["findings"])
