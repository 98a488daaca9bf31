"""Memory-root records in an auditor's bundle, and the audit check that reads them back.

``RootsSection`` writes one record per stored memory root into the bundle section
``memory_roots``::

    {"branch", "seq", "state", "payload": <the SNAPSHOT payload: preimage + memory_root, §6>,
     "summaries": [{"id", "rule", "rule_cbor", "digest", "count", "data"}, ...]}

``RootsSectionCheck`` (a ``ReplayCheck`` for ``memroot.ledger.bundle.audit``) checks, from the
bundle alone,
that every record is the SNAPSHOT entry it claims (step 8): its payload is the one of the
SNAPSHOT entry at ``(branch, seq)`` and hashes to the root it names, each summary's bytes hash
to its digest (``summary_digest``) and its rule bytes to its rule digest, and every SNAPSHOT
entry has a record. Stored summaries thereby travel with proof of what they are; the
root states (live / stale / falsified) are replayed by the falsification check, which takes
a v3 root's projection list from its record (``bundle_lists``; used only when it hashes to
the root's ``projections``, docs/FORMAT.md §6.16).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

from memroot.ledger.bundle.export import BundleReader
from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import MemrootError
from memroot.ledger.hashing import domain_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport, Finding
from memroot.ledger.vocab import OpType
from memroot.memory_root import records
from memroot.memory_root.root import ProjectionDigest, RootPreimage
from memroot.projections.projection import RULE_TAG, SummaryDigest, summary_digest

__all__ = ["SECTION", "RootsSection", "RootsSectionCheck", "bundle_lists"]

SECTION: Final = "memory_roots"


class RootsSection:
    """``BundleSection`` carrying every stored memory root with its summaries."""

    name = SECTION

    def records(self, ledger: Ledger) -> Iterable[Any]:
        """Yield one record per stored root, by branch and seq (streamed)."""
        return _iter_records(ledger)


def _iter_records(ledger: Ledger) -> Iterator[dict[str, Any]]:
    db = ledger.derived.db
    if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_roots'").fetchall():
        return
    roots = [bytes(r[0]) for r in db.execute("SELECT root FROM memory_roots ORDER BY branch, seq")]
    for root in roots:
        rec = records.get_root(db, root)
        yield {
            "branch": rec.branch,
            "payload": {**rec.preimage().to_cbor(), "memory_root": rec.root},
            "seq": rec.seq,
            "state": rec.state,
            "summaries": [
                {
                    "count": s.count,
                    "data": s.data,
                    "digest": s.digest,
                    "id": s.projection,
                    "rule": s.rule,
                    "rule_cbor": s.rule_cbor,
                }
                for s in records.summaries(db, rec.root)
            ],
        }


def bundle_lists(
    bundle: BundleReader,
) -> Callable[[bytes], Sequence[ProjectionDigest] | None]:
    """Return the reader of a root's projection list from the bundle's root records.

    The list a record's summaries make (id, rule, the digest of ``data``, count, sorted by
    id), read from the section once, at the first call. A hint: the falsification replay
    uses it only when it hashes to the root's ``projections``, and ``RootsSectionCheck``
    reports a record whose list does not.
    """
    found: dict[bytes, list[ProjectionDigest]] | None = None

    def lists(root: bytes) -> Sequence[ProjectionDigest] | None:
        nonlocal found
        if found is None:
            found = {}
            try:
                if SECTION in bundle.section_names():
                    for rec in bundle.section(SECTION):
                        _remember(rec, found)
            except MemrootError:
                pass  # unreadable records: RootsSectionCheck reports them
        return found.get(root)

    return lists


def _remember(rec: Any, found: dict[bytes, list[ProjectionDigest]]) -> None:
    """Keep the list of one v3 record (a malformed one is left out)."""
    payload = rec.get("payload") if isinstance(rec, dict) else None
    if not isinstance(payload, dict) or payload.get("v") != 3:
        return
    root = payload.get("memory_root")
    try:
        items = [
            ProjectionDigest(
                s["id"], s["rule"], SummaryDigest(summary_digest(s["data"])), s["count"]
            )
            for s in rec.get("summaries", [])
        ]
    except (TypeError, KeyError, ValueError, AttributeError):
        return
    if isinstance(root, bytes):
        found[root] = sorted(items, key=lambda d: str(d.id))


class RootsSectionCheck:
    """Step 8 over a bundle: the carried root records are the SNAPSHOT entries they claim."""

    steps: tuple[int, ...] = (8,)

    def __init__(self, bundle: BundleReader) -> None:
        """Read the ``memory_roots`` section of ``bundle`` at ``finish`` (if it has one)."""
        self.bundle = bundle
        self.snapshots: dict[tuple[str, int], Any] = {}

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """Remember each SNAPSHOT entry's payload."""
        if entry.kind is Kind.OP and entry.type == OpType.SNAPSHOT:
            self.snapshots[(branch, entry.seq)] = entry.body.get("payload")

    def finish(self, report: AuditReport) -> None:
        """Compare every carried record with its SNAPSHOT entry and its own digests."""
        if SECTION not in self.bundle.section_names():
            if self.snapshots:
                report.add(
                    Finding(
                        8,
                        "the bundle carries SNAPSHOT entries but no memory-root "
                        "records; roots were replayed from the entries only",
                        severity="note",
                    )
                )
            return
        seen: set[tuple[str, int]] = set()
        try:
            for rec in self.bundle.section(SECTION):
                self._check(rec, seen, report)
        except MemrootError as e:
            report.add(Finding(8, f"the memory-root records cannot be read: {e}"))
            return
        for branch, seq in sorted(set(self.snapshots) - seen):
            report.add(Finding(8, "a SNAPSHOT entry has no root record in the bundle", branch, seq))

    def _check(self, rec: Any, seen: set[tuple[str, int]], report: AuditReport) -> None:
        if not isinstance(rec, dict):
            report.add(Finding(8, "a memory-root record is not a map"))
            return
        branch, seq = rec.get("branch"), rec.get("seq")
        where = (str(branch), seq if isinstance(seq, int) else None)
        try:
            pre, root = RootPreimage.from_payload(rec.get("payload"))
        except (MemrootError, TypeError, ValueError, KeyError) as e:
            report.add(Finding(8, f"a memory-root record's payload is malformed: {e}", *where))
            return
        if pre.root() != root:
            report.add(
                Finding(
                    8,
                    "a memory-root record does not hash to its root",
                    *where,
                    expected=pre.root().hex(),
                    actual=bytes(root).hex(),
                )
            )
        key = (str(branch), seq) if isinstance(seq, int) else None
        entry_payload = self.snapshots.get(key) if key is not None else None
        if key is None or entry_payload is None:
            report.add(Finding(8, "a memory-root record names no SNAPSHOT entry", *where))
            return
        seen.add(key)
        if entry_payload != rec.get("payload"):
            report.add(Finding(8, "a memory-root record differs from its SNAPSHOT entry", *where))
        if not pre.list_known:  # a v3 root: the list is the summaries', by its hash (§6.16)
            pre = _with_listed(pre, rec.get("summaries"), where, report)
        digests = {p.id: p for p in pre.projections}
        for s in rec.get("summaries", []):
            p = digests.get(str(s.get("id"))) if isinstance(s, dict) else None
            if p is None:
                report.add(Finding(8, f"a summary of an unknown projection: {s!r:.80}", *where))
                continue
            data, rule_cbor = s.get("data"), s.get("rule_cbor")
            if not isinstance(data, bytes) or summary_digest(data) != p.digest:
                report.add(
                    Finding(
                        8,
                        f"the {p.id} summary bytes do not hash to its digest",
                        *where,
                        expected=p.digest.hex(),
                    )
                )
            if not isinstance(rule_cbor, bytes) or domain_hash(RULE_TAG, rule_cbor) != p.rule:
                report.add(
                    Finding(
                        8,
                        f"the {p.id} rule bytes do not hash to its rule digest",
                        *where,
                        expected=p.rule.hex(),
                    )
                )


def _with_listed(
    pre: RootPreimage, summaries: Any, where: tuple[str, int | None], report: AuditReport
) -> RootPreimage:
    """Attach to a v3 preimage the list its record's summaries make, if it hashes right."""
    try:
        items = sorted(
            (
                ProjectionDigest(
                    s["id"], s["rule"], SummaryDigest(summary_digest(s["data"])), s["count"]
                )
                for s in summaries
            ),
            key=lambda d: d.id,
        )
        return pre.with_projections(items)
    except (TypeError, KeyError, ValueError) as e:
        report.add(
            Finding(
                8,
                "a v3 memory-root record's summaries are not the projection list its root "
                f"commits to: {e}",
                *where,
                expected=pre.listed.hex(),
            )
        )
        return pre
