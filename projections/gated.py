"""Invalidation gated by provenance: an object's state at a conversation anchor (seed 001).

Provenance-only visibility (``memroot.projections.anchors``) gates the *creation* of derived
memory: an object is visible at anchor ``E`` when every one of its evidence events lies on
``E``'s ancestor path. This module gates what happens to it afterwards. Every operation that
changes an object's state has a **provenance**, a set of event ids:

- ``SUPERSEDE``: the new object's evidence; ``DEDUP_RESOLVED``: the primary's;
- ``DEPRECATE``, ``ARCHIVE``, ``EPISTEMIC_TRANSITION``, ``DECAY_APPLIED``, ``REINFORCE``,
  ``PENALTY``, ``FALSIFY``, ``MARK_STALE``, ``RESTORE``: their ``payload.evidence_ids``;
- plus, for any operation, the evidence of every object it cites (an object's evidence is the
  one its ``ASSERT`` gave it). ``CONTRADICTION_NOTED`` cites both objects: at an anchor a
  ``CONTRADICTS`` edge counts only when both ends are visible there.

An operation with an empty provenance (``TOMBSTONE``'s dependents, ``CASCADE``, a ``DEPRECATE``
without ``evidence_ids``...) applies everywhere, as before.

**State at an anchor** ``E`` is replay through ``E``'s path: an object's lifecycle state,
confidence, salience, epistemic type (and added evidence) and falsification state are what its
operations give when only those whose provenance lies entirely on ``E``'s ancestor path are
applied, in ledger order, each checked against the state the replay has reached (an operation
the state no longer allows there, e.g. a SUPERSEDE of an object already superseded on this
path, does not apply). So the RFC-0001 state machine holds in every view by construction.

**Validation in the operation's own view.** An operation with provenance ``P`` is checked, at
append, against the state at the view ``D(P)``: the events of ``P`` with all their ancestors
(as the ledger had recorded them before the operation). A ``SUPERSEDE`` of F1 from branch B
needs F1 ACTIVE on B's path, whatever happened on A's. When no event of ``P`` is linked into
a conversation tree (no recorded parent or child: a flat log), the operation is checked
against the global state, as before. The global state (reads without an anchor, memory roots,
``state_digest``) folds every accepted operation in ledger order and skips the ones it does
not allow (``mem_gated.applied`` = 0): reads without an anchor are what they always were.
The falsification layer (``memroot.memory_root.falsify``) decides the memory-object
``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` it validates the same way, reading the state this
module folds (``own_view_state``).

**Bookkeeping** (``mem_gated``, in the append's transaction): from an object's first operation
with provenance on, one row per operation that changed it (with or without provenance):
branch, seq, op id and type, timestamp, provenance, the operation's intent (JSON) and whether
the global state applied it. The first row of an object in a branch's view carries ``base``,
the object's state before it (so a replay never needs the object's older versions). An
object without rows is in its global state at every anchor where it is visible, so a read
at an anchor folds only the objects that have rows. ``mem_conv`` records every event's
conversation parent with its branch and seq, for the as-of walks of validation. Under the
batched memory hook both tables' rows are held for the batch (``Pending``) and written when
it ends, or as soon as anything in the batch reads the tables. A replay's fold of ``main``
into fresh tables (``rebuild``, step 9) holds them through one ``complete`` holder that also
keeps every ``mem_gated`` row of the fold by object: its reads of ``mem_gated`` are answered
from those (no statement, nothing written), and a walk of the tree writes only ``mem_conv``.

Kept whole: one mechanism, the provenance gate. Its three parts (the replay of a state at an
anchor, ``Folder``/``AnchorState``; the validation in an operation's own view, ``run``; the
bookkeeping and its digest) share one private model of a row (``_S``, ``_step``, the intent
encoding) and the rows a batch holds (``_settle``); split, those would become an interface
between modules that only make sense together.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, cast

import apsw

from memroot.ledger import encoding
from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import NotFoundError, StorageError
from memroot.ledger.hashing import sha256_stream
from memroot.ledger.vocab import LifecycleState, OpType
from memroot.projections.backends import SqlState
from memroot.projections.digest import array_head, encode_rows
from memroot.projections.epistemic import check_transition
from memroot.projections.handlers import Op, Rules
from memroot.projections.lifecycle import is_allowed
from memroot.projections.model import Edge, Entity, EventRef, Grant, MemoryObject, Namespace, evolve
from memroot.projections.rules import RuleError
from memroot.projections.states import OBJECT_TARGET, check_state_change
from memroot.projections.tables import EVENT_COLS, OBJECT_COLS, event_from_row, object_from_row
from memroot.projections.views import Fork, View, view_of

if TYPE_CHECKING:
    from memroot.projections.backends import StateStore

__all__ = [
    "DIGEST_TAG",
    "EVIDENCE_OPS",
    "GATED_OPS",
    "AnchorState",
    "Folder",
    "GatedOp",
    "Pending",
    "Step",
    "gated_digest",
    "gated_rows",
    "iter_gated_rows",
    "on_event",
    "own_view_state",
    "path_as_of",
    "run",
]

DIGEST_TAG: Final = "memroot/gated-state/v1"

_O = OpType
EVIDENCE_OPS: Final = frozenset(
    {
        _O.DEPRECATE,
        _O.ARCHIVE,
        _O.EPISTEMIC_TRANSITION,
        _O.DECAY_APPLIED,
        _O.REINFORCE,
        _O.PENALTY,
        _O.FALSIFY,
        _O.MARK_STALE,
        _O.RESTORE,
    }
)
"""Operations whose ``payload.evidence_ids`` is (part of) their provenance."""
_NEW_EVIDENCE: Final = frozenset(
    {_O.DEPRECATE, _O.ARCHIVE, _O.DECAY_APPLIED, _O.REINFORCE, _O.PENALTY}
)
_STATE: Final = frozenset({_O.FALSIFY, _O.MARK_STALE, _O.RESTORE})
GATED_OPS: Final = EVIDENCE_OPS | {_O.SUPERSEDE, _O.DEDUP_RESOLVED, _O.TOMBSTONE, _O.CASCADE}
"""Operations that change memory objects' state, and so are kept in ``mem_gated``."""

_ACTIVE: Final = LifecycleState.ACTIVE.value
_SUPERSEDED: Final = LifecycleState.SUPERSEDED.value
_EPS: Final = 1e-9
_COLS: Final = (
    "g.branch, g.seq, g.n, g.object_id, g.op_id, g.op_type, g.ts, g.prov, g.intent, g.applied, "
    "g.base"
)


_enc_str: Final = encode_basestring_ascii
_dumps: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
_canonical: Final = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode


_Eng = TypeVar("_Eng", bound=Rules)
"""The engine a handler runs on (``run`` hands the handler the engine type it was given)."""


class _HasDb(Protocol):
    db: apsw.Connection


