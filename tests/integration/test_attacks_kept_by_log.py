"""What the log says a filter selects is kept across events; the page served is checked anew.

The read gate asks the log what a query's entity and actor select (``checked._by_log``) and
what a read at an anchor gives on the log's replay (``checked._replayed_answer``); both are
functions of the log's operations alone, so an open handle keeps the answer while other
connections append only events (``checked._kept_by_log``) and asks again once an operation is
appended. The page served is compared with the log's answer on every read. Each test keeps
one handle open and reads, lets another agent commit in a process of its own (an honest
memroot handle), and for the attacks lets an attacker in its own process (plain ``sqlite3``,
no memroot code, no key) edit a derived row: the open handle refuses the edit though the
log's answer was kept; an operation another agent appends is served with no false alarm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import memroot
from memroot.ledger.errors import IntegrityError
from memroot.projections import checked
from memroot.projections.checked import checked_query
from memroot.projections.hook import sync
from memroot.projections.query import Query
from tests.integration import test_attacks_anchor as anchor_story
from tests.integration import test_attacks_entity_actor as entity_story
from tests.integration._attack import attacker, counts, other_agent

ALICE, TEA, BOB = entity_story.ALICE, entity_story.TEA, entity_story.BOB


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each time the log itself is asked (not a kept answer)."""
    calls: list[str] = []
    by_log, replayed = checked._by_log_now, checked.replayed_model

    def asked_by_log(*args: Any) -> Any:
        calls.append("by_log")
        return by_log(*args)

    def asked_replay(*args: Any) -> Any:
        calls.append("replay")
        return replayed(*args)

    monkeypatch.setattr(checked, "_by_log_now", asked_by_log)
    monkeypatch.setattr(checked, "replayed_model", asked_replay)
    return calls


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[tuple[Path, Callable[[Query], list[str]]]]:
    """The entity/actor story's ledger, and a reader of one handle kept open."""
    path = entity_story._ledger(tmp_path / "l.ledger")
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:

        def read(q: Query) -> list[str]:
            sync(mem.ledger)
            with mem.ledger.reading():
                return sorted(r.object.value for r in checked_query(mem.ledger, q))

        yield path, read


ENTITY = Query(entity=ALICE, mode="AUDIT")


def test_events_keep_the_answer_an_operation_asks_again(
    opened: tuple[Path, Callable[[Query], list[str]]], asked: list[str]
) -> None:
    """Another agent's events: the log is not asked again. Its ASSERT about the entity (an
    operation): asked again, and the new fact is served (no false alarm)."""
    path, read = opened
    honest = read(ENTITY)
    assert asked == ["by_log"]
    for word in ("hello", "how are you"):
        other_agent(path, f"mem.record(content={word!r})")
        assert read(ENTITY) == honest
    assert asked == ["by_log"]
    other_agent(
        path,
        "ev = mem.record(content='I like jazz')\n"
        f"mem.remember('Alice likes jazz', evidence=[ev.id], entity_ids=[{ALICE!r}])",
    )
    assert read(ENTITY) == sorted([*honest, "Alice likes jazz"])
    assert asked == ["by_log", "by_log"]


@pytest.mark.parametrize(
    ("sql", "q", "match"),
    [
        pytest.param(
            "DELETE FROM mem_edges WHERE type = 'ABOUT_ENTITY' AND source_id = "
            f"(SELECT id FROM mem_objects WHERE value = '{TEA}');",
            ENTITY,
            "left out by the ABOUT_ENTITY edges",
            id="about_entity_edge_deleted",
        ),
        pytest.param(
            "DELETE FROM mem_grants WHERE actor_id = 'bob';",
            BOB,
            "left out by the namespaces' policies and grants for actor 'bob'",
            id="read_grant_deleted",
        ),
    ],
)
def test_an_edit_after_events_is_refused_though_the_answer_was_kept(
    opened: tuple[Path, Callable[[Query], list[str]]],
    asked: list[str],
    sql: str,
    q: Query,
    match: str,
) -> None:
    """The page served is checked against the kept answer: an edge or grant deleted by the
    attacker after another agent's event is refused; nothing is written."""
    path, read = opened
    honest = read(q)
    other_agent(path, "mem.record(content='hello')")
    assert read(q) == honest
    other_agent(path, "mem.record(content='how are you')")
    before = counts(path)
    attacker(path, sql)
    with pytest.raises(IntegrityError, match=match):
        read(q)
    assert asked == ["by_log"]  # refused on the kept answer
    assert counts(path) == before


def test_an_anchor_edit_after_events_is_refused_and_an_operation_is_served(
    tmp_path: Path, asked: list[str]
) -> None:
    """A read at an anchor: the replay's answer is kept across another agent's events, a
    parent link the attacker cuts after one is refused, and a fact another agent asserts on
    the anchor's path (an operation) is served with no false alarm."""
    path = tmp_path / "l.ledger"
    ids = anchor_story._story(path)
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:

        def at() -> list[str]:
            return sorted(r.object.value for r in mem.recall(anchor=ids["turn"]))

        honest = at()
        assert honest == [anchor_story.LYON, TEA]
        other_agent(path, "mem.record(content='hello')")
        assert at() == honest
        assert asked == ["replay"]
        other_agent(
            path,
            f"mem.remember('Alice drinks it hot', evidence=[{ids['root']!r}])",
        )
        assert at() == sorted([*honest, "Alice drinks it hot"])
        assert asked == ["replay", "replay"]
        other_agent(path, "mem.record(content='how are you')")
        attacker(path, f"UPDATE conv_parents SET parent = NULL WHERE id = '{ids['turn']}';")
        with pytest.raises(IntegrityError, match="left out by the read at anchor"):
            at()
        assert asked == ["replay", "replay"]
