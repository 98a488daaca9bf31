"""A PostgreSQL read transaction reads its small tables once; own commits are told from others'.

On the real server: inside one ``REPEATABLE READ`` transaction the branch rows, the snapshot,
the meta rows and the newest checkpoint are read once (``pg_snapshot.Snapshot``) and still
are the snapshot's after another connection commits; ``foreign_token`` stays across this
connection's own commits and moves on anyone else's, an attacker's raw ``UPDATE`` of a
table included. Then the read gate on a long-lived handle: what it kept survives the
handle's own writes (no false alarm) and an entry row edited in PostgreSQL by
an attacker in its own process after a check is refused by the next read.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memroot.ledger.backends.pg import PgStore
from memroot.ledger.entries import EventInput
from memroot.ledger.errors import IntegrityError, NotFoundError
from memroot.ledger.ledger import Ledger


def _init(url: str, key: Path, cache: Path) -> None:
    Ledger.init(url, origin="example.org/pg-read-snapshot", key_path=key, cache_path=cache).close()


def test_a_read_transaction_reads_the_small_tables_once(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    _init(pg_url, pg_key, tmp_path / "a.cache")
    store = PgStore(pg_url)
    other = Ledger.open(pg_url, key_path=pg_key, hooks=[], cache_path=tmp_path / "o.cache")
    try:
        with store.read():
            n = store.db.statements
            main = store.branch("main")
            assert [b.name for b in store.branches()] == ["main"]
            token = store.commit_token()
            assert store.meta("origin") == "example.org/pg-read-snapshot"
            assert store.meta("no such key") is None
            cp = store.latest_checkpoint(main.no)
            assert cp is not None and cp[0] == main.size
            assert store.entry_row(main.no, main.size - 1).hash == main.head  # from the same read
            assert list(store.iter_entry_rows(main.no, main.size)) == []  # past the head
            assert store.db.statements - n == 2  # the meta rows, the checkpoint with its entry
            # Another connection commits while this snapshot is open.
            with other.store.write():
                other.store.set_meta("extra", 1)
                other.store.add_branch("later", b"\0" * 32)
            assert store.meta("extra") is None
            assert [b.name for b in store.branches()] == ["main"]
            assert store.commit_token() == token
        with store.read():  # a new transaction sees the commit
            assert store.meta("extra") == 1
            assert [b.name for b in store.branches()] == ["main", "later"]
            with pytest.raises(NotFoundError, match="no branch named"):
                store.branch("never")
    finally:
        store.close()
        other.close()


def test_foreign_token_moves_on_others_commits_only(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    import psycopg

    _init(pg_url, pg_key, tmp_path / "a.cache")
    store = PgStore(pg_url)
    try:

        def foreign() -> str:
            with store.read():
                return store.foreign_token()

        def own_write() -> None:
            with store.write():
                store.set_meta("mine", 1)

        start = foreign()
        own_write()
        own_write()
        assert foreign() == start  # this connection's commits are its own
        with psycopg.connect(pg_url, autocommit=True) as raw:  # an attacker's raw edit
            raw.execute("UPDATE meta SET value = value WHERE key = 'origin'")
        moved = foreign()
        assert moved != start
        assert foreign() == moved
        with store.write():
            assert store.foreign_token() != store.foreign_token()  # never kept inside a write
    finally:
        store.close()


HOST = r"""
import sys
import memroot
from memroot.ledger.errors import IntegrityError, NotFoundError
url, key = sys.argv[1:3]
with memroot.open(url, key_path=key, trusted=False) as mem, mem.ledger.bulk():
    for i in range(30):
        ev = mem.record(content=f"fact number {i}")
        mem.remember(f"fact {i} holds", evidence=[ev.id])
"""

ATTACKER = r"""
import sys, psycopg
url, needle = sys.argv[1:3]
with psycopg.connect(url, autocommit=True) as db:
    done = db.execute(
        "UPDATE entries SET content = convert_to('MALLORY was here', 'UTF8') "
        "WHERE content = convert_to(%s, 'UTF8')", (needle,))
    assert done.rowcount == 1
"""


def test_entry_edited_in_postgresql_after_a_check_is_refused_by_the_next_read(
    tmp_path: Path, pg_url: str, pg_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memroot

    monkeypatch.setenv("MEMROOT_CACHE", str(tmp_path / "host.cache"))
    _init(pg_url, pg_key, tmp_path / "host.cache")
    subprocess.run([sys.executable, "-c", HOST, pg_url, str(pg_key)], check=True, timeout=180)
    with memroot.open(pg_url, key_path=pg_key, trusted=False) as mem:
        served = [r.object.value for r in mem.recall(limit=20)]
        assert "fact 29 holds" in served
        for i in range(3):  # own writes keep what was checked: no false alarm
            mem.record(content=f"said {i}")
            assert [r.object.value for r in mem.recall(limit=20)] == served
        # The attacker edits a served fact's evidence event in PostgreSQL.
        subprocess.run(
            [sys.executable, "-c", ATTACKER, pg_url, "fact number 29"], check=True, timeout=60
        )
        with pytest.raises(IntegrityError):
            mem.recall(limit=20)


def test_entry_rows_read_again_are_the_stored_rows_after_an_edit(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    """``entry_rows`` asked again compares each row's version (``xmin``, ``ctid``) and fetches
    only a changed row: an ``UPDATE`` by another connection (same bytes or not) is read anew."""
    import psycopg

    _init(pg_url, pg_key, tmp_path / "a.cache")
    with Ledger.open(pg_url, key_path=pg_key, hooks=[], cache_path=tmp_path / "w.cache") as w:
        w.append_batch(
            EventInput(
                stream="s",
                actor_id="a",
                actor_type="HUMAN_USER",
                role="USER",
                content=f"said {i}",
                namespace_id="ns",
            )
            for i in range(3)
        )
    store = PgStore(pg_url)
    try:
        no = store.branch("main").no
        first = store.entry_rows(no, [1, 2, 3])
        n = store.db.statements
        assert store.entry_rows(no, [1, 2, 3]) == first
        assert store.db.statements - n == 1  # the versions only
        with psycopg.connect(pg_url, autocommit=True) as raw:
            raw.execute(
                "UPDATE entries SET content = convert_to('MALLORY', 'UTF8') WHERE k = %s",
                (no << 40 | 2,),
            )
        again = store.entry_rows(no, [1, 2, 3])
        assert again[0] == first[0] and again[2] == first[2]
        assert again[1].content == b"MALLORY" and again[1] != first[1]
    finally:
        store.close()
