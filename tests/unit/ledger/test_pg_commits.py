"""Telling this connection's own commits from others' by PostgreSQL snapshots (``Commits``).

A snapshot ``xmin:xmax:xip`` says which transaction ids have ended; between two snapshots
the ids that ended are exactly known. ``foreign`` must move whenever one of them is not an
id this connection committed, and stay when every one is (the read gate's kept checks
survive own writes and nothing else). A property test draws random histories of own and
other transactions over a model of PostgreSQL's snapshots.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memroot.ledger.backends.pg_snapshot import Commits, parse_snapshot


def test_parse_snapshot() -> None:
    assert parse_snapshot("10:20:12,15") == (10, 20, frozenset({12, 15}))
    assert parse_snapshot("7:7:") == (7, 7, frozenset())
    with pytest.raises(ValueError):
        parse_snapshot("not a snapshot")


def test_own_commits_keep_foreign_others_move_it() -> None:
    c = Commits()
    c.observe("100:100:")
    first = c.foreign
    c.committed(100)  # this connection's write
    c.observe("101:101:")
    assert c.foreign == first and c.mine == 1
    c.observe("101:101:")  # nothing happened
    assert c.foreign == first
    c.observe("102:102:")  # transaction 101 ended: not ours
    assert c.foreign == first + 1


def test_a_transaction_running_at_the_last_snapshot_counts_when_it_ends() -> None:
    c = Commits()
    c.observe("100:103:101")  # 101 still running; 100 and 102 ended before
    first = c.foreign
    c.committed(103)
    c.observe("101:104:101")  # only our 103 ended
    assert c.foreign == first
    c.observe("104:104:")  # 101 (another's) ended
    assert c.foreign == first + 1


def test_a_write_without_an_id_and_an_older_snapshot() -> None:
    c = Commits()
    c.observe("50:50:")
    c.committed(None)  # a write transaction that wrote nothing: no id, no snapshot moves
    c.observe("50:50:")
    first = c.foreign
    c.observe("40:40:")  # not a later snapshot: assume another's commit
    assert c.foreign == first + 1


def test_many_new_ids_are_others_without_listing_them() -> None:
    c = Commits()
    c.observe("1:1:")
    first = c.foreign
    c.committed(1)
    c.observe(f"{10**9}:{10**9}:")
    assert c.foreign == first + 1


@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=40))
def test_foreign_moves_exactly_when_another_transaction_ended(
    steps: list[tuple[bool, bool]],
) -> None:
    """Each step starts a transaction (own or another's) and maybe ends the oldest running
    other one; after it a snapshot is observed. ``foreign`` moves iff another's ended."""
    c = Commits()
    next_id = 100
    running: list[int] = []  # others' transactions still open
    c.observe(f"{next_id}:{next_id}:")
    for own, end_other in steps:
        ended_other = False
        if own:
            c.committed(next_id)  # begun and committed before the next snapshot
        else:
            running.append(next_id)
        next_id += 1
        if end_other and running:
            running.pop(0)
            ended_other = True
        before = c.foreign
        xmin = min(running, default=next_id)
        c.observe(f"{xmin}:{next_id}:{','.join(map(str, running))}")
        assert (c.foreign != before) == ended_other
