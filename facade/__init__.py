"""memroot: a hash-chained, Merkle-committed audit ledger for the memory of AI agents.

The API an agent runtime calls::

    import memroot

    with memroot.open("agent.ledger", actor="agent-7", namespace="alice") as mem:
        said = mem.record(content="I take tea without sugar", actor="alice",
                          actor_type="HUMAN_USER", role="USER")
        mem.remember("Alice takes tea without sugar", evidence=[said.id])
        print([hit.object.value for hit in mem.recall(text="tea")])

``open(path, ...) -> Memory`` opens (or creates) a ledger; ``Memory`` is the object it
returns (README "Python API"). Every error is a ``MemrootError``: ``IntegrityError`` for bad
or tampered data, ``RefusedError`` (``ValidationError``, ``NotFoundError``, ``ClosedError``)
for a refused request, ``StorageError`` and ``KeyFileError`` for the environment.

The layers are subpackages, mapped from the repository's top-level folders by
``pyproject.toml``: ``memroot.ledger`` (entries, chain, Merkle tree, checkpoints,
verification), ``memroot.projections`` (the memory model), ``memroot.memory_root``
(snapshots, roots, falsification, branches), ``memroot.cli`` (the ``memroot`` command) and
``memroot.integrations`` (agent frameworks). The names above are loaded on first use:
``import memroot`` itself imports nothing else, so the offline auditor
(``memroot.ledger.bundle.audit``) runs without the ledger's own dependencies.
"""

import typing as _typing

if _typing.TYPE_CHECKING:
    from memroot.ledger.errors import (
        ClosedError,
        IntegrityError,
        KeyFileError,
        MemrootError,
        NotFoundError,
        RefusedError,
        StorageError,
        ValidationError,
    )
    from memroot.memory import Memory, Recorded
    from memroot.memory import open_memory as open

__all__ = [
    "ClosedError",
    "IntegrityError",
    "KeyFileError",
    "Memory",
    "MemrootError",
    "NotFoundError",
    "Recorded",
    "RefusedError",
    "StorageError",
    "ValidationError",
    "__version__",
    "open",
]

__version__ = "0.1.0"

_FROM_MEMORY: _typing.Final = {"open": "open_memory", "Memory": "Memory", "Recorded": "Recorded"}
_ERRORS: _typing.Final = frozenset(
    {
        "ClosedError",
        "IntegrityError",
        "KeyFileError",
        "MemrootError",
        "NotFoundError",
        "RefusedError",
        "StorageError",
        "ValidationError",
    }
)


def __getattr__(name: str) -> _typing.Any:
    """Load a public name (``open``, ``Memory``, the errors) when first asked for."""
    if name in _FROM_MEMORY:
        from memroot import memory

        value = getattr(memory, _FROM_MEMORY[name])
    elif name in _ERRORS:
        from memroot.ledger import errors

        value = getattr(errors, name)
    else:
        raise AttributeError(f"module 'memroot' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Return the public API (what ``help(memroot)`` lists) and the module's dunder names."""
    return sorted(set(__all__) | {"__doc__", "__name__", "__path__", "__file__"})
