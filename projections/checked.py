"""The read gate for derived memory: every surface reads memory objects only through here.

The derived tables (``mem_objects`` ...) are a cache of the ledger that anyone with write
access to the file can edit, so a surface (the CLI's ``query``, ``Memory.recall``, the MCP
tools, the LangGraph integration, ``report``, receipts) never reads them itself: it calls
``checked_query`` or ``checked_object``, which return only what they have checked on a strict
ledger (``Ledger.strict``):

- the branch heads against their newest signed checkpoints (``Ledger.check_heads``), and the
  trusted state when the ledger has one;
- every served object against the replay of its own operations and evidence, each entry
  proven in the signed tree and each content against its commitment
  (``strict_rows.check_objects``);
- the rows a query's state filter left out (``_check_hidden``): a row hidden by an edit of
  its ``lifecycle_state``, ``epistemic_type``, ``confidence`` or falsification state is an
  edited row too, and is refused like one;
- what a query's words, types, entity and actor select, taken from the log
  (``_trusted_selection``, ``assert_index``), not from the index, edges and grants that
  answered them; and a read at a conversation anchor against the same read on the log's
  replay (``_check_at_anchor``);
- the set served is complete (``_check_complete``): each namespace's object rows against the
  memory map a v2 root commits to, plus the entries since, through the completeness hook of
  the memory-root layer (``check_complete`` of a ledger hook), so a deleted row is refused
  like an edited one (docs/FORMAT.md §6.14 says what this proves and what not).

A query (and each object) checked is remembered while nothing changed the file
(``strict_rows.remembered``: SQLite's ``data_version`` and the connection's own
``total_changes``), so a repeated read of unchanged data re-checks nothing, and any other
writer's commit, an attacker's edit included, makes the next read check again. The scan of
the rows a query's filters hid is kept across this handle's own appends too (on a file:
``object_token``, as each object's check and the completeness check are).

``unchecked_query`` is the forensic path (``memroot query --no-strict``): the same SQL with no
check at all. No surface module calls it or the SQL below it except the ones the import-rules
test (tests/unit/projections/test_read_gate.py) names with their reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Final, NamedTuple, TypeVar

import apsw

from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.errors import IntegrityError, NotFoundError, cache_edited
from memroot.ledger.ledger import Ledger
from memroot.projections import query as _q
from memroot.projections import wal_pages
from memroot.projections.assert_index import Judge, about, readable, selected
from memroot.projections.epistemic import RetrievalMode
from memroot.projections.model import MemoryObject
from memroot.projections.query import Query, Result
from memroot.projections.strict_rows import (
    Heads,
    check_objects,
    check_results,
    checked_token,
    heads_of,
    object_token,
    remembered,
    replayed_model,
    replayed_skips,
    since,
)
from memroot.projections.tables import OBJECT_COLS, object_from_row
from memroot.projections.views import View, view_of

__all__ = [
    "checked_object",
    "checked_query",
    "current_in_file",
    "refuse_deleted",
    "unchecked_query",
]


def checked_query(ledger: Ledger, q: Query) -> list[Result]:
    """Return the objects ``q`` selects, each checked (see the module docstring).

    Run inside a transaction of ``ledger`` (``ledger.reading()`` or ``ledger.write()``): the
    rows are read and checked in one snapshot, with the memory model folded to the heads
    (``projections.hook.sync``, as every surface does first: the filters' selections are
    the log's, and an entry not folded yet has no derived row). A non-strict ledger is not
    checked (its caller asked for forensics by opening it so).

    Raises:
        IntegrityError: a branch head, a served row, a row the filters hid, or an entry
            behind one of them fails its check (naming the step, the entry or the object).
        NotFoundError / ValidationError / StorageError: as ``projections.query.query``.
    """
    if ledger.strict:
        ledger.check_heads()
    db = ledger.derived.db
    token = checked_token(ledger) if ledger.strict else None
    try:
        results = _q.query(db, q)
    except NotFoundError:
        if ledger.strict and q.anchor is not None:
            _refuse_unknown_anchor(ledger, q)
        if ledger.strict and q.entity is not None:
            _refuse_unknown_entity(ledger, db, q)
        raise
    if not ledger.strict:
        return results
    # The same query on a file nothing changed since it was checked returns the same rows
    # (strict_rows.remembered): its served and hidden rows were checked then.
    memo = remembered(ledger, token)
    if ("query", q) in memo:
        return results
    # The rows the filters hid were checked at this ``object_token`` (on a file: no other
    # connection committed since, only this handle's own appends, through the hooks): they
    # can have hidden no row an edit could have changed (``_check_hidden``).
    scanned = object_token(ledger)
    hid = remembered(ledger, scanned, "hidden")
    with _host_cache(ledger):
        check_results(ledger, results, q)
        if q not in hid:
            served = tuple(r.object.id for r in results)
            _kept_on_rows(
                ledger, ("hidden", q, served), lambda: _check_hidden(ledger, db, q, results)
            )
        _check_complete(ledger, q, results)
    if object_token(ledger) == scanned:
        hid.add(q)
    if checked_token(ledger) == token:
        memo.add(("query", q))
    return results


def checked_object(
    ledger: Ledger,
    object_id: str,
    *,
    branch: str = CANONICAL_BRANCH,
    as_of: int | None = None,
) -> MemoryObject:
    """Return an object's version current on ``branch`` now (or as of ``as_of``), checked.

    Run inside a transaction of ``ledger``, as ``checked_query``.

    Raises:
        NotFoundError: the object does not exist there (and no derived row names it).
        IntegrityError: its row is not what its operations give, or its row is gone while
            other derived rows still name it (a deleted row).
    """
    if ledger.strict:
        ledger.check_heads()
    db = ledger.derived.db
    with _host_cache(ledger):
        try:
            obj = _q.get_object(db, object_id, as_of=as_of, branch=branch)
        except NotFoundError:
            if ledger.strict and as_of is None:
                refuse_deleted(db, object_id, branch)
            raise
        check_objects(ledger, [obj], branch, as_of=as_of)
    return obj


@contextlib.contextmanager
def _host_cache(ledger: Ledger) -> Iterator[None]:
    """On a PostgreSQL ledger, say that a derived row refused is this host's cache, edited.

    The derived tables there are the host's cache file (``Ledger.derived``), never needed
    to audit the ledger: a step-9 refusal (a row not what its operations give, a row hidden,
    deleted or forged) names the file and the way back (delete it; the next open rebuilds
    it), not ``rebuild`` of a ledger file.
    """
    try:
        yield
    except IntegrityError as e:
        path = getattr(ledger.derived, "path", None)
        if ledger.derived is ledger.store or e.step != 9 or path is None or str(path) in str(e):
            raise
        what = str(e).removeprefix("strict read refused: ").removeprefix("step 9: ")
        raise cache_edited(path, what, branch=e.branch, seq=e.seq) from e


def unchecked_query(db: apsw.Connection, q: Query) -> list[Result]:
    """FORENSICS ONLY: return what the derived tables say, with no check at all.

    For reading a damaged ledger to see what an attacker left (``memroot query
    --no-strict``); never for serving memory to an agent.

    Raises:
        As ``projections.query.query``.
    """
    return _q.query(db, q)


def refuse_deleted(db: apsw.Connection, object_id: str, branch: str) -> None:
    """Refuse an object whose version rows are gone while its edges still name it.

    The DERIVED_FROM and ABOUT_ENTITY edges an ASSERT writes start at the object: an
    object with such edges in the branch's view and no version row had its row deleted.
    (Deleting both is seen only by verify step 9 until the memory map lands,
    ``_check_complete``.)

    Raises:
        IntegrityError: step 9, naming the object.
    """
    # Only edges FROM it (an event id is the target of the DERIVED_FROM edges citing it).
    if any(e.source_id == object_id for e in _q.edges_of(db, object_id, branch=branch)):
        raise IntegrityError(
            f"step 9: memory object {object_id} has no stored row on branch {branch} but its "
            "edges name it (derived row deleted); `memroot rebuild` re-derives it",
            branch=branch,
            step=9,
        )


def _check_at_anchor(
    ledger: Ledger, db: apsw.Connection, q: Query, served: Sequence[Result]
) -> None:
    """Check a read at a conversation anchor against the same read on the log's replay.

    Its answer rests on more derived rows than a row check sees: the anchor's path
    (``conv_parents``, and the merge imports joining it), the candidates citing the path
    (``DERIVED_FROM`` edges), each one's state at the anchor (the gated rows) and the
    query's other filters. The memory model of the whole log, replayed from entries read
    strictly (``strict_rows.replayed_model``, kept per process and fed what is appended),
    answers the same query; the objects served must be the ones it gives, in its order
    (with ``git_branch``, the pool both rank, unranked). Served rows are checked as every
    read's are (``check_results``).

    Raises:
        IntegrityError: step 9, naming the first object one answer has and the other lacks.
    """
    pool = dataclasses.replace(q, git_branch=None)
    try:
        want = _replayed_answer(ledger, pool)
    except NotFoundError as e:
        raise IntegrityError(
            f"step 9: the read at anchor {q.anchor} was answered from the derived rows, but "
            f"the log's replay answers: {e} (a derived row added); `memroot rebuild` "
            "re-derives them",
            branch=q.branch,
            step=9,
        ) from e
    got = [r.object.id for r in served] if q.git_branch is None else (
        [r.object.id for r in _q.query(db, pool)])  # fmt: skip
    if got != want:
        what, oid = _first_difference(want, got)
        raise IntegrityError(
            f"step 9: memory object {oid} was {what} by the read at anchor {q.anchor}, "
            "against the same read on the log's replay (a derived row of the conversation, "
            "the edges, the gated states or a filter edited); `memroot rebuild` re-derives "
            "them",
            branch=q.branch,
            step=9,
        )


_KEPT_MAX: Final = 256
"""At most this many answers are kept per ledger (``_kept``)."""
_ROWS_READ: Final = ("mem_objects", "mem_forks", "branch_meta")
"""The tables a page of object rows is read from, with its view (``_kept_on_rows``)."""
_KEPT: weakref.WeakKeyDictionary[
    Ledger, dict[object, tuple[Heads, wal_pages.Mark | None, object]]
] = weakref.WeakKeyDictionary()
"""Per open ledger: a key of what was asked -> the heads (and, for an answer of the object
rows, the WAL floor) it was answered at, and the answer (``_kept``)."""
_ROWS_WATCH: weakref.WeakKeyDictionary[Ledger, wal_pages.Watch] = weakref.WeakKeyDictionary()

_T = TypeVar("_T")


def _kept(ledger: Ledger, key: object, answer: Callable[[], _T], *, rows: bool) -> _T:
    """Return ``answer()``, kept while the log extends the heads it was given at with events.

    The heads an answer was given at are extended by events only when ``strict_rows.since``
    says so (each new entry read strictly, every old head still proving with its hash); any
    operation appended, or a log that does not extend them, and it is asked again. With
    ``rows`` the answer also rests on the object rows and the view (``_ROWS_READ``): it is
    kept only on a file in WAL mode, and only while no commit since wrote a page of those
    tables (``wal_pages.Watch``: a changed row rewrites its page); this handle's own write,
    the WAL restarted or PostgreSQL ask again. Only an answer that returned is kept (a
    refusal is asked again on the next read). Run inside a transaction of ``ledger``.

    Raises:
        IntegrityError: an entry appended since fails its strict read (or as ``answer``).
    """
    here = wal_pages.floor_of(ledger) if rows else None
    memo = _KEPT.setdefault(ledger, {})
    kept = memo.get(key)
    if kept is not None and _unmoved(ledger, kept[0], kept[1], here, rows=rows):
        memo[key] = (heads_of(ledger), here, kept[2])
        return kept[2]  # type: ignore[return-value]  # stored by this function for key
    heads = heads_of(ledger)
    got = answer()
    if not rows or here is not None:
        if len(memo) >= _KEPT_MAX:
            memo.clear()
        memo[key] = (heads, here, got)
    return got


def _unmoved(
    ledger: Ledger,
    heads: Heads,
    then: wal_pages.Mark | None,
    here: wal_pages.Mark | None,
    *,
    rows: bool,
) -> bool:
    """Whether an answer given at ``heads`` (and the WAL floor ``then``) still holds.

    Only events appended since ``heads``; with ``rows``, also no commit from ``then`` to
    ``here`` (this snapshot's floor) wrote a page of ``_ROWS_READ``.
    """
    path = ledger.store.path
    if rows and (then is None or here is None or path is None):
        return False
    new = since(ledger, object_token(ledger), heads)
    if new is None or new[1]:
        return False
    if not rows:
        return True
    assert then is not None and here is not None and path is not None  # tested above
    watch = _ROWS_WATCH.setdefault(ledger, wal_pages.Watch(_ROWS_READ))
    return watch.unchanged(ledger.derived.db, path, then, here, ledger.store.read_memo())


def _kept_by_log(ledger: Ledger, key: object, answer: Callable[[], _T]) -> _T:
    """Return ``answer()``, an answer of the log alone, kept while only events are appended.

    What the log says a query's words, types, entity and actor select (``_by_log``) and
    what a query at an anchor gives on the log's replay (``_replayed_answer``) are
    functions of the log's operations: an event changes no object, edge, entity, grant or
    gated state, and an anchor's path is made of events that were there before (a new event
    can be no ancestor of one already in the log). Only the log's side is kept: the page
    served is compared with it on every read (``_kept``).
    """
    return _kept(ledger, key, answer, rows=False)


def _kept_on_rows(ledger: Ledger, key: object, answer: Callable[[], _T]) -> _T:
    """Return ``answer()``, an answer of the object rows and the log, kept while neither moved.

    What the rows a query's filters hid are (``_check_hidden``, its key naming the page
    served) and the page the log's selection gives among the object rows
    (``_trusted_selection``) are functions of the object rows, the view and the log's
    operations (``_kept`` with ``rows``).
    """
    return _kept(ledger, key, answer, rows=True)


def _replayed_answer(ledger: Ledger, q: Query) -> list[str]:
    """Return the ids ``q`` selects on the log's replayed memory model (``replayed_model``).

    Kept while only events are appended (``_kept_by_log``).

    Raises:
        NotFoundError: as ``query``, for what the replay does not hold either.
        IntegrityError: an entry fails its strict read.
    """
    return _kept_by_log(
        ledger,
        ("anchor", q),
        lambda: [r.object.id for r in _q.query(replayed_model(ledger), q)],
    )


def _first_difference(want: Sequence[str], got: Sequence[str]) -> tuple[str, str]:
    """Return ``(how, object id)`` of the first place page ``got`` is not page ``want``.

    An object ``want`` has and ``got`` lacks was "left out", one only ``got`` has was
    "added"; with the same objects, the first one out of place was "served out of order".
    """
    dropped = [i for i in want if i not in got]
    if dropped:
        return "left out", dropped[0]
    added = [i for i in got if i not in want]
    if added:
        return "added", added[0]
    return "served out of order", next(g for g, w in zip(got, want, strict=True) if g != w)


def _refuse_unknown_anchor(ledger: Ledger, q: Query) -> None:
    """Refuse a read whose anchor the derived rows lack but the log's replay has.

    Raises:
        IntegrityError: step 9, naming the anchor.
    """
    try:
        _replayed_answer(ledger, dataclasses.replace(q, git_branch=None))
    except NotFoundError:
        return  # the log agrees: no such anchor (or entity, or branch) there
    raise IntegrityError(
        f"step 9: the derived rows answer that anchor event {q.anchor} is not there, but the "
        "log's replay has it (a derived row deleted); `memroot rebuild` re-derives them",
        branch=q.branch,
        step=9,
    )


def _refuse_unknown_entity(ledger: Ledger, db: apsw.Connection, q: Query) -> None:
    """Refuse a query whose entity the derived rows lack but the log has in the view.

    ``query`` answers an entity it finds no row of with ``NotFoundError``; when the log has
    an ``ENTITY_CREATE`` of it that the view sees (and no replay skips), its row was deleted.

    Raises:
        IntegrityError: step 9, naming the entity.
    """
    try:
        levels = view_of(db, q.branch, q.as_of).levels
    except NotFoundError:
        return  # the branch is unknown: that is the answer
    assert q.entity is not None
    branches = [b.name for b in ledger.store.branches()]
    if about(ledger, levels, q.entity, _judge(ledger, db), branches) is not None:
        raise IntegrityError(
            f"step 9: entity {q.entity} has no stored row on branch {q.branch} but its "
            "ENTITY_CREATE is in the log (derived row deleted); `memroot rebuild` re-derives it",
            branch=q.branch,
            step=9,
        )


_LISTED: Final = 256
"""A selection of at most this many ids is given to SQLite as a list; a larger one is
tested row by row in a newest-first scan (which a full page ends early)."""


def _page_rows(
    db: apsw.Connection, where: list[str], args: list[object], ids: frozenset[str] | None
) -> Iterator[tuple[str, int]]:
    """Yield ``(id, rid)`` of the rows ``where`` selects among ``ids`` (None: all), newest first."""
    if ids is not None and len(ids) <= _LISTED:
        where = [*where, "o.id IN (SELECT value FROM json_each(?))"]
        args = [*args, json.dumps(sorted(ids))]
        ids = None
    for oid, rid in db.execute(
        f"SELECT o.id, o.rid FROM mem_objects o WHERE {' AND '.join(where)} ORDER BY o.rid DESC",
        args,
    ):
        if ids is None or oid in ids:
            yield str(oid), int(rid)


@functools.lru_cache(maxsize=256)
def _unfiltered(q: Query) -> Query:
    """Return ``q`` without its state and selecting filters.

    AUDIT mode, no states, epistemic types, words, types, entity, actor, anchor or ranking
    (its branch, as-of, namespaces and limit kept): the rows it selects are the candidates
    the filters chose among. Memoised: a ``dataclasses.replace`` of a query costs ~10 us,
    twice a read.
    """
    return dataclasses.replace(
        q,
        mode=RetrievalMode.AUDIT,
        states=(),
        epistemic=(),
        git_branch=None,
        text=None,
        types=(),
        entity=None,
        actor=None,
        anchor=None,
    )


def _check_hidden(ledger: Ledger, db: apsw.Connection, q: Query, served: Sequence[Result]) -> None:
    """Check the rows ``q``'s filters left out.

    An agent is not told about a row the filters drop, so a row edited to be dropped
    (``lifecycle_state`` set to ARCHIVED, a lowered ``confidence``, its type, its words in
    the full-text index, its entity edges, a grant) hides memory as surely as an edit changes
    it. The words, types, entity and actor are taken from the log (``_trusted_selection``,
    which also checks the page served); the
    same query in AUDIT mode (no lifecycle, epistemic or falsification filter) lists the rows
    that would have been candidates; those the served set lacks are checked like served
    rows, up to the oldest one served when the served set is full (older rows were not
    candidates). A read at an anchor is checked whole instead (``_check_at_anchor``).
    """
    if q.anchor is not None:
        _check_at_anchor(ledger, db, q, served)
        return
    sel = _trusted_selection(ledger, db, q, served)
    if q.mode == RetrievalMode.AUDIT and not q.states and not q.epistemic and sel is None:
        return
    found = _q._where(db, _unfiltered(q), view_of(db, q.branch, q.as_of))
    if found is None:
        return
    where, args = found
    ids = None
    if sel is not None:
        where, args, ids = [*where, *sel.where], [*args, *sel.args], sel.ids
    shown = {r.object.id for r in served}
    # A full page (newest first) ends at its oldest row: older rows were no candidates.
    oldest = (
        served[-1].object.id if served and len(served) >= q.limit and not q.git_branch else None
    )
    # The candidates' ids first: only the rows the served set lacks are built and checked.
    rids = []
    for oid, rid in _page_rows(db, where, args, ids):
        if oid == oldest:
            break
        if oid not in shown:
            rids.append(rid)
    hidden = []
    cols = ", ".join(OBJECT_COLS)
    for part in range(0, len(rids), 500):
        chunk = rids[part : part + 500]
        marks = ",".join("?" * len(chunk))
        hidden += [
            object_from_row(row)
            for row in db.execute(
                f"SELECT {cols} FROM mem_objects WHERE rid IN ({marks}) ORDER BY rid DESC", chunk
            )
        ]
    check_objects(ledger, hidden, q.branch, as_of=q.as_of)


class _Selection(NamedTuple):
    """What the log says the words, types, entity and actor select (``_trusted_selection``)."""

    ids: frozenset[str] | None
    """The objects the words, types and entity select (None: no such filter)."""
    where: list[str]
    """The actor's namespaces as WHERE terms over ``mem_objects o`` (empty: no actor)."""
    args: list[object]


