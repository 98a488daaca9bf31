"""``memroot bench``: the ledger core measured beside raw apsw inserts and pymerkle (issue 2).

One run, fresh temporary directories, five phases, each announced on stderr:

1. Batched append (1,000 entries per transaction) at each size: memroot ``append_batch`` of
   prebuilt ``EventInput`` objects, raw apsw ``executemany`` of the *same entry bytes* into
   ``(k, hash, data)``, and pymerkle's ``SqliteTree.append_entries`` of the same bytes.
2. One entry per durable (``synchronous=FULL``, fsync'd) transaction: memroot ``append`` beside
   raw apsw single-row transactions of the same bytes, interleaved in blocks so both see the
   same background load.
3. Inclusion proof generate + verify at the largest size (pymerkle at 10^5 or the largest
   size built for it, for comparison).
4. Full verify (auditor's steps 1-6 and 10) in a child process: entries/s and its peak RSS.
5. Append rate on the largest ledger against the rate on an empty one (from phase 1).

The memroot ledgers are the core alone (no memory-model hooks). Every figure is a measurement
of this run; the human table puts each target beside its figure.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import random
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import apsw
import click

from memroot.cli.main import cli
from memroot.ledger import _backend, merkle
from memroot.ledger.entries import EventInput
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import ActorType, Role

__all__ = [
    "BATCH",
    "DEFAULT_SIZES",
    "FULL_SIZE",
    "BenchConfig",
    "Target",
    "bench_cmd",
    "machine_info",
    "render_human",
    "run_bench",
]

BATCH: Final = 1000
DEFAULT_SIZES: Final = (10_000, 100_000)
FULL_SIZE: Final = 1_000_000
CONTENT_BYTES: Final = 100
GROWTH_WINDOW: Final = 10_000
DURABLE_BLOCK: Final = 100
PROOF_BUDGET_S: Final = 10.0
PYMERKLE_PROOF_SIZE: Final = 100_000
PYMERKLE_PROOF_BUDGET_S: Final = 5.0
SEED: Final = 20_240_601

# Targets of issue 2 ("Speed"), on a 2-core machine.
TARGET_APPEND_PER_S: Final = 100_000
TARGET_DURABLE_RATIO: Final = 0.80
TARGET_PROOFS_PER_S: Final = 10_000
TARGET_VERIFY_PER_S: Final = 200_000
TARGET_VERIFY_RSS_MB: Final = 150
TARGET_GROWTH_RATIO: Final = 0.85

_PRAGMAS: Final = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA cache_size=-65536")
_RAW_SCHEMA: Final = "CREATE TABLE entries(k INTEGER PRIMARY KEY, hash BLOB, data BLOB)"
_RAW_INSERT: Final = "INSERT INTO entries(k, hash, data) VALUES(?, ?, ?)"
_FILLER: Final = (
    "the agent noted that the user prefers tea without sugar and meetings after ten; "
    "remember it for the next session. "
)

# Runs in a child process so its peak RSS is the verifier's alone (phase 4). VmHWM is the
# high-water mark of the child's own address space; ru_maxrss is not (see _verify_child).
_VERIFY_CHILD: Final = """
import json, resource, sys, time
from pathlib import Path
from memroot.ledger.verify import verify_path
t0 = time.perf_counter()
report = verify_path(Path(sys.argv[1]), update_trusted=False)
seconds = time.perf_counter() - t0
hwm = None
try:
    with open("/proc/self/status", encoding="ascii") as f:
        hwm = next((int(x.split()[1]) for x in f if x.startswith("VmHWM:")), None)
except OSError:
    pass
