"""Before a state operation is accepted: check the states it is validated against (issue 23.3).

``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` / ``CASCADE`` are validated against an item's state
in ``fz_states``, a derived table anyone who can write the file can edit: delete the row of
a ``FALSIFY`` and the item reads ``live``, so a second ``FALSIFY`` would be accepted and land
in the log, where every replay then skips it. So before the falsification hook validates a
live state operation on a strict ledger, each item it names (its target; the items its
cascade lists name) has its state rows checked against the ledger's own operations, read
strictly (each entry proven in the signed tree):

- every row the item has in the branch's view names an entry that is a state operation
  naming the item, by the row's actor, giving the row's state (``FALSIFY``: falsified,
  ``MARK_STALE`` and ``CASCADE``: stale, ``RESTORE``: live, or stale for a root its cascade
  part withdraws);
- every ``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` whose target is the item has its row, or is
  recorded as skipped (``fz_skipped``) or as not applied globally (``fz_unapplied``); a skip
  must be one the state before it refuses, or one a replay of the log makes too
  (``replay.replayed_skips``: a forged skip row hides no honest operation).

The entries are found by a strict scan of the view's operations (each level up to its fork),
so a deleted row is seen. A scan is kept per branch with the hash of the last entry it read,
its operations indexed by the ids they name; the next state operation reads only the entries
after it, once that entry proves again with the same hash, and looks up its items' operations
in the index (``_state_ops``), so its cost does not grow with the log. Memory
objects are also checked by the memory model's own row check (``projections.hook``).

Raises ``IntegrityError`` (step 9, naming the item and the entry), so nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Final

import apsw

from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind
from memroot.ledger.errors import IntegrityError, MemrootError
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType
from memroot.memory_root.falsify.deps import KINDS, STATE_OPS, ItemRef
from memroot.memory_root.falsify.replay import replayed_skips
from memroot.memory_root.falsify.states import FALSIFIED, LIVE, STALE
from memroot.projections.rules import RuleError
from memroot.projections.states import check_state_change

__all__ = ["check_item_read", "check_item_states", "items_of", "view_levels"]

_TARGET_OPS: Final = frozenset(
    {OpType.FALSIFY.value, OpType.MARK_STALE.value, OpType.RESTORE.value}
)
_GIVES: Final = {
    OpType.FALSIFY.value: FALSIFIED,
    OpType.MARK_STALE.value: STALE,
    OpType.CASCADE.value: STALE,
}


def items_of(entry: Entry) -> list[ItemRef]:
    """Return the items a state operation is validated against: its target, its lists' items."""
    out: list[ItemRef] = []
    kind, target = entry.body.get("target_type"), entry.body.get("target_id")
    if isinstance(kind, str) and kind in KINDS and isinstance(target, str):
        out.append(ItemRef(kind, target))
    payload = entry.body.get("payload")
    for t in _listed(payload):
        out.append(t)
    return list(dict.fromkeys(out))


def _listed(value: object) -> Iterable[ItemRef]:
    """Every ``{"type": kind, "id": id}`` found in a payload (a cascade's lists)."""
    if isinstance(value, Mapping):
        kind, i = value.get("type"), value.get("id")
        if isinstance(kind, str) and kind in KINDS and isinstance(i, str):
            yield ItemRef(kind, i)
        for v in value.values():
            yield from _listed(v)
    elif isinstance(value, list):
        for v in value:
            yield from _listed(v)


