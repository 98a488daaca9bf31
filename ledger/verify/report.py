"""What the auditor's steps report and what they read: findings, the report, the sources' shape.

``Finding`` and ``AuditReport`` (numbered as in SPEC and docs/FORMAT.md, ``STEPS``), the
``ReplayCheck`` protocol through which steps 7-9 of the layers above see every entry, and
the ``LedgerSource`` protocol (with ``RowLike``, ``BranchLike``) every source of entries
answers: a SQLite store (``store_source``) or an auditor's bundle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from memroot.ledger.entries import Entry
from memroot.ledger.errors import IntegrityError

if TYPE_CHECKING:
    pass


MAX_FINDINGS: Final = 1000
STEPS: Final = {
    1: "decode every entry strictly",
    2: "seq contiguous from 0",
    3: "prev links",
    4: "content commitments and erasures",
    5: "Merkle roots at checkpoints and stored tree caches",
    6: "checkpoint signatures",
    7: "branch anchors",
    8: "memory roots replayed",
    9: "derived state replayed",
    10: "no rollback against the trusted state",
}

Progress = Callable[[int, int], None]
"""Called as ``progress(entries_done, entries_total)`` while verifying."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One violation (or, with ``severity="note"``, one fact worth reporting)."""

    step: int
    message: str
    branch: str | None = None
    seq: int | None = None
    expected: str | None = None
    actual: str | None = None
    severity: str = "error"

    def to_json(self) -> dict[str, Any]:
        """Return the finding as a JSON-ready dict."""
        return {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) is not None}

    def __str__(self) -> str:
        where = f"branch {self.branch} " if self.branch else ""
        where += f"entry {self.seq} " if self.seq is not None else ""
        text = f"step {self.step}: {where}{self.message}"
        if self.expected is not None or self.actual is not None:
            text += f" (expected {self.expected}, found {self.actual})"
        return text


@dataclass(slots=True)
class AuditReport:
    """Everything an audit checked and found."""

    entries: int = 0
    branches: int = 0
    checkpoints: int = 0
    erased: int = 0
    findings: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    trusted: dict[str, Any] = field(default_factory=dict)
    steps_checked: set[int] = field(default_factory=set)
    dropped_findings: int = 0
    """Violations found past ``MAX_FINDINGS`` and not kept (each still fails the report)."""
    dropped_by_step: dict[int, int] = field(default_factory=dict)
    """How many of ``dropped_findings`` each step found."""
    dropped_notes: int = 0
    """Notes past ``MAX_FINDINGS``, not kept."""

    @property
    def ok(self) -> bool:
        """True when no step found a violation (kept or dropped past the cap)."""
        return not self.findings and not self.dropped_findings

    @property
    def truncated_findings(self) -> bool:
        """True when findings or notes were dropped past the cap."""
        return bool(self.dropped_findings or self.dropped_notes)

    def violations(self, step: int) -> int:
        """Return how many violations ``step`` found, kept or dropped past the cap."""
        kept = sum(1 for f in self.findings if f.step == step)
        return kept + self.dropped_by_step.get(step, 0)

    def first_failure(self) -> Finding | None:
        """Return the first violation, or None when the report passes.

        A report whose only violations were dropped (never the case through ``add``, which
        drops only once ``MAX_FINDINGS`` are kept) still fails: it then returns a finding that
        says how many were dropped.
        """
        if self.findings:
            return self.findings[0]
        if self.dropped_findings:
            return Finding(1, f"{self.dropped_findings} violation(s) found and not kept")
        return None

    def raise_first(self) -> AuditReport:
        """Return the report when every step holds; else raise its first finding.

        Raises:
            IntegrityError: carrying the first finding's step, branch, seq, expected, actual.
        """
        f = self.first_failure()
        if f is not None:
            more = self.dropped_findings + len(self.findings) - 1
            raise IntegrityError(
                str(f) + (f" (and {more} more violation(s))" if more > 0 else ""),
                branch=f.branch,
                seq=f.seq,
                step=f.step,
                expected=f.expected,
                actual=f.actual,
            )
        return self

    def add(self, finding: Finding) -> None:
        """Record a finding; past ``MAX_FINDINGS`` of its kind it is counted, not kept.

        A violation past the cap still fails the report (``ok``, ``raise_first``): a cap
        bounds the memory of an audit, never its verdict (STYLE "Fail closed").
        """
        if finding.severity == "error":
            if len(self.findings) >= MAX_FINDINGS:
                self.dropped_findings += 1
                self.dropped_by_step[finding.step] = self.dropped_by_step.get(finding.step, 0) + 1
                return
            self.findings.append(finding)
            return
        if len(self.notes) >= MAX_FINDINGS:
            self.dropped_notes += 1
            return
        self.notes.append(finding)

    def to_json(self) -> dict[str, Any]:
        """Return the report as a JSON-ready dict."""
        return {
            "ok": self.ok,
            "entries": self.entries,
            "branches": self.branches,
            "checkpoints": self.checkpoints,
            "erased": self.erased,
            "steps": {
                str(k): {
                    "what": v,
                    "checked": k in self.steps_checked,
                    "violations": self.violations(k),
                }
                for k, v in STEPS.items()
            },
            "findings": [f.to_json() for f in self.findings],
            "notes": [f.to_json() for f in self.notes],
            "trusted": self.trusted,
            "truncated_findings": self.truncated_findings,
            "dropped_findings": self.dropped_findings,
            "dropped_notes": self.dropped_notes,
        }


