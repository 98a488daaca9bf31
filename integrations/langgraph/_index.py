"""The integrations' lookup tables: a cache of the ledger, folded from its entries.

The saver and the store keep small tables in the ledger file (``lg_*``) so a lookup by
thread or key does not scan the log. They are derived, never trusted: every row is folded
from an entry (events of the ``langgraph.*`` types, and ``TOMBSTONE``s of them), each table
set remembers how far it folded (``lg_heads``), catches up with entries appended by anyone
before it is read, and is itself checked against a private fold of strictly read entries
(``_ledger.LedgerTables``). Dropping the tables loses nothing: they refold.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Final

import apsw

from memroot.ledger.entries import Entry, EventInput, Kind, OpInput
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType

__all__ = ["STREAM", "Folder", "catch_up", "content_json", "event", "event_type", "tombstones"]

STREAM: Final = "langgraph"
"""The ``stream`` of every event the integrations write."""

_HEADS: Final = (
    "CREATE TABLE IF NOT EXISTS lg_heads(name TEXT NOT NULL, branch TEXT NOT NULL, "
    "seq INTEGER NOT NULL, PRIMARY KEY(name, branch)) STRICT"
)

Folder = Callable[
    [apsw.Connection, Entry, "dict[str, Any] | None", Callable[[str], "tuple[str, int] | None"]],
    None,
]
"""Fold one entry into a table set: ``(db, entry, parsed content or None, locate)``, where
``locate`` finds an event's ``(branch, seq)`` by its id (for a ``TOMBSTONE``)."""


def event_type(entry: Entry) -> str | None:
    """Return the ``metadata.type`` of an integration event, else None."""
    if entry.kind is not Kind.EVENT or entry.body.get("stream") != STREAM:
        return None
    meta = entry.body.get("metadata")
    kind = meta.get("type") if isinstance(meta, dict) else None
    return kind if isinstance(kind, str) else None


def content_json(entry: Entry, data: bytes | None) -> dict[str, Any] | None:
    """Parse an integration event's content (checked against its commitment), or None.

    Raises:
        IntegrityError: the content does not match the commitment, or is not a JSON object.
    """
    if data is None:
        return None
    if entry.body.get("content_commitment") is None:
        raise IntegrityError("an event without a content commitment", seq=entry.seq, step=1)
    try:
        value = json.loads(data)
    except ValueError as e:
        raise IntegrityError(
            f"event {entry.branch}:{entry.seq} ({event_type(entry)}) holds no JSON content",
            branch=entry.branch,
            seq=entry.seq,
            step=4,
        ) from e
    if not isinstance(value, dict):
        raise IntegrityError(
            f"event {entry.branch}:{entry.seq} content is not a JSON object",
            branch=entry.branch,
            seq=entry.seq,
            step=4,
        )
    return value


def catch_up(
    ledger: Ledger,
    name: str,
    branch: str,
    fold: Folder,
    types: frozenset[str],
    collect: list[tuple[Entry, dict[str, Any] | None]] | None = None,
    own_from: int | None = None,
) -> tuple[int, int]:
    """Fold the entries of ``branch`` table set ``name`` has not seen; return ``(from, to)``.

    Runs in the caller's write transaction (or opens one). Entries are read strictly and
    content is checked against its commitment before it is folded. ``collect`` receives
    each folded ``(entry, content)`` (None for a ``TOMBSTONE`` or erased content).

    ``own_from``: the first seq the caller's open write transaction appended itself, on a
    ledger file (one connection holds the entries and these tables). Those rows are only
    decoded: they are the bytes this transaction hashed and wrote a moment ago, under the
    write lock, so no other writer can have touched them, and the commit's seal signs over
    them. Entries before it (another writer's) are read strictly as always.

    Raises:
        IntegrityError: a content row that does not match its commitment.
    """
    db = ledger.derived.db
    if not db.in_transaction:
        # Most calls find nothing to fold: answer them without taking the write lock.
        with ledger.reading():
            try:
                row = db.execute(
                    "SELECT seq FROM lg_heads WHERE name = ? AND branch = ?", (name, branch)
                ).fetchone()
            except apsw.SQLError:  # no lg_heads table yet
                row = None
            if row is not None and int(row[0]) >= ledger.size(branch):
                return int(row[0]), int(row[0])
    with ledger.write():
        try:
            row = db.execute(
                "SELECT seq FROM lg_heads WHERE name = ? AND branch = ?", (name, branch)
            ).fetchone()
        except apsw.SQLError:  # no lg_heads table yet
            db.execute(_HEADS)
            row = None
        start = 0 if row is None else int(row[0])
        size = ledger.size(branch)
        if start >= size:
            return start, start
        own = size if own_from is None or ledger.derived is not ledger.store else own_from
        own = max(start, min(own, size))
        for entry, data in _rows(ledger, branch, start, own, size):
            kind = event_type(entry)
            if kind in types:
                content = content_json(entry, data)
                fold(db, entry, content, ledger.find_event)
                if collect is not None:
                    collect.append((entry, content))
            elif entry.kind is Kind.OP and entry.type == OpType.TOMBSTONE.value:
                fold(db, entry, None, ledger.find_event)
                if collect is not None:
                    collect.append((entry, None))
        db.execute(
            "INSERT INTO lg_heads(name, branch, seq) VALUES (?, ?, ?) "
            "ON CONFLICT(name, branch) DO UPDATE SET seq = excluded.seq",
            (name, branch, size),
        )
        return start, size


def _rows(
    ledger: Ledger, branch: str, start: int, own: int, size: int
) -> Iterator[tuple[Entry, bytes | None]]:
    """Yield ``(entry, content bytes)`` of ``start <= seq < size``.

    Strictly read before ``own``; from ``own`` on, decoded from the rows the caller's write
    transaction appended itself (see ``catch_up``).
    """
    # The strict range read checks each entry and its content (against the commitment, or
    # the TOMBSTONE that erased it; content removed behind the ledger is refused).
    if start < own:
        for checked in ledger.read_range(start, own, branch):
            text = checked.content
            yield checked.entry, None if text is None else text.encode("utf-8")
    if own < size:
        mine = ledger.own_rows(branch, own)
        if mine is not None and own + len(mine) == size:
            yield from mine  # the bytes the transaction wrote, as it wrote them
            return
        no = ledger.store.branch(branch).no
        for row in ledger.store.iter_entry_rows(no, own, size):
            yield Entry.from_bytes(row.data), None if row.content is None else bytes(row.content)


def event(
    kind: str, content: dict[str, Any], *, actor: str, actor_type: str, namespace: str
) -> EventInput:
    """Return an integration event: stream ``langgraph``, ``metadata.type`` = ``kind``."""
    return EventInput(
        stream=STREAM,
        actor_id=actor,
        actor_type=actor_type,
        role="SYSTEM",
        content=json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
        namespace_id=namespace,
        metadata={"type": kind},
    )


def tombstones(
    event_ids: list[str], reason: str, *, actor: str, actor_type: str, namespace: str
) -> list[OpInput]:
    """Return one ``TOMBSTONE`` per event id: content and salt erased, the chain intact."""
    return [
        OpInput(
            op_type=OpType.TOMBSTONE.value,
            actor_id=actor,
            actor_type=actor_type,
            namespace_id=namespace,
            payload={"target_event_id": e, "reason": reason, "policy_ref": "langgraph/1"},
            policy_version="memroot/1",
        )
        for e in dict.fromkeys(event_ids)
    ]