def _strings(value: object) -> Iterator[str]:
    """Every text value in ``value``, through the values of maps and the items of lists."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _names(value: object, needle: str) -> bool:
    return any(s == needle for s in _strings(value))


def view_levels(ledger: Ledger, branch: str) -> list[tuple[str, int | None]]:
    """Return the branch's view from the ledger's branch records: itself, then its ancestors."""
    out: list[tuple[str, int | None]] = [(branch, None)]
    current = branch
    while current != CANONICAL_BRANCH:
        parent, anchor = ledger.store.branch_parent(current)
        if parent is None or anchor is None:
            break
        # It sees the parent as of the entry before its anchor (the BRANCH_CREATE), as the
        # fork records of every layer do (``projections.views.fork_from_genesis``).
        out.append((parent, anchor - 1))
        current = parent
    return out


def _refused(item: ItemRef, branch: str, seq: int | None, what: str) -> IntegrityError:
    return IntegrityError(
        f"step 9: the stored state of {item.kind} {item.id} {what} (derived state edited); "
        "nothing was written: run `memroot verify`, or `memroot rebuild` to re-derive it",
        branch=branch,
        seq=seq,
        step=9,
    )


def _row_ok(item: ItemRef, state: str, op: str, actor: str, e: Entry) -> bool:
    """Whether entry ``e`` gives ``item`` the row (state, op, actor) the table holds."""
    if e.kind is not Kind.OP or e.type != op or e.body.get("actor_id") != actor:
        return False
    target = e.body.get("target_type") == item.kind and e.body.get("target_id") == item.id
    if op in _GIVES and (target or op == OpType.CASCADE):
        return state == _GIVES[op] and (target or _names(e.body.get("payload"), item.id))
    if op == OpType.RESTORE:
        if target:
            return state == LIVE
        return state in (LIVE, STALE) and _names(e.body.get("payload"), item.id)
    return False


def _skip_explained(ledger: Ledger, prior: str, e: Entry, item: ItemRef) -> bool:
    """Whether a recorded skip of a target operation is what an honest replay does.

    A skip row is derived (anyone can add one to hide an honest ``FALSIFY``), so it is judged
    again: when the checked state before it refuses the operation it is explained at once
    (every replay skips it); a transition that state allows (skipped, if at all, for a
    malformed payload, evidence its view did not see, a memory object's own view, an item
    not there yet) is judged by a replay of the log with the rules every replay applies
    (``replay.replayed_skips``), memory objects included.
    """
    try:
        check_state_change(e.type, f"{item.kind} {item.id}", prior)
    except RuleError:
        return True  # the state before it refuses it: skipped
    return (e.branch, e.seq) in replayed_skips(ledger)


class _Scan:
    """The state operations of one branch's entries ``0..size``, indexed by what they name."""

    __slots__ = ("by_name", "last", "ops", "size")

    def __init__(self) -> None:
        self.size = 0
        self.last = b""  # the hash of entry ``size - 1``
        self.ops: list[Entry] = []  # in log order
        self.by_name: dict[str, list[int]] = {}
        """target_id and every text of the payload -> positions in ``ops``."""

    def add(self, e: Entry) -> None:
        """Index one more state operation (later in the log than every one held)."""
        at = len(self.ops)
        self.ops.append(e)
        target = e.body.get("target_id")
        names = set(_strings(e.body.get("payload")))
        if isinstance(target, str):
            names.add(target)
        for name in names:
            self.by_name.setdefault(name, []).append(at)

    def naming(self, ids: Iterable[str], stop: int) -> list[Entry]:
        """Return the operations before seq ``stop`` whose target or payload names an id."""
        at = sorted({p for i in ids for p in self.by_name.get(i, ())})
        return [e for e in (self.ops[p] for p in at) if e.seq < stop]


_SCANNED: dict[tuple[str, str], _Scan] = {}
"""(ledger id, branch) -> the scan of its entries up to where the last one read."""


def _state_ops(
    ledger: Ledger, branch: str, size: int, stop: int, ids: Iterable[str]
) -> list[Entry]:
    """Return the state operations among entries ``0..stop`` of ``branch`` naming ``ids``.

    Read strictly; an operation names an id when it is its ``target_id`` or any text of its
    payload (a cascade's lists). What an earlier scan found is kept, indexed by name, with
    the hash of the last entry it read: when that entry, proven again in the signed tree
    now, has the same hash, every entry before it is the same too (the hash chain), so only
    the entries after it are read, and finding the operations costs what they are, not the
    length of the log.

    Raises:
        IntegrityError: an entry fails its strict read.
    """
    key = (ledger.ledger_id, branch)
    scan = _SCANNED.get(key)
    if scan is not None and not (
        0 < scan.size <= size
        and ledger.read_many([scan.size - 1], branch, links=False)[scan.size - 1].entry.hash
        == scan.last
    ):
        scan = None
    start = 0 if scan is None else scan.size
    end = max(start, stop)
    if scan is None or end > start:
        fresh: list[Entry] = []
        last = b"" if scan is None else scan.last
        for e in ledger.entries(start, end, branch):
            if e.kind is Kind.OP and e.type in STATE_OPS:
                fresh.append(e)
            last = e.hash
        # Kept only once every entry read proved: a failed read leaves the earlier scan.
        if scan is None:
            scan = _Scan()
        for e in fresh:
            scan.add(e)
        scan.size, scan.last = end, last
        if end > 0 and last:
            _SCANNED[key] = scan
    return scan.naming(ids, stop)


