"""Steps 1-4 over each entry (docs/FORMAT.md sections 1-3): decoding, seq, prev links, content.

(1) decode every entry strictly; (2) seq contiguous from 0 and the entry names its branch;
(3) every ``prev`` link; (4) content commitments, or erasure recorded by a TOMBSTONE. Each
branch's running state is a ``_BranchRun``; the native core checks a chunk at once when it
can (``_native_rows``), the reference code entry by entry (``_check_row``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from memroot.ledger import merkle
from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.entries import CANONICAL_BRANCH, ZERO_HASH, Entry, Kind
from memroot.ledger.errors import DecodeError, MemrootError
from memroot.ledger.hashing import EntryHash, content_commitment, content_digest, leaf_hash
from memroot.ledger.keyset import KEY_ENTRY_TYPES
from memroot.ledger.verify.report import _CHUNK, AuditReport, Finding, ReplayCheck, RowLike
from memroot.ledger.vocab import OpType

if TYPE_CHECKING:
    pass


@dataclass(slots=True)
class _BranchRun:
    """The verifier's running state over one branch."""

    name: str
    expected_seq: int = 0
    prev: bytes = ZERO_HASH
    compact: merkle.CompactRange = field(default_factory=merkle.CompactRange)
    # event id -> (seq, stored erased_by), awaiting its TOMBSTONE
    erased: dict[str, tuple[int, int]] = field(default_factory=dict)
    tombstones: dict[str, int] = field(default_factory=dict)  # target id -> tombstone seq
    caches: bool = True  # the source keeps leaf hashes and content addresses to check
    content: bool = True  # the source serves event content (a tiles directory does not)
    genesis: Entry | None = None
    # branch id -> the BRANCH_CREATE entry naming it and this tree's root just before it (7)
    creates: dict[str, tuple[Entry, bytes]] = field(default_factory=dict)
    # (seq, type, payload, prev) of every KEY_ROTATE / KEY_ADD / KEY_REVOKE, for step 6
    key_entries: list[tuple[int, str, Any, bytes]] = field(default_factory=list)
    events: list[tuple[str, int]] = field(default_factory=list)  # (event id, seq) to check
    event_count: int = 0


_KIND_OF: Final = {k.value: k for k in Kind}


def _chunks(rows: Iterable[RowLike]) -> Iterator[list[RowLike]]:
    """Yield ``rows`` in lists of ``_CHUNK``; a read error comes after the rows read before it."""
    buf: list[RowLike] = []
    try:
        for row in rows:
            buf.append(row)
            if len(buf) == _CHUNK:
                yield buf
                buf = []
    except MemrootError:
        if buf:
            yield buf
        raise
    if buf:
        yield buf


def _native_size(size: int | None) -> bool:
    """Tell whether ``size`` (a stored checkpoint size, so possibly tampered) fits native code.

    A size outside 0..2^63-1 (a flipped byte in a stored checkpoint) takes the reference
    path, which reports it as the finding it is.
    """
    return size is None or 0 <= size < 1 << 63


def _native_rows(
    run: _BranchRun,
    branch: str,
    chunk: list[RowLike],
    start: int,
    checks: Sequence[ReplayCheck],
    report: AuditReport,
    stop_size: int | None,
    pending_nodes: int,
    max_rows: int,
    digests: bytes | None = None,
) -> tuple[int, list[merkle.NewNode]]:
    """Check the plain rows from ``chunk[start]`` on natively; return how many and their nodes.

    A plain row is one ``_check_row`` would pass without a finding, only moving the branch's
    state on (native/src/verify.rs). The native call stops after the row where the caller has
    work (a checkpoint size, a full batch of nodes or events, a progress tick) and before any
    row that is not plain, which the caller then checks with ``_check_row``. Steps 7-9 see the
    same entries, in the same order. ``digests``: the content address flags of ``chunk``
    the reader thread computed (``_StoreSource.digests_ok``), if any.
    """
    assert _N is not None
    n, prev, hashes, nodes, events, entries = _N.verify_rows(
        chunk,
        start,
        max_rows,
        branch,
        run.expected_seq,
        run.prev,
        run.compact.size,
        list(run.compact.hashes),
        run.caches,
        not run.tombstones,
        stop_size,
        4096 - pending_nodes,
        4096 - len(run.events),
        bool(checks),
        digests,
    )
    if n == 0:
        return 0, []
    run.compact = merkle.CompactRange.from_hashes(run.compact.size + n, hashes)
    run.prev = EntryHash(prev)
    run.expected_seq += n
    if run.caches:
        run.events.extend(events)
    run.event_count += len(events)
    if entries:
        kinds = _KIND_OF
        built = [
            Entry(
                v,
                EntryHash(e_prev),
                seq,
                name,
                ts,
                kinds[kind],
                type_,
                body,
                _row_data(row),
                EntryHash(h),
            )
            for (v, e_prev, seq, name, ts, kind, type_, body, h), row in zip(
                entries, chunk[start : start + n], strict=True
            )
        ]
        _feed_checks(checks, branch, built, report)
    return n, nodes


