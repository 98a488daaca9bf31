"""Erasure across branches: a TOMBSTONE's ``on_dependents`` reaches every branch (RFC-0012).

A ``TOMBSTONE`` on branch X erases an event's content for the whole ledger, but the memory
model folds it on X only: X's objects citing the event are deprecated or archived as
``on_dependents`` says (``projections.engine``). Other branches hold objects citing the same
event too: a merge target keeps the evidence of the objects it imported from X, and a branch
forked from X after the event sees X's objects as they were at the fork. ``ErasureHook``
carries the erasure to them, in the TOMBSTONE's own transaction:

- on every other **open** branch that sees an ACTIVE object citing the event, one
  ``DEPRECATE`` (``on_dependents: DEPRECATE``) or ``ARCHIVE`` (``ARCHIVE``) per such object,
  appended on that branch, by the TOMBSTONE's actor, naming the erasure (``reason``:
  ``evidence event E erased by TOMBSTONE entry N on branch X``; ``deprecated_by`` /
  ``policy_ref``: the TOMBSTONE), so each branch's own chain shows why its object changed;
- ``KEEP``: refused if such an object would be left without unerased evidence;
- no ``on_dependents`` while such objects exist: refused, naming the branch and objects;
- a branch that is not open (closed, archived, discarded, merged) takes no entry: its
  objects are flagged ``EVIDENCE_ERASED`` at read (``projections.views.View.erased``);
- neither the TOMBSTONE nor these entries are refused for a branch's ``max_events`` /
  ``max_storage_mb`` (``BranchRegistry.limits_waived``): an erasure is never blocked by a
  resource limit.

``ErasureCheck`` is the matching part of verify step 9: no ACTIVE object on an open branch
rests only on erased evidence. Install ``ErasureHook`` after every other hook (the
TOMBSTONE is folded by all of them before the other branches' entries are appended).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import apsw

from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind, OpInput
from memroot.ledger.errors import NotFoundError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport, Finding
from memroot.ledger.vocab import LifecycleState, OpType
from memroot.memory_root.branches import BranchRegistry
from memroot.projections import rules
from memroot.projections.backends import SqlState
from memroot.projections.hook import catch_up
from memroot.projections.model import MemoryObject
from memroot.projections.rules import RuleError
from memroot.projections.views import view_of

__all__ = ["STEP", "ErasureCheck", "ErasureHook", "Stranded", "flagged", "stranded"]

STEP: Final = 9
_TOMBSTONE: Final = OpType.TOMBSTONE.value
_ACTIVE: Final = LifecycleState.ACTIVE.value
_OPS: Final = {"DEPRECATE": OpType.DEPRECATE.value, "ARCHIVE": OpType.ARCHIVE.value}
_CITING: Final = frozenset({OpType.ASSERT.value, OpType.EPISTEMIC_TRANSITION.value})
"""Operations whose ``evidence_ids`` become an object's evidence."""


def _open(db: apsw.Connection, branch: str) -> bool:
    """Return True when ``branch`` takes entries (main, or OPEN in the branch registry)."""
    if branch == CANONICAL_BRANCH:
        return True
    try:
        row = db.execute("SELECT state FROM branch_meta WHERE branch_id = ?", (branch,)).fetchone()
    except apsw.SQLError:
        return True  # no branch registry in this file: nothing closes a branch
    return row is None or row[0] == "OPEN"


def _dependents(state: SqlState, branch: str, event_id: str) -> list[MemoryObject]:
    """Return the ACTIVE objects ``branch`` sees that cite ``event_id`` (evidence)."""
    out = []
    for i in dict.fromkeys(state.citing(branch, event_id)):
        o = state.obj(branch, i)
        if o is not None and o.lifecycle_state == _ACTIVE and event_id in o.evidence_ids:
            out.append(o)
    return out


def _erased(db: apsw.Connection, event_id: str) -> bool:
    row = db.execute("SELECT erased_by FROM mem_events WHERE id = ?", (event_id,)).fetchone()
    return row is not None and row[0] is not None


def _refuse_erased_evidence(db: apsw.Connection, entry: Entry) -> None:
    """Refuse a branch operation that gives an object evidence whose content was erased.

    A branch reads its parent frozen at the fork, so the memory model takes a parent event
    erased after the fork as evidence there; but its content is gone for the whole ledger,
    and nothing would carry the erasure to the new object (``ErasureCheck`` would report it
    resting on erased evidence). Main refuses such evidence by the RFC-0001 evidence rule;
    this holds a branch to the same.

    Raises:
        RuleError: naming the event and the entry that erased it.
    """
    p = entry.body.get("payload")
    ids = p.get("evidence_ids") if type(p) is dict else None
    if not isinstance(ids, list):
        return
    for e in ids:
        if not isinstance(e, str):
            continue
        row = db.execute(
            "SELECT erased_by, branch FROM mem_events WHERE id = ? AND erased_by IS NOT NULL",
            (e,),
        ).fetchone()
        if row is not None:
            raise RuleError(
                rules.EVIDENCE,
                f"evidence event {e} was erased by entry {row[0]} (event of branch {row[1]}): "
                f"its content is gone for the whole ledger, so branch {entry.branch} cannot "
                "cite it",
            )


