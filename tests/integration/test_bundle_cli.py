"""The bundle commands of the ``memroot`` CLI: export, audit, import-bundle, tiles, rotate-key."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.bundle.export import MANIFEST, branch_files
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import Verifier, open_checkpoint

ORIGIN = "example.org/bundle-cli"


@pytest.fixture
def ledger(tmp_path: Path, cmd: Any) -> Path:
    """A ledger made with the CLI, holding a dozen events."""
    path = tmp_path / "agent.ledger"
    assert cmd.at(path, "init", "--origin", ORIGIN).exit_code == 0
    lines = [json.dumps({**cmd.EVENT, "content": f"message {i}"}) for i in range(12)]
    (tmp_path / "seed.jsonl").write_text("\n".join(lines) + "\n")
    assert cmd.at(path, "import", str(tmp_path / "seed.jsonl")).exit_code == 0
    return path


@pytest.fixture
def vkey(ledger: Path, cmd: Any) -> str:
    return str(cmd.ok_json(cmd.at(ledger, "vkey", "--json"))["vkey"])


def test_export_then_audit_without_a_ledger(
    tmp_path: Path, ledger: Path, vkey: str, cmd: Any
) -> None:
    """`audit` is global: it checks an exported bundle with only the vkey, and says so."""
    out = tmp_path / "bundle"
    exported = cmd.ok_json(cmd.at(ledger, "export", str(out), "--json"))
    with Ledger.open(ledger) as led:
        assert exported["branches"]["main"] == {
            "size": led.size(),
            "root": led.root().hex(),
            "checkpoints": len(led.checkpoints()),
        }
    report = cmd.ok_json(cmd.run("audit", str(out), "--vkey", vkey, "--no-update", "--json"))
    assert report["ok"] and report["entries"] == 13 and report["trusted"]["keys"] == "given"
    human = cmd.run("audit", str(out), "--vkey", vkey, "--no-update")
    assert human.exit_code == 0 and "OK: every step holds" in human.output
    assert "step  4 content commitments and erasures: ok" in human.output


def test_audit_of_a_tampered_bundle_exits_1_naming_step_and_entry(
    tmp_path: Path,
    ledger: Path,
    vkey: str,
    cmd: Any,
) -> None:
    """A damaged bundle makes `audit` exit 1 and print each violation with its step."""
    out = tmp_path / "bundle"
    assert cmd.at(ledger, "export", str(out)).exit_code == 0
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["branches"][0]["size"] = 5  # claim a shorter chain than the entries hold
    (out / MANIFEST).write_text(json.dumps(manifest))
    result = cmd.run("audit", str(out), "--vkey", vkey, "--no-update", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert not report["ok"] and report["steps"]["3"]["violations"] == 1
    human = cmd.run("audit", str(out), "--vkey", vkey, "--no-update")
    assert human.exit_code == 1 and "VIOLATION step 3: branch main" in human.output


def test_audit_of_a_missing_bundle_is_a_clear_error(tmp_path: Path, cmd: Any) -> None:
    """Auditing a path that is not a bundle names the problem (no traceback)."""
    result = cmd.run("audit", str(tmp_path / "nowhere"), "--no-update")
    assert result.exit_code == 3 and "no bundle directory" in result.output


def test_import_bundle_rebuilds_a_verifying_ledger(
    tmp_path: Path, ledger: Path, vkey: str, cmd: Any
) -> None:
    """import-bundle writes a ledger with the same root and checkpoints, which verifies."""
    out = tmp_path / "bundle"
    assert cmd.at(ledger, "export", str(out)).exit_code == 0
    copy = tmp_path / "copy.ledger"
    done = cmd.ok_json(cmd.at(copy, "import-bundle", str(out), "--vkey", vkey, "--json"))
    assert done["entries"] == 13
    verified = cmd.at(copy, "verify", "--vkey", vkey, "--no-update", "--json")
    assert cmd.ok_json(verified)["ok"]
    with Ledger.open(ledger) as a, Ledger.open(copy) as b:
        assert (a.root(), a.checkpoints()) == (b.root(), b.checkpoints())


def test_import_bundle_refuses_a_tampered_bundle(
    tmp_path: Path, ledger: Path, vkey: str, cmd: Any
) -> None:
    """A bundle with a damaged file is not imported (exit 1) and no ledger appears."""
    out = tmp_path / "bundle"
    assert cmd.at(ledger, "export", str(out)).exit_code == 0
    entries = out / branch_files("main")["entries"]
    raw = bytearray(entries.read_bytes())
    raw[-1] ^= 0xFF
    entries.write_bytes(bytes(raw))
    copy = tmp_path / "copy.ledger"
    result = cmd.at(copy, "import-bundle", str(out), "--vkey", vkey)
    assert result.exit_code == 1 and "nothing was imported" in result.output
    assert not copy.exists()


def test_export_refuses_an_existing_directory(tmp_path: Path, ledger: Path, cmd: Any) -> None:
    """Exporting onto an existing directory exits 3 and writes nothing."""
    (tmp_path / "taken").mkdir()
    result = cmd.at(ledger, "export", str(tmp_path / "taken"))
    assert result.exit_code == 3 and "already exists" in result.output
    assert list((tmp_path / "taken").iterdir()) == []


def test_tiles_command_publishes_a_signed_checkpoint(
    tmp_path: Path,
    ledger: Path,
    vkey: str,
    cmd: Any,
) -> None:
    """`tiles` writes the checkpoint and tiles; the checkpoint opens with the vkey."""
    out = tmp_path / "log"
    data = cmd.ok_json(cmd.at(ledger, "tiles", str(out), "--json"))
    # the partial level-0 tile and entry bundle at 13 and at 1 (the init checkpoint):
    # every retained checkpoint gets its partial tiles
    assert data["size"] == 13 and data["tiles_written"] == 4
    cp = open_checkpoint((out / "checkpoint").read_text(), [Verifier.from_vkey(vkey)])
    assert cp.checkpoint.size == 13 and cp.checkpoint.root.hex() == data["root"]
    assert (out / "tile/0/000.p/13").stat().st_size == 13 * 32


def test_rotate_key_then_audit_with_the_original_key(
    tmp_path: Path,
    ledger: Path,
    vkey: str,
    cmd: Any,
) -> None:
    """After `rotate-key`, a bundle still audits with the original vkey alone."""
    rotated = cmd.ok_json(cmd.at(ledger, "rotate-key", "--json"))
    assert rotated["old_vkey"] == vkey != rotated["new_vkey"]
    shown = cmd.ok_json(cmd.at(ledger, "vkey", "--json"))
    # vkey prints the root of trust (the genesis key), and the root key now in force.
    assert shown["vkey"] == vkey and shown["root_in_force"] == rotated["new_vkey"]
    line = json.dumps({**cmd.EVENT, "content": "after rotation"})
    assert cmd.at(ledger, "append", line).exit_code == 0
    out = tmp_path / "bundle"
    assert cmd.at(ledger, "export", str(out)).exit_code == 0
    report = cmd.ok_json(cmd.run("audit", str(out), "--vkey", vkey, "--no-update", "--json"))
    assert report["ok"]
    assert any("signing key rotated" in n["message"] for n in report["notes"])


def test_key_file_readable_by_others_exits_5(tmp_path: Path, ledger: Path, cmd: Any) -> None:
    """A too-open key file stops an append with exit 5 and a chmod 600 hint; export, which
    only reads (every entry is already sealed), does not need the key."""
    os.chmod(f"{ledger}.key", 0o644)
    before = cmd.at(ledger, "log", "--json").stdout
    result = cmd.at(ledger, "append", json.dumps(cmd.EVENT))
    assert result.exit_code == 5 and "chmod 600" in result.output
    assert cmd.at(ledger, "log", "--json").stdout == before  # nothing was written
    assert cmd.at(ledger, "export", str(tmp_path / "bundle")).exit_code == 0


@pytest.mark.parametrize("command", ["export", "audit", "import-bundle", "tiles", "rotate-key"])
def test_every_bundle_command_has_an_example(command: str, cmd: Any) -> None:
    """Each command's help has an Example line."""
    result = cmd.run(command, "--help")
    assert result.exit_code == 0 and "Example: memroot" in result.output


