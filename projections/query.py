"""Reading memory: objects, entities and edges, now or as of any earlier entry.

Every read takes the ledger file's SQLite connection (``ledger.derived.db``) and an optional
``as_of`` seq: the state right after that entry was appended (versions with ``vfrom <= as_of``
and ``vto`` NULL or later), answered from indexed versioned rows, never by replay.

``query(db, Query(...))`` filters by type, entity (merged entities resolve to their primary),
namespace, lifecycle state and epistemic type, searches values lexically (SQLite FTS5), and
applies an RFC-0003 retrieval mode. Results come most recently changed first (the newest
version row first), each with its flags (INFERRED and
the other non-plain epistemic types, CONFLICT for a CONTRADICTS edge, EVIDENCE_ERASED, STALE
or FALSIFIED for the falsification state, SPEC 7) and the ids of the objects it conflicts with.
DEFAULT retrieval never returns a falsified object and flags a stale one STALE; EXPLICIT and
AUDIT return both, flagged.

Every read takes a ``branch`` (default ``main``) and reads its view (``memroot.projections.views``):
the branch's own versions over its parent's as of the fork, never later parent changes
(RFC-0012 sections 6 and 10). A SIMULATION branch's DEFAULT reads include its ACTIVE
HYPOTHETICAL objects, flagged HYPOTHETICAL. ``Query.anchor`` reads at a conversation anchor
(seed 001, ``memroot.projections.anchors``): only objects whose every evidence event lies on the
anchor's ancestor path. ``Query.git_branch`` ranks by seed 003's branch-aware score
(``memroot.projections.gitctx.branch_score``) with base score ``confidence * salience`` and the git
context of the entry that created each object; ties keep the newest-first order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, cast

import apsw

from memroot.ledger.entries import CANONICAL_BRANCH, check_uuid
from memroot.ledger.errors import NotFoundError, StorageError, ValidationError
from memroot.ledger.vocab import EdgeType, EpistemicType, LifecycleState, MemoryType, Permission
from memroot.projections.anchors import ancestor_path, with_merged
from memroot.projections.epistemic import (
    DEFAULT_ALWAYS,
    UNVERIFIED_THRESHOLD,
    RetrievalMode,
    default_visible,
    flags_for,
)
from memroot.projections.gated import AnchorState, path_as_of
from memroot.projections.gitctx import GitContext, branch_score, context_of
from memroot.projections.model import Edge, Entity, MemoryObject
from memroot.projections.tables import (
    EDGE_COLS,
    ENTITY_COLS,
    OBJECT_COLS,
    edge_from_row,
    entity_from_row,
    index_text,
    object_from_row,
    text_index_current,
)
from memroot.projections.views import View, view_of

__all__ = [
    "MAX_LIMIT",
    "RANK_POOL",
    "Query",
    "Result",
    "anchor_path_of",
    "edges_of",
    "entity_members",
    "get_entity",
    "get_object",
    "get_objects",
    "object_at",
    "object_history",
    "query",
    "resolve_entity",
]

MAX_LIMIT: Final = 10_000
RANK_POOL: Final = MAX_LIMIT
"""A query ranked by git branch scores its newest this-many matches, then keeps the best."""
PAGE: Final = 512
FTS_DRIVE: Final = 5_000
"""A text query with at most this many matches is answered from the matches."""
LIVE: Final = "live"
FALSIFIED: Final = "falsified"
_STATE_FLAGS: Final = {"stale": "STALE", "falsified": "FALSIFIED"}
"""The flag a result carries for its falsification state (SPEC 7); live objects carry none."""
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
    cond, params = view_of(db, branch, as_of).versions("o", "mem_objects")
    row = db.execute(
        f"SELECT {', '.join('o.' + c for c in OBJECT_COLS)} FROM mem_objects o "
        f"WHERE o.id = ? AND {cond}",
        (object_id, *params),
    ).fetchone()
    if row is None:
        raise _no_object(object_id, branch, as_of)
    return object_from_row(row)


def _no_object(object_id: str, branch: str, as_of: int | None) -> NotFoundError:
    """Return the error ``get_object`` and ``get_objects`` raise for an object not there."""
    when = "now" if as_of is None else f"as of entry {as_of}"
    return NotFoundError(f"no memory object {object_id} on branch {branch} {when}")


def get_objects(
    db: apsw.Connection,
    object_ids: Sequence[str],
    *,
    as_of: int | None = None,
    branch: str = CANONICAL_BRANCH,
) -> list[MemoryObject]:
    """Return each object's version current as of ``as_of`` (default: now), in the order given.

    ``get_object`` of each, in one statement.

    Raises:
        NotFoundError: naming the first object that did not exist then.
    """
    _check_as_of(as_of)
    cond, params = view_of(db, branch, as_of).versions("o", "mem_objects")
    rows = db.execute(
        f"SELECT {', '.join('o.' + c for c in OBJECT_COLS)} FROM mem_objects o "
        f"WHERE o.id IN (SELECT value FROM json_each(?)) AND {cond}",
        (json.dumps(sorted(set(object_ids))), *params),
    ).fetchall()
    found = {str(row[0]): object_from_row(row) for row in rows}
    if len(found) != len(rows):  # an id with two visible rows: each as get_object reads it
        return [get_object(db, oid, as_of=as_of, branch=branch) for oid in object_ids]
    for oid in object_ids:
        if oid not in found:
            raise _no_object(oid, branch, as_of)
    return [found[oid] for oid in object_ids]


def object_history(
    db: apsw.Connection, object_id: str, *, branch: str = CANONICAL_BRANCH
) -> list[MemoryObject]:
    """Return every version of an object, oldest first (empty if it never existed).

    On a branch: the parent's versions up to the fork, then the branch's own.
    """
    out: list[MemoryObject] = []
    for b, bound in reversed(view_of(db, branch).levels):
        out += [
            object_from_row(r)
            for r in db.execute(
                f"SELECT {', '.join(OBJECT_COLS)} FROM mem_objects WHERE id = ? AND branch = ? "
                "AND vfrom <= ? ORDER BY vfrom",
                (object_id, b, 2**63 - 1 if bound is None else bound),
            )
        ]
    return out


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
    cond, params = view_of(db, branch, as_of).versions("e", "mem_entities")
    row = db.execute(
        f"SELECT {', '.join('e.' + c for c in ENTITY_COLS)} FROM mem_entities e "
        f"WHERE e.id = ? AND {cond}",
        (entity_id, *params),
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
    cond, params = view_of(db, branch, as_of).versions("e", "mem_entities")
    return [
        r[0]
        for r in db.execute(
            "WITH RECURSIVE members(id) AS (SELECT ? UNION SELECT e.id FROM mem_entities e "
            f"JOIN members m ON e.merged_into = m.id WHERE {cond}) "
            "SELECT id FROM members",
            (primary, *params),
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
    return _edges(db, view_of(db, branch, as_of), node_id, types)


def _edges(db: apsw.Connection, view: View, node_id: str, types: Sequence[str]) -> list[Edge]:
    cond, params = view.rows("x")
    type_cond = f" AND x.type IN ({', '.join('?' * len(types))})" if types else ""
    cols = ", ".join("x." + c for c in EDGE_COLS)
    sql = f"SELECT {cols}, x.rid FROM mem_edges x WHERE x.{{end}} = ? AND {cond}{type_cond}"
    rows = [
        *db.execute(sql.format(end="source_id"), (node_id, *params, *types)),
        *db.execute(sql.format(end="target_id"), (node_id, *params, *types)),
    ]
    rows.sort(key=lambda r: r[-1])
    return [edge_from_row(r[:-1]) for r in rows]


# -- filtered queries ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    """What to retrieve. Empty filters match everything; filters combine with AND.

    ``mode``: DEFAULT returns ACTIVE objects the RFC-0003 default filter admits (in a
    SIMULATION branch also ACTIVE HYPOTHETICAL ones, flagged), never a falsified one, stale
    ones flagged STALE; EXPLICIT returns what the
    filters name (lifecycle ACTIVE unless ``states`` says otherwise), every epistemic type
    flagged; AUDIT returns every version current at ``as_of``, any lifecycle state.
    EXPLICIT and AUDIT return falsified objects flagged FALSIFIED.
    ``actor`` limits results to namespaces the actor may READ (or that have no policy).
    ``text`` is matched word by word against values (FTS5; ``word*`` is a prefix).
    ``branch`` reads that branch's view (its state over the parent's at the fork).
    ``anchor`` (an event id) keeps only objects whose every evidence event lies on the
    anchor's ancestor path in the conversation tree; None applies no conversation filter.
    ``git_branch`` ranks results by seed 003's branch-aware score (see the module doc).
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
    anchor: str | None = None
    git_branch: str | None = None

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
        if self.anchor is not None:
            check_uuid(self.anchor, "anchor")
        if self.git_branch is not None and (
            type(self.git_branch) is not str or not 0 < len(self.git_branch) <= 128
        ):
            raise ValidationError(
                "git_branch must be a branch name of 1-128 characters", field="git_branch"
            )


