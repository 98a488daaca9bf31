"""Stored memory_root records: SQLite tables in the ledger file, derived by replay.

Nothing here is authoritative: every row is rebuilt from the ``SNAPSHOT`` and
``SELFMODEL_SNAPSHOT`` entries (``Roots.rebuild``), and verify step 8 compares the rows with
the replay. Tables:

- ``memory_roots(root, branch, seq, parent, hw_seq, hw_hash, tree_size, tree_root, v, state,
  map)``: one row per root; ``seq`` is the ``SNAPSHOT`` entry, ``hw_*`` / ``tree_*`` its
  high-water mark, ``state`` is ``live | stale | falsified`` (set by the falsification
  layer), ``map`` the memory map's root a v2 root commits to (NULL for v1; its nodes are in
  ``memory_map_nodes``, ``memroot.memory_root.map_nodes``). A file written before v2 gets
  the column when it is next opened for writing; reads of a file without it see v1 roots.
- ``memory_root_summaries(root, projection, rule, rule_cbor, digest, count, data, fold_state)``:
  per root and projection: the rule digest and its preimage ``cbor({id, version, params})``,
  the summary digest, item count and canonical bytes, and the projection's fold state at the
  high-water (canonical CBOR), from which the next snapshot continues. Only the newest root
  of each branch keeps its fold states (older ones are set to NULL when a newer root lands),
  so the file grows with the summaries, not with every state ever folded.
- ``memory_root_resnapshots(root, branch, seq, replaces, parent, hbranch, hw_*, tree_*, v,
  state)``: one row per root a ``CASCADE`` re-snapshotted (``seq`` is the ``CASCADE`` entry,
  ``branch`` its branch, ``hbranch`` the branch of the root it replaces); its summaries are
  in ``memory_root_summaries`` like a SNAPSHOT root's (without fold states). Written and
  rebuilt by the falsification layer, which recomputes every cascade (verify step 9).
- ``selfmodel_snapshots(branch, seq, selfmodel_root, memory_root, body)``: one row per
  ``SELFMODEL_SNAPSHOT`` entry, ``body`` its canonical CBOR.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final

import apsw

from memroot.ledger.errors import NotFoundError, ValidationError
from memroot.ledger.hashing import EntryHash, TreeRoot
from memroot.memory_root.root import HighWater, MemoryRoot, ProjectionDigest, RootPreimage
from memroot.projections.projection import RuleDigest, SummaryDigest

__all__ = [
    "ROOT_STATES",
    "RootRecord",
    "SelfModelRecord",
    "StoredSummary",
    "clear_resnapshots",
    "find_any",
    "find_root",
    "get_resnapshot",
    "get_root",
    "insert_resnapshot",
    "insert_root",
    "insert_selfmodel",
    "install",
    "latest_root",
    "latest_selfmodel",
    "latest_v2_before",
    "resnapshots_of",
    "root_before",
    "set_resnapshot_state",
    "set_root_state",
    "summaries",
]

ROOT_STATES: Final = ("live", "stale", "falsified")

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS memory_roots(
    root BLOB PRIMARY KEY,
    branch TEXT NOT NULL,
    seq INTEGER NOT NULL,
    parent BLOB,
    hw_seq INTEGER NOT NULL,
    hw_hash BLOB NOT NULL,
    tree_size INTEGER NOT NULL,
    tree_root BLOB NOT NULL,
    v INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'live' CHECK(state IN ('live', 'stale', 'falsified'))
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS memory_roots_by_seq ON memory_roots(branch, seq);
CREATE TABLE IF NOT EXISTS memory_root_summaries(
    root BLOB NOT NULL,
    projection TEXT NOT NULL,
    rule BLOB NOT NULL,
    rule_cbor BLOB NOT NULL,
    digest BLOB NOT NULL,
    count INTEGER NOT NULL,
    data BLOB NOT NULL,
    fold_state BLOB,
    PRIMARY KEY(root, projection)
) STRICT;
CREATE TABLE IF NOT EXISTS memory_root_resnapshots(
    root BLOB PRIMARY KEY,
    branch TEXT NOT NULL,
    seq INTEGER NOT NULL,
    replaces BLOB NOT NULL,
    parent BLOB,
    hbranch TEXT NOT NULL,
    hw_seq INTEGER NOT NULL,
    hw_hash BLOB NOT NULL,
    tree_size INTEGER NOT NULL,
    tree_root BLOB NOT NULL,
    v INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'live' CHECK(state IN ('live', 'stale', 'falsified'))
) STRICT;
CREATE INDEX IF NOT EXISTS memory_root_resnapshots_by_seq ON memory_root_resnapshots(branch, seq);
CREATE TABLE IF NOT EXISTS selfmodel_snapshots(
    branch TEXT NOT NULL,
    seq INTEGER NOT NULL,
    selfmodel_root BLOB NOT NULL,
    memory_root BLOB,
    body BLOB NOT NULL,
    PRIMARY KEY(branch, seq)
) STRICT;
"""

