"""The ledger core measured beside raw apsw inserts and pymerkle (issue 2, ``memroot bench``).

One ``run``, fresh temporary directories, eight phases, each announced through ``progress``
(phases 6-9, the CLI's hooked paths, are in ``memroot.bench.hooked``):

1. Batched append (1,000 entries per transaction) at each size: memroot ``append_batch`` of
   prebuilt ``EventInput`` objects (``batched_memroot``), raw apsw ``executemany`` of the *same
   entry bytes* into ``(k, hash, data)`` (``batched_raw_apsw``), and pymerkle's
   ``SqliteTree.append_entries`` of the same bytes (``batched_pymerkle``).
2. One entry per durable (``synchronous=FULL``, fsync'd) transaction: memroot ``append`` beside
   raw apsw single-row transactions of the same bytes, interleaved in blocks so both see the
   same background load (``durable_appends``).
3. Inclusion proof generate + verify at the largest size (``proofs_memroot``; pymerkle at
   10^5 or the largest size built for it, ``proofs_pymerkle``).
4. Full verify (auditor's steps 1-7 and 10) in a child process: entries/s and its peak RSS
   (``full_verify``).
5. Append rate on the largest ledger against the rate on an empty one, from phase 1
   (``append_growth``).

On the native core, the batched append and the full verify are repeated on the pure-Python
reference (``reference_backend``). Phases 6-9 (``memroot.bench.hooked``): ``memroot import``,
the mixed history and ``memroot verify`` (all ten steps) of each, ``memroot rebuild`` and
``memroot import-bundle`` of the mixed history's bundle, with every CLI hook, on this backend
and on the reference.

Each measurement is one function returning its ``TypedDict`` from ``memroot.bench.results``;
``run`` calls them in order and assembles the report (targets from ``memroot.bench.targets``).
The memroot ledgers of phases 1-5 are the core alone (no memory-model hooks).
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Final, Literal, TypeVar

import apsw

from memroot.bench.hooked import hooked_phases
from memroot.bench.machine import machine_info
from memroot.bench.results import (
    BatchedAppend,
    DurableAppend,
    Growth,
    HookedBench,
    InclusionProofs,
    LedgerBench,
    MachineInfo,
    MemrootBatched,
    MemrootProofs,
    PymerkleProofs,
    ReferenceBackend,
    Throughput,
    VerifyResult,
)
from memroot.bench.targets import targets
from memroot.ledger import _backend, merkle
from memroot.ledger.entries import EventInput
from memroot.ledger.errors import IntegrityError, MemrootError
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import ActorType, Role

__all__ = [
    "BATCH",
    "DEFAULT_SIZES",
    "FULL_SIZE",
    "BenchConfig",
    "Progress",
    "append_growth",
    "batched_memroot",
    "batched_pymerkle",
    "batched_raw_apsw",
    "durable_appends",
    "events",
    "full_verify",
    "planned_sizes",
    "proofs_memroot",
    "proofs_pymerkle",
    "run",
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

_PRAGMAS: Final = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA cache_size=-65536")
_RAW_SCHEMA: Final = "CREATE TABLE entries(k INTEGER PRIMARY KEY, hash BLOB, data BLOB)"
_RAW_INSERT: Final = "INSERT INTO entries(k, hash, data) VALUES(?, ?, ?)"
_FILLER: Final = (
    "the agent noted that the user prefers tea without sugar and meetings after ten; "
    "remember it for the next session. "
)

T = TypeVar("T")

Progress = Callable[[str], None]
"""Receives one line per phase (``[k/9] ...``); the CLI prints it on stderr."""

HookedKey = Literal[
    "import_events", "verify_import", "mixed_append", "verify_mixed", "rebuild", "import_bundle"
]


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """What to measure: ledger sizes, durable-append count and inclusion-proof counts.

    Raises:
        ValueError: if a size or count is not a positive integer.
    """

    sizes: tuple[int, ...]
    durable: int = 1000
    proofs: int = 20_000
    pymerkle_proofs: int = 300

    def __post_init__(self) -> None:
        if not self.sizes or any(type(n) is not int or n < 1 for n in self.sizes):
            raise ValueError(f"sizes must be positive integers, got {self.sizes!r}")
        if self.durable < 1 or self.proofs < 1 or self.pymerkle_proofs < 1:
            raise ValueError("durable, proofs and pymerkle_proofs must be positive")


# -- inputs ------------------------------------------------------------------------------------


def _content(i: int) -> str:
    """Return the ~100-byte content of event ``i`` (distinct per event)."""
    head = f"{i:09d} "
    return head + _FILLER[: CONTENT_BYTES - len(head)]


def events(start: int, count: int) -> list[EventInput]:
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


def _entry_batches(
    path: Path, n: int, size: int = BATCH
) -> Iterator[tuple[int, list[tuple[bytes, bytes]]]]:
    """Yield ``(first seq, [(hash, data), ...])`` of entries 1..n of ``path`` in batches."""
    with Ledger.open(path, readonly=True) as ledger:
        no = ledger.branch_row().no
        first = 1
        batch: list[tuple[bytes, bytes]] = []
        for row in ledger.store.iter_entry_rows(no, 1, n + 1):
            batch.append((bytes(row.hash), bytes(row.data)))
            if len(batch) == size:
                yield first, batch
                first += len(batch)
                batch = []
        if batch:
            yield first, batch


def _timed(items: Iterable[T], write: Callable[[T], object]) -> float:
    """Return the seconds spent in ``write`` over ``items``; producing each item is untimed."""
    seconds = 0.0
    for item in items:
        t0 = time.perf_counter()
        write(item)
        seconds += time.perf_counter() - t0
    return seconds


def _raw_db(path: Path) -> apsw.Connection:
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


def _import_pymerkle() -> ModuleType | None:
    """Return the pymerkle module, or ``None`` when it is not installed (its figures skip)."""
    try:
        return importlib.import_module("pymerkle")
    except ImportError:
        return None


# -- phase 1 and 5: batched appends -------------------------------------------------------------


def batched_memroot(path: Path, n: int) -> tuple[MemrootBatched, list[tuple[int, float]]]:
    """Append ``n`` events in batches of ``BATCH`` to a new ledger; time construction apart.

    Returns the figures and, per batch, ``(entries, seconds)`` for ``append_growth``.
    """
    build_s = append_s = 0.0
    batches: list[tuple[int, float]] = []
    with Ledger.init(path, hooks=()) as ledger:
        for start in range(0, n, BATCH):
            t0 = time.perf_counter()
            items = events(start, min(BATCH, n - start))
            t1 = time.perf_counter()
            ledger.append_batch(items)
            t2 = time.perf_counter()
            build_s += t1 - t0
            append_s += t2 - t1
            batches.append((len(items), t2 - t1))
        ledger.checkpoint()  # so full verify (phase 4) checks a signed root at the full size
    result: MemrootBatched = {
        "entries": n,
        "append_s": append_s,
        "construction_s": build_s,
        "entries_per_s": _rate(n, append_s),
        "entries_per_s_incl_construction": _rate(n, append_s + build_s),
    }
    return result, batches


def batched_raw_apsw(source: Path, n: int, path: Path) -> Throughput:
    """Insert the entry bytes of ``source`` with apsw ``executemany``, one transaction a batch."""
    db = _raw_db(path)

    def insert(rows: list[tuple[int, bytes, bytes]]) -> None:
        db.execute("BEGIN IMMEDIATE")
        db.executemany(_RAW_INSERT, rows)
        db.execute("COMMIT")

    try:
        rows = (
            [(k, h, d) for k, (h, d) in enumerate(batch, first)]
            for first, batch in _entry_batches(source, n)
        )
        seconds = _timed(rows, insert)
    finally:
        db.close()
    return {"entries": n, "seconds": seconds, "entries_per_s": _rate(n, seconds)}


def batched_pymerkle(pymerkle: ModuleType, source: Path, n: int, path: Path) -> Throughput:
    """Append the entry bytes of ``source`` with ``SqliteTree.append_entries``, a call a batch."""
    tree = pymerkle.SqliteTree(str(path))
    try:
        data = ([d for _, d in batch] for _, batch in _entry_batches(source, n))
        seconds = _timed(data, tree.append_entries)
    finally:
        tree.close()
    return {"entries": n, "seconds": seconds, "entries_per_s": _rate(n, seconds)}


def append_growth(batches: Sequence[tuple[int, float]], n: int) -> Growth:
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


def durable_appends(work: Path, count: int) -> DurableAppend:
    """Time ``count`` single fsync'd appends with memroot and with raw apsw, interleaved."""
    mem_s = raw_s = 0.0
    db = _raw_db(work / "raw.db")
    try:
        with Ledger.init(work / "durable.ledger", hooks=()) as ledger:
            no = ledger.branch_row().no
            for start in range(0, count, DURABLE_BLOCK):
                items = events(start, min(DURABLE_BLOCK, count - start))
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


