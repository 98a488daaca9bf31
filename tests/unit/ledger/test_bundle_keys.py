"""Signing keys: wrong, unknown, missing and too-open key files, and key rotation."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger import keys
from memroot.ledger.bundle.audit import audit_bundle
from memroot.ledger.bundle.export import export_bundle
from memroot.ledger.entries import _library_op
from memroot.ledger.errors import KeyFileError
from memroot.ledger.ledger import Ledger, default_key_path
from memroot.ledger.merkle import tree_root
from memroot.ledger.note import Checkpoint, Verifier, open_checkpoint, sign_checkpoint, vkey_of
from memroot.ledger.signing import Ed25519Signer
from memroot.ledger.verify import AuditReport, audit

ORIGIN = "example.org/memroot-test"


def steps(report: AuditReport) -> set[int]:
    return {f.step for f in report.findings}


@pytest.fixture
def ledger_path(tmp_path: Path, make_ledger: Any) -> Path:
    return make_ledger(tmp_path, 30, origin=ORIGIN)


# -- key files --------------------------------------------------------------------------------


def test_missing_key_file_is_refused_before_signing(ledger_path: Path) -> None:
    """Without its key file the ledger still reads, but signing fails with KeyFileError."""
    default_key_path(ledger_path).unlink()
    with Ledger.open(ledger_path) as ledger:
        assert ledger.size() == 31
        before = ledger.checkpoints()
        ledger.append_batch([])
        with pytest.raises(KeyFileError, match="does not exist"):
            ledger.checkpoint()
        assert ledger.checkpoints() == before


def test_key_file_readable_by_others_is_refused(ledger_path: Path) -> None:
    """A key file with group/other bits is refused with a message telling to chmod 600."""
    key = default_key_path(ledger_path)
    os.chmod(key, 0o644)
    with Ledger.open(ledger_path) as ledger, pytest.raises(KeyFileError, match="chmod 600"):
        ledger.checkpoint()
    os.chmod(key, 0o600)
    with Ledger.open(ledger_path) as ledger:
        ledger.checkpoint()


def test_wrong_key_file_is_refused(tmp_path: Path, ledger_path: Path) -> None:
    """Another ledger's key cannot sign this ledger's checkpoints."""
    other = Ed25519Signer.generate(ORIGIN)
    wrong = tmp_path / "wrong.key"
    other.save(wrong)
    with Ledger.open(ledger_path, key_path=wrong) as ledger:
        with pytest.raises(KeyFileError, match="not a key of this ledger"):
            ledger.checkpoint()
        before = len(ledger.checkpoints())
    with Ledger.open(ledger_path) as ledger:
        assert len(ledger.checkpoints()) == before


def test_unknown_key_does_not_verify(ledger_path: Path) -> None:
    """A verifier given only an unrelated key fails every checkpoint (step 6)."""
    unknown = vkey_of(Ed25519Signer.generate(ORIGIN))
    with Ledger.open(ledger_path) as ledger:
        report = audit(ledger.store, origin=ORIGIN, vkeys=[unknown])
    assert steps(report) == {6}
    assert all(
        "no signature by a trusted key" in f.message or "unsigned tail" in f.message
        for f in report.findings
    )


# -- rotation ---------------------------------------------------------------------------------


def test_rotation_new_key_signs_later_checkpoints_old_ones_still_verify(
    ledger_path: Path, inputs: Any
) -> None:
    """After a rotation, new checkpoints carry the new key; old ones open with the old key."""
    with Ledger.open(ledger_path) as ledger:
        old_vkey = ledger.vkey()
        old_notes = ledger.checkpoints()
        r = keys.rotate_key(ledger)
        assert ledger.entry(r.seq).type == "KEY_ROTATE"
        payload = ledger.entry(r.seq).body["payload"]
        assert payload == {
            "new_vkey": r.new_vkey,
            "old_vkey": old_vkey,
            "branches": {"main": r.seq},
        }
        ledger.append_batch(inputs.mixed(5, seed=4))
        newest = ledger.checkpoint()
        assert ledger.vkey() == r.new_vkey != old_vkey
        old_v, new_v = Verifier.from_vkey(old_vkey), Verifier.from_vkey(r.new_vkey)
        for note in old_notes:
            open_checkpoint(note, [old_v])
        open_checkpoint(ledger.latest_checkpoint() or "", [new_v])
        sign_off = next(n for n in ledger.checkpoints() if n not in old_notes)
        assert open_checkpoint(sign_off, [old_v]).checkpoint.size == r.checkpoint_size == r.seq + 1
        assert newest.checkpoint.size == ledger.size()
        # A verifier that trusted only the old key learns the new one from the ledger.
        report = audit(ledger.store, origin=ORIGIN, vkeys=[old_vkey])
        assert report.ok, [str(f) for f in report.findings]
        assert any("signing key rotated" in n.message for n in report.notes)
    assert r.retired_path.exists() and os.stat(r.key_path).st_mode & 0o777 == 0o600
    assert Ed25519Signer.load(r.retired_path).key_id.hex() in old_vkey


def test_rotation_survives_a_crash_before_the_key_swap(
    ledger_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rotation cut off after its sign-off completes on the next run, with no second entry."""
    with Ledger.open(ledger_path) as ledger:
        real_replace = os.replace

        def crash(*args: Any) -> None:
            raise OSError(5, "simulated crash")

        monkeypatch.setattr(keys.os, "replace", crash)
        with pytest.raises(KeyFileError):
            keys.rotate_key(ledger)
        monkeypatch.setattr(keys.os, "replace", real_replace)
        size = ledger.size()
        ledger.reload_key()
        r = keys.rotate_key(ledger)
        assert ledger.size() == size and r.seq == size - 1
        assert ledger.vkey() == r.new_vkey
        assert sum(1 for e in ledger.entries() if e.type == "KEY_ROTATE") == 1


