"""The PostgreSQL ledger: same bytes as SQLite, one gap-free chain under concurrent writers,
nothing half-written after a kill, and clear errors."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from memroot.ledger import _appending as appending_module
from memroot.ledger import keys as keys_module
from memroot.ledger import ledger as ledger_module
from memroot.ledger.backends.store import node_key
from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.errors import KeyFileError, StorageError
from memroot.ledger.ledger import Ledger
from memroot.ledger.signing import Ed25519Signer
from memroot.ledger.trust import TrustedState
from memroot.ledger.verify import verify_path

ORIGIN = "example.org/memroot-pg"


def _event(i: int, **over: Any) -> EventInput:
    fields: dict[str, Any] = {
        "stream": f"s{i % 3}",
        "actor_id": "agent-7",
        "actor_type": "AI_AGENT",
        "role": "USER" if i % 2 else "ASSISTANT",
        "content": f"message {i} " + "x" * (i % 50),
        "namespace_id": "ns",
    }
    if i % 4 == 0:
        fields["metadata"] = {"n": i, "tags": ["a", "b"]}
    fields.update(over)
    return EventInput(**fields)


def _op(i: int, **over: Any) -> OpInput:
    fields: dict[str, Any] = {
        "op_type": "ENTITY_CREATE",
        "actor_id": "extractor",
        "actor_type": "AI_AGENT",
        "namespace_id": "ns",
        "payload": {"entity_type": "PERSON", "canonical_name": f"entity {i}", "aliases": []},
        "policy_version": "policy/1",
    }
    fields.update(over)
    return OpInput(**fields)


@pytest.fixture
def deterministic(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make ids, timestamps and keys a function of call order (reset by calling it)."""

    def reset() -> None:
        clock = itertools.count(1_780_000_000_000_000, 1000)
        ids = itertools.count(1)
        seeds = itertools.count(1)

        def new_uuid() -> str:
            return str(uuid.UUID(int=(0x0190 << 112) | (7 << 76) | (2 << 62) | next(ids)))

        salt = itertools.count(1)
        monkeypatch.setattr(appending_module, "now_us", lambda: next(clock))
        monkeypatch.setattr(appending_module.os, "urandom", lambda n: bytes([next(salt) % 251]) * n)
        monkeypatch.setattr(ledger_module, "new_uuid", new_uuid)
        monkeypatch.setattr(appending_module, "new_uuids", lambda n: [new_uuid() for _ in range(n)])
        monkeypatch.setattr(
            Ed25519Signer,
            "generate",
            classmethod(lambda cls, name: cls.from_seed(name, bytes([next(seeds)]) * 32)),
        )

    return reset


def _build(target: Path | str, key: Path) -> None:
    """The same inputs, whatever the backend: events, ops, a fork, erasure, a rotation."""
    with Ledger.init(target, origin=ORIGIN, key_path=key, snapshot_every=7, hooks=()) as ledger:
        first = ledger.append_batch([_event(i) for i in range(40)])
        ledger.append_batch([_op(i) for i in range(10)])
        ledger.checkpoint()
        create = OpInput(
            op_type="BRANCH_CREATE",
            actor_id="planner",
            actor_type="AI_AGENT",
            namespace_id="ns",
            payload={"branch_id": "sim-1"},
            policy_version="policy/1",
        )
        ledger.fork(create, genesis={"branch_type": "SIMULATION"})
        ledger.append_batch([_event(100 + i) for i in range(15)], branch="sim-1")
        ledger.checkpoint("sim-1")
        tomb = OpInput(
            op_type="TOMBSTONE",
            actor_id="dpo",
            actor_type="HUMAN_USER",
            namespace_id="ns",
            policy_version="policy/1",
            payload={"target_event_id": first[3].id, "reason": "erasure", "policy_ref": "gdpr"},
        )
        ledger.append(tomb)
        keys_module.rotate_key(ledger)
        ledger.append_batch([_event(200 + i) for i in range(5)])
        ledger.checkpoint()


