"""Strict reads of derived rows: a memory object served must be what its own operations give.

The derived tables (``mem_objects`` ...) are a cache of the ledger that anyone with write
access to the file can edit. Before ``query`` or ``why`` returns an object, a strict ledger
(``Ledger.strict``) re-derives it: every version row names the operation that wrote it
(``branch``, ``seq``), so the object's history lists its own operations; those operations and
the evidence events they cite are read strictly (each proven in the signed tree, content
checked against its commitment) and replayed into an empty in-memory model, and the object
the replay gives must equal the one served. The cost is O(the objects' histories), never a
replay of the whole ledger.

An object whose operations need other objects (a ``SUPERSEDE``'s new object, a merge's
primary, a summary's sources, a ``DEPRECATE``'s evidence events, the conversation ancestors an
operation's own view is validated in) is re-derived with those too: the replay takes the
closure of what the served objects' operations name (``_Closure``), read strictly the same
way. On a branch, each level's genesis joins the replay (it records the fork), whether or not
the served versions are the branch's own. Every served object is checked: when the closure's
replay refuses an entry the ledger took and leaves an object unexplained, the whole ledger is
replayed (as verify step 9 does) before anything is refused.

What was checked is remembered per open ledger (``checked_token``, ``_Checked``) for as long
as nothing changed the file: SQLite's ``data_version`` (any other connection's commit, an
attacker's edit included) and this connection's ``total_changes`` (its own writes, even rolled
back) both unchanged since the check. A repeated read of unchanged data then re-checks
nothing; any change anywhere empties the memory of queries, so the next read checks again
(each object's check survives this connection's own writes on a file, ``object_token``). On
PostgreSQL the entries' side is the snapshot they are read in (``PgStore.commit_token``),
which moves on anyone's write, and the local cache's side is its SQLite pair.

When that memory ends (another connection's commit; on PostgreSQL any write), an object's
check is kept if what it rested on is as it was (``_Proof``, ``_holds``): the log extends the
heads it ran at (``since``: the entries appended since, read strictly), none of them names an
id its closure looked up, and the stored rows of the entries it replayed are byte for byte
the same. A served row edited is a new key, checked in full.
"""

from __future__ import annotations

import dataclasses
import operator
import re
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple, Protocol

import apsw

from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind
from memroot.ledger.errors import IntegrityError, NotFoundError
from memroot.ledger.ledger import Ledger
from memroot.projections import anchors, tables
from memroot.projections.backends import MemState
from memroot.projections.engine import Engine
from memroot.projections.fold import fold_entries
from memroot.projections.model import MemoryObject
from memroot.projections.query import Query, Result, get_object, get_objects
from memroot.projections.tables import OBJECT_COLS, object_from_row
from memroot.projections.views import View, view_of

__all__ = [
    "Heads",
    "Kept",
    "Replaying",
    "appended_since",
    "check_objects",
    "check_results",
    "checked_token",
    "heads_of",
    "kept_replay",
    "object_token",
    "remembered",
    "replayed_model",
    "replayed_skips",
    "since",
]

_TEMPLATE: dict[str, bytes] = {}  # an empty memory model's tables, serialised once per process
_NEVER: Final = 2**62
_SEQ_MASK: Final = (1 << 40) - 1
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


Token = tuple[object, ...]
"""What ``checked_token`` returns: the file's and the cache's (data_version, total_changes)."""


class _Checked:
    """What was checked on one open ledger while its file stayed as it was (``token``)."""

    __slots__ = ("keys", "token")

    def __init__(self) -> None:
        self.token: Token | None = None
        self.keys: set[object] = set()


_CHECKED: weakref.WeakKeyDictionary[Ledger, dict[str, _Checked]] = weakref.WeakKeyDictionary()
"""Per open ledger: what was checked, by kind ("query" under ``checked_token``, "object"
under ``object_token``)."""


