"""LangGraph on a memroot ledger (extra ``memroot[langgraph]``).

``MemrootSaver`` / ``AsyncMemrootSaver``: a checkpoint saver whose checkpoints and pending
writes are ledger entries; ``MemrootStore`` / ``AsyncMemrootStore``: a long-term memory store
whose items are ledger entries. Both re-check every entry they serve against the signed tree
and refuse tampered data or edited lookup tables; all of them on one ledger share one lock
(``ledger_lock``). The entry layout is in docs/FORMAT.md ("LangGraph checkpoints and store
items").

The names are imported on first use, so ``memroot verify`` can check the lookup tables
(``memroot.integrations.langgraph._check``) where LangGraph is not installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memroot.integrations.langgraph._ledger import ledger_lock
    from memroot.integrations.langgraph._tables import CHECKPOINT_TYPE, PUT_TYPE, WRITES_TYPE
    from memroot.integrations.langgraph.saver import AsyncMemrootSaver, MemrootSaver
    from memroot.integrations.langgraph.store import AsyncMemrootStore, MemrootStore

__all__ = [
    "CHECKPOINT_TYPE",
    "PUT_TYPE",
    "WRITES_TYPE",
    "AsyncMemrootSaver",
    "AsyncMemrootStore",
    "MemrootSaver",
    "MemrootStore",
    "ledger_lock",
]

_WHERE = {
    "CHECKPOINT_TYPE": "_tables",
    "PUT_TYPE": "_tables",
    "WRITES_TYPE": "_tables",
    "ledger_lock": "_ledger",
    "AsyncMemrootSaver": "saver",
    "MemrootSaver": "saver",
    "AsyncMemrootStore": "store",
    "MemrootStore": "store",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{where}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
