"""What one durable append costs beside raw apsw, piece by piece (issue 12, durable target).

    python bench/bench_commit.py                 # 600 appends per side and round, 5 rounds
    python bench/bench_commit.py --count 300 --rounds 3 --json

Measured in one process, on fresh temporary files (removed afterwards), so the figures do not
depend on the disk's fsync latency (the bench's ``durable_append`` ratio does):

- ``statements_per_append`` and ``wal_frames_per_append``: the SQL statements the ledger's
  connection runs for one ``Ledger.append`` (apsw's ``exec_trace``) and the WAL frames (one
  per page a commit changed) it writes, over ``--count`` appends with ``synchronous=FULL``
  (at most the 200 warm-up entries' count), against raw apsw's ``BEGIN IMMEDIATE``/
  ``INSERT``/``COMMIT`` of the same entry bytes into the bench's ``(k, hash, data)`` table.
- ``cpu_us``: CPU time (``time.process_time``, user + system) per durable append of each
  side with ``synchronous=OFF``: everything but waiting for the fsync. Best of ``--rounds``.
- ``sign_us`` / ``self_check_us``: one Ed25519 signature of a checkpoint-sized note and the
  signer's check of it (``signing.check_own_signature``), the irreducible part of a sealed
  commit (best of ``--rounds`` x 1,000).
- ``fsync_us``: the machine's write(4 KiB) + fsync median in the temporary directory.

With ``F`` the commit's fsync wait, raw apsw's commit takes about ``raw cpu + F`` and
memroot's ``memroot cpu + F'`` (``F'`` >= ``F``: more WAL frames to write first); the ratio
``(raw cpu + F) / (memroot cpu + F)`` bounds the bench's durable ratio from above.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw

from memroot.bench.ledger import _RAW_INSERT, _raw_db, events
from memroot.bench.machine import fsync_us
from memroot.ledger.ledger import Ledger
from memroot.ledger.signing import check_own_signature

_WARM = 200  # appends before anything is measured (statement cache, page cache, WAL)
_NOTE = b"example.org/bench-commit\n123456\n" + b"A" * 43 + b"=\n"  # a checkpoint body


def _best(rounds: int, run: Callable[[], int]) -> float:
    """Return the smallest CPU microseconds per item over ``rounds`` calls of ``run``."""
    out = []
    for _ in range(rounds):
        c0 = time.process_time()
        n = run()
        out.append((time.process_time() - c0) / n * 1e6)
    return min(out)


def _traced(db: apsw.Connection, body: Callable[[], None]) -> int:
    """Return the number of statements ``db`` runs in ``body``."""
    seen = 0

    def trace(_cursor: apsw.Cursor, _sql: str, _bindings: Any) -> bool:
        nonlocal seen
        seen += 1
        return True

    db.exec_trace = trace
    try:
        body()
    finally:
        db.exec_trace = None
    return seen


def _wal_frames(db: apsw.Connection, body: Callable[[], None]) -> int:
    """Return how many WAL frames ``body``'s commits on ``db`` write.

    The WAL is emptied first and not checkpointed meanwhile (``wal_autocheckpoint=0``), so
    the frames in it afterwards are the ones written.
    """
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    body()
    row = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()  # (busy, log, checkpointed)
    frames = 0 if row is None else int(row[1])
    db.execute("PRAGMA wal_autocheckpoint=1000")
    return frames


def run(count: int, rounds: int) -> dict[str, Any]:
    """Measure and return the figures (the ``--json`` document)."""
    with tempfile.TemporaryDirectory(prefix="memroot-bench-commit-") as tmp:
        work = Path(tmp)
        ledger = Ledger.init(work / "d.ledger", hooks=())
        raw = _raw_db(work / "raw.db")
        try:
            items = events(0, _WARM + count * (rounds + 1))
            for item in items[:_WARM]:
                ledger.append(item)
            no = ledger.branch_row().no
            rows = [
                (r.seq, bytes(r.hash), bytes(r.data))
                for r in ledger.store.iter_entry_rows(no, 1, _WARM + 1)
            ]
            keys = iter(range(1 << 40, 1 << 41, len(rows)))

            def raw_side(n: int) -> int:
                base = next(keys)
                for i, (_, h, d) in enumerate(rows[:n]):
                    raw.execute("BEGIN IMMEDIATE")
                    raw.execute(_RAW_INSERT, (base + i, h, d))
                    raw.execute("COMMIT")
                return n

            chunks = iter(
                items[_WARM + count * i : _WARM + count * (i + 1)] for i in range(rounds + 1)
            )

            def memroot_side() -> int:
                chunk = next(chunks)
                for item in chunk:
                    ledger.append(item)
                return len(chunk)

            n = min(count, len(rows))
            chunk = next(chunks)[:n]
            stmts: dict[str, float] = {}
            frames: dict[str, float] = {}

            def mem_counted() -> None:
                def body() -> None:
                    for item in chunk:
                        ledger.append(item)

                stmts["memroot"] = _traced(ledger.store.db, body) / n

            def raw_counted() -> None:
                def body() -> None:
                    raw_side(n)

                stmts["raw_apsw"] = _traced(raw, body) / n

            frames["memroot"] = _wal_frames(ledger.store.db, mem_counted) / n
            frames["raw_apsw"] = _wal_frames(raw, raw_counted) / n
            for db in (ledger.store.db, raw):
                db.execute("PRAGMA synchronous=OFF")
            cpu = {
                "memroot": _best(rounds, memroot_side),
                "raw_apsw": _best(rounds, lambda: raw_side(n)),
            }
            signer = ledger.signer
            signature = signer.sign(_NOTE)

            def sign() -> int:
                for _ in range(1000):
                    signer.sign(_NOTE)
                return 1000

            def check() -> int:
                for _ in range(1000):
                    check_own_signature(signer.public_key, _NOTE, signature)
                return 1000

            sign_us, check_us = _best(rounds, sign), _best(rounds, check)
            fsync = fsync_us(work)
        finally:
            ledger.close()
            raw.close()
    return {
        "count": count,
        "rounds": rounds,
        "statements_per_append": stmts,
        "wal_frames_per_append": frames,
        "cpu_us": cpu,
        "sign_us": sign_us,
        "self_check_us": check_us,
        "fsync_us": fsync,
        "ratio_bound_at_fsync": (cpu["raw_apsw"] + fsync) / (cpu["memroot"] + fsync),
        "loadavg": list(os.getloadavg()),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print it (a table, or ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=600, help="appends per side and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (best CPU figure kept)")
    parser.add_argument("--json", action="store_true", help="print the JSON document")
    args = parser.parse_args(argv)
    if args.count < 1 or args.rounds < 1:
        parser.error("--count and --rounds must be at least 1")
    out = run(args.count, args.rounds)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for side in ("memroot", "raw_apsw"):
        print(
            f"{side:9} {out['statements_per_append'][side]:6.2f} statements, "
            f"{out['wal_frames_per_append'][side]:5.2f} WAL frames, "
            f"{out['cpu_us'][side]:7.1f} us CPU per durable append (fsync excluded)"
        )
    print(
        f"Ed25519 sign {out['sign_us']:.1f} us, self-check {out['self_check_us']:.1f} us; "
        f"fsync median {out['fsync_us']:.0f} us -> durable ratio at most "
        f"{out['ratio_bound_at_fsync']:.2f}; load {out['loadavg'][0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