_BASE_COLS: Final = "root, branch, seq, parent, hw_seq, hw_hash, tree_size, tree_root, v, state"
_ROOT_COLS: Final = _BASE_COLS + ", map"


def _has_map(db: apsw.Connection, table: str = "memory_roots") -> bool:
    """Return True when ``table`` has the v2 ``map`` column (a file written since v2)."""
    return any(r[1] == "map" for r in db.execute(f"PRAGMA table_info({table})"))


def _cols(db: apsw.Connection) -> str:
    return _ROOT_COLS if _has_map(db) else _BASE_COLS + ", NULL"


@dataclass(frozen=True, slots=True)
class StoredSummary:
    """One projection's stored output at one root."""

    projection: str
    rule: RuleDigest
    rule_cbor: bytes
    digest: SummaryDigest
    count: int
    data: bytes
    fold_state: bytes | None


@dataclass(frozen=True, slots=True)
class RootRecord:
    """A stored memory_root: where its SNAPSHOT entry is, what it commits to, its state."""

    root: MemoryRoot
    branch: str
    seq: int
    parent: MemoryRoot | None
    high_water: HighWater
    v: int
    state: str
    projections: tuple[ProjectionDigest, ...]
    replaces: MemoryRoot | None = None
    """For a re-snapshot, the root it replaces (``seq`` is then its ``CASCADE`` entry, on
    ``cascade_branch``); None for a SNAPSHOT root."""
    cascade_branch: str | None = None
    map_root: bytes | None = None
    """The memory map's root a v2 root commits to (None for v1)."""

    def preimage(self) -> RootPreimage:
        """Return the preimage this record describes (its ``root()`` should equal ``root``)."""
        return RootPreimage(
            self.branch, self.parent, self.high_water, self.projections, self.v, self.map_root
        )

    def to_dict(self, *, counts: bool = True) -> dict[str, Any]:
        """Return the record as JSON-ready values (``memroot root show --json``, MCP).

        ``counts=False`` leaves out each projection's item count, which folds every
        namespace (a namespace-confined reader gets the digests only).
        """
        hw = self.high_water
        return {
            "memory_root": self.root.hex(),
            "branch": self.branch,
            "seq": self.seq,
            "parent": None if self.parent is None else self.parent.hex(),
            "state": self.state,
            "replaces": None if self.replaces is None else self.replaces.hex(),
            "entry": "SNAPSHOT" if self.replaces is None else "CASCADE",
            "entry_branch": self.branch if self.cascade_branch is None else self.cascade_branch,
            "v": self.v,
            "map": None if self.map_root is None else self.map_root.hex(),
            "high_water": {
                "seq": hw.seq,
                "entry_hash": hw.entry_hash.hex(),
                "tree_size": hw.tree_size,
                "tree_root": hw.tree_root.hex(),
            },
            "projections": [
                {"id": p.id, "rule": p.rule.hex(), "digest": p.digest.hex()}
                | ({"count": p.count} if counts else {})
                for p in self.projections
            ],
        }


@dataclass(frozen=True, slots=True)
class SelfModelRecord:
    """A stored ``SELFMODEL_SNAPSHOT``: its body (canonical CBOR) and roots."""

    branch: str
    seq: int
    selfmodel_root: bytes
    memory_root: MemoryRoot | None
    body: bytes


def install(db: apsw.Connection) -> None:
    """Create the tables if missing, and v2's ``map`` columns (inside a write transaction)."""
    db.execute(_SCHEMA)
    for table in ("memory_roots", "memory_root_resnapshots"):
        if not _has_map(db, table):
            db.execute(f"ALTER TABLE {table} ADD COLUMN map BLOB")


