"""Where the engine reads and writes derived state: SQL (incremental) or memory (replay).

The engine (``memroot.projections.engine``) holds the rules; a ``StateStore`` holds the state. Two
stores implement the same contract, so incremental maintenance and replay run the same code:

- ``SqlState`` reads and writes the memory tables directly, inside the append transaction.
  On a branch it reads through the branch's ``View`` (its own rows over its parent's as of
  the fork) and writes branch-local rows only: a mutation of an inherited object or entity
  opens the branch's first version of it and leaves the parent's rows as they were.
- ``MemState`` keeps the current state in dictionaries and writes rows behind, in batches, to
  fresh tables (``rebuild``, and the auditor's step 9 replay into a throwaway database). It is
  several times faster than ``SqlState`` because no lookup touches SQLite. It folds the
  canonical branch only; replays fold branches afterwards through ``SqlState``, whose as-of
  reads give each branch its parent at the fork whatever the order they were appended in.

Both assign row ids in the order versions are created, so a state rebuilt by ``MemState``
holds the same rows as one maintained by ``SqlState`` (``memroot.projections.digest`` compares
them).
"""

from __future__ import annotations

from typing import Any, Final, Protocol

import apsw

from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.vocab import EdgeType, Permission
from memroot.projections.model import Edge, Entity, EventRef, Grant, MemoryObject, Namespace
from memroot.projections.tables import (
    EDGE_COLS,
    ENTITY_COLS,
    EVENT_COLS,
    OBJECT_COLS,
    edge_row,
    entity_from_row,
    entity_row,
    event_from_row,
    namespace_from_row,
    object_from_row,
    object_row,
)
from memroot.projections.views import Fork, View, view_of

__all__ = ["MemState", "SqlState", "StateStore"]

_DERIVED: Final = EdgeType.DERIVED_FROM.value
_ADMIN: Final = Permission.ADMIN.value


class StateStore(Protocol):
    """The derived state as the engine sees it: current versions, and writes of new ones.

    Writers pass values whose ``seq`` is the entry making the change; a write of an existing
    object or entity closes its current version at that seq and opens the new one.
    """

    def event(self, branch: str, event_id: str) -> EventRef | None:
        """Return the event with this id on ``branch``, or None."""

    def add_event(self, event: EventRef) -> None:
        """Record a new event."""

    def erase_event(self, event_id: str, seq: int) -> None:
        """Record that entry ``seq`` (a TOMBSTONE) erased the event's content."""

    def obj(self, branch: str, object_id: str) -> MemoryObject | None:
        """Return the current version of a memory object, or None."""

    def put_object(self, obj: MemoryObject, *, new: bool) -> None:
        """Open a version of an object (closing the current one unless ``new``)."""

    def used(self, branch: str, node_id: str) -> bool:
        """Return True when an object or entity ever had this id on ``branch``."""

    def citing(self, branch: str, event_id: str) -> list[str]:
        """Return the ids of objects with a current DERIVED_FROM edge to the event."""

    def entity(self, branch: str, entity_id: str) -> Entity | None:
        """Return the current version of an entity, or None."""

    def put_entity(self, entity: Entity, *, new: bool) -> None:
        """Open a version of an entity (closing the current one unless ``new``)."""

    def add_edge(self, edge: Edge) -> None:
        """Record a new edge."""

    def namespace(self, branch: str, namespace_id: str) -> Namespace | None:
        """Return the namespace's policy record, or None when it has no policy."""

    def add_namespace(self, namespace: Namespace) -> None:
        """Record a namespace policy."""

    def permissions(self, branch: str, namespace_id: str, actor_id: str) -> frozenset[str] | None:
        """Return the actor's permissions on a namespace, or None when it has no policy."""

    def admins(self, branch: str, namespace_id: str) -> int:
        """Return how many actors hold ADMIN on a namespace."""

    def add_grant(self, grant: Grant) -> None:
        """Record a new grant."""

    def close_grant(
        self, branch: str, namespace_id: str, actor_id: str, permission: str, seq: int
    ) -> None:
        """End a grant at entry ``seq``."""

    def head(self, branch: str) -> int:
        """Return how many entries of ``branch`` the state has folded in."""

    def set_head(self, branch: str, size: int) -> None:
        """Record that the state has folded in ``size`` entries of ``branch``."""

    def skip(self, branch: str, seq: int, op_type: str, reason: str) -> None:
        """Record an entry the rules refuse that was appended without them."""

    def add_fork(self, fork: Fork) -> None:
        """Record where a branch forked (its genesis entry); its reads see the parent then."""


