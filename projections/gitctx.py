"""Git context on entries and branch-aware ranking for coding agents (seed 003).

An entry may carry the agent's git context in its ``context`` map::

    "context": {"git": {"branch": "feature/login", "commit": "3f2a9c1",
                        "branch_scope": "current_branch"}}

``branch_scope`` is one of ``current_branch``, ``inherited_branch``, ``mainline``, ``global``,
``historical``. Nothing else is accepted under ``git``: no remote URL and no identity (name,
email) is ever stored; a branch name that looks like a URL or an address is refused.
``GitContextHook`` enforces this at append and records the context per entry
(``git_context(branch, seq, ...)``) so ranking can look it up for the entry that created an
object.

Ranking (``branch_score``), when the agent gives its current git branch::

    final = 0.35 * base + 0.20 * branch_affinity + 0.15 * revision_validity
          + 0.10 * working_tree_source_match + 0.10 * source_revision_freshness
          + 0.10 * branch_scope_priority

With no current branch the score is the base score, unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import apsw

from memroot.ledger.entries import Entry, OpInput
from memroot.ledger.errors import ValidationError
from memroot.ledger.ledger import Ledger

__all__ = [
    "AFFINITY",
    "MAINLINE_NAMES",
    "SCOPES",
    "SCOPE_PRIORITY",
    "GitContext",
    "GitContextHook",
    "branch_affinity",
    "branch_score",
    "context_of",
    "parse_git_context",
    "read_git_head",
]

SCOPES: Final = ("current_branch", "inherited_branch", "mainline", "global", "historical")
MAINLINE_NAMES: Final = frozenset({"main", "master", "develop"})
AFFINITY: Final = {
    "same": 1.0,
    "inherited_branch": 0.6,
    "mainline": 0.5,
    "global": 0.3,
    "unrelated": 0.1,
}
SCOPE_PRIORITY: Final = {
    "current_branch": 1.0,
    "inherited_branch": 0.7,
    "mainline": 0.5,
    "global": 0.3,
    "historical": 0.1,
}
_WEIGHTS: Final = (0.35, 0.20, 0.15, 0.10, 0.10, 0.10)
_BRANCH_RE: Final = re.compile(r"[A-Za-z0-9._/-]{1,128}\Z")
_COMMIT_RE: Final = re.compile(r"[0-9a-f]{7,64}\Z")
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS git_context(
    branch TEXT NOT NULL, seq INTEGER NOT NULL, git_branch TEXT, commit_sha TEXT,
    branch_scope TEXT NOT NULL, PRIMARY KEY(branch, seq)
) STRICT, WITHOUT ROWID;
"""


@dataclass(frozen=True, slots=True)
class GitContext:
    """Where an entry was written: git branch, short commit and branch scope."""

    branch: str | None
    commit: str | None
    branch_scope: str

    def to_json(self) -> dict[str, Any]:
        """Return the ``context.git`` map."""
        out: dict[str, Any] = {"branch_scope": self.branch_scope}
        if self.branch is not None:
            out["branch"] = self.branch
        if self.commit is not None:
            out["commit"] = self.commit
        return out


def parse_git_context(value: Any) -> GitContext:
    """Validate a ``context.git`` map.

    Raises:
        ValidationError: for unknown keys (remote URLs and identities are never stored), a
            branch name that is not a plain ref name, a commit that is not hex, a bad scope.
    """
    if not isinstance(value, Mapping):
        raise ValidationError("context.git must be an object", field="context.git")
    extra = sorted(set(value) - {"branch", "commit", "branch_scope"})
    if extra:
        raise ValidationError(
            f"context.git.{extra[0]} is not stored: only branch, commit and branch_scope are "
            "(never a remote URL or an identity)",
            field=f"context.git.{extra[0]}",
        )
    branch = value.get("branch")
    if branch is not None and (
        not isinstance(branch, str) or not _BRANCH_RE.match(branch) or "//" in branch
    ):
        raise ValidationError(
            "context.git.branch must be a plain branch name (letters, digits, "
            "._/-; no URL, no address)",
            field="context.git.branch",
        )
    commit = value.get("commit")
    if commit is not None and (not isinstance(commit, str) or not _COMMIT_RE.match(commit)):
        raise ValidationError(
            "context.git.commit must be a lowercase hex commit id", field="context.git.commit"
        )
    scope = value.get("branch_scope")
    if scope is None:
        scope = (
            "global"
            if branch is None
            else "mainline"
            if branch in MAINLINE_NAMES
            else "current_branch"
        )
    if scope not in SCOPES:
        raise ValidationError(
            f"context.git.branch_scope must be one of {', '.join(SCOPES)}",
            field="context.git.branch_scope",
        )
    return GitContext(branch, commit, scope)