def insert_root(
    db: apsw.Connection,
    seq: int,
    preimage: RootPreimage,
    stored: list[StoredSummary],
    *,
    supersedes: bytes | None = None,
) -> MemoryRoot:
    """Store a new root (state ``live``) and its summaries; return the root.

    ``supersedes`` is the branch's previous newest root, whose fold states are dropped.

    Raises:
        ValidationError: if the root is already stored (a replayed SNAPSHOT).
    """
    root = preimage.root()
    hw = preimage.high_water
    try:
        db.execute(
            f"INSERT INTO memory_roots({_ROOT_COLS}) VALUES(?,?,?,?,?,?,?,?,?,'live',?)",
            (
                root,
                preimage.branch,
                seq,
                preimage.parent,
                hw.seq,
                hw.entry_hash,
                hw.tree_size,
                hw.tree_root,
                preimage.v,
                preimage.map_root,
            ),
        )
    except apsw.ConstraintError as e:
        raise ValidationError(
            f"memory_root {root.hex()} is already recorded", field="payload.memory_root"
        ) from e
    if supersedes is not None:
        db.execute(
            "UPDATE memory_root_summaries SET fold_state = NULL WHERE root = ?", (supersedes,)
        )
    db.executemany(
        "INSERT INTO memory_root_summaries VALUES(?,?,?,?,?,?,?,?)",
        [
            (root, s.projection, s.rule, s.rule_cbor, s.digest, s.count, s.data, s.fold_state)
            for s in stored
        ],
    )
    return root


_RESNAP_COLS: Final = (
    "root, branch, seq, parent, hw_seq, hw_hash, tree_size, tree_root, v, state, replaces, "
    "hbranch, map"
)


def _resnap_cols(db: apsw.Connection) -> str:
    if _has_map(db, "memory_root_resnapshots"):
        return _RESNAP_COLS
    return _RESNAP_COLS.removesuffix("map") + "NULL"


def insert_resnapshot(
    db: apsw.Connection,
    seq: int,
    branch: str,
    preimage: RootPreimage,
    replaces: bytes,
    stored: list[StoredSummary],
) -> MemoryRoot:
    """Store a root a ``CASCADE`` entry (``branch``, ``seq``) re-snapshotted; return it.

    Idempotent: a root stored already (the same re-snapshot listed again) is kept as it was.
    """
    install(db)
    root = preimage.root()
    hw = preimage.high_water
    db.execute(
        f"INSERT OR IGNORE INTO memory_root_resnapshots({_RESNAP_COLS}) "
        "VALUES(?,?,?,?,?,?,?,?,?,'live',?,?,?)",
        (
            root,
            branch,
            seq,
            preimage.parent,
            hw.seq,
            hw.entry_hash,
            hw.tree_size,
            hw.tree_root,
            preimage.v,
            replaces,
            preimage.branch,
            preimage.map_root,
        ),
    )
    if db.changes():
        db.executemany(
            "INSERT OR IGNORE INTO memory_root_summaries VALUES(?,?,?,?,?,?,?,NULL)",
            [(root, s.projection, s.rule, s.rule_cbor, s.digest, s.count, s.data) for s in stored],
        )
    return root


def get_resnapshot(db: apsw.Connection, root: bytes) -> RootRecord | None:
    """Return a stored re-snapshot by its root, or None."""
    if not _has_resnapshots(db):
        return None
    row = db.execute(
        f"SELECT {_resnap_cols(db)} FROM memory_root_resnapshots WHERE root = ?", (root,)
    ).fetchone()
    return None if row is None else _resnapshot(db, row)


def resnapshots_of(db: apsw.Connection, branch: str) -> list[RootRecord]:
    """Return the re-snapshots recorded on ``branch`` (by its CASCADE entries), oldest first."""
    if not _has_resnapshots(db):
        return []
    return [
        _resnapshot(db, row)
        for row in db.execute(
            f"SELECT {_resnap_cols(db)} FROM memory_root_resnapshots WHERE branch = ? "
            "ORDER BY seq, rowid",
            (branch,),
        ).fetchall()
    ]


