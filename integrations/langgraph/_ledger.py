"""What the saver and the store share: their ledger, their tables, how they write and read.

Both wrap an open ledger (or ``Memory``), keep lookup tables in its file (``_index``) that
fold their event types and drop the rows a ``TOMBSTONE`` erased, append integration events
and ``TOMBSTONE``s as one batch followed by a signed checkpoint, and serve only entries
re-checked against the signed tree and their content commitment (``_strict``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import apsw

from memroot.integrations.langgraph import _index
from memroot.integrations.langgraph._strict import verified_entry
from memroot.ledger.entries import Entry, EventInput, OpInput
from memroot.ledger.ledger import Ledger

if TYPE_CHECKING:
    from memroot.memory import Memory

__all__ = ["LedgerTables"]


class LedgerTables:
    """The base of ``MemrootSaver`` and ``MemrootStore`` (see the module docstring).

    A subclass names its table set (``_NAME``, the ``lg_heads`` key), the event types it
    folds (``_TYPES``), its ``_SCHEMA`` and the ``_TABLES`` whose ``event`` rows a
    ``TOMBSTONE`` drops, implements ``_fold_event`` and calls ``_open`` from its constructor.
    """

    __slots__ = ("_lock", "actor", "actor_type", "branch", "ledger", "namespace")

    _NAME: ClassVar[str]
    _TYPES: ClassVar[frozenset[str]]
    _SCHEMA: ClassVar[str]
    _TABLES: ClassVar[tuple[str, ...]]

    ledger: Ledger
    branch: str
    actor: str
    actor_type: str
    namespace: str
    _lock: threading.RLock

    def _open(
        self,
        ledger: Ledger | Memory,
        *,
        branch: str,
        actor: str,
        actor_type: str,
        namespace: str,
    ) -> None:
        """Keep the ledger and the writer's identity; create the tables if they are missing."""
        self.ledger = ledger if isinstance(ledger, Ledger) else ledger.ledger
        self.branch = branch
        self.actor = actor
        self.actor_type = actor_type
        self.namespace = namespace
        self._lock = threading.RLock()
        with self.ledger.write() as db:
            for stmt in self._SCHEMA.split(";"):
                if stmt.strip():
                    db.execute(stmt)

    # -- the index -----------------------------------------------------------------------------

    def _fold_event(self, db: apsw.Connection, entry: Entry, content: dict[str, Any]) -> None:
        """Fold one event of ``_TYPES`` (its checked, parsed content) into the tables."""
        raise NotImplementedError

    def _fold(self, db: apsw.Connection, entry: Entry, content: dict[str, Any] | None) -> None:
        if content is None:  # a TOMBSTONE: its event's rows go
            payload = entry.body.get("payload") or {}
            target = payload.get("target_event_id") if isinstance(payload, dict) else None
            if isinstance(target, str):
                for table in self._TABLES:
                    db.execute(f"DELETE FROM {table} WHERE event = ?", (target,))
            return
        self._fold_event(db, entry, content)

    def _sync(self) -> None:
        _index.catch_up(self.ledger, self._NAME, self.branch, self._fold, self._TYPES)

    def _checked(self, seq: int) -> tuple[Entry, dict[str, Any] | None]:
        """Return entry ``seq`` of the branch, re-checked, and its parsed content (None: erased).

        Raises:
            IntegrityError: the entry or its content does not check out (``verified_entry``,
                ``_index.content_json``).
        """
        entry, text = verified_entry(self.ledger, self.branch, seq)
        return entry, _index.content_json(entry, None if text is None else text.encode("utf-8"))

    # -- writes --------------------------------------------------------------------------------

    def _event(self, kind: str, content: dict[str, Any]) -> EventInput:
        return _index.event(
            kind, content, actor=self.actor, actor_type=self.actor_type, namespace=self.namespace
        )

    def _tombstones(self, event_ids: list[str], reason: str) -> list[OpInput]:
        return _index.tombstones(
            event_ids,
            reason,
            actor=self.actor,
            actor_type=self.actor_type,
            namespace=self.namespace,
        )

    def _write(self, items: Sequence[EventInput | OpInput]) -> None:
        """Append ``items`` as one batch, fold them, then sign a checkpoint (none: nothing)."""
        from memroot.memory_root import Roots

        if not items:
            return
        with self.ledger.write():
            Roots(self.ledger).append_batch(items, branch=self.branch)
            self._sync()
        self.ledger.checkpoint(self.branch)