def checked_token(ledger: Ledger) -> Token | None:
    """Return what tells whether anything changed the ledger's file since a check, or None.

    A SQLite file: (``data_version``: moves on any other connection's commit;
    ``total_changes``: moves on this connection's own writes, committed or not). A
    PostgreSQL ledger: the snapshot its entries are read in (``PgStore.commit_token``: moves
    on anyone's write) and the local derived-state cache's pair. None when a store has no
    such counter: nothing is remembered then. Read it inside the transaction the check
    reads in (SQLite's ``data_version`` and PostgreSQL's snapshot are then that snapshot's).
    """
    store, derived = ledger.store, ledger.derived
    if derived is store:
        v = store.data_version()
        return None if v is None else (v, store.db.total_changes())
    local = derived.data_version()
    snapshot = getattr(store, "commit_token", None)
    if local is None or snapshot is None:
        return None
    return (snapshot(), local, derived.db.total_changes())


def object_token(ledger: Ledger) -> Token | None:
    """Return what tells whether another connection changed the file since an object check.

    A served object's check (``check_objects``) holds for its exact row while no *other*
    connection committed: this connection's own writes go through the hooks (honest rows,
    re-checked anyway when they differ, as the key is the whole row), and cannot change an
    entry a signed head covers. So on a SQLite file it is the ``data_version`` alone (an
    agent that records then recalls keeps what it checked of the objects it did not touch).
    On PostgreSQL the same pair: the commits of transactions other than this connection's
    (``PgStore.foreign_token``) and the cache file's ``data_version``.
    """
    store, derived = ledger.store, ledger.derived
    if derived is store:
        v = store.data_version()
        return None if v is None else (v,)
    local = derived.data_version()
    foreign = getattr(store, "foreign_token", None)
    if local is None or foreign is None:
        return checked_token(ledger)
    return (foreign(), local)


def remembered(ledger: Ledger, token: Token | None, kind: str = "query") -> set[object]:
    """Return the keys of what was checked on ``ledger`` at ``token`` (a set to add to).

    The set is emptied whenever ``token`` differs from the one it was filled at, so a key in
    it means: checked, and nothing changed the file since. With no token (a store with
    no counter) the set is a new empty one every time: nothing is remembered.
    """
    if token is None:
        return set()
    kinds = _CHECKED.setdefault(ledger, {})
    memo = kinds.get(kind)
    if memo is None:
        memo = kinds[kind] = _Checked()
    if memo.token != token:
        memo.keys = set()
        memo.token = token
    return memo.keys


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


def _versions(
    db: apsw.Connection, table: str, cols: str, ids: Sequence[str], view: View
) -> list[Any]:
    """Return every row of ``ids`` in ``table`` on ``view``'s levels, oldest first per level.

    A level's rows up to its bound (the parent frozen at the fork), all levels, so the
    versions a branch shadows are there too (its own first version was made from them).
    """
    return _per_level(
        db,
        f"SELECT {cols} FROM {table} WHERE id IN ({{marks}}) AND branch = ? "
        "AND vfrom <= ? ORDER BY vfrom",
        ids,
        view,
    )


def _per_level(db: apsw.Connection, sql: str, ids: Sequence[str], view: View) -> list[Any]:
    """Run ``sql`` (ids at ``{marks}``, then the level's branch and bound) for each level.

    The levels oldest first (main first), the ids 500 at a time; the rows concatenated.
    """
    out: list[Any] = []
    unique = list(dict.fromkeys(ids))
    for b, bound in reversed(view.levels):
        for part in range(0, len(unique), 500):
            chunk = unique[part : part + 500]
            out += db.execute(
                sql.format(marks=",".join("?" * len(chunk))),
                (*chunk, b, _NEVER if bound is None else bound),
            ).fetchall()
    return out


_ENTITY_KEPT: Final = (
    "type",
    "canonical_name",
    "aliases",
    "namespace_id",
    "created_at",
    "merged_into",
)
"""The entity columns an operation other than a touch changes (``Engine._touch_entity`` moves
``last_seen_at`` only)."""