def set_resnapshot_state(db: apsw.Connection, root: bytes, state: str) -> None:
    """Set a re-snapshot's state (the falsification layer, in its append transaction)."""
    if state not in ROOT_STATES:
        raise ValueError(f"root state must be one of {ROOT_STATES}, got {state!r}")
    if _has_resnapshots(db):
        db.execute("UPDATE memory_root_resnapshots SET state = ? WHERE root = ?", (state, root))


def clear_resnapshots(db: apsw.Connection) -> None:
    """Drop every stored re-snapshot and its summaries (before replaying the cascades)."""
    if _has_resnapshots(db):
        db.execute(
            "DELETE FROM memory_root_summaries WHERE root IN "
            "(SELECT root FROM memory_root_resnapshots); DELETE FROM memory_root_resnapshots"
        )


def _has_resnapshots(db: apsw.Connection) -> bool:
    return bool(
        db.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_root_resnapshots'").fetchall()
    )


def _resnapshot(db: apsw.Connection, row: tuple[Any, ...]) -> RootRecord:
    root, branch, seq, parent, hw_seq, hw_hash, size, tree_root, v, state, replaces, hbranch, m = (
        row
    )
    r = _record(db, (root, hbranch, seq, parent, hw_seq, hw_hash, size, tree_root, v, state, m))
    return replace(r, replaces=MemoryRoot(bytes(replaces)), cascade_branch=str(branch))


def find_any(db: apsw.Connection, hex_prefix: str) -> RootRecord:
    """Return the root (a SNAPSHOT's or a re-snapshot) whose hex starts with ``hex_prefix``.

    Raises:
        NotFoundError: if none or several roots match.
        ValidationError: if the prefix is not hex or too short.
    """
    try:
        found = [find_root(db, hex_prefix)]
    except NotFoundError as e:
        if "several" in str(e):
            raise
        found = []
    text = hex_prefix.lower()
    if _has_resnapshots(db):
        lo = bytes.fromhex(text.ljust(64, "0"))
        hi = bytes.fromhex(text.ljust(64, "f"))
        found += [
            _resnapshot(db, row)
            for row in db.execute(
                f"SELECT {_resnap_cols(db)} FROM memory_root_resnapshots "
                "WHERE root BETWEEN ? AND ? LIMIT 2",
                (lo, hi),
            ).fetchall()
        ]
    if not found:
        raise NotFoundError(f"no memory_root starts with {text}")
    if len(found) > 1:
        raise NotFoundError(f"several memory_roots start with {text}; give more digits")
    return found[0]


def _record(db: apsw.Connection, row: tuple[Any, ...]) -> RootRecord:
    root, branch, seq, parent, hw_seq, hw_hash, size, tree_root, v, state, map_root = row
    items = tuple(
        ProjectionDigest(pid, RuleDigest(rule), SummaryDigest(dig), n)
        for pid, rule, dig, n in db.execute(
            "SELECT projection, rule, digest, count FROM memory_root_summaries "
            "WHERE root = ? ORDER BY projection",
            (root,),
        )
    )
    hw = HighWater(hw_seq, EntryHash(hw_hash), size, TreeRoot(tree_root))
    return RootRecord(
        MemoryRoot(root),
        branch,
        seq,
        None if parent is None else MemoryRoot(parent),
        hw,
        v,
        state,
        items,
        map_root=None if map_root is None else bytes(map_root),
    )


def latest_root(db: apsw.Connection, branch: str, *, live_only: bool = False) -> RootRecord | None:
    """Return the newest root of a branch (the newest ``live`` one with ``live_only``)."""
    where = " AND state = 'live'" if live_only else ""
    row = db.execute(
        f"SELECT {_cols(db)} FROM memory_roots WHERE branch = ?{where} ORDER BY seq DESC LIMIT 1",
        (branch,),
    ).fetchone()
    return None if row is None else _record(db, row)


def latest_v2_before(db: apsw.Connection, branch: str, stop: int) -> RootRecord | None:
    """Return the newest v2 root of ``branch`` whose high-water is before entry ``stop``."""
    if not _has_map(db):
        return None
    row = db.execute(
        f"SELECT {_ROOT_COLS} FROM memory_roots WHERE branch = ? AND map IS NOT NULL "
        "AND hw_seq < ? ORDER BY seq DESC LIMIT 1",
        (branch, stop),
    ).fetchone()
    return None if row is None else _record(db, row)


