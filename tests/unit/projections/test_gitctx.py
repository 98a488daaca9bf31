"""Git context on entries (no remote, no identity) and seed 003's branch-aware ranking."""

from __future__ import annotations

from pathlib import Path

import pytest

from memroot.ledger.entries import EventInput
from memroot.ledger.errors import ValidationError
from memroot.ledger.ledger import Ledger
from memroot.projections.gitctx import (
    GitContext,
    GitContextHook,
    branch_affinity,
    branch_score,
    context_of,
    parse_git_context,
    read_git_head,
)


def test_affinity_table():
    """Same branch 1.0, inherited 0.6, mainline 0.5, global/none 0.3, unrelated 0.1."""
    cur = "feature/x"
    assert branch_affinity(GitContext("feature/x", None, "current_branch"), cur) == 1.0
    assert branch_affinity(GitContext("feature/base", None, "inherited_branch"), cur) == 0.6
    assert branch_affinity(GitContext("main", None, "mainline"), cur) == 0.5
    assert branch_affinity(GitContext(None, None, "global"), cur) == 0.3
    assert branch_affinity(None, cur) == 0.3
    assert branch_affinity(GitContext("feature/y", None, "current_branch"), cur) == 0.1


def test_score_formula_and_fallback():
    """The weighted formula applies with a current branch; without one the base is kept."""
    node = GitContext("feature/x", "abc1234", "current_branch")
    assert branch_score(0.8, node, None) == 0.8
    want = 0.35 * 0.8 + 0.20 * 1.0 + 0.15 * 1.0 + 0.10 * 0.0 + 0.10 * 0.5 + 0.10 * 1.0
    assert branch_score(0.8, node, "feature/x") == pytest.approx(want)
    stale = branch_score(0.8, node, "feature/x", revision_valid=False)
    assert stale == pytest.approx(want - 0.15)
    other = branch_score(0.8, GitContext("main", None, "mainline"), "feature/x")
    assert other < want


def test_current_branch_context_ranks_first():
    """Given a current branch, its own memory outranks mainline, global and unrelated ones."""
    nodes = {
        "mine": GitContext("feature/x", None, "current_branch"),
        "main": GitContext("main", None, "mainline"),
        "global": None,
        "other": GitContext("feature/y", None, "current_branch"),
    }
    ranked = sorted(nodes, key=lambda k: -branch_score(0.5, nodes[k], "feature/x"))
    # Taken literally, the seed's formula keeps a node's write-time scope priority, so an
    # unrelated branch's node (affinity 0.1, scope 1.0) edges out a global one (0.3, 0.3).
    assert ranked == ["mine", "main", "other", "global"]


@pytest.mark.parametrize(
    "bad",
    [
        {"remote": "git@github.com:me/repo.git"},
        {"branch": "x", "author_email": "me@example.org"},
        {"branch": "https://example.org/repo"},
        {"branch": "user@host"},
        {"commit": "XYZ"},
        {"branch": "x", "branch_scope": "everywhere"},
    ],
)
def test_no_remote_or_identity_is_ever_stored(tmp_path: Path, bad: dict):
    """A git context with a remote, an identity or a malformed field is refused at append."""
    with pytest.raises(ValidationError):
        parse_git_context(bad)
    path = tmp_path / "g.ledger"
    Ledger.init(path, hooks=[GitContextHook()]).close()
    with Ledger.open(path, hooks=[GitContextHook()]) as ledger:
        size = ledger.size()
        with pytest.raises(ValidationError):
            ledger.append(
                EventInput(
                    stream="s",
                    actor_id="a",
                    actor_type="AI_AGENT",
                    role="TOOL",
                    content="x",
                    namespace_id="ns",
                    context={"git": bad},
                )
            )
        assert ledger.size() == size


def test_context_recorded_per_entry(tmp_path: Path):
    """A valid git context is stored with the entry and read back by (branch, seq)."""
    path = tmp_path / "g.ledger"
    Ledger.init(path, hooks=[GitContextHook()]).close()
    with Ledger.open(path, hooks=[GitContextHook()]) as ledger:
        a = ledger.append(
            EventInput(
                stream="s",
                actor_id="a",
                actor_type="AI_AGENT",
                role="TOOL",
                content="x",
                namespace_id="ns",
                context={"git": {"branch": "feature/x", "commit": "3f2a9c1"}},
            )
        )
        got = context_of(ledger.store.db, a.branch, a.seq)
        assert got == GitContext("feature/x", "3f2a9c1", "current_branch")
        assert context_of(ledger.store.db, a.branch, 0) is None


def test_read_git_head_reads_only_head_and_ref(tmp_path: Path):
    """The working branch and short commit come from .git/HEAD and the ref file."""
    git = tmp_path / ".git"
    (git / "refs" / "heads" / "feature").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/feature/x\n")
    (git / "refs" / "heads" / "feature" / "x").write_text(
        "3f2a9c1d00aa11bb22cc33dd44ee55ff66778899\n"
    )
    (git / "config").write_text('[remote "origin"]\n\turl = git@example.org:secret.git\n')
    ctx = read_git_head(tmp_path)
    assert ctx == GitContext("feature/x", "3f2a9c1d00aa", "current_branch")
    assert read_git_head(tmp_path / "nope") is None
