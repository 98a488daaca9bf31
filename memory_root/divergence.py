"""How far a branch has moved from its parent (RFC-0012 section 9), and what it changed.

``divergence(ledger, branch)`` measures, on request and before every merge:

- ``events_since_fork``: entries appended to the branch after its genesis (events and
  operations: the branch's own log);
- ``objects_created`` / ``objects_modified``: memory objects the branch created, and objects
  it inherited from the parent at the fork and changed (a branch-local version);
- ``canonical_events_since_fork``: entries appended to the parent after the ``BRANCH_CREATE``;
- ``canonical_objects_created`` / ``canonical_objects_modified``: the same counts for the
  parent since the fork;
- ``divergence_score``, the Jaccard distance between the two states, each taken as the set of
  (object, version) pairs its view holds now::

      B = objects the branch sees, P = objects the parent sees, F = objects at the fork
      |B| = |F| + created_b      |P| = |F| + created_p
      same = |F| - (modified_b + modified_p - modified_both)   (unchanged on both sides)
      divergence_score = 1 - same / (|B| + |P| - same)          (0 when both are empty)

  0 means the branch and its parent hold exactly the same objects; 1 that they share none.
  It grows with changes on either side, and relative to how much memory there is: a
  simulation that rewrote half of what it inherited, or a parent that moved on while the
  branch was open, both make a merge riskier. Above ``WARN_ABOVE`` (0.70) a merge warns but
  goes ahead.

``diff_branch(ledger, branch)`` lists the objects created or modified in the branch, each with
its version at the fork (for modified ones) and now, and the fields that differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import apsw

from memroot.ledger.entries import now_us
from memroot.ledger.errors import NotFoundError
from memroot.ledger.ledger import Ledger
from memroot.projections.hook import sync
from memroot.projections.model import MemoryObject
from memroot.projections.query import get_object
from memroot.projections.views import Fork, fork_of, view_of

__all__ = [
    "WARN_ABOVE",
    "BranchDiff",
    "Divergence",
    "ObjectChange",
    "diff_branch",
    "divergence",
    "fork_point",
    "measure",
]

WARN_ABOVE: Final = 0.70
"""RFC-0012 section 9: a merge above this divergence score warns (it is not blocked)."""

_BOOKKEEPING: Final = frozenset({"branch", "seq"})


@dataclass(frozen=True, slots=True)
class Divergence:
    """RFC-0012 section 9 BranchDivergence, with the parent-side counts the score uses."""

    branch_id: str
    parent: str
    fork_seq: int
    measured_at: int
    events_since_fork: int
    objects_created: int
    objects_modified: int
    canonical_events_since_fork: int
    canonical_objects_created: int
    canonical_objects_modified: int
    objects_at_fork: int
    divergence_score: float

    @property
    def warning(self) -> bool:
        """True when the score is above ``WARN_ABOVE`` (merging is risky)."""
        return self.divergence_score > WARN_ABOVE

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict (with ``warning``)."""
        return {
            "branch_id": self.branch_id,
            "parent": self.parent,
            "fork_seq": self.fork_seq,
            "measured_at": self.measured_at,
            "events_since_fork": self.events_since_fork,
            "objects_created": self.objects_created,
            "objects_modified": self.objects_modified,
            "canonical_events_since_fork": self.canonical_events_since_fork,
            "canonical_objects_created": self.canonical_objects_created,
            "canonical_objects_modified": self.canonical_objects_modified,
            "objects_at_fork": self.objects_at_fork,
            "divergence_score": self.divergence_score,
            "warning": self.warning,
        }


def fork_point(db: apsw.Connection, branch: str) -> Fork:
    """Return where ``branch`` forked, from the memory state.

    Raises:
        NotFoundError: if ``branch`` is main or no branch of the memory state.
    """
    fork = fork_of(db, branch)
    if fork is None:
        raise NotFoundError(f"no branch {branch!r} forked from another (main has no fork)")
    return fork


def _count(db: apsw.Connection, sql: str, params: list[Any]) -> int:
    row: Any = db.execute(sql, params).fetchone()
    return int(row[0])


def _local_ids(db: apsw.Connection, branch: str) -> list[str]:
    """Ids of the objects with a version on ``branch`` itself, in order of first change."""
    return [
        r[0]
        for r in db.execute(
            "SELECT id FROM mem_objects WHERE branch = ? GROUP BY id ORDER BY min(rid)", (branch,)
        )
    ]


