"""What the log itself says a query's filters select: words, types, entities, readers.

A strict query with ``text=`` is answered from ``mem_fts``, the full-text index of the
derived tables, and one with ``types=`` from the ``type`` column of ``mem_objects``; anyone
who can write the file can edit either: take an object's words out of the index (or edit its
stored value before it is indexed), or change its stored type, and the query drops the
object without a word. The read gate (``projections.checked``) therefore asks this module
which objects the words or types select, from what it can trust: the ``value`` and
``object_type`` of each ``ASSERT`` entry of the log (an object's value and type are its
``ASSERT``'s and never change after), each entry read strictly (proven in the signed tree).
Values are indexed by SQLite's own FTS5 with the same table definition and the same
``MATCH`` text as ``mem_fts`` (so the words mean what they mean to the index the query used).

The same holds for the query's ``entity`` and ``actor`` filters, answered from derived rows
too (the ``ABOUT_ENTITY`` edges and the entities' merges; the namespaces' policies and their
``READ`` grants): delete an edge row, or edit a grant, and the query drops objects. So the
index also records, for every entry read, the claims those rows come from, with the entry's
position: the entities each ``ASSERT`` names (``entity_ids``) and each ``RELATE`` of an
``ABOUT_ENTITY`` edge, every ``ENTITY_CREATE`` and ``ENTITY_MERGE``, every
``NAMESPACE_CREATE`` and every ``GRANT``/``REVOKE`` of ``READ``; ``about`` and ``readable``
give what they select in a branch's view (the positions it sees), leaving out the entries
the caller's judge of skips says every replay skips (an entry that is no valid operation
wrote no row). An accepted ``ASSERT`` or ``RELATE`` writes its edge to the entity its id
resolves to then; merges only ever join entities, so an edge's target is one of the
query's entity's members exactly when the named id resolves, in the view now, to the same
primary as the query's entity (``about``).

The index lives in a private in-memory database per ledger (``ledger_id``) and branch read,
and is fed only the entries appended since the last read: the branch's entry it stopped at is
proven again in the signed tree now and must have the same hash (the hash chain then vouches
for every entry before it, as ``memory_root.falsify.checked._state_ops`` does), else the
branch is read again from its start. So after another connection's commit a text query reads
what was appended, not the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

import apsw

from memroot.ledger.entries import Entry, Kind
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import EdgeType, OpType, Permission

__all__ = ["Judge", "Levels", "about", "readable", "selected"]

Levels = Sequence[tuple[str, "int | None"]]
"""A view's levels: ``(branch, bound)``, the entries of ``branch`` up to ``bound`` (None: all)."""

Judge = Callable[[set[tuple[str, int]]], set[tuple[str, int]]]
"""Given entries' positions ``(branch, seq)``, returns those every replay skips (no valid
operation: they wrote no derived row). The read gate's judge reads the skip records and
confirms each by its own replay of the log (``strict_rows.replayed_skips``)."""

_Pos = tuple[str, int]

_SPEC: Final = "fts5(value, content='', detail=none)"
"""The same table as ``projections.tables._FTS_SPEC`` (tests/unit assert they are equal)."""


class _Branch:
    """How far one branch's entries were read: its size then and the last entry's hash."""

    __slots__ = ("last", "size")

    def __init__(self) -> None:
        self.size = 0
        self.last = b""