def _db(eng: Rules) -> apsw.Connection:
    return cast(_HasDb, eng.state).db


# -- what an operation does to an object ---------------------------------------------------------


def _intent(op: Op) -> dict[str, Any]:
    """Return the operation's effect on each object it changes, replayable in any view."""
    t, p = op.op_type, op.p
    if t in (_O.DEPRECATE, _O.ARCHIVE, _O.TOMBSTONE):
        if t == _O.TOMBSTONE:
            to = "DEPRECATED" if p.get("on_dependents") == "DEPRECATE" else "ARCHIVED"
        else:
            to = "DEPRECATED" if t == _O.DEPRECATE else "ARCHIVED"
        return {"k": "L", "to": to}
    if t in (_O.SUPERSEDE, _O.DEDUP_RESOLVED):
        by = p["new_object_id"] if t == _O.SUPERSEDE else p["primary_id"]
        return {"k": "L", "to": _SUPERSEDED, "by": by}
    if t == _O.EPISTEMIC_TRANSITION:
        return {"k": "E", "from": p["from_type"], "to": p["to_type"], "ev": list(p["evidence_ids"])}
    if t == _O.DECAY_APPLIED:
        c, s, d, sign = p["new_confidence"], p["new_salience"], p["decay_delta"], -1
        return {"k": "S", "c": c, "s": s, "d": d, "dir": sign}
    if t == _O.REINFORCE:
        c, s, d, sign = p["new_confidence"], p["new_salience"], p["delta"], 1
        return {"k": "S", "c": c, "s": s, "d": d, "dir": sign}
    if t == _O.PENALTY:
        return {"k": "S", "c": p["new_confidence"], "s": None, "d": p["delta"], "dir": -1}
    if t in _STATE:
        return {"k": "F", "op": t}
    return {"k": "C"}  # CASCADE: live -> stale


def _intent_text(op: Op) -> str:
    """Return ``_intent(op)`` as canonical JSON (sorted keys, no spaces): FORMAT.md §12.4."""
    t = op.op_type
    if t == _O.SUPERSEDE:
        return '{"by":' + _canonical(op.p["new_object_id"]) + ',"k":"L","to":"SUPERSEDED"}'
    if t == _O.DEPRECATE:
        return '{"k":"L","to":"DEPRECATED"}'
    if t == _O.ARCHIVE:
        return '{"k":"L","to":"ARCHIVED"}'
    p = op.p
    if t in _SCORES:
        # Keys sorted: c, d, dir, k, s. Written directly when every number is a plain int or
        # a finite float (what the encoder writes is then its repr); else by the encoder.
        c, d = p["new_confidence"], p[_SCORES[t]]
        sal = None if t == _O.PENALTY else p["new_salience"]
        if _plain_number(c) and _plain_number(d) and (sal is None or _plain_number(sal)):
            return (
                f'{{"c":{c!r},"d":{d!r},"dir":{-1 if t != _O.REINFORCE else 1},"k":"S",'
                f'"s":{"null" if sal is None else repr(sal)}}}'
            )
    elif t == _O.EPISTEMIC_TRANSITION:
        ev, frm, to = p["evidence_ids"], p["from_type"], p["to_type"]
        if type(frm) is str and type(to) is str and all(type(e) is str for e in ev):
            q = _enc_str
            return f'{{"ev":[{",".join(map(q, ev))}],"from":{q(frm)},"k":"E","to":{q(to)}}}'
    return _canonical(_intent(op))


_SCORES: Final[dict[str, str]] = {
    _O.DECAY_APPLIED: "decay_delta",
    _O.REINFORCE: "delta",
    _O.PENALTY: "delta",
}
"""Score operations, and the payload field of each one's bound on the change."""


def _plain_number(x: object) -> bool:
    return type(x) is int or (type(x) is float and math.isfinite(x))


def _base_text(o: MemoryObject) -> str:
    """Return ``_S.of(o).to_json()`` (an object's state before its first row).

    Written directly when every number has its usual type (what the JSON encoder writes: an
    int's and a finite float's ``repr``, strings as ``encode_basestring_ascii``); else by
    the encoder itself.
    """
    c, s, to = o.confidence, o.salience, o.valid_to
    if (
        type(c) is float
        and type(s) is float
        and math.isfinite(c)
        and math.isfinite(s)
        and type(o.valid_from) is int
        and type(o.version) is int
        and type(o.last_modified_at) is int
        and (to is None or type(to) is int)
    ):
        q = _enc_str
        by = "null" if o.superseded_by is None else q(o.superseded_by)
        return (
            f"[{q(o.lifecycle_state)},{by},{o.valid_from},{'null' if to is None else to},"
            f"{c!r},{s!r},{q(o.epistemic_type)},[{','.join(map(q, o.evidence_ids))}],"
            f"{q(o.state)},{o.version},{o.last_modified_at}]"
        )
    return _S.of(o).to_json()


@dataclass(slots=True)
class _S:
    """An object's mutable fields during a fold (the rest never change)."""

    lifecycle_state: str
    superseded_by: str | None
    valid_from: int
    valid_to: int | None
    confidence: float
    salience: float
    epistemic_type: str
    evidence_ids: tuple[str, ...]
    state: str
    version: int
    last_modified_at: int

    @classmethod
    def of(cls, o: MemoryObject) -> _S:
        return cls(
            o.lifecycle_state,
            o.superseded_by,
            o.valid_from,
            o.valid_to,
            o.confidence,
            o.salience,
            o.epistemic_type,
            o.evidence_ids,
            o.state,
            o.version,
            o.last_modified_at,
        )

    def to_json(self) -> str:
        return _dumps(
            [
                self.lifecycle_state,
                self.superseded_by,
                self.valid_from,
                self.valid_to,
                self.confidence,
                self.salience,
                self.epistemic_type,
                list(self.evidence_ids),
                self.state,
                self.version,
                self.last_modified_at,
            ]
        )

    @classmethod
    def from_json(cls, text: str) -> _S:
        v = json.loads(text)
        v[7] = tuple(v[7])
        return cls(*v)

    def on(self, o: MemoryObject) -> MemoryObject:
        """Return ``o`` (a stored version) with this state's fields."""
        return cast(
            MemoryObject,
            evolve(
                o,
                lifecycle_state=self.lifecycle_state,
                superseded_by=self.superseded_by,
                valid_to=self.valid_to,
                confidence=self.confidence,
                salience=self.salience,
                epistemic_type=self.epistemic_type,
                evidence_ids=self.evidence_ids,
                state=self.state,
                version=self.version,
                last_modified_at=self.last_modified_at,
            ),
        )


Key = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class GatedOp:
    """One row of ``mem_gated``: an operation's change of one object, with its provenance."""

    branch: str
    seq: int
    n: int
    object_id: str
    op_id: str
    op_type: str
    ts: int
    prov: tuple[str, ...]
    intent: str
    """The operation's effect (JSON, ``_intent``), decoded when a fold reaches it."""
    applied: bool
    base: str | None
    key: Key


