"""The dependency index of the falsification layer (SPEC 7): who was built on what.

Falsification (``memroot.memory_root.falsify``) flips the state of one *item*; a cascade
(``memroot.memory_root.falsify.cascade``) walks what depends on it. Items are named ``(kind, id)``:

==================  =====================================================================
``memory_object``   an RFC-0001 memory object, by its UUID
``memory_root``     a memory root (a ``SNAPSHOT``, or a root a ``CASCADE`` re-snapshotted),
                    by its 64 hex digits
``summary_item``    one key of one projection's summary in a root: ``ROOT:projection:key``
``selfmodel``       a ``SELFMODEL_SNAPSHOT``, by its selfmodel_root (64 hex digits)
==================  =====================================================================

What cites what (the index, derived from entries alone, in the append transaction):

- an object cites its evidence events (``ASSERT`` and ``EPISTEMIC_TRANSITION``
  ``evidence_ids``); a SUMMARY object cites the objects it summarises (``SUMMARY_CREATED``);
  an object cites the objects that ``SUPPORTS`` it (``RELATE``);
- a root cites its parent root (so a branch's first root cites the parent branch's root at
  the fork), and is built on the entries it folded: ``(parent's high-water, high-water]`` of
  its branch. An entry that names an object (creates it, targets it, or lists it in its
  payload) is an input of that object; a root is built on the object when one of its
  projections reads such an entry in its range (by the projection's ``types``; a projection
  this memroot does not know is taken to read everything). A root that lists a *state*
  projection (``memory-state``) is built on every object its branch sees at its high-water;
- a summary item is built on the same objects, for the projections that read them (every key
  of such a projection's summary: the index does not attribute keys), and its root is built
  on it;
- a SelfModel snapshot cites the memory root in its body.

A root's projections (which rules it lists, so what it read) come from its ``SNAPSHOT``
entry; a v3 entry (docs/FORMAT.md §6.16) holds the list by its hash only, so ``fold`` takes
it from a ``ListSource`` (the stored records of the root, or a bundle's) and uses it only
when it hashes to the entry's ``projections``. A v3 root whose list is not known (no such
record, or one that does not hash right) is recorded without it (``RootRow.rules`` None):
``Graph`` refuses (``IntegrityError``) every walk that would need it, so a cascade is never
planned on a list the log does not vouch for.

``Graph.dependents`` answers "what was built on this item", inside one branch's *view*: the
branch's own rows plus its ancestors' as they were at each fork (RFC-0012), so a cascade on
a branch never sees what happened in the parent after the fork, nor another branch's items.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import apsw

from memroot.ledger import encoding
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind
from memroot.ledger.errors import IntegrityError, ValidationError
from memroot.ledger.vocab import OpType
from memroot.memory_root.root import ProjectionDigest, RootPreimage, list_digest
from memroot.projections.projection import is_state_projection, rule_digest
from memroot.projections.registry import Registry

__all__ = [
    "EVENT",
    "KINDS",
    "OBJECT",
    "ROOT",
    "SELFMODEL",
    "STATE_OPS",
    "SUMMARY",
    "Graph",
    "ItemRef",
    "ListSource",
    "Located",
    "RootRow",
    "RuleInfo",
    "SummaryKeys",
    "View",
    "add_listed_replacements",
    "add_replacement",
    "attach_list",
    "fold",
    "install",
    "listed_rules",
    "locate",
    "named_objects",
    "replaced_row",
    "root_row",
    "rule_info",
    "split_summary_id",
    "view_of",
    "visible_condition",
]

OBJECT: Final = "memory_object"
ROOT: Final = "memory_root"
SUMMARY: Final = "summary_item"
SELFMODEL: Final = "selfmodel"
EVENT: Final = "event"
KINDS: Final = (OBJECT, ROOT, SUMMARY, SELFMODEL)
"""The kinds of item a state operation may name, in their canonical order."""

View = tuple[tuple[str, int | None], ...]
"""``((branch, None), (parent, fork_seq), (grandparent, parent's fork_seq), ...)``."""

RuleInfo = Mapping[bytes, tuple[frozenset[str] | None, bool]]
"""rule digest -> (entry types the projection reads, None = all; is a state projection)."""

SummaryKeys = Callable[[bytes, str], list[str]]
"""``keys(root, projection_id)``: the text keys of that projection's summary in that root."""

ListSource = Callable[[bytes], Sequence[ProjectionDigest] | None]
"""``lists(root)``: the projection list stored for a root (None: none). A hint: ``fold``
uses it only when it hashes to the v3 entry's ``projections`` (docs/FORMAT.md §6.16)."""

Rules = tuple[tuple[str, bytes, bytes, int], ...]
"""A root's projection list as the index keeps it: ``(id, rule, digest, count)`` each."""

_UNLISTED: Final = encoding.encode(None)
"""``fz_roots.rules`` of a v3 root whose projection list is not known here."""

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS fz_heads(branch TEXT PRIMARY KEY, size INTEGER NOT NULL) STRICT;
CREATE TABLE IF NOT EXISTS fz_forks(
    branch TEXT PRIMARY KEY, parent TEXT NOT NULL, fork_seq INTEGER NOT NULL) STRICT;
CREATE TABLE IF NOT EXISTS fz_items(
    kind TEXT NOT NULL, id TEXT NOT NULL, branch TEXT NOT NULL, seq INTEGER NOT NULL,
    namespace TEXT NOT NULL, PRIMARY KEY(kind, id, branch)) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fz_edges(
    dep_kind TEXT NOT NULL, dep_id TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL,
    branch TEXT NOT NULL, seq INTEGER NOT NULL) STRICT;
CREATE INDEX IF NOT EXISTS fz_edges_dep ON fz_edges(dep_kind, dep_id);
CREATE INDEX IF NOT EXISTS fz_edges_item ON fz_edges(kind, id);
CREATE TABLE IF NOT EXISTS fz_touches(
    id TEXT NOT NULL, branch TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,
    PRIMARY KEY(id, branch, seq)) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fz_roots(
    root TEXT PRIMARY KEY, branch TEXT NOT NULL, seq INTEGER NOT NULL,
    hbranch TEXT NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL, parent TEXT,
    stateful INTEGER NOT NULL, replaces TEXT, rules BLOB NOT NULL, preimage BLOB) STRICT;
CREATE INDEX IF NOT EXISTS fz_roots_range ON fz_roots(hbranch, hi);
CREATE TABLE IF NOT EXISTS fz_cascades(
    branch TEXT NOT NULL, seq INTEGER NOT NULL, origin_kind TEXT NOT NULL,
    origin_id TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL, depth INTEGER NOT NULL,
    PRIMARY KEY(branch, seq, kind, id)) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fz_cascades_origin ON fz_cascades(origin_kind, origin_id);
"""

STATE_OPS: Final = frozenset(
    {OpType.FALSIFY.value, OpType.MARK_STALE.value, OpType.RESTORE.value, OpType.CASCADE.value}
)
"""The operations that change item states (as plain strings)."""
# Operations that are not inputs of the objects they name: states, roots, branches.
_NOT_INPUTS: Final = STATE_OPS | frozenset(
    {
        OpType.SNAPSHOT.value,
        OpType.SELFMODEL_SNAPSHOT.value,
        OpType.BRANCH_CREATE.value,
        OpType.BRANCH_CLOSE.value,
        OpType.BRANCH_MERGE.value,
        OpType.BRANCH_POLICY.value,
    }
)
# Payload fields that name memory objects (RFC-0002 payloads, docs/memory.md).
_ID_FIELDS: Final = (
    "new_object_id",
    "object_ids_summarised",
    "primary_id",
    "merged_ids",
    "object_id_a",
    "object_id_b",
    "source_id",
    "target_id",
)
_ASSERT: Final = OpType.ASSERT.value
_SNAPSHOT: Final = OpType.SNAPSHOT.value
_SELFMODEL: Final = OpType.SELFMODEL_SNAPSHOT.value
_SUMMARY_CREATED: Final = OpType.SUMMARY_CREATED.value
_RELATE: Final = OpType.RELATE.value
_TRANSITION: Final = OpType.EPISTEMIC_TRANSITION.value


@dataclass(frozen=True, slots=True)
class ItemRef:
    """One item: its kind (``KINDS``) and id. Items sort by ``(id, kind)`` (``key``)."""

    kind: str
    id: str

    def key(self) -> tuple[str, str]:
        """Return the sort key of the cascade's traversal: id, then kind."""
        return (self.id, self.kind)

    def to_cbor(self) -> dict[str, str]:
        """Return ``{"type": kind, "id": id}``, as the ``CASCADE`` payload lists items."""
        return {"type": self.kind, "id": self.id}


@dataclass(frozen=True, slots=True)
class Located:
    """Where an item was recorded: branch and seq of its entry, and its namespace."""

    branch: str
    seq: int
    namespace: str


@dataclass(frozen=True, slots=True)
class RootRow:
    """A root as the index knows it: where it is, what range it folded, what it lists.

    ``hbranch``/``lo``/``hi``: the entries its projections folded (``hbranch`` is the root's
    own branch; a re-snapshot folds the range of the root it replaces). ``rules`` pairs each
    projection id with its rule digest, digest and count (None: a v3 root whose list is not
    known here, ``listed_rules`` refuses it); ``preimage`` is the canonical CBOR of its
    preimage (None for a re-snapshot replayed without the ledger file).
    """

    root: str
    branch: str
    seq: int
    hbranch: str
    lo: int
    hi: int
    parent: str | None
    stateful: bool
    replaces: str | None
    rules: Rules | None
    preimage: bytes | None


def listed_rules(row: RootRow) -> Rules:
    """Return the projection list of a root the index holds.

    Raises:
        IntegrityError: step 9, for a v3 root whose list is not known (its stored records
            are missing or do not hash to the root's ``projections``): what depends on it
            cannot be told, so nothing is planned on it.
    """
    if row.rules is None:
        raise IntegrityError(
            f"step 9: the projection list of memory root {row.root} is not known here: its "
            "stored summaries are missing or do not hash to the list its SNAPSHOT commits to "
            "(FORMAT §6.16); nothing is planned on it: run `memroot verify`, or "
            "`memroot rebuild` to re-derive the records",
            branch=row.branch,
            seq=row.seq,
            step=9,
        )
    return row.rules


def install(db: apsw.Connection) -> None:
    """Create the index tables if missing (inside a write transaction)."""
    db.execute(_SCHEMA)


def rule_info(registry: Registry) -> dict[bytes, tuple[frozenset[str] | None, bool]]:
    """Return what each projection ``registry`` knows reads, by rule digest."""
    out: dict[bytes, tuple[frozenset[str] | None, bool]] = {}
    for p in registry.known():
        types = getattr(p, "types", None)
        out[rule_digest(p)] = (None if types is None else frozenset(types), is_state_projection(p))
    return out


# -- views ---------------------------------------------------------------------------------------


def view_of(db: apsw.Connection, branch: str) -> View:
    """Return the view of ``branch``: itself, then each ancestor bounded by its fork.

    Raises:
        ValidationError: if the fork records make a cycle (they come from genesis entries).
    """
    levels: list[tuple[str, int | None]] = [(branch, None)]
    seen = {branch}
    current = branch
    while current != CANONICAL_BRANCH:
        row = db.execute(
            "SELECT parent, fork_seq FROM fz_forks WHERE branch = ?", (current,)
        ).fetchone()
        if row is None:
            break
        parent, fork_seq = str(row[0]), int(row[1])
        if parent in seen:
            raise ValidationError(f"branch {branch!r} has a cyclic fork record", field="branch")
        levels.append((parent, fork_seq))
        seen.add(parent)
        current = parent
    return tuple(levels)


def _visible(view: View, branch: str = "branch", seq: str = "seq") -> tuple[str, list[Any]]:
    """Return an SQL condition (and its parameters) for rows the view sees."""
    parts: list[str] = []
    params: list[Any] = []
    for b, bound in view:
        if bound is None:
            parts.append(f"{branch} = ?")
            params.append(b)
        else:
            parts.append(f"({branch} = ? AND {seq} <= ?)")
            params.extend((b, bound))
    return "(" + " OR ".join(parts) + ")", params


def visible_condition(view: View) -> tuple[str, list[Any]]:
    """Return an SQL condition (and its parameters) for the rows the view sees.

    The condition reads columns ``branch`` and ``seq``.
    """
    return _visible(view)


def _sees(view: View, branch: str, seq: int) -> bool:
    for b, bound in view:
        if b == branch:
            return bound is None or seq <= bound
    return False


# -- folding entries into the index --------------------------------------------------------------


def named_objects(entry: Entry) -> list[str]:
    """Return the ids an operation names as objects: target, new id, payload id fields.

    Entity or event ids among them are harmless: lookups are by object id. Empty for
    operations that are not inputs of what they name (states, roots, branches).
    """
    if entry.kind is not Kind.OP or entry.type in _NOT_INPUTS:
        return []
    body = entry.body
    out: list[str] = []
    target = body.get("target_id")
    if type(target) is str:
        out.append(target)
    elif entry.type == _ASSERT and type(body.get("id")) is str:
        out.append(body["id"])
    payload = body.get("payload")
    if type(payload) is dict:
        for name in _ID_FIELDS:
            value = payload.get(name)
            if type(value) is str:
                out.append(value)
            elif type(value) is list:
                out.extend(v for v in value if type(v) is str)
    return out


def _edge(db: apsw.Connection, entry: Entry, item: ItemRef, dep_kind: str, dep_id: str) -> None:
    db.execute(
        "INSERT INTO fz_edges VALUES(?,?,?,?,?,?)",
        (dep_kind, dep_id, item.kind, item.id, entry.branch, entry.seq),
    )


def _strs(value: Any) -> list[str]:
    return [v for v in value if type(v) is str] if type(value) is list else []


def fold(
    db: apsw.Connection, entry: Entry, rules: RuleInfo, lists: ListSource | None = None
) -> str | None:
    """Add what one entry records to the index (inside the caller's transaction).

    Never refuses: malformed payloads are the owning layers' to refuse, and what cannot be
    read is left out. Replacement roots are added by ``add_replacement``. A v3 ``SNAPSHOT``'s
    projection list is taken from ``lists`` when it hashes to the entry's ``projections``;
    otherwise the root is recorded without it and its hex returned (``attach_list`` adds
    it once its records are stored, e.g. later in the same transaction). None otherwise.
    """
    if entry.kind is Kind.EVENT:
        return None
    if entry.kind is Kind.GENESIS:
        anchor = entry.body.get("anchor")
        if entry.branch != CANONICAL_BRANCH and type(anchor) is dict:
            parent, seq = anchor.get("branch"), anchor.get("seq")
            if type(parent) is str and type(seq) is int and seq >= 1:
                db.execute(
                    "INSERT OR REPLACE INTO fz_forks VALUES(?,?,?)", (entry.branch, parent, seq - 1)
                )
        return None
    t = entry.type
    body = entry.body
    payload = body.get("payload")
    p: dict[str, Any] = payload if type(payload) is dict else {}
    if t == _SNAPSHOT:
        return _fold_snapshot(db, entry, p, rules, lists)
    if t == _SELFMODEL:
        _fold_selfmodel(db, entry, p)
        return None
    named = named_objects(entry)
    if named:
        db.executemany(
            "INSERT OR IGNORE INTO fz_touches VALUES(?,?,?,?)",
            [(i, entry.branch, entry.seq, t) for i in dict.fromkeys(named)],
        )
    target = body.get("target_id")
    if t == _ASSERT:
        oid = target if type(target) is str else body.get("id")
        if type(oid) is not str:
            return None
        db.execute(
            "INSERT OR IGNORE INTO fz_items VALUES(?,?,?,?,?)",
            (OBJECT, oid, entry.branch, entry.seq, str(body.get("namespace_id", ""))),
        )
        for ev in dict.fromkeys(_strs(p.get("evidence_ids"))):
            _edge(db, entry, ItemRef(OBJECT, oid), EVENT, ev)
    elif t == _TRANSITION and type(target) is str:
        for ev in dict.fromkeys(_strs(p.get("evidence_ids"))):
            _edge(db, entry, ItemRef(OBJECT, target), EVENT, ev)
    elif t == _SUMMARY_CREATED and type(target) is str:
        for oid in dict.fromkeys(_strs(p.get("object_ids_summarised"))):
            _edge(db, entry, ItemRef(OBJECT, target), OBJECT, oid)
    elif t == _RELATE and p.get("edge_type") == "SUPPORTS":
        src, dst = p.get("source_id"), p.get("target_id")
        if type(src) is str and type(dst) is str:
            _edge(db, entry, ItemRef(OBJECT, dst), OBJECT, src)
    return None


def _vouched(pre: RootPreimage, root: bytes, lists: ListSource | None) -> Rules | None:
    """Return a root's projection list, None when it is not known.

    A v1 or v2 root's own; for a v3 root the one ``lists`` gives, when it hashes to the
    root's ``projections``.
    """
    items: Sequence[ProjectionDigest] = pre.projections
    if not pre.list_known:
        got = None if lists is None else lists(root)
        if got is None or list_digest(got) != pre.listed:
            return None
        items = got
    return tuple((d.id, bytes(d.rule), bytes(d.digest), d.count) for d in items)


def _stateful(items: Rules | None, rules: RuleInfo) -> bool:
    # A root whose list is not known may list a state projection: walks must meet it.
    return items is None or any(rules.get(rule, (None, False))[1] for _, rule, _, _ in items)


def attach_list(db: apsw.Connection, root: str, rules: RuleInfo, lists: ListSource) -> bool:
    """Give a v3 root recorded without its projection list the list ``lists`` now vouches for.

    Returns True when the root has its list now (or had it), False when it is still not
    known (or the index holds no such root).
    """
    row = root_row(db, root)
    if row is None:
        return False
    if row.rules is not None:
        return True
    if row.preimage is None:
        return False
    payload = {**encoding.decode(row.preimage), "memory_root": bytes.fromhex(root)}
    try:
        pre = RootPreimage.from_payload(payload)[0]
    except (ValidationError, ValueError):
        return False
    items = _vouched(pre, bytes.fromhex(root), lists)
    if items is None:
        return False
    db.execute(
        "UPDATE fz_roots SET rules = ?, stateful = ? WHERE root = ?",
        (_encode_rules(items), int(_stateful(items, rules)), root),
    )
    return True


def _encode_rules(items: Rules | None) -> bytes:
    return _UNLISTED if items is None else encoding.encode([list(x) for x in items])


def _fold_snapshot(
    db: apsw.Connection, entry: Entry, p: dict[str, Any], rules: RuleInfo, lists: ListSource | None
) -> str | None:
    try:
        pre, claimed = RootPreimage.from_payload(p)
    except (ValidationError, ValueError):
        return None
    root = claimed.hex()
    parent = None if pre.parent is None else pre.parent.hex()
    lo = 0
    if parent is not None:
        row = db.execute(
            "SELECT hi FROM fz_roots WHERE root = ? AND hbranch = ?", (parent, entry.branch)
        ).fetchone()
        if row is not None:
            lo = int(row[0]) + 1
    items = _vouched(pre, claimed, lists)
    stateful = _stateful(items, rules)
    _insert_root(
        db,
        RootRow(
            root,
            entry.branch,
            entry.seq,
            entry.branch,
            lo,
            pre.high_water.seq,
            parent,
            stateful,
            None,
            items,
            pre.preimage(),
        ),
    )
    db.execute(
        "INSERT OR IGNORE INTO fz_items VALUES(?,?,?,?,?)",
        (ROOT, root, entry.branch, entry.seq, str(entry.body.get("namespace_id", ""))),
    )
    if parent is not None:
        _edge(db, entry, ItemRef(ROOT, root), ROOT, parent)
    return root if items is None else None


def _insert_root(db: apsw.Connection, r: RootRow) -> None:
    db.execute(
        "INSERT OR IGNORE INTO fz_roots VALUES(?,?,?,?,?,?,?,?,?,?,?)",
        (
            r.root,
            r.branch,
            r.seq,
            r.hbranch,
            r.lo,
            r.hi,
            r.parent,
            int(r.stateful),
            r.replaces,
            _encode_rules(r.rules),
            r.preimage,
        ),
    )


def _fold_selfmodel(db: apsw.Connection, entry: Entry, p: dict[str, Any]) -> None:
    sm_root, body = p.get("selfmodel_root"), p.get("body")
    if type(sm_root) is not bytes or len(sm_root) != 32 or type(body) is not dict:
        return
    sm = sm_root.hex()
    db.execute(
        "INSERT OR IGNORE INTO fz_items VALUES(?,?,?,?,?)",
        (SELFMODEL, sm, entry.branch, entry.seq, str(entry.body.get("namespace_id", ""))),
    )
    cited = body.get("memory_root")
    if type(cited) is bytes and len(cited) == 32:
        _edge(db, entry, ItemRef(SELFMODEL, sm), ROOT, cited.hex())


def add_replacement(db: apsw.Connection, entry: Entry, row: RootRow) -> None:
    """Record a root a ``CASCADE`` entry re-snapshotted (``row.replaces`` set)."""
    _insert_root(db, row)
    db.execute(
        "INSERT OR IGNORE INTO fz_items VALUES(?,?,?,?,?)",
        (ROOT, row.root, entry.branch, entry.seq, str(entry.body.get("namespace_id", ""))),
    )
    if row.parent is not None:
        _edge(db, entry, ItemRef(ROOT, row.root), ROOT, row.parent)


def replaced_row(
    entry: Entry,
    old: RootRow,
    root: str,
    parent: str | None,
    rules: Rules | None,
    preimage: bytes | None,
) -> RootRow:
    """Return the row of ``root``, which ``entry`` made to replace ``old`` over the same range."""
    return RootRow(
        root,
        entry.branch,
        entry.seq,
        old.hbranch,
        old.lo,
        old.hi,
        parent,
        old.stateful,
        old.root,
        rules,
        preimage,
    )


def add_listed_replacements(db: apsw.Connection, entry: Entry, listed: Any) -> None:
    """Record a ``CASCADE``'s re-snapshots as its payload lists them (``resnapshots``).

    What an auditor without the entries records, and the checked dependency index
    (``checked_deps``) re-derives: each listed root replacing a known root, with its parent.
    """
    for x in listed if type(listed) is list else []:
        if type(x) is not dict:
            continue
        old = root_row(db, str(x.get("replaces")))
        root, parent = x.get("memory_root"), x.get("parent")
        if old is None or type(root) is not str:
            continue
        parent = parent if type(parent) is str else None
        add_replacement(db, entry, replaced_row(entry, old, root, parent, old.rules, None))


# -- reading -----------------------------------------------------------------------------------


def _row(r: Sequence[Any]) -> RootRow:
    root, branch, seq, hbranch, lo, hi, parent, stateful, replaces, rules, pre = r
    listed = encoding.decode(rules)
    return RootRow(
        str(root),
        str(branch),
        int(seq),
        str(hbranch),
        int(lo),
        int(hi),
        None if parent is None else str(parent),
        bool(stateful),
        None if replaces is None else str(replaces),
        None
        if listed is None
        else tuple((str(a), bytes(b), bytes(c), int(d)) for a, b, c, d in listed),
        None if pre is None else bytes(pre),
    )


def root_row(db: apsw.Connection, root: str) -> RootRow | None:
    """Return the index's record of a root (by hex), or None."""
    r = db.execute("SELECT * FROM fz_roots WHERE root = ?", (root,)).fetchone()
    return None if r is None else _row(r)


def locate(db: apsw.Connection, view: View, kind: str, item_id: str) -> Located | None:
    """Return where the view sees an object, root or SelfModel recorded, or None.

    Summary items are not recorded: ``Graph.exists`` checks them against their root.
    """
    cond, params = _visible(view)
    r = db.execute(
        f"SELECT branch, seq, namespace FROM fz_items WHERE kind = ? AND id = ? AND {cond} "
        "ORDER BY seq LIMIT 1",
        (kind, item_id, *params),
    ).fetchone()
    return None if r is None else Located(str(r[0]), int(r[1]), str(r[2]))


class Graph:
    """The dependency graph one branch's view sees, with caches for one walk."""

    def __init__(
        self,
        db: apsw.Connection,
        view: View,
        rules: RuleInfo,
        summary_keys: SummaryKeys | None,
    ) -> None:
        """Read ``db``'s index through ``view``; ``summary_keys`` lists a summary's keys.

        Without ``summary_keys`` (an auditor's bundle holds no summaries) summary items are
        left out of ``dependents`` and cannot be checked.
        """
        self.db = db
        self.view = view
        self.rules = rules
        self.summary_keys = summary_keys
        self._cond, self._params = _visible(view)
        self._roots: dict[str, tuple[list[int], list[RootRow]]] = {}
        self._keys: dict[tuple[str, str], list[str]] = {}
        self._stateful: bool | None = None
        self._read: dict[tuple[bytes, frozenset[str]], bool] = {}

    # -- roots and summaries -----------------------------------------------------------------

    def roots_of(self, branch: str) -> tuple[list[int], list[RootRow]]:
        """Return the SNAPSHOT roots of ``branch`` the view sees, by high-water (his, rows)."""
        got = self._roots.get(branch)
        if got is None:
            bound = next((b for name, b in self.view if name == branch), -1)
            rows = [
                _row(r)
                for r in self.db.execute(
                    "SELECT * FROM fz_roots WHERE hbranch = ? AND replaces IS NULL "
                    "AND branch = hbranch ORDER BY hi, seq",
                    (branch,),
                )
            ]
            rows = [r for r in rows if bound is None or r.seq <= bound]
            got = ([r.hi for r in rows], rows)
            self._roots[branch] = got
        return got

    def root(self, root: str) -> RootRow | None:
        """Return a root the view sees (SNAPSHOT or re-snapshot), or None."""
        r = root_row(self.db, root)
        if r is None or not _sees(self.view, r.branch, r.seq):
            return None
        return r

    def newest_replacement(self, root: str) -> str | None:
        """Return the newest re-snapshot of ``root`` the view sees (hex), or None.

        Newest: recorded by the latest ``CASCADE``, the view's own branch before its
        ancestors (whose entries it sees only up to the fork).
        """
        names = [b for b, _ in self.view]
        best: tuple[int, int, str] | None = None
        for r, b, seq in self.db.execute(
            "SELECT root, branch, seq FROM fz_roots WHERE replaces = ?", (root,)
        ):
            if not _sees(self.view, str(b), int(seq)):
                continue
            key = (-names.index(str(b)), int(seq), str(r))
            if best is None or key > best:
                best = key
        return None if best is None else best[2]

    def keys(self, root: str, projection: str) -> list[str]:
        """Return the text keys of ``projection``'s summary in ``root`` (sorted)."""
        k = (root, projection)
        got = self._keys.get(k)
        if got is None:
            got = (
                []
                if self.summary_keys is None
                else self.summary_keys(bytes.fromhex(root), projection)
            )
            self._keys[k] = got
        return got

    def _reads(self, rule: bytes, types: frozenset[str]) -> bool:
        got = self._read.get((rule, types))
        if got is None:
            known = self.rules.get(rule)
            # An unknown projection may read anything.
            got = known is None or known[0] is None or bool(known[0] & types)
            self._read[(rule, types)] = got
        return got

    def _items(self, root: RootRow, pids: Iterable[str]) -> list[ItemRef]:
        if self.summary_keys is None:
            return []
        return [
            ItemRef(SUMMARY, f"{root.root}:{pid}:{key}")
            for pid in pids
            for key in self.keys(root.root, pid)
        ]

    # -- the graph ---------------------------------------------------------------------------

    def exists(self, item: ItemRef) -> bool:
        """Return True when the view sees ``item``."""
        if item.kind == SUMMARY:
            root, pid, key = split_summary_id(item.id, self)
            return root is not None and key in self.keys(root.root, pid)
        if item.kind == ROOT:
            return self.root(item.id) is not None
        return locate(self.db, self.view, item.kind, item.id) is not None

    def summary_root(self, item: ItemRef) -> RootRow | None:
        """Return the root a summary item belongs to, if the view sees it (else None)."""
        return split_summary_id(item.id, self)[0] if item.kind == SUMMARY else None

    def dependents(self, item: ItemRef) -> list[ItemRef]:
        """Return what was built on ``item``, sorted by ``(id, kind)``, without duplicates."""
        out: dict[ItemRef, None] = {}
        if item.kind == SUMMARY:
            root = self.summary_root(item)
            if root is not None:
                out[ItemRef(ROOT, root.root)] = None
        elif item.kind in (OBJECT, ROOT):
            for kind, dep in self.db.execute(
                f"SELECT kind, id FROM fz_edges WHERE dep_kind = ? AND dep_id = ? AND {self._cond}",
                (item.kind, item.id, *self._params),
            ):
                out[ItemRef(str(kind), str(dep))] = None
            if item.kind == OBJECT:
                for ref in self._object_roots(item.id):
                    out[ref] = None
        out.pop(item, None)
        return sorted(out, key=ItemRef.key)

    def _object_roots(self, object_id: str) -> list[ItemRef]:
        """Roots (and their summary items) built on an object's input entries."""
        out: list[ItemRef] = []
        by_root: dict[str, tuple[RootRow, set[str]]] = {}
        for branch, seq, t in self.db.execute(
            f"SELECT branch, seq, type FROM fz_touches WHERE id = ? AND {self._cond}",
            (object_id, *self._params),
        ):
            his, rows = self.roots_of(str(branch))
            i = bisect.bisect_left(his, int(seq))
            if i < len(rows) and rows[i].lo <= int(seq):
                r = rows[i]
                by_root.setdefault(r.root, (r, set()))[1].add(str(t))
        for r, types in by_root.values():
            read = frozenset(types)
            pids = [pid for pid, rule, _, _ in listed_rules(r) if self._reads(rule, read)]
            if pids:
                out.append(ItemRef(ROOT, r.root))
                out.extend(self._items(r, pids))
        if self._stateful is None:
            self._stateful = bool(
                self.db.execute("SELECT 1 FROM fz_roots WHERE stateful = 1 LIMIT 1").fetchall()
            )
        made = locate(self.db, self.view, OBJECT, object_id) if self._stateful else None
        if made is None:
            return out
        seen = {r.root for r, _ in by_root.values()}
        names = [b for b, _ in self.view]
        home = names.index(made.branch) if made.branch in names else -1
        for level, name in enumerate(names[: home + 1]):
            his, rows = self.roots_of(name)
            start = bisect.bisect_left(his, made.seq) if level == home else 0
            for r in rows[start:]:
                if not r.stateful or r.root in seen:
                    continue
                seen.add(r.root)
                pids = [
                    pid
                    for pid, rule, _, _ in listed_rules(r)
                    if self.rules.get(rule, (None, False))[1]
                ]
                out.append(ItemRef(ROOT, r.root))
                out.extend(self._items(r, pids))
        return out

    def inputs_of(self, objects: Iterable[str], branch: str) -> tuple[int | None, set[str]]:
        """Return the first seq and the types of the entries of ``branch`` naming ``objects``.

        ``(None, set())`` when no entry of the branch names any of them.
        """
        ids = sorted(objects)
        first: int | None = None
        types: set[str] = set()
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for lo, t in self.db.execute(
                f"SELECT min(seq), type FROM fz_touches WHERE branch = ? AND id IN ({marks}) "
                "GROUP BY type",
                (branch, *chunk),
            ):
                types.add(str(t))
                first = int(lo) if first is None else min(first, int(lo))
        return first, types

    def dependencies(self, item: ItemRef) -> list[ItemRef]:
        """Return what ``item`` cites (events, objects, its parent root, its root), sorted."""
        out: dict[ItemRef, None] = {}
        if item.kind == SUMMARY:
            root = self.summary_root(item)
            if root is not None:
                out[ItemRef(ROOT, root.root)] = None
        else:
            for kind, dep in self.db.execute(
                f"SELECT dep_kind, dep_id FROM fz_edges WHERE kind = ? AND id = ? AND {self._cond}",
                (item.kind, item.id, *self._params),
            ):
                out[ItemRef(str(kind), str(dep))] = None
        return sorted(out, key=ItemRef.key)


def split_summary_id(text: str, graph: Graph) -> tuple[RootRow | None, str, str]:
    """Split ``ROOT:projection:key`` against the root's projection ids.

    Projection ids may contain ``:``, so the longest id of the root that the text continues
    with ``:`` is taken. Returns ``(None, "", "")`` when the root is not seen or no id fits.
    """
    head, sep, rest = text.partition(":")
    root = graph.root(head) if sep else None
    if root is None:
        return None, "", ""
    for pid in sorted({pid for pid, _, _, _ in listed_rules(root)}, key=len, reverse=True):
        if rest.startswith(pid + ":"):
            return root, pid, rest[len(pid) + 1 :]
    return None, "", ""