def _judge(ledger: Ledger, db: apsw.Connection) -> Judge:
    """Return the judge of skips ``assert_index`` asks: a skip record counts if a replay agrees.

    The skip records (``mem_skipped``) are derived rows; one that names an entry a filter's
    answer rests on is confirmed by the memory model's own replay of the log
    (``strict_rows.replayed_skips``), read only then (honest ledgers seldom skip).
    """
    recorded: set[tuple[str, int]] | None = None

    def judge(positions: set[tuple[str, int]]) -> set[tuple[str, int]]:
        nonlocal recorded
        if not positions:
            return set()
        if recorded is None:
            recorded = {
                (str(b), int(s)) for b, s in db.execute("SELECT branch, seq FROM mem_skipped")
            }
        hit = positions & recorded
        return set(hit & replayed_skips(ledger)) if hit else hit

    return judge


def _by_log(ledger: Ledger, db: apsw.Connection, q: Query, view: View) -> _Selection:
    """Return what ``q``'s words, types, entity and actor select by the log.

    ``assert_index`` answers from the entries themselves, in ``view`` (``q``'s): the objects
    whose ``ASSERT`` has the words and a type asked, the objects tied to the entity (its
    merges followed), and the namespaces the actor may read. A query whose entity the log
    does not know selects nothing.

    Kept while only events are appended (``_kept_by_log``).

    Raises:
        IntegrityError: an entry read fails its strict read.
    """
    key = ("by_log", q.text, q.types, q.entity, q.actor, view.levels)
    return _kept_by_log(ledger, key, lambda: _by_log_now(ledger, db, q, view))