def _bump(s: _S, ts: int) -> None:
    s.version += 1
    s.last_modified_at = max(s.last_modified_at, ts)


def _step(s: _S, row: GatedOp, active: Callable[[str], bool]) -> str | None:
    """Apply ``row`` to ``s`` when the state allows it; else return why not (``s`` unchanged)."""
    it = json.loads(row.intent)
    kind = it["k"]
    if kind == "L":
        to, by = it["to"], it.get("by")
        if not is_allowed(s.lifecycle_state, to):
            return f"the object is {s.lifecycle_state} here, which cannot become {to}"
        if by is not None and not active(by):
            return f"the superseding object {by} is not ACTIVE here"
        s.lifecycle_state = to
        if to == _SUPERSEDED:
            s.superseded_by = by
            if s.valid_to is None:
                s.valid_to = max(row.ts, s.valid_from)
        _bump(s, row.ts)
        return None
    if kind in ("E", "S") and s.lifecycle_state != _ACTIVE:
        return f"the object is {s.lifecycle_state} here; {row.op_type} needs it ACTIVE"
    if kind == "E":
        if it["from"] != s.epistemic_type:
            return f"the object is {s.epistemic_type} here, not {it['from']}"
        try:
            check_transition(row.object_id, s.epistemic_type, it["to"])
        except RuleError as e:
            return str(e)
        s.epistemic_type = it["to"]
        s.evidence_ids = s.evidence_ids + tuple(e for e in it["ev"] if e not in s.evidence_ids)
        _bump(s, row.ts)
        return None
    if kind == "S":
        sign, delta = it["dir"], it["d"]
        conf = it["c"]
        sal = s.salience if it["s"] is None else it["s"]
        for name, old, new in (("confidence", s.confidence, conf), ("salience", s.salience, sal)):
            moved = (new - old) * sign
            if moved < -_EPS or moved > delta + _EPS:
                return f"{name} is {old} here; {row.op_type} to {new} breaks its delta {delta}"
        s.confidence, s.salience = conf, sal
        _bump(s, row.ts)
        return None
    if kind == "F":
        try:
            s.state = check_state_change(it["op"], f"object {row.object_id}", s.state)
        except RuleError as e:
            return str(e)
        return None
    if s.state != "live":
        return f"the object is {s.state} here; a cascade marks only live objects stale"
    s.state = "stale"
    return None


# -- reading the rows of a view -------------------------------------------------------------------


def _level_cond(view: View) -> tuple[str, list[Any]]:
    # Unary + keeps SQLite on the primary key's object prefix.
    parts: list[str] = []
    params: list[Any] = []
    for branch, bound in view.levels:
        if bound is None:
            parts.append("(+g.branch = ?)")
            params.append(branch)
        else:
            parts.append("(+g.branch = ? AND +g.seq <= ?)")
            params += [branch, bound]
    return (parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"), params


@dataclass(frozen=True, slots=True)
class Step:
    """One operation of an object at a view: whether it applies there, and if not, why."""

    op: GatedOp
    applies: bool
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "branch": self.op.branch,
            "seq": self.op.seq,
            "op_id": self.op.op_id,
            "op_type": self.op.op_type,
            "provenance": list(self.op.prov),
            "applied_globally": self.op.applied,
            "applies": self.applies,
            "reason": self.reason,
        }