@dataclass(frozen=True, slots=True)
class Result:
    """One retrieved object with its RFC-0003 flags and the objects it conflicts with.

    ``score`` is the branch-aware ranking score when the query gave a git branch.
    """

    object: MemoryObject
    flags: tuple[str, ...] = ()
    conflicts_with: tuple[str, ...] = field(default=())
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the result as a JSON-ready dict: the object's fields plus flags (and score)."""
        out = {
            **self.object.to_dict(),
            "flags": list(self.flags),
            "conflicts_with": list(self.conflicts_with),
        }
        if self.score is not None:
            out["score"] = self.score
        return out


def _fts_query(text: str) -> str:
    """Quote each word so user text is matched lexically, never parsed as FTS5 syntax."""
    words = _TOKEN.findall(text)
    if not words:
        raise ValidationError(f"text {text!r} has no words to search for", field="text")
    return " ".join(f'"{w[:-1]}"*' if w.endswith("*") else f'"{w}"' for w in words)


def _default_filter(simulation: bool) -> tuple[str, list[Any]]:
    always = sorted(DEFAULT_ALWAYS)
    # RFC-0012 section 10: a SIMULATION branch explores its hypotheses, so its ACTIVE
    # HYPOTHETICAL objects are in its default reads (flagged HYPOTHETICAL like any result).
    hypothetical = " OR o.epistemic_type = ?" if simulation else ""
    return (
        f"(o.epistemic_type IN ({', '.join('?' * len(always))}) OR (o.epistemic_type = ? AND "
        "o.confidence > ?) OR (o.epistemic_type = ? AND o.condition_state = 'TRUE')"
        f"{hypothetical})",
        [
            *always,
            EpistemicType.UNVERIFIED.value,
            UNVERIFIED_THRESHOLD,
            EpistemicType.CONDITIONAL.value,
            *([EpistemicType.HYPOTHETICAL.value] if simulation else []),
        ],
    )


