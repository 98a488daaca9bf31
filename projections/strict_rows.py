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

from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import IntegrityError, NotFoundError
from memroot.ledger.ledger import Ledger
from memroot.projections.model import MemoryObject
from memroot.projections.query import get_object, object_history
from memroot.projections.replay import replay

__all__ = ["check_objects"]


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
    db = ledger.store.db
    wanted: set[tuple[str, int]] = set()
    for o in objects:
        for v in object_history(db, o.id, branch=branch):
            if (v.branch, v.seq, v.version) == (o.branch, o.seq, o.version) or v.seq < o.seq:
                wanted.add((v.branch, v.seq))
                for event_id in v.evidence_ids:
                    found = ledger.find_event(event_id)
                    if found is not None:
                        wanted.add(found)
    order = {b.name: i for i, b in enumerate(ledger.store.branches())}
    for b in {b for b, _ in wanted}:
        if b != CANONICAL_BRANCH:
            wanted.add((b, 0))  # the branch genesis: the replay learns the fork from it
    entries: list[Entry] = []
    for b, seq in sorted(wanted, key=lambda k: (order.get(k[0], len(order)), k[1])):
        row = ledger.read(seq, b)  # proven in the signed tree; content checked
        entries.append(row.entry)
    replayed = replay(entries)
    try:
        if replayed.execute("SELECT count(*) FROM mem_skipped").fetchall()[0][0]:
            return  # operations that need other objects: left to verify step 9 (docstring)
        for o in objects:
            try:
                got = get_object(replayed, o.id, branch=branch)
            except NotFoundError:
                got = None
            if got != o:
                raise IntegrityError(
                    f"strict read refused: branch {o.branch} entry {o.seq}: step 9: the stored "
                    f"row of memory object {o.id} (version {o.version}) is not what its own "
                    "operations give (derived state edited); run `memroot verify`, or "
                    "`memroot rebuild` to re-derive it",
                    branch=o.branch,
                    seq=o.seq,
                    step=9,
                )
    finally:
        replayed.close()