class Folder:
    """Folds objects' ``mem_gated`` rows in a branch view, admitting rows by provenance.

    ``admit(row)`` says whether a row's provenance lies in the view (an anchor's path, or an
    operation's own view); rows are loaded once per object and folded on demand.
    """

    def __init__(
        self,
        db: apsw.Connection,
        view: View,
        admit: Callable[[GatedOp], bool] | None = None,
        *,
        holder: Pending | None = None,
    ) -> None:
        """Fold rows of ``view``'s levels (each as of its bound).

        ``holder``: the fold's ``Pending``; while it is ``complete`` and the view reads
        ``main`` only, an object it never held a row of is known to have none (no query).
        """
        self.db = db
        self.view = view
        self._holder = (
            holder
            if holder is not None and all(b == CANONICAL_BRANCH for b, _ in view.levels)
            else None
        )
        self.admit: Callable[[GatedOp], bool] = admit or (lambda _row: True)
        self._rows: dict[str, list[GatedOp]] = {}
        self._memo: dict[tuple[str, Key | None], _S | None] = {}
        n = len(view.levels)
        self._level = {b: n - 1 - i for i, (b, _) in enumerate(view.levels)}
        self._cond, self._params = _level_cond(view)

    def share(self, other: Folder) -> None:
        """Use ``other``'s loaded rows (same view; rows do not change during an append)."""
        self._rows = other._rows

    def preload(self, ids: Iterable[str]) -> None:
        """Load the rows of every object in ``ids`` not loaded yet (one query)."""
        missing = [i for i in dict.fromkeys(ids) if i not in self._rows]
        holder = self._holder
        if missing and holder is not None and holder.complete:
            if _KEPT:
                # Every row of main came through the holder, which keeps them: the table
                # holds exactly these (held or written), so no statement, nothing written.
                kept = holder.kept
                bound = self.view.levels[0][1]
                self.load(
                    (r for i in missing for r in kept.get(i, ()) if bound is None or r[1] <= bound),
                    missing,
                )
                return
            kept = holder.kept
            self.load((), [i for i in missing if i not in kept])  # no row was ever written
            missing = [i for i in missing if i in kept]
        if not missing:
            return
        _settle(self.db)
        args: list[Any]
        if len(missing) <= 64:
            sql_in, args = f"g.object_id IN ({', '.join('?' * len(missing))})", missing
        else:
            sql_in, args = "g.object_id IN (SELECT value FROM json_each(?))", [json.dumps(missing)]
        self.load(
            _rare(
                self.db,
                f"SELECT {_COLS} FROM mem_gated g WHERE {sql_in} AND {self._cond}",
                (*args, *self._params),
            ),
            missing,
        )

    def load(self, rows: Iterable[Sequence[Any]], ids: Iterable[str]) -> None:
        """Keep ``rows`` (``mem_gated`` rows of the view, columns as ``_COLS``) of ``ids``.

        Every object of ``ids`` is then loaded (with no rows if ``rows`` has none of it).
        """
        level = self._level
        got = self._rows
        for i in ids:
            got.setdefault(i, [])
        for r in rows:
            got[r[3]].append(
                GatedOp(
                    r[0],
                    r[1],
                    r[2],
                    r[3],
                    r[4],
                    r[5],
                    r[6],
                    tuple(r[7].split(",")) if r[7] else (),
                    r[8],
                    bool(r[9]),
                    r[10],
                    (level[r[0]], r[1], r[2]),
                )
            )
        for i in ids:
            if len(got[i]) > 1:
                got[i].sort(key=lambda g: g.key)

    def rows_of(self, object_id: str) -> list[GatedOp]:
        """Return the object's rows in the view, in ledger order (empty: it has none)."""
        if object_id not in self._rows:
            self.preload([object_id])
        return self._rows[object_id]

    def base(self, object_id: str) -> _S | None:
        """Return the object's state before its first row (None: it has no rows)."""
        rows = self.rows_of(object_id)
        if not rows:
            return None
        base = rows[0].base
        if base is None:
            raise StorageError(
                f"the gated state of object {object_id} has no base row in branch "
                f"{self.view.branch}: run memroot rebuild"
            )
        return _S.from_json(base)

    def fold(self, object_id: str, until: Key | None = None) -> tuple[_S | None, list[Step]]:
        """Return the object's state in the view (before ``until``) and every row's outcome.

        None when the object has no rows: it is then in its global state.
        """
        base = self.base(object_id)
        if base is None:
            return None, []
        s = base
        steps: list[Step] = []
        for row in self._rows[object_id]:
            if until is not None and row.key >= until:
                break
            if not self.admit(row):
                steps.append(Step(row, False, "its provenance is not on this path"))
                continue
            why = self._dedup_blocked(row) if row.op_type == _O.DEDUP_RESOLVED else None
            if why is None:
                why = _step(s, row, functools.partial(self._active_before, key=row.key))
            steps.append(Step(row, why is None, why))
        return s, steps

    def _dedup_blocked(self, row: GatedOp) -> str | None:
        """Return why a ``DEDUP_RESOLVED`` cannot apply here to any object, or None.

        The operation is one decision, as in the global state (which refuses it whole): it
        applies at a view only when every merged object may be superseded there, so one
        merged object already DEPRECATED on this path keeps all of them as they were.
        """
        _settle(self.db)
        others = [
            oid
            for (oid,) in self.db.execute(
                "SELECT object_id FROM mem_gated WHERE op_id = ? AND branch = ? AND seq = ? "
                "AND op_type = 'DEDUP_RESOLVED' AND object_id != ?",
                (row.op_id, row.branch, row.seq, row.object_id),
            )
        ]
        before = (row.key[0], row.key[1], -1)  # before the operation's first object
        for oid in others:
            if not self._active_before(oid, before):
                return (
                    f"merged object {oid} is not ACTIVE here; {row.op_type} applies to all "
                    "of its objects or to none"
                )
        return None

    def _active_before(self, object_id: str, key: Key) -> bool:
        """Return whether the object was ACTIVE in the view right before the row at ``key``.

        An object with no rows before then was in its global state, and the operation citing
        it was accepted, so it was ACTIVE.
        """
        rows = self.rows_of(object_id)
        if not rows or rows[0].key >= key:
            return True  # its base is the state after ungated operations that came later
        memo_key = (object_id, key)
        if memo_key not in self._memo:
            self._memo[memo_key] = self.fold(object_id, key)[0]
        s = self._memo[memo_key]
        return s is None or s.lifecycle_state == _ACTIVE

    def state(self, obj: MemoryObject) -> MemoryObject:
        """Return ``obj`` (its version in the view) with the state the view gives it.

        Folded once per object (rows do not change while a folder is in use).
        """
        key = (obj.id, None)
        if key in self._memo:
            s = self._memo[key]
        else:
            s = self._memo[key] = self.fold(obj.id)[0]
        return obj if s is None else s.on(obj)

    def creation_evidence(self, obj: MemoryObject) -> tuple[str, ...]:
        """Return the evidence the object's ASSERT gave it (later transitions may add more)."""
        rows = self.rows_of(obj.id)
        if not rows or rows[0].base is None:
            return obj.evidence_ids
        # The base is [lifecycle, superseded_by, valid_from, ..., evidence_ids (8th), ...].
        return tuple(json.loads(rows[0].base)[7])


class AnchorState:
    """Objects as they are at a conversation anchor: replay through the anchor's path."""

    def __init__(self, db: apsw.Connection, view: View, path: set[str]) -> None:
        """Read at the anchor whose ancestor path (anchor included) is ``path``."""
        self.path = path
        self.folder = Folder(db, view, lambda row: all(e in path for e in row.prov))

    def resolve(self, objs: Sequence[MemoryObject]) -> list[MemoryObject | None]:
        """Return each object's state at the anchor, or None where its creation is not visible.

        ``objs`` are the versions the branch view holds (as of its bound).
        """
        self.folder.preload(o.id for o in objs)
        path = self.path
        out: list[MemoryObject | None] = []
        for o in objs:
            if not all(e in path for e in self.folder.creation_evidence(o)):
                out.append(None)
            else:
                out.append(self.folder.state(o))
        return out

    def explain(self, obj: MemoryObject) -> tuple[bool, MemoryObject | None, list[Step]]:
        """Return whether the object is visible at the anchor, its state there, and each step."""
        evidence = self.folder.creation_evidence(obj)
        visible = all(e in self.path for e in evidence)
        s, steps = self.folder.fold(obj.id)
        at = (obj if s is None else s.on(obj)) if visible else None
        return visible, at, steps


# -- the gate in the append path ------------------------------------------------------------------


_CONV_INS: Final = "INSERT OR IGNORE INTO mem_conv VALUES(?, ?, ?, ?)"


def _conv_row(entry: Entry) -> tuple[Any, str | None, str, int]:
    parent = entry.body.get("parent_event_id")
    return (entry.body["id"], parent if isinstance(parent, str) else None, entry.branch, entry.seq)


_GATED_INS: Final = "INSERT INTO mem_gated VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


