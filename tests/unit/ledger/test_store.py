"""Tests of ledger.store: transactions that commit whole or not at all, and a robust file."""

from __future__ import annotations

import array
import random
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.backends import store as store_module
from memroot.ledger.backends.store import (
    NODE_MIN_LEVEL,
    SQLITE_SCHEMA_VERSION,
    Store,
    entry_key,
    node_key,
)
from memroot.ledger.errors import NotFoundError, RefusedError, StorageError, ValidationError
from memroot.ledger.hashing import leaf_hash, node_hash
from memroot.ledger.ledger import Ledger


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = Store(tmp_path / "s.db", create=True)
    yield s
    s.close()


def rows(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    tables = ("meta", "branches", "entries", "nodes", "event_ids", "checkpoints")
    return {t: store.db.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables}


def fill(store: Store) -> None:
    """Write a bit of everything the ledger writes, as one transaction body would."""
    b = store.add_branch("main", bytes(32))
    store.insert_entries([(entry_key(b.no, 0), b"h" * 32, b"data", b"d" * 32, b"s" * 32, b"c")])
    store.insert_event_ids([(b"i" * 16, entry_key(b.no, 0))])
    store.insert_nodes([(node_key(b.no, 1, 0), b"n" * 32)])
    store.set_head(b.no, 1, b"h" * 32)
    store.insert_checkpoint(b.no, 1, b"r" * 32, "note\n")
    store.set_meta("origin", "o")


class Boom(Exception):
    pass


def test_write_rollback_leaves_nothing(store: Store) -> None:
    """An exception in a write body rolls back every row it wrote, in every table."""
    before = rows(store)
    with pytest.raises(Boom), store.write():
        fill(store)
        assert rows(store) != before  # the writes really happened inside the transaction
        raise Boom
    assert rows(store) == before
    assert not store.db.in_transaction


def test_write_commits_whole(store: Store, tmp_path: Path) -> None:
    """A write body that returns commits everything, visible to another connection."""
    with store.write():
        fill(store)
    other = Store(tmp_path / "s.db")
    try:
        assert rows(other) == rows(store)
        assert other.branch("main").size == 1
    finally:
        other.close()


def test_nested_write_is_one_transaction(store: Store) -> None:
    """A write inside a write joins it: an error in the outer body undoes the inner one too."""
    before = rows(store)
    with pytest.raises(Boom), store.write():
        with store.write():
            fill(store)
        assert store.db.in_transaction  # the inner block did not commit
        raise Boom
    assert rows(store) == before


def test_nested_write_error_rolls_back_outer(store: Store) -> None:
    """An error inside a nested write reaches the outer one and rolls back all of it."""
    before = rows(store)
    with pytest.raises(Boom), store.write():
        store.set_meta("first", 1)
        with store.write():
            store.set_meta("second", 2)
            raise Boom
    assert rows(store) == before
    with store.write():  # and the store is usable again
        store.set_meta("third", 3)
    assert store.meta("third") == 3


def test_sqlite_error_in_body_is_storage_error(store: Store) -> None:
    """A SQLite failure inside the body is a StorageError and rolls everything back."""
    before = rows(store)
    with pytest.raises(StorageError), store.write():
        store.set_meta("a", 1)
        store.db.execute("INSERT INTO meta VALUES('a', 2)")  # primary key violation
    assert rows(store) == before


def test_disk_full_during_append_writes_nothing(tmp_path: Path, inputs: Any) -> None:
    """A full disk in the middle of a batch append: StorageError, nothing written, then fine."""
    with Ledger.init(tmp_path / "l.db", origin="example.org/full") as ledger:
        ledger.append_batch(inputs.mixed(5))
        size, root = ledger.size(), ledger.root()
        pages = ledger.store.db.execute("PRAGMA page_count").fetchone()[0]
        ledger.store.db.execute(f"PRAGMA max_page_count = {pages + 2}")
        big = [inputs.event(random.Random(i), i, content="x" * 4000) for i in range(40)]
        with pytest.raises(StorageError, match="disk full"):
            ledger.append_batch(big)
        assert (ledger.size(), ledger.root()) == (size, root)
        ledger.store.db.execute("PRAGMA max_page_count = 1000000")
        ledger.append_batch(big)
        assert ledger.size() == size + 40


def test_refused_entry_mid_batch_writes_nothing(tmp_path: Path, inputs: Any) -> None:
    """A refused entry in the middle of a batch leaves no row; the next append is correct."""
    with Ledger.init(tmp_path / "l.db", origin="example.org/batch") as ledger:
        ledger.append_batch(inputs.mixed(7))
        before = rows(ledger.store)
        root = ledger.root()
        bad = inputs.tombstone("01890a5d-ac96-774b-bcce-b302099a8057")  # no such event
        with pytest.raises(RefusedError):
            ledger.append_batch([*inputs.mixed(5, seed=1), bad, *inputs.mixed(3, seed=2)])
        assert rows(ledger.store) == before and ledger.root() == root
        # The in-memory right edge was not advanced by the rolled-back batch.
        ledger.append_batch(inputs.mixed(9, seed=3))
        with Ledger.open(tmp_path / "l.db") as fresh:
            assert fresh.root() == ledger.root()
            assert [e.seq for e in fresh.entries()] == list(range(17))


def test_bulk_rolls_back_every_batch(tmp_path: Path, inputs: Any) -> None:
    """bulk() groups batches: a failure in the third leaves none of them."""
    with Ledger.init(tmp_path / "l.db", origin="example.org/bulk") as ledger:
        before = rows(ledger.store)
        with pytest.raises(ValidationError), ledger.bulk():
            ledger.append_batch(inputs.mixed(10))
            ledger.append_batch(inputs.mixed(10, seed=1))
            ledger.append_batch([inputs.event(random.Random(0), 0, id="not-a-uuid")])
        assert rows(ledger.store) == before


def test_create_refuses_existing_file(tmp_path: Path) -> None:
    """Creating over an existing file is refused and leaves it as it was."""
    path = tmp_path / "x.db"
    path.write_bytes(b"precious")
    with pytest.raises(StorageError, match="refusing to overwrite"):
        Store(path, create=True)
    assert path.read_bytes() == b"precious"


def test_open_missing_file(tmp_path: Path) -> None:
    """Opening a path with no ledger is a StorageError and creates nothing."""
    with pytest.raises(StorageError, match="no ledger"):
        Store(tmp_path / "none.db")
    assert not (tmp_path / "none.db").exists()


def test_open_not_a_database(tmp_path: Path) -> None:
    """A file that is not SQLite is a StorageError, not an apsw error."""
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StorageError):
        Store(path)