def proofs_memroot(path: Path, count: int) -> MemrootProofs:
    """Generate and verify inclusion proofs of random entries against the full tree."""
    rng = random.Random(SEED)
    with Ledger.open(path, readonly=True) as ledger:
        size = ledger.size()
        no = ledger.branch_row().no
        root = ledger.root(size)
        picks = [rng.randrange(size) for _ in range(count)]
        # A caller asks for the proof of an entry it holds, one it has just read: each entry
        # is read (untimed) right before its proof, so its page, which holds the sibling
        # leaf too, is as warm as a real caller leaves it. Read all up front (as before
        # 2026-12-01), 20,000 random entries outgrow the 64 MiB page cache at 10^6 and every
        # timed proof paid a cold page of the ~600 MB entries table.
        leaves: list[bytes] = []
        proofs: list[list[bytes]] = []
        gen_s = 0.0
        for i in picks:
            leaves.append(bytes(ledger.store.entry_row(no, i).hash))
            t0 = time.perf_counter()
            proofs.append(ledger.inclusion_proof(i, size))
            gen_s += time.perf_counter() - t0
            if len(proofs) % 256 == 0 and gen_s > PROOF_BUDGET_S / 2:
                break
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


def proofs_pymerkle(pymerkle: ModuleType, path: Path, count: int) -> PymerkleProofs:
    """Generate and verify pymerkle inclusion proofs of random leaves (1-based indexes)."""
    rng = random.Random(SEED)
    tree = pymerkle.SqliteTree(str(path))
    try:
        size: int = tree.get_size()
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