class Pending:
    """The ``mem_conv`` and ``mem_gated`` rows of the batch being appended, until ``flush``.

    A store that folds a batch (``memroot.projections.hook``'s) holds one as its ``gated``
    attribute: ``on_event`` and ``run`` then add their rows here instead of inserting each
    with a statement of its own, and the store writes them with one ``executemany`` per table
    when the batch ends (or drops them when it does not land). Every read of the two tables
    in this module writes them first (``_settle``; an operation's read of an object with
    rows held here too), so a later operation of the same batch sees exactly the tables it
    would have seen had every entry been appended on its own.
    """

    __slots__ = ("complete", "conv", "db", "gated", "held", "kept", "objects")

    def __init__(self, db: apsw.Connection, *, complete: bool = False) -> None:
        """Hold rows for ``db`` (written there by ``flush``).

        ``complete``: ``db``'s ``mem_gated`` was empty and every row of the canonical
        branch will come through this holder (a replay's fold of ``main`` into fresh tables),
        until ``close``. An object of ``main`` with no id in ``ever`` then has no rows there,
        which a ``Folder`` of ``main`` knows without reading the table (``_Gate.folder``,
        and ``own_view_state`` through ``_COMPLETE``).
        """
        self.db = db
        self.conv: list[tuple[str, str | None, str, int]] = []
        self.gated: list[tuple[Any, ...]] = []
        self.objects: set[str] = set()
        """The objects ``gated`` holds rows of."""
        self.held = False
        """True while rows are held (the holder is then listed for ``_settle``)."""
        self.complete = complete
        self.kept: dict[str, list[tuple[Any, ...]]] = {}
        """With ``complete``: every row this holder was ever given, by object, in the order
        given (ledger order). A ``Folder`` of ``main`` reads an object's rows here instead of
        writing what is held and querying the table (the rows are the table's: ``main``'s
        operations are a few percent of the entries, so they are kept for the whole fold)."""
        if complete:
            _COMPLETE[db] = self

    def close(self) -> None:
        """Write the rows held; from now on rows may reach the table another way."""
        self.flush()
        self.abandon()

    def abandon(self) -> None:
        """Stop answering for the table (its fold failed, or ended): every read queries it."""
        self.complete = False
        self.kept.clear()
        if _COMPLETE.get(self.db) is self:
            del _COMPLETE[self.db]

    def hold(self) -> None:
        """List this holder for ``_settle`` (call when adding the first row)."""
        if not self.held:
            self.held = True
            _HELD.append(self)

    def flush(self) -> None:
        """Write the rows held (in the order they came) and forget them."""
        if self.conv:
            self.db.executemany(_CONV_INS, self.conv)
            self.conv.clear()
        if self.gated:
            self.db.executemany(_GATED_INS, self.gated)
            self.gated.clear()
            self.objects.clear()
        self._release()

    def flush_conv(self) -> None:
        """Write the ``mem_conv`` rows held (a walk of the conversation tree reads them).

        The ``mem_gated`` rows stay held: the walks do not read them.
        """
        if self.conv:
            self.db.executemany(_CONV_INS, self.conv)
            self.conv.clear()
        if not self.gated:
            self._release()

    def discard(self) -> None:
        """Drop the rows held (their batch never landed)."""
        self.conv.clear()
        self.gated.clear()
        self.objects.clear()
        self._release()

    def _release(self) -> None:
        if self.held:
            self.held = False
            _HELD.remove(self)


_HELD: list[Pending] = []
"""The holders holding rows now (rows are held only within an append's transaction)."""
_COMPLETE: weakref.WeakKeyDictionary[apsw.Connection, Pending] = weakref.WeakKeyDictionary()
"""Per database, the ``complete`` holder of its fold of ``main`` while that fold runs."""


def _settle(db: apsw.Connection) -> None:
    """Write the rows held for ``db`` (before a read of ``mem_conv`` or ``mem_gated``)."""
    if _HELD:
        for pending in [p for p in _HELD if p.db is db]:
            pending.flush()


def _settle_conv(db: apsw.Connection) -> None:
    """Write the ``mem_conv`` rows held for ``db`` (before a read of ``mem_conv`` only).

    Only a ``complete`` holder (a replay's fold of ``main``) keeps its ``mem_gated`` rows
    held; any other, and any without ``_KEPT``, writes everything as ``_settle`` does.
    """
    if _HELD:
        for pending in [p for p in _HELD if p.db is db]:
            if _KEPT and pending.complete:
                pending.flush_conv()
            else:
                pending.flush()


_KEPT: bool = True
"""Whether a replay's fold of ``main`` answers its ``mem_gated`` reads from the rows its
``complete`` holder keeps and writes only ``mem_conv`` before a walk of the tree. The
bookkeeping's rows and every answer are the same either way (the differential tests switch
it off: then every read writes what is held and queries the tables, as the append path)."""


def _pending_of(state: object) -> Pending | None:
    found = getattr(state, "gated", None)
    return found if type(found) is Pending else None


def on_event(eng: Rules, entry: Entry) -> None:
    """Record an event's conversation parent with where it was appended (``mem_conv``)."""
    row = _conv_row(entry)
    pending = _pending_of(eng.state)
    if pending is None:
        _db(eng).execute(_CONV_INS, row)
    else:
        pending.conv.append(row)
        pending.hold()


def on_events(eng: Rules, entries: Iterable[Entry]) -> None:
    """``on_event`` for a run of events, in one statement (the ledger's native batch path)."""
    on_conv_rows(eng, [_conv_row(e) for e in entries])


def on_conv_rows(eng: Rules, rows: list[tuple[Any, str | None, str, int]]) -> None:
    """``on_events`` given the events' ``mem_conv`` rows (``engine.event_rows`` built them)."""
    pending = _pending_of(eng.state)
    if pending is None:
        _db(eng).executemany(_CONV_INS, rows)
    elif rows:
        pending.conv.extend(rows)
        pending.hold()


_WALK: Final = (
    "WITH RECURSIVE up(id, parent, branch, seq, d) AS ("
    "SELECT id, parent, branch, seq, 0 FROM mem_conv WHERE id = ?1 "
    "UNION ALL SELECT c.id, c.parent, c.branch, c.seq, up.d + 1 FROM mem_conv c "
    "JOIN up ON c.id = up.parent WHERE up.d < ?2) "
    "SELECT id, parent, branch, seq FROM up"
)
"""The ``mem_conv`` rows of up to ``?2 + 1`` events from ``?1`` up the tree (one statement)."""
_CHUNK: Final = 8
_CHUNK_MAX: Final = 1024


def _rare(db: apsw.Connection, sql: str, params: Sequence[Any] = ()) -> apsw.Cursor:
    """Execute a statement the append path runs rarely, outside the statement cache.

    apsw's cache keeps the statements of the last 100 executions: a rarely run one would be
    prepared again anyway, and caching it would evict one the append path runs often.
    """
    return db.execute(sql, params, can_cache=False)