print(json.dumps({
    "ok": report.ok,
    "entries": report.entries,
    "seconds": seconds,
    "findings": [str(f) for f in report.findings[:5]],
    "vm_hwm_kb": hwm,
}))
"""

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """What to measure: ledger sizes, durable-append count and inclusion-proof count."""

    sizes: tuple[int, ...]
    durable: int = 1000
    proofs: int = 20_000
    pymerkle_proofs: int = 300

    def __post_init__(self) -> None:
        if not self.sizes or any(type(n) is not int or n < 1 for n in self.sizes):
            raise ValueError(f"sizes must be positive integers, got {self.sizes!r}")
        if self.durable < 1 or self.proofs < 1 or self.pymerkle_proofs < 1:
            raise ValueError("durable, proofs and pymerkle_proofs must be positive")


@dataclass(frozen=True, slots=True)
class Target:
    """One issue-2 target beside the figure measured for it."""

    name: str
    at: int | None
    value: float | None
    unit: str
    target: str
    met: bool | None

    def to_json(self) -> dict[str, Any]:
        """Return the target as a JSON object."""
        return {
            "name": self.name,
            "at": self.at,
            "value": self.value,
            "unit": self.unit,
            "target": self.target,
            "met": self.met,
        }


# -- inputs ------------------------------------------------------------------------------------


def _content(i: int) -> str:
    """Return the ~100-byte content of event ``i`` (distinct per event)."""
    head = f"{i:09d} "
    return head + _FILLER[: CONTENT_BYTES - len(head)]


def _events(start: int, count: int) -> list[EventInput]:
    """Build ``count`` event inputs (ids and timestamps left for the ledger to assign)."""
    return [
        EventInput(
            stream="bench-session",
            actor_id="bench-agent",
            actor_type=ActorType.AI_AGENT.value,
            role=Role.ASSISTANT.value if i & 1 else Role.USER.value,
            content=_content(i),
            namespace_id="bench",
        )
        for i in range(start, start + count)
    ]


def _entry_batches(path: Path, n: int, size: int = BATCH) -> Iterator[list[tuple[bytes, bytes]]]:
    """Yield the ``(hash, data)`` of entries 1..n of the ledger at ``path`` in batches."""
    with Ledger.open(path, readonly=True) as ledger:
        no = ledger.branch_row().no
        batch: list[tuple[bytes, bytes]] = []
        for row in ledger.store.iter_entry_rows(no, 1, n + 1):
            batch.append((bytes(row.hash), bytes(row.data)))
            if len(batch) == size:
                yield batch
                batch = []
        if batch:
            yield batch


def _raw_db(path: Path) -> Any:
    """Open a raw apsw database with the ledger's pragmas and the ``(k, hash, data)`` table."""
    db = apsw.Connection(str(path))
    for pragma in _PRAGMAS:
        db.execute(pragma)
    db.execute(_RAW_SCHEMA)
    return db