class ErasureHook:
    """The ``AppendHook`` that carries a TOMBSTONE to the other branches (module docstring)."""

    def install(self, db: apsw.Connection) -> None:
        """Nothing to create: it reads the memory model's and the branch registry's tables."""

    def apply_events(
        self, db: apsw.Connection, ledger: Ledger, entries: Sequence[Entry], contents: Sequence[str]
    ) -> list[OpInput]:
        """Nothing to do for events (the ledger's native batch path): only a TOMBSTONE acts."""
        return []

    def apply(
        self, db: apsw.Connection, ledger: Ledger, entry: Entry, content: str | None
    ) -> list[OpInput]:
        """On a TOMBSTONE, append its consequences on every other open branch.

        On a branch, an ``ASSERT`` or ``EPISTEMIC_TRANSITION`` citing an event erased
        anywhere is refused (``_refuse_erased_evidence``).

        Raises:
            RuleError: no ``on_dependents`` while another branch holds ACTIVE objects citing
                the event, or ``KEEP`` would leave one of them without evidence; or the
                memory model refuses one of the entries (e.g. the actor lacks DEPRECATE on
                that branch). The whole append rolls back: nothing is written.
        """
        if entry.kind is Kind.OP and entry.type in _CITING and entry.branch != CANONICAL_BRANCH:
            _refuse_erased_evidence(db, entry)
        if entry.kind is not Kind.OP or entry.type != _TOMBSTONE:
            return []
        body = entry.body
        p = body.get("payload")
        if type(p) is not dict or type(p.get("target_event_id")) is not str:
            return []
        event_id = str(p["target_event_id"])
        mode = p.get("on_dependents")
        state = SqlState(db)
        registries = [h for h in ledger.hooks if isinstance(h, BranchRegistry)]
        for b in ledger.store.branches():
            if b.name == entry.branch or not _open(db, b.name):
                continue
            catch_up(db, ledger, b.name, b.size)  # its memory state, as a read would see it
            found = _dependents(state, b.name, event_id)
            if not found:
                continue
            shown = ", ".join(o.id for o in found[:3]) + (" ..." if len(found) > 3 else "")
            if mode is None:
                raise RuleError(
                    rules.TOMBSTONE_DEPENDENTS,
                    f"event {event_id} is evidence of {len(found)} ACTIVE object(s) on branch "
                    f"{b.name!r} ({shown}); say what happens to them with payload.on_dependents: "
                    "DEPRECATE, ARCHIVE or KEEP",
                )
            if mode not in _OPS:
                for o in found:
                    left = [
                        e
                        for e in o.evidence_ids
                        if e != event_id
                        and state.event(b.name, e) is not None
                        and not _erased(db, e)
                    ]
                    if not left:
                        raise RuleError(
                            rules.TOMBSTONE_DEPENDENTS,
                            f"on_dependents KEEP would leave ACTIVE object {o.id} on branch "
                            f"{b.name!r} without evidence",
                        )
                continue
            why = (
                f"evidence event {event_id} erased by TOMBSTONE entry {entry.seq} on branch "
                f"{entry.branch}: {p.get('reason', '')}"
            )[:4096]
            cite = f"TOMBSTONE {body.get('id')} (entry {entry.seq} on branch {entry.branch})"
            ops = [
                OpInput(
                    op_type=_OPS[str(mode)],
                    actor_id=str(body["actor_id"]),
                    actor_type=str(body["actor_type"]),
                    namespace_id=o.namespace_id,
                    payload=(
                        {"reason": why, "deprecated_by": cite}
                        if mode == "DEPRECATE"
                        else {"reason": why, "policy_ref": str(p.get("policy_ref") or cite)}
                    ),
                    policy_version=str(body.get("policy_version", "memroot-erasure/1")),
                    target_id=o.id,
                    ts=entry.ts,
                )
                for o in found
            ]
            with contextlib.ExitStack() as stack:
                for r in registries:  # an erasure is never blocked by a branch's size limit
                    stack.enter_context(r.limits_waived())
                ledger.append_batch(ops, branch=b.name)
        return []