class _Down:
    """``D(P)``: the provenance events and all their ancestors, as recorded before the op.

    An event counts once the branch's view holds it (its ``mem_conv`` row is of a level of
    the view, within its bound), so a replay walks the same tree the append did: every row
    there was written by an earlier entry. Walked lazily, only as far as a row's provenance
    needs, a chunk of ancestors per statement (8, then 8 times as many each time, up to
    1024): an event near the provenance costs one statement; only one off the path the whole
    walk.
    """

    def __init__(self, db: apsw.Connection, view: View, prov: Sequence[str]) -> None:
        self.db = db
        self.prov = prov
        self.view = view
        self.levels = dict(view.levels)
        self.seen: set[str] = set()
        self.parent: dict[str, str | None] = {}
        """The recorded parent of every event of ``seen``."""
        self.frontier: list[str] = list(prov)
        self._chunk = _CHUNK
        self._steps = 0

    def _held(self, branch: str, seq: int) -> bool:
        bound = self.levels.get(branch, -1)
        return bound is None or -1 < seq <= bound

    def linked(self) -> bool:
        """Return True when a provenance event has a recorded parent or child in the view."""
        if not self._steps:
            self._step()  # every provenance event the view holds, with >= 8 of its ancestors
        held = [e for e in dict.fromkeys(self.prov) if e in self.seen]
        if not held:
            return False
        if any(self.parent[e] in self.seen for e in held):
            return True
        # mem_conv rows carry (branch, seq) like mem_events: the view's event condition serves.
        cond, params = self.view.events("c")
        _settle_conv(self.db)
        row = _rare(
            self.db,
            f"SELECT 1 FROM mem_conv c WHERE c.parent IN (SELECT value FROM json_each(?)) "
            f"AND {cond} LIMIT 1",
            (json.dumps(held), *params),
        ).fetchone()
        return row is not None

    def _step(self) -> None:
        """Advance every walk by a chunk (a walk ends at a root, an event not held, a loop)."""
        nxt: list[str] = []
        chunk = self._chunk
        _settle_conv(self.db)
        for node in self.frontier:
            if node in self.seen:
                continue  # walked already
            # Cached: a walk's next chunk finds it prepared (a statement is one cache slot).
            got = cast(
                "list[tuple[str, str | None, str, int]]",
                self.db.execute(_WALK, (node, chunk)).fetchall(),
            )
            rows = {r[0]: r for r in got}  # the chain, in whatever order the rows came
            cur: str | None = node
            for _ in range(chunk + 1):
                if cur is None or cur in self.seen:
                    cur = None  # a root, or walked already (shared ancestors, links that loop)
                    break
                row = rows.get(cur)
                if row is None or not self._held(row[2], row[3]):
                    cur = None  # an event not recorded, or not held by the view
                    break
                self.seen.add(cur)
                self.parent[cur] = row[1]
                cur = row[1]
            if cur is not None:
                nxt.append(cur)  # the chunk ended before the walk did
        self.frontier = nxt
        self._chunk = min(chunk * 8, _CHUNK_MAX)
        self._steps += 1

    def __contains__(self, event_id: str) -> bool:
        while event_id not in self.seen and self.frontier:
            self._step()
        return event_id in self.seen

    def admits(self, row: GatedOp) -> bool:
        """Return True when the row's provenance lies in ``D(P)``."""
        return all(e in self for e in row.prov)


class _Delegate:
    """A ``StateStore`` passing everything to another one (subclasses override)."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self.writes: list[tuple[MemoryObject, MemoryObject]] = []
        self.read: dict[tuple[str, str], MemoryObject] = {}
        self.events: dict[tuple[str, str], EventRef | None] = {}
        """Events already read (``_Gate.read``); events do not change during an operation."""

    def event(self, branch: str, event_id: str) -> EventRef | None:
        key = (branch, event_id)
        if key in self.events:
            return self.events[key]
        return self.inner.event(branch, event_id)

    def add_event(self, event: EventRef) -> None:
        self.inner.add_event(event)

    def erase_event(self, event_id: str, seq: int) -> None:
        self.inner.erase_event(event_id, seq)

    def obj(self, branch: str, object_id: str) -> MemoryObject | None:
        # Objects change only through put_object, which updates this cache: within one
        # operation a second read of an object needs no query.
        key = (branch, object_id)
        found = self.read.get(key)
        if found is None:
            found = self.inner.obj(branch, object_id)
            if found is not None:
                self.read[key] = found
        return found

    def put_object(self, obj: MemoryObject, *, new: bool) -> None:
        key = (obj.branch, obj.id)
        if not new:
            # Handlers read an object before they change it.
            old = self.obj(obj.branch, obj.id)
            if old is not None:
                self.writes.append((old, obj))
        self.inner.put_object(obj, new=new)
        self.read[key] = obj

    def used(self, branch: str, node_id: str) -> bool:
        return self.inner.used(branch, node_id)

    def citing(self, branch: str, event_id: str) -> list[str]:
        return self.inner.citing(branch, event_id)

    def entity(self, branch: str, entity_id: str) -> Entity | None:
        return self.inner.entity(branch, entity_id)

    def put_entity(self, entity: Entity, *, new: bool) -> None:
        self.inner.put_entity(entity, new=new)

    def add_edge(self, edge: Edge) -> None:
        self.inner.add_edge(edge)

    def namespace(self, branch: str, namespace_id: str) -> Namespace | None:
        return self.inner.namespace(branch, namespace_id)

    def add_namespace(self, namespace: Namespace) -> None:
        self.inner.add_namespace(namespace)

    def permissions(self, branch: str, namespace_id: str, actor_id: str) -> frozenset[str] | None:
        return self.inner.permissions(branch, namespace_id, actor_id)

    def admins(self, branch: str, namespace_id: str) -> int:
        return self.inner.admins(branch, namespace_id)

    def add_grant(self, grant: Grant) -> None:
        self.inner.add_grant(grant)

    def close_grant(
        self, branch: str, namespace_id: str, actor_id: str, permission: str, seq: int
    ) -> None:
        self.inner.close_grant(branch, namespace_id, actor_id, permission, seq)

    def head(self, branch: str) -> int:
        return self.inner.head(branch)

    def set_head(self, branch: str, size: int) -> None:
        self.inner.set_head(branch, size)

    def skip(self, branch: str, seq: int, op_type: str, reason: str) -> None:
        self.inner.skip(branch, seq, op_type, reason)

    def add_fork(self, fork: Fork) -> None:
        self.inner.add_fork(fork)


class _Overlay(_Delegate):
    """The state of an operation's own view: objects folded there; records writes, keeps none."""

    def __init__(
        self,
        inner: StateStore,
        folder: Folder,
        current: dict[tuple[str, str], MemoryObject] | None = None,
    ) -> None:
        super().__init__(inner)
        self.folder = folder
        self.current = {} if current is None else current
        """Current (global) versions already read: nothing is written before this runs."""

    def obj(self, branch: str, object_id: str) -> MemoryObject | None:
        cur = self.current.get((branch, object_id)) or self.inner.obj(branch, object_id)
        found = None if cur is None else self.folder.state(cur)
        if found is not None:
            self.read.setdefault((branch, object_id), found)
        return found

    def put_object(self, obj: MemoryObject, *, new: bool) -> None:
        if not new:
            old = self.read.get((obj.branch, obj.id)) or self.obj(obj.branch, obj.id)
            if old is not None:
                self.writes.append((old, obj))

    def erase_event(self, event_id: str, seq: int) -> None:
        pass

    def put_entity(self, entity: Entity, *, new: bool) -> None:
        pass

    def add_edge(self, edge: Edge) -> None:
        pass


def _global(eng: _Eng, handler: Callable[[_Eng, Op], None], op: Op, rec: _Delegate) -> _Delegate:
    handler(type(eng)(rec), op)
    return rec


