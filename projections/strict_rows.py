"""Strict reads of derived rows: a memory object served must be what its own operations give.

The derived tables (``mem_objects`` ...) are a cache of the ledger that anyone with write
access to the file can edit. Before ``query`` or ``why`` returns an object, a strict ledger
(``Ledger.strict``) re-derives it: every version row names the operation that wrote it
(``branch``, ``seq``), so the object's history lists its own operations; those operations and
the evidence events they cite are read strictly (each proven in the signed tree, content
checked against its commitment) and replayed into an empty in-memory model, and the object
the replay gives must equal the one served. The cost is O(the objects' histories), never a
replay of the whole ledger.

An object whose operations need other objects the replay does not hold (a ``SUPERSEDE``, a
merge or a summary names other objects; the replay then refuses that operation) cannot be
re-derived from its own operations alone: its operations and evidence are still read
strictly, and its derived fields are left to ``memroot verify`` (step 9), which replays
everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import apsw

from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import IntegrityError, NotFoundError
from memroot.ledger.ledger import Ledger
from memroot.projections import tables
from memroot.projections.backends import MemState
from memroot.projections.engine import Engine
from memroot.projections.hook import fold_entries
from memroot.projections.model import MemoryObject
from memroot.projections.query import get_object
from memroot.projections.tables import OBJECT_COLS, object_from_row
from memroot.projections.views import view_of

__all__ = ["check_objects"]

_TEMPLATE: dict[str, bytes] = {}  # an empty memory model's tables, serialised once per process
_NEVER: Final = 2**62


def _empty() -> apsw.Connection:
    """Return a new in-memory database holding an empty memory model's tables."""
    if "empty" not in _TEMPLATE:
        empty = apsw.Connection(":memory:")
        with empty:
            tables.install(empty, fts=False, indexes=False)
        _TEMPLATE["empty"] = empty.serialize("main")
        empty.close()
    db = apsw.Connection(":memory:")
    db.deserialize("main", _TEMPLATE["empty"])
    return db


def _replay(entries: list[Entry]) -> apsw.Connection:
    """Replay ``entries`` into a new in-memory model, as ``projections.replay.replay`` does.

    It starts from a copy of the empty tables instead of creating them every time.
    """
    db = _empty()
    db.execute("BEGIN")
    fold_entries(db, entries, fresh=True)
    db.execute("COMMIT")
    return db


def _replay_main(entries: list[Entry], ids: Sequence[str]) -> dict[str, MemoryObject] | None:
    """Replay canonical-branch ``entries`` in memory; return each object's version in it.

    The fast path of ``_replay``: the same rules (``Engine``) over the in-memory store
    ``fold_entries(fresh=True)`` uses for main, without writing the objects' rows out (the
    store's write-behind is never flushed) nor reading them back. Returns None when an
    operation was refused (it needs objects the replay does not hold; module docstring).
    """
    db = _empty()  # the gated bookkeeping writes its own rows
    try:
        mem = MemState(db, flush_every=_NEVER)
        engine = Engine(mem)
        for entry in entries:
            engine.fold(entry)
        if mem.skipped:
            return None
        return {i: o for i in ids if (o := mem.obj(CANONICAL_BRANCH, i)) is not None}
    finally:
        db.close()


def _histories(
    db: apsw.Connection, ids: Sequence[str], branch: str
) -> dict[str, list[MemoryObject]]:
    """Return every version of each object on ``branch``'s view, oldest first.

    As ``query.object_history``, for many objects in one query per view level.
    """
    out: dict[str, list[MemoryObject]] = {i: [] for i in ids}
    cols = ", ".join(OBJECT_COLS)
    unique = list(out)
    for b, bound in reversed(view_of(db, branch).levels):
        for part in range(0, len(unique), 500):
            chunk = unique[part : part + 500]
            marks = ",".join("?" * len(chunk))
            for r in db.execute(
                f"SELECT {cols} FROM mem_objects WHERE id IN ({marks}) AND branch = ? "
                "AND vfrom <= ? ORDER BY vfrom",
                (*chunk, b, 2**63 - 1 if bound is None else bound),
            ):
                o = object_from_row(r)
                out[o.id].append(o)
    return out


def _edited(o: MemoryObject) -> IntegrityError:
    return IntegrityError(
        f"strict read refused: branch {o.branch} entry {o.seq}: step 9: the stored row of "
        f"memory object {o.id} (version {o.version}) is not what its own operations give "
        "(derived state edited); run `memroot verify`, or `memroot rebuild` to re-derive it",
        branch=o.branch,
        seq=o.seq,
        step=9,
    )


def check_objects(
    ledger: Ledger, objects: Sequence[MemoryObject], branch: str = CANONICAL_BRANCH
) -> None:
    """Check, on a strict ledger, that each served object equals the replay of its operations.

    ``objects`` are versions read on ``branch`` (now or as of an earlier entry). Run inside
    the read transaction the objects were read in. A non-strict ledger is not checked.

    Raises:
        IntegrityError: step 9 when an object differs from its replay (naming the object, the
            branch and the entry of its version), or the step of the first operation or
            evidence event that fails its strict read.
    """
    if not ledger.strict or not objects:
        return
    db = ledger.derived.db
    wanted: set[tuple[str, int]] = set()
    evidence: set[str] = set()
    histories = _histories(db, [o.id for o in objects], branch)
    for o in objects:
        for v in histories.get(o.id, []):
            # The object's own operations up to the served version (all of them if the
            # served row names no version of its history: the replay then differs).
            wanted.add((v.branch, v.seq))
            evidence.update(v.evidence_ids)
            if (v.branch, v.seq, v.version) == (o.branch, o.seq, o.version):
                break
    stored = ledger.store.branches()
    names = {b.no: b.name for b in stored}
    raw = {bytes.fromhex(e.replace("-", "")): e for e in evidence}
    for k in ledger.store.lookup("event_ids", "id", "k", list(raw)).values():
        name = names.get(int(k) >> 40)
        if name is not None:
            wanted.add((name, int(k) & ((1 << 40) - 1)))
    order = {b.name: i for i, b in enumerate(stored)}
    for b in {b for b, _ in wanted}:
        if b != CANONICAL_BRANCH:
            wanted.add((b, 0))  # the branch genesis: the replay learns the fork from it
    by_branch: dict[str, list[int]] = {}
    for b, seq in wanted:
        by_branch.setdefault(b, []).append(seq)
    read = {
        (b, seq): row.entry
        for b, seqs in by_branch.items()
        # One multi-leaf proof per branch; content checked. Inputs of the check, not served
        # to the caller: their prev links are inside the proven bytes.
        for seq, row in ledger.read_many(seqs, b, links=False).items()
    }
    entries = [read[k] for k in sorted(read, key=lambda k: (order.get(k[0], len(order)), k[1]))]
    if branch == CANONICAL_BRANCH and all(e.branch == CANONICAL_BRANCH for e in entries):
        mains = _replay_main(entries, [o.id for o in objects])
        if mains is None:
            return  # operations that need other objects: left to verify step 9 (docstring)
        for o in objects:
            if mains.get(o.id) != o:
                raise _edited(o)
        return
    replayed = _replay(entries)
    try:
        if replayed.execute("SELECT count(*) FROM mem_skipped").fetchall()[0][0]:
            return  # operations that need other objects: left to verify step 9 (docstring)
        for o in objects:
            try:
                got = get_object(replayed, o.id, branch=branch)
            except NotFoundError:
                got = None
            if got != o:
                raise _edited(o)
    finally:
        replayed.close()