def test_open_other_schema_version(tmp_path: Path) -> None:
    """A ledger of another schema version is refused with both versions named."""
    s = Store(tmp_path / "v.db", create=True)
    with s.write():
        s.set_meta("schema_version", SQLITE_SCHEMA_VERSION + 1)
    s.close()
    with pytest.raises(StorageError, match=f"schema version {SQLITE_SCHEMA_VERSION + 1}"):
        Store(tmp_path / "v.db")


def test_wal_and_full_sync(store: Store) -> None:
    """The file runs in WAL mode with synchronous=FULL (a returned commit is on disk)."""
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.db.execute("PRAGMA synchronous").fetchone()[0] == 2


def test_iter_entry_rows_chunks_and_bounds(store: Store) -> None:
    """iter_entry_rows yields [start, stop) of one branch in order, across chunk borders."""
    with store.write():
        a = store.add_branch("main", bytes(32))
        b = store.add_branch("other", bytes(32))
        store.insert_entries(
            [
                (entry_key(no, s), bytes(32), bytes([s]), None, None, None)
                for no in (a.no, b.no)
                for s in range(10)
            ]
        )
    got = [r.seq for r in store.iter_entry_rows(a.no, 2, 9, chunk=3)]
    assert got == list(range(2, 9))
    assert [r.data for r in store.iter_entry_rows(b.no, chunk=4)] == [bytes([s]) for s in range(10)]
    with pytest.raises(NotFoundError):
        store.entry_row(a.no, 10)
    with pytest.raises(NotFoundError):
        store.branch("nope")