def _by_log_now(ledger: Ledger, db: apsw.Connection, q: Query, view: View) -> _Selection:
    """``_by_log``'s answer, asked of the log now."""
    branches = [b.name for b in ledger.store.branches()]
    ids: frozenset[str] | None = None
    if q.text is not None or q.types:
        fts = None if q.text is None else _q._fts_query(q.text)
        ids = selected(ledger, branches, fts, tuple(sorted(q.types)))
    levels = view.levels
    judge = _judge(ledger, db)
    if q.entity is not None:
        tied = about(ledger, levels, q.entity, judge, branches) or frozenset()
        ids = tied if ids is None else ids & tied
    where: list[str] = []
    args: list[object] = []
    if q.actor is not None:
        policies, granted = readable(ledger, levels, q.actor, judge, branches)
        where.append(
            "(o.namespace_id NOT IN (SELECT value FROM json_each(?)) OR "
            "o.namespace_id IN (SELECT value FROM json_each(?)))"
        )
        args += [json.dumps(sorted(policies)), json.dumps(sorted(granted))]
    return _Selection(ids, where, args)


_BY_WHAT: Final = (
    ("the full-text index for the words {q.text!r}", "text"),
    ("the stored types for {q.types}", "types"),
    ("the ABOUT_ENTITY edges and entity rows for entity {q.entity}", "entity"),
    ("the namespaces' policies and grants for actor {q.actor!r}", "actor"),
)


