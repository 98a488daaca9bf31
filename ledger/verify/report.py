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
    truncated_findings: bool = False
    steps_checked: set[int] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        """True when no step found a violation."""
        return not self.findings

    def raise_first(self) -> AuditReport:
        """Return the report when every step holds; else raise its first finding.

        Raises:
            IntegrityError: carrying the first finding's step, branch, seq, expected, actual.
        """
        if self.findings:
            f = self.findings[0]
            raise IntegrityError(
                str(f),
                branch=f.branch,
                seq=f.seq,
                step=f.step,
                expected=f.expected,
                actual=f.actual,
            )
        return self

    def add(self, finding: Finding) -> None:
        """Record a finding (errors are capped at MAX_FINDINGS, notes are not kept past it)."""
        target = self.findings if finding.severity == "error" else self.notes
        if len(target) >= MAX_FINDINGS:
            self.truncated_findings = True
            return
        target.append(finding)

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
                    "violations": sum(1 for f in self.findings if f.step == k),
                }
                for k, v in STEPS.items()
            },
            "findings": [f.to_json() for f in self.findings],
            "notes": [f.to_json() for f in self.notes],
            "trusted": self.trusted,
            "truncated_findings": self.truncated_findings,
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
