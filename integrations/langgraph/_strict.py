"""Strict reads: every entry the integrations serve is re-checked against the signed tree.

One small function, so it can give way to the ledger's own strict read paths when they
land. The steps are the auditor's (docs/FORMAT.md, "Auditor's verification"), for one
entry: (1) strict decoding, (5) an RFC 9162 inclusion proof of its leaf against (6) the
branch's newest signed checkpoint, whose signature is verified with the ledger's keys, and
(4) the content commitment, or a recorded erasure.
"""

from __future__ import annotations

from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import IntegrityError
from memroot.ledger.hashing import content_commitment, leaf_hash
from memroot.ledger.ledger import Ledger, branch_origin
from memroot.ledger.merkle import verify_inclusion
from memroot.ledger.note import Verifier, open_checkpoint

__all__ = ["verified_entry"]


def verified_entry(ledger: Ledger, branch: str, seq: int) -> tuple[Entry, str | None]:
    """Return entry ``seq`` of ``branch`` and its content (None when erased), checked.

    An entry newer than the newest signed checkpoint gets one signed first (the ledger
    refuses to sign a tree inconsistent with an earlier checkpoint, which is a finding too).

    Raises:
        IntegrityError: the entry's bytes, its place in the signed tree, the checkpoint's
            signature or the content do not check out (with step, branch and seq).
        NotFoundError: there is no such entry.
    """
    no = ledger.store.branch(branch).no
    row = ledger.store.entry_row(no, seq)
    entry = Entry.from_bytes(row.data)  # (1)
    leaf = leaf_hash(row.data)
    if entry.seq != seq or entry.branch != branch:
        raise IntegrityError(
            f"entry stored at {branch}:{seq} says it is {entry.branch}:{entry.seq}",
            branch=branch,
            seq=seq,
            step=2,
        )
    note = ledger.latest_checkpoint(branch)
    verifiers = [Verifier.from_vkey(k) for k in ledger.genesis_vkeys()]
    signed = (
        None
        if note is None
        else open_checkpoint(note, verifiers, branch_origin(ledger.origin, branch))
    )  # (6)
    if signed is None or signed.checkpoint.size <= seq:
        signed = ledger.checkpoint(branch)
    cp = signed.checkpoint
    try:
        verify_inclusion(
            leaf, seq, cp.size, ledger.inclusion_proof(seq, cp.size, branch), cp.root
        )  # (5)
    except IntegrityError as e:
        raise IntegrityError(
            f"entry {branch}:{seq} is not the entry the signed checkpoint of size {cp.size} "
            f"covers: {e}",
            branch=branch,
            seq=seq,
            step=5,
        ) from e
    if entry.kind is not Kind.EVENT:
        return entry, None
    if row.content is None:
        if row.erased_by is not None:
            return entry, None
        raise IntegrityError(
            f"the content of event {branch}:{seq} is missing and no TOMBSTONE erased it",
            branch=branch,
            seq=seq,
            step=4,
        )
    data = bytes(row.content)
    if row.salt is None or content_commitment(bytes(row.salt), data) != entry.body.get(
        "content_commitment"
    ):  # (4)
        raise IntegrityError(
            f"the content of event {branch}:{seq} does not match its commitment: it was "
            "changed after it was written; refusing to serve it",
            branch=branch,
            seq=seq,
            step=4,
        )
    return entry, data.decode("utf-8")
