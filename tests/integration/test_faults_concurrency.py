"""Concurrency: several processes append and checkpoint at once while readers watch.

Three writer processes each run a fixed mix of single appends, batches, bulk groups and
checkpoints on one ledger file; two reader processes meanwhile read ``(size, root)`` in one read
transaction, again and again, and check every new root against the previous one with an RFC 9162
consistency proof served by their own connection. Afterwards: one gap-free chain that verifies,
holding exactly what the writers acknowledged, no batch split or interleaved, and every root a
reader saw is the final ledger's root at that size (readers only ever saw a consistent prefix).
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for the sibling fault module

import pytest

from memroot.ledger.errors import MemrootError
from memroot.ledger.ledger import Ledger
from memroot.ledger.merkle import verify_consistency
from tests.integration.test_faults_crash import (
    ORIGIN,
    _event,
    acknowledged,
    check_after_crash,
    start_forkserver,
)

WRITERS = 3
READERS = 2
OPS = 40


def bounded_writer(path: str, ack_path: str, seed: int, ops: int) -> None:
    """Run ``ops`` appends, batches and checkpoints, acknowledging each after it returned."""
    from memroot.ledger.entries import new_uuid

    rng = random.Random(seed)
    fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with Ledger.open(Path(path)) as ledger:
        for _ in range(ops):
            r = rng.random()
            if r < 0.35:
                a = ledger.append(_event(rng))
                line = f"S {a.seq} {a.entry_hash.hex()}"
            elif r < 0.85:
                bid, k = new_uuid(), rng.randrange(2, 20)
                out = ledger.append_batch([_event(rng, bid, k) for _ in range(k)])
                line = f"B {bid} {out[0].seq} {k} {out[-1].seq} {out[-1].entry_hash.hex()}"
            else:
                cp = ledger.checkpoint().checkpoint
                line = f"C {cp.size} {cp.root.hex()}"
            os.write(fd, (line + "\n").encode())


def reader(path: str, out_path: str, stop: Any) -> None:
    """Read (size, root) until told to stop; check each root is consistent with the last."""
    seen: list[tuple[int, bytes]] = []
    errors: list[str] = []
    with Ledger.open(Path(path), readonly=True) as ledger:
        while not stop.is_set() or len(seen) < 3:
            try:
                with ledger.store.read():
                    size = ledger.size()
                    root = ledger.root(size)
                    if seen:
                        old_size, old_root = seen[-1]
                        if size < old_size:
                            errors.append(f"size went back from {old_size} to {size}")
                        else:
                            proof = ledger.consistency_proof(old_size, size)
                            verify_consistency(old_size, size, proof, old_root, root)
            except MemrootError as e:
                errors.append(f"{type(e).__name__}: {e}")
                continue
            seen.append((size, root))
    with open(out_path, "w") as f:
        f.writelines(f"{s} {r.hex()}\n" for s, r in seen)
        f.writelines(f"ERROR {e}\n" for e in errors)


@pytest.fixture(scope="module")
def forkserver() -> Any:
    return start_forkserver("tests.integration.test_faults_concurrency")


def test_concurrent_writers_and_readers_share_one_chain(tmp_path: Path, forkserver: Any) -> None:
    """Three writers and two readers at once: one verifying chain, consistent reads."""
    path = tmp_path / "shared.ledger"
    with Ledger.init(path, origin=ORIGIN) as ledger:
        vkey = ledger.vkey()
    stop = forkserver.Event()
    readers = [
        forkserver.Process(target=reader, args=(str(path), str(tmp_path / f"seen{i}"), stop))
        for i in range(READERS)
    ]
    writers = [
        forkserver.Process(
            target=bounded_writer, args=(str(path), str(tmp_path / f"acks{i}"), 100 + i, OPS)
        )
        for i in range(WRITERS)
    ]
    for p in readers + writers:
        p.start()
    for p in writers:
        p.join(120)
        assert p.exitcode == 0, "a writer failed"
    stop.set()
    for p in readers:
        p.join(120)
        assert p.exitcode == 0, "a reader failed"
    appended = 0
    for i in range(WRITERS):
        acks = acknowledged(tmp_path / f"acks{i}")
        assert len(acks) == OPS
        appended += sum(1 if a[0] == "S" else int(a[3]) if a[0] == "B" else 0 for a in acks)
        check_after_crash(path, tmp_path / f"acks{i}", vkey)  # present, whole, consistent
    with Ledger.open(path) as ledger:
        assert ledger.size() == 1 + appended  # one gap-free chain (verify checked the links)
        batches: dict[str, list[int]] = {}
        for e in ledger.entries():
            bid = e.body.get("metadata", {}).get("batch") if e.kind.value == "event" else None
            if bid:
                batches.setdefault(bid, []).append(e.seq)
        for bid, seqs in batches.items():
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"batch {bid} interleaved"
        for i in range(READERS):
            lines = (tmp_path / f"seen{i}").read_text().splitlines()
            assert not [x for x in lines if x.startswith("ERROR")], lines
            observed = [(int(s), bytes.fromhex(r)) for s, r in (x.split() for x in lines)]
            assert len({s for s, _ in observed}) > 1, "a reader never saw the ledger grow"
            for size, root in observed:
                assert ledger.root(size) == root