class _Index:
    """The ``ASSERT`` values of one ledger's branches read so far, in a private FTS5 table."""

    __slots__ = (
        "about",
        "branches",
        "count",
        "created",
        "db",
        "ids",
        "memo",
        "merges",
        "policies",
        "reads",
        "types",
    )

    def __init__(self) -> None:
        self.db = apsw.Connection(":memory:")
        self.db.execute(f"CREATE VIRTUAL TABLE words USING {_SPEC}")
        self.ids: list[str] = []  # rowid - 1 -> object id
        self.branches: dict[str, _Branch] = {}
        self.count = 0  # ASSERTs read
        self.types: dict[str, set[str]] = {}  # object_type -> object ids
        self.memo: dict[tuple[str | None, tuple[str, ...]], tuple[int, frozenset[str]]] = {}
        """(words, types) -> (how many ASSERTs were read then, the ids they selected)."""
        self.about: dict[str, list[tuple[str, int, str]]] = {}
        """entity id named -> (branch, seq, object id) of each ASSERT or RELATE naming it."""
        self.created: dict[str, list[_Pos]] = {}  # entity id -> its ENTITY_CREATEs
        self.merges: dict[str, list[tuple[str, int, str]]] = {}
        """merged entity id -> (branch, seq, primary id) of each ENTITY_MERGE of it."""
        self.policies: dict[str, list[_Pos]] = {}  # namespace -> its NAMESPACE_CREATEs
        self.reads: dict[str, list[tuple[str, int, str, bool]]] = {}
        """actor id -> (branch, seq, namespace, True for GRANT / False for REVOKE) of READ."""

    def _relations(self, e: Entry, payload: dict[str, object]) -> None:
        """Record the entity and reader claims of an operation entry (module docstring)."""
        at = (e.branch, e.seq)
        body, kind = e.body, e.type
        target, op_id, ns = body.get("target_id"), body.get("id"), body.get("namespace_id")
        own = target if isinstance(target, str) else op_id
        if kind == OpType.ASSERT.value:
            named = payload.get("entity_ids")
            if isinstance(own, str) and isinstance(named, list):
                for x in dict.fromkeys(i for i in named if isinstance(i, str)):
                    self.about.setdefault(x, []).append((*at, own))
        elif kind == OpType.RELATE.value:
            src, dst = payload.get("source_id"), payload.get("target_id")
            if payload.get("edge_type") == EdgeType.ABOUT_ENTITY.value and (
                isinstance(src, str) and isinstance(dst, str)
            ):
                self.about.setdefault(dst, []).append((*at, src))
        elif kind == OpType.ENTITY_CREATE.value:
            if isinstance(own, str):
                self.created.setdefault(own, []).append(at)
        elif kind == OpType.ENTITY_MERGE.value:
            primary, merged = payload.get("primary_entity_id"), payload.get("merged_entity_id")
            if isinstance(primary, str) and isinstance(merged, str):
                self.merges.setdefault(merged, []).append((*at, primary))
        elif kind == OpType.NAMESPACE_CREATE.value:
            if isinstance(ns, str):
                self.policies.setdefault(ns, []).append(at)
        elif kind in (OpType.GRANT.value, OpType.REVOKE.value):
            actor = payload.get("actor_id")
            if payload.get("permission") == Permission.READ.value and (
                isinstance(actor, str) and isinstance(ns, str)
            ):
                self.reads.setdefault(actor, []).append((*at, ns, kind == OpType.GRANT.value))

    def add(self, entries: Iterable[Entry]) -> None:
        rows = []
        for e in entries:
            if e.kind is not Kind.OP:
                continue
            payload = e.body.get("payload")
            if isinstance(payload, dict) and e.type in _RELATIONS:
                self._relations(e, payload)
            if e.type != OpType.ASSERT.value:
                continue
            value = payload.get("value") if isinstance(payload, dict) else None
            target, op_id = e.body.get("target_id"), e.body.get("id")
            object_id = target if isinstance(target, str) else op_id
            if not isinstance(object_id, str):
                continue
            self.count += 1
            kind = payload.get("object_type") if isinstance(payload, dict) else None
            if isinstance(kind, str):
                self.types.setdefault(kind, set()).add(object_id)
            if isinstance(value, str):
                self.ids.append(object_id)
                rows.append((len(self.ids), value))
        self.db.executemany("INSERT INTO words(rowid, value) VALUES (?, ?)", rows)


