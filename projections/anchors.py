"""Provenance-only visibility of derived memory on conversation trees (seed 001, "branchmem").

Conversation history is a tree: editing a message, regenerating a reply or forking from a
checkpoint makes siblings. Events name their parent (``parent_event_id``); an agent reads "at
an anchor" event. The single rule: a derived memory object is visible at the anchor only when
**every** one of its evidence events lies on the anchor's ancestor path (the anchor included).
One source on a sibling hides the whole object. Switching the anchor changes nothing stored,
so an abandoned line's memories come back when the anchor moves back; with no anchor nothing
derived is returned (never the whole tree).

Events may arrive in any order (a child before its parent): the parent links are stored as
they come, and the path is walked at read time over what has arrived.

``ConversationTree`` is an ``AppendHook`` keeping ``conv_parents(id, parent)`` in step with
appended events; ``ancestor_path`` and ``visible`` answer reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

import apsw

from ledger.entries import Entry, Kind, OpInput
from ledger.ledger import Ledger

__all__ = [
    "MAX_PATH",
    "ConversationTree",
    "ancestor_path",
    "ancestor_path_in",
    "filter_visible",
    "visible",
]

MAX_PATH: Final = 1_000_000  # a cycle guard: parent links come from callers
T = TypeVar("T")

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS conv_parents(id TEXT PRIMARY KEY, parent TEXT) STRICT, WITHOUT ROWID;
"""


class ConversationTree:
    """``AppendHook`` recording each event's parent, for reads at an anchor."""

    def install(self, db: apsw.Connection) -> None:
        """Create ``conv_parents`` if missing."""
        db.execute(_SCHEMA)

    def apply(
        self, db: apsw.Connection, ledger: Ledger, entry: Entry, content: str | None
    ) -> list[OpInput]:
        """Record an event's parent link (every event, so that roots are known too)."""
        if entry.kind is Kind.EVENT:
            parent = entry.body.get("parent_event_id")
            db.execute(
                "INSERT OR IGNORE INTO conv_parents VALUES(?, ?)", (entry.body["id"], parent)
            )
        return []


def ancestor_path_in(parents: Mapping[str, str | None], anchor: str) -> set[str]:
    """Return ``anchor`` and its ancestors under ``parents`` (event id -> parent id or None).

    The walk stops at a root, at a parent that has not arrived yet, or at a cycle.
    """
    return _walk(parents.get, anchor)


def ancestor_path(db: apsw.Connection, anchor: str) -> set[str]:
    """Return ``anchor`` and its ancestors from the stored parent links (one lookup a step)."""

    def parent_of(event_id: str) -> str | None:
        row: Any = db.execute(
            "SELECT parent FROM conv_parents WHERE id = ?", (event_id,)
        ).fetchone()
        return None if row is None else row[0]

    return _walk(parent_of, anchor)


def _walk(parent_of: Callable[[str], str | None], anchor: str) -> set[str]:
    path = {anchor}
    node: str | None = parent_of(anchor)
    while node is not None and node not in path and len(path) < MAX_PATH:
        path.add(node)
        node = parent_of(node)
    return path


def visible(evidence_ids: Iterable[str], path: set[str] | None) -> bool:
    """Return True when every evidence event lies on the anchor's path.

    With no anchor (``path`` None) nothing derived is visible; an object with no evidence is
    never visible at an anchor either (it cannot be placed on any path).
    """
    if path is None:
        return False
    ids = list(evidence_ids)
    return bool(ids) and all(e in path for e in ids)


def filter_visible(
    items: Sequence[T], evidence_of: Callable[[T], Iterable[str]], path: set[str] | None
) -> list[T]:
    """Return the items whose evidence is entirely on ``path`` (see ``visible``)."""
    return [item for item in items if visible(evidence_of(item), path)]