_OBJ_SEL: Final = f"SELECT {', '.join(OBJECT_COLS)} FROM mem_objects"
_OBJ_INS: Final = (
    f"INSERT INTO mem_objects(rid, oid, vto, {', '.join(OBJECT_COLS)}) "
    f"VALUES(?, ?, NULL, {', '.join('?' * len(OBJECT_COLS))})"
)
_EDGE_INS: Final = (
    f"INSERT INTO mem_edges(rid, vto, {', '.join(EDGE_COLS)}) "
    f"VALUES(?, NULL, {', '.join('?' * len(EDGE_COLS))})"
)
_ENT_INS: Final = (
    f"INSERT INTO mem_entities(rid, vto, {', '.join(ENTITY_COLS)}) "
    f"VALUES(?, NULL, {', '.join('?' * len(ENTITY_COLS))})"
)
_EV_INS: Final = f"INSERT INTO mem_events VALUES({', '.join('?' * len(EVENT_COLS))})"
_NS_INS: Final = (
    "INSERT INTO mem_namespaces(rid, vto, id, type, created_by, created_at, branch, vfrom) "
    "VALUES(?, NULL, ?, ?, ?, ?, ?, ?)"
)
_GRANT_INS: Final = (
    "INSERT INTO mem_grants(rid, vto, namespace_id, actor_id, permission, granted_by, branch, "
    "vfrom) VALUES(?, NULL, ?, ?, ?, ?, ?, ?)"
)
_SKIP_INS: Final = "INSERT INTO mem_skipped VALUES(?, ?, ?, ?)"
# A new object's oid is its first version's rid; a NULL rid is SQLite's max(rid) + 1 too.
_OBJ_INS_NEW: Final = _OBJ_INS.replace(
    "VALUES(?, ?,", "VALUES(NULL, (SELECT coalesce(max(rid), 0) + 1 FROM mem_objects),", 1
)


def _one(db: apsw.Connection, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...]:
    """Run a statement that always yields one row (an aggregate, or RETURNING of a known row)."""
    row = db.execute(sql, params).fetchone()
    if row is None:  # pragma: no cover - a caller's invariant was broken
        raise ValueError(f"no row from {sql!r} with {params!r}")
    return tuple(row)


def _grant_values(g: Grant) -> tuple[Any, ...]:
    return (g.namespace_id, g.actor_id, g.permission, g.granted_by, g.branch, g.seq)


def _ns_values(n: Namespace) -> tuple[Any, ...]:
    return (n.id, n.type, n.created_by, n.created_at, n.branch, n.seq)