def _feed_checks(
    checks: Sequence[ReplayCheck], branch: str, entries: list[Entry], report: AuditReport
) -> None:
    """Feed ``entries`` to every check, in order.

    Each run of events goes in one call to a check that takes runs (``feed_events``); every
    other entry to each check in turn.
    """
    runs = [getattr(c, "feed_events", None) for c in checks]
    event = Kind.EVENT
    first = 0  # the start of the run of events being gathered
    for i, entry in enumerate(entries):
        if entry.kind is event:
            continue
        if first < i:
            _feed_run(checks, runs, branch, entries[first:i], report)
        for check in checks:
            check.feed(branch, entry, report)
        first = i + 1
    if first < len(entries):
        _feed_run(checks, runs, branch, entries[first:], report)


def _feed_run(
    checks: Sequence[ReplayCheck],
    runs: list[Any],
    branch: str,
    events: list[Entry],
    report: AuditReport,
) -> None:
    # The checks that take runs go first (see ``ReplayCheck.feed``); the others see the run
    # entry by entry, interleaved as before.
    rest = [c for c, feed_events in zip(checks, runs, strict=True) if feed_events is None]
    for feed_events in runs:
        if feed_events is not None:
            feed_events(branch, events, report)
    if rest:
        for entry in events:
            for check in rest:
                check.feed(branch, entry, report)


def _row_data(row: Any) -> bytes:
    """Return the entry bytes of a store row tuple (``row_chunks``) or of a ``RowLike``."""
    return row[2] if type(row) is tuple else row.data  # type: ignore[no-any-return]


