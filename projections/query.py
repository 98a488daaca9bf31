"""Reading memory: objects, entities and edges, now or as of any earlier entry.

Every read takes the ledger file's SQLite connection (``ledger.store.db``) and an optional
``as_of`` seq: the state right after that entry was appended (versions with ``vfrom <= as_of``
and ``vto`` NULL or later), answered from indexed versioned rows, never by replay.

``query(db, Query(...))`` filters by type, entity (merged entities resolve to their primary),
namespace, lifecycle state and epistemic type, searches values lexically (SQLite FTS5), and
applies an RFC-0003 retrieval mode. Results come most recently changed first (the newest
version row first), each with its flags (INFERRED and
the other non-plain epistemic types, CONFLICT for a CONTRADICTS edge, EVIDENCE_ERASED) and the
ids of the objects it conflicts with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import apsw

from ledger.entries import CANONICAL_BRANCH
from ledger.errors import NotFoundError, StorageError, ValidationError
from ledger.vocab import EdgeType, EpistemicType, LifecycleState, MemoryType, Permission
from projections.epistemic import DEFAULT_ALWAYS, UNVERIFIED_THRESHOLD, RetrievalMode, flags_for
from projections.model import Edge, Entity, MemoryObject
from projections.tables import (
    EDGE_COLS,
    ENTITY_COLS,
    OBJECT_COLS,
    edge_from_row,
    entity_from_row,
    index_text,
    object_from_row,
    text_index_current,
)

__all__ = [
    "MAX_LIMIT",
    "Query",
    "Result",
    "edges_of",
    "entity_members",
    "get_entity",
    "get_object",
    "object_history",
    "query",
    "resolve_entity",
]

MAX_LIMIT: Final = 10_000
FTS_DRIVE: Final = 5_000
"""A text query with at most this many matches is answered from the matches."""
_TOKEN: Final = re.compile(r"\w+\*?", re.UNICODE)


def _visible(alias: str, as_of: int | None) -> tuple[str, list[Any]]:
    """Return the SQL condition for rows current as of ``as_of`` (None: now)."""
    if as_of is None:
        return f"{alias}.vto IS NULL", []
    return f"{alias}.vfrom <= ? AND ({alias}.vto IS NULL OR {alias}.vto > ?)", [as_of, as_of]


def _check_as_of(as_of: int | None) -> None:
    if as_of is not None and (type(as_of) is not int or as_of < 0):
        raise ValidationError(f"as_of must be an entry seq >= 0, got {as_of!r}", field="as_of")


# -- single objects ------------------------------------------------------------------------------


def get_object(
    db: apsw.Connection,
    object_id: str,
    *,
    as_of: int | None = None,
    branch: str = CANONICAL_BRANCH,
) -> MemoryObject:
    """Return an object's version current as of ``as_of`` (default: now).

    Raises:
        NotFoundError: if the object did not exist then.
    """
    _check_as_of(as_of)
    cond, params = _visible("o", as_of)
    row = db.execute(
        f"SELECT {', '.join('o.' + c for c in OBJECT_COLS)} FROM mem_objects o "
        f"WHERE o.id = ? AND o.branch = ? AND {cond}",
        (object_id, branch, *params),
    ).fetchone()
    if row is None:
        when = "now" if as_of is None else f"as of entry {as_of}"
        raise NotFoundError(f"no memory object {object_id} on branch {branch} {when}")
    return object_from_row(row)


def object_history(
    db: apsw.Connection, object_id: str, *, branch: str = CANONICAL_BRANCH
) -> list[MemoryObject]:
    """Return every version of an object, oldest first (empty if it never existed)."""
    return [
        object_from_row(r)
        for r in db.execute(
            f"SELECT {', '.join(OBJECT_COLS)} FROM mem_objects WHERE id = ? AND branch = ? "
            "ORDER BY vfrom",
            (object_id, branch),
        )
    ]


def get_entity(
    db: apsw.Connection,
    entity_id: str,
    *,
    as_of: int | None = None,
    branch: str = CANONICAL_BRANCH,
) -> Entity:
    """Return an entity's version current as of ``as_of`` (not resolved through merges).

    Raises:
        NotFoundError: if the entity did not exist then.
    """
    _check_as_of(as_of)
    cond, params = _visible("e", as_of)
    row = db.execute(
        f"SELECT {', '.join('e.' + c for c in ENTITY_COLS)} FROM mem_entities e "
        f"WHERE e.id = ? AND e.branch = ? AND {cond}",
        (entity_id, branch, *params),
    ).fetchone()
    if row is None:
        raise NotFoundError(f"no entity {entity_id} on branch {branch}")
    return entity_from_row(row)


def resolve_entity(
    db: apsw.Connection,
    entity_id: str,
    *,
    as_of: int | None = None,
    branch: str = CANONICAL_BRANCH,
) -> Entity:
    """Return the entity references to ``entity_id`` resolve to: the primary it was merged into.

    Raises:
        NotFoundError: if the entity did not exist then.
    """
    ent = get_entity(db, entity_id, as_of=as_of, branch=branch)
    seen = {ent.id}
    while ent.merged_into is not None and ent.merged_into not in seen:
        ent = get_entity(db, ent.merged_into, as_of=as_of, branch=branch)
        seen.add(ent.id)
    return ent


def entity_members(
    db: apsw.Connection,
    entity_id: str,
    *,
    as_of: int | None = None,
    branch: str = CANONICAL_BRANCH,
) -> list[str]:
    """Return the primary of ``entity_id`` and every entity merged into it (transitively).

    Raises:
        NotFoundError: if the entity did not exist then.
    """
    primary = resolve_entity(db, entity_id, as_of=as_of, branch=branch).id
    cond, params = _visible("e", as_of)
    return [
        r[0]
        for r in db.execute(
            "WITH RECURSIVE members(id) AS (SELECT ? UNION SELECT e.id FROM mem_entities e "
            f"JOIN members m ON e.merged_into = m.id WHERE e.branch = ? AND {cond}) "
            "SELECT id FROM members",
            (primary, branch, *params),
        )
    ]


def edges_of(
    db: apsw.Connection,
    node_id: str,
    *,
    as_of: int | None = None,
    types: Sequence[str] = (),
    branch: str = CANONICAL_BRANCH,
) -> list[Edge]:
    """Return the edges from or to ``node_id`` current as of ``as_of``, oldest first."""
    _check_as_of(as_of)
    cond, params = _visible("x", as_of)
    type_cond = f" AND x.type IN ({', '.join('?' * len(types))})" if types else ""
    cols = ", ".join("x." + c for c in EDGE_COLS)
    sql = (
        f"SELECT {cols}, x.rid FROM mem_edges x WHERE x.{{end}} = ? AND x.branch = ? AND "
        f"{cond}{type_cond}"
    )
    rows = [
        *db.execute(sql.format(end="source_id"), (node_id, branch, *params, *types)),
        *db.execute(sql.format(end="target_id"), (node_id, branch, *params, *types)),
    ]
    rows.sort(key=lambda r: r[-1])
    return [edge_from_row(r[:-1]) for r in rows]


# -- filtered queries ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    """What to retrieve. Empty filters match everything; filters combine with AND.

    ``mode``: DEFAULT returns ACTIVE objects the RFC-0003 default filter admits; EXPLICIT
    returns what the filters name (lifecycle ACTIVE unless ``states`` says otherwise), every
    epistemic type flagged; AUDIT returns every version current at ``as_of``, any lifecycle
    state. ``actor`` limits results to namespaces the actor may READ (or that have no policy).
    ``text`` is matched word by word against values (FTS5; ``word*`` is a prefix).
    """

    types: tuple[str, ...] = ()
    entity: str | None = None
    namespaces: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    epistemic: tuple[str, ...] = ()
    text: str | None = None
    mode: RetrievalMode = RetrievalMode.DEFAULT
    as_of: int | None = None
    actor: str | None = None
    limit: int = 100
    branch: str = CANONICAL_BRANCH

    def __post_init__(self) -> None:
        for name, values, enum in (
            ("types", self.types, MemoryType),
            ("states", self.states, LifecycleState),
            ("epistemic", self.epistemic, EpistemicType),
        ):
            for v in values:
                if v not in enum.__members__:
                    raise ValidationError(
                        f"{name}: {v!r} is not one of {', '.join(enum.__members__)}", field=name
                    )
        if not 1 <= self.limit <= MAX_LIMIT:
            raise ValidationError(f"limit must be 1..{MAX_LIMIT}", field="limit")
        _check_as_of(self.as_of)
        if self.mode == RetrievalMode.DEFAULT and any(
            s != LifecycleState.ACTIVE for s in self.states
        ):
            raise ValidationError(
                "DEFAULT retrieval returns ACTIVE objects only; use mode "
                "EXPLICIT or AUDIT to read other lifecycle states",
                field="states",
            )


@dataclass(frozen=True, slots=True)
class Result:
    """One retrieved object with its RFC-0003 flags and the objects it conflicts with."""

    object: MemoryObject
    flags: tuple[str, ...] = ()
    conflicts_with: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """Return the result as a JSON-ready dict: the object's fields plus flags."""
        return {
            **self.object.to_dict(),
            "flags": list(self.flags),
            "conflicts_with": list(self.conflicts_with),
        }