class GitContextHook:
    """``AppendHook`` validating ``context.git`` on every entry and recording it."""

    def install(self, db: apsw.Connection) -> None:
        """Create ``git_context`` if missing."""
        db.execute(_SCHEMA)

    def apply_events(
        self, db: apsw.Connection, ledger: Ledger, entries: Sequence[Entry], contents: Sequence[str]
    ) -> list[OpInput]:
        """Record the git contexts of a run of events (the ledger's native batch path)."""
        for entry in entries:
            if "context" in entry.body:
                self.apply(db, ledger, entry, None)
        return []

    def apply(
        self, db: apsw.Connection, ledger: Ledger, entry: Entry, content: str | None
    ) -> list[OpInput]:
        """Refuse a bad git context; record a good one under (branch, seq)."""
        context = entry.body.get("context")
        if isinstance(context, dict) and "git" in context:
            g = parse_git_context(context["git"])
            db.execute(
                "INSERT INTO git_context VALUES(?, ?, ?, ?, ?)",
                (entry.branch, entry.seq, g.branch, g.commit, g.branch_scope),
            )
        return []


def context_of(db: apsw.Connection, branch: str, seq: int) -> GitContext | None:
    """Return the git context recorded for an entry, or None."""
    row: Any = db.execute(
        "SELECT git_branch, commit_sha, branch_scope FROM git_context WHERE branch = ? AND seq = ?",
        (branch, seq),
    ).fetchone()
    return None if row is None else GitContext(row[0], row[1], row[2])


def branch_affinity(node: GitContext | None, current_branch: str) -> float:
    """Return seed 003's branch affinity of a node for the current branch.

    Same branch 1.0, inherited 0.6, mainline 0.5, global or no branch 0.3, a different
    unrelated branch 0.1.
    """
    if node is None or node.branch_scope == "global" or node.branch is None:
        return AFFINITY["global"]
    if node.branch == current_branch:
        return AFFINITY["same"]
    if node.branch_scope == "inherited_branch":
        return AFFINITY["inherited_branch"]
    if node.branch_scope == "mainline" or node.branch in MAINLINE_NAMES:
        return AFFINITY["mainline"]
    return AFFINITY["unrelated"]


def branch_score(
    base: float,
    node: GitContext | None,
    current_branch: str | None,
    *,
    revision_valid: bool = True,
    working_tree_match: bool = False,
    freshness: float = 0.5,
) -> float:
    """Return seed 003's branch-aware score; ``base`` unchanged when no current branch.

    ``revision_valid`` is False for superseded context (revision validity 0.0);
    ``working_tree_match`` is True when the node's source is among modified files;
    ``freshness`` is the source revision freshness (0.5 until revisions are tracked).
    """
    if current_branch is None:
        return base
    scope = node.branch_scope if node is not None else "global"
    parts = (
        base,
        branch_affinity(node, current_branch),
        1.0 if revision_valid else 0.0,
        1.0 if working_tree_match else 0.0,
        freshness,
        SCOPE_PRIORITY[scope],
    )
    return sum(w * p for w, p in zip(_WEIGHTS, parts, strict=True))


def read_git_head(repo: Path) -> GitContext | None:
    """Read the current branch and short commit from ``repo/.git`` files (no git, no network).

    Only HEAD and the branch ref are read: never the config (remotes) or any identity.
    Returns None when ``repo`` is not a git work tree.
    """
    git = repo / ".git"
    head_file = git / "HEAD"
    if not head_file.is_file():
        return None
    head = head_file.read_text("utf-8", "replace").strip()
    branch: str | None = None
    commit: str | None = None
    if head.startswith("ref: refs/heads/"):
        branch = head.removeprefix("ref: refs/heads/")
        ref = git / "refs" / "heads" / branch
        if ref.is_file():
            commit = ref.read_text("utf-8", "replace").strip()[:12]
    elif _COMMIT_RE.match(head):
        commit = head[:12]
    if branch is not None and not _BRANCH_RE.match(branch):
        branch = None
    if commit is not None and not _COMMIT_RE.match(commit):
        commit = None
    scope = (
        "global" if branch is None else "mainline" if branch in MAINLINE_NAMES else "current_branch"
    )
    return GitContext(branch, commit, scope)
