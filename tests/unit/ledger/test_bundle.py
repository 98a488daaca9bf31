"""The auditor's bundle: export, reader, offline audit, attacks on a bundle, and import."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger import encoding
from memroot.ledger.bundle.audit import audit_bundle, verify_bundle
from memroot.ledger.bundle.export import (
    INDEX_EVERY,
    MANIFEST,
    BundleReader,
    branch_files,
    export_bundle,
)
from memroot.ledger.bundle.importing import import_bundle
from memroot.ledger.entries import Entry
from memroot.ledger.errors import DecodeError, IntegrityError, RefusedError, StorageError
from memroot.ledger.hashing import sha256
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import Checkpoint, sign_checkpoint, vkey_of
from memroot.ledger.signing import Ed25519Signer
from memroot.ledger.trust import TrustedState
from memroot.ledger.verify import AuditReport, audit

ORIGIN = "example.org/memroot-test"
ENTRIES = branch_files("main")["entries"]
CONTENT = branch_files("main")["content"]
CHECKPOINTS = branch_files("main")["checkpoints"]


# -- helpers ----------------------------------------------------------------------------------


def frames(path: Path) -> list[bytes]:
    """Read every frame of a bundle file without any check (what an attacker sees)."""
    data = path.read_bytes()
    out, i = [], 0
    while i < len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        out.append(data[i + 4 : i + 4 + n])
        i += 4 + n
    return out


def write_frames(bundle: Path, rel: str, payloads: list[bytes]) -> None:
    """Rewrite a bundle file and fix its manifest record, as a careful forger would."""
    raw = b"".join(struct.pack(">I", len(p)) + p for p in payloads)
    (bundle / rel).write_bytes(raw)
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["files"][rel] = {
        "records": len(payloads),
        "bytes": len(raw),
        "sha256": sha256(raw).hex(),
    }
    (bundle / MANIFEST).write_text(json.dumps(manifest))


def edit_manifest(bundle: Path, change: Callable[[dict[str, Any]], None]) -> None:
    manifest = json.loads((bundle / MANIFEST).read_text())
    change(manifest)
    (bundle / MANIFEST).write_text(json.dumps(manifest))


def content_seq(payload: bytes) -> int:
    """The entry a content frame belongs to (its first 8 bytes, big-endian)."""
    return int.from_bytes(payload[:8], "big")


def steps(report: AuditReport) -> set[int]:
    return {f.step for f in report.findings}


@pytest.fixture
def ledger_path(tmp_path: Path, make_ledger: Any, inputs: Any) -> Path:
    """A ledger of 600 entries (more than two index strides) with a tombstoned event."""
    path = make_ledger(tmp_path, 600, origin=ORIGIN, checkpoint=False)
    with Ledger.open(path) as ledger:
        victim = next(e for e in ledger.entries(1) if e.kind.value == "event")
        ledger.append(inputs.tombstone(str(victim.body["id"])))
        ledger.checkpoint()
    return path


@pytest.fixture
def vkey(ledger_path: Path) -> str:
    with Ledger.open(ledger_path) as ledger:
        return ledger.vkey()


@pytest.fixture
def bundle(tmp_path: Path, ledger_path: Path) -> Path:
    out = tmp_path / "bundle"
    with Ledger.open(ledger_path) as ledger:
        export_bundle(ledger, out)
    return out


# -- export and read back ---------------------------------------------------------------------


def test_export_then_audit_passes_with_the_ledger_key(bundle: Path, vkey: str) -> None:
    """A fresh bundle verifies offline with the ledger's vkey, covering every entry."""
    report = audit_bundle(bundle, vkeys=[vkey], update_trusted=False)
    assert report.ok, [str(f) for f in report.findings]
    assert report.entries == 602
    assert report.erased == 1
    assert {1, 2, 3, 4, 5, 6, 10} <= report.steps_checked


