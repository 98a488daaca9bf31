"""LangGraph on a memroot ledger (extra ``memroot[langgraph]``).

``MemrootSaver``: a checkpoint saver whose checkpoints and pending writes are ledger
entries; ``MemrootStore``: a long-term memory store whose items are ledger entries. Both
re-check every entry they serve against the signed tree and refuse tampered data.
The entry layout is in docs/FORMAT.md ("LangGraph checkpoints and store items").
"""

from __future__ import annotations

from memroot.integrations.langgraph.saver import CHECKPOINT_TYPE, WRITES_TYPE, MemrootSaver
from memroot.integrations.langgraph.store import PUT_TYPE, MemrootStore

__all__ = ["CHECKPOINT_TYPE", "PUT_TYPE", "WRITES_TYPE", "MemrootSaver", "MemrootStore"]
