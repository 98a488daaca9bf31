"""Key operations: root rotation, writer keys added and revoked (docs/FORMAT.md 7.3, 7.5).

The genesis key is the ledger's root key. ``rotate_key`` replaces it so that every verifier
that trusted the old key learns the new one from the ledger itself, and nobody else can slip
a key in:

1. A new Ed25519 key (same key name, the origin) is written to ``<key>.new`` (mode 0600).
2. A ``KEY_ROTATE`` operation is appended with payload ``{new_vkey, old_vkey, branches}``.
3. A checkpoint covering it is signed with the *old* key: the old key signs off the rotation.
4. The old key file is kept as ``<key>.<keyid>.retired`` and the new one takes its place.

``add_key`` authorizes a writer key (a new key file for one host) with a ``KEY_ADD`` entry
carrying the root key's signature over its authority statement (``memroot.ledger.keyset``);
``revoke_key`` withdraws one with a ``KEY_REVOKE`` signed the same way, recording every
branch's size so that the revoked key's branch checkpoints up to then keep verifying.

**Serialized by the store.** Each operation reads the key set first (``expect``), and again
inside its write transaction after locking every branch head (PostgreSQL ``SELECT ... FOR
UPDATE``; a ledger file's write lock): if a key entry landed meanwhile, it refuses
("the key set changed meanwhile", exit 3) and writes nothing. So two rotations or
revocations at once on two hosts leave exactly one. A crash between the steps of a rotation
is finished by running ``rotate_key`` again: it finds ``<key>.new`` and the pending rotation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memroot.ledger.entries import CANONICAL_BRANCH, _library_op
from memroot.ledger.errors import KeyFileError, RefusedError
from memroot.ledger.keyset import (
    KEY_ENTRIES_META,
    ROTATED_VKEYS_META,
    KeySet,
    WriterKey,
    authority_statement,
    sign_statement,
    valid_key_name,
)
from memroot.ledger.note import vkey_of
from memroot.ledger.signing import Ed25519Signer, Signer
from memroot.ledger.vocab import OpType

if TYPE_CHECKING:
    from memroot.ledger.ledger import Ledger

__all__ = [
    "KEY_ENTRIES_META",
    "ROTATED_VKEYS_META",
    "AddedKey",
    "KeyChangedError",
    "Rotation",
    "add_key",
    "list_keys",
    "revoke_key",
    "rotate_key",
]


class KeyChangedError(RefusedError):
    """Another key operation committed between this one's read and its write (exit 3)."""


@dataclass(frozen=True, slots=True)
class Rotation:
    """What a key rotation did."""

    old_vkey: str
    new_vkey: str
    seq: int
    checkpoint_size: int
    key_path: Path
    retired_path: Path


@dataclass(frozen=True, slots=True)
class AddedKey:
    """A writer key ``add_key`` authorized (or ``revoke_key`` withdrew)."""

    name: str
    vkey: str
    seq: int
    key_path: Path | None


def _root_signer(ledger: Ledger, what: str) -> Signer:
    """Return the loaded key, which must be the root key in force.

    Raises:
        KeyFileError: if it is a writer key, a retired or revoked key, or no key of the ledger.
    """
    signer = ledger.signer
    ks = ledger.key_set()
    state, seq = ks.status(vkey_of(signer))
    if state != "root":
        where = "" if seq is None else f" (entry {seq})"
        raise KeyFileError(
            f"{what} needs the root key, and key file {ledger.key_path} holds a {state} key"
            f"{where}; give the root key with --key; nothing was written"
        )
    return signer


@contextmanager
def _key_write(ledger: Ledger, expect: KeySet) -> Iterator[tuple[KeySet, dict[str, int]]]:
    """Open the write transaction of a key operation, locked and checked against ``expect``.

    Locks ``main``'s head first, then every other branch's (one order for every key
    operation, so two never deadlock; an append locks only the branches it grows), then
    reads the key set again: another key entry since ``expect`` is refused. Yields the key
    set and every branch's size.

    Raises:
        KeyChangedError: the key set changed meanwhile; nothing is written.
    """
    with ledger.write():
        store = ledger.store
        sizes = {CANONICAL_BRANCH: store.branch(CANONICAL_BRANCH).size}
        for b in sorted(store.branches(), key=lambda b: b.no):
            if b.name != CANONICAL_BRANCH:
                sizes[b.name] = store.branch(b.name).size  # FOR UPDATE on PostgreSQL
        ledger.forget_key_set()
        now = ledger.key_set()
        if now.last != expect.last or now.root != expect.root:
            raise KeyChangedError(
                f"the key set changed meanwhile: entry {now.last} changed it after this command "
                "read it; nothing was written (run `memroot key list` and decide again)"
            )
        yield now, sizes


def _append_key_entry(ledger: Ledger, op_type: OpType, payload: dict[str, object]) -> int:
    """Append a key entry inside the open write (the append records it in the key cache)."""
    return ledger.append(_library_op(ledger.system_op(op_type, payload))).seq


