"""The auditor's verification of a ledger (SPEC "Auditor's verification", docs/FORMAT.md).

The steps, numbered as in SPEC and docs/FORMAT.md, each in the module named for it:

    (1)-(4) ``steps_1_4_entries``: decode every entry strictly, seq contiguous on every
         branch, every ``prev`` link, content commitments or erasure by a TOMBSTONE;
    (5)  recompute the Merkle root at every checkpoint size (successive checkpoints are then
         consistent by construction: their roots come from one leaf sequence;
         ``step_6_signatures``) and check the stored caches (leaf hashes in
         ``steps_1_4_entries``, interior nodes, event index, meta in ``step_5_caches``);
    (6)  ``step_6_signatures``: checkpoint signatures against the trusted keys, learning a
         rotated key only from a KEY_ROTATE that the key it retires signed off;
    (7)  ``step_7_anchors``: branch anchors (with the layer above: branches);
    (8)  replay every SNAPSHOT and compare memory roots (layer above: memory_root);
    (9)  replay derived state and compare with the store (layer above: projections);
    (10) rollback, here: the ledger is not older than (and agrees with) the newest
         checkpoint the verifier trusted before (``_remember`` moves that trust forward).

This module runs them in order over each branch (``audit_source``).

Two ways to verify: ``audit`` never raises for bad data and lists every finding in an
``AuditReport``; ``verify`` raises an ``IntegrityError`` for the first. Both stream the
entries in bounded chunks, so memory stays flat whatever the ledger's size. Steps 7-9 plug in
as ``ReplayCheck`` objects that see every entry in order.

The steps read a ``LedgerSource``: a SQLite ``Store`` (``audit``), or an auditor's bundle
(``memroot.ledger.bundle.audit``). This module imports no storage driver, so the offline
verifier runs with the standard library, cbor2 and cryptography only; the checks of stored
caches (leaf hashes, interior nodes, content addresses) apply to sources that keep such
caches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import MemrootError
from memroot.ledger.note import Verifier
from memroot.ledger.trust import TrustedLog, TrustedState
from memroot.ledger.verify.report import (
    AuditReport,
    BranchLike,
    Finding,
    LedgerSource,
    Progress,
    ReplayCheck,
    RowLike,
)
from memroot.ledger.verify.step_5_caches import (
    _check_event_index,
    _check_key_cache,
    _check_meta,
    _check_nodes,
    _check_stray_nodes,
)
from memroot.ledger.verify.step_6_signatures import (
    _checkpoints,
    _Keyring,
    _read_checkpoints,
    _trusted_verifiers,
)
from memroot.ledger.verify.step_7_anchors import _check_anchor, _lineage
from memroot.ledger.verify.steps_1_4_entries import (
    _BranchRun,
    _check_row,
    _chunks,
    _native_rows,
    _native_size,
)
from memroot.ledger.verify.store_source import _StoreSource, bound_cache

if TYPE_CHECKING:
    from memroot.ledger.backends.store import Store

__all__ = ["audit", "audit_source", "verify", "verify_path"]


def audit(
    store: Store,
    *,
    origin: str,
    trusted: TrustedState | None = None,
    vkeys: Sequence[str] = (),
    checks: Sequence[ReplayCheck] = (),
    progress: Progress | None = None,
    update_trusted: bool = True,
    branch: str | None = None,
) -> AuditReport:
    """Run every ledger step over ``store`` and return the report; never raises for bad data.

    Trusted keys come from ``vkeys`` if given, else from the trusted state for ``origin``, else
    (trust on first use, reported as a note) from the ledger's own genesis. When every step
    holds and ``update_trusted`` is set, the newest checkpoint becomes the trusted one.
    ``branch`` restricts the audit to that branch and its ancestors (``_lineage``).
    """
    import apsw

    from memroot.ledger.strict import relaxed

    # One read transaction: every step sees one state of the file, whatever writers commit
    # meanwhile. Relaxed: the layers' checks open the ledger to report on it, not to refuse.
    with relaxed(), store.read():
        try:
            return audit_source(
                _StoreSource(store),
                origin=origin,
                trusted=trusted,
                vkeys=vkeys,
                checks=checks,
                progress=progress,
                update_trusted=update_trusted,
                branch=branch,
            )
        except (apsw.CorruptError, apsw.NotADBError) as e:
            # (1) a SQLite file whose pages do not read back: an integrity finding, not a
            # storage failure (the disk answered; the data is bad).
            report = AuditReport()
            report.steps_checked.add(1)
            report.add(Finding(1, f"the ledger file is a corrupt SQLite file: {e}"))
            return report


def audit_source(
    store: LedgerSource,
    *,
    origin: str,
    trusted: TrustedState | None = None,
    vkeys: Sequence[str] = (),
    checks: Sequence[ReplayCheck] = (),
    progress: Progress | None = None,
    update_trusted: bool = True,
    branch: str | None = None,
) -> AuditReport:
    """Run every ledger step over any ``LedgerSource`` (a store or a bundle); see ``audit``."""
    report = AuditReport()
    # (4) is checked only where content is served: a source without it (a tiles directory)
    # yields no content findings at all, rather than findings removed afterwards.
    report.steps_checked.update(
        (1, 2, 3, 4, 5, 6, 7, 10) if store.has_content else (1, 2, 3, 5, 6, 7, 10)
    )
    for check in checks:
        report.steps_checked.update(check.steps)
    branches = store.branches()
    if branch is not None:
        lineage = _lineage(store, branches, branch, report)
        branches = [b for b in branches if b.name in lineage]
    report.branches = len(branches)
    if not any(b.name == CANONICAL_BRANCH for b in branches):
        # (2) Without this, a ledger whose branch rows were deleted had nothing to check
        # and passed.
        report.add(
            Finding(2, f"the canonical branch {CANONICAL_BRANCH!r} is missing", CANONICAL_BRANCH, 0)
        )
    total = sum(b.size for b in branches)
    done = 0
    trusted_log = trusted.get(origin) if trusted is not None else None
    verifiers, key_source = _trusted_verifiers(store, vkeys, trusted_log, report)
    keyring = _Keyring({v.vkey(): v for v in verifiers})
    report.trusted["keys"] = key_source
    _check_meta(store, report)
    creates: dict[str, tuple[str, Entry, bytes, list[tuple[int, bytes]]]] = {}
    events_seen = 0
    for b in branches:
        run = _BranchRun(b.name, caches=store.has_caches, content=store.has_content)
        b_origin = origin if b.name == CANONICAL_BRANCH else f"{origin}/branch/{b.name}"
        stored_cps = _read_checkpoints(store, b.no, b.name, report)
        trusted_here = (
            trusted_log
            if b.name == CANONICAL_BRANCH
            else (trusted.get(b_origin) if trusted is not None else None)
        )
        targets = sorted(
            {s for s, _, _ in stored_cps} | ({trusted_here.size} if trusted_here else set())
        )
        t_iter = iter(targets)
        next_target = next(t_iter, None)
        roots: dict[int, bytes] = {}
        if next_target == 0:
            roots[0] = run.compact.root()
            next_target = next(t_iter, None)
        pending_nodes: list[tuple[int, int, bytes]] = []
        try:
            if isinstance(store, _StoreSource):
                chunks: Iterable[list[Any]] = store.row_chunks(b.no)
                as_row: Callable[[Any], RowLike] | None = store.as_row
                digests_of: Callable[[list[Any]], bytes | None] | None = store.digests_ok
            else:
                chunks, as_row = _chunks(store.iter_entry_rows(b.no)), None
                digests_of = None
            for chunk in chunks:
                digests = digests_of(chunk) if digests_of is not None else None
                i = 0
                while i < len(chunk):
                    # The native core takes the plain rows of a run at once, stopping where
                    # the code below has work to do; any other row takes the reference path.
                    n, new_nodes = (
                        _native_rows(
                            run,
                            b.name,
                            chunk,
                            i,
                            checks,
                            report,
                            next_target,
                            len(pending_nodes),
                            8192 - done % 8192,
                            digests,
                        )
                        if _N is not None and _native_size(next_target)
                        else (0, [])
                    )
                    if n == 0:
                        row = chunk[i] if as_row is None else as_row(chunk[i])
                        leaf = _check_row(run, b.name, row, report, checks)
                        new_nodes = run.compact.append(leaf)
                        n = 1
                    i += n
                    if run.caches and new_nodes:
                        pending_nodes.extend(new_nodes)
                        if len(pending_nodes) >= 4096:
                            _check_nodes(store, b.no, b.name, pending_nodes, report)
                            pending_nodes.clear()
                    if len(run.events) >= 4096:
                        _check_event_index(store, b.no, b.name, run.events, report)
                        run.events.clear()
                    while next_target is not None and run.compact.size == next_target:
                        roots[next_target] = run.compact.root()
                        next_target = next(t_iter, None)
                    done += n
                    if progress is not None and done % 8192 == 0:
                        progress(done, total)
        except MemrootError as e:
            # (1) an unreadable source (a damaged file or bundle) ends this branch's scan;
            # everything after it is unverified, and the report says where.
            report.add(
                Finding(
                    1,
                    f"entries cannot be read from entry {run.expected_seq} on: {e}",
                    b.name,
                    run.expected_seq,
                )
            )
        _check_nodes(store, b.no, b.name, pending_nodes, report)
        if isinstance(store, _StoreSource):
            _check_stray_nodes(store, b.no, b.name, report)
        _check_event_index(store, b.no, b.name, run.events, report)
        events_seen += run.event_count
        report.entries += run.expected_seq
        # (2) and (3): the stored chain head must describe what is stored.
        if b.size != run.expected_seq or bytes(b.head) != run.prev:
            report.add(
                Finding(
                    3,
                    "stored chain head does not match the entries",
                    b.name,
                    expected=f"size {run.expected_seq} head {run.prev.hex()}",
                    actual=f"size {b.size} head {bytes(b.head).hex()}",
                )
            )
        # (4): erasures must be recorded by a TOMBSTONE.
        for event_id, (seq, _) in run.erased.items():
            report.add(
                Finding(
                    4,
                    f"content of event {event_id} is missing and no TOMBSTONE erased it",
                    b.name,
                    seq,
                )
            )
        if b.name == CANONICAL_BRANCH and store.has_caches:
            _check_key_cache(store, [seq for seq, _, _, _ in run.key_entries], report)
        # (6): signatures, learning rotated keys on main as their sign-offs verify.
        cps = _checkpoints(stored_cps, b.name, b_origin, keyring, run.key_entries, report)
        # (5): every signed root recomputed from the leaves.
        for size, root in cps:
            if size > run.expected_seq:
                report.add(
                    Finding(
                        5,
                        f"a checkpoint was signed at size {size} but the branch "
                        f"has only {run.expected_seq} entries (truncated)",
                        b.name,
                        run.expected_seq,
                        expected=str(size),
                        actual=str(run.expected_seq),
                    )
                )
            elif roots.get(size) != root:
                got = roots.get(size)
                report.add(
                    Finding(
                        5,
                        f"the Merkle root at checkpoint size {size} does not "
                        "match the signed checkpoint",
                        b.name,
                        size - 1,
                        expected=root.hex(),
                        actual=got.hex() if got else None,
                    )
                )
        report.checkpoints += len(cps)
        # (6) no unsigned tail: every entry is covered by a checkpoint that verifies (every
        # append is sealed by one in its own transaction, docs/FORMAT.md section 5).
        covered = max((size for size, _ in cps if size <= run.expected_seq), default=0)
        if covered < run.expected_seq:
            report.add(
                Finding(
                    6,
                    f"entries {covered}..{run.expected_seq - 1} are covered by no signed "
                    "checkpoint (unsigned tail: appended without the key, or the head "
                    "checkpoint was removed)",
                    b.name,
                    covered,
                    expected=str(run.expected_seq),
                    actual=str(covered),
                )
            )
        # (10): not older than, and consistent with, what the verifier trusted before.
        if trusted_here is not None:
            if trusted_here.size > run.expected_seq:
                report.add(
                    Finding(
                        10,
                        f"rollback: the verifier trusted a checkpoint of size "
                        f"{trusted_here.size}, the ledger has only "
                        f"{run.expected_seq} entries",
                        b.name,
                        run.expected_seq,
                        expected=str(trusted_here.size),
                        actual=str(run.expected_seq),
                    )
                )
            elif roots.get(trusted_here.size) != trusted_here.root:
                got = roots.get(trusted_here.size)
                report.add(
                    Finding(
                        10,
                        f"history differs from the trusted checkpoint at size "
                        f"{trusted_here.size} (rewritten or forked)",
                        b.name,
                        trusted_here.size - 1 if trusted_here.size else None,
                        expected=trusted_here.root.hex(),
                        actual=got.hex() if got else None,
                    )
                )
            report.trusted[b.name] = {"size": trusted_here.size}
        # (7): branch anchors. Parents are verified before their forks (creation order).
        for name, (create, root_before) in run.creates.items():
            creates[name] = (b.name, create, root_before, cps)
        if b.name != CANONICAL_BRANCH:
            _check_anchor(store, b.name, run.genesis, creates.get(b.name), report)
    if store.has_caches and branch is None:
        # (5) the event index must hold exactly the events verified, no stray rows (a
        # restricted audit saw only some branches' events, so it cannot count them).
        indexed = store.event_index_size()
        if indexed != events_seen:
            report.add(
                Finding(
                    5,
                    "the event index does not match the events in the ledger",
                    expected=f"{events_seen} events",
                    actual=f"{indexed} rows",
                )
            )
    for check in checks:
        check.finish(report)
    if progress is not None:
        progress(done, total)
    if report.ok and update_trusted and trusted is not None:
        _remember(store, origin, trusted, list(keyring.keys.values()), branches)
    return report


def verify(store: Store, **kwargs: Any) -> AuditReport:
    """Like ``audit``, but raise an ``IntegrityError`` for the first finding.

    Raises:
        IntegrityError: carrying the first finding's step, branch, seq, expected and actual.
    """
    return audit(store, **kwargs).raise_first()


def _remember(
    store: LedgerSource,
    origin: str,
    trusted: TrustedState,
    verifiers: list[Verifier],
    branches: Sequence[BranchLike],
) -> None:
    """After a clean audit, trust the newest checkpoint of every branch it checked."""
    vkeys = tuple(v.vkey() for v in verifiers)
    for b in branches:
        last = store.latest_checkpoint(b.no)
        if last is None:
            continue
        size, root, note = last
        b_origin = origin if b.name == CANONICAL_BRANCH else f"{origin}/branch/{b.name}"
        known = trusted.get(b_origin)
        if known is not None and known.size > size:
            # Never move back: with its newer checkpoints deleted, a ledger that still holds
            # everything we trusted passes, and trusting its older checkpoint would hide a
            # truncation done after this run (step 10).
            continue
        trusted.put(b_origin, TrustedLog(vkeys, size, bytes(root), note))
    trusted.save()


def verify_path(path: Path | str, **kwargs: Any) -> AuditReport:
    """Open the ledger at ``path`` read-only and ``audit`` it (``kwargs`` as for audit).

    ``path`` may be a ``postgresql://`` URL: the audit then reads one REPEATABLE READ
    snapshot of the database (``PgStore.read``).
    """
    from memroot.ledger.backends.pg import is_url, open_store

    store = open_store(path, readonly=True)
    try:
        if not is_url(path):
            bound_cache(store)
        # An auditor who knows which log to expect says so (``origin=``): a ledger rewritten
        # under another origin then fails its checkpoints (step 6) instead of being trusted
        # under the name it claims.
        origin = kwargs.pop("origin", None) or str(store.meta("origin"))
        return audit(store, origin=origin, **kwargs)
    finally:
        store.close()