def test_bundle_rows_are_the_stored_rows(bundle: Path, ledger_path: Path) -> None:
    """Entry bytes, content, salts and erasures read from the bundle equal the store's rows."""
    reader = BundleReader(bundle)
    with Ledger.open(ledger_path) as ledger:
        stored = list(ledger.store.iter_entry_rows(ledger.branch_row().no))
        got = list(reader.iter_entry_rows(0))
        assert [r.data for r in got] == [bytes(r.data) for r in stored]
        assert [r.content for r in got] == [r.content and bytes(r.content) for r in stored]
        assert [r.salt for r in got] == [r.salt and bytes(r.salt) for r in stored]
        assert [r.erased_by for r in got] == [r.erased_by for r in stored]
        assert reader.checkpoints(0) == ledger.store.checkpoints(ledger.branch_row().no)
        info = reader.manifest.branches[0]
        assert (info.size, info.head, info.root) == (
            ledger.size(),
            ledger.branch_row().head,
            ledger.root(),
        )


def test_random_access_through_the_offset_index(bundle: Path, ledger_path: Path) -> None:
    """entry_row finds any entry, on and around index strides, with its exact bytes."""
    reader = BundleReader(bundle)
    with Ledger.open(ledger_path) as ledger:
        for seq in (0, 1, INDEX_EVERY - 1, INDEX_EVERY, INDEX_EVERY + 1, 2 * INDEX_EVERY, 601):
            assert reader.entry_row(0, seq).data == ledger.entry(seq).raw


def test_export_signs_a_checkpoint_covering_everything(tmp_path: Path, make_ledger: Any) -> None:
    """Entries appended after the last checkpoint are covered by one the export signs."""
    path = make_ledger(tmp_path, 20, origin=ORIGIN, checkpoint=False)
    out = tmp_path / "b"
    with Ledger.open(path) as ledger:
        manifest = export_bundle(ledger, out)
        assert BundleReader(out).checkpoints(0)[-1][0] == ledger.size() == manifest.branches[0].size


def test_export_refuses_an_existing_directory(bundle: Path, ledger_path: Path) -> None:
    """Exporting onto an existing path is refused and leaves it untouched."""
    before = (bundle / MANIFEST).read_bytes()
    with Ledger.open(ledger_path) as ledger, pytest.raises(RefusedError, match="already exists"):
        export_bundle(ledger, bundle)
    assert (bundle / MANIFEST).read_bytes() == before


def test_failed_export_leaves_nothing(tmp_path: Path, ledger_path: Path) -> None:
    """A section that fails mid-export leaves neither the bundle nor a temporary directory."""

    class Broken:
        name = "broken"

        def records(self, ledger: Ledger) -> Any:
            yield {"ok": 1}
            raise StorageError("the layer's table is gone")

    with Ledger.open(ledger_path) as ledger, pytest.raises(StorageError):
        export_bundle(ledger, tmp_path / "out", sections=[Broken()])
    assert sorted(p.name for p in tmp_path.iterdir() if "out" in p.name) == []


def test_sections_of_layers_above_round_trip(tmp_path: Path, ledger_path: Path) -> None:
    """A layer's records written as a named section come back in order through the reader."""

    class Roots:
        name = "memory_roots"

        def records(self, ledger: Ledger) -> Any:
            for i in range(300):
                yield {"seq": i, "root": bytes([i % 256]) * 32}

    out = tmp_path / "b"
    with Ledger.open(ledger_path) as ledger:
        export_bundle(ledger, out, sections=[Roots()])
    reader = BundleReader(out)
    assert reader.section_names() == ("memory_roots",)
    assert list(reader.section("memory_roots")) == [
        {"seq": i, "root": bytes([i % 256]) * 32} for i in range(300)
    ]


def test_bad_section_names_are_refused(tmp_path: Path, ledger_path: Path) -> None:
    """Section names that could escape the bundle directory are refused."""

    class Evil:
        name = "../escape"

        def records(self, ledger: Ledger) -> Any:
            return []

    with Ledger.open(ledger_path) as ledger, pytest.raises(RefusedError, match="section name"):
        export_bundle(ledger, tmp_path / "b", sections=[Evil()])


# -- attacks on a bundle ----------------------------------------------------------------------


def test_bundle_file_damaged_is_a_step_1_finding(bundle: Path, vkey: str) -> None:
    """A flipped byte in an entries file (manifest untouched) is named as a damaged file."""
    path = bundle / ENTRIES
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 1
    path.write_bytes(bytes(raw))
    report = audit_bundle(bundle, vkeys=[vkey], update_trusted=False)
    assert 1 in steps(report)
    assert any(ENTRIES in f.message for f in report.findings)


