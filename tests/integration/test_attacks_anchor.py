"""Attacks on what a read at a conversation anchor rests on: reads refuse them, verify
reports them, rebuild repairs them.

A read at an anchor (``Memory.recall(anchor=E)``, ``memroot query --anchor E``) serves the
objects whose evidence lies on E's ancestor path, each in its state at E: its candidates come
from the ``DERIVED_FROM`` edges, the path from the conversation's parent links
(``conv_parents``), the states from the gated rows (``mem_gated``), all derived. An attacker
with write access to the file, in a process of its own with plain ``sqlite3``, deletes an
edge (the fact drops out of the anchor's reads), cuts a parent link (the path loses the
event the fact cites), or moves a deprecation's provenance onto the path (the fact reads
deprecated there and a DEFAULT read drops it). The read gate answers the same read on the
log's own replay (``strict_rows.replayed_model``) and refuses each; verify (step 9) reports
each; rebuild restores the rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import memroot
from memroot.cli.main import cli
from memroot.ledger.errors import IntegrityError
from memroot.projections import requests as rq
from tests.integration._attack import attacker, counts

TEA, LYON = "Alice takes tea without sugar", "Alice lives in Lyon"


def _story(path: Path) -> dict[str, str]:
    """A conversation: root -> turn, root -> aside. TEA cites the root, LYON the turn; LYON
    is deprecated with the aside as its evidence (off the turn's path: still ACTIVE there)."""
    me = rq.Actor("agent-7", "AI_AGENT", "alice")
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        root = mem.record(content="I take my tea without sugar").id
        turn = mem.record(content="I live in Lyon", parent=root).id
        aside = mem.record(content="actually I moved", parent=root).id
        tea = mem.remember(TEA, evidence=[root]).id
        lyon = mem.remember(LYON, evidence=[turn]).id
        mem.ledger.append(rq.deprecate(me, lyon, "moved", evidence_ids=[aside]))
    return {"root": root, "turn": turn, "aside": aside, "tea": tea, "lyon": lyon}


def _at(path: Path, anchor: str) -> list[str]:
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        return sorted(r.object.value for r in mem.recall(anchor=anchor))


def _run(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args])


ATTACKS = {
    "derived_from_edge_deleted": (
        "DELETE FROM mem_edges WHERE type = 'DERIVED_FROM' AND source_id = '{tea}';",
        "left out by the read at anchor",
    ),
    "parent_link_cut": (
        "UPDATE conv_parents SET parent = NULL WHERE id = '{turn}';",
        "left out by the read at anchor",
    ),
    "deprecation_moved_onto_the_path": (
        "UPDATE mem_gated SET prov = replace(prov, '{aside}', '{turn}') "
        "WHERE object_id = '{lyon}' AND op_type = 'DEPRECATE';",
        "left out by the read at anchor",
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_edited_anchor_rows_are_refused_reported_and_rebuilt(tmp_path: Path, attack: str) -> None:
    """The anchored read refuses (facade and CLI); verify reports it; rebuild restores it."""
    path = tmp_path / "l.ledger"
    ids = _story(path)
    assert _at(path, ids["turn"]) == [LYON, TEA]  # the deprecation is not on this path
    assert _at(path, ids["aside"]) == [TEA]
    assert _run(path, "verify").exit_code == 0
    before = counts(path)
    sql, match = ATTACKS[attack]
    attacker(path, sql.format(**ids))
    with pytest.raises(IntegrityError, match=match):
        _at(path, ids["turn"])
    refused = _run(path, "query", "--anchor", ids["turn"], "--json")
    assert refused.exit_code == 1, refused.output
    assert TEA not in refused.stdout and LYON not in refused.stdout
    found = _run(path, "verify", "--json")
    assert found.exit_code == 1, found.output
    assert any(f["step"] == 9 for f in json.loads(found.stdout)["findings"])
    assert counts(path) == before
    assert _run(path, "rebuild").exit_code == 0
    assert _at(path, ids["turn"]) == [LYON, TEA]
    assert _run(path, "verify").exit_code == 0


def test_anchor_event_row_deleted_is_refused(tmp_path: Path) -> None:
    """The anchor's own event row deleted: the derived rows say "no such anchor"; the log's
    replay has it, so the read refuses instead of answering not found."""
    path = tmp_path / "l.ledger"
    ids = _story(path)
    attacker(path, f"DELETE FROM mem_events WHERE id = '{ids['turn']}';")
    with pytest.raises(IntegrityError, match="is not there, but the log's replay has it"):
        _at(path, ids["turn"])
    assert _run(path, "query", "--anchor", ids["turn"]).exit_code == 1


def test_unknown_anchor_is_not_found(tmp_path: Path) -> None:
    """An anchor no log has is answered not found, as before (no false alarm)."""
    path = tmp_path / "l.ledger"
    _story(path)
    with pytest.raises(memroot.NotFoundError):
        _at(path, "0190a0a0-0000-7000-8000-000000000000")
