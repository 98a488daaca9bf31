"""Several processes appending to one ledger file at once produce one gap-free chain."""

from __future__ import annotations

import multiprocessing as mp
import random
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.ledger import Ledger
from memroot.ledger.trust import TrustedState
from memroot.ledger.verify import verify_path

WORKERS = 4
PER_WORKER = 200
ORIGIN = "example.org/concurrent"


def _item(worker: int, i: int) -> EventInput | OpInput:
    if i % 3 == 2:
        return OpInput(
            op_type="ASSERT",
            actor_id=f"worker-{worker}",
            actor_type="AI_AGENT",
            namespace_id="ns",
            payload={"worker": worker, "i": i},
            policy_version="p/1",
        )
    return EventInput(
        stream=f"w{worker}",
        actor_id=f"worker-{worker}",
        actor_type="AI_AGENT",
        role="ASSISTANT",
        content=f"worker {worker} item {i}",
        namespace_id="ns",
    )


def _worker(path: str, worker: int, barrier: Barrier, out: Any) -> None:
    """Append PER_WORKER entries, singly and in batches, signing a checkpoint now and then."""
    rng = random.Random(worker)
    written: list[tuple[int, str, str, int]] = []
    with Ledger.open(Path(path), hooks=()) as ledger:  # the bare ledger
        barrier.wait()
        i = 0
        while i < PER_WORKER:
            n = 1 if rng.random() < 0.5 else min(rng.randrange(2, 12), PER_WORKER - i)
            items = [_item(worker, i + j) for j in range(n)]
            rows = [ledger.append(items[0])] if n == 1 else ledger.append_batch(items)
            written += [(a.seq, a.entry_hash.hex(), a.id, i + j) for j, a in enumerate(rows)]
            i += n
            if rng.random() < 0.1:
                ledger.checkpoint()
            # Without a pause the writer that holds the lock takes it again at once while the
            # others sleep in SQLite's busy handler, and the processes barely interleave.
            time.sleep(rng.random() * 0.004)
    out.put((worker, written))


def test_concurrent_processes_make_one_chain(tmp_path: Path) -> None:
    """4 processes x 200 appends (single and batch) on one file: no gap, no fork, verify passes."""
    path = tmp_path / "shared.ledger"
    Ledger.init(path, origin=ORIGIN, hooks=()).close()
    ctx = mp.get_context("fork")  # the worker lives in this test module, not an importable one
    barrier = ctx.Barrier(WORKERS)
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(path), w, barrier, out)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    total = 1 + WORKERS * PER_WORKER
    with Ledger.open(path, hooks=()) as ledger:
        assert ledger.size() == total
        stored = {e.seq: e for e in ledger.entries()}
        assert sorted(stored) == list(range(total))
        claimed: dict[int, int] = {}
        for worker, written in results.items():
            assert len(written) == PER_WORKER
            assert [i for *_, i in written] == list(range(PER_WORKER))
            seqs = [s for s, *_ in written]
            assert seqs == sorted(seqs)  # a worker's own entries keep its order
            for seq, entry_hash, entry_id, _ in written:
                assert seq not in claimed, f"seq {seq} handed to two writers"
                claimed[seq] = worker
                assert stored[seq].hash.hex() == entry_hash
                assert stored[seq].body["id"] == entry_id
                assert stored[seq].body["actor_id"] == f"worker-{worker}"
        assert sorted(claimed) == list(range(1, total))
        switches = sum(claimed[s] != claimed[s - 1] for s in range(2, total))
        assert switches >= WORKERS, "the writers never interleaved: nothing was tested"
        for seq in range(1, total):
            assert stored[seq].prev == stored[seq - 1].hash
        ledger.checkpoint()
    report = verify_path(path, trusted=TrustedState(tmp_path / "trusted.json"))
    assert report.ok, [str(f) for f in report.findings]
    assert report.entries == total and report.checkpoints >= 2