def add_key(ledger: Ledger, name: str, out: Path) -> AddedKey:
    """Authorize a new writer key ``name``; write its key file to ``out`` (mode 0600).

    Raises:
        RefusedError: the name is invalid or taken, or ``out`` exists.
        KeyChangedError: another key operation committed meanwhile (nothing written).
        KeyFileError: the loaded key is not the root key, or the key file cannot be written.
        StorageError: the ledger cannot be written.
    """
    if not valid_key_name(name):
        raise RefusedError(
            f"key name {name!r} must be 1-64 letters, digits and ._- (starting with a letter "
            "or digit), and not 'root'"
        )
    root = _root_signer(ledger, "memroot key add")
    expect = ledger.key_set()
    if name in expect.writers:
        raise RefusedError(
            f"the writer key name {name!r} is taken (entry {expect.writers[name].added_by}); "
            "choose another"
        )
    if out.exists():
        raise RefusedError(f"{out} exists: refusing to overwrite a key file")
    new = Ed25519Signer.generate(ledger.origin)
    new_vkey = vkey_of(new)
    with _key_write(ledger, expect) as (_, _sizes):
        head = ledger.store.branch(CANONICAL_BRANCH)
        statement = authority_statement(
            origin=ledger.origin,
            seq=head.size,
            prev=bytes(head.head),
            op_type=OpType.KEY_ADD.value,
            name=name,
            vkey=new_vkey,
        )
        payload: dict[str, object] = {
            "name": name,
            "vkey": new_vkey,
            "root_vkey": vkey_of(root),
            "sig": sign_statement(root, statement),
        }
        # The key file is written before the commit: a key the log names is never lost (a
        # failed commit leaves a file no entry names, which the operator may delete).
        new.save(out)
        try:
            seq = _append_key_entry(ledger, OpType.KEY_ADD, payload)
        except BaseException:
            out.unlink(missing_ok=True)
            raise
    return AddedKey(name, new_vkey, seq, out)


def revoke_key(ledger: Ledger, name: str) -> AddedKey:
    """Withdraw the writer key ``name``: from the next entry on, it signs nothing.

    Raises:
        RefusedError: no writer key ``name`` is in force.
        KeyChangedError: another key operation committed meanwhile (nothing written).
        KeyFileError: the loaded key is not the root key.
        StorageError: the ledger cannot be written.
    """
    root = _root_signer(ledger, "memroot key revoke")
    expect = ledger.key_set()
    writer = expect.writers.get(name)
    if writer is None or writer.revoked_by is not None:
        why = (
            "no writer key has that name"
            if writer is None
            else (f"it was revoked by entry {writer.revoked_by}")
        )
        raise RefusedError(f"cannot revoke {name!r}: {why} (see `memroot key list`)")
    with _key_write(ledger, expect) as (_, sizes):
        head = ledger.store.branch(CANONICAL_BRANCH)
        statement = authority_statement(
            origin=ledger.origin,
            seq=head.size,
            prev=bytes(head.head),
            op_type=OpType.KEY_REVOKE.value,
            name=name,
            vkey=writer.vkey,
            branches=sizes,
        )
        payload: dict[str, object] = {
            "name": name,
            "vkey": writer.vkey,
            "root_vkey": vkey_of(root),
            "branches": sizes,
            "sig": sign_statement(root, statement),
        }
        seq = _append_key_entry(ledger, OpType.KEY_REVOKE, payload)
    return AddedKey(name, writer.vkey, seq, None)


def list_keys(ledger: Ledger) -> tuple[KeySet, list[WriterKey]]:
    """Return the key set and its writer keys in the order they were added."""
    ks = ledger.key_set()
    return ks, sorted(ks.writers.values(), key=lambda w: w.added_by)


def rotate_key(ledger: Ledger) -> Rotation:
    """Rotate the ledger's root key (see the module docstring for the protocol).

    Raises:
        KeyFileError: if the current key file is missing, malformed, too open or not the root
            key, or a new key file cannot be written.
        RefusedError: if a pending ``<key>.new`` file does not belong to this ledger.
        KeyChangedError: another key operation committed meanwhile (nothing written).
        StorageError: if the ledger file cannot be written.
    """
    key_path = Path(ledger.key_path)
    pending_path = Path(f"{key_path}.new")
    expect = ledger.key_set()
    named = {r.vkey: r.since for r in expect.roots}
    pending: Ed25519Signer | None = None
    if pending_path.exists():
        pending = Ed25519Signer.load(pending_path)
        if vkey_of(pending) not in named:
            raise RefusedError(
                f"{pending_path} holds key {vkey_of(pending)}, which no KEY_ROTATE of this "
                "ledger names; remove it if it is stale, then rotate again"
            )
    old = ledger.signer
    if pending is not None and vkey_of(pending) == expect.root:
        new_vkey = vkey_of(pending)
        seq = named[new_vkey]  # a rotation cut short after its entry: finish it
    else:
        old = _root_signer(ledger, "memroot rotate-key")
        new = Ed25519Signer.generate(old.name)
        new.save(pending_path)
        new_vkey = vkey_of(new)
        try:
            with _key_write(ledger, expect) as (_, sizes):
                payload: dict[str, object] = {
                    "new_vkey": new_vkey,
                    "old_vkey": vkey_of(old),
                    "branches": sizes,
                }
                seq = _append_key_entry(ledger, OpType.KEY_ROTATE, payload)
                rotated = ledger.store.meta(ROTATED_VKEYS_META)
                known = json.loads(rotated) if isinstance(rotated, str) else []
                ledger.store.set_meta(ROTATED_VKEYS_META, json.dumps([*known, new_vkey]))
        except BaseException:
            pending_path.unlink(missing_ok=True)
            raise
    # The old key signed off the rotation: the seal of its own transaction, at seq + 1. The
    # key set folded inside that transaction held the rotation pending: read it again.
    size = seq + 1
    ledger.forget_key_set()
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
    return Rotation(vkey_of(old), new_vkey, seq, size, key_path, retired)