def _dump(target: Path | str, key: Path) -> dict[str, Any]:
    """Everything that must match byte for byte, read through the public API."""
    out: dict[str, Any] = {}
    with Ledger.open(target, key_path=key, hooks=(), readonly=True) as ledger:
        for b in ledger.store.branches():
            rows = list(ledger.store.iter_entry_rows(b.no))
            out[b.name] = {
                "size": b.size,
                "head": b.head.hex(),
                "entries": [(r.seq, r.hash.hex(), r.data.hex(), r.erased_by) for r in rows],
                "content": [None if r.content is None else r.content.hex() for r in rows],
                "roots": [ledger.root(s, b.name).hex() for s in range(1, b.size + 1)],
                "checkpoints": ledger.checkpoints(b.name),
            }
        out["vkey"] = ledger.vkey()
    return out


def _report(target: Path | str, trusted: Path) -> dict[str, Any]:
    report = verify_path(target, trusted=TrustedState(trusted)).to_json()
    return report


def test_differential_sqlite_and_postgres(tmp_path: Path, pg_url: str, deterministic: Any) -> None:
    """The same inputs give the same entries, leaf hashes, roots, checkpoints and report."""
    deterministic()
    _build(tmp_path / "a.ledger", tmp_path / "a.key")
    deterministic()
    _build(pg_url, tmp_path / "b.key")
    lite = _dump(tmp_path / "a.ledger", tmp_path / "a.key")
    pg = _dump(pg_url, tmp_path / "b.key")
    assert lite["main"]["size"] > 55 and lite["sim-1"]["size"] == 16
    assert any(e[3] is not None for e in lite["main"]["entries"])  # the erasure happened
    for name in ("main", "sim-1"):
        for a, b in zip(lite[name]["entries"], pg[name]["entries"], strict=True):
            assert a == b, (name, a[0])
    assert pg == lite
    assert (tmp_path / "a.key").read_bytes() == (tmp_path / "b.key").read_bytes()
    a = _report(tmp_path / "a.ledger", tmp_path / "ta.json")
    b = _report(pg_url, tmp_path / "tb.json")
    assert a["ok"] and b == a


def test_copy_snapshot_is_a_ledger_file(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """``copy_snapshot`` writes an ordinary ledger file with the same rows (verify uses it)."""
    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key) as ledger:
        ledger.append_batch([_event(i) for i in range(30)])
        ledger.store.copy_snapshot(tmp_path / "copy.ledger")
        root = ledger.root()
    with Ledger.open(tmp_path / "copy.ledger", hooks=(), readonly=True) as copy:
        assert copy.size() == 31 and copy.root() == root
        assert copy.checkpoints() == Ledger.open(pg_url, key_path=pg_key).checkpoints()
    assert verify_path(tmp_path / "copy.ledger").ok


def test_copy_snapshot_leaves_level_1_rows_behind(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    """PostgreSQL's level-1 nodes rows are not copied into a SQLite file (layout version 3).

    PostgreSQL keeps them, keyed by level (its layout, FORMAT.md 4); a SQLite file of layout
    version 3 holds none (verify's step 5 reports one there) and keys the others by the tree
    size that completes them.
    """
    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key) as ledger:
        ledger.append_batch([_event(i) for i in range(30)])
        stored = [int(r[0]) for r in ledger.store.db.execute("SELECT k FROM nodes")]
        assert {k >> 42 & 63 for k in stored} == {1, 2, 3, 4}
        ledger.store.copy_snapshot(tmp_path / "copy.ledger")
        root = ledger.root()
    with Ledger.open(tmp_path / "copy.ledger", hooks=(), readonly=True) as copy:
        assert copy.root() == root
        keys = [k for (k,) in copy.store.db.execute("SELECT k FROM nodes ORDER BY k")]
        rekeyed = sorted(
            node_key(k >> 48, k >> 42 & 63, k & ((1 << 42) - 1))
            for k in stored
            if k >> 42 & 63 >= 2
        )
        assert keys == rekeyed  # each row of level >= 2, keyed by the size that completes it
    assert verify_path(tmp_path / "copy.ledger").ok


_WRITER = """
import json, sys
from pathlib import Path
from memroot.ledger.entries import EventInput
from memroot.ledger.ledger import Ledger
url, key, n, batches, batch = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
branch = sys.argv[6] if len(sys.argv) > 6 else "main"
ids = []
with Ledger.open(url, key_path=Path(key)) as ledger:
    for b in range(batches):
        done = ledger.append_batch(branch=branch, items=[
            EventInput(stream=f"w{n}", actor_id="a", actor_type="AI_AGENT", role="USER",
                       content=f"writer {n} item {i}", namespace_id="ns")
            for i in range(b * batch, (b + 1) * batch)
        ])
        ids += [a.id for a in done if a.type == "EVENT"]  # not the automatic SNAPSHOT
print(json.dumps(ids))
"""


