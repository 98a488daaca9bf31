"""memroot: a hash-chained, Merkle-committed audit ledger for the memory of AI agents.

The one import package of the distribution. Its layers are subpackages, mapped from the
repository's top-level folders by ``pyproject.toml``: ``memroot.ledger`` (entries, chain,
Merkle tree, checkpoints, verification), ``memroot.projections`` (the memory model and the
projections), ``memroot.memory_root`` (snapshots, roots, falsification, branches) and
``memroot.cli`` (the ``memroot`` command).
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
