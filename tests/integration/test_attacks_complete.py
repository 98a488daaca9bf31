"""Deleted derived rows, refused at read by the completeness check against the memory map.

The same small ledger as ``test_attacks_gate`` (built through ``memroot.open``; an honest
copy kept), tampered with from another process (plain ``sqlite3``, no memroot code, no
key): an object's row deleted together with every edge naming it (so no other derived row
points at it), or moved to another namespace. ``Memory.recall``, ``memroot query`` and the
MCP ``recall`` tool (the official SDK's client) refuse with a strict-read error naming the
namespace; nothing is served or written; the honest copy still reads. Each attack is run
with the map taken from the entries since the genesis (no root yet) and from a root (v3, the
version memroot writes: v2's map, its projection list by one hash).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

import memroot
from memroot.cli.main import cli
from memroot.ledger.errors import IntegrityError
from tests.integration._attack import attacker, mcp_recall
from tests.integration._attack import counts as sizes


@dataclass
class Story:
    path: Path
    honest: Path
    tea: str


def _story(tmp_path: Path, *, snapshot: bool) -> Story:
    path = tmp_path / "m.ledger"
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        said = mem.record(content="I take my tea without sugar")
        tea = mem.remember("Alice takes tea without sugar", evidence=[said.id])
        other = mem.record(content="I live in Lyon")
        mem.remember("Alice lives in Lyon", evidence=[other.id])
    if snapshot:
        r = CliRunner().invoke(cli, ["-l", str(path), "snapshot"], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        db = apsw.Connection(str(path))
        assert db.execute("SELECT v FROM memory_roots").fetchall() == [(3,)]
        db.close()
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        assert len(mem.recall()) == 2  # the untouched ledger reads
    honest = tmp_path / "honest.ledger"
    shutil.copy(path, honest)
    shutil.copy(path.with_name(path.name + ".key"), honest.with_name(honest.name + ".key"))
    return Story(path, honest, tea.id)


@pytest.fixture(params=[False, True], ids=["since-genesis", "v3-root"])
def story(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Story:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    return _story(tmp_path, snapshot=bool(request.param))


def refused_everywhere(s: Story, marker: str = "") -> None:
    """recall, `memroot query` and MCP recall refuse; nothing written; honest copy reads."""
    before = sizes(s.path)
    with memroot.open(s.path, actor="agent-7", namespace="alice", create=False) as mem:
        with pytest.raises(IntegrityError) as e:
            mem.recall(receipt="run-1")
        assert marker in str(e.value)
    r = CliRunner().invoke(
        cli, ["-l", str(s.path), "query", "--namespace", "alice"], catch_exceptions=False
    )
    assert r.exit_code != 0 and "Lyon" not in r.stdout, r.output
    r = CliRunner().invoke(cli, ["-l", str(s.path), "query"], catch_exceptions=False)
    assert r.exit_code != 0 and "Lyon" not in r.stdout, r.output
    assert sizes(s.path) == before  # no READ_RECEIPT, no checkpoint signed
    try:
        import mcp  # noqa: F401
    except ImportError:
        pass
    else:
        out = mcp_recall(s.path)
        assert out.is_error and "strict read refused" in out.content[0].text
        assert "Lyon" not in json.dumps(out.structured_content or {})
        assert sizes(s.path) == before
    with memroot.open(s.honest, actor="agent-7", namespace="alice", create=False) as mem:
        assert len(mem.recall()) == 2


def test_object_row_and_edges_deleted(story: Story) -> None:
    """An object deleted with every derived row naming it is refused (the map holds it)."""
    attacker(
        story.path,
        f"DELETE FROM mem_edges WHERE source_id = '{story.tea}' OR target_id = '{story.tea}';"
        f"DELETE FROM mem_objects WHERE id = '{story.tea}';",
    )
    refused_everywhere(story, "namespace 'alice'")


def test_object_row_moved_to_another_namespace(story: Story) -> None:
    """A row moved out of its namespace is missing from it (and forged in the other);
    the row check may see the edit first, either refusal will do."""
    attacker(story.path, f"UPDATE mem_objects SET namespace_id = 'bob' WHERE id = '{story.tea}';")
    refused_everywhere(story)


def test_honest_ledger_with_branches_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No false alarm: a branch reads its inherited objects and its own, before and after a
    snapshot of each."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    s = _story(tmp_path, snapshot=True)
    with memroot.open(s.path, actor="agent-7", namespace="alice", create=False) as mem:
        side = mem.fork("try a move", branch_type="PLANNING")
        said = mem.record(content="I moved to Paris", branch=side)
        mem.remember("Alice lives in Paris", evidence=[said.id], branch=side)
        assert len(mem.recall(branch=side)) == 3
        assert len(mem.recall()) == 2
    for b in (side, "main"):
        r = CliRunner().invoke(
            cli, ["-l", str(s.path), "snapshot", "-b", b], catch_exceptions=False
        )
        assert r.exit_code == 0, r.output
    with memroot.open(s.path, actor="agent-7", namespace="alice", create=False) as mem:
        assert len(mem.recall(branch=side)) == 3
        assert len(mem.recall()) == 2
    r = CliRunner().invoke(cli, ["-l", str(s.path), "verify"], catch_exceptions=False)
    assert r.exit_code == 0, r.output


def test_open_handle_sees_a_deletion_made_after_a_read(story: Story) -> None:
    """A long-lived handle whose last check held re-checks once the file changed under it."""
    with memroot.open(story.path, actor="agent-7", namespace="alice", create=False) as mem:
        assert len(mem.recall()) == 2
        attacker(
            story.path,
            f"DELETE FROM mem_edges WHERE source_id = '{story.tea}' "
            f"OR target_id = '{story.tea}'; DELETE FROM mem_objects WHERE id = '{story.tea}';",
        )
        with pytest.raises(IntegrityError, match="namespace 'alice'"):
            mem.recall()
