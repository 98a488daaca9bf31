"""The in-memory re-derivation of ``query``'s strict check agrees with the SQL replay.

``check_objects`` re-derives objects served on main with the rules over ``MemState`` (no
tables written); objects on other branches keep the SQL replay. Both must give the same
objects, and an edited derived row must be refused on either path.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

import memroot
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from memroot.projections.query import Query, get_object, query
from memroot.projections.strict_rows import _replay, _replay_main, check_objects


def _story(path: Path) -> list[str]:
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        ids = []
        for i in range(6):
            said = mem.record(content=f"fact {i}")
            ids.append(mem.remember(f"Alice fact {i}", evidence=[said.id]).id)
        mem.recall(text="fact")
    return ids


def test_memory_replay_equals_sql_replay(tmp_path: Path) -> None:
    path = tmp_path / "a.ledger"
    ids = _story(path)
    with Ledger.open(path) as ledger:
        entries = list(ledger.entries())
        fast = _replay_main(entries, ids)
        assert fast is not None and set(fast) == set(ids)
        db = _replay(entries)
        try:
            assert fast == {i: get_object(db, i) for i in ids}
        finally:
            db.close()
        with ledger.store.read():
            served = [r.object for r in query(ledger.store.db, Query(limit=50))]
            assert {o.id for o in served} == set(ids)
            check_objects(ledger, served)  # the untouched rows pass


def test_an_edited_value_is_refused_on_main(tmp_path: Path) -> None:
    path = tmp_path / "a.ledger"
    ids = _story(path)
    db = apsw.Connection(str(path))
    with db:
        db.execute("UPDATE mem_objects SET value = 'Alice takes sugar' WHERE id = ?", (ids[2],))
    db.close()
    with Ledger.open(path) as ledger, ledger.store.read():
        served = [get_object(ledger.store.db, ids[2])]
        with pytest.raises(IntegrityError, match=f"step 9.*{ids[2]}"):
            check_objects(ledger, served)


def test_an_entity_tying_many_objects_does_not_join_their_closures(tmp_path: Path) -> None:
    """Thirty facts about one entity (merged into another after the tenth): each ASSERT
    touches the entity (a version moving ``last_seen_at``). The closure re-deriving one fact
    holds the entities' creation and merge, not the other facts' ASSERTs and events; every
    fact still re-derives (an edited one is still refused)."""
    from memroot.projections import requests as rq
    from memroot.projections.strict_rows import _Closure

    path = tmp_path / "e.ledger"
    me = rq.Actor("agent-7", "AI_AGENT", "alice")
    alice, al = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        for eid in (alice, al):
            mem.ledger.append(rq.entity_create(me, "PERSON", "Alice", (), eid))
        ids = []
        for i in range(30):
            said = mem.record(content=f"fact {i}")
            ids.append(mem.remember(f"fact {i}", evidence=[said.id], entity_ids=[al]).id)
            if i == 9:
                mem.ledger.append(rq.entity_merge(me, alice, al))
        objs = query(mem.ledger.derived.db, Query(mode="AUDIT", limit=100))
    with Ledger.open(path) as ledger, ledger.reading() as db:
        closure = _Closure(ledger, db, "main")
        closure.grow([ids[5]])
        types = sorted(e.type for e in closure.entries())
        assert types.count("ASSERT") == 1, types  # only its own
        assert {"ENTITY_CREATE", "ENTITY_MERGE"} <= set(types), types
        assert len(types) <= 6, types  # two creations, the merge, its ASSERT and event
        check_objects(ledger, [r.object for r in objs], "main")
    edited = apsw.Connection(str(path))
    with edited:
        edited.execute("UPDATE mem_objects SET value = 'edited' WHERE id = ?", (ids[5],))
    edited.close()
    with Ledger.open(path) as ledger, ledger.reading(), pytest.raises(IntegrityError):
        check_objects(ledger, [get_object(ledger.derived.db, ids[5])], "main")