def test_read_nodes_missing_is_storage_error(store: Store) -> None:
    """A tree node that must exist but does not is a StorageError naming it."""
    with store.write():
        b = store.add_branch("main", bytes(32))
        store.insert_entries([(entry_key(b.no, 0), b"a" * 32, b"x", None, None, None)])
        store.insert_nodes([(node_key(b.no, 2, 0), b"n" * 32)])
    assert store.read_nodes(b.no, [(2, 0), (0, 0)]) == [b"n" * 32, b"a" * 32]
    with pytest.raises(StorageError, match=r"\(3, 0\)"):
        store.read_nodes(b.no, [(2, 0), (3, 0)])
    # A level-1 node is folded from its two leaves: the missing one is named.
    with pytest.raises(StorageError, match=r"\(0, 1\)"):
        store.read_nodes(b.no, [(1, 0)])


def test_low_nodes_are_folded_from_the_leaves_never_read(store: Store) -> None:
    """Below NODE_MIN_LEVEL a node is its leaves' RFC 9162 hash; a stored row is not read."""
    leaves = [leaf_hash(bytes([i])) for i in range(4)]
    with store.write():
        b = store.add_branch("main", bytes(32))
        store.insert_entries(
            [(entry_key(b.no, i), h, bytes([i]), None, None, None) for i, h in enumerate(leaves)]
        )
        store.insert_nodes([(node_key(b.no, 1, 0), b"n" * 32)])  # a forged level-1 row
    assert NODE_MIN_LEVEL == 2
    assert store.read_nodes(b.no, [(1, 1), (0, 2), (1, 0)]) == [
        node_hash(leaves[2], leaves[3]),
        leaves[2],
        node_hash(leaves[0], leaves[1]),
    ]
    assert store_module._fold_leaves(leaves) == node_hash(
        node_hash(leaves[0], leaves[1]), node_hash(leaves[2], leaves[3])
    )


def test_text_that_is_not_utf8_reads_with_replacement(store: Store) -> None:
    """Stored text that is not UTF-8 (a damaged file) reads as U+FFFD text, not a crash."""
    with store.write():
        store.add_branch("main", bytes(32))
        store.insert_checkpoint(1, 1, bytes(32), "ok\n")
        store.db.execute("UPDATE checkpoints SET note = CAST(X'6f6bff0a' AS TEXT)")
        store.db.execute("INSERT INTO meta VALUES('origin', CAST(X'ff61' AS TEXT))")
        store.db.execute("UPDATE branches SET name = CAST(X'6d61ff6e' AS TEXT)")
    assert store.checkpoints(1) == [(1, bytes(32), "ok\ufffd\n")]
    assert store.latest_checkpoint(1) == (1, bytes(32), "ok\ufffd\n")
    assert store.meta("origin") == "\ufffda"
    assert [b.name for b in store.branches()] == ["ma\ufffdn"]
    assert store.meta("schema_version") == SQLITE_SCHEMA_VERSION  # non-text values unchanged


def test_read_is_a_snapshot(store: Store, tmp_path: Path) -> None:
    """Inside read(), another connection's commit is not seen until the block ends."""
    with store.write():
        store.set_meta("n", 1)
    other = Store(tmp_path / "s.db")
    try:
        with store.read():
            assert store.meta("n") == 1
            with other.write():
                other.set_meta("n", 2)
            assert store.meta("n") == 1
        assert store.meta("n") == 2
    finally:
        other.close()


