"""Adapters that put memroot under agent frameworks (above the ``memroot`` facade).

``memroot.integrations.langgraph``: a LangGraph checkpoint saver and store whose data are
ledger entries (extra ``memroot[langgraph]``).
"""

from __future__ import annotations

__all__: list[str] = []
