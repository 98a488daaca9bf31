"""Item states (SPEC 7): ``live | stale | falsified``, with their full history.

Derived from ``FALSIFY``, ``MARK_STALE``, ``RESTORE`` and ``CASCADE`` entries only (so a
replay rebuilds them): ``fz_states`` holds one row per change of one item, with the entry
that made it (branch, seq, operation, actor, reason, evidence). An item with no row is
``live``. A branch sees its own changes over its ancestors' as they were at each fork
(``deps.View``), so a falsification in ``main`` after a fork does not reach the branch, and a
branch's own falsifications never reach its parent.

``fz_skipped`` records state operations found in the log that the rules refuse (appended
without the falsification hook); replay skips them the same way and ``verify`` notes them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import apsw

from memroot.ledger.entries import Entry
from memroot.memory_root.falsify.deps import ItemRef, View

__all__ = [
    "FALSIFIED",
    "LIVE",
    "STALE",
    "STATES",
    "StateChange",
    "current",
    "history",
    "install",
    "not_live",
    "record",
    "record_many",
    "skip",
]

LIVE: Final = "live"
STALE: Final = "stale"
FALSIFIED: Final = "falsified"
STATES: Final = (LIVE, STALE, FALSIFIED)

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS fz_states(
    kind TEXT NOT NULL, id TEXT NOT NULL, branch TEXT NOT NULL, seq INTEGER NOT NULL,
    state TEXT NOT NULL CHECK(state IN ('live', 'stale', 'falsified')),
    op TEXT NOT NULL, actor_id TEXT NOT NULL, actor_type TEXT NOT NULL,
    reason TEXT, evidence TEXT NOT NULL,
    PRIMARY KEY(kind, id, branch, seq)) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fz_states_seq ON fz_states(branch, seq);
CREATE TABLE IF NOT EXISTS fz_skipped(
    branch TEXT NOT NULL, seq INTEGER NOT NULL, op_type TEXT NOT NULL, reason TEXT NOT NULL,
    PRIMARY KEY(branch, seq)) STRICT, WITHOUT ROWID;
"""

_COLS: Final = "kind, id, branch, seq, state, op, actor_id, actor_type, reason, evidence"


@dataclass(frozen=True, slots=True)
class StateChange:
    """One change of one item's state, and the entry that made it."""

    item: ItemRef
    branch: str
    seq: int
    state: str
    op: str
    actor_id: str
    actor_type: str
    reason: str | None
    evidence: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """Return the change as a JSON-ready dict."""
        return {
            "type": self.item.kind,
            "id": self.item.id,
            "branch": self.branch,
            "seq": self.seq,
            "state": self.state,
            "op": self.op,
            "actor_id": self.actor_id,
            "actor_type": self.actor_type,
            "reason": self.reason,
            "evidence_ids": list(self.evidence),
        }


def install(db: apsw.Connection) -> None:
    """Create the state tables if missing (inside a write transaction)."""
    db.execute(_SCHEMA)


def _change(r: Sequence[Any]) -> StateChange:
    kind, item_id, branch, seq, state, op, actor_id, actor_type, reason, evidence = r
    return StateChange(
        ItemRef(str(kind), str(item_id)),
        str(branch),
        int(seq),
        str(state),
        str(op),
        str(actor_id),
        str(actor_type),
        None if reason is None else str(reason),
        tuple(json.loads(evidence)),
    )


def _level_rows(
    db: apsw.Connection, item: ItemRef, branch: str, bound: int | None, *, latest: bool
) -> list[Any]:
    where = "kind = ? AND id = ? AND branch = ?" + ("" if bound is None else " AND seq <= ?")
    params: tuple[Any, ...] = (item.kind, item.id, branch)
    if bound is not None:
        params += (bound,)
    order = "ORDER BY seq DESC LIMIT 1" if latest else "ORDER BY seq"
    return db.execute(f"SELECT {_COLS} FROM fz_states WHERE {where} {order}", params).fetchall()


def current(db: apsw.Connection, view: View, item: ItemRef) -> StateChange | None:
    """Return the change that set the item's state in this view, or None (it is live)."""
    for branch, bound in view:
        rows = _level_rows(db, item, branch, bound, latest=True)
        if rows:
            return _change(rows[0])
    return None


def history(db: apsw.Connection, view: View, item: ItemRef) -> list[StateChange]:
    """Return every change of the item the view sees, oldest first (ancestors' first)."""
    out: list[StateChange] = []
    for branch, bound in reversed(view):
        out.extend(_change(r) for r in _level_rows(db, item, branch, bound, latest=False))
    return out


def not_live(db: apsw.Connection, view: View, kind: str | None = None) -> dict[ItemRef, str]:
    """Return every item (of ``kind``, default all) that is stale or falsified in the view."""
    states: dict[ItemRef, str] = {}
    for branch, bound in reversed(view):
        where = "t.branch = ?" + ("" if bound is None else " AND t.seq <= ?")
        params: list[Any] = [branch] + ([] if bound is None else [bound])
        if kind is not None:
            where += " AND t.kind = ?"
            params.append(kind)
        inner = "i.kind = t.kind AND i.id = t.id AND i.branch = t.branch" + (
            "" if bound is None else " AND i.seq <= ?"
        )
        sql = (
            f"SELECT t.kind, t.id, t.state FROM fz_states t WHERE {where} AND t.seq = "
            f"(SELECT max(i.seq) FROM fz_states i WHERE {inner})"
        )
        for k, i, s in db.execute(sql, (*params, *([] if bound is None else [bound]))):
            states[ItemRef(str(k), str(i))] = str(s)
    return {item: s for item, s in states.items() if s != LIVE}


def record(
    db: apsw.Connection,
    entry: Entry,
    item: ItemRef,
    state: str,
    reason: str | None,
    evidence: Sequence[str] = (),
) -> None:
    """Store one item's change by ``entry`` (inside its append transaction)."""
    record_many(db, entry, [item], state, reason, evidence)


def record_many(
    db: apsw.Connection,
    entry: Entry,
    items: Sequence[ItemRef],
    state: str,
    reason: str | None,
    evidence: Sequence[str] = (),
) -> None:
    """Store the same change of several items by ``entry`` (a CASCADE's touched items)."""
    b = entry.body
    ev = json.dumps(list(evidence))
    db.executemany(
        f"INSERT INTO fz_states({_COLS}) VALUES(?,?,?,?,?,?,?,?,?,?)",
        [
            (
                i.kind,
                i.id,
                entry.branch,
                entry.seq,
                state,
                entry.type,
                str(b.get("actor_id", "")),
                str(b.get("actor_type", "")),
                reason,
                ev,
            )
            for i in items
        ],
    )


def skip(db: apsw.Connection, entry: Entry, reason: str) -> None:
    """Record a state operation of the log that the rules refuse (replay skips it too)."""
    db.execute(
        "INSERT OR REPLACE INTO fz_skipped VALUES(?,?,?,?)",
        (entry.branch, entry.seq, entry.type, reason),
    )
