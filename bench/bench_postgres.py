"""The PostgreSQL ledger (issue 14): batched append and verify beside a raw psycopg ``COPY``.

    python bench/bench_postgres.py --url postgresql://postgres@/postgres?host=/tmp/pg
    python bench/bench_postgres.py --url URL --entries 50000 --batch 1000 --repeat 3 --json

``--url`` names a server and a role that may create databases (``MEMROOT_TEST_PG_URL`` by
default); each run creates a fresh database there and drops it afterwards. Phases, in one
run and on the same server (best of ``--repeat``, wall and CPU time of this process):

1. memroot append: ``--entries`` events in batches of ``--batch`` (one transaction each: the
   branch-row lock, entries, event index, tree nodes, chain head and the signed head
   checkpoint), through ``Ledger.append_batch`` on a bare PostgreSQL ledger (no hooks).
2. raw COPY: the same entry rows (``k, hash, data, digest, salt, content``: the bytes memroot
   stored, read back before timing) copied with psycopg ``COPY ... FROM STDIN`` into a table of
   the same columns, one transaction per batch of the same size. No hashing, signing, tree
   or index: what the server costs to take those bytes.
3. memroot verify: ``verify_path(url)``, every ledger step in one REPEATABLE READ snapshot.
   Beside it the same ledger copied (``PgStore.copy_snapshot``, what ``memroot verify``
   does before checking) and verified as a SQLite file.
4. For scale: the same batched append into a SQLite ledger file (no hooks) in the same run.
5. ``--durable N`` (default 200): ``N`` single appends (one committed transaction each) after
   phase 1, beside ``N`` single-row ``INSERT`` transactions of the same rows.
6. ``--hooked N`` (default 5000): ``N`` events in batches of ``--batch`` with the default hooks
   (memory model, roots, falsification, branches: what ``memroot append`` and
   ``Ledger.open(url)`` install), on PostgreSQL (derived state in this host's cache file)
   and on a SQLite ledger file, in the same run; then ``cold_cache_open``: a second host
   (an empty cache file) opening that PostgreSQL ledger, which replays every entry into its
   cache through the hooks; then ``two_hosts_alternating``: two hosts (two cache files) on a
   fresh database appending the same ``N`` events in alternate batches, so that every
   append first replays the other host's last batch into its own cache.

CPU time is this process's only (the server's work is in the wall time).

The figures depend on the server's fsync (``synchronous_commit``, disk), the round trip
(a unix socket here) and the machine's load: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from memroot.ledger.backends.pg import PgStore
from memroot.ledger.entries import EventInput
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import verify_path


def _event(i: int) -> EventInput:
    return EventInput(
        stream=f"s{i % 7}",
        actor_id="alice",
        actor_type="HUMAN_USER",
        role="USER",
        content=f"message {i}: " + "x" * 80,
        namespace_id="alice",
    )


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """Return (wall, CPU) seconds of ``fn()``."""
    w, c = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - w, _cpu() - c


def _database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@contextlib.contextmanager
def _scratch_database(url: str, prefix: str) -> Iterator[str]:
    """Yield the URL of a new database on ``url``'s server, named ``prefix`` and a suffix.

    The database is dropped afterwards, connections still open to it included.
    """
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield _database(url, name)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _append(ledger: Ledger, items: list[EventInput], batch: int) -> None:
    for start in range(0, len(items), batch):
        ledger.append_batch(items[start : start + batch])


def _raw_copy(raw: Any, rows: list[tuple[Any, ...]], batch: int) -> None:
    cols = "k, hash, data, digest, salt, content"
    for start in range(0, len(rows), batch):
        with (
            raw.transaction(),
            raw.cursor() as cur,
            cur.copy(f"COPY raw_entries({cols}) FROM STDIN") as cp,
        ):
            for row in rows[start : start + batch]:
                cp.write_row(row)


def _singles(ledger: Ledger, items: list[EventInput]) -> None:
    for item in items:
        ledger.append(item)


def _raw_singles(raw: Any, rows: list[tuple[Any, ...]]) -> None:
    for row in rows:
        with raw.transaction():
            raw.execute(
                "INSERT INTO raw_single(k, hash, data, digest, salt, content) "
                "VALUES(%s, %s, %s, %s, %s, %s)",
                row,
            )


def _one(
    db_url: str,
    items: list[EventInput],
    batch: int,
    durable: int,
    keep: Callable[..., None],
    hooked: int = 0,
) -> None:
    """One repeat on the fresh database ``db_url``: every phase, figures to ``keep``."""
    with tempfile.TemporaryDirectory(prefix="memroot-bench-pg-") as tmp:
        key = Path(tmp) / "ledger.key"
        with Ledger.init(db_url, origin="example.org/bench", key_path=key, hooks=()) as ledger:
            keep("memroot_append", *_timed(lambda: _append(ledger, items, batch)))
            assert ledger.size() == len(items) + 1
            rows = [
                (r.seq, r.hash, r.data, r.digest, r.salt, r.content)
                for r in ledger.store.iter_entry_rows(ledger.branch_row().no, 1)
            ]
            if durable:
                keep("memroot_single", *_timed(lambda: _singles(ledger, items[:durable])))
        with psycopg.connect(db_url, autocommit=True) as raw:
            raw.execute(
                "CREATE TABLE raw_entries(k BIGINT PRIMARY KEY, hash BYTEA NOT NULL, "
                "data BYTEA NOT NULL, digest BYTEA, salt BYTEA, content BYTEA)"
            )
            keep("raw_copy", *_timed(lambda: _raw_copy(raw, rows, batch)))
            if durable:
                raw.execute(
                    "CREATE TABLE raw_single(k BIGINT PRIMARY KEY, hash BYTEA NOT NULL, "
                    "data BYTEA NOT NULL, digest BYTEA, salt BYTEA, content BYTEA)"
                )
                keep("raw_single", *_timed(lambda: _raw_singles(raw, rows[:durable])))
        report: list[Any] = []
        keep("memroot_verify", *_timed(lambda: report.append(verify_path(db_url))))
        assert report[0].ok, report[0].findings
        copy_path = Path(tmp) / "copy.ledger"
        store = PgStore(db_url, readonly=True)
        try:
            keep("snapshot_copy", *_timed(lambda: store.copy_snapshot(copy_path)))
        finally:
            store.close()
        keep("verify_sqlite_copy", *_timed(lambda: verify_path(copy_path)))
        with Ledger.init(Path(tmp) / "file.ledger", origin="example.org/bench", hooks=()) as lite:
            keep("sqlite_append", *_timed(lambda: _append(lite, items, batch)))
        if hooked:
            _hooked(db_url, Path(tmp), items[:hooked], batch, keep)


def _hooked(
    db_url: str, tmp: Path, items: list[EventInput], batch: int, keep: Callable[..., None]
) -> None:
    """Phase 6: hooked appends on PostgreSQL (a cache file) and on SQLite; a cold cache."""
    with _scratch_database(db_url, "memroot_bench_h") as url:
        key = tmp / "hooked.key"
        with Ledger.init(url, origin="example.org/bench-h", key_path=key) as ledger:
            keep("pg_hooked_append", *_timed(lambda: _append(ledger, items, batch)))
        with Ledger.init(tmp / "hooked.ledger", origin="example.org/bench-h") as lite:
            keep("sqlite_hooked_append", *_timed(lambda: _append(lite, items, batch)))

        def cold() -> None:
            Ledger.open(url, key_path=key, cache_path=tmp / "second-host.cache").close()

        keep("cold_cache_open", *_timed(cold))
    with _scratch_database(db_url, "memroot_bench_2") as url:
        key = tmp / "two.key"
        Ledger.init(url, origin="example.org/bench-2", key_path=key).close()
        hosts = [Ledger.open(url, key_path=key, cache_path=tmp / f"host-{h}.cache") for h in "ab"]

        def alternate() -> None:
            for i, start in enumerate(range(0, len(items), batch)):
                hosts[i % 2].append_batch(items[start : start + batch])

        try:
            keep("two_hosts_alternating", *_timed(alternate))
        finally:
            for h in hosts:
                h.close()


def run(
    url: str, entries: int, batch: int, repeat: int, durable: int = 0, hooked: int = 0
) -> dict[str, Any]:
    """Run every phase ``repeat`` times on fresh databases; return the best figures."""
    best: dict[str, dict[str, float]] = {}

    def keep(name: str, wall: float, cpu: float) -> None:
        if name not in best or wall < best[name]["wall_s"]:
            best[name] = {"wall_s": wall, "cpu_s": cpu}

    items = [_event(i) for i in range(entries)]
    for _ in range(repeat):
        with _scratch_database(url, "memroot_bench") as db_url:
            _one(db_url, items, batch, durable, keep, hooked)
    for key, fig in best.items():
        n = (
            durable
            if key.endswith("_single")
            else min(hooked, entries)
            if key.endswith("_hooked_append") or key in ("cold_cache_open", "two_hosts_alternating")
            else entries
        )
        fig["entries_per_s"] = n / fig["wall_s"]
    with psycopg.connect(url) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        sync = conn.execute("SHOW synchronous_commit").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
    return {
        "entries": entries,
        "batch": batch,
        "durable": durable,
        "hooked": hooked,
        "repeat": repeat,
        "best": best,
        "append_vs_copy": best["memroot_append"]["wall_s"] / best["raw_copy"]["wall_s"],
        "hooked_pg_vs_sqlite": (
            best["pg_hooked_append"]["wall_s"] / best["sqlite_hooked_append"]["wall_s"]
            if hooked
            else None
        ),
        "server": {
            "version": version[0] if version else None,
            "synchronous_commit": sync[0] if sync else None,
            "fsync": fsync[0] if fsync else None,
        },
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "psycopg": psycopg.__version__,
            "loadavg_end": os.getloadavg(),
        },
        "command": " ".join(sys.argv),
    }


def main() -> None:
    """Parse the options, run, print the table (or JSON)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default=os.environ.get("MEMROOT_TEST_PG_URL"))
    p.add_argument("--entries", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=1_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--durable", type=int, default=200, help="single appends (0: none)")
    p.add_argument("--hooked", type=int, default=5_000, help="hooked appends (0: none)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if not args.url:
        p.error("no server: give --url postgresql://... or set MEMROOT_TEST_PG_URL")
    load = os.getloadavg()
    out = run(args.url, args.entries, args.batch, args.repeat, args.durable, args.hooked)
    out["machine"]["loadavg_start"] = load
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(
        f"{out['entries']} entries, batches of {out['batch']}, best of {out['repeat']}; "
        f"PostgreSQL {out['server']['version']} (fsync {out['server']['fsync']}, "
        f"synchronous_commit {out['server']['synchronous_commit']}); "
        f"load {load[0]:.2f} -> {out['machine']['loadavg_end'][0]:.2f}"
    )
    for name, fig in out["best"].items():
        print(
            f"  {name:20} {fig['wall_s']:8.3f} s wall {fig['cpu_s']:8.3f} s CPU "
            f"{fig['entries_per_s']:10,.0f} entries/s"
        )
    print(f"  memroot append / raw COPY (wall): {out['append_vs_copy']:.2f}x")
    if out["hooked_pg_vs_sqlite"] is not None:
        print(f"  hooked append PostgreSQL / SQLite (wall): {out['hooked_pg_vs_sqlite']:.2f}x")


if __name__ == "__main__":
    main()