_RELATIONS: Final = frozenset(
    t.value
    for t in (
        OpType.ASSERT,
        OpType.RELATE,
        OpType.ENTITY_CREATE,
        OpType.ENTITY_MERGE,
        OpType.NAMESPACE_CREATE,
        OpType.GRANT,
        OpType.REVOKE,
    )
)
"""The operations whose claims ``_Index._relations`` records."""

_MEMO: Final = 256
"""At most this many (words, types) answers are kept per ledger."""

_INDEXES: dict[str, _Index] = {}
"""ledger id -> the index of its branches' ``ASSERT`` values read so far."""


def _read_to_head(ledger: Ledger, index: _Index, branch: str) -> None:
    """Feed ``index`` the branch's entries it has not read.

    Raises:
        _Restart: the entry it stopped at is not in this log any more (a rolled-back or
            other copy of the ledger): the index is dropped, to be built again.
    """
    size = ledger.size(branch)
    kept = index.branches.get(branch)
    if kept is not None and not (
        kept.size <= size
        and ledger.read_many([kept.size - 1], branch, links=False)[kept.size - 1].entry.hash
        == kept.last
    ):
        _INDEXES.pop(ledger.ledger_id, None)
        raise _Restart
    start = 0 if kept is None else kept.size
    if start >= size:
        return
    fresh = list(ledger.entries(start, size, branch))  # all proven before any is kept
    index.add(fresh)
    mark = index.branches.setdefault(branch, _Branch())
    mark.size, mark.last = size, fresh[-1].hash


class _Restart(Exception):
    """The kept index does not describe this log any more: build it again."""


def _current(ledger: Ledger, branches: Iterable[str]) -> _Index:
    """Return the ledger's index, fed every entry of ``branches`` up to their heads now."""
    wanted = list(dict.fromkeys(branches))
    for _ in range(2):
        index = _INDEXES.get(ledger.ledger_id)
        if index is None:  # built only when missing (a new FTS5 database is not free)
            index = _INDEXES[ledger.ledger_id] = _Index()
        try:
            for b in wanted:
                _read_to_head(ledger, index, b)
        except _Restart:
            continue  # dropped: a new one, nothing kept
        return index
    raise AssertionError("unreachable: a new index reads from the start, never restarts")


def selected(
    ledger: Ledger, branches: Iterable[str], fts: str | None, types: tuple[str, ...]
) -> frozenset[str]:
    """Return the ids of the objects whose ``ASSERT`` matches ``fts`` and has one of ``types``.

    ``fts``: the match text the query gave ``mem_fts`` (``query._fts_query``), or None for
    any value; ``types``: the object types (empty: any). ``branches``: the branches whose
    entries the query's view sees; objects of others are not excluded (the caller
    intersects with the view). The answer is kept until an ``ASSERT`` is read. Run inside a
    transaction of a strict ``ledger``.

    Raises:
        IntegrityError: an entry read fails its strict read.
    """
    index = _current(ledger, branches)
    key = (fts, types)
    kept = index.memo.get(key)
    if kept is not None and kept[0] == index.count:
        return kept[1]
    ids: set[str] | None = None
    if fts is not None:
        ids = {
            index.ids[int(r) - 1]
            for (r,) in index.db.execute("SELECT rowid FROM words WHERE words MATCH ?", (fts,))
        }
    if types:
        typed = set().union(*(index.types.get(t, set()) for t in types))
        ids = typed if ids is None else ids & typed
    out = frozenset(ids or ())
    if len(index.memo) >= _MEMO:
        index.memo.clear()
    index.memo[key] = (index.count, out)
    return out


def _seen(levels: Levels) -> Callable[[str, int], bool]:
    """Return whether an entry ``(branch, seq)`` is one the view's levels see."""
    bounds = dict(levels)

    def seen(branch: str, seq: int) -> bool:
        if branch not in bounds:
            return False
        bound = bounds[branch]
        return bound is None or seq <= bound

    return seen