def _trusted_selection(
    ledger: Ledger, db: apsw.Connection, q: Query, served: Sequence[Result]
) -> _Selection | None:
    """Return what ``q``'s words, types, entity and actor select by the log; check the page.

    ``mem_fts`` answered the words, the stored ``type`` column the types, the
    ``ABOUT_ENTITY`` edges and the entities' merges the entity, and the namespaces' policies
    and grants the actor; an edit of any of them (or of a value before it was indexed) could
    have dropped an object they select or added one they do not. What the log says
    (``assert_index``: each ``ASSERT``'s value, indexed privately by the same FTS5 rules, its
    type and its entities, each ``RELATE`` of an ``ABOUT_ENTITY`` edge, each merge, policy and
    grant) says which objects they select: the query's page (the same other filters, order
    and limit) taken with that selection instead of the derived rows must be the page served
    (with ``git_branch``, whose page is the best of a pool, the pool the derived rows give).
    The selection is returned for ``_check_hidden``, which checks the rows the state filters
    hid in it; None when the query has none of those filters.

    Raises:
        IntegrityError: step 9, naming an object the derived rows dropped or added.
    """
    if q.text is None and not q.types and q.entity is None and q.actor is None:
        return None
    view = view_of(db, q.branch, q.as_of)
    sel = _by_log(ledger, db, q, view)
    base = _q._where(db, dataclasses.replace(q, text=None, types=(), entity=None, actor=None), view)
    if base is None:
        return sel
    where, args = [*base[0], *sel.where], [*base[1], *sel.args]
    size = _q.RANK_POOL if q.git_branch is not None else q.limit
    if q.git_branch is None:
        got = [r.object.id for r in served]  # the page served is the derived rows' page
    else:
        stored = _q._where(db, q, view) or (["0"], [])
        got = [oid for oid, _ in itertools.islice(_page_rows(db, *stored, None), size)]
    want = _kept_on_rows(
        ledger,
        ("page", q, view.levels),
        lambda: [oid for oid, _ in itertools.islice(_page_rows(db, where, args, sel.ids), size)],
    )
    if got != want:
        what, oid = _first_difference(want, got)
        by = " and ".join(
            text.format(q=q) for text, field in _BY_WHAT if getattr(q, field) not in (None, ())
        )
        raise IntegrityError(
            f"step 9: memory object {oid} was {what} by {by}, against what the log says "
            "(a derived row edited or deleted); `memroot rebuild` re-derives it",
            branch=q.branch,
            step=9,
        )
    return sel