def test_import_bundle_replays_the_layers_derived_state(tmp_path: Path, cmd: Any) -> None:
    """A ledger with memory-root snapshots imports into one whose verify passes steps 8 and 9."""
    path = tmp_path / "snap.ledger"
    assert cmd.at(path, "init", "--origin", ORIGIN, "--snapshot-every", "5").exit_code == 0
    lines = [json.dumps({**cmd.EVENT, "content": f"message {i}"}) for i in range(23)]
    (tmp_path / "seed.jsonl").write_text("\n".join(lines) + "\n")
    assert cmd.at(path, "import", str(tmp_path / "seed.jsonl")).exit_code == 0
    vkey = str(cmd.ok_json(cmd.at(path, "vkey", "--json"))["vkey"])
    assert cmd.at(path, "export", str(tmp_path / "b")).exit_code == 0
    copy = tmp_path / "copy.ledger"
    cmd.ok_json(cmd.at(copy, "import-bundle", str(tmp_path / "b"), "--vkey", vkey, "--json"))
    report = cmd.ok_json(cmd.at(copy, "verify", "--vkey", vkey, "--no-update", "--json"))
    assert report["steps"]["8"] == {
        "checked": True,
        "violations": 0,
        "what": report["steps"]["8"]["what"],
    }
    assert report["steps"]["9"]["checked"] and report["steps"]["9"]["violations"] == 0
    with Ledger.open(path) as a:
        assert sum(1 for e in a.entries() if e.type == "SNAPSHOT") >= 4


def test_audit_of_a_bundle_with_a_garbage_manifest_exits_1(
    tmp_path: Path, ledger: Path, cmd: Any
) -> None:
    """An unreadable manifest is a step 1 violation in the report, exit 1."""
    out = tmp_path / "bundle"
    assert cmd.at(ledger, "export", str(out)).exit_code == 0
    (out / MANIFEST).write_text('{"format": "memroot-bundle", "version": 99}')
    result = cmd.run("audit", str(out), "--no-update", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert (
        report["steps"]["1"]["violations"] == 1 and "version 99" in report["findings"][0]["message"]
    )