def _entity_versions(db: apsw.Connection, ids: Sequence[str], view: View) -> list[Any]:
    """``(id, branch, vfrom)`` of the entities' versions a re-derivation needs, on the view.

    As ``_versions``, less the touches: every ``ASSERT`` (and ``RELATE``) tied to an entity
    opens a version of it that moves ``last_seen_at`` and nothing else, and the objects'
    rows depend on no entity's ``last_seen_at`` (an entity is only resolved, by its
    existence and merges). So a popular entity does not pull every object tied to it, with
    their evidence, into each of their closures. Each level's first version is kept, and
    every one that changed another column (a creation, a merge, an alias).
    """
    changed = " OR ".join(f"{c} IS NOT prev_{c}" for c in _ENTITY_KEPT)
    lags = ", ".join(f"LAG({c}) OVER w AS prev_{c}" for c in _ENTITY_KEPT)
    cols = ", ".join(_ENTITY_KEPT)
    return _per_level(
        db,
        f"SELECT id, branch, vfrom FROM (SELECT id, branch, vfrom, {cols}, "
        f"LAG(vfrom) OVER w AS prev_vfrom, {lags} FROM mem_entities "
        "WHERE id IN ({marks}) AND branch = ? AND vfrom <= ? "
        "WINDOW w AS (PARTITION BY id ORDER BY vfrom)) "
        f"WHERE prev_vfrom IS NULL OR {changed} ORDER BY vfrom",
        ids,
        view,
    )


