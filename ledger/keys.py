"""Signing key rotation (SPEC 5: "the log identity is its origin, not its key, so keys can rotate").

``rotate_key`` replaces a ledger's signing key so that every verifier that trusted the old key
learns the new one from the ledger itself, and nobody else can slip a key in:

1. A new Ed25519 key (same key name, the origin) is written to ``<key>.new`` (mode 0600).
2. A ``KEY_ROTATE`` operation is appended with payload ``{new_vkey, old_vkey}``.
3. A checkpoint covering it is signed with the *old* key: the old key signs off the rotation.
4. The old key file is kept as ``<key>.<keyid>.retired`` and the new one takes its place.

Later checkpoints are signed by the new key; earlier ones still verify with the old key. The
verifier's rule (``memroot.ledger.verify``, step 6): a key named by a ``KEY_ROTATE`` on ``main`` is
trusted only if the first verified checkpoint covering that entry carries a valid signature by
the key it retires, itself trusted at that size; from then on the retired key is accepted only
for checkpoints no larger than that sign-off. A crash between the steps is finished by running
``rotate_key`` again: it finds ``<key>.new`` and the pending rotation and completes them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memroot.ledger.entries import _library_op
from memroot.ledger.errors import KeyFileError, RefusedError
from memroot.ledger.note import vkey_of
from memroot.ledger.signing import Ed25519Signer
from memroot.ledger.vocab import OpType

if TYPE_CHECKING:
    from memroot.ledger.ledger import Ledger

__all__ = ["ROTATED_VKEYS_META", "Rotation", "rotate_key"]

ROTATED_VKEYS_META = "rotated_vkeys"
"""Store meta key: JSON list of the vkeys introduced by KEY_ROTATE entries, oldest first."""


@dataclass(frozen=True, slots=True)
class Rotation:
    """What a key rotation did."""

    old_vkey: str
    new_vkey: str
    seq: int
    checkpoint_size: int
    key_path: Path
    retired_path: Path


def rotate_key(ledger: Ledger) -> Rotation:
    """Rotate the ledger's signing key (see the module docstring for the protocol).

    Raises:
        KeyFileError: if the current key file is missing, malformed or too open, or a new key
            file cannot be written.
        RefusedError: if a pending ``<key>.new`` file does not belong to this ledger.
        StorageError: if the ledger file cannot be written.
    """
    key_path = Path(ledger.key_path)
    pending_path = Path(f"{key_path}.new")
    old = ledger.signer
    old_vkey = vkey_of(old)
    rotated = _rotated(ledger)
    if pending_path.exists():
        new = Ed25519Signer.load(pending_path)
        if vkey_of(new) not in rotated:
            new_vkey = vkey_of(new)
            raise RefusedError(
                f"{pending_path} holds key {new_vkey}, which no KEY_ROTATE of this ledger "
                "names; remove it if it is stale, then rotate again"
            )
    else:
        new = Ed25519Signer.generate(old.name)
        new.save(pending_path)
    new_vkey = vkey_of(new)
    store = ledger.store
    if new_vkey in rotated:
        seq = _rotation_seq(ledger, new_vkey)
    else:
        with ledger.write():
            rotate = ledger.system_op(
                OpType.KEY_ROTATE, {"new_vkey": new_vkey, "old_vkey": old_vkey}
            )
            seq = ledger.append(_library_op(rotate)).seq
            store.set_meta(ROTATED_VKEYS_META, json.dumps([*rotated, new_vkey]))
    # The old key signs a checkpoint covering the rotation (a no-op if one already does).
    size = ledger.checkpoint().checkpoint.size
    retired = Path(f"{key_path}.{old.key_id.hex()}.retired")
    try:
        if not retired.exists():
            os.link(key_path, retired)
        os.replace(pending_path, key_path)
        fd = os.open(key_path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise KeyFileError(f"cannot install the new key file {key_path}: {e.strerror}") from e
    ledger.reload_key()
    return Rotation(old_vkey, new_vkey, seq, size, key_path, retired)


def _rotated(ledger: Ledger) -> list[str]:
    raw = ledger.store.meta(ROTATED_VKEYS_META)
    return [str(k) for k in json.loads(raw)] if isinstance(raw, str) else []


def _rotation_seq(ledger: Ledger, new_vkey: str) -> int:
    """Find the KEY_ROTATE entry naming ``new_vkey`` (a resumed rotation; scans back)."""
    for seq in range(ledger.size() - 1, 0, -1):
        e = ledger.entry(seq)
        if e.type == OpType.KEY_ROTATE and e.body.get("payload", {}).get("new_vkey") == new_vkey:
            return seq
    raise RefusedError(f"no KEY_ROTATE entry names {new_vkey}")  # pragma: no cover
