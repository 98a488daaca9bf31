"""Steps 5-6 at every checkpoint (docs/FORMAT.md 5, 7.3, 7.5): roots and signatures.

Every stored checkpoint's root is recomputed at its size (5) and its signature checked
against the keys valid at that size (6): root keys, which grow only by a ``KEY_ROTATE`` the
retiring key signed off (``_rotate``), and writer keys, which a ``KEY_ADD`` signed by the root
key in force authorizes and a ``KEY_REVOKE`` ends (``_key_statement``; ``_Keyring``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import DecodeError, MemrootError, ProofError
from memroot.ledger.keyset import (
    KeyEntryError,
    WriterKey,
    check_new_writer,
    check_statement,
    writer_in_force,
)
from memroot.ledger.note import Verifier, open_checkpoint
from memroot.ledger.trust import TrustedLog
from memroot.ledger.verify.report import AuditReport, Finding, LedgerSource
from memroot.ledger.vocab import OpType


@dataclass(slots=True)
class _Keyring:
    """The keys the verifier trusts (step 6, docs/FORMAT.md 7.3 and 7.5).

    Root keys: a key starts trusted if given, remembered, or (trust on first use) in the
    genesis. A ``KEY_ROTATE`` entry on ``main`` with payload ``{new_vkey, old_vkey}`` adds
    ``new_vkey`` only when the first checkpoint covering it carries a valid signature by
    ``old_vkey``, a key trusted at that size: the rotation was appended while the old key was
    in force and the old key signed it off. From then on the old key is retired: it is accepted
    only for ``main`` checkpoints no larger than that sign-off checkpoint, so a leaked old key
    cannot sign a newer tree; on a branch, up to the branch's size the rotation recorded
    (``branches``; a rotation written before that record leaves it accepted on branches).

    Writer keys: a ``KEY_ADD`` at entry ``s`` whose authority statement the root key in force
    at ``s`` signed makes its key valid for ``main`` checkpoints of size ``> s``; a
    ``KEY_REVOKE`` at ``r`` (signed the same way) ends it: sizes ``<= r`` only on ``main``,
    and on a branch up to the size the revoke recorded for it.
    """

    keys: dict[str, Verifier] = field(default_factory=dict)  # vkey -> verifier (root keys)
    retired: dict[str, int] = field(default_factory=dict)  # vkey -> largest size it may sign
    retired_at: dict[str, int] = field(default_factory=dict)  # vkey -> seq of its KEY_ROTATE
    root_branches: dict[str, dict[str, int] | None] = field(default_factory=dict)
    writers: dict[str, WriterKey] = field(default_factory=dict)  # name -> writer key
    writer_keys: dict[str, Verifier] = field(default_factory=dict)  # vkey -> its verifier

    def valid(self, size: int | None) -> list[Verifier]:
        """Return the root keys that may sign a ``main`` checkpoint of ``size`` (None: any)."""
        return [
            v
            for k, v in self.keys.items()
            if size is None or k not in self.retired or size <= self.retired[k]
        ]

    def signers(self, branch: str, size: int) -> list[Verifier]:
        """Return every key (root and writer) that may sign ``branch``'s checkpoint of ``size``."""
        if branch == CANONICAL_BRANCH:
            out = self.valid(size)
        else:
            out = []
            for k, v in self.keys.items():
                limit = self.root_branches.get(k) if k in self.retired else None
                if limit is None or size <= limit.get(branch, 0):
                    out.append(v)
        return out + [
            self.writer_keys[w.vkey] for w in self.writers.values() if w.may_sign(branch, size)
        ]

    def root_at(self, seq: int, vkey: object) -> Verifier | None:
        """Return the root key ``vkey`` if it is trusted and in force at entry ``seq``."""
        key = self.keys.get(vkey) if isinstance(vkey, str) else None
        if key is None:
            return None
        retired = self.retired_at.get(key.vkey())
        return key if retired is None or seq < retired else None