# -- verify step 9 -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stranded:
    """An ACTIVE object whose every evidence event was erased, and the branch it is on."""

    branch: str
    object_id: str
    events: tuple[tuple[str, str, int], ...]  # (event id, its branch, erasing seq there)
    open: bool


def stranded(db: apsw.Connection) -> list[Stranded]:
    """Return every ACTIVE object, on any branch, that rests only on erased evidence.

    Read from the stored memory state (verify step 9 compares it with the replay first).
    """
    erased = {
        str(i): (str(b), int(s))
        for i, b, s in db.execute(
            "SELECT id, branch, erased_by FROM mem_events WHERE erased_by IS NOT NULL"
        )
    }
    if not erased:
        return []
    state = SqlState(db)
    branches: list[Any] = db.execute("SELECT DISTINCT branch FROM mem_heads").fetchall()
    out: list[Stranded] = []
    for (name,) in sorted(branches):
        seen: set[str] = set()
        for event_id in sorted(erased):
            for o in _dependents(state, str(name), event_id):
                if o.id in seen:
                    continue
                seen.add(o.id)
                if all(e in erased for e in o.evidence_ids):
                    out.append(
                        Stranded(
                            str(name),
                            o.id,
                            tuple((e, *erased[e]) for e in o.evidence_ids),
                            _open(db, str(name)),
                        )
                    )
    return out


def flagged(db: apsw.Connection, branch: str, object_id: str, evidence: list[str]) -> bool:
    """Return True when a read of ``branch`` now flags the object ``EVIDENCE_ERASED``.

    The same condition ``memroot query`` applies (``View.erased``).
    """
    view = view_of(db, branch)
    cond, params = view.erased("ev")
    marks = ", ".join("?" * len(evidence))
    row = db.execute(
        f"SELECT 1 FROM mem_events ev WHERE ev.id IN ({marks}) AND {cond} LIMIT 1",
        (*evidence, *params),
    ).fetchone()
    return row is not None


class ErasureCheck:
    """Verify step 9 (erasure): no ACTIVE object on an open branch rests on erased evidence.

    Such an object is one the erasure's ``on_dependents`` should have reached (a ledger
    written without ``ErasureHook``): a violation naming the object, its branch and the
    erasing entries. On a branch that is not open the object is flagged ``EVIDENCE_ERASED``
    at read; that is reported as a note. Needs the ledger file (a bundle has no derived
    state: nothing is checked).
    """

    steps: tuple[int, ...] = (STEP,)

    def __init__(
        self, path: Path | None = None, *, restricted: bool = False, ledger: Ledger | None = None
    ) -> None:
        """Check the stored memory state of the ledger at ``path`` (None: nothing to check).

        ``restricted`` (``verify --branch``): only the branches fed are reported. ``ledger``:
        the open ledger whose read transaction the audit runs in, read instead of opening
        ``path`` (one snapshot for every check) and left open.
        """
        self.shared = ledger
        if ledger is not None:
            path = ledger.path
        self.path = None if path is None else Path(path)
        self.restricted = restricted
        self._fed: set[str] = set()

    def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
        """Note the branch; the objects are read from the stored state at the end."""
        self._fed.add(branch)

    def finish(self, report: AuditReport) -> None:
        """Report the stranded objects."""
        if self.path is None:
            return
        db = (
            apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
            if self.shared is None
            else self.shared.store.db
        )
        try:
            if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'mem_events'").fetchall():
                return
            try:
                found = stranded(db)
            except (NotFoundError, apsw.Error) as e:
                report.add(
                    Finding(STEP, f"erasure check skipped: the memory state is unreadable ({e})")
                )
                return
            for s in found:
                if self.restricted and s.branch not in self._fed:
                    continue
                how = ", ".join(f"{e} erased by entry {seq} on {b}" for e, b, seq in s.events)
                if s.open:
                    report.add(
                        Finding(
                            STEP,
                            f"ACTIVE object {s.object_id} rests only on erased evidence ({how}) "
                            "and nothing on its branch carried the erasure's on_dependents",
                            s.branch,
                        )
                    )
                elif not flagged(db, s.branch, s.object_id, [e for e, _, _ in s.events]):
                    report.add(
                        Finding(
                            STEP,
                            f"ACTIVE object {s.object_id} on a branch that is not open rests "
                            f"only on erased evidence ({how}) and reads do not flag it "
                            "EVIDENCE_ERASED",
                            s.branch,
                        )
                    )
                else:
                    report.add(
                        Finding(
                            STEP,
                            f"ACTIVE object {s.object_id} on a branch that is not open rests "
                            f"only on erased evidence ({how}); reads flag it EVIDENCE_ERASED",
                            s.branch,
                            severity="note",
                        )
                    )
        finally:
            if self.shared is None:
                db.close()