def root_before(db: apsw.Connection, branch: str, seq: int) -> MemoryRoot | None:
    """Return the newest root of ``branch`` whose SNAPSHOT entry precedes entry ``seq``."""
    row = db.execute(
        "SELECT root FROM memory_roots WHERE branch = ? AND seq < ? ORDER BY seq DESC LIMIT 1",
        (branch, seq),
    ).fetchone()
    return None if row is None else MemoryRoot(row[0])


def get_root(db: apsw.Connection, root: bytes) -> RootRecord:
    """Return the stored record of a root.

    Raises:
        NotFoundError: if no such root is stored.
    """
    row = db.execute(f"SELECT {_cols(db)} FROM memory_roots WHERE root = ?", (root,)).fetchone()
    if row is None:
        raise NotFoundError(f"no memory_root {root.hex()} in this ledger")
    return _record(db, row)


def find_root(db: apsw.Connection, hex_prefix: str) -> RootRecord:
    """Return the root whose hex starts with ``hex_prefix`` (at least 4 hex digits).

    Raises:
        NotFoundError: if none or several roots match.
        ValidationError: if the prefix is not hex or too short.
    """
    text = hex_prefix.lower()
    if len(text) < 4 or len(text) > 64 or any(c not in "0123456789abcdef" for c in text):
        raise ValidationError(
            f"{hex_prefix!r} is not a memory_root (4-64 hex digits)", field="root"
        )
    if len(text) == 64:
        return get_root(db, bytes.fromhex(text))
    lo = bytes.fromhex(text.ljust(64, "0"))
    hi = bytes.fromhex(text.ljust(64, "f"))
    rows = db.execute(
        f"SELECT {_cols(db)} FROM memory_roots WHERE root BETWEEN ? AND ? LIMIT 2", (lo, hi)
    ).fetchall()
    if not rows:
        raise NotFoundError(f"no memory_root starts with {text}")
    if len(rows) > 1:
        raise NotFoundError(f"several memory_roots start with {text}; give more digits")
    return _record(db, rows[0])


def summaries(db: apsw.Connection, root: bytes) -> list[StoredSummary]:
    """Return a root's stored summaries, sorted by projection id."""
    return [
        StoredSummary(
            str(p),
            RuleDigest(bytes(r)),
            bytes(rc),
            SummaryDigest(bytes(d)),
            int(n),
            bytes(data),
            None if st is None else bytes(st),
        )
        for p, r, rc, d, n, data, st in db.execute(
            "SELECT projection, rule, rule_cbor, digest, count, data, fold_state "
            "FROM memory_root_summaries WHERE root = ? ORDER BY projection",
            (root,),
        )
    ]


def set_root_state(db: apsw.Connection, root: bytes, state: str) -> None:
    """Set a root's state (for the falsification layer, inside its append transaction).

    Raises:
        ValueError: if ``state`` is not live, stale or falsified.
        NotFoundError: if the root is not stored.
    """
    if state not in ROOT_STATES:
        raise ValueError(f"root state must be one of {ROOT_STATES}, got {state!r}")
    db.execute("UPDATE memory_roots SET state = ? WHERE root = ?", (state, root))
    if db.changes() == 0:
        raise NotFoundError(f"no memory_root {root.hex()} in this ledger")


def insert_selfmodel(db: apsw.Connection, record: SelfModelRecord) -> None:
    """Store one ``SELFMODEL_SNAPSHOT`` (inside its append transaction)."""
    db.execute(
        "INSERT INTO selfmodel_snapshots VALUES(?,?,?,?,?)",
        (record.branch, record.seq, record.selfmodel_root, record.memory_root, record.body),
    )


def latest_selfmodel(db: apsw.Connection, branch: str) -> SelfModelRecord | None:
    """Return the newest stored ``SELFMODEL_SNAPSHOT`` of a branch, or None."""
    row = db.execute(
        "SELECT branch, seq, selfmodel_root, memory_root, body FROM selfmodel_snapshots "
        "WHERE branch = ? ORDER BY seq DESC LIMIT 1",
        (branch,),
    ).fetchone()
    if row is None:
        return None
    b, seq, sm, mr, body = row
    return SelfModelRecord(
        str(b), int(seq), bytes(sm), None if mr is None else MemoryRoot(bytes(mr)), bytes(body)
    )