def _namespaces(db: apsw.Connection) -> set[str]:
    """Every namespace the derived tables name (objects, events, namespaces, state items)."""
    out: set[str] = set()
    for sql in (
        "SELECT DISTINCT namespace_id FROM mem_objects",
        "SELECT DISTINCT namespace_id FROM mem_events",
        "SELECT DISTINCT id FROM mem_namespaces",
        "SELECT DISTINCT namespace FROM fz_items",
    ):
        try:
            out.update(str(r[0]) for r in db.execute(sql))
        except apsw.SQLError:
            continue  # a table of a layer this ledger does not have
    return out


def _check_complete(ledger: Ledger, q: Query, served: Sequence[Result]) -> None:
    """Check that the served set is complete against the memory map (issue 26.3 = 23.4).

    The object rows the branch's view holds now, any lifecycle state, in each namespace the
    query reads (every namespace when it names none) are handed to the completeness hook of
    the ledger's hooks (``check_complete``: the memory_root layer's ``RootsHook``, which
    compares them with the map at the latest v2 root plus the entries since), so a deleted
    row, or a row moved out of its namespace, is refused like an edited one; rows the
    filters hid are ``_check_hidden``'s. Reads ``as_of`` an earlier entry are not checked
    here (the map is the head's), nor a ledger opened without that hook
    (docs/FORMAT.md §6.14, "What a strict query proves").
    """
    del served
    if q.as_of is not None:
        return
    hooks = [f for f in (getattr(h, "check_complete", None) for h in ledger.hooks) if callable(f)]
    if not hooks:
        return
    db = ledger.derived.db
    audit = _unfiltered(q)
    every = not q.namespaces

    def read_rows() -> tuple[dict[str, list[str]], list[str]]:
        rows: dict[str, list[str]] = {ns: [] for ns in q.namespaces}
        found = _q._where(db, audit, view_of(db, q.branch, None))
        if found is not None:
            where, args = found
            for oid, ns in db.execute(
                f"SELECT DISTINCT o.id, o.namespace_id FROM mem_objects o "
                f"WHERE {' AND '.join(where)}",
                args,
            ):
                rows.setdefault(str(ns), []).append(str(oid))
        return rows, sorted(set(rows) | (_namespaces(db) if every else set()))

    for check in hooks:
        check(ledger, q.branch, read_rows, q.namespaces, every=every)