def check_item_states(ledger: Ledger, db: apsw.Connection, entry: Entry) -> None:
    """Check the stored states a live state operation ``entry`` is validated against.

    Run inside the append transaction, before the falsification rules read ``fz_states``.
    Rows this transaction wrote itself (entries of its batch, not stored yet) are the
    writer's own. A non-strict ledger is not checked.

    Raises:
        IntegrityError: step 9, naming the item whose stored state is not what the ledger's
            operations give, or the step of an entry that fails its strict read.
    """
    if ledger.replaying or not ledger.strict:
        return
    items = items_of(entry)
    if not items:
        return
    levels = view_levels(ledger, entry.branch)
    stored = {b: ledger.size(b) for b, _ in levels}
    # The view's operations naming any of the items, in the view's order (ancestors first).
    ids = {i.id for i in items}
    ops: list[tuple[str, int, Entry]] = []
    for b, bound in reversed(levels):
        stop = stored[b] if bound is None else min(stored[b], bound + 1)
        for e in _state_ops(ledger, b, stored[b], stop, ids):
            ops.append((b, e.seq, e))
    by_at = {(b, s): e for b, s, e in ops}
    for item in items:
        _check_item(ledger, db, item, (entry.branch, entry.seq), levels, stored, ops, by_at)


def check_item_read(ledger: Ledger, db: apsw.Connection, branch: str, item: ItemRef) -> None:
    """Check, on a strict ledger, the stored state rows of ``item`` before they are served.

    The same check as before a write (``check_item_states``): ``memroot state``, ``why``
    of a root, SelfModel or summary item, and ``Falsifier.state`` / ``history`` read an
    item's state only after it. Run inside a read transaction of ``ledger``.

    Raises:
        IntegrityError: step 9, naming the item, as ``check_item_states``.
    """
    if ledger.replaying or not ledger.strict:
        return
    levels = view_levels(ledger, branch)
    stored = {b: ledger.size(b) for b, _ in levels}
    ops: list[tuple[str, int, Entry]] = []
    for b, bound in reversed(levels):
        stop = stored[b] if bound is None else min(stored[b], bound + 1)
        for e in _state_ops(ledger, b, stored[b], stop, (item.id,)):
            ops.append((b, e.seq, e))
    _check_item(ledger, db, item, None, levels, stored, ops, {(b, s): e for b, s, e in ops})


def _check_item(
    ledger: Ledger,
    db: apsw.Connection,
    item: ItemRef,
    own: tuple[str, int] | None,
    levels: list[tuple[str, int | None]],
    stored: dict[str, int],
    ops: list[tuple[str, int, Entry]],
    by_at: dict[tuple[str, int], Entry],
) -> None:
    rows: dict[tuple[str, int], str] = {}
    for b, bound in levels:
        for branch, seq, state, op, actor in db.execute(
            "SELECT branch, seq, state, op, actor_id FROM fz_states WHERE kind = ? AND id = ? "
            "AND branch = ?" + ("" if bound is None else " AND seq <= ?"),
            (item.kind, item.id, b) if bound is None else (item.kind, item.id, b, bound),
        ):
            at = (str(branch), int(seq))
            if at[1] >= stored[at[0]]:
                if own is not None and at[0] == own[0] and at[1] < own[1]:
                    continue  # this batch's own row (its entry is not stored yet)
                raise _refused(item, at[0], at[1], "names an entry the ledger does not hold")
            e = by_at.get(at)
            if e is None or not _row_ok(item, str(state), str(op), str(actor), e):
                raise _refused(item, at[0], at[1], "is not what the entry it names gives")
            rows[at] = str(state)
    prior = LIVE
    for b, s, e in ops:
        at = (b, s)
        if at in rows:
            prior = rows[at]
            continue
        target = e.body.get("target_type") == item.kind and e.body.get("target_id") == item.id
        if not target or e.type not in _TARGET_OPS:
            continue  # a cascade's list or its origin: a row only for what it changed
        if _recorded(db, "fz_unapplied", b, s):
            continue
        if _recorded(db, "fz_skipped", b, s) and _skip_explained(ledger, prior, e, item):
            continue
        raise _refused(item, b, s, f"has no row for the {e.type} entry {b}:{s} naming it")


def _recorded(db: apsw.Connection, table: str, branch: str, seq: int) -> bool:
    try:
        return (
            db.execute(
                f"SELECT 1 FROM {table} WHERE branch = ? AND seq = ?", (branch, seq)
            ).fetchone()
            is not None
        )
    except (apsw.SQLError, MemrootError):
        return False
