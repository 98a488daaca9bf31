"""Step 7: branch anchors (docs/FORMAT.md section 6.4).

Each branch's genesis names its parent and fork point; the parent's ``BRANCH_CREATE`` entry
and its tree root just before it must agree (``_check_anchor``), parents before children
(``_lineage``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from memroot.ledger import merkle
from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import MemrootError
from memroot.ledger.verify.report import AuditReport, BranchLike, Finding, LedgerSource

if TYPE_CHECKING:
    pass


def _lineage(
    store: LedgerSource, branches: Sequence[BranchLike], name: str, report: AuditReport
) -> set[str]:
    """Return ``name`` and its ancestors, following each branch genesis's ``anchor``.

    The anchors are read from the entries (step 7 then checks each against its
    ``BRANCH_CREATE``), not from the store's branch table. A missing branch is a finding.
    """
    by_name = {b.name: b for b in branches}
    out: set[str] = {CANONICAL_BRANCH}
    cur: str | None = name
    while cur is not None and cur not in out:
        b = by_name.get(cur)
        if b is None:
            report.add(Finding(2, f"no branch named {cur!r} to verify", cur))
            break
        out.add(cur)
        try:
            anchor = Entry.from_bytes(store.entry_row(b.no, 0).data).body.get("anchor")
        except MemrootError:
            break  # the scan of this branch reports why its genesis does not read
        parent = anchor.get("branch") if isinstance(anchor, dict) else None
        cur = parent if isinstance(parent, str) else None
    return out


def _check_anchor(
    store: LedgerSource,
    branch: str,
    genesis: Entry | None,
    created: tuple[str, Entry, bytes, list[tuple[int, bytes]]] | None,
    report: AuditReport,
) -> None:
    """(7): the BRANCH_CREATE is in the parent's signed tree and the branch genesis links to it.

    Checks that a BRANCH_CREATE entry names the branch; that the genesis's ``prev`` and
    ``anchor`` are that entry's hash and position; that the fork point recorded in the
    BRANCH_CREATE payload (seq, entry_hash, tree_size, tree_root) is the parent's head just
    before it; and, with an inclusion proof, that the entry is in the parent's newest signed
    checkpoint that covers it.
    """
    if genesis is None:
        report.add(Finding(7, "the branch has no genesis entry", branch, 0))
        return
    if created is None:
        report.add(Finding(7, "no BRANCH_CREATE entry in any parent names this branch", branch, 0))
        return
    parent, create, root_before, parent_cps = created
    anchor = genesis.body.get("anchor")
    want = {"branch": parent, "entry_hash": create.hash, "seq": create.seq}
    if genesis.prev != create.hash or anchor != want:
        report.add(
            Finding(
                7,
                f"the branch genesis does not link to its BRANCH_CREATE ({parent} entry "
                f"{create.seq})",
                branch,
                0,
                expected=create.hash.hex(),
                actual=genesis.prev.hex(),
            )
        )
    payload = create.body.get("payload", {})
    fork = payload.get("fork") if isinstance(payload, dict) else None
    want_fork = {
        "entry_hash": create.prev,
        "seq": create.seq - 1,
        "tree_root": root_before,
        "tree_size": create.seq,
    }
    if fork != want_fork or payload.get("parent_branch_id") != parent:
        report.add(
            Finding(
                7,
                "the fork point recorded by BRANCH_CREATE is not the parent's head before it",
                parent,
                create.seq,
                expected=f"size {create.seq} root {root_before.hex()}",
                actual=repr(fork),
            )
        )
    covering = [(size, root) for size, root in parent_cps if size > create.seq]
    if not covering:
        report.add(
            Finding(
                7,
                f"no signed checkpoint of {parent} covers the BRANCH_CREATE yet; "
                "its inclusion was checked against the recomputed tree only",
                branch,
                0,
                severity="note",
            )
        )
        return
    if not store.has_caches:
        # No node cache to prove from: the entry is one of the leaves whose recomputed root
        # matched the signed one at every checkpoint size (step 5), which is inclusion.
        return
    size, root = covering[-1]
    try:
        parent_no = store.branch(parent).no
        proof = merkle.inclusion_proof(
            create.seq, size, lambda ids: store.read_nodes(parent_no, ids)
        )
        merkle.verify_inclusion(create.hash, create.seq, size, proof, root)
    except MemrootError as e:
        report.add(
            Finding(
                7,
                f"the BRANCH_CREATE entry is not provably in the signed "
                f"checkpoint of size {size}: {e}",
                parent,
                create.seq,
            )
        )