def _check_row(
    run: _BranchRun,
    branch: str,
    row: RowLike,
    report: AuditReport,
    checks: Sequence[ReplayCheck],
) -> bytes:
    """Check steps 1-4 (and the stored leaf hash cache) for one row; return its leaf hash."""
    computed = leaf_hash(row.data)
    # (2) contiguous seq: a gap means deleted rows.
    if row.seq != run.expected_seq:
        report.add(
            Finding(
                2,
                f"entries {run.expected_seq}..{row.seq - 1} are missing"
                if row.seq > run.expected_seq
                else "entry out of order",
                branch,
                row.seq,
                expected=str(run.expected_seq),
                actual=str(row.seq),
            )
        )
    if row.hash is not None and bytes(row.hash) != computed:
        report.add(
            Finding(
                5,
                "stored leaf hash does not match the entry bytes",
                branch,
                row.seq,
                expected=computed.hex(),
                actual=bytes(row.hash).hex(),
            )
        )
    # (1) strict decoding.
    try:
        entry = Entry.from_bytes(row.data, computed)
    except DecodeError as e:
        report.add(Finding(1, f"entry does not decode: {e}", branch, row.seq))
        run.prev, run.expected_seq = computed, row.seq + 1
        return computed
    # (2) the entry's own seq and branch agree with where it is stored.
    if entry.seq != row.seq or entry.branch != branch:
        report.add(
            Finding(
                2,
                "entry records another position (replayed or moved)",
                branch,
                row.seq,
                expected=f"{branch}:{row.seq}",
                actual=f"{entry.branch}:{entry.seq}",
            )
        )
    # (3) the hash chain, checked at every link.
    if entry.prev != run.prev and not (row.seq == 0 and branch != CANONICAL_BRANCH):
        report.add(
            Finding(
                3,
                "prev does not match the hash of the entry before",
                branch,
                row.seq,
                expected=run.prev.hex(),
                actual=entry.prev.hex(),
            )
        )
    if (row.seq == 0) != (entry.kind is Kind.GENESIS):
        report.add(Finding(3, "a genesis entry must be exactly entry 0", branch, row.seq))
    if entry.kind is Kind.GENESIS:
        run.genesis = entry
    elif entry.type == OpType.BRANCH_CREATE:
        payload = entry.body.get("payload")
        name = payload.get("branch_id") if isinstance(payload, dict) else None
        if isinstance(name, str):
            run.creates[name] = (entry, run.compact.root())
    # (4) content commitments and erasures.
    if entry.kind is Kind.OP and entry.type in KEY_ENTRY_TYPES:
        run.key_entries.append(
            (row.seq, str(entry.type), entry.body.get("payload"), bytes(entry.prev))
        )
    if (
        entry.kind is not Kind.EVENT
        and run.content
        and (
            row.content is not None
            or row.salt is not None
            or row.digest is not None
            or row.erased_by is not None
        )
    ):
        # Only events have content: bytes planted beside an operation are committed by
        # nothing, yet Ledger.content() would serve them.
        report.add(Finding(4, "an entry that is not an event has stored content", branch, row.seq))
    if entry.kind is Kind.EVENT:
        if run.content:
            _check_content(run, branch, row, entry, report)
        run.event_count += 1
        if run.caches:
            run.events.append((str(entry.body.get("id")), row.seq))
    elif entry.type == OpType.TOMBSTONE and run.content:
        payload = entry.body.get("payload")
        target = payload.get("target_event_id") if isinstance(payload, dict) else None
        if isinstance(target, str):
            erased = run.erased.pop(target, None)
            if erased is not None:
                if erased[1] != row.seq:
                    report.add(
                        Finding(
                            4,
                            f"event {target} is marked erased by entry {erased[1]}, but its "
                            f"TOMBSTONE is entry {row.seq}",
                            branch,
                            erased[0],
                            expected=str(row.seq),
                            actual=str(erased[1]),
                        )
                    )
                report.erased += 1
                # The note is about the erased event (its entry), naming the erasing one.
                report.add(
                    Finding(
                        4,
                        f"content of entry {erased[0]} erased by entry {row.seq} (event {target})",
                        branch,
                        erased[0],
                        severity="note",
                    )
                )
            else:
                # A TOMBSTONE always erases an earlier event of its branch, in its own
                # transaction: content still there means erasure was skipped or undone.
                report.add(
                    Finding(
                        4,
                        f"TOMBSTONE of event {target} erased nothing: the event's content is "
                        "still stored, or it is not an earlier event on this branch",
                        branch,
                        row.seq,
                    )
                )
                run.tombstones[target] = row.seq
    for check in checks:
        check.feed(branch, entry, report)
    run.prev, run.expected_seq = computed, row.seq + 1
    return computed


def _check_content(
    run: _BranchRun, branch: str, row: RowLike, entry: Entry, report: AuditReport
) -> None:
    event_id = str(entry.body.get("id"))
    commitment = entry.body.get("content_commitment")
    if row.content is None:
        if row.erased_by is None or row.erased_by <= row.seq:
            report.add(
                Finding(
                    4,
                    f"content of event {event_id} is missing and no TOMBSTONE erased it",
                    branch,
                    row.seq,
                )
            )
        else:
            run.erased[event_id] = (row.seq, row.erased_by)
        return
    if row.erased_by is not None:
        report.add(
            Finding(
                4,
                f"event {event_id} is marked erased by entry {row.erased_by} but its content "
                "is still stored",
                branch,
                row.seq,
            )
        )
    if event_id in run.tombstones:  # pragma: no cover - a TOMBSTONE always follows its target
        return
    if row.salt is None or len(row.salt) != 32:
        report.add(Finding(4, "event content is present but its salt is missing", branch, row.seq))
        return
    data = bytes(row.content)
    got = content_commitment(bytes(row.salt), data)
    if got != commitment:
        report.add(
            Finding(
                4,
                "content does not match the entry's commitment (edited)",
                branch,
                row.seq,
                expected=commitment.hex() if isinstance(commitment, bytes) else None,
                actual=got.hex(),
            )
        )
    if not run.caches:
        return
    digest = content_digest(data)
    if row.digest is None or bytes(row.digest) != digest:
        report.add(
            Finding(
                4,
                "stored content address does not match the content",
                branch,
                row.seq,
                expected=digest.hex(),
                actual=None if row.digest is None else bytes(row.digest).hex(),
            )
        )