def measure(
    db: apsw.Connection, ledger: Ledger, branch: str, *, now: int | None = None
) -> Divergence:
    """Return the divergence of ``branch`` from the memory state in ``db`` (no sync).

    Raises:
        NotFoundError: if ``branch`` has no fork.
    """
    fork = fork_point(db, branch)
    parent, f = fork.parent, fork.fork_seq
    at_fork, at_params = view_of(db, parent, f).versions("o", "mem_objects")
    in_fork = f"EXISTS(SELECT 1 FROM mem_objects o WHERE o.id = ? AND {at_fork})"
    objects_at_fork = _count(db, f"SELECT count(*) FROM mem_objects o WHERE {at_fork}", at_params)
    created_b = modified_b = both = 0
    for object_id in _local_ids(db, branch):
        if not _count(db, f"SELECT {in_fork}", [object_id, *at_params]):
            created_b += 1
            continue
        modified_b += 1
        both += _count(
            db,
            "SELECT EXISTS(SELECT 1 FROM mem_objects WHERE id = ? AND branch = ? AND vfrom > ?)",
            [object_id, parent, f],
        )
    changed_p = _count(
        db,
        "SELECT count(DISTINCT id) FROM mem_objects WHERE branch = ? AND vfrom > ?",
        [parent, f],
    )
    modified_p = _count(
        db,
        "SELECT count(DISTINCT p.id) FROM mem_objects p WHERE p.branch = ? AND p.vfrom > ? AND "
        f"EXISTS(SELECT 1 FROM mem_objects o WHERE o.id = p.id AND {at_fork})",
        [parent, f, *at_params],
    )
    created_p = changed_p - modified_p
    same = objects_at_fork - (modified_b + modified_p - both)
    union = (objects_at_fork + created_b) + (objects_at_fork + created_p) - same
    score = 0.0 if union == 0 else round(1 - same / union, 6)
    anchor = f + 1
    return Divergence(
        branch_id=branch,
        parent=parent,
        fork_seq=f,
        measured_at=now_us() if now is None else now,
        events_since_fork=max(ledger.size(branch) - 1, 0),
        objects_created=created_b,
        objects_modified=modified_b,
        canonical_events_since_fork=max(ledger.size(parent) - (anchor + 1), 0),
        canonical_objects_created=created_p,
        canonical_objects_modified=modified_p,
        objects_at_fork=objects_at_fork,
        divergence_score=score,
    )


def divergence(ledger: Ledger, branch: str, *, now: int | None = None) -> Divergence:
    """Bring the memory state up to date and measure how far ``branch`` diverged.

    Raises:
        NotFoundError: if there is no such branch (or it is main).
        StorageError: if the memory state cannot be brought up to date.
    """
    ledger.store.branch(branch)
    sync(ledger)
    with ledger.reading() as db:
        return measure(db, ledger, branch, now=now)


@dataclass(frozen=True, slots=True)
class ObjectChange:
    """An object the branch created or modified: its version at the fork (None) and now."""

    id: str
    status: str
    before: MemoryObject | None
    after: MemoryObject
    changed: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "id": self.id,
            "status": self.status,
            "changed": list(self.changed),
            "before": None if self.before is None else self.before.to_dict(),
            "after": self.after.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class BranchDiff:
    """What a branch changed relative to its parent at the fork."""

    branch_id: str
    parent: str
    fork_seq: int
    created: tuple[ObjectChange, ...]
    modified: tuple[ObjectChange, ...]

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "branch_id": self.branch_id,
            "parent": self.parent,
            "fork_seq": self.fork_seq,
            "created": [c.to_json() for c in self.created],
            "modified": [c.to_json() for c in self.modified],
        }


def diff_branch(ledger: Ledger, branch: str) -> BranchDiff:
    """Bring the memory state up to date and list the objects ``branch`` created or modified.

    A modified object is one the branch inherited at the fork and changed; ``changed`` names
    the fields whose values differ between its version at the fork and its version now.

    Raises:
        NotFoundError: if there is no such branch (or it is main).
        StorageError: if the memory state cannot be brought up to date.
    """
    ledger.store.branch(branch)
    sync(ledger)
    created: list[ObjectChange] = []
    modified: list[ObjectChange] = []
    with ledger.reading() as db:
        fork = fork_point(db, branch)
        for object_id in _local_ids(db, branch):
            after = get_object(db, object_id, branch=branch)
            try:
                before: MemoryObject | None = get_object(
                    db, object_id, as_of=fork.fork_seq, branch=fork.parent
                )
            except NotFoundError:
                before = None
            if before is None:
                created.append(ObjectChange(object_id, "created", None, after, ()))
                continue
            old, new = before.to_dict(), after.to_dict()
            changed = tuple(k for k in new if k not in _BOOKKEEPING and old[k] != new[k])
            modified.append(ObjectChange(object_id, "modified", before, after, changed))
    return BranchDiff(branch, fork.parent, fork.fork_seq, tuple(created), tuple(modified))