def full_verify(path: Path, *, backend: str | None = None) -> VerifyResult:
    """Run the full verify in a child process and return its rate and peak RSS.

    ``backend`` (``"python"`` or ``"native"``) sets the child's ``MEMROOT_BACKEND``; by
    default the child inherits this process's environment.

    The peak RSS is the child's ``VmHWM`` (``/proc/self/status``). ``RUSAGE_CHILDREN``'s
    ``ru_maxrss`` is reported beside it but is not used for the target: on Linux a child's
    ``maxrss`` starts at its parent's high-water mark when it execs (``exec_mmap`` keeps the
    old address space's peak), so after phase 1 it reports this process's size, not the
    verifier's. It is used only where ``/proc`` is missing.

    Raises:
        IntegrityError: if the benchmark ledger does not verify.
        MemrootError: if the child fails.
    """
    t0 = time.perf_counter()
    env = None if backend is None else {**os.environ, "MEMROOT_BACKEND": backend}
    proc = subprocess.run(
        [sys.executable, "-m", "memroot.bench._verify_child", str(path)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    wall = time.perf_counter() - t0
    children_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode != 0:
        raise MemrootError(f"the verify child failed: {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out["ok"]:
        raise IntegrityError(f"the benchmark ledger did not verify: {out['findings']}")
    hwm_kb: int | None = out["vm_hwm_kb"]
    entries: int = out["entries"]
    seconds: float = out["seconds"]
    cpu: float = out["cpu_s"]
    return {
        "entries": entries,
        "seconds": seconds,
        "entries_per_s": _rate(entries, seconds),
        "cpu_s": cpu,
        "entries_per_cpu_s": _rate(entries, cpu),
        "child_wall_s": wall,
        "peak_rss_mb": (hwm_kb if hwm_kb is not None else children_kb) / 1024,
        "rss_source": "child VmHWM" if hwm_kb is not None else "RUSAGE_CHILDREN",
        "ru_maxrss_children_mb": children_kb / 1024,
        "bench_process_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# -- the run -----------------------------------------------------------------------------------


def _batched_at(
    work: Path, n: int, pymerkle: ModuleType | None, progress: Progress
) -> tuple[BatchedAppend, list[tuple[int, float]]]:
    """Phase 1 at one size: memroot, then raw apsw and pymerkle on the bytes memroot wrote."""
    source = work / "memroot.ledger"
    progress(f"[1/9] batched append, {n:,} entries: memroot")
    mem, batches = batched_memroot(source, n)
    progress(f"[1/9] batched append, {n:,} entries: raw apsw")
    raw = batched_raw_apsw(source, n, work / "raw.db")
    pm: Throughput | None = None
    if pymerkle is not None:
        progress(f"[1/9] batched append, {n:,} entries: pymerkle")
        pm = batched_pymerkle(pymerkle, source, n, work / "pymerkle.db")
    row: BatchedAppend = {
        "size": n,
        "memroot": mem,
        "raw_apsw": raw,
        "pymerkle": pm,
        "ratio_memroot_raw": _ratio(mem["entries_per_s"], raw["entries_per_s"]),
        "ratio_memroot_pymerkle": (
            _ratio(mem["entries_per_s"], pm["entries_per_s"]) if pm else None
        ),
    }
    return row, batches


def planned_sizes(sizes: Sequence[int], full: bool) -> tuple[int, ...]:
    """Return the sizes a run measures: sorted, once each, with ``FULL_SIZE`` if ``full``."""
    return tuple(sorted(set(sizes) | ({FULL_SIZE} if full else set())))


def run(
    sizes: Sequence[int],
    *,
    full: bool = False,
    durable: int = 1000,
    proofs: int = 20_000,
    pymerkle_proofs: int = 300,
    hooked: bool = True,
    hooked_size: int | None = None,
    progress: Progress | None = None,
) -> LedgerBench:
    """Run every phase once and return all figures (the ``--json`` document minus the command).

    ``full`` adds ``FULL_SIZE`` to ``sizes``; the largest size is used for phases 2-5, and for
    the hooked phases 6-9 (``memroot.bench.hooked``) unless ``hooked_size`` is given;
    ``hooked=False`` leaves phases 6-9 out (``hooked`` is then ``None``). On the native core
    every phase is also measured on the pure-Python reference (``reference_backend``).

    Raises:
        ValueError: if a size or count is not positive.
        IntegrityError: if the benchmark ledger does not verify.
        MemrootError: if the verify child fails.
    """
    if hooked_size is not None and (type(hooked_size) is not int or hooked_size < 1):
        raise ValueError(f"hooked_size must be a positive integer, got {hooked_size!r}")
    config = BenchConfig(
        planned_sizes(sizes, full),
        durable=durable,
        proofs=proofs,
        pymerkle_proofs=pymerkle_proofs,
    )
    say: Progress = progress or (lambda _msg: None)
    pymerkle = _import_pymerkle()
    largest = config.sizes[-1]
    hooked_n = (hooked_size or largest) if hooked else None
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
        batched: list[BatchedAppend] = []
        largest_batches: list[tuple[int, float]] = []
        pm_proof_tree: Path | None = None
        for n in config.sizes:
            work = root / f"n{n}"
            work.mkdir()
            row, batches = _batched_at(work, n, pymerkle, say)
            batched.append(row)
            if pymerkle is not None and n <= PYMERKLE_PROOF_SIZE:
                pm_proof_tree = work / "pymerkle.db"
            if n == largest:
                largest_batches = batches
        if pymerkle is not None and pm_proof_tree is None:
            pm_proof_tree = root / f"n{config.sizes[0]}" / "pymerkle.db"

        work = root / "durable"
        work.mkdir()
        say(f"[2/9] one entry per fsync'd transaction, {config.durable:,} each")
        durable_append = durable_appends(work, config.durable)

        largest_ledger = root / f"n{largest}" / "memroot.ledger"
        say(f"[3/9] inclusion proof generate + verify at {largest:,}")
        inclusion: InclusionProofs = {
            "memroot": proofs_memroot(largest_ledger, config.proofs),
            "pymerkle": None,
        }
        if pymerkle is not None and pm_proof_tree is not None:
            say("[3/9] inclusion proofs: pymerkle")
            inclusion["pymerkle"] = proofs_pymerkle(pymerkle, pm_proof_tree, config.pymerkle_proofs)

        say(f"[4/9] full verify at {largest:,} in a child process")
        verify = full_verify(largest_ledger)

        say(f"[5/9] append rate at {largest:,} against an empty ledger")
        growth = append_growth(largest_batches, largest)
        reference = None
        if _backend.BACKEND == "native":
            say(f"[+] the pure-Python reference at {largest:,}: batched append and full verify")
            reference = reference_backend(root / "reference", largest, batched[-1], verify)
        hooked_runs: list[HookedBench] = []
        if hooked_n is not None:
            work = root / "hooked"
            work.mkdir()
            backends: list[tuple[str | None, str]] = [(None, _backend.BACKEND)]
            if reference is not None:
                backends.append(("python", "reference"))
            hooked_runs = hooked_phases(work, hooked_n, backends, progress=say)
            if reference is not None:
                _add_hooked_reference(reference, hooked_runs[0], hooked_runs[1])
    machine["loadavg_end"] = list(os.getloadavg())
    notes.extend(_notes(machine, largest, verify, hooked_n))
    result: LedgerBench = {
        "machine": machine,
        "params": {
            "sizes": list(config.sizes),
            "batch": BATCH,
            "content_bytes": CONTENT_BYTES,
            "durable": config.durable,
            "proofs": config.proofs,
            "pymerkle_proofs": config.pymerkle_proofs,
            "hooked_size": hooked_n,
        },
        "started": started_at,
        "batched_append": batched,
        "durable_append": durable_append,
        "inclusion_proofs": inclusion,
        "verify": verify,
        "append_growth": growth,
        "reference_backend": reference,
        "hooked": hooked_runs[0] if hooked_runs else None,
        "targets": [],
        "notes": notes,
        "elapsed_s": 0.0,
    }
    result["targets"] = targets(result)
    result["elapsed_s"] = time.perf_counter() - started
    return result


def reference_backend(
    work: Path, n: int, native: BatchedAppend, native_verify: VerifyResult
) -> ReferenceBackend:
    """Measure the pure-Python reference beside the native figures of the same run.

    Batched append of ``n`` events with the native calls switched off in this process
    (``_backend.reference()``), then the full verify of that ledger in a child with
    ``MEMROOT_BACKEND=python``.

    Raises:
        IntegrityError, MemrootError: as ``full_verify``.
    """
    work.mkdir()
    with _backend.reference():
        ref, _ = batched_memroot(work / "memroot.ledger", n)
    ref_verify = full_verify(work / "memroot.ledger", backend="python")
    append_rate = ref["entries_per_s"]
    verify_rate = ref_verify["entries_per_s"]
    return {
        "size": n,
        "batched_append_per_s": append_rate,
        "verify_per_s": verify_rate,
        "ratio_append_native_reference": _ratio(native["memroot"]["entries_per_s"], append_rate),
        "ratio_verify_native_reference": _ratio(native_verify["entries_per_s"], verify_rate),
        "hooked": None,
        "ratio_import_native_reference": None,
        "ratio_verify_import_native_reference": None,
        "ratio_mixed_append_native_reference": None,
        "ratio_verify_mixed_native_reference": None,
        "ratio_rebuild_native_reference": None,
        "ratio_import_bundle_native_reference": None,
    }


def _add_hooked_reference(ref: ReferenceBackend, native: HookedBench, python: HookedBench) -> None:
    """Put the reference's phases 6-9 and the native / reference ratios into ``ref``."""
    ref["hooked"] = python

    def ratio(key: HookedKey) -> float | None:
        return _ratio(native[key]["entries_per_s"], python[key]["entries_per_s"])

    ref["ratio_import_native_reference"] = ratio("import_events")
    ref["ratio_verify_import_native_reference"] = ratio("verify_import")
    ref["ratio_mixed_append_native_reference"] = ratio("mixed_append")
    ref["ratio_verify_mixed_native_reference"] = ratio("verify_mixed")
    ref["ratio_rebuild_native_reference"] = ratio("rebuild")
    ref["ratio_import_bundle_native_reference"] = ratio("import_bundle")


def _notes(
    machine: MachineInfo, largest: int, verify: VerifyResult, hooked_n: int | None
) -> list[str]:
    """Return the notes that say how this run measured and what bounds its figures."""
    notes = [
        "phases 1-5: memroot is the ledger core alone (no memory-model hooks); every ledger "
        f"is new, in a fresh temp dir under {machine.get('tmpdir')}",
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
    if hooked_n is not None:
        notes.append(
            "phases 6-9 run the CLI with every hook, each measurement in its own child "
            "process (its peak RSS is its own), timed around the command (start-up and imports "
            "excluded; the per-CPU-second figure is the child's CPU time): memroot import of a "
            "JSON Lines file of events (one transaction), the mixed history appended in "
            "batches of 1,000 (one sealed transaction each, automatic snapshots signed after "
            "each batch), memroot verify --no-update (all ten steps) and memroot rebuild"
        )
        notes.append(
            "mixed history: per 100 entries 90 events, 7 ASSERT, 1 SUPERSEDE, 1 DEPRECATE, "
            "1 FALSIFY; its ledger also holds the automatic SNAPSHOT entries (one every 1,000)"
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
