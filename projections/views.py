"""Branch views of the memory state: a branch's own rows over its parent frozen at the fork.

RFC-0012 section 6: reads inside a branch return branch-local state first and fall back to
the parent *as it was at the fork*, never to later parent changes. Rows already carry their
``branch``; a ``View`` says which rows a branch sees:

    levels = ((B, as_of), (P, f_B), (G, f_P), ..., ("main", f_x))

where ``f_B`` is the parent's last entry before B's ``BRANCH_CREATE`` (the fork's
``tree_size - 1``). A row of level ``i`` is visible when it is current as of that level's
bound; an object or entity is taken from the first level that has a version of it (a branch's
own version shadows the parent's). Levels come from ``mem_forks``, which the memory engine
fills from each branch's genesis entry (its ``anchor`` names the parent and the
``BRANCH_CREATE`` seq), so views are derived from the ledger like everything else.

The canonical branch's view has one level, and its SQL is what single-branch reads always
used, so reads of ``main`` cost what they did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import apsw

from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.errors import NotFoundError
from memroot.ledger.vocab import BranchType

__all__ = ["MAX_DEPTH", "Fork", "View", "fork_from_genesis", "fork_of", "view_of"]

MAX_DEPTH: Final = 256
"""Branches of branches deeper than this are refused (a cycle guard; forks come from entries)."""


@dataclass(frozen=True, slots=True)
class Fork:
    """Where a branch forked: its parent, the parent's last entry it sees, and its type."""

    branch: str
    parent: str
    fork_seq: int
    branch_type: str | None


def fork_from_genesis(branch: str, body: Mapping[str, Any]) -> Fork | None:
    """Return the fork a branch genesis body records, or None when it names no anchor.

    The genesis ``anchor`` is ``{branch, entry_hash, seq}`` of the parent's ``BRANCH_CREATE``;
    the branch sees the parent as of the entry before it (verify step 7 checks the link).
    """
    anchor = body.get("anchor")
    if not isinstance(anchor, Mapping):
        return None
    parent, seq = anchor.get("branch"), anchor.get("seq")
    if not isinstance(parent, str) or type(seq) is not int or seq < 1 or parent == branch:
        return None
    btype = body.get("branch_type")
    return Fork(branch, parent, seq - 1, btype if isinstance(btype, str) else None)


def fork_of(db: apsw.Connection, branch: str) -> Fork | None:
    """Return the recorded fork of ``branch`` (None for main or a branch not folded yet)."""
    if branch == CANONICAL_BRANCH:
        return None
    row: Any = db.execute(
        "SELECT parent, fork_seq, branch_type FROM mem_forks WHERE branch = ?", (branch,)
    ).fetchone()
    return None if row is None else Fork(branch, row[0], row[1], row[2])


def _cur(alias: str, bound: int | None) -> tuple[str, list[Any]]:
    if bound is None:
        return f"{alias}.vto IS NULL", []
    return f"{alias}.vfrom <= ? AND ({alias}.vto IS NULL OR {alias}.vto > ?)", [bound, bound]