def _obj_rows(n: int) -> str:
    return (
        f"SELECT {', '.join('o.' + c for c in OBJECT_COLS)}, CASE WHEN EXISTS(SELECT 1 FROM "
        "mem_gated g WHERE g.object_id = o.id AND g.branch = ?1) THEN (SELECT "
        f"json_group_array(json_array({_COLS})) FROM mem_gated g WHERE g.object_id = o.id "
        "AND g.branch = ?1) END, (SELECT json_array("
        f"{', '.join(EVENT_COLS)}) FROM mem_events WHERE id = ?2) FROM mem_objects o "
        f"WHERE o.id IN ({', '.join(f'?{3 + k}' for k in range(n))}) AND o.branch = ?1 "
        "AND o.vto IS NULL"
    )


_OBJ_ROWS: Final = _obj_rows(1)
"""Objects' current versions in a one-level view, each one's gated rows there (a JSON array;
NULL when it has none), and (``?2``, may be NULL) the event the operation cites as evidence:
one statement text for every read, so that apsw's statement cache keeps it."""
_N_OBJ: Final = len(OBJECT_COLS)


_DIRECT: dict[type, bool] = {}
"""Per store class: whether it reads objects and events from the SQL tables as they are."""


class _Gate:
    """What ``run`` knows of one operation's objects: their versions and whether they have rows.

    In a view of one level (``main``, read now) one statement per object gives the version
    the handler reads (kept in the global run's read cache, so the handler does not read it
    again) and whether the object has ``mem_gated`` rows; elsewhere (a branch, or a store
    that is not the SQL tables) the rows are loaded by a ``Folder`` as needed.
    """

    def __init__(self, eng: Rules, op: Op, rec: _Delegate) -> None:
        self.db = _db(eng)
        self.branch = op.branch
        self.rec = rec
        self.pending = _pending_of(eng.state)
        self.known: dict[str, bool] = {}
        self._folder: Folder | None = None
        self._view: View | None = None
        # main's view is itself, read now: no other level to look through. The tables are
        # read directly only where the store reads them as they are (a subclass such as the
        # batched hook's store is one, unless it answers objects or events from memory).
        kind = type(eng.state)
        direct = _DIRECT.get(kind)
        if direct is None:
            direct = _DIRECT[kind] = (
                issubclass(kind, SqlState)
                and kind.obj is SqlState.obj
                and kind.event is SqlState.event
            )
        self._direct = direct and op.branch == CANONICAL_BRANCH

    @property
    def view(self) -> View:
        """The view of the operation's branch (computed on first use)."""
        if self._view is None:
            self._view = view_of(self.db, self.branch)
        return self._view

    def read(self, ids: Sequence[str], evidence: str | None = None) -> None:
        """Read the objects' versions and whether they have rows (one statement each).

        ``evidence`` (an event the operation cites) is read in the same statement: the
        handler's check of it then needs no statement of its own.
        """
        if not self._direct:
            self.folder().preload(ids)
            return
        branch, n = self.branch, _N_OBJ
        pending = self.pending
        if pending is not None and not pending.objects.isdisjoint(ids):
            pending.flush()  # an object's rows from earlier in the batch: read them too
        for k, i in enumerate(ids):
            if i in self.known:
                continue
            cite = evidence if k == 0 else None
            r = self.db.execute(_OBJ_ROWS, (branch, cite, i)).fetchone()
            if r is None:
                continue
            self.rec.read[(branch, i)] = object_from_row(r[:n])
            self.known[i] = r[n] is not None
            if r[n] is not None:
                self.folder().load(json.loads(r[n]), [i])
            if cite is not None:
                ev = None if r[n + 1] is None else json.loads(r[n + 1])
                # As SqlState.event in main: an event of another branch is not seen there.
                self.rec.events[(branch, cite)] = (
                    event_from_row(ev) if ev is not None and ev[1] == branch else None
                )

    def folder(self) -> Folder:
        """Return the folder of the branch's view (created on first use)."""
        if self._folder is None:
            self._folder = Folder(self.db, self.view, holder=self.pending)
        return self._folder

    def has_rows(self, object_id: str) -> bool:
        """Return True when the object has gated rows in the view."""
        known = self.known.get(object_id)
        if known is not None:
            return known
        return bool(self.folder().rows_of(object_id))

    def creation_evidence(self, obj: MemoryObject) -> tuple[str, ...]:
        """Return the evidence the object's ASSERT gave it (``Folder.creation_evidence``)."""
        if not self.has_rows(obj.id):
            return obj.evidence_ids
        return self.folder().creation_evidence(obj)


def run(eng: _Eng, handler: Callable[[_Eng, Op], None], op: Op) -> None:
    """Run ``handler`` for ``op`` with invalidation gated by provenance (see the module doc).

    Operations that change no object's state run as they are. An operation whose objects
    have no gated rows, or whose own view gives them their global state, runs once (that
    one run checks both views); only one whose own view differs runs in both.

    Raises:
        RuleError, ValidationError: what the handler raises in the operation's own view
            (or, without provenance, in the global state); nothing is written then.
    """
    t = op.op_type
    if t not in GATED_OPS or (t in _STATE and op.target_type != OBJECT_TARGET):
        handler(eng, op)
        return
    explicit: tuple[str, ...] = ()
    if t in EVIDENCE_OPS and t not in _STATE:
        explicit = tuple(op.p.get("evidence_ids") or ())
    elif t in _STATE and isinstance(op.p.get("evidence_ids"), tuple):
        explicit = op.p["evidence_ids"]
    check = bool(explicit) and t in _NEW_EVIDENCE
    involved = [op.target_id, *(op.p["merged_ids"] if t == _O.DEDUP_RESOLVED else ())]
    prov = set(explicit)
    cited = (
        op.p["new_object_id"]
        if t == _O.SUPERSEDE
        else op.p["primary_id"]
        if t == _O.DEDUP_RESOLVED
        else None
    )
    if cited is not None:
        involved.append(cited)
    ids = [i for i in dict.fromkeys(involved) if isinstance(i, str)]
    rec = _Delegate(eng.state)  # the global run's store: what is read here is read once
    gate = _Gate(eng, op, rec)
    gate.read(ids, explicit[0] if check and len(explicit) == 1 else None)
    if check:
        type(eng)(rec)._evidence(op, explicit)  # the new field is checked as ASSERT evidence
    if cited is not None:
        other = rec.obj(op.branch, cited)
        if other is not None:
            prov.update(gate.creation_evidence(other))
    provenance = tuple(sorted(prov))
    applied = True
    if not provenance or not any(gate.has_rows(i) for i in ids):
        # No provenance, or no object the handler reads has gated rows: its own view then
        # holds exactly the global state of those objects, so one run checks both.
        writes = _global(eng, handler, op, rec).writes
    else:
        db, folder = gate.db, gate.folder()
        folder.load((), [i for i in ids if gate.known.get(i) is False])  # read: no rows
        folder.preload(ids)  # (those not read with their rows)
        down = _Down(db, folder.view, provenance)
        if not down.linked():
            writes = _global(eng, handler, op, rec).writes
        else:
            view_folder = Folder(db, folder.view, down.admits)
            view_folder.share(folder)
            if all(
                cur is None or view_folder.state(cur) == cur
                for cur in (rec.obj(op.branch, i) for i in ids)
            ):
                # The own view gives every object the handler reads its global state: one
                # run again checks both (and the global state applies it).
                writes = _global(eng, handler, op, rec).writes
            else:
                overlay = _Overlay(eng.state, view_folder, dict(rec.read))
                handler(type(eng)(overlay), op)
                writes = overlay.writes
                _settle(db)  # nothing held is written inside the savepoint (a rollback there)
                _rare(db, "SAVEPOINT mem_gate")
                try:
                    _global(eng, handler, op, rec)
                except RuleError:
                    # Valid in its own view, not in the global state (which keeps what it had).
                    _rare(db, "ROLLBACK TO mem_gate")
                    applied = False
                _rare(db, "RELEASE mem_gate")
    if not writes:
        return
    intent = _intent_text(op)
    prov_text = ",".join(provenance)
    written = [new.id for _, new in writes if new.id not in gate.known]
    if written:
        gate.folder().preload(written)  # objects the handler changed beyond those it cited
    pending = gate.pending
    for n, (old, new) in enumerate(writes):
        had = gate.has_rows(new.id)
        if not provenance and not had:
            continue  # no provenance on an object without rows: global state everywhere
        row = (
            op.branch,
            op.seq,
            n,
            new.id,
            op.id,
            t,
            op.ts,
            prov_text,
            intent,
            int(applied),
            None if had else _base_text(old),
        )
        if pending is None:
            gate.db.execute(_GATED_INS, row)
        else:
            pending.gated.append(row)
            pending.objects.add(new.id)
            if pending.complete and op.branch == CANONICAL_BRANCH:
                pending.kept.setdefault(new.id, []).append(row)
            pending.hold()


