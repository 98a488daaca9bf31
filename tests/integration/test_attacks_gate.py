"""Attacks on derived memory, refused by the read gate at every surface that serves memory.

Each test builds the same small ledger through ``memroot.open``, keeps an honest copy,
tampers with the file from another process (plain ``sqlite3``, no memroot code, no key),
then reads through the surface a user touches: ``Memory.recall`` (with a read receipt
asked for), ``Memory.why``, and the MCP ``recall`` tool through the official SDK's client.
Each asserts the refusal (``IntegrityError`` / a tool error naming the strict read), that
nothing tampered was served, that nothing was written (no READ_RECEIPT, no checkpoint), and
that the honest copy still reads.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

import memroot
from memroot.ledger.errors import IntegrityError
from memroot.memory_root.falsify.api import ItemWhy
from tests.integration._attack import attacker, mcp_recall
from tests.integration._attack import counts as sizes


@dataclass
class Story:
    path: Path
    honest: Path
    tea: str
    said_seq: int
    tea_seq: int


@pytest.fixture
def story(tmp_path: Path) -> Story:
    path = tmp_path / "m.ledger"
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        said = mem.record(content="I take my tea without sugar")
        tea = mem.remember("Alice takes tea without sugar", evidence=[said.id])
        other = mem.record(content="I live in Lyon")
        mem.remember("Alice lives in Lyon", evidence=[other.id])
        # The untouched ledger reads: a test cannot pass because reads always fail.
        assert {r.object.value for r in mem.recall()} == {
            "Alice takes tea without sugar",
            "Alice lives in Lyon",
        }
    honest = tmp_path / "honest.ledger"
    shutil.copy(path, honest)
    shutil.copy(path.with_name(path.name + ".key"), honest.with_name(honest.name + ".key"))
    return Story(path, honest, tea.id, said.seq, tea.seq)


def refused_by_recall(s: Story, *, marker: str | None = None) -> None:
    """recall (with a receipt asked for) raises IntegrityError and writes nothing."""
    before = sizes(s.path)
    with memroot.open(s.path, actor="agent-7", namespace="alice", create=False) as mem:
        with pytest.raises(IntegrityError) as e:
            mem.recall(receipt="run-1")
        with pytest.raises(IntegrityError):
            mem.recall()
    if marker is not None:
        assert marker not in str(e.value)
    assert sizes(s.path) == before  # no READ_RECEIPT, no checkpoint signed
    with memroot.open(s.honest, actor="agent-7", namespace="alice", create=False) as mem:
        assert len(mem.recall()) == 2  # the honest copy is untouched and reads


def test_recall_derived_value_edited(story: Story) -> None:
    """An edited derived value is refused by recall and by MCP recall; no receipt written."""
    attacker(
        story.path,
        f"UPDATE mem_objects SET value = 'Alice takes tea with MALLORY sugar' "
        f"WHERE id = '{story.tea}';",
    )
    refused_by_recall(story, marker="MALLORY")
    pytest.importorskip("mcp")
    before = sizes(story.path)
    out = mcp_recall(story.path)
    assert out.is_error and "strict read refused" in out.content[0].text
    assert "MALLORY" not in json.dumps(out.structured_content or {})
    assert sizes(story.path) == before


def test_recall_derived_confidence_edited(story: Story) -> None:
    """An edited derived confidence is refused by recall."""
    attacker(story.path, f"UPDATE mem_objects SET confidence = 0.01 WHERE id = '{story.tea}';")
    refused_by_recall(story)


def test_recall_object_hidden_as_archived(story: Story) -> None:
    """A row hidden by setting its lifecycle_state to ARCHIVED is refused, not dropped."""
    attacker(
        story.path, f"UPDATE mem_objects SET lifecycle_state = 'ARCHIVED' WHERE id = '{story.tea}';"
    )
    refused_by_recall(story)


def test_recall_evidence_event_edited(story: Story) -> None:
    """An edited evidence event's content (its commitment unchanged) is refused by recall."""
    attacker(
        story.path,
        "UPDATE entries SET content = CAST('I take my tea with MALLORY sugar' AS BLOB) "
        f"WHERE k = {(1 << 40) | story.said_seq};",
    )
    refused_by_recall(story, marker="MALLORY")


def test_recall_assert_entry_edited(story: Story) -> None:
    """An edited ASSERT entry (its bytes rewritten, leaf left) is refused by recall."""
    attacker(
        story.path,
        "UPDATE entries SET data = CAST(replace(CAST(data AS TEXT), 'agent-7', 'agent-X') AS BLOB)"
        f" WHERE k = {(1 << 40) | story.tea_seq};",
    )
    refused_by_recall(story)


def test_why_object_row_deleted(story: Story) -> None:
    """why of an object whose rows were deleted (its edges left) is an IntegrityError."""
    attacker(story.path, f"DELETE FROM mem_objects WHERE id = '{story.tea}';")
    with memroot.open(story.path, create=False) as mem, pytest.raises(IntegrityError) as e:
        mem.why(story.tea)
    assert "deleted" in str(e.value)
    with memroot.open(story.honest, create=False) as mem:
        why = mem.why(story.tea)
        assert not isinstance(why, ItemWhy) and why.object.id == story.tea