class ReplayCheck(Protocol):
    """A check of a layer above the ledger (steps 7-9) fed every entry in order."""

    steps: tuple[int, ...]
    """The auditor's steps this check performs (reported as checked)."""

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """See one strictly decoded entry.

        A check may also take a run of consecutive events of ``branch`` in one call,
        ``feed_events(branch, events, report)``, which must do what ``feed`` on each would
        (findings included, in order). The audit gives each run to the checks that take
        runs first, then event by event to the others: findings keep their order as long as
        only one check of those that take runs reports on events (the roots' replay; the
        memory and falsification replays report at ``finish``), before any other does.
        """

    def finish(self, report: AuditReport) -> None:
        """Compare what was replayed with what is stored; add findings to ``report``."""


@dataclass(slots=True)
class AfterScan:
    """A ``ReplayCheck`` that sees no entry and runs ``run(report)`` once they were all seen.

    For the checks of a source that are not per entry (a tiles directory's pyramid, a
    bundle's sections, witness cosignatures): run as a check, their findings land before the
    audit moves the trusted state forward, which it does only for a report that passes.
    """

    run: Callable[[AuditReport], None]
    steps: tuple[int, ...] = ()

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """See nothing: the check runs at ``finish``."""

    def feed_events(self, branch: str, events: Sequence[Entry], report: AuditReport) -> None:
        """See nothing (a run of events costs no per-entry call)."""

    def finish(self, report: AuditReport) -> None:
        """Run the check."""
        self.run(report)


class RowLike(Protocol):
    """One stored entry as the auditor reads it (``store.EntryRow`` or a bundle row)."""

    @property
    def seq(self) -> int:
        """The position the source stores the entry at."""

    @property
    def hash(self) -> bytes | None:
        """The cached leaf hash, or None when the source keeps no cache."""

    @property
    def data(self) -> bytes:
        """The exact entry bytes."""

    @property
    def digest(self) -> bytes | None:
        """The content address (BLAKE3 of the content), when the source keeps one."""

    @property
    def salt(self) -> bytes | None:
        """The event's commitment salt, or None when erased (or no event)."""

    @property
    def content(self) -> bytes | None:
        """The event's content bytes, or None when erased (or no event)."""

    @property
    def erased_by(self) -> int | None:
        """The seq of the TOMBSTONE that erased the content, if any."""


class BranchLike(Protocol):
    """A branch's chain head as the source records it."""

    @property
    def no(self) -> int:
        """The source's number for the branch (creation order)."""

    @property
    def name(self) -> str:
        """The branch name."""

    @property
    def size(self) -> int:
        """The number of entries the source claims."""

    @property
    def head(self) -> bytes:
        """The hash of the last entry the source claims."""


class LedgerSource(Protocol):
    """What the auditor reads; ``Store`` methods of the same names, or a bundle reader."""

    @property
    def has_caches(self) -> bool:
        """True when rows carry cached leaf hashes and content addresses and tree nodes exist."""

    @property
    def has_content(self) -> bool:
        """True when rows carry event content and salts (step 4 is checked only then)."""

    def branches(self) -> Sequence[BranchLike]:
        """Return every branch, parents before their forks."""

    def branch(self, name: str) -> BranchLike:
        """Return one branch by name (``NotFoundError`` if absent)."""

    def iter_entry_rows(self, branch_no: int) -> Iterable[RowLike]:
        """Yield a branch's rows in seq order (``MemrootError`` if the source is unreadable)."""

    def entry_row(self, branch_no: int, seq: int) -> RowLike:
        """Return one row (``NotFoundError`` if absent)."""

    def checkpoints(self, branch_no: int) -> list[tuple[int, bytes, str]]:
        """Return ``(size, root, note)`` of every signed checkpoint, by size."""

    def latest_checkpoint(self, branch_no: int) -> tuple[int, bytes, str] | None:
        """Return the checkpoint with the largest size, or None."""

    def meta(self, key: str) -> Any:
        """Return a ledger-wide value the source serves (``ledger_id``, ``origin``, ...)."""

    def read_nodes(self, branch_no: int, ids: Sequence[tuple[int, int]]) -> list[bytes]:
        """Return stored complete-subtree hashes (only called when ``has_caches``)."""

    def node_mismatches(
        self, branch_no: int, nodes: Sequence[tuple[int, int, bytes]]
    ) -> list[tuple[int, int, bytes, bytes | None]]:
        """Return ``(level, index, recomputed, stored)`` for cached nodes that differ."""

    def event_index_mismatches(
        self, branch_no: int, events: Sequence[tuple[str, int]]
    ) -> list[tuple[str, int, int | None]]:
        """Return ``(event id, seq, indexed key)`` for events the index misplaces or lacks."""

    def event_index_size(self) -> int:
        """Return the number of rows in the event index (only called when ``has_caches``)."""


_CHUNK: Final = 4096