def _where(db: apsw.Connection, q: Query, view: View) -> tuple[list[str], list[Any]] | None:
    """Return the query's WHERE terms and arguments; None when nothing can match."""
    if view.single:
        # Unary + keeps SQLite from driving the scan with the (id|branch, vfrom) indexes: the
        # plans wanted here are a newest-first rowid scan or a namespace/lifecycle index.
        cond, params = _visible("o", q.as_of)
        cond = cond.replace("o.vfrom", "+o.vfrom")
        where, args = [cond, "+o.branch = ?"], [*params, q.branch]
        if q.as_of is not None:
            # Rows of a branch are created in entry order (rid grows with vfrom): no row made
            # after entry as_of can match, so the newest-first scan starts at the last one.
            last = db.execute(
                "SELECT rid FROM mem_objects WHERE branch = ? AND vfrom <= ? "
                "ORDER BY vfrom DESC, rid DESC LIMIT 1",
                (q.branch, q.as_of),
            ).fetchone()
            if last is None:
                return None
            where.append("o.rid <= ?")
            args.append(last[0])
    else:
        cond, params = view.versions("o", "mem_objects")
        where, args = [cond], list(params)

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
        sql, extra = _default_filter(view.simulation)
        where.append(sql)
        args.extend(extra)
        # SPEC 7: a falsified object is known to be wrong; an agent's default read never
        # serves it as live memory (EXPLICIT and AUDIT show it, flagged FALSIFIED).
        where.append("o.state != ?")
        args.append(FALSIFIED)
    if q.entity is not None:
        members = entity_members(db, q.entity, as_of=q.as_of, branch=q.branch)
        e_cond, e_params = view.rows("x")
        where.append(
            f"o.id IN (SELECT x.source_id FROM mem_edges x WHERE x.type = ? AND x.target_id IN "
            f"({', '.join('?' * len(members))}) AND {e_cond})"
        )
        args.extend([EdgeType.ABOUT_ENTITY.value, *members, *e_params])
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
        n_cond, n_params = view.rows("n")
        g_cond, g_params = view.rows("g")
        where.append(
            f"(o.namespace_id NOT IN (SELECT n.id FROM mem_namespaces n WHERE {n_cond}) OR "
            f"o.namespace_id IN (SELECT g.namespace_id FROM mem_grants g WHERE "
            f"g.actor_id = ? AND g.permission = ? AND {g_cond}))"
        )
        args.extend([*n_params, q.actor, Permission.READ.value, *g_params])
    return where, args