@dataclass(frozen=True, slots=True)
class View:
    """The levels a branch reads, itself first: ``(branch, bound)``, bound None = now."""

    levels: tuple[tuple[str, int | None], ...]
    branch_type: str | None = None
    closed: bool = False
    """True for a branch that takes no more entries (closed, archived, discarded, merged:
    ``branch_meta``): an erasure its parent made after the fork cannot reach it as an
    entry (its objects are flagged at read, as every object resting on erased evidence
    is, ``erased``)."""

    @property
    def branch(self) -> str:
        """The branch this view reads."""
        return self.levels[0][0]

    @property
    def simulation(self) -> bool:
        """True for a SIMULATION branch (its DEFAULT reads include ACTIVE HYPOTHETICAL)."""
        return self.branch_type == BranchType.SIMULATION.value

    @property
    def single(self) -> bool:
        """True when the view has no parent level (the canonical branch)."""
        return len(self.levels) == 1

    def rows(self, alias: str) -> tuple[str, list[Any]]:
        """Return the SQL condition for rows of edges, namespaces or grants (not shadowed)."""
        parts: list[str] = []
        params: list[Any] = []
        for branch, bound in self.levels:
            cond, p = _cur(alias, bound)
            parts.append(f"({alias}.branch = ? AND {cond})")
            params += [branch, *p]
        return _any(parts), params

    def versions(self, alias: str, table: str) -> tuple[str, list[Any]]:
        """Return the SQL condition for the visible versions of objects or entities (``table``).

        A row of level ``i`` is visible when current at its bound and no nearer level holds
        any version of the same id up to that level's bound. The shadow test's alias is
        ``sh_``: do not use it for ``alias``.
        """
        parts: list[str] = []
        params: list[Any] = []
        for i, (branch, bound) in enumerate(self.levels):
            cond, p = _cur(alias, bound)
            part, part_params = f"{alias}.branch = ? AND {cond}", [branch, *p]
            if i:
                nearer: list[str] = []
                n_params: list[Any] = []
                for b, lim in self.levels[:i]:
                    nearer.append(
                        "(sh_.branch = ?" + ("" if lim is None else " AND sh_.vfrom <= ?") + ")"
                    )
                    n_params += [b] if lim is None else [b, lim]
                part += (
                    f" AND NOT EXISTS(SELECT 1 FROM {table} sh_ WHERE sh_.id = {alias}.id AND "
                    f"({' OR '.join(nearer)}))"
                )
                part_params += n_params
            parts.append(f"({part})")
            params += part_params
        return _any(parts), params

    def events(self, alias: str) -> tuple[str, list[Any]]:
        """Return the SQL condition for events the view sees (``mem_events`` rows)."""
        parts: list[str] = []
        params: list[Any] = []
        for branch, bound in self.levels:
            if bound is None:
                parts.append(f"({alias}.branch = ?)")
                params.append(branch)
            else:
                parts.append(f"({alias}.branch = ? AND {alias}.seq <= ?)")
                params += [branch, bound]
        return _any(parts), params

    def erased(self, alias: str) -> tuple[str, list[Any]]:
        """Return the SQL condition for events whose content was erased as of the view.

        Read now, every erasure counts, wherever and whenever it was made: the content is
        gone for the whole ledger. So an object of any branch resting on an erased event is
        flagged ``EVIDENCE_ERASED`` at read, including one the erasure's ``on_dependents``
        could not reach as an entry (a closed branch takes none; an object ACTIVE only at an
        anchor, being superseded globally, takes none either: issue 28 point 3). Read as of
        an earlier entry, each level counts the erasures made up to its bound (a branch
        sees its parent frozen at the fork).
        """
        if self.levels[0][1] is None:
            return f"({alias}.erased_by IS NOT NULL)", []
        parts: list[str] = []
        params: list[Any] = []
        for branch, bound in self.levels:
            parts.append(f"({alias}.branch = ? AND {alias}.seq <= ? AND {alias}.erased_by <= ?)")
            params += [branch, bound, bound]
        return _any(parts), params


def _any(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"


def view_of(db: apsw.Connection, branch: str, as_of: int | None = None) -> View:
    """Return the view of ``branch`` as of its entry ``as_of`` (None: now).

    Raises:
        NotFoundError: if the memory state has no record of the branch (no such branch, or
            its entries were not folded yet: ``memroot.projections.memory.sync`` folds them).
    """
    if branch == CANONICAL_BRANCH:
        return View(((branch, as_of),))
    fork = fork_of(db, branch)
    if fork is None:
        raise NotFoundError(f"no branch {branch!r} in the memory state")
    levels: list[tuple[str, int | None]] = [(branch, as_of)]
    branch_type = fork.branch_type
    seen = {branch}
    while fork is not None:
        if fork.parent in seen or len(levels) > MAX_DEPTH:
            raise NotFoundError(f"branch {branch!r} has a broken chain of forks")
        seen.add(fork.parent)
        levels.append((fork.parent, fork.fork_seq))
        fork = fork_of(db, fork.parent)
    if levels[-1][0] != CANONICAL_BRANCH:
        raise NotFoundError(f"the fork chain of branch {branch!r} does not reach main")
    return View(tuple(levels), branch_type, as_of is None and _not_open(db, branch))


def _not_open(db: apsw.Connection, branch: str) -> bool:
    """Return True when the branch registry says the branch takes no more entries.

    The registry is ``memory_root.branches``'s ``branch_meta`` table in the same file;
    without it nothing is closed.
    """
    try:
        row = db.execute("SELECT state FROM branch_meta WHERE branch_id = ?", (branch,)).fetchone()
    except apsw.SQLError:
        return False
    return row is not None and row[0] != "OPEN"