def test_bundle_entry_edited_is_caught_by_the_chain_and_the_signed_root(
    bundle: Path, vkey: str
) -> None:
    """An entry re-encoded with new content (manifest fixed) breaks prev links and roots."""
    payloads = frames(bundle / ENTRIES)
    e = Entry.from_bytes(payloads[100])
    body = {**e.body, "actor_id": "mallory"}
    payloads[100] = encoding.encode(
        [e.v, e.prev, e.seq, e.branch, e.ts, e.kind.value, e.type, body]
    )
    write_frames(bundle, ENTRIES, payloads)
    report = audit_bundle(bundle, vkeys=[vkey], update_trusted=False)
    assert {3, 5} <= steps(report)
    assert any(f.step == 3 and f.seq == 101 for f in report.findings)


def test_bundle_content_edited_is_caught_by_the_commitment(bundle: Path, vkey: str) -> None:
    """Changed event content (manifest fixed) fails its commitment at that entry (step 4)."""
    payloads = frames(bundle / CONTENT)
    payloads[10] += b" (edited)"
    write_frames(bundle, CONTENT, payloads)
    report = audit_bundle(bundle, vkeys=[vkey], update_trusted=False)
    assert steps(report) == {4}
    assert report.findings[0].seq == content_seq(payloads[10])


def test_bundle_truncated_below_a_checkpoint(bundle: Path, vkey: str) -> None:
    """Dropping the last entries (manifest and head fixed) contradicts the signed size."""
    payloads = frames(bundle / ENTRIES)[:500]
    write_frames(bundle, ENTRIES, payloads)
    contents = [p for p in frames(bundle / CONTENT) if content_seq(p) < 500]
    write_frames(bundle, CONTENT, contents)

    def fix(m: dict[str, Any]) -> None:
        m["branches"][0]["size"] = 500
        m["branches"][0]["head"] = Entry.from_bytes(payloads[-1]).hash.hex()

    edit_manifest(bundle, fix)
    report = audit_bundle(bundle, vkeys=[vkey], update_trusted=False)
    assert 5 in steps(report)
    assert any("truncated" in f.message for f in report.findings)


def test_bundle_checkpoint_forged_with_another_key(bundle: Path, vkey: str) -> None:
    """A checkpoint signed by a key the auditor does not trust is a step 6 violation."""
    mallory = Ed25519Signer.generate(ORIGIN)
    payloads = frames(bundle / CHECKPOINTS)
    rec = encoding.decode(payloads[-1])
    rec["note"] = sign_checkpoint(Checkpoint(ORIGIN, rec["size"], rec["root"]), [mallory])
    payloads[-1] = encoding.encode(rec)
    write_frames(bundle, CHECKPOINTS, payloads)
    report = audit_bundle(bundle, vkeys=[vkey], update_trusted=False)
    assert steps(report) == {6}


def test_wrong_vkey_fails_step_6(bundle: Path) -> None:
    """Auditing with an unrelated key fails every checkpoint signature."""
    other = vkey_of(Ed25519Signer.generate(ORIGIN))
    report = audit_bundle(bundle, vkeys=[other], update_trusted=False)
    assert steps(report) == {6}
    with pytest.raises(IntegrityError) as e:
        verify_bundle(bundle, vkeys=[other], update_trusted=False)
    assert e.value.step == 6


def test_manifest_missing_or_garbage(bundle: Path, vkey: str) -> None:
    """A bundle without a readable manifest is reported, never raised."""
    (bundle / MANIFEST).write_text("{not json")
    report = audit_bundle(bundle, vkeys=[vkey], update_trusted=False)
    assert steps(report) == {1} and "manifest" in report.findings[0].message
    (bundle / MANIFEST).unlink()
    assert steps(audit_bundle(bundle, vkeys=[vkey], update_trusted=False)) == {1}


