"""Which projections a snapshot runs: the built-ins plus third-party ones from entry points.

A third-party package adds projections by declaring an entry point in the group
``memroot.projections``; the object it names is a ``Projection`` instance, or a callable
taking no arguments that returns one projection or a list of them::

    [project.entry-points."memroot.projections"]
    topic-failures = "my_pkg.projections:TopicFailures"

A memory_root commits to the rule digest of every projection it ran, sorted by id, so the
order projections are registered in never matters; the set does. An auditor needs the same
projections (same id, version and params) to replay a root, or the verifier reports the root
as not replayable. A projection replaced by a new version can stay registered as *retired*:
new snapshots no longer run it, but roots built with it still replay.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Iterator
from typing import Final

from memroot.projections.builtins import builtin_projections, retired_projections
from memroot.projections.projection import Projection, RuleDigest, check_projection, rule_digest

__all__ = [
    "PROJECTION_GROUP",
    "Registry",
    "default_registry",
    "load_entry_points",
]

PROJECTION_GROUP: Final = "memroot.projections"


class Registry:
    """A set of projections with unique ids (plus retired ones kept for replay)."""

    def __init__(self, projections: Iterable[Projection] = ()) -> None:
        """Register ``projections`` in the order given.

        Raises:
            ValueError, TypeError: as ``register``.
        """
        self._active: dict[str, Projection] = {}
        self._by_rule: dict[RuleDigest, Projection] = {}
        for p in projections:
            self.register(p)

    def register(self, projection: Projection, *, retired: bool = False) -> None:
        """Add a projection; ``retired`` ones only serve to replay roots built with them.

        Raises:
            ValueError: if an active projection with the same id is already registered, or
                the id or version is malformed.
            TypeError: if the object is not a projection or its params are not CBOR.
        """
        check_projection(projection)
        rule = rule_digest(projection)
        if not retired:
            if projection.id in self._active:
                raise ValueError(f"a projection with id {projection.id!r} is already registered")
            self._active[projection.id] = projection
        self._by_rule.setdefault(rule, projection)

    def projections(self) -> tuple[Projection, ...]:
        """Return the active projections sorted by id (the order of a root's preimage)."""
        return tuple(self._active[k] for k in sorted(self._active))

    def known(self) -> tuple[Projection, ...]:
        """Return every projection, active and retired, sorted by id then rule digest.

        An auditor folds all of them, so it can replay roots built with any of them.
        """
        return tuple(p for _, p in sorted(self._by_rule.items(), key=lambda x: (x[1].id, x[0])))

    def get(self, projection_id: str) -> Projection | None:
        """Return the active projection with this id, or None."""
        return self._active.get(projection_id)

    def by_rule(self, rule: bytes) -> Projection | None:
        """Return the projection (active or retired) whose rule digest is ``rule``, or None."""
        return self._by_rule.get(RuleDigest(rule))

    def __iter__(self) -> Iterator[Projection]:
        return iter(self.projections())

    def __len__(self) -> int:
        return len(self._active)


def load_entry_points(group: str = PROJECTION_GROUP) -> list[Projection]:
    """Load every projection declared in the entry-point ``group``, sorted by entry-point name.

    Raises:
        TypeError: naming the entry point whose object is not a projection (or list of them).
        ImportError: if an entry point's module cannot be imported.
    """
    out: list[Projection] = []
    for ep in sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name):
        obj = ep.load()
        if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "fold")):
            obj = obj()
        items = list(obj) if isinstance(obj, list | tuple) else [obj]
        for item in items:
            try:
                check_projection(item)
            except (TypeError, ValueError) as e:
                raise TypeError(f"entry point {ep.name!r} in {group}: {e}") from e
            out.append(item)
    return out


def default_registry(*, entry_points: bool = True) -> Registry:
    """Return the built-in projections plus (unless disabled) those from entry points.

    Raises:
        ValueError: if a plugin reuses a built-in id.
        TypeError, ImportError: as ``load_entry_points``.
    """
    registry = Registry(builtin_projections())
    for p in retired_projections():
        registry.register(p, retired=True)
    if entry_points:
        for p in load_entry_points():
            registry.register(p)
    return registry
