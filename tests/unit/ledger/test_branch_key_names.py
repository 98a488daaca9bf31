"""Branch checkpoints are signed under a key named for their own origin (FORMAT.md 5)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.entries import OpInput
from memroot.ledger.errors import ProofError
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import (
    Checkpoint,
    Verifier,
    branch_of_origin,
    open_checkpoint,
    sign_checkpoint,
    split_note,
    vkey_of,
)
from memroot.ledger.signing import Ed25519Signer, key_hash

SEED = bytes(range(1, 33))
LOG = "example.org/memroot/test"
KEY = Ed25519Signer.from_seed(LOG, SEED)
ROOT = b"\x11" * 32


def test_a_branch_checkpoint_is_signed_under_its_origin() -> None:
    """The signature line names O/branch/B with that name's key ID, over the same key."""
    origin = f"{LOG}/branch/sim-1"
    note = sign_checkpoint(Checkpoint(origin, 3, ROOT), [KEY])
    _, lines = split_note(note)
    assert [(n, k) for n, k, _ in lines] == [(origin, key_hash(origin, KEY.public_key))]
    # A plain signed-note client given only the branch's vkey verifies it.
    branch_vkey = Verifier.from_vkey(vkey_of(KEY)).for_origin(origin)
    assert branch_vkey.name == origin
    assert open_checkpoint(note, [branch_vkey], origin=origin).checkpoint.size == 3
    # memroot's verifier, trusting the log's key, accepts it too.
    assert open_checkpoint(note, [Verifier.from_vkey(vkey_of(KEY))]).signer_names == (origin,)


def test_the_main_checkpoint_keeps_the_log_key_name() -> None:
    """A checkpoint of the log itself is signed under the log's name, as before."""
    note = sign_checkpoint(Checkpoint(LOG, 3, ROOT), [KEY])
    assert split_note(note)[1][0][0] == LOG


def test_a_branch_signature_cannot_be_moved_to_another_origin() -> None:
    """The origin line is signed: the branch-named signature does not cover another branch."""
    note = sign_checkpoint(Checkpoint(f"{LOG}/branch/a", 3, ROOT), [KEY])
    moved = note.replace(f"{LOG}/branch/a\n", f"{LOG}/branch/b\n", 1)
    with pytest.raises(ProofError):
        open_checkpoint(moved, [Verifier.from_vkey(vkey_of(KEY))])


def test_a_pre_version_branch_note_signed_under_the_log_name_still_opens() -> None:
    """Branch checkpoints signed before the change (key name O) keep verifying."""
    origin = f"{LOG}/branch/old"
    text = Checkpoint(origin, 2, ROOT).body()
    sig = KEY.sign(text.encode())
    note = f"{text}\n\u2014 {LOG} {base64.b64encode(KEY.key_id + sig).decode()}\n"
    assert open_checkpoint(note, [Verifier.from_vkey(vkey_of(KEY))]).checkpoint.origin == origin


@pytest.mark.parametrize(
    "origin",
    [f"{LOG}x/branch/b", f"{LOG}/branch/", f"{LOG}/branch/a/b", f"{LOG}/branches/b", "other"],
)
def test_only_a_branch_origin_of_the_log_renames(origin: str) -> None:
    """Names that are not ``O/branch/<valid branch>`` are signed under the signer's name."""
    assert branch_of_origin(LOG, origin) is None
    note = sign_checkpoint(Checkpoint(origin, 1, ROOT), [KEY])
    assert split_note(note)[1][0][0] == LOG
    with pytest.raises(ValueError):
        Verifier.from_vkey(vkey_of(KEY)).for_origin(origin)


def test_a_ledger_fork_signs_with_the_branch_name(tmp_path: Path, inputs: Any) -> None:
    """A real ledger's branch checkpoint carries the branch-origin key name and verifies."""
    with Ledger.init(tmp_path / "l.db", origin=LOG) as ledger:
        ledger.append_batch(inputs.mixed(3, seed=1))
        create = OpInput(
            op_type="BRANCH_CREATE",
            actor_id="a",
            actor_type="AI_AGENT",
            namespace_id="ns",
            policy_version="p/1",
            payload={"branch_id": "sim-1", "branch_type": "SIMULATION", "purpose": "what if"},
        )
        ledger.fork(create, genesis={"branch_type": "SIMULATION"})
        sc = ledger.checkpoint("sim-1")
        main = ledger.checkpoint()
    assert sc.checkpoint.origin == f"{LOG}/branch/sim-1"
    assert split_note(sc.note)[1][0][0] == f"{LOG}/branch/sim-1"
    assert split_note(main.note)[1][0][0] == LOG
