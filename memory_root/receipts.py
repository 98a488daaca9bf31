"""Read receipts: which memories a run was handed, recorded in the ledger (FORMAT.md §10).

``Memory.recall(..., receipt=run_id)`` (and the MCP ``recall`` tool) appends one
``READ_RECEIPT`` operation naming the run, the query, the memory root in force and every
object returned with its version and state, so an auditor can tie a decision to what the
agent knew. ``receipts`` lists them, ``readers`` says which runs read an object, and
``ReceiptsCheck`` (verify step 9) replays them: every named version was the object's current
version on the branch right before the receipt, with the state the receipt says, and the
root in force was that branch's newest live root.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from memroot.ledger.entries import Entry, Kind, OpInput
from memroot.ledger.errors import MemrootError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport, Finding
from memroot.ledger.vocab import OpType

if TYPE_CHECKING:
    from memroot.projections.query import Result

__all__ = ["Receipt", "ReceiptsCheck", "readers", "receipt_op", "receipts"]

POLICY_VERSION: Final = "memroot-receipt/1"
_RUN_ID: Final = re.compile(r"[\x21-\x7e]{1,200}\Z")
QUERY_KEYS: Final = (
    "anchor",
    "as_of",
    "branch",
    "git_branch",
    "limit",
    "mode",
    "namespaces",
    "text",
    "types",
)


@dataclass(frozen=True, slots=True)
class Receipt:
    """One ``READ_RECEIPT`` entry, decoded."""

    branch: str
    seq: int
    ts: int
    actor_id: str
    run_id: str
    query: dict[str, Any]
    memory_root: bytes | None
    objects: tuple[dict[str, Any], ...]

    @classmethod
    def of(cls, entry: Entry) -> Receipt:
        """Decode a ``READ_RECEIPT`` entry.

        Raises:
            ValidationError: the payload is not a well-formed receipt.
        """
        p = entry.body.get("payload")
        if not isinstance(p, dict) or set(p) != {"run_id", "query", "memory_root", "objects"}:
            raise ValidationError(
                "a READ_RECEIPT payload has exactly run_id, query, memory_root, objects",
                field="payload",
            )
        objects = p["objects"]
        root = p["memory_root"]
        if (
            not isinstance(p["run_id"], str)
            or not isinstance(p["query"], dict)
            or not (root is None or (isinstance(root, bytes) and len(root) == 32))
            or not isinstance(objects, list)
            or not all(
                isinstance(o, dict)
                and set(o) == {"id", "version", "state"}
                and isinstance(o["id"], str)
                and type(o["version"]) is int
                and o["state"] in ("live", "stale", "falsified")
                for o in objects
            )
        ):
            raise ValidationError("a READ_RECEIPT payload field is malformed", field="payload")
        return cls(
            entry.branch,
            entry.seq,
            entry.ts,
            str(entry.body.get("actor_id")),
            p["run_id"],
            dict(p["query"]),
            root,
            tuple(objects),
        )

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (the root in hex)."""
        return {
            "branch": self.branch,
            "seq": self.seq,
            "ts": self.ts,
            "actor_id": self.actor_id,
            "run_id": self.run_id,
            "query": self.query,
            "memory_root": None if self.memory_root is None else self.memory_root.hex(),
            "objects": [dict(o) for o in self.objects],
        }


def receipt_op(
    ledger: Ledger,
    run_id: str,
    query: dict[str, Any],
    results: Sequence[Result],
    *,
    branch: str,
    actor_id: str,
    actor_type: str,
    namespace_id: str,
) -> OpInput:
    """Return the ``READ_RECEIPT`` of a recall that returned ``results`` on ``branch``.

    Raises:
        ValidationError: a run id that is not 1-200 printable ASCII characters.
    """
    from memroot.memory_root import Roots

    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValidationError(
            "a receipt's run id is 1-200 printable ASCII characters without spaces",
            field="receipt",
        )
    live = Roots(ledger).latest(branch, live_only=True)
    payload = {
        "run_id": run_id,
        "query": {k: v for k, v in sorted(query.items()) if v not in (None, (), [])},
        "memory_root": None if live is None else live.root,
        "objects": [
            {"id": r.object.id, "version": r.object.version, "state": r.object.state}
            for r in results
        ],
    }
    return OpInput(
        op_type=OpType.READ_RECEIPT.value,
        actor_id=actor_id,
        actor_type=actor_type,
        namespace_id=namespace_id,
        payload=payload,
        policy_version=POLICY_VERSION,
    )


