"""Replaying the ledger into derived state: ``rebuild`` and the auditor's step 9.

The derived tables are a cache (RFC-0002): ``rebuild`` drops them and replays every entry,
and the result must be identical (it reports the state digest before and after). Step 9 of the
verifier (``MemoryReplayCheck``) replays the entries it reads into a throwaway in-memory
database and compares that state's digest with the one the ledger file holds, naming the
first differing row when they disagree.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import apsw

from ledger.entries import CANONICAL_BRANCH, Entry
from ledger.ledger import Ledger
from ledger.verify import AuditReport, Finding
from projections import tables
from projections.backends import MemState
from projections.digest import first_difference, state_digest
from projections.engine import Engine
from projections.hook import fold_entries

__all__ = ["MemoryReplayCheck", "RebuildReport", "rebuild", "replay"]

MAX_SKIP_NOTES: Final = 20


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """What ``rebuild`` did: entries replayed, state sizes, digests before and after."""

    entries: int
    objects: int
    versions: int
    edges: int
    entities: int
    skipped: int
    before: bytes | None
    after: bytes
    seconds: float

    @property
    def identical(self) -> bool | None:
        """True when the rebuilt state equals the one it replaced (None: there was none)."""
        return None if self.before is None else self.before == self.after

    def to_dict(self) -> dict[str, Any]:
        """Return the report as a JSON-ready dict (digests in hex)."""
        return {
            "entries": self.entries,
            "objects": self.objects,
            "versions": self.versions,
            "edges": self.edges,
            "entities": self.entities,
            "skipped": self.skipped,
            "digest_before": None if self.before is None else self.before.hex(),
            "digest_after": self.after.hex(),
            "identical": self.identical,
            "seconds": round(self.seconds, 3),
        }


def _count(db: apsw.Connection, sql: str) -> int:
    row = db.execute(sql).fetchone()
    return 0 if row is None else int(row[0])


def rebuild(ledger: Ledger, branch: str = CANONICAL_BRANCH) -> RebuildReport:
    """Drop the derived memory tables and replay the whole ledger into them, atomically.

    Raises:
        DecodeError: if a stored entry does not decode (nothing is changed).
        StorageError: if the file cannot be written (nothing is changed).
    """
    t0 = time.perf_counter()
    with ledger.store.write() as db:
        before = state_digest(db, branch=branch) if tables.installed(db) else None
        tables.drop(db)
        tables.install(db, indexes=False)
        n = fold_entries(db, ledger.entries(branch=branch), fresh=True)
        tables.create_indexes(db)
        after = state_digest(db, branch=branch)
        report = RebuildReport(
            entries=n,
            objects=_count(db, "SELECT count(*) FROM mem_objects WHERE vto IS NULL"),
            versions=_count(db, "SELECT count(*) FROM mem_objects"),
            edges=_count(db, "SELECT count(*) FROM mem_edges"),
            entities=_count(db, "SELECT count(*) FROM mem_entities WHERE vto IS NULL"),
            skipped=_count(db, "SELECT count(*) FROM mem_skipped"),
            before=before,
            after=after,
            seconds=time.perf_counter() - t0,
        )
    return report


def replay(entries: Iterable[Entry], *, fts: bool = False) -> apsw.Connection:
    """Replay entries into a new in-memory database and return it (for comparisons).

    Refused entries are skipped and recorded, as in ``rebuild``.
    """
    db = apsw.Connection(":memory:")
    db.execute("BEGIN")
    tables.install(db, fts=fts, indexes=False)
    fold_entries(db, entries, fresh=True)
    db.execute("COMMIT")
    return db


class MemoryReplayCheck:
    """Step 9: replay derived state and compare it with what the ledger file materialised.

    Fed every entry by ``ledger.verify.audit``; ``finish`` opens the file at ``path``
    read-only and compares state digests (as of the last entry the stored state has folded,
    when it lags the ledger). Entries the rules refuse (appended without the hook) are
    skipped and reported as notes, exactly as the stored state skipped them.
    """

    steps: tuple[int, ...] = (9,)

    def __init__(self, path: Path, branch: str = CANONICAL_BRANCH) -> None:
        """Check the derived state stored in the ledger file at ``path``."""
        self.path = Path(path)
        self.branch = branch
        self.db = apsw.Connection(":memory:")
        self.db.execute("BEGIN")
        tables.install(self.db, fts=False, indexes=False)
        self.state = MemState(self.db)
        self.engine = Engine(self.state)
        self.size = 0

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """Fold one entry of the canonical branch into the replayed state."""
        if branch != self.branch or entry.branch != branch:
            return
        self.engine.fold(entry)
        self.size = max(self.size, entry.seq + 1)

    def finish(self, report: AuditReport) -> None:
        """Compare the replayed state with the stored one; add findings to ``report``."""
        self.state.finish()
        for branch, seq, op_type, reason in self.state.skipped[:MAX_SKIP_NOTES]:
            report.add(
                Finding(
                    9,
                    f"{op_type} entry is not a valid memory operation and is "
                    f"ignored by the memory model: {reason}",
                    branch,
                    seq,
                    severity="note",
                )
            )
        if len(self.state.skipped) > MAX_SKIP_NOTES:
            report.add(
                Finding(
                    9,
                    f"{len(self.state.skipped) - MAX_SKIP_NOTES} more entries "
                    "are ignored by the memory model",
                    self.branch,
                    severity="note",
                )
            )
        try:
            stored = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        except apsw.Error as e:
            report.add(Finding(9, f"cannot open {self.path} to compare derived state: {e}"))
            return
        try:
            self._compare(stored, report)
        except apsw.Error as e:
            report.add(
                Finding(9, f"the stored derived memory state cannot be read: {e}", self.branch)
            )
        finally:
            stored.close()
            self.db.execute("COMMIT")

    def _compare(self, stored: apsw.Connection, report: AuditReport) -> None:
        stored.execute("BEGIN")
        try:
            if not tables.installed(stored):
                report.add(
                    Finding(
                        9,
                        "the ledger holds no derived memory state to compare (it "
                        "was never materialised); memroot rebuild creates it",
                        self.branch,
                        severity="note",
                    )
                )
                return
            row = stored.execute(
                "SELECT size FROM mem_heads WHERE branch = ?", (self.branch,)
            ).fetchone()
            head = 0 if row is None else int(row[0])
            if head > self.size:
                report.add(
                    Finding(
                        9,
                        f"the derived memory state claims {head} entries but the "
                        f"ledger has {self.size}",
                        self.branch,
                        expected=str(self.size),
                        actual=str(head),
                    )
                )
                return
            as_of = None
            if head < self.size:
                report.add(
                    Finding(
                        9,
                        f"the derived memory state covers {head} of {self.size} "
                        "entries (appended without the memory hook); compared "
                        "up to there. Any memory command brings it up to date",
                        self.branch,
                        severity="note",
                    )
                )
                as_of = head - 1
            got = state_digest(stored, as_of=as_of, branch=self.branch)
            want = state_digest(self.db, as_of=as_of, branch=self.branch)
            if got == want:
                return
            diff = first_difference(stored, self.db, as_of=as_of, branch=self.branch)
            seq = None
            if diff is not None and diff.table != "mem_events" and len(diff.key) > 1:
                seq = diff.key[-1] if isinstance(diff.key[-1], int) else None
            report.add(
                Finding(
                    9,
                    "the stored derived memory state differs from the replay of the ledger"
                    + (f": {diff}" if diff is not None else ""),
                    self.branch,
                    seq,
                    expected=want.hex(),
                    actual=got.hex(),
                )
            )
        finally:
            stored.execute("COMMIT")