def _trusted_verifiers(
    store: LedgerSource,
    vkeys: Sequence[str],
    trusted_log: TrustedLog | None,
    report: AuditReport,
) -> tuple[list[Verifier], str]:
    if vkeys:
        keys, source = list(vkeys), "given"
    elif trusted_log is not None:
        keys, source = list(trusted_log.vkeys), "trusted state"
    else:
        keys, source = _genesis_keys(store), "genesis (trust on first use)"
        report.add(
            Finding(
                6,
                "no trusted key was given or remembered: trusting the keys "
                "recorded in the ledger's own genesis (trust on first use)",
                severity="note",
            )
        )
    verifiers = []
    for k in keys:
        try:
            verifiers.append(Verifier.from_vkey(k))
        except DecodeError as e:
            report.add(Finding(6, f"trusted key {k!r} is malformed: {e}"))
    return verifiers, source


def _genesis_keys(store: LedgerSource) -> list[str]:
    try:
        row = store.entry_row(store.branch(CANONICAL_BRANCH).no, 0)
        keys = Entry.from_bytes(row.data).body.get("keys", [])
        return [str(k) for k in keys] if isinstance(keys, list) else []
    except MemrootError:
        return []


def _read_checkpoints(
    store: LedgerSource, branch_no: int, branch: str, report: AuditReport
) -> list[tuple[int, bytes, str]]:
    """Return the stored ``(size, root, note)`` checkpoints of a branch, unverified."""
    try:
        return store.checkpoints(branch_no)
    except MemrootError as e:
        report.add(Finding(6, f"the checkpoints cannot be read: {e}", branch))
        return []


def _checkpoints(
    stored: list[tuple[int, bytes, str]],
    branch: str,
    origin: str,
    keyring: _Keyring,
    key_entries: list[tuple[int, str, Any, bytes]],
    report: AuditReport,
) -> list[tuple[int, bytes]]:
    """(6): open every stored checkpoint note; return the (size, root) pairs that verify.

    On ``main``, the key entries (KEY_ROTATE, KEY_ADD, KEY_REVOKE) below a checkpoint's size
    are applied to the keyring in seq order before it is opened (see ``_Keyring``): a
    rotation is signed off by that checkpoint, the first that covers it. A key entry on
    another branch is a violation: the key set lives on ``main``.
    """
    out: list[tuple[int, bytes]] = []
    main = branch == CANONICAL_BRANCH
    if not main:
        for seq, op_type, _, _ in key_entries:
            report.add(
                Finding(6, f"{op_type} on a branch: key entries belong on main", branch, seq)
            )
    pending = sorted(key_entries, key=lambda r: r[0]) if main else []
    for size, root, note in stored:
        last = size - 1 if size > 0 else None  # the newest entry the checkpoint covers
        # Writer keys added or revoked below this size apply before it is opened (their
        # statements carry the root's signature); a rotation waits for the first checkpoint
        # covering it that verifies, its sign-off.
        while pending and pending[0][0] < size and pending[0][1] != OpType.KEY_ROTATE.value:
            seq, op_type, payload, prev = pending.pop(0)
            _key_statement(keyring, seq, op_type, payload, prev, origin, report)
        try:
            signed = open_checkpoint(note, keyring.signers(branch, size), origin=origin)
        except (ProofError, DecodeError) as e:
            report.add(Finding(6, f"checkpoint at size {size} does not verify: {e}", branch, last))
            continue
        while pending and pending[0][0] < size:
            seq, op_type, payload, prev = pending.pop(0)
            if op_type == OpType.KEY_ROTATE.value:
                _rotate(keyring, seq, payload, size, note, origin, report)
            else:
                _key_statement(keyring, seq, op_type, payload, prev, origin, report)
        cp = signed.checkpoint
        if cp.size != size or cp.root != bytes(root):
            report.add(
                Finding(
                    5,
                    f"stored checkpoint index (size {size}) disagrees with its signed note",
                    branch,
                    last,
                    expected=f"{cp.size} {cp.root.hex()}",
                    actual=f"{size} {bytes(root).hex()}",
                )
            )
        out.append((cp.size, cp.root))
    for seq, op_type, _, _ in pending:
        report.add(
            Finding(
                6,
                f"{op_type} is not covered by a verified checkpoint yet, so its key is not trusted",
                CANONICAL_BRANCH,
                seq,
                severity="note",
            )
        )
    return out


