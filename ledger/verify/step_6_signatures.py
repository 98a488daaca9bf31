"""Steps 5-6 at every checkpoint (docs/FORMAT.md sections 5 and 7.3): roots and signatures.

Every stored checkpoint's root is recomputed at its size (5) and its signature checked
against the trusted keys (6), which grow only by a ``KEY_ROTATE`` the retiring key signed
off (``_Keyring``, ``_rotate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import DecodeError, MemrootError, ProofError
from memroot.ledger.note import Verifier, open_checkpoint
from memroot.ledger.trust import TrustedLog
from memroot.ledger.verify.report import AuditReport, Finding, LedgerSource

if TYPE_CHECKING:
    pass


@dataclass(slots=True)
class _Keyring:
    """The keys the verifier trusts, growing by signed-off KEY_ROTATE entries (step 6).

    A key starts trusted if given, remembered, or (trust on first use) in the genesis. A
    ``KEY_ROTATE`` entry on ``main`` with payload ``{new_vkey, old_vkey}`` adds ``new_vkey``
    only when the first verified checkpoint covering it carries a valid signature by
    ``old_vkey``, a key trusted at that size: the rotation was appended while the old key was
    in force and the old key signed it off. From then on the old key is retired: it is accepted
    only for ``main`` checkpoints no larger than that sign-off checkpoint, so a leaked old key
    cannot sign a newer tree. Branch checkpoints accept any trusted key.
    """

    keys: dict[str, Verifier] = field(default_factory=dict)  # vkey -> verifier
    retired: dict[str, int] = field(default_factory=dict)  # vkey -> largest size it may sign

    def valid(self, size: int | None) -> list[Verifier]:
        """Return the keys that may sign a checkpoint of ``size`` (None: any size)."""
        return [
            v
            for k, v in self.keys.items()
            if size is None or k not in self.retired or size <= self.retired[k]
        ]


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
    rotations: list[tuple[int, Any]],
    report: AuditReport,
) -> list[tuple[int, bytes]]:
    """(6): open every stored checkpoint note; return the (size, root) pairs that verify.

    On ``main``, KEY_ROTATE entries are applied to the keyring as their sign-off checkpoints
    verify (see ``_Keyring``), in size order.
    """
    out: list[tuple[int, bytes]] = []
    main = branch == CANONICAL_BRANCH
    pending = sorted(rotations, key=lambda r: r[0]) if main else []
    for size, root, note in stored:
        last = size - 1 if size > 0 else None  # the newest entry the checkpoint covers
        try:
            signed = open_checkpoint(note, keyring.valid(size if main else None), origin=origin)
        except (ProofError, DecodeError) as e:
            report.add(Finding(6, f"checkpoint at size {size} does not verify: {e}", branch, last))
            continue
        while pending and pending[0][0] < size:
            seq, payload = pending.pop(0)
            _rotate(keyring, seq, payload, size, note, origin, report)
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
    for seq, _ in pending:
        report.add(
            Finding(
                6,
                "KEY_ROTATE is not covered by a verified checkpoint yet, so its new key is "
                "not trusted",
                CANONICAL_BRANCH,
                seq,
                severity="note",
            )
        )
    return out


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