def about(
    ledger: Ledger, levels: Levels, entity: str, judge: Judge, branches: Iterable[str]
) -> frozenset[str] | None:
    """Return the ids of the objects the log says are about ``entity`` in the view ``levels``.

    What ``query``'s ``entity=`` selects by its ``ABOUT_ENTITY`` edges to the entity's
    members, from the log: ``entity``'s primary now (its merges the view sees, followed),
    every entity merged into that primary, and every object an ``ASSERT`` (its
    ``entity_ids``) or a ``RELATE`` of an ``ABOUT_ENTITY`` edge the view sees ties to one of
    them; entries ``judge`` says every replay skips are left out. None when no
    ``ENTITY_CREATE`` of ``entity`` is in the view (the query names no entity). Objects of
    other branches are not excluded (the caller intersects with the view's rows).
    ``branches``: every branch of the ledger, read to its head. Run inside a transaction of
    a strict ``ledger``.

    Raises:
        IntegrityError: an entry read fails its strict read.
    """
    index = _current(ledger, branches)
    seen = _seen(levels)
    merges = [(m, b, s, p) for m, rows in index.merges.items() for b, s, p in rows if seen(b, s)]
    created = [pos for pos in index.created.get(entity, ()) if seen(*pos)]
    skipped = judge({(b, s) for _, b, s, _ in merges} | set(created))
    if all(pos in skipped for pos in created):
        return None
    into: dict[str, str] = {}
    for m, b, s, p in merges:
        if (b, s) not in skipped:
            into.setdefault(m, p)  # a view accepts one merge of an entity (it stays merged)
    primary, hops = entity, 0
    while primary in into and hops <= len(into):  # merges make no cycle: bounded anyway
        primary, hops = into[primary], hops + 1
    merged_into: dict[str, list[str]] = {}
    for m, p in into.items():
        merged_into.setdefault(p, []).append(m)
    members, todo = {primary}, [primary]
    while todo:
        for m in merged_into.get(todo.pop(), ()):
            if m not in members:
                members.add(m)
                todo.append(m)
    claims = [(b, s, x) for e in members for b, s, x in index.about.get(e, ()) if seen(b, s)]
    skipped = judge({(b, s) for b, s, _ in claims})
    return frozenset(x for b, s, x in claims if (b, s) not in skipped)


def readable(
    ledger: Ledger, levels: Levels, actor: str, judge: Judge, branches: Iterable[str]
) -> tuple[frozenset[str], frozenset[str]]:
    """Return ``(namespaces with a policy, those of them actor may READ)`` in the view, by the log.

    What ``query``'s ``actor=`` reads from ``mem_namespaces`` and ``mem_grants``: an object
    is readable when its namespace has no policy or the actor holds ``READ`` on it. From the
    log: each ``NAMESPACE_CREATE`` the view sees makes a policy; a ``GRANT`` of ``READ`` opens
    a grant on its own branch and the next ``REVOKE`` of it on that branch closes it (a
    ``REVOKE`` closes only its branch's grants, as ``MemState.close_grant`` does), so a grant
    the view holds is one open at the end of a level's entries the view sees. Entries
    ``judge`` says every replay skips are left out. Run inside a transaction of a strict
    ``ledger``.

    Raises:
        IntegrityError: an entry read fails its strict read.
    """
    index = _current(ledger, branches)
    seen = _seen(levels)
    policies = [(ns, pos) for ns, rows in index.policies.items() for pos in rows if seen(*pos)]
    reads = [r for r in index.reads.get(actor, ()) if seen(r[0], r[1])]
    skipped = judge({pos for _, pos in policies} | {(b, s) for b, s, _, _ in reads})
    held: dict[tuple[str, str], bool] = {}
    for b, s, ns, grant in sorted(reads, key=lambda r: (r[0], r[1])):
        if (b, s) not in skipped:
            held[(b, ns)] = grant
    return (
        frozenset(ns for ns, pos in policies if pos not in skipped),
        frozenset(ns for (_, ns), grant in held.items() if grant),
    )