def own_view_state(
    db: apsw.Connection, branch: str, seq: int, object_id: str, provenance: Sequence[str]
) -> str | None:
    """Return an object's falsification state in the own view of an operation at ``seq``.

    The view is ``D(provenance)`` as the memory state had it before entry ``seq`` of
    ``branch`` (the operation's own rows, if already folded, are not in it): exactly the
    state ``run`` checks a ``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` with ``evidence_ids``
    against. None when such an operation is checked against the global state instead: no
    provenance, an object without gated rows, a provenance linked to no conversation tree
    (a flat log), or a branch the memory state has not folded.
    """
    if not provenance or seq < 1:
        return None
    holder = _COMPLETE.get(db)
    if (
        holder is not None
        and holder.complete
        and branch == CANONICAL_BRANCH
        and object_id not in holder.kept
    ):
        return None  # a fold of main into fresh tables that never wrote a row of it: none
    try:
        view = view_of(db, branch, seq - 1)
    except NotFoundError:
        return None
    folder = Folder(db, view, holder=holder)
    if not folder.rows_of(object_id):
        return None
    down = _Down(db, view, tuple(sorted(set(provenance))))
    if not down.linked():
        return None
    mine = Folder(db, view, down.admits)
    mine.share(folder)
    s, _ = mine.fold(object_id)
    return None if s is None else s.state


# -- a past read at an anchor (verifying read receipts) -------------------------------------------


def path_as_of(db: apsw.Connection, view: View, anchor: str) -> set[str]:
    """Return the anchor's ancestor path (anchor included) over the events ``view`` holds.

    With a view bounded at entry ``S`` this is the path a read right after ``S`` walked:
    events recorded later are not on it. Empty when the view does not hold the anchor.
    """
    walk = _Down(db, view, [anchor])
    while walk.frontier:
        walk._step()
    return walk.seen


# -- digest (step 9, rebuild) ---------------------------------------------------------------------


_GATED_SQL: Final = (
    "SELECT 'g', seq, n, object_id, op_id, op_type, ts, prov, intent, applied, base "
    "FROM mem_gated WHERE branch = ?1 AND seq <= ?2 ORDER BY seq, n",
    "SELECT 'c', seq, id, parent FROM mem_conv WHERE branch = ?1 AND seq <= ?2 ORDER BY seq",
)
"""The rows of ``gated_rows``, each led by its table's tag."""
_GATED_COUNT: Final = (
    "SELECT (SELECT count(*) FROM mem_gated WHERE branch = ?1 AND seq <= ?2) + "
    "(SELECT count(*) FROM mem_conv WHERE branch = ?1 AND seq <= ?2)"
)
_DIGEST_CHUNK: Final = 1024


def _gated_cursors(db: apsw.Connection, branch: str, as_of: int | None) -> Iterable[Any]:
    _settle(db)  # the rows a batch holds are part of the tables read
    bound = 2**63 - 1 if as_of is None else as_of
    for sql in _GATED_SQL:
        yield db.execute(sql, (branch, bound))


def iter_gated_rows(
    db: apsw.Connection, branch: str, as_of: int | None = None
) -> Iterable[list[Any]]:
    """Yield the rows of ``gated_rows`` one at a time (nothing is held but the cursor)."""
    for cursor in _gated_cursors(db, branch, as_of):
        for r in cursor:
            yield list(r)


def gated_rows(db: apsw.Connection, branch: str, as_of: int | None = None) -> list[list[Any]]:
    """Return the rows of ``mem_gated`` then ``mem_conv`` of ``branch`` (entries <= ``as_of``).

    Each row is tagged with its table (``"g"`` or ``"c"``), in seq order.
    """
    return list(iter_gated_rows(db, branch, as_of))


def gated_digest(db: apsw.Connection, branch: str, as_of: int | None = None) -> bytes:
    """Return ``SHA-256("memroot/gated-state/v1" || 0x00 || cbor([1, branch, rows]))``.

    ``rows`` are ``gated_rows``: the gated bookkeeping of ``branch``, which a replay of the
    ledger reproduces exactly (step 9 and ``rebuild`` compare it). Streamed: the rows are
    counted first, then hashed a chunk at a time (a canonical CBOR array is its head and its
    items' encodings, one after another), so memory does not grow with the ledger.
    """
    bound = 2**63 - 1 if as_of is None else as_of
    _settle(db)
    found: Any = db.execute(_GATED_COUNT, (branch, bound)).fetchall()[0][0]
    count = int(found)
    h = sha256_stream()
    h.update(DIGEST_TAG.encode("ascii") + b"\x00")
    h.update(array_head(3) + encoding.encode(1) + encoding.encode(branch) + array_head(count))
    seen = 0
    for cursor in _gated_cursors(db, branch, as_of):
        while block := list(itertools.islice(cursor, _DIGEST_CHUNK)):
            h.update(encode_rows(block)[len(array_head(len(block))) :])
            seen += len(block)
    if seen != count:  # cannot happen inside one transaction; never hash a wrong head
        raise StorageError(f"gated rows of {branch!r} changed while they were digested")
    digest: bytes = h.digest()
    return digest