def test_eight_writers_one_gap_free_chain(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """8 processes appending batches at once leave one contiguous chain that verifies."""
    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key):
        pass
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), pg_url, str(pg_key), str(n), "6", "25"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(8)
    ]
    results = {}
    for n, p in enumerate(procs):
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        results[n] = json.loads(out)
    with Ledger.open(pg_url, key_path=pg_key) as ledger:
        # With the default hooks (their state in the writers' one cache file): the
        # events, and the automatic SNAPSHOT the memory roots take every 1000 entries.
        kinds = [e.type for e in ledger.entries()]
        assert kinds.count("EVENT") == 8 * 6 * 25 and kinds.count("SNAPSHOT") == 1
        assert ledger.size() == 1 + 8 * 6 * 25 + 1
        seen = [e.seq for e in ledger.entries()]
        assert seen == list(range(ledger.size()))
        for n, ids in results.items():
            assert len(ids) == 150
            assert all(ledger.find_event(i) is not None for i in ids), n
        # the batches interleaved: more than one writer's batch between two of another's
        streams = [e.body.get("stream") for e in ledger.entries() if e.type == "EVENT"]
        assert len({streams[i] for i in range(0, len(streams), 25)}) == 8
        with ledger.reading() as db:  # the cache applied every entry, in chain order
            assert db.execute("SELECT count(*) FROM mem_events").fetchone() == (1200,)
            assert db.execute("SELECT size FROM mem_heads").fetchall() == [(ledger.size(),)]
    report = verify_path(pg_url)
    assert report.ok, report.findings


def test_writers_of_two_branches(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """Writers of main and of a fork at once: each branch one gap-free chain; all verifies."""
    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key) as ledger:
        create = OpInput(
            op_type="BRANCH_CREATE",
            actor_id="planner",
            actor_type="AI_AGENT",
            namespace_id="ns",
            payload={
                "branch_id": "sim-1",
                "branch_type": "SIMULATION",
                "purpose": "load",
                "expiry": {"max_age_days": 7},
            },
            policy_version="policy/1",
        )
        ledger.fork(create, genesis={"branch_type": "SIMULATION"})
        main_size = ledger.size()
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), pg_url, str(pg_key), str(n), "4", "20", branch],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n, branch in enumerate(["main", "sim-1", "main", "sim-1"])
    ]
    for p in procs:
        p.communicate(timeout=300)
        assert p.returncode == 0
    with Ledger.open(pg_url, key_path=pg_key) as ledger:
        assert ledger.size() == main_size + 2 * 4 * 20
        assert ledger.size("sim-1") == 1 + 2 * 4 * 20
        for branch in ("main", "sim-1"):
            seqs = [e.seq for e in ledger.entries(branch=branch)]
            assert seqs == list(range(ledger.size(branch)))
    assert verify_path(pg_url).ok


_KILLED_WRITER = """
import sys
from pathlib import Path
from memroot.ledger.entries import EventInput
from memroot.ledger.ledger import Ledger
ledger = Ledger.open(sys.argv[1], key_path=Path(sys.argv[2]))
items = [EventInput(stream="k", actor_id="a", actor_type="AI_AGENT", role="USER",
                    content="big " + str(i) + "y" * 500, namespace_id="ns") for i in range(60000)]
print("ready", flush=True)
ledger.append_batch(items)
print("committed", flush=True)
"""


def _writing_backends(admin: Any, dbname: str) -> int:
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_xid IS NOT NULL",
        (dbname,),
    ).fetchone()
    return int(row[0])