def test_read_memo_lasts_one_transaction_and_no_own_write(store: Store, tmp_path: Path) -> None:
    """What a read transaction remembers (branches, meta, the newest checkpoint, the rows of
    one entry read, ``data_version``) is the snapshot's: an edit by another process is seen
    by the next transaction, and a row this connection writes inside the same one empties
    the memo at once."""
    import subprocess
    import sys

    with store.write():
        fill(store)
        store.set_meta("n", 1)
    with store.read():
        assert store.meta("n") == 1
        main = store.branches()[0]
        assert store.branch("main") == main
        assert store.latest_checkpoint(main.no) == (1, b"r" * 32, "note\n")
        assert [r.data for r in store.iter_entry_rows(main.no, 0, None, chunk=2)] == [b"data"]
        assert [r.data for r in store.iter_entry_rows(main.no, 0, 1)] == [b"data"]  # remembered
        # The same connection writes a row inside the read: the memo is dropped at once.
        store.db.execute("UPDATE meta SET value = 2 WHERE key = 'n'")
        store.db.execute("UPDATE branches SET size = 7")
        store.db.execute("UPDATE entries SET data = CAST('mine' AS BLOB)")
        assert store.meta("n") == 2
        assert store.branch("main").size == 7 == store.branches()[0].size
        assert [r.data for r in store.iter_entry_rows(main.no, 0, 1)] == [b"mine"]
        store.db.execute("ROLLBACK")
    script = (
        "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); db.executescript("
        "\"UPDATE meta SET value = 3 WHERE key = 'n'; UPDATE branches SET size = 9; "
        "UPDATE checkpoints SET note = 'edited'; UPDATE entries SET data = CAST('evil' AS BLOB)"
        '"); db.commit(); db.close()'
    )
    with store.read():
        assert [r.data for r in store.iter_entry_rows(main.no, 0, None, chunk=2)] == [b"data"]
        version = store.data_version()
        subprocess.run([sys.executable, "-c", script, str(store.path)], check=True)
        assert [r.data for r in store.iter_entry_rows(main.no, 0, 1)] == [b"data"]  # snapshot
        assert store.data_version() == version  # the snapshot's number
    with store.read():  # a new snapshot: the other process's edit, whatever was remembered
        assert store.data_version() != version
        assert store.meta("n") == 3
        assert store.branches()[0].size == 9 == store.branch("main").size
        assert store.latest_checkpoint(main.no) == (1, b"r" * 32, "edited")
        assert [r.data for r in store.iter_entry_rows(main.no, 0, 1)] == [b"evil"]


def test_busy_writer_waits_then_sees_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write blocked by another connection's open write proceeds after it commits."""
    # An earlier CLI test in this process leaves the CLI's lock notice installed, and a write
    # that tells it waits the whole busy timeout (60 s), not this test's 50 ms.
    monkeypatch.setattr(store_module, "lock_wait_notice", None)
    first = Store(tmp_path / "s.db", create=True)
    second = Store(tmp_path / "s.db")
    second.db.set_busy_timeout(50)
    try:
        with first.write():
            first.set_meta("n", 1)
            with pytest.raises(StorageError, match="locked"), second.write():
                pass
        with second.write():
            assert second.meta("n") == 1
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("count", [0, 1, 3, 40, 200])
def test_tree_rows_of_reads_the_branch_and_exactly_the_rows_that_exist(
    store: Store, count: int
) -> None:
    """Few keys (one arm each) and many (IN lists) read the same rows; absent keys are absent."""
    with store.write():
        b = store.add_branch("main", bytes(32))
        store.insert_entries(
            [(entry_key(b.no, s), bytes([s]) * 32, b"x", None, None, None) for s in range(250)]
        )
        store.insert_nodes([(node_key(b.no, 1, i), bytes([i]) * 32) for i in range(125)])
        store.set_head(b.no, 250, bytes(32))
    leaves = [entry_key(b.no, s) for s in range(0, 2 * count, 2)]  # s >= 250 do not exist
    nodes = [node_key(b.no, 1, i) for i in range(count)]  # i >= 125 do not exist
    want = sorted(
        [(0, k, bytes([k & 0xFF]) * 32) for k in leaves if k & 0xFFFF < 250]
        + [(1, k, bytes([i]) * 32) for i, k in enumerate(nodes) if i < 125]
    )
    have, got = store.tree_rows_of("main", leaves, nodes)
    assert have == (250, b.no)
    assert sorted(got) == want
    assert sorted(store.tree_rows(leaves, nodes)) == want
    assert store.tree_rows_of("nope", leaves, nodes)[0] is None


