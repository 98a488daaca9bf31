"""memroot: a hash-chained, Merkle-committed audit ledger for the memory of AI agents.

The one import package of the distribution. Its layers are subpackages, mapped from the
repository's top-level folders by ``pyproject.toml``: ``memroot.ledger`` (entries, chain,
Merkle tree, checkpoints, verification), ``memroot.projections`` (the memory model and the
projections), ``memroot.memory_root`` (snapshots, roots, falsification, branches) and
``memroot.cli`` (the ``memroot`` command); ``memroot.integrations`` adapts agent frameworks.

``memroot.open(path, ...) -> Memory`` is the API an agent runtime calls (``memroot.memory``).
It is loaded on first use: ``import memroot`` itself imports nothing else, so the offline
auditor (``memroot.ledger.bundle.audit``) runs without the ledger's own dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memroot.memory import Memory
    from memroot.memory import open_memory as open

__all__ = ["Memory", "__version__", "open"]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Load ``open`` and ``Memory`` from ``memroot.memory`` when first asked for."""
    if name == "open":
        from memroot.memory import open_memory

        return open_memory
    if name == "Memory":
        from memroot.memory import Memory

        return Memory
    raise AttributeError(f"module 'memroot' has no attribute {name!r}")