def test_writer_killed_mid_batch_leaves_nothing(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """SIGKILL while a batch is being written: nothing of it lands, the chain verifies."""
    import psycopg

    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key) as ledger:
        ledger.append_batch([_event(i) for i in range(20)])
        before = ledger.root()
    script = tmp_path / "writer.py"
    script.write_text(_KILLED_WRITER)
    child = subprocess.Popen(
        [sys.executable, str(script), pg_url, str(pg_key)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    dbname = urlsplit(pg_url).path.lstrip("/")
    with psycopg.connect(pg_url, autocommit=True) as admin:
        deadline = time.monotonic() + 120
        while _writing_backends(admin, dbname) == 0:  # the batch's transaction has written
            assert child.poll() is None, "the writer finished before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 60
        while _writing_backends(admin, dbname):  # the server rolls the orphan back
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert admin.execute("SELECT count(*) FROM entries").fetchone() == (21,)
    with Ledger.open(pg_url, key_path=pg_key) as ledger:
        assert ledger.size() == 21 and ledger.root() == before
        ledger.append(_event(99))  # the branch lock was released
        assert ledger.size() == 22
    assert verify_path(pg_url).ok


def test_readers_see_one_snapshot(pg_url: str, pg_key: Path) -> None:
    """Inside ``store.read()`` a commit by another connection does not show."""
    with (
        Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key) as writer,
        Ledger.open(pg_url, key_path=pg_key, readonly=True) as reader,
    ):
        with reader.store.read():
            size = reader.size()
            writer.append_batch([_event(i) for i in range(5)])
            assert reader.size() == size
            assert len(list(reader.entries())) == size
        assert reader.size() == size + 5


def test_read_only_store_refuses_writes(pg_url: str, pg_key: Path) -> None:
    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key):
        pass
    with Ledger.open(pg_url, key_path=pg_key, readonly=True) as ledger:
        with pytest.raises(StorageError, match="read-only"):
            ledger.append(_event(1))
        assert ledger.size() == 1


def test_errors_are_clear(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """Missing ledger, double init, missing or foreign key: named errors, nothing written."""
    with pytest.raises(StorageError, match="no memroot ledger"):
        Ledger.open(pg_url)
    with pytest.raises(KeyFileError, match="keeps no key file"):
        Ledger.init(pg_url, origin=ORIGIN)
    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key):
        pass
    with pytest.raises(StorageError, match="already holds memroot tables"):
        Ledger.init(pg_url, origin=ORIGIN, key_path=tmp_path / "other.key")
    assert not (tmp_path / "other.key").exists()
    with Ledger.open(pg_url) as ledger, pytest.raises(KeyFileError, match="key_path"):
        ledger.append(_event(1))
    Ledger.init(tmp_path / "x.ledger", origin=ORIGIN, hooks=()).close()
    with Ledger.open(pg_url, key_path=tmp_path / "x.ledger.key") as ledger:
        with pytest.raises(KeyFileError):
            ledger.append(_event(1))
        assert ledger.size() == 1
    with pytest.raises(StorageError, match="derived-state cache"):
        Ledger.open(pg_url, key_path=pg_key, cache_path=tmp_path)  # a directory: no cache


def test_init_failing_leaves_nothing(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """A key file that cannot be written: no tables, no key, no cache left behind."""
    with pytest.raises(KeyFileError):
        Ledger.init(pg_url, origin=ORIGIN, key_path=tmp_path / "no" / "such" / "dir" / "k")
    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key) as ledger:  # nothing was left
        assert ledger.size() == 1


def test_server_down_and_bad_url(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot connect to PostgreSQL"):
        Ledger.open(f"postgresql://postgres@/nodb?host={tmp_path}")
    with pytest.raises(StorageError, match=r"PostgreSQL URL|cannot connect"):
        Ledger.open("postgresql://u@h/db?bogus_option=1")
    with pytest.raises(StorageError) as e:
        Ledger.open(f"postgresql://u:secret@/db?host={tmp_path}")
    assert "secret" not in str(e.value)


def test_meta_round_trip(pg_url: str, pg_key: Path) -> None:
    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key) as ledger:
        with ledger.store.write():
            ledger.store.set_meta("i", 7)
            ledger.store.set_meta("t", "héllo")
            ledger.store.set_meta("b", b"\x00\xff")
            ledger.store.set_meta("i", 8)
        assert [ledger.store.meta(k) for k in ("i", "t", "b", "none")] == [
            8,
            "héllo",
            b"\x00\xff",
            None,
        ]
        assert json.loads(json.dumps(ledger.store.meta("snapshot_every"))) == ledger.snapshot_every
