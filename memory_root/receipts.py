"""Read receipts: which memories a run was handed, recorded in the ledger (FORMAT.md §10).

``Memory.recall(..., receipt=run_id)`` (and the MCP ``recall`` tool) appends one
``READ_RECEIPT`` operation naming the run, the query, the memory root in force (after a
cascade, the live re-snapshot that replaced the stale root) and every object returned with
its version, its state and a digest of the value the run was handed (format version 2), so
an auditor can tie a decision to what the agent knew. ``receipts`` lists them, ``readers``
says which runs read an object, ``handed`` reads back, strictly, the values a receipt names,
and ``ReceiptsCheck`` (verify step 9) replays them: every named version was the object's
current version on the branch right before the receipt, with the state and the value digest
the receipt says, and the root in force was recorded before it. Version 1 receipts (no
digests) keep verifying.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from memroot.ledger.encoding import encode
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind, OpInput, _library_op
from memroot.ledger.errors import IntegrityError, MemrootError, ValidationError
from memroot.ledger.hashing import domain_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport, Finding
from memroot.ledger.vocab import OpType

if TYPE_CHECKING:
    from memroot.memory_root.records import RootRecord
    from memroot.projections.model import MemoryObject
    from memroot.projections.query import Result

__all__ = [
    "Handed",
    "Receipt",
    "ReceiptsCheck",
    "handed",
    "readers",
    "receipt_op",
    "receipts",
    "root_in_force",
    "root_in_force_at",
    "value_digest",
]

RECEIPT_V: Final = 2
"""The payload version memroot writes (FORMAT.md §10); version 1 payloads have no ``v``."""
POLICY_VERSION: Final = "memroot-receipt/2"
VALUE_TAG: Final = "memroot/receipt-value/v2"
"""Domain tag of a receipt's value digest (FORMAT.md §10.1)."""
_V1_KEYS: Final = frozenset({"run_id", "query", "memory_root", "objects"})
_V2_KEYS: Final = frozenset({"v", *_V1_KEYS})
_STATES: Final = ("live", "stale", "falsified")
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
    version: int = 1
    """The payload's format version: 1 (no value digests) or 2 (``value_digest`` each)."""

    @classmethod
    def of(cls, entry: Entry) -> Receipt:
        """Decode a ``READ_RECEIPT`` entry (payload version 1 or 2).

        Raises:
            ValidationError: the payload is not a well-formed receipt.
        """
        p = entry.body.get("payload")
        if not isinstance(p, dict) or set(p) not in (_V1_KEYS, _V2_KEYS):
            raise ValidationError(
                "a READ_RECEIPT payload has exactly run_id, query, memory_root, objects "
                "(and v, from version 2)",
                field="payload",
            )
        version = p.get("v", 1)
        keys = {"id", "version", "state"} | ({"value_digest"} if version == 2 else set())
        objects = p["objects"]
        root = p["memory_root"]
        if (
            version not in (1, 2)
            or type(version) is not int
            or not isinstance(p["run_id"], str)
            or not isinstance(p["query"], dict)
            or not (root is None or (isinstance(root, bytes) and len(root) == 32))
            or not isinstance(objects, list)
            or not all(
                isinstance(o, dict)
                and set(o) == keys
                and isinstance(o["id"], str)
                and type(o["version"]) is int
                and o["state"] in _STATES
                and (
                    version == 1
                    or (isinstance(o["value_digest"], bytes) and len(o["value_digest"]) == 32)
                )
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
            version,
        )

    @property
    def at(self) -> int:
        """The entry whose state the reader was shown: its ``as_of``, else the one before."""
        asked = self.query.get("as_of")
        return asked if type(asked) is int and 0 <= asked < self.seq else self.seq - 1

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
            "v": self.version,
            "objects": [
                {k: (v.hex() if isinstance(v, bytes) else v) for k, v in o.items()}
                for o in self.objects
            ],
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
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise ValidationError(
            "a receipt's run id is 1-200 printable ASCII characters without spaces",
            field="receipt",
        )
    live = root_in_force(ledger, branch)
    payload = {
        "v": RECEIPT_V,
        "run_id": run_id,
        "query": {k: v for k, v in sorted(query.items()) if v not in (None, (), [])},
        "memory_root": None if live is None else bytes(live.root),
        "objects": [
            {
                "id": r.object.id,
                "version": r.object.version,
                "state": r.object.state,
                "value_digest": value_digest(r.object),
            }
            for r in results
        ],
    }
    # A reserved type: a caller's READ_RECEIPT would be checked by step 9 forever after.
    return _library_op(
        OpInput(
            op_type=OpType.READ_RECEIPT.value,
            actor_id=actor_id,
            actor_type=actor_type,
            namespace_id=namespace_id,
            payload=payload,
            policy_version=POLICY_VERSION,
        )
    )


def value_digest(obj: MemoryObject) -> bytes:
    """Return the digest of the value a reader is handed (FORMAT.md §10.1).

    ``SHA-256(VALUE_TAG || 0x00 || CBOR({"structured_value": ..., "value": ...}))``, the map
    in canonical CBOR (§2), ``structured_value`` null when the object has none.
    """
    return domain_hash(
        VALUE_TAG, encode({"structured_value": obj.structured_value, "value": obj.value})
    )


def _recorded(ledger: Ledger, branch: str, *, live_only: bool = False) -> list[RootRecord]:
    """Return the roots recorded on ``branch``, newest first in the order of their entries.

    A SNAPSHOT's root is recorded at its entry, a cascade's re-snapshot at its CASCADE entry
    (several in one CASCADE in the order it lists them, the last the newest). ``live_only``:
    the newest live SNAPSHOT root and the live re-snapshots only (what ``root_in_force``
    needs, without reading every root of a long chain).
    """
    from memroot.memory_root import records

    db = ledger.derived.db
    if live_only:
        newest = records.latest_root(db, branch, live_only=True)
        snaps = [] if newest is None else [newest]
    else:
        snaps = [
            records.get_root(db, bytes(x))
            for (x,) in db.execute("SELECT root FROM memory_roots WHERE branch = ?", (branch,))
        ]
    again = records.resnapshots_of(db, branch)
    keyed = [((r.seq, 0), r) for r in snaps] + [
        ((r.seq, i + 1), r) for i, r in enumerate(again) if not live_only or r.state == "live"
    ]
    keyed.sort(key=lambda k: k[0], reverse=True)
    return [r for _, r in keyed]


def root_in_force(ledger: Ledger, branch: str = CANONICAL_BRANCH) -> RootRecord | None:
    """Return the memory root in force on ``branch``: its newest live root, or None.

    A cascade's re-snapshot counts: after a cascade made the newest SNAPSHOT root stale,
    the live re-snapshot that replaces it is in force (FORMAT.md §10).
    """
    found = _recorded(ledger, branch, live_only=True)
    return found[0] if found else None


def root_in_force_at(ledger: Ledger, branch: str, seq: int) -> bytes | None:
    """Return the root that was in force on ``branch`` right before its entry ``seq``.

    As ``root_in_force``, over the roots recorded before ``seq``, each in the state it had
    then (its state changes before ``seq``, on the branch or inherited from before the fork).
    """
    return _RootsInForce(ledger).at(branch, seq)


class _RootsInForce:
    """``root_in_force_at`` for many receipts (verify step 9).

    Each branch's roots and their state histories are read once, not once per receipt.
    """

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._roots: dict[str, list[tuple[RootRecord, list[tuple[str, int, str]]]]] = {}

    def _of(self, branch: str) -> list[tuple[RootRecord, list[tuple[str, int, str]]]]:
        from memroot.memory_root.falsify import Falsifier

        if branch not in self._roots:
            own = _recorded(self.ledger, branch)
            f = Falsifier(self.ledger)
            out = []
            for record in own:
                try:
                    changes = [
                        (c.branch, c.seq, c.state) for c in f.history(record.root.hex(), branch)
                    ]
                except MemrootError:
                    changes = []
                out.append((record, changes))
            self._roots[branch] = out
        return self._roots[branch]

    def at(self, branch: str, seq: int) -> bytes | None:
        """Return the root in force on ``branch`` right before entry ``seq`` (None: none)."""
        for record, changes in self._of(branch):
            if record.seq >= seq:
                continue
            state = "live"
            for on, at, to in changes:
                if on != branch or at < seq:
                    state = to
            if state == "live":
                return bytes(record.root)
        return None


@dataclass(frozen=True, slots=True)
class Handed:
    """One object a receipt names, with the value the run was handed, read back strictly."""

    id: str
    version: int
    state: str
    value: str | None
    structured_value: Any
    value_digest: bytes | None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (the digest in hex)."""
        return {
            "id": self.id,
            "version": self.version,
            "state": self.state,
            "value": self.value,
            "structured_value": self.structured_value,
            "value_digest": None if self.value_digest is None else self.value_digest.hex(),
        }


def handed(ledger: Ledger, r: Receipt) -> list[Handed]:
    """Return each object ``r`` names with the value of that version, read from the ledger.

    Each version is read as of the entry the reader was shown and, on a strict ledger,
    checked against its own operations (``strict_rows.check_objects``); a version-2 receipt's
    digest must be the digest of that value.

    Raises:
        IntegrityError: a version that the ledger does not hold as the receipt says, a
            derived row that is not what its operations give, or a value whose digest is not
            the receipt's.
    """
    from memroot.projections.query import get_object
    from memroot.projections.strict_rows import check_objects

    db = ledger.derived.db
    out = []
    for o in r.objects:
        obj = get_object(db, o["id"], as_of=r.at, branch=r.branch)
        if obj is None or obj.version != o["version"]:
            raise IntegrityError(
                f"READ_RECEIPT of run {r.run_id!r} names object {o['id']} version "
                f"{o['version']}, which the ledger does not hold at entry {r.at} of {r.branch}",
                branch=r.branch,
                seq=r.seq,
                step=9,
            )
        check_objects(ledger, [obj], r.branch, as_of=r.at)
        digest = o.get("value_digest")
        if digest is not None and digest != value_digest(obj):
            raise IntegrityError(
                f"READ_RECEIPT of run {r.run_id!r}: the value of object {o['id']} version "
                f"{o['version']} is not the one the run was handed (digest differs)",
                branch=r.branch,
                seq=r.seq,
                step=9,
                expected=bytes(digest).hex(),
                actual=value_digest(obj).hex(),
            )
        out.append(
            Handed(o["id"], o["version"], o["state"], obj.value, obj.structured_value, digest)
        )
    return out


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
            in_force = _RootsInForce(ledger)
            for entry in self.found:
                where = (entry.branch, entry.seq)
                try:
                    r = Receipt.of(entry)
                except ValidationError as e:
                    report.add(Finding(9, f"READ_RECEIPT: {e}", *where))
                    continue
                self._root(ledger, r, report, in_force)
                # What the reader was shown: state right after entry ``at`` (its as_of, or
                # the entry before the receipt, which lands in the query's transaction).
                at = r.at
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
                    digest = o.get("value_digest")
                    if digest is not None and digest != value_digest(obj):
                        report.add(
                            Finding(
                                9,
                                f"READ_RECEIPT of run {r.run_id!r} names a value digest for "
                                f"object {o['id']} version {o['version']} that is not the "
                                "digest of that version's value",
                                *where,
                                expected=value_digest(obj).hex(),
                                actual=bytes(digest).hex(),
                            )
                        )
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
    def _root(ledger: Ledger, r: Receipt, report: AuditReport, in_force: _RootsInForce) -> None:
        from memroot.memory_root import Roots

        if r.version >= 2:
            # Format 2 names the root in force exactly; format 1 (written before cascades'
            # re-snapshots counted) is held only to a root recorded before it.
            was = in_force.at(r.branch, r.seq)
            if was != r.memory_root:
                named = "none" if r.memory_root is None else r.memory_root.hex()[:16]
                report.add(
                    Finding(
                        9,
                        f"READ_RECEIPT of run {r.run_id!r} names memory root {named}, but the "
                        f"root in force then was {'none' if was is None else was.hex()[:16]}",
                        r.branch,
                        r.seq,
                        expected=None if was is None else was.hex(),
                        actual=None if r.memory_root is None else r.memory_root.hex(),
                    )
                )
            return
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