def anchor_path_of(db: apsw.Connection, view: View, anchor: str) -> set[str]:
    """Return the anchor's ancestor path, after checking the anchor is an event the view sees.

    The path holds the source-branch evidence of merged objects whose branch line continued
    from it too (``anchors.with_merged``).

    Raises:
        NotFoundError: if it is not (or no conversation tree is recorded).
    """
    cond, params = view.events("ev")
    known = db.execute(
        f"SELECT 1 FROM mem_events ev WHERE ev.id = ? AND {cond}", (anchor, *params)
    ).fetchone()
    tree = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'conv_parents'"
    ).fetchone()
    if known is None or tree is None:
        where = "no conversation tree is recorded" if tree is None else f"branch {view.branch}"
        raise NotFoundError(f"anchor event {anchor} is not an event of {where}")
    return with_merged(db, view, ancestor_path(db, anchor))


def query(db: apsw.Connection, q: Query) -> list[Result]:
    """Return the objects ``q`` selects, most recently changed first, at most ``q.limit``.

    With ``q.anchor`` only objects whose ASSERT evidence lies on the anchor's path are kept,
    each in its state at the anchor (its lifecycle operations replayed through the path,
    ``memroot.projections.gated``), and the state filters apply to that state; they come
    newest first by their stored version. With ``q.git_branch`` the newest
    ``RANK_POOL`` matches are scored and the best ``q.limit`` returned, best first.

    A text query first adds values not yet in the full-text index (``tables.index_text``),
    which needs a connection that may write; ``sync`` does it beforehand.

    Raises:
        NotFoundError: if ``q.entity`` names no entity, ``q.branch`` no branch, or
            ``q.anchor`` no event the branch sees.
        ValidationError: if ``q.text`` holds no words.
        StorageError: if the full-text index is behind and cannot be updated here.
    """
    view = view_of(db, q.branch, q.as_of)
    path = None if q.anchor is None else anchor_path_of(db, view, q.anchor)
    want = RANK_POOL if q.git_branch is not None else q.limit
    rows: list[Any]
    if path is None:
        found = _where(db, q, view)
        if found is None:
            return []
        where, args = found
        cols = ", ".join("o." + c for c in OBJECT_COLS)
        sql = f"SELECT {cols}, o.rid, o.oid FROM mem_objects o WHERE {' AND '.join(where)}"
        rows = db.execute(f"{sql} ORDER BY o.rid DESC LIMIT ?", (*args, want)).fetchall()
        objects = [object_from_row(r[:-2]) for r in rows]
    else:
        objects, rows = _at_anchor(db, q, view, path, want)
    results = [_result(db, view, o, q, path) for o in objects]
    if q.git_branch is None:
        return results
    oids = [cast(int, row[-1]) for row in rows]
    has_contexts = (
        db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'git_context'"
        ).fetchone()
        is not None
    )
    scores = [
        _git_score(db, res.object, oid, q.git_branch, has_contexts)
        for res, oid in zip(results, oids, strict=True)
    ]
    order = sorted(range(len(results)), key=lambda i: -scores[i])
    return [
        Result(results[i].object, results[i].flags, results[i].conflicts_with, scores[i])
        for i in order[: q.limit]
    ]


# -- reads at a conversation anchor (seed 001; projections.gated) --------------------------------


def _created_on(db: apsw.Connection, object_id: str, path: set[str]) -> bool:
    """Return True when the evidence the object's ASSERT gave it all lies on ``path``."""
    row = db.execute(
        "SELECT f.evidence_ids FROM mem_objects f WHERE f.rid = "
        "(SELECT o.oid FROM mem_objects o WHERE o.id = ? LIMIT 1)",
        (object_id,),
    ).fetchone()
    return row is not None and all(e in path for e in str(row[0]).split(","))


def _admits(q: Query, obj: MemoryObject, simulation: bool) -> bool:
    """Return whether the state filters of ``_where`` (lifecycle, epistemic, DEFAULT) admit it.

    Applied to an object's state at an anchor; keep in step with ``_where``.
    """
    states = q.states or (() if q.mode == RetrievalMode.AUDIT else (LifecycleState.ACTIVE,))
    if states and obj.lifecycle_state not in states:
        return False
    if q.epistemic and obj.epistemic_type not in q.epistemic:
        return False
    if q.mode == RetrievalMode.DEFAULT:
        return obj.state != FALSIFIED and default_visible(
            obj.epistemic_type,
            obj.confidence,
            obj.lifecycle_state,
            obj.condition_state,
            simulation=simulation,
        )
    return True