def _uuids(value: object, out: set[str]) -> None:
    """Add every UUID-shaped string found anywhere in ``value`` (a decoded payload) to ``out``."""
    if isinstance(value, str):
        if _UUID.fullmatch(value):
            out.add(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            _uuids(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _uuids(v, out)


def _ancestors(db: apsw.Connection, events: set[str]) -> set[str]:
    """Return ``events`` with every conversation ancestor ``mem_conv`` records for them.

    Validation in an operation's own view walks the ancestors of its provenance events
    (``projections.gated``), so a replay that is to accept what the ledger accepted holds
    them too. ``mem_conv`` is derived: it only chooses which proven entries are replayed.
    """
    if not events:
        return events
    out = set(events)
    todo = list(events)
    for part in range(0, len(todo), 500):
        chunk = todo[part : part + 500]
        marks = ",".join("?" * len(chunk))
        for (parent,) in db.execute(
            "WITH RECURSIVE up(id) AS (SELECT parent FROM mem_conv WHERE id IN "
            f"({marks}) AND parent IS NOT NULL UNION SELECT c.parent FROM mem_conv c "
            "JOIN up ON c.id = up.id WHERE c.parent IS NOT NULL) SELECT id FROM up",
            chunk,
        ):
            out.add(parent)
    return out


class _Closure:
    """The entries that re-derive a set of objects on a branch: what ``check_objects`` replays.

    Starting from the served objects it takes, until nothing new turns up: every version
    of each object and entity named (on the branch's view), every operation the gated
    bookkeeping records for the objects (those a view applied but the global state did
    not), every event cited, the conversation ancestors of every gated operation's
    provenance (its own view is validated along them; an object no gated operation
    touched needs none, however long its conversation), and every object, entity
    or event any of those operations names (a ``SUPERSEDE``'s new object, a merge's
    primary, a summary's sources, a ``DEPRECATE``'s evidence...). Each level's branch
    genesis is added, so the replay learns the forks.
    """

    def __init__(self, ledger: Ledger, db: apsw.Connection, branch: str) -> None:
        self.ledger, self.db = ledger, db
        self.view = view_of(db, branch)
        self.stored = ledger.store.branches()
        self.names = {b.no: b.name for b in self.stored}
        self.levels = {b for b, _ in self.view.levels}
        self.wanted: set[tuple[str, int]] = {(b, 0) for b in self.levels if b != CANONICAL_BRANCH}
        self.read: dict[tuple[str, int], Entry] = {}
        self.seen: set[str] = set()
        self.events: set[str] = set()
        self.walked: set[str] = set()  # provenance events whose ancestors were taken

    def grow(self, ids: Iterable[str]) -> None:
        """Take ``ids`` (objects, entities or events) and everything they need, transitively.

        Raises:
            IntegrityError: the strict read of an entry fails (its step named).
        """
        todo = {i for i in ids if i not in self.seen}
        while todo:
            self.seen |= todo
            names = sorted(todo)
            found: set[str] = set()
            events: set[str] = set()
            objs = _versions(
                self.db, "mem_objects", "id, branch, vfrom, evidence_ids", names, self.view
            )
            for r in objs:
                found.add(r[0])
                self.wanted.add((r[1], r[2]))
                events.update(e for e in r[3].split(",") if e)
            for r in _entity_versions(self.db, names, self.view):
                found.add(r[0])
                self.wanted.add((r[1], r[2]))
            walk: set[str] = set()  # provenance of gated operations: its paths are needed
            for part in range(0, len(names), 500):
                chunk = names[part : part + 500]
                marks = ",".join("?" * len(chunk))
                for b, seq, prov in self.db.execute(
                    f"SELECT branch, seq, prov FROM mem_gated WHERE object_id IN ({marks})", chunk
                ):
                    if b in self.levels:
                        self.wanted.add((b, seq))
                        walk.update(p for p in str(prov).split(",") if p)
            events |= todo - found
            walk -= self.walked
            self.walked |= walk
            events = (events | _ancestors(self.db, walk)) - self.events
            self.events |= events
            self.seen |= events  # an event id names no object: not looked up again
            raw: dict[bytes, str] = {}
            for e in events:
                try:
                    raw[bytes.fromhex(e.replace("-", ""))] = e
                except ValueError:
                    continue
            for k in self.ledger.store.lookup("event_ids", "id", "k", list(raw)).values():
                name = self.names.get(int(k) >> 40)
                if name is not None:
                    self.wanted.add((name, int(k) & _SEQ_MASK))
                    if name != CANONICAL_BRANCH:
                        self.wanted.add((name, 0))
            named: set[str] = set()
            for entry in self._fetch():
                if entry.kind is Kind.OP:
                    _uuids(entry.body.get("payload"), named)
                    target = entry.body.get("target_id")
                    if isinstance(target, str):
                        named.add(target)
            todo = named - self.seen

    def _fetch(self) -> list[Entry]:
        """Read (strictly) the wanted entries not read yet; return them."""
        by_branch: dict[str, list[int]] = {}
        for b, seq in self.wanted:
            if (b, seq) not in self.read:
                by_branch.setdefault(b, []).append(seq)
        new: list[Entry] = []
        for b, seqs in by_branch.items():
            # One multi-leaf proof per branch; content checked. Inputs of the check, not
            # served to the caller: their prev links are inside the proven bytes.
            for seq, row in self.ledger.read_many(sorted(seqs), b, links=False).items():
                self.read[(b, seq)] = row.entry
                new.append(row.entry)
        return new

    def entries(self) -> list[Entry]:
        """Return the entries to replay: each branch in seq order, a branch after its parent."""
        order = {b.name: i for i, b in enumerate(self.stored)}
        return [
            self.read[k]
            for k in sorted(self.read, key=lambda k: (order.get(k[0], len(order)), k[1]))
        ]


def _edited(o: MemoryObject) -> IntegrityError:
    return IntegrityError(
        f"strict read refused: branch {o.branch} entry {o.seq}: step 9: the stored row of "
        f"memory object {o.id} (version {o.version}) is not what its own operations give "
        "(derived state edited); run `memroot verify`, or `memroot rebuild` to re-derive it",
        branch=o.branch,
        seq=o.seq,
        step=9,
    )


def _replayed(
    db: apsw.Connection, o: MemoryObject, branch: str, current: bool
) -> MemoryObject | None:
    """Return the replay's version of ``o``: the view's current one, or the same entry's.

    A read now serves each object's current version on the branch's view; one as of an
    earlier entry serves the version that entry's view held, found by the entry that made it.
    """
    if current:
        try:
            return get_object(db, o.id, branch=branch)
        except NotFoundError:
            return None
    row = db.execute(
        f"SELECT {', '.join(OBJECT_COLS)} FROM mem_objects WHERE id = ? AND branch = ? "
        "AND vfrom = ?",
        (o.id, o.branch, o.seq),
    ).fetchone()
    return None if row is None else object_from_row(row)


def _differs(
    db: apsw.Connection, objects: Sequence[MemoryObject], branch: str, current: bool
) -> list[MemoryObject]:
    """Return the served objects the replay ``db`` does not give as served."""
    return [o for o in objects if _replayed(db, o, branch, current) != o]


def _whole(ledger: Ledger) -> list[Entry]:
    """Every entry of every branch (strictly read), in the order a replay takes them."""
    out: list[Entry] = []
    for b in ledger.store.branches():
        out += ledger.entries(branch=b.name)
    return out


Heads = tuple[tuple[str, int, bytes], ...]
"""Every branch's (name, size, head hash) as stored when a check ran."""


class _Proof:
    """What one check of objects rested on, to tell later that it still holds (``_holds``).

    ``heads``: the branches when it ran; ``ids``: every object, entity and event its closure
    looked up; ``rows``: the stored rows of the entries it replayed (bytes and content), by
    branch number.
    """

    __slots__ = ("heads", "ids", "rows")

    def __init__(
        self, heads: Heads, ids: frozenset[str], rows: dict[int, tuple[tuple[Any, ...], ...]]
    ) -> None:
        self.heads, self.ids, self.rows = heads, ids, rows


_PROOFS: weakref.WeakKeyDictionary[Ledger, dict[object, _Proof]] = weakref.WeakKeyDictionary()
"""Per open ledger: each checked object's key -> what its check rested on."""
_PROOFS_MAX: Final = 1 << 14
_Since = tuple[Token | None, dict[Heads, tuple[frozenset[str], bool] | None]]
_SINCE: weakref.WeakKeyDictionary[Ledger, _Since] = weakref.WeakKeyDictionary()
"""Per open ledger: at one ``object_token``, what was appended since each set of heads."""
_Held = tuple[Token | None, dict[int, tuple[_Proof, bool]]]
_HELD: weakref.WeakKeyDictionary[Ledger, _Held] = weakref.WeakKeyDictionary()
"""Per open ledger: at one ``object_token``, whether each proof still holds (``_holds``)."""


def heads_of(ledger: Ledger) -> Heads:
    """Return every branch's (name, size, head hash) as stored now (``since`` compares)."""
    return tuple((b.name, b.size, bytes(b.head)) for b in ledger.store.branches())


def since(ledger: Ledger, token: Token | None, heads: Heads) -> tuple[frozenset[str], bool] | None:
    """Return what the operations appended since ``heads`` name, and whether there are any.

    ``(ids, any)``: every id an operation appended since names (its target, its new id, the
    UUIDs of its payload), and whether any operation (not an event) was appended. None when
    the log does not extend ``heads``: a branch gone or shorter, or the entry at a branch's
    old head no longer proving with the old hash in the signed tree now (the hash chain
    fixes every entry before it, so an unchanged one means the same history). The new
    entries are read strictly (each proven in the signed tree). Computed once per
    ``object_token``. Run inside a read transaction of ``ledger``.

    Raises:
        IntegrityError: a new entry fails its strict read.
    """
    at, memo = _SINCE.get(ledger, (None, {}))
    if at != token or token is None:
        memo = {}
        _SINCE[ledger] = (token, memo)
    if heads in memo:
        return memo[heads]
    new = appended_since(ledger, heads)
    named: set[str] = set()
    ops = False
    for e in new or ():
        if e.kind is not Kind.EVENT:
            ops = True
        if e.kind is Kind.OP:
            _uuids(e.body.get("payload"), named)
            for field in ("target_id", "id"):
                value = e.body.get(field)
                if isinstance(value, str):
                    named.add(value)
    got = None if new is None else (frozenset(named), ops)
    memo[heads] = got
    return got


def appended_since(ledger: Ledger, heads: Heads) -> list[Entry] | None:
    """Return the entries appended since ``heads``, read strictly, in the order a replay takes.

    Every branch's new entries (a new branch's from its genesis), branch by branch as
    ``Store.branches`` lists them (parents first). None when the log does not extend
    ``heads``: a branch gone or shorter, or the entry at a branch's old head no longer
    proving with the old hash in the signed tree now (the hash chain fixes every entry
    before it, so an unchanged one means the same history). Run inside a read transaction.

    Raises:
        IntegrityError: a new entry (or an old head) fails its strict read.
    """
    now = {b.name: b.size for b in ledger.store.branches()}
    old = {name: (size, head) for name, size, head in heads}
    if not all(name in now for name in old):
        return None
    out: list[Entry] = []
    for name, size in now.items():
        start, head = old.get(name, (0, b""))
        if size < start:
            return None
        if start == size:  # nothing new: the old head must still prove with its hash
            if (
                start
                and ledger.read_many([start - 1], name, links=False)[start - 1].entry.hash != head
            ):
                return None
            continue
        # The old head entry first, in the same proof as the new ones.
        for e in ledger.entries(max(start - 1, 0), size, name):
            if e.seq == start - 1:
                if e.hash != head:
                    return None
                continue
            out.append(e)
    return out


def _stored_rows(ledger: Ledger, keys: Iterable[tuple[str, int]]) -> dict[int, tuple[Any, ...]]:
    """Return the stored rows (``Store.entry_rows``) of ``(branch, seq)``, by branch number."""
    by: dict[int, list[int]] = {}
    nos = {b.name: b.no for b in ledger.store.branches()}
    for b, seq in keys:
        by.setdefault(nos[b], []).append(seq)
    return {no: tuple(ledger.store.entry_row_tuples(no, sorted(seqs))) for no, seqs in by.items()}


def _holds(ledger: Ledger, token: Token | None, proof: _Proof) -> bool:
    """Whether a check that held (``proof``) still holds though another connection committed.

    It does when the log extends the heads it ran at, no operation appended since names
    any id its closure looked up (an object changes only by operations naming it or what it
    was made from), and the stored rows of the entries it replayed are byte for byte the
    same (an edited evidence content, an erased or rewritten entry, is checked again).
    The served row itself is the key of the check: an edited row is a new key.

    Raises:
        IntegrityError: an entry appended since fails its strict read.
    """
    at, verdicts = _HELD.get(ledger, (None, {}))
    if at != token or token is None:
        verdicts = {}
        _HELD[ledger] = (token, verdicts)
    got = verdicts.get(id(proof))
    if got is not None and got[0] is proof:
        return got[1]
    named = since(ledger, token, proof.heads)
    held = named is not None and named[0].isdisjoint(proof.ids)
    for no, rows in proof.rows.items() if held else ():
        seqs = [r[0] for r in rows]
        if tuple(ledger.store.entry_row_tuples(no, seqs)) != rows:
            held = False
            break
    if held:
        # It holds at the heads now: the next commit's entries are read from here.
        proof.heads = heads_of(ledger)
    verdicts[id(proof)] = (proof, held)
    return held


class Replaying(Protocol):
    """A replay of the whole log kept between reads (``kept_replay``): fed, asked, closed."""

    def feed(self, entries: list[Entry]) -> None:
        """Fold ``entries`` (the log's next ones, in replay order)."""

    def skipped(self) -> frozenset[tuple[str, int]]:
        """Return the (branch, seq) of every entry the replay skipped so far."""

    def close(self) -> None:
        """Release what the replay holds."""


class Kept(NamedTuple):
    """A kept replay: the heads it reached, the replay, and its skips there."""

    heads: Heads
    replay: Replaying
    answer: frozenset[tuple[str, int]]


_KEPT_LEDGERS: Final = 4
"""How many ledgers each kept replay is remembered for (the oldest is closed past it)."""


def kept_replay(
    cache: dict[str, Kept], ledger: Ledger, start: Callable[[], Replaying]
) -> frozenset[tuple[str, int]]:
    """Return the skips of a replay of the whole log, fed only what is new since the last.

    The replay (``start()``, then fed every entry strictly read, ``_whole``) is kept per
    ledger with the heads it reached. At new heads that extend them (``appended_since``:
    every branch's old head entry still proves with its hash, so the history the replay
    folded is the log's), only the entries appended since are read (strictly) and fed;
    otherwise (a branch gone, shorter or rewritten) it starts again from the genesis. Its
    answer is kept while no branch moved. Run inside a read transaction of ``ledger``.

    Raises:
        IntegrityError: an entry fails its strict read (the kept replay is dropped).
    """
    heads = heads_of(ledger)
    got = cache.pop(ledger.ledger_id, None)
    if got is not None and got.heads == heads:
        cache[ledger.ledger_id] = got
        return got.answer
    replay = None
    try:
        new = None if got is None else appended_since(ledger, got.heads)
        if got is not None and new is not None:
            replay = got.replay
        else:
            if got is not None:
                got.replay.close()
            replay = start()
            new = _whole(ledger)
        got = None
        replay.feed(new)
        answer = replay.skipped()
    except BaseException:
        for r in (replay, None if got is None else got.replay):
            if r is not None:
                r.close()
        raise
    cache[ledger.ledger_id] = Kept(heads, replay, answer)
    while len(cache) > _KEPT_LEDGERS:
        cache.pop(next(iter(cache))).replay.close()
    return answer


class _MemoryReplay:
    """The memory model's replay of the log, in memory (``_replay``'s tables), fed on.

    With the conversation tree's parent links (``conv_parents``, what
    ``anchors.ConversationTree`` keeps), so a query at an anchor runs on it as on the
    derived tables (``replayed_model``).
    """

    def __init__(self) -> None:
        self.db = _empty()
        self.db.execute(anchors.CONV_PARENTS_SCHEMA)
        self.fresh = True
        self.queryable = False  # with the indexes and text table a query needs (replayed_model)

    def feed(self, entries: list[Entry]) -> None:
        self.db.execute("BEGIN")
        fold_entries(self.db, entries, fresh=self.fresh)
        self.db.executemany(
            "INSERT OR IGNORE INTO conv_parents VALUES(?, ?)",
            anchors.ConversationTree.rows(e for e in entries if e.kind is Kind.EVENT),
        )
        self.db.execute("COMMIT")
        self.fresh = self.fresh and not entries

    def skipped(self) -> frozenset[tuple[str, int]]:
        return frozenset(
            (str(b), int(s)) for b, s in self.db.execute("SELECT branch, seq FROM mem_skipped")
        )

    def close(self) -> None:
        self.db.close()


_SKIPS: dict[str, Kept] = {}
"""ledger id -> the memory model's replay of the log, kept (``kept_replay``)."""


def replayed_skips(ledger: Ledger) -> frozenset[tuple[str, int]]:
    """Return the (branch, seq) of every entry a replay of the log skips (``mem_skipped``).

    The judge of a recorded skip (a derived row anyone can add, to hide an honest
    ``ASSERT``): the whole log, read strictly (each entry proven in the signed tree), folded
    by the rule every replay applies (``fold.apply_or_skip``). The replay is kept per ledger
    and fed only the entries appended since (``kept_replay``). Run inside a read transaction
    of ``ledger``.

    Raises:
        IntegrityError: an entry fails its strict read.
    """
    return kept_replay(_SKIPS, ledger, _MemoryReplay)


def replayed_model(ledger: Ledger) -> apsw.Connection:
    """Return the memory model of the whole log, replayed (kept and fed, ``replayed_skips``).

    Its tables are the derived tables' as a replay of the log, each entry read strictly,
    gives them (with the conversation tree's parent links): the read gate runs a query on
    it to check an answer it cannot check row by row (a read at a conversation anchor). A
    private database: a query may write its own text index into it. Valid until the next
    call for this ledger; run inside a read transaction of ``ledger``.

    Raises:
        IntegrityError: an entry fails its strict read.
    """
    replayed_skips(ledger)
    kept = _SKIPS[ledger.ledger_id].replay
    assert isinstance(kept, _MemoryReplay)  # replayed_skips starts only these
    if not kept.queryable:
        # The replay folds without the secondary indexes and the full-text table (faster);
        # a query wants both, as the derived tables have them. Added once, kept after.
        with kept.db:
            tables.install(kept.db, fts=True, indexes=True)
        kept.queryable = True
    return kept.db


_PLAIN: Final = operator.attrgetter(
    *(f.name for f in dataclasses.fields(MemoryObject) if f.name != "structured_value")
)
"""Every field of a ``MemoryObject`` but its structured value (all hashable)."""


def _row_key(o: MemoryObject) -> tuple[object, ...]:
    """Return a hashable key equal for two objects exactly when they compare equal (or stricter).

    Every field, the structured value (a decoded JSON value, not hashable) by its ``repr``,
    which tells apart values ``==`` would not (``1`` and ``True``): never looser than the
    equality ``check_objects`` compares a replay with, so an edited row is a new key. (One
    exception: two NaNs share a ``repr`` and compare unequal; a row holding one fails its
    check, since it equals no replay, so no check is ever remembered under its key.)
    """
    sv = o.structured_value
    return (_PLAIN(o), None if sv is None else repr(sv))


def check_objects(
    ledger: Ledger,
    objects: Sequence[MemoryObject],
    branch: str = CANONICAL_BRANCH,
    *,
    as_of: int | None = None,
) -> None:
    """Check, on a strict ledger, that each served object equals the replay of its operations.

    ``objects`` are versions read on ``branch`` now (each must be the replay's current
    version there: an older version served as current is refused too) or, with ``as_of``,
    as of that entry (each must be the replay's version made by the same entry). Run inside
    the read transaction the objects were read in. A non-strict ledger is not checked.
    Every object is checked: from the entries of its closure (``_Closure``), and when that
    replay refuses one of them and leaves an object unexplained, from the whole ledger.

    Raises:
        IntegrityError: step 9 when an object differs from its replay (naming the object, the
            branch and the entry of its version), or the step of the first operation or
            evidence event that fails its strict read.
    """
    if not ledger.strict or not objects:
        return
    token = object_token(ledger)
    memo = remembered(ledger, token, "object")
    keys = [("object", branch, as_of, _row_key(o)) for o in objects]
    todo = [(k, o) for k, o in zip(keys, objects, strict=True) if k not in memo]
    # A check that held before another connection's commit (on PostgreSQL: any write, this
    # handle's own too) is kept when that commit left everything it rested on as it was
    # (``_holds``): the commits of another agent cost the entries they appended, not a
    # replay of every served object.
    proofs = _PROOFS.setdefault(ledger, {})
    if todo and proofs:
        still = []
        verdicts: dict[int, bool] = {}  # the objects checked together share one proof
        for k, o in todo:
            proof = proofs.get(k)
            if proof is not None:
                held = verdicts.get(id(proof))
                if held is None:
                    held = verdicts[id(proof)] = _holds(ledger, token, proof)
                if held:
                    memo.add(k)
                    continue
            still.append((k, o))
        todo = still
    if todo:
        heads = heads_of(ledger)
        proof = _check_objects(ledger, [o for _, o in todo], branch, as_of, heads)
        if object_token(ledger) == token:
            memo.update(k for k, _ in todo)
            if proof is not None:
                if len(proofs) + len(todo) > _PROOFS_MAX:
                    proofs.clear()
                proofs.update((k, proof) for k, _ in todo)


def _check_objects(
    ledger: Ledger,
    objects: Sequence[MemoryObject],
    branch: str,
    as_of: int | None,
    heads: Heads = (),
) -> _Proof | None:
    """``check_objects`` without its memory of what was checked (the work itself).

    Returns what the check rested on (``_Proof``, at ``heads``) when it held on the
    closure's entries alone and ``heads`` were given; None otherwise.
    """
    db = ledger.derived.db
    current = as_of is None
    closure = _Closure(ledger, db, branch)
    closure.grow(o.id for o in objects)
    closure._fetch()  # the genesis entries of the view's levels
    entries = closure.entries()
    proof = (
        _Proof(heads, frozenset(closure.seen | closure.events), _stored_rows(ledger, closure.read))
        if heads
        else None
    )
    if branch == CANONICAL_BRANCH and all(e.branch == CANONICAL_BRANCH for e in entries):
        mains = _replay_main(entries, [o.id for o in objects])
        # The fast path gives each object's newest version; an older one served as of an
        # earlier entry (another entry's row: a FALSIFY makes a row without a new version
        # number) is compared on the SQL replay below.
        if mains is not None and (
            current or all((m := mains.get(o.id)) is not None and m.seq == o.seq for o in objects)
        ):
            for o in objects:
                if mains.get(o.id) != o:
                    raise _edited(o)
            return proof
    replayed = _replay(entries)
    try:
        wrong = _differs(replayed, objects, branch, current)
        skipped = replayed.execute("SELECT count(*) FROM mem_skipped").fetchall()[0][0]
    finally:
        replayed.close()
    if wrong and skipped:
        # The closure's replay refused an entry the ledger took (it needed state the closure
        # did not hold): the whole ledger decides, as verify step 9 would.
        replayed = _replay(_whole(ledger))
        try:
            wrong = _differs(replayed, wrong, branch, current)
        finally:
            replayed.close()
        proof = None  # it rested on the whole ledger
    if wrong:
        raise _edited(wrong[0])
    return proof


def check_results(ledger: Ledger, results: Sequence[Result], q: Query) -> None:
    """Check, on a strict ledger, every object ``query(db, q)`` returned (``check_objects``).

    At an anchor an object is served in the state its gated operations give there; what is
    checked is the stored version it was derived from (the gated bookkeeping itself is
    checked by verify step 9). Run inside the transaction the results were read in.

    Raises:
        IntegrityError: as ``check_objects``.
    """
    if not ledger.strict or not results:
        return
    served = [r.object for r in results]
    if q.anchor is not None:
        db = ledger.derived.db
        served = get_objects(db, [o.id for o in served], as_of=q.as_of, branch=q.branch)
    check_objects(ledger, served, q.branch, as_of=q.as_of)