def receipts(ledger: Ledger, *, run: str | None = None) -> list[Receipt]:
    """Return every well-formed receipt (of ``run``), branch by branch, oldest first.

    Reads every entry: receipts have no index yet.
    """
    out = []
    for b in ledger.store.branches():
        for e in ledger.entries(0, None, b.name):
            if e.kind is Kind.OP and e.type == OpType.READ_RECEIPT.value:
                try:
                    r = Receipt.of(e)
                except ValidationError:
                    continue
                if run is None or r.run_id == run:
                    out.append(r)
    return out


def readers(ledger: Ledger, object_id: str) -> list[dict[str, Any]]:
    """Return which runs read an object: run, branch, seq, version, actor, oldest first."""
    return [
        {
            "run_id": r.run_id,
            "branch": r.branch,
            "seq": r.seq,
            "actor_id": r.actor_id,
            "version": o["version"],
        }
        for r in receipts(ledger)
        for o in r.objects
        if o["id"] == object_id
    ]


class ReceiptsCheck:
    """Verify step 9 for receipts: each names versions and states that held at its entry.

    Fed every entry; ``finish`` opens the file read-only and checks each receipt against the
    stored versioned tables (which step 9 itself checks against a replay) and the stored
    state history.
    """

    steps: tuple[int, ...] = (9,)

    def __init__(self, path: Path, *, ledger: Ledger | None = None) -> None:
        """Check the receipts of the ledger file at ``path``.

        ``ledger``: the open ledger whose read transaction the audit runs in, read instead
        of opening ``path`` (one snapshot for every check) and left open.
        """
        self.path = Path(path if ledger is None else ledger.path)
        self.shared = ledger
        self.found: list[Entry] = []

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """Keep every ``READ_RECEIPT`` entry."""
        if entry.branch == branch and entry.type == OpType.READ_RECEIPT.value:
            self.found.append(entry)

    def finish(self, report: AuditReport) -> None:
        """Check every receipt; add a step 9 finding for each that does not hold."""
        if not self.found:
            return
        from memroot.memory_root.falsify import Falsifier
        from memroot.projections.query import get_object, object_at

        with (
            contextlib.nullcontext(self.shared)
            if self.shared is not None
            else Ledger.open(self.path, readonly=True)
        ) as ledger:
            db = ledger.derived.db
            f = Falsifier(ledger)
            for entry in self.found:
                where = (entry.branch, entry.seq)
                try:
                    r = Receipt.of(entry)
                except ValidationError as e:
                    report.add(Finding(9, f"READ_RECEIPT: {e}", *where))
                    continue
                self._root(ledger, r, report)
                # What the reader was shown: state right after entry ``at`` (its as_of, or
                # the entry before the receipt, which lands in the query's transaction).
                asked = r.query.get("as_of")
                at = asked if type(asked) is int and 0 <= asked < r.seq else r.seq - 1
                anchor = r.query.get("anchor")
                for o in r.objects:
                    try:
                        if isinstance(anchor, str):
                            # A read at an anchor showed each object's state there
                            # (invalidation gated by provenance, projections.gated).
                            obj = object_at(db, o["id"], anchor, branch=r.branch, as_of=at)
                        else:
                            obj = get_object(db, o["id"], as_of=at, branch=r.branch)
                    except MemrootError:
                        obj = None
                    if obj is None or obj.version != o["version"]:
                        report.add(
                            Finding(
                                9,
                                f"READ_RECEIPT of run {r.run_id!r} names object {o['id']} "
                                f"version {o['version']}, which was not its current version "
                                f"on the branch at entry {at}",
                                *where,
                                expected=str(o["version"]),
                                actual=None if obj is None else str(obj.version),
                            )
                        )
                        continue
                    state = "live"
                    try:
                        history = f.history(o["id"], r.branch)
                    except MemrootError:
                        history = []
                    for c in history:
                        if c.branch != r.branch or c.seq <= at:
                            state = c.state
                    if isinstance(anchor, str):
                        state = obj.state
                    if state != o["state"]:
                        report.add(
                            Finding(
                                9,
                                f"READ_RECEIPT of run {r.run_id!r} says object {o['id']} was "
                                f"{o['state']}, but it was {state} at entry {at}",
                                *where,
                                expected=o["state"],
                                actual=state,
                            )
                        )

    @staticmethod
    def _root(ledger: Ledger, r: Receipt, report: AuditReport) -> None:
        from memroot.memory_root import Roots

        if r.memory_root is None:
            return
        try:
            rec = Roots(ledger).get(r.memory_root)
        except MemrootError:
            rec = None
        if rec is None or (rec.branch == r.branch and rec.seq >= r.seq):
            report.add(
                Finding(
                    9,
                    f"READ_RECEIPT of run {r.run_id!r} names memory root "
                    f"{r.memory_root.hex()[:16]}, which was not recorded before it",
                    r.branch,
                    r.seq,
                )
            )