def _at_anchor(
    db: apsw.Connection, q: Query, view: View, path: set[str], want: int
) -> tuple[list[MemoryObject], list[Any]]:
    """Return up to ``want`` objects as they are at the anchor, newest first, with their rows.

    Candidates are the objects citing an event of the path (``DERIVED_FROM`` edges), read
    newest first in one statement; each is kept when its creation is visible (every ASSERT
    evidence event on the path), then its state at the anchor is replayed
    (``gated.AnchorState``) and the query's state filters are applied to that state, not to
    the stored one.
    """
    structural = replace(q, mode=RetrievalMode.AUDIT, states=(), epistemic=())
    found = _where(db, structural, view)
    if found is None:
        return [], []
    where, args = found
    e_cond, e_params = view.rows("x")
    cols = ", ".join("o." + c for c in OBJECT_COLS)
    stream = db.execute(
        f"SELECT {cols}, o.rid, o.oid FROM mem_objects o WHERE {' AND '.join(where)} AND o.id IN "
        "(SELECT x.source_id FROM mem_edges x WHERE x.type = ? AND x.target_id IN "
        f"(SELECT value FROM json_each(?)) AND {e_cond}) ORDER BY o.rid DESC",
        (*args, EdgeType.DERIVED_FROM.value, json.dumps(sorted(path)), *e_params),
    )
    at = AnchorState(db, view, path)
    objects: list[MemoryObject] = []
    rows: list[Any] = []
    page: list[Any] = []

    simulation = view.simulation

    def take() -> None:
        for r, obj in zip(page, at.resolve([object_from_row(r[:-2]) for r in page]), strict=True):
            if obj is not None and _admits(q, obj, simulation):
                objects.append(obj)
                rows.append(r)
        page.clear()

    size = min(PAGE, want + 16)  # most candidates pass: a first page of about ``want``
    for r in stream:
        page.append(r)
        if len(page) == size:
            take()
            if len(objects) >= want:
                break
            size = min(PAGE, 2 * size)
    take()
    return objects[:want], rows[:want]


def object_at(
    db: apsw.Connection,
    object_id: str,
    anchor: str,
    *,
    branch: str = CANONICAL_BRANCH,
    as_of: int | None = None,
) -> MemoryObject | None:
    """Return the object as a read at ``anchor`` right after entry ``as_of`` returned it.

    None when it was not visible there (or did not exist then).
    """
    view = view_of(db, branch, as_of)
    try:
        obj = get_object(db, object_id, as_of=as_of, branch=branch)
    except NotFoundError:
        return None
    path = with_merged(db, view, path_as_of(db, view, anchor))  # merge imports' evidence
    return AnchorState(db, view, path).explain(obj)[1]


def _git_score(
    db: apsw.Connection, obj: MemoryObject, oid: int, git_branch: str, has_contexts: bool
) -> float:
    """Seed 003's score of an object for ``git_branch``: base ``confidence * salience``.

    The git context is the one of the entry that created the object (its first version,
    which a branch-local copy shares with the parent's). Superseded objects have lost
    revision validity.
    """
    ctx: GitContext | None = None
    if has_contexts:
        first = db.execute("SELECT branch, vfrom FROM mem_objects WHERE rid = ?", (oid,)).fetchone()
        if first is not None:
            ctx = context_of(db, first[0], first[1])
    return branch_score(
        obj.confidence * obj.salience,
        ctx,
        git_branch,
        revision_valid=obj.lifecycle_state != LifecycleState.SUPERSEDED,
    )


def _result(
    db: apsw.Connection, view: View, obj: MemoryObject, q: Query, path: set[str] | None = None
) -> Result:
    conflicts = tuple(
        dict.fromkeys(
            e.target_id if e.source_id == obj.id else e.source_id
            for e in _edges(db, view, obj.id, (EdgeType.CONTRADICTS.value,))
        )
    )
    if path is not None:
        # A contradiction's provenance is both objects' evidence: at an anchor it counts only
        # when the other object is visible there too (projections.gated).
        conflicts = tuple(c for c in conflicts if _created_on(db, c, path))
    marks = ", ".join("?" * len(obj.evidence_ids))
    cond, params = view.erased("ev")
    erased = (
        db.execute(
            f"SELECT 1 FROM mem_events ev WHERE ev.id IN ({marks}) AND {cond} LIMIT 1",
            (*obj.evidence_ids, *params),
        ).fetchone()
        is not None
    )
    flags = flags_for(obj.epistemic_type, conflict=bool(conflicts), evidence_erased=erased)
    if obj.state != LIVE:
        flags = (*flags, _STATE_FLAGS[obj.state])
    return Result(obj, flags, conflicts)
