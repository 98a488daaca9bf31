"""Attacks on a host's derived-state cache of a PostgreSQL ledger (issue 23.2 = 26.3).

Two hosts share one ledger in PostgreSQL; each keeps its own cache file and is its own
process (``memroot`` commands and facade scripts run as subprocesses, with their own
``MEMROOT_CACHE``). An attacker process edits host B's cache with ``sqlite3`` (no key): a
value edited, a row hidden (archived), a row deleted, a row forged, or a state row planted
before B catches up with host A's entries. Every read surface of B refuses with
``IntegrityError`` naming the cache and how to recover (``query``, ``Memory.recall``, the
catch-up of a later write), ``verify`` reports it, nothing tampered is served, nothing is
written to PostgreSQL, and deleting the cache recovers the honest state.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

HOST = r"""
import json, sys
import memroot
from memroot.ledger.errors import IntegrityError

url, key, action = sys.argv[1], sys.argv[2], sys.argv[3]
arg = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
try:
    with memroot.open(url, key_path=key, trusted=False, namespace="alice") as mem:
        if action == "seed":
            said = mem.record(content="I take my tea without sugar")
            ids = [mem.remember(v, evidence=[said.id]).id for v in arg]
            mem.snapshot()
            out = ids
        elif action == "falsify":
            mem.falsify(arg, "retracted")
            mem.snapshot()
            out = None
        elif action == "record":
            out = mem.record(content=arg).id
        else:
            out = sorted(r.object.value for r in mem.recall(limit=100))
except IntegrityError as e:
    print(json.dumps({"refused": str(e)}))
    sys.exit(3)
print(json.dumps(out))
"""

ATTACKER = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.executescript(sys.argv[2]); db.commit(); db.close()
"""

FACTS = ["Alice takes tea without sugar", "Bob likes coffee", "Carol owns a cat"]


class Host:
    """One machine: its own cache file, running ``memroot`` and facade scripts as processes."""

    def __init__(self, root: Path, name: str, url: str, key: Path) -> None:
        self.dir = root / name
        self.dir.mkdir()
        self.url, self.key = url, key
        self.cache = self.dir / "cache.sqlite"
        self.env = {
            **os.environ,
            "MEMROOT_TRUSTED": str(self.dir / "trusted.json"),
            "MEMROOT_CACHE": str(self.cache),
        }

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        exe = str(Path(sys.executable).with_name("memroot"))
        argv = [exe, "-l", self.url, "--key", str(self.key), *args]
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=180)

    def py(self, action: str, arg: Any = None) -> tuple[int, Any]:
        argv = [sys.executable, "-c", HOST, self.url, str(self.key), action]
        if arg is not None:
            argv.append(json.dumps(arg))
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=180)
        assert done.returncode in (0, 3), done.stderr
        return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])

    def delete_cache(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.cache}{suffix}").unlink(missing_ok=True)


def _attack(cache: Path, sql: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", ATTACKER, str(cache), sql], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def _pg_rows(url: str) -> tuple[int, ...]:
    import psycopg

    with psycopg.connect(url) as db:
        got = db.execute(
            "SELECT (SELECT count(*) FROM entries), (SELECT count(*) FROM checkpoints), "
            "(SELECT coalesce(sum(size), 0) FROM branches)"
        ).fetchone()
    assert got is not None
    return tuple(int(x) for x in got)


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str, pg_key: Path) -> tuple[Host, Host, list[str]]:
    """Host A created the ledger and remembered three facts (then a v2 root); B has read."""
    a = Host(tmp_path, "a", pg_url, pg_key)
    b = Host(tmp_path, "b", pg_url, pg_key)
    init = a.cli("init", "--origin", "example.org/pg-cache-attacks")
    assert init.returncode == 0, init.stderr
    code, ids = a.py("seed", FACTS)
    assert code == 0
    assert b.py("recall") == (0, sorted(FACTS))  # B's cache is built from A's entries
    return a, b, ids


def _forged_row(oid: str) -> str:
    return (
        f"CREATE TEMP TABLE t AS SELECT * FROM mem_objects WHERE id = '{oid}';"
        f"UPDATE t SET rid = rid + 100000, oid = oid + 100000, id = '{uuid.uuid4()}', "
        "value = 'MALLORY forged';"
        "INSERT INTO mem_objects SELECT * FROM t;"
    )


