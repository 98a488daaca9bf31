"""Attacks on what a query's entity and actor filters read: reads refuse them, verify reports
them, rebuild repairs them.

``memroot query --entity E`` selects objects by their ``ABOUT_ENTITY`` edges to E's members
(the entities merged into E's primary), and ``--actor A`` by the namespaces' policies and the
``READ`` grants A holds: derived rows. An attacker with write access to the file, in a
process of its own with plain ``sqlite3``, deletes an edge (the object drops out of every
query about the entity), undoes a merge in the entity rows (the merged entity's objects drop
out), deletes the entity's row (the query answers "no such entity"), deletes a grant (the
actor's read drops a namespace) or adds one (another actor is served it). A strict query
refuses each (the log's own ``ASSERT``, ``RELATE``, ``ENTITY_MERGE``, ``NAMESPACE_CREATE`` and
``GRANT`` entries say what the filters select, ``projections.assert_index``); ``memroot
verify`` (step 9) reports each; ``memroot rebuild`` restores the rows.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import memroot
from memroot.cli.main import cli
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from memroot.projections import requests as rq
from memroot.projections.checked import checked_query
from memroot.projections.hook import sync
from memroot.projections.query import Query
from tests.integration._attack import attacker, counts

ALICE, AL = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))
"""Two entities for one person; ``AL`` is merged into ``ALICE``."""
TEA, LYON, BIKE, PLAN = (
    "Alice takes tea without sugar",
    "Al lives in Lyon",
    "Alice rides a bike",
    "The team plans a trip",
)


def _ledger(path: Path) -> Path:
    """Alice's facts: one asserted about ALICE, one about AL (merged), one tied by RELATE; and a
    fact in namespace ``team``, whose policy lets bob READ."""
    me = rq.Actor("agent-7", "AI_AGENT", "alice")
    team = rq.Actor("agent-7", "AI_AGENT", "team")
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        for eid, name in ((ALICE, "Alice"), (AL, "Al")):
            mem.ledger.append(rq.entity_create(me, "PERSON", name, (), eid))
        said = mem.record(content="I take tea; I live in Lyon; I ride a bike").id
        mem.remember(TEA, evidence=[said], entity_ids=[ALICE])
        mem.remember(LYON, evidence=[said], entity_ids=[AL])
        bike = mem.remember(BIKE, evidence=[said]).id
        mem.ledger.append(rq.relate(me, "ABOUT_ENTITY", bike, ALICE))
        mem.ledger.append(rq.entity_merge(me, ALICE, AL))
        mem.ledger.append(rq.namespace_create(team, "PROJECT"))
        for perm in ("ASSERT", "READ"):
            mem.ledger.append(rq.grant(team, "agent-7", perm))
        mem.ledger.append(rq.grant(team, "bob", "READ"))
        mem.remember(PLAN, evidence=[said], namespace="team")
    return path


def _run(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args])


def _values(path: Path, q: Query) -> list[str]:
    """What the strict query gives, after the memory model caught up (as every surface does)."""
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        sync(mem.ledger)
    with (
        memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem,
        mem.ledger.reading(),
    ):
        return sorted(r.object.value for r in checked_query(mem.ledger, q))


ENTITY = Query(entity=ALICE, mode="AUDIT")
BOB = Query(actor="bob", mode="AUDIT")
EVE = Query(actor="eve", mode="AUDIT")


@pytest.mark.parametrize(
    ("sql", "q", "cli_args", "match"),
    [
        pytest.param(
            f"DELETE FROM mem_edges WHERE type = 'ABOUT_ENTITY' AND source_id = "
            f"(SELECT id FROM mem_objects WHERE value = '{TEA}');",
            ENTITY,
            ("--entity", ALICE),
            "left out by the ABOUT_ENTITY edges",
            id="about_entity_edge_deleted",
        ),
        pytest.param(
            f"DELETE FROM mem_edges WHERE type = 'ABOUT_ENTITY' AND source_id = "
            f"(SELECT id FROM mem_objects WHERE value = '{BIKE}');",
            ENTITY,
            ("--entity", ALICE),
            "left out by the ABOUT_ENTITY edges",
            id="related_edge_deleted",
        ),
        pytest.param(
            f"UPDATE mem_entities SET merged_into = NULL WHERE id = '{AL}';",
            ENTITY,
            ("--entity", ALICE),
            "left out by the ABOUT_ENTITY edges",
            id="entity_merge_undone",
        ),
        pytest.param(
            f"DELETE FROM mem_entities WHERE id = '{ALICE}';",
            ENTITY,
            ("--entity", ALICE),
            f"entity {ALICE} has no stored row",
            id="entity_row_deleted",
        ),
        pytest.param(
            "DELETE FROM mem_grants WHERE actor_id = 'bob';",
            BOB,
            ("--actor", "bob"),
            "left out by the namespaces' policies and grants for actor 'bob'",
            id="read_grant_deleted",
        ),
        pytest.param(
            "INSERT INTO mem_grants(branch, namespace_id, actor_id, permission, vfrom, vto, "
            "granted_by) SELECT branch, namespace_id, 'eve', permission, vfrom, vto, granted_by "
            "FROM mem_grants WHERE actor_id = 'bob';",
            EVE,
            ("--actor", "eve"),
            "added by the namespaces' policies and grants for actor 'eve'",
            id="read_grant_added",
        ),
    ],
)
def test_edited_filter_rows_are_refused_reported_and_rebuilt(
    tmp_path: Path, sql: str, q: Query, cli_args: tuple[str, ...], match: str
) -> None:
    """The strict query refuses (library and CLI); verify reports it; rebuild restores it."""
    path = _ledger(tmp_path / "l.ledger")
    honest = _values(path, q)
    assert (
        honest
        == {
            ENTITY: sorted([TEA, LYON, BIKE]),
            BOB: sorted([TEA, LYON, BIKE, PLAN]),
            EVE: sorted([TEA, LYON, BIKE]),
        }[q]
    )
    assert _run(path, "verify").exit_code == 0
    before = counts(path)
    attacker(path, sql)
    with pytest.raises(IntegrityError, match=match):
        _values(path, q)
    refused = _run(path, "query", *cli_args, "--mode", "AUDIT", "--json")
    assert refused.exit_code == 1, refused.output
    assert not any(v in refused.stdout for v in (TEA, LYON, BIKE, PLAN)), refused.output
    found = _run(path, "verify", "--json")
    assert found.exit_code == 1, found.output
    assert any(f["step"] == 9 for f in json.loads(found.stdout)["findings"])
    assert counts(path) == before  # the log itself untouched
    assert _run(path, "rebuild").exit_code == 0
    assert _values(path, q) == honest
    assert _run(path, "verify").exit_code == 0


def test_honest_entity_and_actor_reads_at_every_entry(tmp_path: Path) -> None:
    """No false alarm: entity and actor reads as of each entry serve what the log says."""
    path = _ledger(tmp_path / "l.ledger")
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        size = mem.ledger.size()
        with mem.ledger.reading():
            for as_of in range(size):
                for q in (ENTITY, BOB, EVE, Query(entity=AL, mode="AUDIT")):
                    try:
                        checked_query(mem.ledger, dataclasses.replace(q, as_of=as_of))
                    except memroot.NotFoundError:
                        assert q.entity is not None and as_of < 2  # not created yet
        got = _values(path, Query(entity=AL, mode="AUDIT"))
    assert got == sorted([TEA, LYON, BIKE])  # AL resolves to ALICE's members now


def _bare_grant(path: Path) -> None:
    """Append, without the hooks, a GRANT of READ on ``team`` to eve by mallory (no ADMIN):
    no valid operation, so every replay skips it (it grants nothing)."""
    mallory = rq.Actor("mallory", "AI_AGENT", "team")
    with Ledger.open(path, hooks=()) as bare:
        bare.append(rq.grant(mallory, "eve", "READ"))


def test_skipped_grant_is_no_false_alarm(tmp_path: Path) -> None:
    """A GRANT every replay skips is judged skipped (its skip record confirmed by the log's
    own replay): eve's read serves what it did before, the CLI agrees, verify passes."""
    path = _ledger(tmp_path / "l.ledger")
    _bare_grant(path)
    assert _values(path, EVE) == sorted([TEA, LYON, BIKE])
    r = _run(path, "query", "--actor", "eve", "--mode", "AUDIT")
    assert r.exit_code == 0 and PLAN not in r.stdout, r.output
    assert _run(path, "verify").exit_code == 0


def test_forged_skip_of_an_honest_grant_is_refused(tmp_path: Path) -> None:
    """bob's honest GRANT recorded as skipped and its row deleted: bob's read would drop
    ``team``. The skip record is no replay's, so the read refuses (library and CLI)."""
    path = _ledger(tmp_path / "l.ledger")
    before = counts(path)
    attacker(
        path,
        "INSERT INTO mem_skipped SELECT branch, vfrom, 'GRANT', 'not a valid operation' "
        "FROM mem_grants WHERE actor_id = 'bob'; DELETE FROM mem_grants WHERE actor_id = 'bob';",
    )
    with pytest.raises(IntegrityError, match="left out by the namespaces' policies"):
        _values(path, BOB)
    r = _run(path, "query", "--actor", "bob", "--mode", "AUDIT")
    assert r.exit_code == 1 and PLAN not in r.stdout, r.output
    assert _run(path, "verify").exit_code == 1
    assert counts(path) == before