class SqlState:
    """The memory tables of one SQLite connection, read and written directly.

    Use it inside a write transaction: every method is one or two indexed statements (plus
    one per ancestor on a branch).
    """

    def __init__(self, db: apsw.Connection) -> None:
        """Wrap a connection whose memory tables are installed (keep one per connection)."""
        self.db = db

    def _view(self, branch: str) -> View:
        return view_of(self.db, branch)

    def event(self, branch: str, event_id: str) -> EventRef | None:
        """Return the event with this id as ``branch`` sees it, or None.

        An ancestor's event is seen when it precedes the fork, erased only if it was erased
        by then.
        """
        r = self.db.execute(
            f"SELECT {', '.join(EVENT_COLS)} FROM mem_events WHERE id = ?", (event_id,)
        ).fetchone()
        if r is None:
            return None
        if r[1] == branch:
            return event_from_row(r)
        if branch == CANONICAL_BRANCH:
            return None
        for b, bound in self._view(branch).levels[1:]:
            if r[1] == b:
                assert bound is not None
                if r[2] > bound:
                    return None
                e = event_from_row(r)
                if e.erased_by is not None and e.erased_by > bound:
                    e = EventRef(e.id, e.branch, e.seq, e.ts, e.namespace_id, e.actor_id)
                return e
        return None

    def add_event(self, event: EventRef) -> None:
        """Record a new event."""
        self.db.execute(_EV_INS, event.row())

    def erase_event(self, event_id: str, seq: int) -> None:
        """Record that entry ``seq`` erased the event's content."""
        self.db.execute("UPDATE mem_events SET erased_by = ? WHERE id = ?", (seq, event_id))

    def _current(self, table: str, cols: str, branch: str, node_id: str) -> Any:
        """Return the version ``branch`` sees: its own, else an ancestor's at the fork."""
        r = self.db.execute(
            f"SELECT {cols} FROM {table} WHERE id = ? AND branch = ? AND vto IS NULL",
            (node_id, branch),
        ).fetchone()
        if r is not None or branch == CANONICAL_BRANCH:
            return r
        # A level holding any version up to its bound holds one current then (versions
        # are contiguous), so the first level with a current version is the one seen.
        for b, bound in self._view(branch).levels[1:]:
            r = self.db.execute(
                f"SELECT {cols} FROM {table} WHERE id = ? AND branch = ? AND vfrom <= ? "
                "AND (vto IS NULL OR vto > ?)",
                (node_id, b, bound, bound),
            ).fetchone()
            if r is not None:
                return r
        return None

    def obj(self, branch: str, object_id: str) -> MemoryObject | None:
        """Return the version of a memory object ``branch`` sees now, or None."""
        r = self._current("mem_objects", ", ".join(OBJECT_COLS), branch, object_id)
        return None if r is None else object_from_row(r)

    def put_object(self, obj: MemoryObject, *, new: bool) -> None:
        """Open a version of an object (closing the current one unless ``new``).

        On a branch, the first version of an inherited object is the branch's own copy (the
        parent's rows stay as they were); it keeps the object's ``oid``.
        """
        row = object_row(obj)
        if new:
            self.db.execute(_OBJ_INS_NEW, row)
            return
        closed = self.db.execute(
            "UPDATE mem_objects SET vto = ? WHERE id = ? AND branch = ? AND vto IS NULL "
            "RETURNING oid",
            (obj.seq, obj.id, obj.branch),
        ).fetchone()
        if closed is None:
            ancestors = [b for b, _ in self._view(obj.branch).levels[1:]]
            closed = _one(
                self.db,
                f"SELECT oid FROM mem_objects WHERE id = ? AND branch IN "
                f"({', '.join('?' * len(ancestors))}) LIMIT 1",
                (obj.id, *ancestors),
            )
        self.db.execute(_OBJ_INS, (None, closed[0], *row))

    def used(self, branch: str, node_id: str) -> bool:
        """Return True when an object or entity ever had this id as ``branch`` sees it."""
        if branch == CANONICAL_BRANCH:
            r = _one(
                self.db,
                "SELECT EXISTS(SELECT 1 FROM mem_objects WHERE id = ?1 AND branch = ?2) OR "
                "EXISTS(SELECT 1 FROM mem_entities WHERE id = ?1 AND branch = ?2)",
                (node_id, branch),
            )
            return bool(r[0])
        levels: list[str] = []
        params: list[Any] = []
        for b, bound in self._view(branch).levels:
            levels.append("(branch = ?" + ("" if bound is None else " AND vfrom <= ?") + ")")
            params += [b] if bound is None else [b, bound]
        cond = " OR ".join(levels)
        r = _one(
            self.db,
            f"SELECT EXISTS(SELECT 1 FROM mem_objects WHERE id = ? AND ({cond})) OR "
            f"EXISTS(SELECT 1 FROM mem_entities WHERE id = ? AND ({cond}))",
            (node_id, *params, node_id, *params),
        )
        return bool(r[0])

    def citing(self, branch: str, event_id: str) -> list[str]:
        """Return the ids of objects with a DERIVED_FROM edge to the event ``branch`` sees."""
        cond, params = self._view(branch).rows("x")
        return [
            r[0]
            for r in self.db.execute(
                f"SELECT x.source_id FROM mem_edges x WHERE x.target_id = ? AND x.type = ? "
                f"AND {cond} ORDER BY x.rid",
                (event_id, _DERIVED, *params),
            )
        ]

    def entity(self, branch: str, entity_id: str) -> Entity | None:
        """Return the version of an entity ``branch`` sees now, or None."""
        r = self._current("mem_entities", ", ".join(ENTITY_COLS), branch, entity_id)
        return None if r is None else entity_from_row(r)

    def put_entity(self, entity: Entity, *, new: bool) -> None:
        """Open a version of an entity (closing the current one unless ``new``).

        On a branch, the first version of an inherited entity closes nothing: the parent's
        rows stay as they were.
        """
        if not new:
            self.db.execute(
                "UPDATE mem_entities SET vto = ? WHERE id = ? AND branch = ? AND vto IS NULL",
                (entity.seq, entity.id, entity.branch),
            )
        self.db.execute(_ENT_INS, (None, *entity_row(entity)))

    def add_edge(self, edge: Edge) -> None:
        """Record a new edge."""
        self.db.execute(_EDGE_INS, (None, *edge_row(edge)))

    def _policy_level(self, branch: str, namespace_id: str) -> tuple[Any, str, int | None] | None:
        """Return the namespace policy row ``branch`` sees and the level holding it."""
        for b, bound in self._view(branch).levels:
            cond, params = (
                ("vto IS NULL", [])
                if bound is None
                else (
                    "vfrom <= ? AND (vto IS NULL OR vto > ?)",
                    [bound, bound],
                )
            )
            r = self.db.execute(
                "SELECT id, type, created_by, created_at, branch, vfrom FROM mem_namespaces "
                f"WHERE id = ? AND branch = ? AND {cond}",
                (namespace_id, b, *params),
            ).fetchone()
            if r is not None:
                return r, b, bound
        return None

    def namespace(self, branch: str, namespace_id: str) -> Namespace | None:
        """Return the namespace's policy record, or None when it has no policy."""
        found = self._policy_level(branch, namespace_id)
        return None if found is None else namespace_from_row(found[0])

    def add_namespace(self, namespace: Namespace) -> None:
        """Record a namespace policy."""
        self.db.execute(_NS_INS, (None, *_ns_values(namespace)))

    def permissions(self, branch: str, namespace_id: str, actor_id: str) -> frozenset[str] | None:
        """Return the actor's permissions on a namespace, or None when it has no policy."""
        if branch == CANONICAL_BRANCH:
            policy, perms = _one(
                self.db,
                "SELECT (SELECT 1 FROM mem_namespaces WHERE id = ?1 AND branch = ?3 AND "
                "vto IS NULL), (SELECT group_concat(permission) FROM mem_grants WHERE "
                "namespace_id = ?1 AND actor_id = ?2 AND branch = ?3 AND vto IS NULL)",
                (namespace_id, actor_id, branch),
            )
            if policy is None:
                return None
            return frozenset(perms.split(",")) if perms else frozenset()
        found = self._policy_level(branch, namespace_id)
        if found is None:
            return None
        _, b, bound = found
        cond, params = View(((b, bound),)).rows("g")
        return frozenset(
            r[0]
            for r in self.db.execute(
                f"SELECT g.permission FROM mem_grants g WHERE g.namespace_id = ? AND "
                f"g.actor_id = ? AND {cond}",
                (namespace_id, actor_id, *params),
            )
        )

    def admins(self, branch: str, namespace_id: str) -> int:
        """Return how many actors hold ADMIN on a namespace."""
        found = self._policy_level(branch, namespace_id)
        b, bound = (branch, None) if found is None else found[1:]
        cond, params = View(((b, bound),)).rows("g")
        return int(
            _one(
                self.db,
                f"SELECT count(*) FROM mem_grants g WHERE g.namespace_id = ? AND "
                f"g.permission = ? AND {cond}",
                (namespace_id, _ADMIN, *params),
            )[0]
        )

    def add_grant(self, grant: Grant) -> None:
        """Record a new grant."""
        self.db.execute(_GRANT_INS, (None, *_grant_values(grant)))

    def close_grant(
        self, branch: str, namespace_id: str, actor_id: str, permission: str, seq: int
    ) -> None:
        """End a grant at entry ``seq``."""
        self.db.execute(
            "UPDATE mem_grants SET vto = ? WHERE namespace_id = ? AND actor_id = ? AND "
            "permission = ? AND branch = ? AND vto IS NULL",
            (seq, namespace_id, actor_id, permission, branch),
        )

    def head(self, branch: str) -> int:
        """Return how many entries of ``branch`` the state has folded in."""
        r = self.db.execute("SELECT size FROM mem_heads WHERE branch = ?", (branch,)).fetchone()
        return 0 if r is None else int(r[0])

    def set_head(self, branch: str, size: int) -> None:
        """Record that the state has folded in ``size`` entries of ``branch``."""
        self.db.execute(
            "INSERT INTO mem_heads VALUES(?, ?) ON CONFLICT(branch) DO UPDATE SET size = ?2",
            (branch, size),
        )

    def skip(self, branch: str, seq: int, op_type: str, reason: str) -> None:
        """Record an entry the rules refuse that was appended without them."""
        self.db.execute(_SKIP_INS, (branch, seq, op_type, reason))

    def add_fork(self, fork: Fork) -> None:
        """Record where a branch forked (its genesis entry); its reads see the parent then."""
        self.db.execute(
            "INSERT INTO mem_forks VALUES(?, ?, ?, ?)",
            (fork.branch, fork.parent, fork.fork_seq, fork.branch_type),
        )