def test_bundle_rollback_against_the_trusted_state(
    tmp_path: Path, ledger_path: Path, vkey: str, inputs: Any
) -> None:
    """An older bundle audited after a newer one was trusted is a rollback (step 10)."""
    old = tmp_path / "old"
    with Ledger.open(ledger_path) as ledger:
        export_bundle(ledger, old)
        ledger.append_batch(inputs.mixed(5, seed=9))
        export_bundle(ledger, tmp_path / "new")
    trusted = TrustedState(tmp_path / "trusted.json")
    assert audit_bundle(tmp_path / "new", vkeys=[vkey], trusted=trusted).ok
    report = audit_bundle(old, vkeys=[vkey], trusted=trusted, update_trusted=False)
    assert steps(report) == {10}


def test_manifest_file_list_must_match(bundle: Path) -> None:
    """A manifest that lists an extra file (e.g. a path escaping the bundle) is refused."""
    edit_manifest(
        bundle,
        lambda m: m["files"].update(
            {"../../etc/passwd": {"records": 0, "bytes": 0, "sha256": "0" * 64}}
        ),
    )
    with pytest.raises(DecodeError, match="do not match"):
        BundleReader(bundle)


# -- offline: only the standard library, cbor2 and cryptography --------------------------------


def test_offline_audit_without_apsw_or_blake3(bundle: Path, vkey: str) -> None:
    """With apsw and blake3 unavailable the bundle still audits, step 4 included."""
    code = (
        "import sys, json\n"
        "sys.modules['apsw'] = None; sys.modules['blake3'] = None; sys.modules['click'] = None\n"
        "from pathlib import Path\n"
        "from memroot.ledger.bundle.audit import audit_bundle\n"
        f"r = audit_bundle(Path({str(bundle)!r}), vkeys=[{vkey!r}], update_trusted=False)\n"
        "print(json.dumps(r.to_json()))\n"
        "assert 'apsw' not in sys.modules or sys.modules['apsw'] is None\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    report = json.loads(out.stdout)
    assert report["ok"] and report["steps"]["4"]["checked"] and report["erased"] == 1
    assert any("pure-Python BLAKE3" in n["message"] for n in report["notes"])


# -- import -----------------------------------------------------------------------------------


def test_import_rebuilds_identical_roots_and_checkpoints(
    tmp_path: Path, bundle: Path, ledger_path: Path, vkey: str
) -> None:
    """The imported ledger has the same entries, roots, proofs and checkpoints, and verifies."""
    done = import_bundle(bundle, tmp_path / "copy.ledger", vkeys=[vkey])
    assert done.entries == 602
    with Ledger.open(ledger_path) as a, Ledger.open(tmp_path / "copy.ledger") as b:
        assert b.size() == a.size() and b.root() == a.root()
        assert b.root(300) == a.root(300)
        assert b.checkpoints() == a.checkpoints()
        assert b.inclusion_proof(123) == a.inclusion_proof(123)
        assert b.consistency_proof(10) == a.consistency_proof(10)
        assert [b.content(s) for s in range(a.size())] == [a.content(s) for s in range(a.size())]
        assert audit(b.store, origin=ORIGIN, vkeys=[vkey]).ok


def test_import_refuses_a_tampered_bundle_and_writes_nothing(
    tmp_path: Path, bundle: Path, vkey: str
) -> None:
    """A bundle that fails any step is not imported; no ledger file appears."""
    payloads = frames(bundle / CONTENT)
    i = next(i for i, p in enumerate(payloads) if p[8] == 0x01)  # a present (not erased) one
    payloads[i] = payloads[i][:42] + b"forged"
    write_frames(bundle, CONTENT, payloads)
    with pytest.raises(IntegrityError, match="nothing was imported") as e:
        import_bundle(bundle, tmp_path / "copy.ledger", vkeys=[vkey])
    assert e.value.step == 4
    assert not (tmp_path / "copy.ledger").exists()


def test_import_refuses_an_existing_ledger(tmp_path: Path, bundle: Path, ledger_path: Path) -> None:
    """Importing onto an existing file is refused."""
    before = ledger_path.read_bytes()
    with pytest.raises(StorageError, match="already exists"):
        import_bundle(bundle, ledger_path)
    assert ledger_path.read_bytes() == before


def test_bundle_is_a_copy_not_a_view(
    tmp_path: Path, bundle: Path, ledger_path: Path, vkey: str
) -> None:
    """Deleting the ledger after export leaves an auditable bundle."""
    shutil.copytree(bundle, tmp_path / "copy")
    for p in ledger_path.parent.glob(ledger_path.name + "*"):
        os.unlink(p)
    assert audit_bundle(tmp_path / "copy", vkeys=[vkey], update_trusted=False).ok


# -- branches -----------------------------------------------------------------------------------


def _create(name: str) -> Any:
    from memroot.ledger.entries import OpInput

    return OpInput(
        op_type="BRANCH_CREATE",
        actor_id="a",
        actor_type="AI_AGENT",
        namespace_id="ns",
        policy_version="p/1",
        payload={"branch_id": name, "branch_type": "SIMULATION", "purpose": "what if"},
    )


@pytest.fixture
def forked(tmp_path: Path, make_ledger: Any, inputs: Any) -> Path:
    """A ledger with a branch and a branch of the branch, each with its own checkpoints."""
    path = make_ledger(tmp_path, 40, origin=ORIGIN, name="forked.ledger")
    with Ledger.open(path, hooks=()) as ledger:
        ledger.fork(_create("sim-1"), genesis={"branch_type": "SIMULATION"})
        ledger.append_batch(inputs.mixed(300, seed=2), branch="sim-1")
        ledger.fork(_create("plan-2"), parent="sim-1", genesis={"branch_type": "PLANNING"})
        ledger.append_batch(inputs.mixed(7, seed=3), branch="plan-2")
        ledger.append_batch(inputs.mixed(5, seed=4))
    return path


def test_branches_travel_in_the_bundle_and_back(tmp_path: Path, forked: Path) -> None:
    """Every branch is exported, audited (anchors, branch checkpoints) and imported identically."""
    out = tmp_path / "b"
    with Ledger.open(forked, hooks=()) as ledger:
        manifest = export_bundle(ledger, out)
        vkey = ledger.vkey()
        names = [b.name for b in ledger.store.branches()]
    assert [b.name for b in manifest.branches] == names == ["main", "sim-1", "plan-2"]
    report = audit_bundle(out, vkeys=[vkey], update_trusted=False)
    assert report.ok, [str(f) for f in report.findings]
    assert report.branches == 3 and 7 in report.steps_checked
    import_bundle(out, tmp_path / "copy.ledger", vkeys=[vkey])
    with Ledger.open(forked, hooks=()) as a, Ledger.open(tmp_path / "copy.ledger", hooks=()) as b:
        for name in names:
            assert (b.size(name), b.root(branch=name)) == (a.size(name), a.root(branch=name))
            assert b.checkpoints(name) == a.checkpoints(name)
        assert audit(b.store, origin=ORIGIN, vkeys=[vkey]).ok


def test_branch_genesis_relinked_in_a_bundle_is_caught(tmp_path: Path, forked: Path) -> None:
    """A branch whose genesis no longer links to its BRANCH_CREATE fails step 7 (or 3)."""
    out = tmp_path / "b"
    with Ledger.open(forked, hooks=()) as ledger:
        export_bundle(ledger, out)
        vkey = ledger.vkey()
    rel = branch_files("sim-1")["entries"]
    payloads = frames(out / rel)
    g = Entry.from_bytes(payloads[0])
    payloads[0] = encoding.encode(
        [g.v, bytes(32), g.seq, g.branch, g.ts, g.kind.value, g.type, g.body]
    )
    write_frames(out, rel, payloads)
    report = audit_bundle(out, vkeys=[vkey], update_trusted=False)
    assert 7 in steps(report)
    assert any(f.branch == "sim-1" and f.seq == 0 for f in report.findings)


def test_bundle_file_replaced_by_a_fifo_is_refused_not_waited_on(bundle: Path, vkey: str) -> None:
    """A FIFO planted in a bundle is reported as not a regular file; the audit never blocks."""
    path = bundle / CONTENT
    path.unlink()
    os.mkfifo(path)
    report = audit_bundle(bundle, vkeys=[vkey], update_trusted=False)
    assert 1 in steps(report)
    assert any("not a regular file" in f.message for f in report.findings)
