"""The saver's and the store's lookup tables: their schema and how an entry folds into them.

Kept apart from ``saver``/``store`` (and free of LangGraph imports) because three readers fold
the same entries the same way: the tables in the ledger file (kept by ``_index.catch_up``), the
private in-memory copy every saver and store checks them against (``_ledger.LedgerTables``),
and ``memroot verify`` / ``memroot rebuild`` (``_check``). One fold, so the three can only
disagree when the file's tables were edited.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any, Final

import apsw

from memroot.integrations.langgraph import _index
from memroot.ledger.entries import Entry
from memroot.ledger.errors import IntegrityError

__all__ = [
    "CHECKPOINT_TYPE",
    "PUT_TYPE",
    "SAVER",
    "STORE",
    "WRITES_TYPE",
    "TableSet",
    "ns_text",
]

CHECKPOINT_TYPE: Final = "langgraph.checkpoint"
WRITES_TYPE: Final = "langgraph.writes"
PUT_TYPE: Final = "langgraph.store.put"


def ns_text(namespace: tuple[str, ...] | list[str]) -> str:
    """Return a store namespace as the text its rows key it by (a compact JSON array)."""
    return json.dumps(list(namespace), ensure_ascii=False, separators=(",", ":"))


def _fold_saver(db: apsw.Connection, entry: Entry, content: dict[str, Any]) -> None:
    t, ns = content["thread_id"], content["checkpoint_ns"]
    if _index.event_type(entry) == CHECKPOINT_TYPE:
        db.execute(
            "INSERT OR REPLACE INTO lg_checkpoints VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                entry.branch,
                entry.seq,
                t,
                ns,
                content["checkpoint_id"],
                content.get("parent_checkpoint_id"),
                content.get("run_id"),
            ),
        )
        return
    db.execute(
        "INSERT OR REPLACE INTO lg_writes VALUES (?, ?, ?, ?, ?, ?)",
        (entry.branch, entry.seq, t, ns, content["checkpoint_id"], content["task_id"]),
    )


def _fold_store(db: apsw.Connection, entry: Entry, content: dict[str, Any]) -> None:
    db.execute(
        "INSERT OR REPLACE INTO lg_store VALUES (?, ?, ?, ?, ?, ?)",
        (
            entry.branch,
            entry.seq,
            ns_text(content["namespace"]),
            content["key"],
            int(content["created_at"]),
            int(content["updated_at"]),
        ),
    )


Locate = Callable[[str], "tuple[str, int] | None"]
"""Where an event is: ``event id -> (branch, seq)``, None when unknown."""


class TableSet:
    """One set of lookup tables: its ``lg_heads`` name, event types, schema and fold."""

    __slots__ = ("fold_event", "name", "obsolete", "schema", "tables", "types")

    def __init__(
        self,
        name: str,
        types: frozenset[str],
        schema: str,
        tables: tuple[str, ...],
        fold_event: Callable[[apsw.Connection, Entry, dict[str, Any]], None],
        *,
        obsolete: tuple[str, ...] = (),
    ) -> None:
        """Name the set; ``tables`` are those whose ``event`` rows a ``TOMBSTONE`` drops.

        ``obsolete``: tables an older version kept, dropped when found.
        """
        self.name = name
        self.types = types
        self.schema = schema
        self.tables = tables
        self.fold_event = fold_event
        self.obsolete = obsolete

    def install(self, db: apsw.Connection) -> None:
        """Create the tables if they are missing; refold those of another layout.

        A table stored with another definition (an older version's) is dropped with the
        set's ``lg_heads`` row: the tables are a cache, folded again from the entries.
        """
        for name in self.obsolete:
            db.execute(f"DROP TABLE IF EXISTS {name}")
        stale = False
        for stmt in self.schema.split(";"):
            text = " ".join(stmt.split())
            if not text.startswith("CREATE TABLE"):
                continue
            name = text.split()[5].split("(")[0]
            row = db.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
            ).fetchone()
            if row is not None and " ".join(str(row[0]).split()) != text.replace(
                " IF NOT EXISTS", ""
            ):
                db.execute(f"DROP TABLE {name}")
                stale = True
        if stale:
            with contextlib.suppress(apsw.SQLError):  # no lg_heads yet
                db.execute("DELETE FROM lg_heads WHERE name = ?", (self.name,))
        for stmt in self.schema.split(";"):
            if stmt.strip():
                db.execute(stmt)

    def fold(
        self,
        db: apsw.Connection,
        entry: Entry,
        content: dict[str, Any] | None,
        locate: Locate,
    ) -> None:
        """Fold one entry: an event of ``types`` (its parsed content), or a ``TOMBSTONE``.

        Every row is keyed by the entry it came from (``branch, seq``), and a ``TOMBSTONE``
        drops that entry's row (``locate`` finds it from the event id): the tables are the
        union of their live events' rows, whatever the order they were folded in or erased
        (a fold from scratch, which skips erased events, gives the same tables as one that
        folded them live). A lookup takes the newest row of a key.
        """
        if content is None:  # a TOMBSTONE: its event's row goes
            payload = entry.body.get("payload") or {}
            target = payload.get("target_event_id") if isinstance(payload, dict) else None
            where = locate(target) if isinstance(target, str) else None
            if where is not None:
                for table in self.tables:
                    db.execute(f"DELETE FROM {table} WHERE branch = ? AND seq = ?", where)
            return
        try:
            self.fold_event(db, entry, content)
        except (KeyError, TypeError, ValueError) as e:
            raise IntegrityError(
                f"event {entry.branch}:{entry.seq} ({_index.event_type(entry)}) holds no "
                f"well-formed {self.name} content (missing or wrong field: {e})",
                branch=entry.branch,
                seq=entry.seq,
                step=4,
            ) from e

    def rows(self, db: apsw.Connection, branch: str) -> dict[str, set[tuple[Any, ...]]]:
        """Return every row of the set's tables on ``branch`` (empty when a table is missing)."""
        out: dict[str, set[tuple[Any, ...]]] = {}
        for table in self.tables:
            try:
                found = db.execute(f"SELECT * FROM {table} WHERE branch = ?", (branch,)).fetchall()
            except apsw.SQLError:
                found = []
            out[table] = {tuple(r) for r in found}
        return out


SAVER: Final = TableSet(
    "saver",
    frozenset({CHECKPOINT_TYPE, WRITES_TYPE}),
    """
CREATE TABLE IF NOT EXISTS lg_checkpoints(
    branch TEXT NOT NULL, seq INTEGER NOT NULL, thread TEXT NOT NULL, ns TEXT NOT NULL,
    id TEXT NOT NULL, parent TEXT, run_id TEXT,
    PRIMARY KEY(branch, seq)) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lg_checkpoints_id ON lg_checkpoints(branch, thread, ns, id);
CREATE TABLE IF NOT EXISTS lg_writes(
    branch TEXT NOT NULL, seq INTEGER NOT NULL, thread TEXT NOT NULL, ns TEXT NOT NULL,
    checkpoint TEXT NOT NULL, task_id TEXT NOT NULL,
    PRIMARY KEY(branch, seq)) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lg_writes_checkpoint ON lg_writes(branch, thread, ns, checkpoint);
""",
    ("lg_checkpoints", "lg_writes"),
    _fold_saver,
    obsolete=("lg_blobs",),
)
"""The saver's tables: a row per checkpoint entry, and per pending-writes entry (the writes
themselves are read from the entry). ``lg_blobs`` is gone: a new checkpoint copies unchanged
channel values from its parent's entry."""

STORE: Final = TableSet(
    "store",
    frozenset({PUT_TYPE}),
    """
CREATE TABLE IF NOT EXISTS lg_store(
    branch TEXT NOT NULL, seq INTEGER NOT NULL, ns TEXT NOT NULL, key TEXT NOT NULL,
    created INTEGER NOT NULL, updated INTEGER NOT NULL,
    PRIMARY KEY(branch, seq)) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lg_store_key ON lg_store(branch, ns, key);
""",
    ("lg_store",),
    _fold_store,
    obsolete=("lg_store_versions",),
)
"""The store's table: a row per stored version of an item (the newest live one is served)."""