ATTACKS = {
    "cache_value_edited": lambda oid: (
        f"UPDATE mem_objects SET value = 'MALLORY' WHERE id = '{oid}'"
    ),
    "cache_row_hidden": lambda oid: (
        f"UPDATE mem_objects SET lifecycle_state = 'ARCHIVED' WHERE id = '{oid}'"
    ),
    "cache_row_deleted": lambda oid: f"DELETE FROM mem_objects WHERE id = '{oid}'",
    "cache_row_forged": _forged_row,
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_edited_host_cache_is_refused_by_every_read(
    fleet: tuple[Host, Host, list[str]], attack: str
) -> None:
    """An attacker edits host B's cache: B's query and recall refuse it, naming the cache and
    the way back; verify reports it; nothing is written; deleting the cache recovers."""
    a, b, ids = fleet
    before = _pg_rows(a.url)
    _attack(b.cache, ATTACKS[attack](ids[0]))

    q = b.cli("query", "--json")
    assert q.returncode == 1, (q.stdout, q.stderr)
    assert "MALLORY" not in q.stdout and "Alice takes tea" not in q.stdout
    assert "cache" in q.stderr and "Delete the file" in q.stderr, q.stderr
    code, out = b.py("recall")
    assert code == 3, out
    assert "MALLORY" not in out["refused"] and str(b.cache) in out["refused"]

    v = b.cli("verify", "--json")
    assert v.returncode == 1, v.stdout
    assert json.loads(v.stdout)["steps"]["9"]["violations"] >= 1

    assert _pg_rows(a.url) == before  # nothing written by any refused read
    assert a.py("recall") == (0, sorted(FACTS))  # host A's own cache is untouched

    b.delete_cache()
    assert b.py("recall") == (0, sorted(FACTS))
    assert b.cli("verify", "--json").returncode == 0


def _planted_state_row(kind: str, oid: str, size: int) -> str:
    del size
    return (
        "INSERT INTO fz_states(kind, id, branch, seq, state, op, actor_id, actor_type, reason, "
        f"evidence) VALUES('{kind}', '{oid}', 'main', 1000000, 'live', 'RESTORE', 'mallory', "
        "'HUMAN_USER', NULL, '[]')"
    )


def _planted_object_row(kind: str, oid: str, size: int) -> str:
    del kind
    return (
        f"CREATE TEMP TABLE t AS SELECT * FROM mem_objects WHERE id = '{oid}';"
        f"UPDATE t SET rid = rid + 100000, oid = oid + 100000, id = '{uuid.uuid4()}', "
        f"vfrom = {size}, value = 'MALLORY planted';"
        "INSERT INTO mem_objects SELECT * FROM t;"
    )


PLANTS = {
    "state_row_planted_before_catch_up": _planted_state_row,
    "object_row_planted_before_catch_up": _planted_object_row,
}


@pytest.mark.parametrize("attack", sorted(PLANTS))
def test_row_planted_before_catch_up_is_refused_at_the_root(
    fleet: tuple[Host, Host, list[str]], attack: str
) -> None:
    """The attacker plants a row in B's cache where host A's next entries will land (a newer
    state of an object, or an object row at the entry A appends next); A then falsifies the
    object and takes a v2 root. B's catch-up reaches the root, finds the cache's rows are not
    what the map's leaves give and refuses, rolling its cache back: B's read refuses, and
    B's write (which catches up first) writes nothing to PostgreSQL."""
    a, b, ids = fleet
    db = sqlite3.connect(b.cache)
    (kind,) = db.execute("SELECT DISTINCT kind FROM fz_items").fetchone() or ("memory_object",)
    heads = db.execute("SELECT branch, size FROM cache_heads").fetchall()
    db.close()
    # A's FALSIFY will be entry ``size`` of main, the high-water of the root after it.
    _attack(b.cache, PLANTS[attack](kind, ids[1], dict(heads)["main"]))
    assert a.py("falsify", ids[1]) == (0, None)
    before = _pg_rows(a.url)

    q = b.cli("query", "--json")
    assert q.returncode == 1, (q.stdout, q.stderr)
    assert "MALLORY" not in q.stdout
    assert "cache" in q.stderr and "is edited" in q.stderr and "Delete the file" in q.stderr
    code, out = b.py("record", "hello from B")
    assert code == 3 and "is edited" in out["refused"], out
    assert _pg_rows(a.url) == before
    db = sqlite3.connect(b.cache)
    assert db.execute("SELECT branch, size FROM cache_heads").fetchall() == heads  # rolled back
    db.close()

    b.delete_cache()
    code, out = b.py("record", "hello from B")
    assert code == 0, out
    honest = sorted(f for f in FACTS if f != "Bob likes coffee")  # falsified: not recalled
    assert b.py("recall") == (0, honest)
    assert a.py("recall") == (0, honest)


# -- no false alarm: an honest two-host history ---------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_honest_two_host_history_never_refuses(
    tmp_path: Path, pg_url: str, pg_key: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Two hosts (two caches) take turns at random: facts, falsify, mark-stale, restore,
    cascade, a fork with its own facts, snapshots on both branches. Every catch-up reaches
    the other host's roots (each checked against the map) and every strict recall of either
    host serves what a fresh cache serves: never a refusal."""
    import random

    import memroot
    from memroot.ledger.ledger import Ledger

    rng = random.Random(seed)
    Ledger.init(
        pg_url, origin="example.org/pg-honest", key_path=pg_key, cache_path=tmp_path / "a.cache"
    ).close()

    def host(name: str) -> Any:
        monkeypatch.setenv("MEMROOT_CACHE", str(tmp_path / f"{name}.cache"))
        return memroot.open(pg_url, key_path=pg_key, trusted=False, namespace="alice")

    hosts = [host("a"), host("b")]
    facts: list[str] = []
    fork: str | None = None
    try:
        said = hosts[0].record(content="the evidence")
        for step in range(24):
            mem = hosts[rng.randrange(2)]
            move = rng.choice(["fact", "fact", "falsify", "stale", "restore", "cascade", "fork"])
            try:
                if move == "fact" or not facts:
                    facts.append(mem.remember(f"fact {step}", evidence=[said.id]).id)
                elif move == "falsify":
                    mem.falsify(rng.choice(facts), "wrong")
                elif move == "stale":
                    mem.mark_stale(rng.choice(facts), "check again")
                elif move == "restore":
                    mem.restore(rng.choice(facts), "right after all")
                elif move == "cascade":
                    mem.cascade(rng.choice(facts))
                elif fork is None:
                    fork = mem.fork("try a plan", branch_type="PLANNING", expiry_days=3)
                else:
                    mem.remember(f"plan {step}", evidence=[said.id], branch=fork)
                    mem.snapshot(branch=fork)
            except memroot.RefusedError:
                pass  # a state rule (already falsified, not live...): nothing written
            if step % 3 == 2:
                mem.snapshot()
            for h in hosts:  # each catches up with the other's entries and roots, strictly
                h.recall(limit=100)
                if fork is not None:
                    h.recall(limit=100, branch=fork)
        served = [sorted(r.object.id for r in h.recall(limit=100)) for h in hosts]
    finally:
        for h in hosts:
            h.close()
    fresh = host("fresh")
    try:
        assert served == [sorted(r.object.id for r in fresh.recall(limit=100))] * 2
        assert fresh.verify().ok
    finally:
        fresh.close()


TIES = r"""
import sys
import memroot
from memroot.projections import requests as rq

url, key, eid = sys.argv[1:4]
with memroot.open(url, key_path=key, trusted=False, actor="agent-7", namespace="alice") as mem:
    me, team = rq.Actor("agent-7", "AI_AGENT", "alice"), rq.Actor("agent-7", "AI_AGENT", "team")
    mem.ledger.append(rq.entity_create(me, "PERSON", "Alice", (), eid))
    said = mem.record(content="I ride a bike; we plan a trip").id
    mem.remember("Alice rides a bike", evidence=[said], entity_ids=[eid])
    mem.ledger.append(rq.namespace_create(team, "PROJECT"))
    mem.ledger.append(rq.grant(team, "agent-7", "ASSERT"))
    mem.ledger.append(rq.grant(team, "bob", "READ"))
    mem.remember("The team plans a trip", evidence=[said], namespace="team")
    mem.snapshot()
"""

FILTERS = {
    "cache_about_entity_edge_deleted": (
        "DELETE FROM mem_edges WHERE type = 'ABOUT_ENTITY'",
        ("--entity", "{eid}"),
        "Alice rides a bike",
    ),
    "cache_read_grant_deleted": (
        "DELETE FROM mem_grants WHERE actor_id = 'bob'",
        ("--actor", "bob"),
        "The team plans a trip",
    ),
}


@pytest.mark.parametrize("attack", sorted(FILTERS))
def test_edited_filter_rows_in_host_cache_are_refused(
    fleet: tuple[Host, Host, list[str]], attack: str
) -> None:
    """Host A ties a fact to an entity and lets bob READ a namespace; an attacker deletes the
    edge (or the grant) in host B's cache: B's `query --entity` (`--actor`) would drop the
    fact. It refuses, naming the cache; verify reports it; nothing is written; deleting the
    cache recovers."""
    a, b, _ = fleet
    eid = str(uuid.uuid4())
    tied = subprocess.run(
        [sys.executable, "-c", TIES, a.url, str(a.key), eid],
        capture_output=True,
        text=True,
        env=a.env,
        timeout=180,
    )
    assert tied.returncode == 0, tied.stderr
    sql, args, value = FILTERS[attack]
    argv = ("query", *(x.format(eid=eid) for x in args), "--json")
    honest = b.cli(*argv)
    assert honest.returncode == 0 and value in honest.stdout, (honest.stdout, honest.stderr)
    before = _pg_rows(a.url)
    _attack(b.cache, sql)

    q = b.cli(*argv)
    assert q.returncode == 1 and value not in q.stdout, (q.stdout, q.stderr)
    assert "cache" in q.stderr and "Delete the file" in q.stderr, q.stderr
    v = b.cli("verify", "--json")
    assert v.returncode == 1, v.stdout
    assert _pg_rows(a.url) == before
    assert value in a.cli(*argv).stdout  # host A's own cache is untouched

    b.delete_cache()
    assert value in b.cli(*argv).stdout