def _rate(count: int, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


# -- phase 1 and 5: batched appends -------------------------------------------------------------


def _memroot_batched(path: Path, n: int) -> dict[str, Any]:
    """Append ``n`` events in batches of ``BATCH`` to a new ledger; time construction apart."""
    build_s = append_s = 0.0
    batches: list[tuple[int, float]] = []
    with Ledger.init(path) as ledger:
        for start in range(0, n, BATCH):
            t0 = time.perf_counter()
            items = _events(start, min(BATCH, n - start))
            t1 = time.perf_counter()
            ledger.append_batch(items)
            t2 = time.perf_counter()
            build_s += t1 - t0
            append_s += t2 - t1
            batches.append((len(items), t2 - t1))
        ledger.checkpoint()  # so full verify (phase 4) checks a signed root at the full size
    return {
        "entries": n,
        "append_s": append_s,
        "construction_s": build_s,
        "entries_per_s": _rate(n, append_s),
        "entries_per_s_incl_construction": _rate(n, append_s + build_s),
        "_batches": batches,
    }


def _raw_batched(source: Path, n: int, path: Path) -> dict[str, Any]:
    """Insert the same entry bytes with apsw ``executemany``, one transaction per batch."""
    db = _raw_db(path)
    seconds = 0.0
    k = 1
    try:
        for batch in _entry_batches(source, n):
            rows = [(k + j, h, d) for j, (h, d) in enumerate(batch)]
            k += len(rows)
            t0 = time.perf_counter()
            db.execute("BEGIN IMMEDIATE")
            db.executemany(_RAW_INSERT, rows)
            db.execute("COMMIT")
            seconds += time.perf_counter() - t0
    finally:
        db.close()
    return {"entries": n, "seconds": seconds, "entries_per_s": _rate(n, seconds)}


def _pymerkle_batched(pymerkle: Any, source: Path, n: int, path: Path) -> dict[str, Any]:
    """Append the same entry bytes with ``SqliteTree.append_entries``, one call per batch."""
    tree = pymerkle.SqliteTree(str(path))
    seconds = 0.0
    try:
        for batch in _entry_batches(source, n):
            data = [d for _, d in batch]
            t0 = time.perf_counter()
            tree.append_entries(data)
            seconds += time.perf_counter() - t0
    finally:
        tree.close()
    return {"entries": n, "seconds": seconds, "entries_per_s": _rate(n, seconds)}


def _growth(batches: Sequence[tuple[int, float]], n: int) -> dict[str, Any]:
    """Compare the append rate of the last window of batches with the first (phase 5)."""
    window = min(GROWTH_WINDOW, n // 2) // BATCH
    if window < 1:
        return {
            "size": n,
            "window": 0,
            "first_per_s": None,
            "last_per_s": None,
            "ratio_last_first": None,
        }
    first, last = batches[:window], batches[-window:]
    first_rate = _rate(sum(c for c, _ in first), sum(s for _, s in first))
    last_rate = _rate(sum(c for c, _ in last), sum(s for _, s in last))
    return {
        "size": n,
        "window": window * BATCH,
        "first_per_s": first_rate,
        "last_per_s": last_rate,
        "ratio_last_first": _ratio(last_rate, first_rate),
    }


# -- phase 2: durable single appends -----------------------------------------------------------


def _durable(work: Path, count: int) -> dict[str, Any]:
    """Time ``count`` single fsync'd appends with memroot and with raw apsw, interleaved."""
    mem_s = raw_s = 0.0
    db = _raw_db(work / "raw.db")
    try:
        with Ledger.init(work / "durable.ledger") as ledger:
            no = ledger.branch_row().no
            for start in range(0, count, DURABLE_BLOCK):
                items = _events(start, min(DURABLE_BLOCK, count - start))
                t0 = time.perf_counter()
                for item in items:
                    ledger.append(item)
                mem_s += time.perf_counter() - t0
                rows = [
                    (r.seq, bytes(r.hash), bytes(r.data))
                    for r in ledger.store.iter_entry_rows(no, start + 1, start + 1 + len(items))
                ]
                t0 = time.perf_counter()
                for row in rows:
                    db.execute("BEGIN IMMEDIATE")
                    db.execute(_RAW_INSERT, row)
                    db.execute("COMMIT")
                raw_s += time.perf_counter() - t0
    finally:
        db.close()
    mem, raw = _rate(count, mem_s), _rate(count, raw_s)
    return {
        "count": count,
        "memroot_per_s": mem,
        "raw_apsw_per_s": raw,
        "ratio_memroot_raw": _ratio(mem, raw),
        # What memroot adds to each durable transaction beyond the raw insert and its fsync.
        "memroot_extra_us_per_append": (mem_s - raw_s) / count * 1e6,
    }


# -- phase 3: inclusion proofs -----------------------------------------------------------------


def _memroot_proofs(path: Path, count: int) -> dict[str, Any]:
    """Generate and verify inclusion proofs of random entries against the full tree."""
    rng = random.Random(SEED)
    with Ledger.open(path, readonly=True) as ledger:
        size = ledger.size()
        no = ledger.branch_row().no
        root = ledger.root(size)
        picks = [rng.randrange(size) for _ in range(count)]
        # The verifier holds the entry it asks about, so its leaf hash is read untimed.
        leaves = [bytes(ledger.store.entry_row(no, i).hash) for i in picks]
        proofs: list[list[bytes]] = []
        gen_s = 0.0
        t0 = time.perf_counter()
        for i in picks:
            proofs.append(ledger.inclusion_proof(i, size))
            if len(proofs) % 256 == 0 and time.perf_counter() - t0 > PROOF_BUDGET_S / 2:
                break
        gen_s = time.perf_counter() - t0
        done = len(proofs)
        t0 = time.perf_counter()
        for i, leaf, proof in zip(picks, leaves, proofs, strict=False):
            merkle.verify_inclusion(leaf, i, size, proof, root)
        ver_s = time.perf_counter() - t0
    return {
        "size": size,
        "count": done,
        "generate_per_s": _rate(done, gen_s),
        "verify_per_s": _rate(done, ver_s),
        "proofs_per_s": _rate(done, gen_s + ver_s),
    }


def _pymerkle_proofs(pymerkle: Any, path: Path, count: int) -> dict[str, Any]:
    """Generate and verify pymerkle inclusion proofs of random leaves (1-based indexes)."""
    rng = random.Random(SEED)
    tree = pymerkle.SqliteTree(str(path))
    try:
        size = tree.get_size()
        root = tree.get_root(size)
        picks = [rng.randrange(1, size + 1) for _ in range(count)]
        leaves = [tree.get_leaf(i) for i in picks]
        done = 0
        t0 = time.perf_counter()
        for i, leaf in zip(picks, leaves, strict=True):
            proof = tree.prove_inclusion(i, size)
            pymerkle.verify_inclusion(leaf, root, proof)
            done += 1
            if time.perf_counter() - t0 > PYMERKLE_PROOF_BUDGET_S:
                break
        seconds = time.perf_counter() - t0
    finally:
        tree.close()
    return {"size": size, "count": done, "proofs_per_s": _rate(done, seconds)}


# -- phase 4: full verify in a child -----------------------------------------------------------


def _verify_child(path: Path) -> dict[str, Any]:
    """Run the full verify in a child process and return its rate and peak RSS.

    The peak RSS is the child's ``VmHWM`` (``/proc/self/status``). ``RUSAGE_CHILDREN``'s
    ``ru_maxrss`` is reported beside it but is not used for the target: on Linux a child's
    ``maxrss`` starts at its parent's high-water mark when it execs (``exec_mmap`` keeps the
    old address space's peak), so after phase 1 it reports this process's size, not the
    verifier's. It is used only where ``/proc`` is missing.

    Raises:
        click.ClickException: if the child fails or the ledger does not verify.
    """
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _VERIFY_CHILD, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    children_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode != 0:
        raise click.ClickException(f"the verify child failed: {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out["ok"]:
        raise click.ClickException(f"the benchmark ledger did not verify: {out['findings']}")
    hwm_kb = out["vm_hwm_kb"]
    return {
        "entries": out["entries"],
        "seconds": out["seconds"],
        "entries_per_s": _rate(out["entries"], out["seconds"]),
        "child_wall_s": wall,
        "peak_rss_mb": (hwm_kb if hwm_kb is not None else children_kb) / 1024,
        "rss_source": "child VmHWM" if hwm_kb is not None else "RUSAGE_CHILDREN",
        "ru_maxrss_children_mb": children_kb / 1024,
        "bench_process_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# -- machine -----------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _fsync_us(work: Path, rounds: int = 50) -> float:
    """Return the median latency of write(4 KiB) + fsync in the work directory, in µs."""
    times: list[float] = []
    fd = os.open(work / "fsync.probe", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(rounds):
            t0 = time.perf_counter()
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return sorted(times)[len(times) // 2] * 1e6


def machine_info(work: Path | None = None) -> dict[str, Any]:
    """Describe the machine and library versions the figures were measured with."""
    import sqlite3

    try:
        from importlib.metadata import version

        pymerkle_version: str | None = version("pymerkle")
    except Exception:
        pymerkle_version = None
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "sqlite_apsw": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
        "sqlite_stdlib": sqlite3.sqlite_version,
        "pymerkle": pymerkle_version,
        "loadavg_start": list(os.getloadavg()),
        "backend": _backend.BACKEND,
    }
    if work is not None:
        info["tmpdir"] = str(work.parent)
        info["fsync_median_us"] = _fsync_us(work)
    return info


# -- the run -----------------------------------------------------------------------------------


def _import_pymerkle() -> Any:
    try:
        import pymerkle
    except ImportError:
        return None
    return pymerkle


def run_bench(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """Run every phase once and return all figures (the ``--json`` document minus the command).

    Raises:
        click.ClickException: if the verify child fails.
    """
    pymerkle = _import_pymerkle()
    sizes = sorted(set(config.sizes))
    largest = sizes[-1]
    notes: list[str] = []
    started = time.perf_counter()
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="memroot-bench-") as tmp:
        root = Path(tmp)
        machine = machine_info(root)
        if pymerkle is None:
            notes.append(
                "pymerkle is not installed (pip install pymerkle): its figures are skipped"
            )
        batched: list[dict[str, Any]] = []
        growth: dict[str, Any] = {}
        pm_proof_tree: Path | None = None
        for n in sizes:
            work = root / f"n{n}"
            work.mkdir()
            progress(f"[1/5] batched append, {n:,} entries: memroot")
            mem = _memroot_batched(work / "memroot.ledger", n)
            progress(f"[1/5] batched append, {n:,} entries: raw apsw")
            raw = _raw_batched(work / "memroot.ledger", n, work / "raw.db")
            pm: dict[str, Any] | None = None
            if pymerkle is not None:
                progress(f"[1/5] batched append, {n:,} entries: pymerkle")
                pm = _pymerkle_batched(pymerkle, work / "memroot.ledger", n, work / "pymerkle.db")
                if n <= PYMERKLE_PROOF_SIZE:
                    pm_proof_tree = work / "pymerkle.db"
            batches = mem.pop("_batches")
            if n == largest:
                growth = _growth(batches, n)
            batched.append(
                {
                    "size": n,
                    "memroot": mem,
                    "raw_apsw": raw,
                    "pymerkle": pm,
                    "ratio_memroot_raw": _ratio(mem["entries_per_s"], raw["entries_per_s"]),
                    "ratio_memroot_pymerkle": (
                        _ratio(mem["entries_per_s"], pm["entries_per_s"]) if pm else None
                    ),
                }
            )
        if pymerkle is not None and pm_proof_tree is None:
            pm_proof_tree = root / f"n{sizes[0]}" / "pymerkle.db"

        work = root / "durable"
        work.mkdir()
        progress(f"[2/5] one entry per fsync'd transaction, {config.durable:,} each")
        durable = _durable(work, config.durable)

        largest_ledger = root / f"n{largest}" / "memroot.ledger"
        progress(f"[3/5] inclusion proof generate + verify at {largest:,}")
        proofs: dict[str, Any] = {"memroot": _memroot_proofs(largest_ledger, config.proofs)}
        proofs["pymerkle"] = None
        if pymerkle is not None and pm_proof_tree is not None:
            progress("[3/5] inclusion proofs: pymerkle")
            proofs["pymerkle"] = _pymerkle_proofs(pymerkle, pm_proof_tree, config.pymerkle_proofs)

        progress(f"[4/5] full verify at {largest:,} in a child process")
        verify = _verify_child(largest_ledger)

        progress(f"[5/5] append rate at {largest:,} against an empty ledger")
    machine["loadavg_end"] = list(os.getloadavg())
    notes.extend(_notes(machine, largest, verify))
    result: dict[str, Any] = {
        "machine": machine,
        "params": {
            "sizes": sizes,
            "batch": BATCH,
            "content_bytes": CONTENT_BYTES,
            "durable": config.durable,
            "proofs": config.proofs,
            "pymerkle_proofs": config.pymerkle_proofs,
        },
        "started": started_at,
        "batched_append": batched,
        "durable_append": durable,
        "inclusion_proofs": proofs,
        "verify": verify,
        "append_growth": growth,
    }
    result["targets"] = [t.to_json() for t in _targets(result)]
    result["notes"] = notes
    result["elapsed_s"] = time.perf_counter() - started
    return result


def _notes(machine: dict[str, Any], largest: int, verify: dict[str, Any]) -> list[str]:
    notes = [
        "memroot is the ledger core alone (no memory-model hooks); every ledger is new, in a "
        f"fresh temp dir under {machine.get('tmpdir')}",
        "batched append: memroot inputs (EventInput, ~100-byte content) are built outside the "
        "timing; the 'incl. construction' figure adds the time to build them",
        "memroot writes per entry: the entry row with its content, digest and salt, the event "
        "id index, the completed tree nodes and the chain head; raw apsw writes only "
        "(k, hash, data) of the same entry bytes; pymerkle hashes and writes (entry, hash)",
        "raw apsw uses memroot's pragmas (WAL, synchronous=FULL, 64 MiB cache); pymerkle "
        "SqliteTree runs as shipped (stdlib sqlite3, rollback journal)",
        "inclusion proofs: the leaf hash of each random entry is read outside the timing "
        "(a verifier holds the entry it asks about)",
        "append growth: the last 10,000 appends of the largest run against the first 10,000 "
        "(met when the last are no more than 15% slower)",
    ]
    if verify["ru_maxrss_children_mb"] > verify["peak_rss_mb"] * 1.1:
        notes.append(
            f"RUSAGE_CHILDREN says {verify['ru_maxrss_children_mb']:.0f} MB for the verify "
            f"child: that is the bench process's own peak "
            f"({verify['bench_process_maxrss_mb']:.0f} MB), which Linux carries into a child "
            "at exec; the child's VmHWM is its real peak"
        )
    if largest < FULL_SIZE:
        notes.append(
            f"targets stated at 10^6 entries were measured at {largest:,} here: "
            "run with --full for the stated sizes"
        )
    fsync = machine.get("fsync_median_us")
    if fsync is not None:
        notes.append(
            f"a 4 KiB write + fsync in the temp dir took {fsync:.0f} µs (median of 50, before "
            "the run); the durable ratio depends on it: memroot's extra time per append is "
            "fixed, so the slower the fsync, the closer the ratio gets to 1"
        )
    return notes


def _targets(r: dict[str, Any]) -> list[Target]:
    """Put every issue-2 target beside the figure this run measured for it."""

    def ge(value: float | None, bound: float) -> bool | None:
        return None if value is None else value >= bound

    out = [
        Target(
            "batched append (memroot, inputs prebuilt)",
            b["size"],
            b["memroot"]["entries_per_s"],
            "entries/s",
            f">= {TARGET_APPEND_PER_S:,}/s",
            ge(b["memroot"]["entries_per_s"], TARGET_APPEND_PER_S),
        )
        for b in r["batched_append"]
    ]
    d = r["durable_append"]
    out.append(
        Target(
            "durable append, memroot / raw apsw",
            d["count"],
            d["ratio_memroot_raw"],
            "ratio",
            f">= {TARGET_DURABLE_RATIO:.2f}",
            ge(d["ratio_memroot_raw"], TARGET_DURABLE_RATIO),
        )
    )
    p = r["inclusion_proofs"]["memroot"]
    out.append(
        Target(
            "inclusion proof generate + verify",
            p["size"],
            p["proofs_per_s"],
            "proofs/s",
            f">= {TARGET_PROOFS_PER_S:,}/s",
            ge(p["proofs_per_s"], TARGET_PROOFS_PER_S),
        )
    )
    v = r["verify"]
    out.append(
        Target(
            "full verify (steps 1-6, 10)",
            v["entries"],
            v["entries_per_s"],
            "entries/s",
            f">= {TARGET_VERIFY_PER_S:,}/s",
            ge(v["entries_per_s"], TARGET_VERIFY_PER_S),
        )
    )
    out.append(
        Target(
            "full verify peak RSS",
            v["entries"],
            v["peak_rss_mb"],
            "MB",
            f"< {TARGET_VERIFY_RSS_MB} MB",
            v["peak_rss_mb"] < TARGET_VERIFY_RSS_MB,
        )
    )
    g = r["append_growth"]
    out.append(
        Target(
            "append rate at size / empty",
            g.get("size"),
            g.get("ratio_last_first"),
            "ratio",
            f">= {TARGET_GROWTH_RATIO:.2f}",
            ge(g.get("ratio_last_first"), TARGET_GROWTH_RATIO),
        )
    )
    return out


# -- output ------------------------------------------------------------------------------------


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "ratio":
        return f"{value:.2f}"
    if unit == "MB":
        return f"{value:.1f} MB"
    return f"{value:,.0f}/s"


def _rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """Return the table rows: (measurement, at, value, target, status)."""
    targets = {(t["name"], t["at"]): t for t in r["targets"]}

    def status(name: str, at: int | None) -> tuple[str, str]:
        t = targets[(name, at)]
        met = "-" if t["met"] is None else ("met" if t["met"] else "UNMET")
        return t["target"], met

    rows: list[tuple[str, str, str, str, str]] = []
    for b in r["batched_append"]:
        n = b["size"]
        at = f"{n:,}"
        name = "batched append (memroot, inputs prebuilt)"
        rows.append((name, at, _num(b["memroot"]["entries_per_s"]), *status(name, n)))
        rows.extend(
            [
                ("  memroot incl. input construction", at,
                 _num(b["memroot"]["entries_per_s_incl_construction"]), "", ""),
                ("  raw apsw executemany, same bytes", at,
                 _num(b["raw_apsw"]["entries_per_s"]), "", ""),
                ("  pymerkle SqliteTree.append_entries", at,
                 _num(b["pymerkle"]["entries_per_s"]) if b["pymerkle"] else "skipped", "", ""),
                ("  ratio memroot / raw apsw", at, _num(b["ratio_memroot_raw"], "ratio"), "", ""),
                ("  ratio memroot / pymerkle", at,
                 _num(b["ratio_memroot_pymerkle"], "ratio"), "", ""),
            ]
        )  # fmt: skip
    d = r["durable_append"]
    name = "durable append, memroot / raw apsw"
    at = f"{d['count']:,}"
    rows.append(("durable append (fsync each), memroot", at, _num(d["memroot_per_s"]), "", ""))
    rows.append(("  raw apsw single-row txns, same bytes", at, _num(d["raw_apsw_per_s"]), "", ""))
    extra = f"{d['memroot_extra_us_per_append']:,.0f} µs"
    rows.append(("  memroot extra time per append", at, extra, "", ""))
    rows.append(("  ratio memroot / raw apsw", at, _num(d["ratio_memroot_raw"], "ratio"),
                 *status(name, d["count"])))  # fmt: skip
    p = r["inclusion_proofs"]["memroot"]
    name = "inclusion proof generate + verify"
    at = f"{p['size']:,}"
    rows.append(("inclusion proof generate + verify", at, _num(p["proofs_per_s"]),
                 *status(name, p["size"])))  # fmt: skip
    rows.append(("  generate only", at, _num(p["generate_per_s"]), "", ""))
    rows.append(("  verify only", at, _num(p["verify_per_s"]), "", ""))
    pm = r["inclusion_proofs"]["pymerkle"]
    rows.append(
        ("  pymerkle prove + verify_inclusion", f"{pm['size']:,}" if pm else "-",
         _num(pm["proofs_per_s"]) if pm else "skipped", "", "")
    )  # fmt: skip
    v = r["verify"]
    at = f"{v['entries']:,}"
    name = "full verify (steps 1-6, 10)"
    rows.append((name, at, _num(v["entries_per_s"]), *status(name, v["entries"])))
    name = "full verify peak RSS"
    rows.append(("  peak RSS (verify child, VmHWM)", at, _num(v["peak_rss_mb"], "MB"),
                 *status(name, v["entries"])))  # fmt: skip
    g = r["append_growth"]
    name = "append rate at size / empty"
    at = f"{g['size']:,}"
    w = f"{g['window']:,}" if g["window"] else "batches"
    rows.append((f"append rate, first {w} (empty ledger)", at, _num(g["first_per_s"]), "", ""))
    rows.append((f"  last {w}", at, _num(g["last_per_s"]), "", ""))
    rows.append(("  ratio last / first", at, _num(g["ratio_last_first"], "ratio"),
                 *status(name, g["size"])))  # fmt: skip
    return rows


def render_human(r: dict[str, Any]) -> str:
    """Return the human report: the machine, a table with targets, and the notes."""
    m = r["machine"]
    head = [
        f"memroot bench: {r['equivalent_command']}",
        f"machine: {m['nproc']} CPUs, {m['cpu_model']}; Python {m['python']}, "
        f"SQLite {m['sqlite_apsw']} (apsw {m['apsw']}), pymerkle {m['pymerkle'] or 'missing'}; "
        f"load {m['loadavg_start'][0]:.2f} -> {m['loadavg_end'][0]:.2f}",
        "",
    ]
    cols = ("measurement", "at", "value", "target", "status")
    rows = [cols, *_rows(r)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    lines = []
    for row in rows:
        cells = [
            row[0].ljust(widths[0]),
            row[1].rjust(widths[1]),
            row[2].rjust(widths[2]),
            row[3].ljust(widths[3]),
            row[4],
        ]
        lines.append("  ".join(cells).rstrip())
    tail = ["", f"elapsed {r['elapsed_s']:.1f} s", "notes:", *(f"- {n}" for n in r["notes"])]
    return "\n".join(head + lines + tail)


# -- the command -------------------------------------------------------------------------------


class SizeList(click.ParamType):  # type: ignore[type-arg]
    """A comma-separated list of positive entry counts (``10000,100000`` or ``1e5``)."""

    name = "N[,N...]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[int, ...]:
        """Parse the list into positive integers."""
        if isinstance(value, tuple):
            return value
        out: list[int] = []
        for part in str(value).split(","):
            text = part.strip().replace("_", "")
            try:
                n = int(float(text)) if "e" in text.lower() else int(text)
            except ValueError:
                self.fail(f"{part!r} is not a whole number of entries", param, ctx)
            if n < 1:
                self.fail(f"sizes must be at least 1, got {n}", param, ctx)
            out.append(n)
        return tuple(out)


def _equivalent_command(sizes: Sequence[int], durable: int, proofs: int, as_json: bool) -> str:
    """Return the ``memroot bench`` command line that repeats this run's parameters."""
    args = ["memroot", "bench", "--sizes", ",".join(str(n) for n in sizes)]
    args += ["--durable", str(durable), "--proofs", str(proofs)]
    if as_json:
        args.append("--json")
    return shlex.join(args)


@cli.command("bench")
@click.option(
    "--sizes",
    type=SizeList(),
    default=",".join(str(n) for n in DEFAULT_SIZES),
    show_default=True,
    help="Ledger sizes for the batched-append phase; the largest is used for the others.",
)
@click.option("--full", is_flag=True, help=f"Add {FULL_SIZE:,} entries (the issue's top size).")
@click.option(
    "--durable",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Single fsync'd appends to time on each side.",
)
@click.option(
    "--proofs",
    type=click.IntRange(min=1),
    default=20_000,
    show_default=True,
    help="Inclusion proofs to generate and verify (at most ~5 s of them).",
)
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Also write the JSON figures to this file.",
)
def bench_cmd(
    sizes: tuple[int, ...],
    full: bool,
    durable: int,
    proofs: int,
    as_json: bool,
    out: Path | None,
) -> None:
    """Measure the ledger core beside raw apsw inserts and pymerkle, with issue 2's targets.

    Runs in fresh temp dirs (nothing is kept); a progress line per phase goes to stderr.
    Default sizes take under a minute on 2 cores; --full adds 10^6 entries (several minutes).

    Example: memroot bench --sizes 10000,100000 --json --out bench.json
    """
    all_sizes = tuple(sorted(set(sizes) | ({FULL_SIZE} if full else set())))
    config = BenchConfig(all_sizes, durable=durable, proofs=proofs)
    result = run_bench(config, lambda msg: click.echo(f"bench {msg}", err=True))
    result["command"] = shlex.join(sys.argv)
    result["equivalent_command"] = _equivalent_command(all_sizes, durable, proofs, as_json)
    if out is not None:
        out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        click.echo(render_human(result))