_CURRENT: Final = (
    "SELECT (SELECT size FROM branches WHERE name = ?), "
    "(SELECT count(*) FROM branches b LEFT JOIN mem_heads h ON h.branch = b.name "
    "WHERE coalesce(h.size, 0) != b.size), "
    "(SELECT max(rid) FROM mem_objects), (SELECT value FROM mem_meta WHERE key = 'fts_rid'), "
    "(SELECT count(*) FROM sqlite_master WHERE name = 'fz_states'), "
    "(SELECT size FROM fz_heads WHERE branch = ?)"
)
"""``current_in_file``'s one statement: the branch's size, how many branches the memory model
has not folded to their size (``hook.current``), the text index's mark, whether the
falsification layer's tables exist and how far it has folded the branch."""


def current_in_file(db: apsw.Connection, branch: str) -> tuple[int, bool] | None:
    """``(size, current)`` of a ledger file's branch in one statement (``_CURRENT``), or None.

    Whether a read needs a catch-up first (``Memory.recall`` asks in the read transaction it
    then reads in). None when a table is missing or the branch is unknown (the facade then
    asks each layer, which installs what is missing or names the branch). A ``current`` True
    means what each layer's own check gives: every branch folded by the memory model, the
    text index current, the falsification layer's tables present and the branch folded by
    it (or a read-only file, which nothing can be folded into).
    """
    try:
        row = db.execute(_CURRENT, (branch, branch)).fetchone()
    except apsw.SQLError:
        return None
    assert row is not None  # a SELECT of scalar subqueries gives one row
    size, behind, top, mark, fz_tables, fz_size = row
    if size is None:
        return None
    size = int(size)
    indexed = top is None or (mark is not None and int(mark) >= int(top))
    if behind or not indexed or not fz_tables:
        return size, False
    return size, bool(db.readonly("main")) or (0 if fz_size is None else int(fz_size)) == size