def _key_statement(
    keyring: _Keyring,
    seq: int,
    op_type: str,
    payload: Any,
    prev: bytes,
    origin: str,
    report: AuditReport,
) -> None:
    """Apply one KEY_ADD / KEY_REVOKE at ``seq`` if the root key in force signed it."""
    root_vkey = payload.get("root_vkey") if isinstance(payload, dict) else None
    root = keyring.root_at(seq, root_vkey)
    try:
        if root is None:
            raise KeyEntryError(
                f"it names root key {root_vkey!r}, which is not a trusted root key at entry {seq}"
            )
        check_statement(payload, op_type=op_type, origin=origin, seq=seq, prev=prev, root=root)
        name, vkey = str(payload["name"]), str(payload["vkey"])
        if op_type == OpType.KEY_ADD.value:
            key = check_new_writer(origin, keyring.writers, set(keyring.keys), seq, name, vkey)
            keyring.writers[name] = WriterKey(name, vkey, seq)
            keyring.writer_keys[vkey] = key
            what = f"writer key {name!r} ({key}) authorized by the root key"
        else:
            writer_in_force(keyring.writers, seq, name, vkey).revoke(seq, payload["branches"])
            what = f"writer key {name!r} revoked: it signs main up to size {seq} only"
    except (KeyEntryError, DecodeError) as e:
        report.add(
            Finding(6, f"{op_type} is not valid, so it is not applied: {e}", CANONICAL_BRANCH, seq)
        )
        return
    report.add(Finding(6, what, CANONICAL_BRANCH, seq, severity="note"))


def _rotate(
    keyring: _Keyring,
    seq: int,
    payload: Any,
    size: int,
    note: str,
    origin: str,
    report: AuditReport,
) -> None:
    """Apply one KEY_ROTATE at ``seq`` whose first verified covering checkpoint is ``note``."""
    new = payload.get("new_vkey") if isinstance(payload, dict) else None
    old = payload.get("old_vkey") if isinstance(payload, dict) else None
    old_key = keyring.keys.get(old) if isinstance(old, str) else None
    try:
        if not isinstance(new, str) or old_key is None or old_key not in keyring.valid(size):
            raise ProofError(f"it retires {old!r}, which is not a trusted key at size {size}")
        open_checkpoint(note, [old_key], origin=origin)
        new_key = Verifier.from_vkey(new)
    except (ProofError, DecodeError) as e:
        report.add(
            Finding(
                6,
                f"KEY_ROTATE was not signed off by the key it retires in the first checkpoint "
                f"covering it (size {size}), so its new key is not trusted: {e}",
                CANONICAL_BRANCH,
                seq,
            )
        )
        return
    keyring.keys[new_key.vkey()] = new_key
    keyring.retired[old_key.vkey()] = size
    keyring.retired_at[old_key.vkey()] = seq
    branches = payload.get("branches")
    keyring.root_branches[old_key.vkey()] = (
        {str(k): int(v) for k, v in branches.items() if isinstance(v, int)}
        if isinstance(branches, dict)
        else None
    )
    report.add(
        Finding(
            6,
            f"signing key rotated to {new_key} (signed off by {old_key} at size {size}); "
            f"the old key is accepted up to size {size}",
            CANONICAL_BRANCH,
            seq,
            severity="note",
        )
    )
