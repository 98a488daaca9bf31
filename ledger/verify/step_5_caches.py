"""Step 5's checks of the stored caches (docs/FORMAT.md section 4) against the recomputation.

The interior Merkle nodes, the event-id index and the meta values copied from the genesis
entry: caches a source may keep, each compared with what the entries give.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import MemrootError
from memroot.ledger.keyset import KEY_ENTRIES_META, ROTATED_VKEYS_META, parse_key_entries
from memroot.ledger.verify.report import AuditReport, Finding, LedgerSource

if TYPE_CHECKING:
    from memroot.ledger.verify.store_source import _StoreSource

_GENESIS_META: Final = ("ledger_id", "origin", "snapshot_every")


def _check_meta(store: LedgerSource, report: AuditReport) -> None:
    """(5): the meta values the ledger serves are copies of its genesis entry (a cache)."""
    try:
        genesis = Entry.from_bytes(store.entry_row(store.branch(CANONICAL_BRANCH).no, 0).data)
    except MemrootError:
        return  # a missing or undecodable genesis is reported by steps 1-3
    for key in _GENESIS_META:
        want, have = genesis.body.get(key), store.meta(key)
        if type(want) is not type(have) or want != have:
            report.add(
                Finding(
                    5,
                    f"stored meta {key!r} does not match the genesis entry",
                    CANONICAL_BRANCH,
                    0,
                    expected=repr(want),
                    actual=repr(have),
                )
            )


def _check_nodes(
    store: LedgerSource,
    branch_no: int,
    branch: str,
    nodes: list[tuple[int, int, bytes]],
    report: AuditReport,
) -> None:
    """(5): stored interior nodes must equal the recomputed ones (they serve proofs)."""
    if not nodes:
        return
    for level, index, h, stored in store.node_mismatches(branch_no, nodes):
        report.add(
            Finding(
                5,
                f"stored tree node (level {level}, index {index}) does not "
                "match the recomputed tree",
                branch,
                ((index + 1) << level) - 1,  # the entry whose append completed the node
                expected=h.hex(),
                actual=stored.hex() if stored is not None else "missing",
            )
        )


def _check_stray_nodes(
    store: _StoreSource, branch_no: int, branch: str, report: AuditReport
) -> None:
    """(5): a layout version 2 file holds no tree node below level 2 (FORMAT.md 4).

    No reader reads one (the leaves give it), so such a row serves nothing; but memroot
    never writes one there, and a row that no writer of the file wrote is reported.
    """
    count = store.stray_nodes(branch_no)
    if count:
        report.add(
            Finding(
                5,
                f"{count} stored tree node row(s) below level 2, which this layout (version 2)"
                " never stores (nothing reads them: the leaf hashes give those nodes)",
                branch,
                expected="0",
                actual=str(count),
            )
        )


def _check_event_index(
    store: LedgerSource,
    branch_no: int,
    branch: str,
    events: list[tuple[str, int]],
    report: AuditReport,
) -> None:
    """(5): the event index (event id -> entry) must point at every event verified.

    A misdirected index would let ``find_event`` and a TOMBSTONE reach the wrong event.
    """
    if not events or not store.has_caches:
        return
    for event_id, seq, k in store.event_index_mismatches(branch_no, events):
        report.add(
            Finding(
                5,
                f"the event index does not point at event {event_id}",
                branch,
                seq,
                expected=f"entry {seq}",
                actual="missing" if k is None else f"key {k}",
            )
        )


def _check_key_cache(store: LedgerSource, seqs: list[int], report: AuditReport) -> None:
    """(5): the key cache lists exactly ``main``'s key entries (docs/FORMAT.md 7.5).

    Appends and strict reads find the key entries through it: one that omits a revocation
    would let a revoked key pass a read, so it is checked against the entries scanned.
    """
    raw = store.meta(KEY_ENTRIES_META)
    if raw is None and not seqs:
        return
    cached = parse_key_entries(raw)
    if cached != seqs and not (raw is None and store.meta(ROTATED_VKEYS_META) is not None):
        report.add(
            Finding(
                5,
                f"the key cache (meta {KEY_ENTRIES_META!r}) does not list main's key entries",
                CANONICAL_BRANCH,
                expected=repr(seqs),
                actual=repr(raw),
            )
        )
