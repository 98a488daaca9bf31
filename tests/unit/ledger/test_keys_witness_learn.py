"""The witness's key-set learning (``POST /add-keys``, docs/FORMAT.md 11.5), without HTTP.

The ledger's submitter builds the request (``witness._show_keys``'s body); the witness's
logic (``Witness.add_keys`` / ``add_checkpoint``) answers it. Attacks: a rotation appended by
a writer key holder (no sign-off by the root key), and entries that do not extend what the
witness learned before.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from memroot.ledger import keys
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, _library_op
from memroot.ledger.keyset import KEY_ENTRIES_META, parse_key_entries
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import vkey_of
from memroot.ledger.signing import Ed25519Signer
from memroot.ledger.transparency.cosignature import render_add_checkpoint
from memroot.ledger.transparency.witness_keys import render_add_keys
from memroot.ledger.transparency.witness_server import Witness, init_witness
from memroot.ledger.vocab import OpType

ORIGIN = "example.org/witness-keys"


def _request(ledger: Ledger) -> bytes:
    """The /add-keys body memroot's submitter sends for ``ledger``'s current head."""
    store = ledger.store
    main = store.branch(CANONICAL_BRANCH)
    stored = store.checkpoints(main.no)
    size, _, note = stored[-1]
    entries: list[Any] = []
    for seq in parse_key_entries(store.meta(KEY_ENTRIES_META)) or []:
        data = bytes(store.entry_row(main.no, seq).data)
        signoff = None
        if Entry.from_bytes(data).type == OpType.KEY_ROTATE.value:
            off = min((s, n) for s, _, n in stored if s > seq)
            signoff = (off[1], ledger.inclusion_proof(seq, off[0]))
        entries.append((seq, data, ledger.inclusion_proof(seq, size), signoff))
    return render_add_keys(ORIGIN, note, entries)


def _head_request(ledger: Ledger) -> bytes:
    head = ledger.store.latest_checkpoint(ledger.store.branch(CANONICAL_BRANCH).no)
    assert head is not None
    return render_add_checkpoint(0, [], head[2])


def _setup(tmp_path: Path, make_ledger: Any) -> tuple[Path, Witness, Path]:
    path = make_ledger(tmp_path, 3, origin=ORIGIN)
    wdir = tmp_path / "w"
    init_witness(wdir, "witness.example.org/w")
    with Ledger.open(path) as ledger:
        root = ledger.vkey()
    w = Witness(wdir)
    w.add_log(root)
    return path, w, tmp_path / "writer.key"


def test_witness_learns_writer_keys_and_cosigns_their_checkpoints(
    tmp_path: Path, make_ledger: Any, inputs: Any
) -> None:
    """Without the key entries a writer's checkpoint is 403; with them it is cosigned."""
    path, w, writer = _setup(tmp_path, make_ledger)
    with Ledger.open(path) as ledger:
        keys.add_key(ledger, "host-b", writer)
    with Ledger.open(path, key_path=writer) as host:
        host.append_batch(inputs.mixed(2, seed=1))
        assert w.add_checkpoint(_head_request(host)).status == 403
        answer = w.add_keys(_request(host))
        assert answer.status == 200, answer.body
        assert w.add_checkpoint(_head_request(host)).status == 200
    assert (w.directory / "keys.json").exists()
    assert Witness(w.directory).learned[ORIGIN].keys.writers["host-b"].vkey  # kept on disk


def test_rotation_by_a_writer_without_the_roots_signoff_is_refused(
    tmp_path: Path, make_ledger: Any
) -> None:
    """forged_rotation_by_writer: a KEY_ROTATE signed off by a writer key teaches nothing."""
    path, w, writer = _setup(tmp_path, make_ledger)
    with Ledger.open(path) as ledger:
        keys.add_key(ledger, "host-b", writer)
    with Ledger.open(path, key_path=writer, strict=False, hooks=()) as host:
        mallory = Ed25519Signer.generate(ORIGIN)
        signer = host.signer
        host._require_key = lambda *a, **k: signer  # type: ignore[method-assign]
        rotate = host.system_op(
            OpType.KEY_ROTATE, {"new_vkey": vkey_of(mallory), "old_vkey": host.current_vkey()}
        )
        host.append(_library_op(rotate))
        answer = w.add_keys(_request(host))
    assert answer.status == 403 and b"sign-off" in answer.body
    assert ORIGIN not in w.learned


def test_entries_that_do_not_extend_what_was_learned_are_refused(
    tmp_path: Path, make_ledger: Any
) -> None:
    """Another history's key entries (a different KEY_ADD at the same seq) answer 409."""
    path, w, writer = _setup(tmp_path, make_ledger)
    copy = tmp_path / "copy.ledger"
    shutil.copy2(path, copy)
    shutil.copy2(f"{path}.key", f"{copy}.key")
    with Ledger.open(path) as ledger:
        keys.add_key(ledger, "host-b", writer)
        assert w.add_keys(_request(ledger)).status == 200
    with Ledger.open(copy) as other:
        keys.add_key(other, "host-b", tmp_path / "other.key")
        assert w.add_keys(_request(other)).status == 409
