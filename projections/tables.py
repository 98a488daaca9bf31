"""The derived-state tables of the memory model, in the ledger's SQLite file.

Everything here is a cache of the ledger (RFC-0002: dropping and replaying gives the identical
state; ``memroot.projections.replay.rebuild``). Rows are versioned for as-of reads: a mutation by
entry ``S`` closes the current row (``vto = S``) and opens a new one (``vfrom = S``), so the
state as of entry ``S`` is the rows with ``vfrom <= S`` and ``vto IS NULL OR vto > S``, an
indexed query instead of a replay. Every row records its ``branch``.

- ``mem_heads(branch, size)``: how many entries of each branch the state has folded in.
- ``mem_events(id, branch, seq, ts, namespace_id, actor_id, erased_by)``: events (evidence).
- ``mem_objects``: memory object versions (current ones indexed by namespace, and the few
  not ACTIVE by lifecycle state; dense filters scan newest rows first, which finds a page of
  results quickly, so no more indexes are paid for on every write). Within a branch, rows are
  created in entry order, so ``rid`` grows with ``vfrom``: an as-of read bounds its scan by
  the last row created by then (index ``(branch, vfrom)``). ``oid`` numbers the object (the
  ``rid`` of its first version) and keys ``mem_fts``, the FTS5 index of values (one row per
  object: an object's value never changes; contentless and ``detail=none``, the cheapest
  FTS5 index that answers word and prefix queries). The index is filled lazily and in bulk
  by ``index_text`` (``sync`` and text queries call it; ``mem_meta.fts_rid`` is how far it
  got), which keeps tokenising out of the append path.
- ``mem_entities``, ``mem_edges``, ``mem_namespaces``, ``mem_grants``: versioned likewise.
- ``mem_skipped(branch, seq, op_type, reason)``: entries appended without the memory model's
  hook that its rules refuse; replay skips them the same way, so they stay visible.
- ``mem_forks(branch, parent, fork_seq, branch_type)``: where each branch forked, from its
  genesis entry; a branch reads its own rows over the parent's as of ``fork_seq``
  (``memroot.projections.views``). Rows a branch writes carry that branch, so nothing written in a
  branch changes what its parent reads.
- ``mem_gated`` and ``mem_conv``: the bookkeeping of invalidation gated by provenance
  (``memroot.projections.gated``): per object, the lifecycle operations that changed it since
  its first one with provenance, each with its provenance event set; and every event's
  conversation parent as the ledger recorded it (``branch``, ``seq``), for as-of path walks.
  Append-only; not part of ``state_digest`` (``gated.gated_digest`` covers them).
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Final

import apsw

from memroot.projections.model import Edge, Entity, EventRef, Grant, MemoryObject, Namespace

__all__ = [
    "DERIVED_TABLES",
    "EDGE_COLS",
    "ENTITY_COLS",
    "EVENT_COLS",
    "GRANT_COLS",
    "NAMESPACE_COLS",
    "OBJECT_COLS",
    "SCHEMA_VERSION",
    "create_indexes",
    "drop",
    "edge_from_row",
    "edge_row",
    "entity_from_row",
    "entity_row",
    "event_from_row",
    "grant_from_row",
    "index_text",
    "install",
    "installed",
    "namespace_from_row",
    "object_from_row",
    "object_row",
    "text_index_current",
    "text_index_edited",
]

SCHEMA_VERSION: Final = 1

DERIVED_TABLES: Final = (
    "mem_meta",
    "mem_heads",
    "mem_events",
    "mem_objects",
    "mem_fts",
    "mem_entities",
    "mem_edges",
    "mem_namespaces",
    "mem_grants",
    "mem_skipped",
    "mem_forks",
    "mem_gated",
    "mem_conv",
)

OBJECT_COLS: Final = (
    "id",
    "type",
    "version",
    "epistemic_type",
    "source_type",
    "evidence_ids",
    "asserted_by",
    "valid_from",
    "valid_to",
    "created_at",
    "last_modified_at",
    "lifecycle_state",
    "superseded_by",
    "confidence",
    "salience",
    "namespace_id",
    "value",
    "structured_value",
    "condition",
    "condition_state",
    "state",
    "branch",
    "vfrom",
)
EDGE_COLS: Final = (
    "id",
    "type",
    "source_id",
    "target_id",
    "created_at",
    "created_by",
    "confidence",
    "valid_from",
    "valid_to",
    "relation_label",
    "branch",
    "vfrom",
)
ENTITY_COLS: Final = (
    "id",
    "type",
    "canonical_name",
    "aliases",
    "namespace_id",
    "created_at",
    "last_seen_at",
    "merged_into",
    "branch",
    "vfrom",
)
EVENT_COLS: Final = ("id", "branch", "seq", "ts", "namespace_id", "actor_id", "erased_by")
NAMESPACE_COLS: Final = ("id", "type", "created_by", "created_at", "branch", "vfrom")
GRANT_COLS: Final = ("namespace_id", "actor_id", "permission", "granted_by", "branch", "vfrom")

_VERSIONED: Final = "vfrom INTEGER NOT NULL, vto INTEGER"

_FTS_SPEC: Final = "fts5(value, content='', detail=none)"
"""The full-text index's table: contentless, keyed by an object's first version."""

_TABLES: Final = f"""
CREATE TABLE IF NOT EXISTS mem_meta(key TEXT PRIMARY KEY, value ANY) STRICT;
CREATE TABLE IF NOT EXISTS mem_heads(branch TEXT PRIMARY KEY, size INTEGER NOT NULL)
    STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mem_events(
    id TEXT PRIMARY KEY, branch TEXT NOT NULL, seq INTEGER NOT NULL, ts INTEGER NOT NULL,
    namespace_id TEXT NOT NULL, actor_id TEXT NOT NULL, erased_by INTEGER
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mem_objects(
    rid INTEGER PRIMARY KEY, oid INTEGER NOT NULL, branch TEXT NOT NULL, id TEXT NOT NULL,
    {_VERSIONED},
    type TEXT NOT NULL, version INTEGER NOT NULL, epistemic_type TEXT NOT NULL,
    source_type TEXT NOT NULL, evidence_ids TEXT NOT NULL, asserted_by TEXT NOT NULL,
    valid_from INTEGER NOT NULL, valid_to INTEGER, created_at INTEGER NOT NULL,
    last_modified_at INTEGER NOT NULL, lifecycle_state TEXT NOT NULL, superseded_by TEXT,
    confidence REAL NOT NULL, salience REAL NOT NULL, namespace_id TEXT NOT NULL,
    value TEXT NOT NULL, structured_value TEXT, condition TEXT, condition_state TEXT,
    state TEXT NOT NULL
) STRICT;
CREATE VIRTUAL TABLE IF NOT EXISTS mem_fts USING {_FTS_SPEC};
CREATE TABLE IF NOT EXISTS mem_entities(
    rid INTEGER PRIMARY KEY, branch TEXT NOT NULL, id TEXT NOT NULL, {_VERSIONED},
    type TEXT NOT NULL, canonical_name TEXT NOT NULL, aliases TEXT NOT NULL,
    namespace_id TEXT NOT NULL, created_at INTEGER NOT NULL, last_seen_at INTEGER NOT NULL,
    merged_into TEXT
) STRICT;
CREATE TABLE IF NOT EXISTS mem_edges(
    rid INTEGER PRIMARY KEY, branch TEXT NOT NULL, id TEXT NOT NULL, {_VERSIONED},
    type TEXT NOT NULL, source_id TEXT NOT NULL, target_id TEXT NOT NULL,
    created_at INTEGER NOT NULL, created_by TEXT NOT NULL, confidence REAL NOT NULL,
    valid_from INTEGER NOT NULL, valid_to INTEGER, relation_label TEXT
) STRICT;
CREATE TABLE IF NOT EXISTS mem_namespaces(
    rid INTEGER PRIMARY KEY, branch TEXT NOT NULL, id TEXT NOT NULL, {_VERSIONED},
    type TEXT NOT NULL, created_by TEXT NOT NULL, created_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS mem_grants(
    rid INTEGER PRIMARY KEY, branch TEXT NOT NULL, namespace_id TEXT NOT NULL,
    actor_id TEXT NOT NULL, permission TEXT NOT NULL, {_VERSIONED}, granted_by TEXT NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS mem_skipped(
    branch TEXT NOT NULL, seq INTEGER NOT NULL, op_type TEXT NOT NULL, reason TEXT NOT NULL,
    PRIMARY KEY(branch, seq)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mem_forks(
    branch TEXT PRIMARY KEY, parent TEXT NOT NULL, fork_seq INTEGER NOT NULL, branch_type TEXT
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mem_gated(
    branch TEXT NOT NULL, seq INTEGER NOT NULL, n INTEGER NOT NULL, object_id TEXT NOT NULL,
    op_id TEXT NOT NULL, op_type TEXT NOT NULL, ts INTEGER NOT NULL, prov TEXT NOT NULL,
    intent TEXT NOT NULL, applied INTEGER NOT NULL, base TEXT,
    PRIMARY KEY(object_id, branch, seq, n)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mem_conv(
    id TEXT PRIMARY KEY, parent TEXT, branch TEXT NOT NULL, seq INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mem_conv_parent ON mem_conv(parent) WHERE parent IS NOT NULL;
"""

_INDEXES: Final = """
CREATE UNIQUE INDEX IF NOT EXISTS mem_objects_id ON mem_objects(id, branch, vfrom);
CREATE INDEX IF NOT EXISTS mem_objects_seq ON mem_objects(branch, vfrom);
CREATE INDEX IF NOT EXISTS mem_objects_ns ON mem_objects(namespace_id, rid) WHERE vto IS NULL;
CREATE INDEX IF NOT EXISTS mem_objects_inactive ON mem_objects(lifecycle_state)
    WHERE vto IS NULL AND lifecycle_state != 'ACTIVE';
CREATE UNIQUE INDEX IF NOT EXISTS mem_entities_id ON mem_entities(id, branch, vfrom);
CREATE INDEX IF NOT EXISTS mem_gated_dedup ON mem_gated(op_id, branch, seq)
    WHERE op_type = 'DEDUP_RESOLVED';
CREATE INDEX IF NOT EXISTS mem_objects_imported ON mem_objects(branch, vfrom)
    WHERE source_type = 'IMPORTED';
CREATE INDEX IF NOT EXISTS mem_entities_merged ON mem_entities(merged_into)
    WHERE merged_into IS NOT NULL;
CREATE INDEX IF NOT EXISTS mem_edges_source ON mem_edges(source_id, type);
CREATE INDEX IF NOT EXISTS mem_edges_target ON mem_edges(target_id, type);
CREATE UNIQUE INDEX IF NOT EXISTS mem_namespaces_id ON mem_namespaces(id, branch, vfrom);
CREATE INDEX IF NOT EXISTS mem_grants_ns ON mem_grants(namespace_id, actor_id, branch);
"""


def installed(db: apsw.Connection) -> bool:
    """Return True when the memory tables exist in ``db``."""
    row = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'mem_heads'"
    ).fetchone()
    return row is not None


def install(db: apsw.Connection, *, fts: bool = True, indexes: bool = True) -> None:
    """Create the memory tables if missing (inside the caller's write transaction).

    ``fts=False`` leaves out the full-text index and ``indexes=False`` the secondary indexes
    (a bulk replay adds them afterwards with ``create_indexes``, which is much faster than
    maintaining them row by row; a throwaway replay that only compares digests needs none).

    Raises:
        apsw.Error: if SQLite cannot create them (the caller maps it to StorageError).
    """
    schema = (
        _TABLES
        if fts
        else "\n".join(line for line in _TABLES.splitlines() if "mem_fts" not in line)
    )
    db.execute(schema)
    if indexes:
        create_indexes(db)
    db.execute("INSERT OR IGNORE INTO mem_meta VALUES('schema_version', ?)", (SCHEMA_VERSION,))


def create_indexes(db: apsw.Connection) -> None:
    """Create the secondary indexes of the memory tables if missing.

    Raises:
        apsw.Error: if SQLite cannot (e.g. a UNIQUE index over duplicate rows).
    """
    db.execute(_INDEXES)


def index_text(db: apsw.Connection) -> int:
    """Add the values of objects created since the last call to the full-text index.

    Needs a write (the caller's transaction, or an autocommit). Returns how many values were
    indexed; 0 when the index is current or this database has none.

    Raises:
        apsw.Error: if the database cannot be written (the caller maps it to StorageError).
    """
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'mem_fts'").fetchone() is None:
        return 0
    row = db.execute("SELECT value FROM mem_meta WHERE key = 'fts_rid'").fetchone()
    mark = 0 if row is None else int(row[0])
    top_row = db.execute("SELECT max(rid) FROM mem_objects").fetchone()
    top = 0 if top_row is None or top_row[0] is None else int(top_row[0])
    if top <= mark:
        return 0
    db.execute(
        "INSERT INTO mem_fts(rowid, value) SELECT rid, value FROM mem_objects "
        "WHERE rid > ? AND rid = oid",
        (mark,),
    )
    n = db.changes()
    db.execute("INSERT OR REPLACE INTO mem_meta VALUES('fts_rid', ?)", (top,))
    return int(n)


def text_index_edited(db: apsw.Connection) -> str | None:
    """Return what is wrong with ``db``'s full-text index, or None when it holds what it must.

    ``mem_fts`` must index the words of every object's first version up to the index's mark
    (``mem_meta.fts_rid``: ``rid = oid AND rid <= mark``, what ``index_text`` wrote). The
    index those values give is built in a private database; then, for each of its words,
    the objects ``db``'s index answers must be exactly those, and ``db``'s index must hold as
    many objects. So an object left out of the words of its value (a text query would hide
    it), or one answered for a word its value has, is found. A word no value has, added to
    an object's entry, is not (it makes an honest object answer a query it does not match;
    the read gate checks that object's row). Reads only; ``db`` may be read-only.
    """
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'mem_fts'").fetchone() is None:
        return None
    row = db.execute("SELECT value FROM mem_meta WHERE key = 'fts_rid'").fetchone()
    mark = 0 if row is None or not isinstance(row[0], int) else row[0]
    edited = (
        "the full-text index (mem_fts) is not the index of the values it covers (edited: a "
        "text query would drop or add objects); memroot rebuild writes it anew"
    )
    want = apsw.Connection("")  # a private temporary file: a large index spills to disk
    try:
        want.execute(f"CREATE VIRTUAL TABLE mem_fts USING {_FTS_SPEC}")
        want.execute("BEGIN")
        want.executemany(
            "INSERT INTO mem_fts(rowid, value) VALUES (?, ?)",
            db.execute(
                "SELECT rid, value FROM mem_objects WHERE rid = oid AND rid <= ? ORDER BY rid",
                (mark,),
            ),
        )
        want.execute("COMMIT")
        counts = [c.execute("SELECT count(*) FROM mem_fts").fetchone() for c in (want, db)]
        if counts[0] != counts[1]:
            return edited
        want.execute("CREATE VIRTUAL TABLE pairs USING fts5vocab(mem_fts, instance)")
        rows = want.execute("SELECT term, doc FROM pairs ORDER BY term, doc")
        for term, docs in itertools.groupby(rows, key=lambda r: r[0]):
            quoted = '"' + str(term).replace('"', '""') + '"'
            got = db.execute(
                "SELECT rowid FROM mem_fts WHERE mem_fts MATCH ? ORDER BY rowid", (quoted,)
            ).fetchall()
            if [r[0] for r in got] != [d for _, d in docs]:
                return edited
    finally:
        want.close()
    return None


def text_index_current(db: apsw.Connection) -> bool:
    """Return True when every object's value is in the full-text index."""
    row = db.execute(
        "SELECT (SELECT max(rid) FROM mem_objects), "
        "(SELECT value FROM mem_meta WHERE key = 'fts_rid')"
    ).fetchone()
    top, mark = (None, None) if row is None else row
    return top is None or (mark is not None and int(mark) >= int(top))


def drop(db: apsw.Connection) -> None:
    """Drop every memory table (inside the caller's write transaction)."""
    for name in DERIVED_TABLES:
        db.execute(f"DROP TABLE IF EXISTS {name}")


# -- rows <-> values ---------------------------------------------------------------------------


def _json(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def object_row(o: MemoryObject) -> tuple[Any, ...]:
    """Return an object's column values in ``OBJECT_COLS`` order."""
    return (
        o.id,
        o.type,
        o.version,
        o.epistemic_type,
        o.source_type,
        ",".join(o.evidence_ids),
        o.asserted_by,
        o.valid_from,
        o.valid_to,
        o.created_at,
        o.last_modified_at,
        o.lifecycle_state,
        o.superseded_by,
        o.confidence,
        o.salience,
        o.namespace_id,
        o.value,
        _json(o.structured_value),
        o.condition,
        o.condition_state,
        o.state,
        o.branch,
        o.seq,
    )


def object_from_row(r: tuple[Any, ...]) -> MemoryObject:
    """Return the object of a row selected in ``OBJECT_COLS`` order."""
    return MemoryObject(
        r[0],
        r[1],
        r[2],
        r[3],
        r[4],
        tuple(r[5].split(",")),
        r[6],
        r[7],
        r[8],
        r[9],
        r[10],
        r[11],
        r[12],
        r[13],
        r[14],
        r[15],
        r[16],
        None if r[17] is None else json.loads(r[17]),
        r[18],
        r[19],
        r[20],
        r[21],
        r[22],
    )


def edge_row(e: Edge) -> tuple[Any, ...]:
    """Return an edge's column values in ``EDGE_COLS`` order."""
    return (
        e.id,
        e.type,
        e.source_id,
        e.target_id,
        e.created_at,
        e.created_by,
        e.confidence,
        e.valid_from,
        e.valid_to,
        e.relation_label,
        e.branch,
        e.seq,
    )


def edge_from_row(r: tuple[Any, ...]) -> Edge:
    """Return the edge of a row selected in ``EDGE_COLS`` order."""
    return Edge(*r)


def entity_row(e: Entity) -> tuple[Any, ...]:
    """Return an entity's column values in ``ENTITY_COLS`` order."""
    return (
        e.id,
        e.type,
        e.canonical_name,
        _json(list(e.aliases)),
        e.namespace_id,
        e.created_at,
        e.last_seen_at,
        e.merged_into,
        e.branch,
        e.seq,
    )


def entity_from_row(r: tuple[Any, ...]) -> Entity:
    """Return the entity of a row selected in ``ENTITY_COLS`` order."""
    return Entity(r[0], r[1], r[2], tuple(json.loads(r[3])), r[4], r[5], r[6], r[7], r[8], r[9])


def event_from_row(r: tuple[Any, ...]) -> EventRef:
    """Return the event of a row selected in ``EVENT_COLS`` order."""
    return EventRef(*r)


def namespace_from_row(r: tuple[Any, ...]) -> Namespace:
    """Return the namespace of a row selected in ``NAMESPACE_COLS`` order."""
    return Namespace(*r)


def grant_from_row(r: tuple[Any, ...]) -> Grant:
    """Return the grant of a row selected in ``GRANT_COLS`` order."""
    return Grant(*r)