class MemState:
    """Derived state held in dictionaries and written behind, in batches, to fresh tables.

    Only the current version of each object, entity, namespace and grant stays in memory;
    closed versions and edges go to ``db`` every ``flush_every`` rows. Call ``finish`` at the
    end. ``db`` must have empty memory tables (``tables.install`` on a new database or after
    ``tables.drop``), inside a transaction the caller commits.
    """

    def __init__(self, db: apsw.Connection, *, flush_every: int = 50_000) -> None:
        """Write behind into ``db`` (the full-text index is filled afterwards, in bulk)."""
        self.db = db
        self.flush_every = flush_every
        self.events: dict[str, EventRef] = {}
        self.objects: dict[tuple[str, str], tuple[MemoryObject, int, int]] = {}
        self.entities: dict[tuple[str, str], tuple[Entity, int]] = {}
        self.cites: dict[tuple[str, str], list[str]] = {}
        self.namespaces: dict[tuple[str, str], Namespace] = {}
        self.grants: dict[tuple[str, str, str], dict[str, int]] = {}
        self.heads: dict[str, int] = {}
        self.skipped: list[tuple[str, int, str, str]] = []
        self._rid = {"o": 0, "e": 0, "n": 0, "g": 0, "x": 0}
        self._ins: dict[str, list[tuple[Any, ...]]] = {k: [] for k in "oxeng"}
        self._close: dict[str, list[tuple[int, int]]] = {k: [] for k in ("o", "e", "g")}
        self._pending = 0
        self._events_written = False  # some events are in mem_events, not in ``events``

    def _next(self, kind: str) -> int:
        self._rid[kind] += 1
        return self._rid[kind]

    def _queued(self) -> None:
        self._pending += 1
        if self._pending >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Write every queued row: inserts first, then the closes that may refer to them."""
        db = self.db
        for key, sql in (
            ("o", _OBJ_INS),
            ("x", _EDGE_INS),
            ("e", _ENT_INS),
            ("n", _NS_INS),
            ("g", _GRANT_INS),
        ):
            if self._ins[key]:
                db.executemany(sql, self._ins[key])
                self._ins[key].clear()
        for key, table in (("o", "mem_objects"), ("e", "mem_entities"), ("g", "mem_grants")):
            if self._close[key]:
                db.executemany(f"UPDATE {table} SET vto = ? WHERE rid = ?", self._close[key])
                self._close[key].clear()
        self._pending = 0

    def _write_events(self) -> None:
        """Write the events held in memory to ``mem_events`` and let them go."""
        # OR REPLACE: a (tampered) log repeating an event id keeps its last, as the dict did.
        self.db.executemany(
            _EV_INS.replace("INSERT", "INSERT OR REPLACE", 1),
            (
                (e.id, e.branch, e.seq, e.ts, e.namespace_id, e.actor_id, e.erased_by)
                for e in self.events.values()
            ),
        )
        self.events.clear()

    def finish(self) -> None:
        """Write everything still held: queued rows, events, heads and skipped entries."""
        self.flush()
        self._write_events()
        self.db.executemany("INSERT INTO mem_heads VALUES(?, ?)", self.heads.items())
        self.db.executemany(_SKIP_INS, self.skipped)

    # -- the StateStore contract -----------------------------------------------------------

    def event(self, branch: str, event_id: str) -> EventRef | None:
        """Return the event with this id on ``branch``, or None."""
        e = self.events.get(event_id)
        if e is None and self._events_written:
            r = self.db.execute(
                f"SELECT {', '.join(EVENT_COLS)} FROM mem_events WHERE id = ?", (event_id,)
            ).fetchone()
            e = None if r is None else event_from_row(r)
        return None if e is None or e.branch != branch else e

    def add_event(self, event: EventRef) -> None:
        """Record a new event (every ``flush_every`` events, those held are written out)."""
        self.events[event.id] = event
        if len(self.events) >= self.flush_every:
            # Events are most of a log: memory stays bounded (a replay of 10^6 entries).
            self._write_events()
            self._events_written = True

    def erase_event(self, event_id: str, seq: int) -> None:
        """Record that entry ``seq`` erased the event's content."""
        e = self.events.get(event_id)
        if e is None:
            self.db.execute("UPDATE mem_events SET erased_by = ? WHERE id = ?", (seq, event_id))
            return
        self.events[event_id] = EventRef(
            e.id, e.branch, e.seq, e.ts, e.namespace_id, e.actor_id, seq
        )

    def obj(self, branch: str, object_id: str) -> MemoryObject | None:
        """Return the current version of a memory object, or None."""
        cur = self.objects.get((branch, object_id))
        return None if cur is None else cur[0]

    def put_object(self, obj: MemoryObject, *, new: bool) -> None:
        """Open a version of an object (closing the current one unless ``new``)."""
        key = (obj.branch, obj.id)
        rid = self._next("o")
        if new:
            oid = rid
        else:
            _, old_rid, oid = self.objects[key]
            self._close["o"].append((obj.seq, old_rid))
        self.objects[key] = (obj, rid, oid)
        self._ins["o"].append((rid, oid, *object_row(obj)))
        self._queued()

    def used(self, branch: str, node_id: str) -> bool:
        """Return True when an object or entity ever had this id on ``branch``."""
        return (branch, node_id) in self.objects or (branch, node_id) in self.entities

    def citing(self, branch: str, event_id: str) -> list[str]:
        """Return the ids of objects with a current DERIVED_FROM edge to the event."""
        return list(self.cites.get((branch, event_id), ()))

    def entity(self, branch: str, entity_id: str) -> Entity | None:
        """Return the current version of an entity, or None."""
        cur = self.entities.get((branch, entity_id))
        return None if cur is None else cur[0]

    def put_entity(self, entity: Entity, *, new: bool) -> None:
        """Open a version of an entity (closing the current one unless ``new``)."""
        key = (entity.branch, entity.id)
        if not new:
            self._close["e"].append((entity.seq, self.entities[key][1]))
        rid = self._next("e")
        self.entities[key] = (entity, rid)
        self._ins["e"].append((rid, *entity_row(entity)))
        self._queued()

    def add_edge(self, edge: Edge) -> None:
        """Record a new edge."""
        if edge.type == _DERIVED:
            self.cites.setdefault((edge.branch, edge.target_id), []).append(edge.source_id)
        self._ins["x"].append((self._next("x"), *edge_row(edge)))
        self._queued()

    def namespace(self, branch: str, namespace_id: str) -> Namespace | None:
        """Return the namespace's policy record, or None when it has no policy."""
        return self.namespaces.get((branch, namespace_id))

    def add_namespace(self, namespace: Namespace) -> None:
        """Record a namespace policy."""
        self.namespaces[(namespace.branch, namespace.id)] = namespace
        self._ins["n"].append((self._next("n"), *_ns_values(namespace)))
        self._queued()

    def permissions(self, branch: str, namespace_id: str, actor_id: str) -> frozenset[str] | None:
        """Return the actor's permissions on a namespace, or None when it has no policy."""
        if (branch, namespace_id) not in self.namespaces:
            return None
        return frozenset(self.grants.get((branch, namespace_id, actor_id), ()))

    def admins(self, branch: str, namespace_id: str) -> int:
        """Return how many actors hold ADMIN on a namespace."""
        return sum(
            1
            for (b, ns, _), perms in self.grants.items()
            if b == branch and ns == namespace_id and _ADMIN in perms
        )

    def add_grant(self, grant: Grant) -> None:
        """Record a new grant."""
        rid = self._next("g")
        key = (grant.branch, grant.namespace_id, grant.actor_id)
        self.grants.setdefault(key, {})[grant.permission] = rid
        self._ins["g"].append((rid, *_grant_values(grant)))
        self._queued()

    def close_grant(
        self, branch: str, namespace_id: str, actor_id: str, permission: str, seq: int
    ) -> None:
        """End a grant at entry ``seq``."""
        rid = self.grants[(branch, namespace_id, actor_id)].pop(permission)
        self._close["g"].append((seq, rid))
        self._queued()

    def head(self, branch: str) -> int:
        """Return how many entries of ``branch`` the state has folded in."""
        return self.heads.get(branch, 0)

    def set_head(self, branch: str, size: int) -> None:
        """Record that the state has folded in ``size`` entries of ``branch``."""
        self.heads[branch] = size

    def skip(self, branch: str, seq: int, op_type: str, reason: str) -> None:
        """Record an entry the rules refuse that was appended without them."""
        self.skipped.append((branch, seq, op_type, reason))

    def add_fork(self, fork: Fork) -> None:
        """Refuse: this store folds the canonical branch only (branches need as-of reads).

        Raises:
            ValueError: always; fold branches through ``SqlState`` after ``finish``.
        """
        raise ValueError(
            f"MemState folds the canonical branch only; fold branch {fork.branch!r} through "
            "SqlState after finish()"
        )