def test_retired_key_cannot_sign_a_newer_tree(ledger_path: Path, inputs: Any) -> None:
    """A checkpoint signed by the rotated-out key beyond its sign-off is a step 6 violation."""
    with Ledger.open(ledger_path) as ledger:
        old_vkey = ledger.vkey()
        r = keys.rotate_key(ledger)
        ledger.append_batch(inputs.mixed(3, seed=5))
        old = Ed25519Signer.load(r.retired_path)
        no = ledger.branch_row().no
        size = ledger.size()
        root = tree_root(size, lambda ids: ledger.store.read_nodes(no, ids))
        forged = sign_checkpoint(Checkpoint(ORIGIN, size, root), [old])
        with ledger.store.write():
            # The seal signed this size with the new key; the forger puts the old key's there.
            ledger.store.delete_checkpoint(no, size)
            ledger.store.insert_checkpoint(no, size, root, forged)
        report = audit(ledger.store, origin=ORIGIN, vkeys=[old_vkey])
    assert steps(report) == {6}
    assert report.findings[0].seq == size - 1


def test_rotation_to_a_key_the_old_key_never_signed_off(ledger_path: Path) -> None:
    """A KEY_ROTATE signed off only by the key it introduces teaches the verifier nothing."""
    from memroot.ledger.vocab import OpType

    with Ledger.open(ledger_path) as ledger:
        old_vkey = ledger.vkey()
        mallory = Ed25519Signer.generate(ORIGIN)
        # A writer that bypasses the reserved-op check (the public API refuses KEY_ROTATE).
        rotate = ledger.system_op(
            OpType.KEY_ROTATE, {"new_vkey": vkey_of(mallory), "old_vkey": old_vkey}
        )
        a = ledger.append(_library_op(rotate))
        no = ledger.branch_row().no
        size = ledger.size()
        root = tree_root(size, lambda ids: ledger.store.read_nodes(no, ids))
        with ledger.store.write():
            # The append's seal (old key) is replaced by one only the new key signed.
            note = sign_checkpoint(Checkpoint(ORIGIN, size, root), [mallory])
            ledger.store.delete_checkpoint(no, size)
            ledger.store.insert_checkpoint(no, size, root, note)
        report = audit(ledger.store, origin=ORIGIN, vkeys=[old_vkey])
    assert steps(report) == {6}
    assert report.findings[0].seq == size - 1
    assert any(n.seq == a.seq and "not trusted" in n.message for n in report.notes)


def test_a_bundle_carries_the_rotation(tmp_path: Path, ledger_path: Path, inputs: Any) -> None:
    """An auditor holding only the original key verifies a bundle exported after rotation."""
    with Ledger.open(ledger_path) as ledger:
        old_vkey = ledger.vkey()
        keys.rotate_key(ledger)
        ledger.append_batch(inputs.mixed(4, seed=6))
        export_bundle(ledger, tmp_path / "b")
    report = audit_bundle(tmp_path / "b", vkeys=[old_vkey], update_trusted=False)
    assert report.ok, [str(f) for f in report.findings]