def test_entry_rows_of_a_run_are_the_rows_of_its_keys(store: Store) -> None:
    """A run of seqs read as one range gives exactly the rows the keys name (gaps left out,
    the next branch's rows never), as scattered seqs do."""
    with store.write():
        store.insert_entries(
            (entry_key(no, s), bytes([s]) * 32, bytes([no, s]), None, None, None)
            for no in (1, 2)
            for s in range(10)
            if (no, s) != (1, 5)
        )
    with store.read():
        run = store.entry_rows(1, list(range(3, 10)))
        assert [r.seq for r in run] == [3, 4, 6, 7, 8, 9]
        assert all(r.data == bytes([1, r.seq]) for r in run)
        assert run == store.entry_rows(1, [3, 4, 6, 7, 8, 9])  # not a run: key by key
        assert store.entry_rows(1, [8, 9]) == [r for r in run if r.seq >= 8]
        assert [r.seq for r in store.entry_rows(2, [0, 1])] == [0, 1]


def test_packed_rows_store_what_the_row_inserts_store(tmp_path: Path) -> None:
    """insert_entry_pack / insert_event_pack / insert_node_pack write the tuples' very rows."""
    rng = random.Random(5)
    no = 1  # the first branch of a new file
    entries = []
    for i in range(300):
        hash_, data = rng.randbytes(32), rng.randbytes(rng.randrange(1, 400))
        digest, salt, content = (
            rng.randbytes(32),
            rng.randbytes(32),
            rng.randbytes(rng.randrange(50)),
        )
        entries.append((entry_key(no, i), hash_, data, digest, salt, content))
    events = sorted((rng.randbytes(16), entry_key(no, i)) for i in range(300))
    nodes = [(node_key(no, 2 + i % 3, i), rng.randbytes(32)) for i in range(90)]
    packed = [store_module.pack_entry_row(h, d, g, t, c) for _, h, d, g, t, c in entries]
    unpacked = [
        store_module.unpack_entry_row(r[0], p) for r, p in zip(entries, packed, strict=True)
    ]
    assert unpacked == entries
    written = []
    for name in ("tuples", "packed"):
        s = Store(tmp_path / f"{name}.db", create=True)
        with s.write():
            assert s.add_branch("main", bytes(32)).no == no
            if name == "tuples":
                s.insert_entries(entries)
                s.insert_event_ids(events)
                s.insert_nodes(nodes)
            else:
                s.insert_entry_pack(entry_key(no, 0), packed)
                keys = array.array("q", [k for _, k in events]).tobytes()
                s.insert_event_pack(b"".join(i for i, _ in events), keys)
                keys = array.array("q", [k for k, _ in nodes]).tobytes()
                s.insert_node_pack(keys, b"".join(h for _, h in nodes))
                s.insert_entry_pack(entry_key(no, 300), [])  # nothing to insert: no statement
                s.insert_event_pack(b"", b"")
                s.insert_node_pack(b"", b"")
        written.append(rows(s))
        # An empty content is an empty blob, as the tuples store it, never NULL.
        query = "SELECT count(*) FROM entries WHERE typeof(content) != 'blob'"
        assert s.db.execute(query).fetchone() == (0,)
        s.close()
    assert any(not e[5] for e in entries)
    assert written[0] == written[1]


def test_a_packed_row_refuses_what_it_cannot_hold() -> None:
    """pack_entry_row refuses a hash of the wrong size; unpack_keyed keys and values that differ."""
    with pytest.raises(ValueError, match="32 bytes"):
        store_module.pack_entry_row(b"h", b"d", bytes(32), bytes(32), b"")
    with pytest.raises(ValueError, match="2 keys"):
        store_module.unpack_keyed(bytes(16), bytes(16), 16)