def _fts_query(text: str) -> str:
    """Quote each word so user text is matched lexically, never parsed as FTS5 syntax."""
    words = _TOKEN.findall(text)
    if not words:
        raise ValidationError(f"text {text!r} has no words to search for", field="text")
    return " ".join(f'"{w[:-1]}"*' if w.endswith("*") else f'"{w}"' for w in words)


def _default_filter() -> tuple[str, list[Any]]:
    always = sorted(DEFAULT_ALWAYS)
    return (
        f"(o.epistemic_type IN ({', '.join('?' * len(always))}) OR (o.epistemic_type = ? AND "
        "o.confidence > ?) OR (o.epistemic_type = ? AND o.condition_state = 'TRUE'))",
        [
            *always,
            EpistemicType.UNVERIFIED.value,
            UNVERIFIED_THRESHOLD,
            EpistemicType.CONDITIONAL.value,
        ],
    )


def query(db: apsw.Connection, q: Query) -> list[Result]:
    """Return the objects ``q`` selects, most recently changed first, at most ``q.limit``.

    A text query first adds values not yet in the full-text index (``tables.index_text``),
    which needs a connection that may write; ``sync`` does it beforehand.

    Raises:
        NotFoundError: if ``q.entity`` names no entity.
        ValidationError: if ``q.text`` holds no words.
        StorageError: if the full-text index is behind and cannot be updated here.
    """
    # Unary + keeps SQLite from driving the scan with the (id|branch, vfrom) indexes: the
    # plans wanted here are a newest-first rowid scan or a namespace/lifecycle index.
    cond, params = _visible("o", q.as_of)
    cond = cond.replace("o.vfrom", "+o.vfrom")
    where, args = [cond, "+o.branch = ?"], [*params, q.branch]
    if q.as_of is not None:
        # Rows of a branch are created in entry order (rid grows with vfrom): no row made
        # after entry as_of can match, so the newest-first scan starts at the last one before.
        last = db.execute(
            "SELECT rid FROM mem_objects WHERE branch = ? AND vfrom <= ? "
            "ORDER BY vfrom DESC, rid DESC LIMIT 1",
            (q.branch, q.as_of),
        ).fetchone()
        if last is None:
            return []
        where.append("o.rid <= ?")
        args.append(last[0])

    def any_of(column: str, values: Sequence[str]) -> None:
        if values:
            where.append(f"{column} IN ({', '.join('?' * len(values))})")
            args.extend(values)

    any_of("o.type", q.types)
    any_of("o.namespace_id", q.namespaces)
    any_of("o.epistemic_type", q.epistemic)
    states = q.states or (() if q.mode == RetrievalMode.AUDIT else (LifecycleState.ACTIVE,))
    any_of("o.lifecycle_state", [str(s) for s in states])
    if q.mode == RetrievalMode.DEFAULT:
        sql, extra = _default_filter()
        where.append(sql)
        args.extend(extra)
    if q.entity is not None:
        members = entity_members(db, q.entity, as_of=q.as_of, branch=q.branch)
        e_cond, e_params = _visible("x", q.as_of)
        where.append(
            f"o.id IN (SELECT x.source_id FROM mem_edges x WHERE x.type = ? AND x.target_id IN "
            f"({', '.join('?' * len(members))}) AND x.branch = ? AND {e_cond})"
        )
        args.extend([EdgeType.ABOUT_ENTITY.value, *members, q.branch, *e_params])
    if q.text is not None:
        if not text_index_current(db):
            try:
                index_text(db)
            except apsw.Error as e:
                raise StorageError(
                    "the full-text index is behind and this connection cannot update it; "
                    f"call projections.memory.sync(ledger) first ({e})"
                ) from e
        # FTS rows are keyed by an object's first version (rid = oid). Few matches: look each
        # object up by id. Many: scan newest rows first and test membership, which finds a
        # page of results long before visiting every match.
        fts = _fts_query(q.text)
        hits = [
            r[0]
            for r in db.execute(
                "SELECT rowid FROM mem_fts WHERE mem_fts MATCH ? LIMIT ?", (fts, FTS_DRIVE + 1)
            )
        ]
        if len(hits) <= FTS_DRIVE:
            where.append(
                "o.id IN (SELECT f.id FROM mem_objects f WHERE f.rid IN "
                "(SELECT value FROM json_each(?)))"
            )
            args.append(json.dumps(hits))
        else:
            where.append("o.oid IN (SELECT rowid FROM mem_fts WHERE mem_fts MATCH ?)")
            args.append(fts)
    if q.actor is not None:
        n_cond, n_params = _visible("n", q.as_of)
        g_cond, g_params = _visible("g", q.as_of)
        where.append(
            f"(o.namespace_id NOT IN (SELECT n.id FROM mem_namespaces n WHERE n.branch = ? AND "
            f"{n_cond}) OR o.namespace_id IN (SELECT g.namespace_id FROM mem_grants g WHERE "
            f"g.actor_id = ? AND g.permission = ? AND g.branch = ? AND {g_cond}))"
        )
        args.extend([q.branch, *n_params, q.actor, Permission.READ.value, q.branch, *g_params])
    cols = ", ".join("o." + c for c in OBJECT_COLS)
    rows = db.execute(
        f"SELECT {cols} FROM mem_objects o WHERE {' AND '.join(where)} ORDER BY o.rid DESC LIMIT ?",
        (*args, q.limit),
    ).fetchall()
    return [_result(db, object_from_row(r), q) for r in rows]


def _result(db: apsw.Connection, obj: MemoryObject, q: Query) -> Result:
    conflicts = tuple(
        dict.fromkeys(
            e.target_id if e.source_id == obj.id else e.source_id
            for e in edges_of(
                db, obj.id, as_of=q.as_of, types=(EdgeType.CONTRADICTS.value,), branch=q.branch
            )
        )
    )
    marks = ", ".join("?" * len(obj.evidence_ids))
    erased_cond = "erased_by IS NOT NULL" if q.as_of is None else "erased_by <= ?"
    erased = (
        db.execute(
            f"SELECT 1 FROM mem_events WHERE id IN ({marks}) AND {erased_cond} LIMIT 1",
            (*obj.evidence_ids, *(() if q.as_of is None else (q.as_of,))),
        ).fetchone()
        is not None
    )
    return Result(
        obj,
        flags_for(obj.epistemic_type, conflict=bool(conflicts), evidence_erased=erased),
        conflicts,
    )
