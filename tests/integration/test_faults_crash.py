"""Crash safety: writers killed with SIGKILL at random moments lose nothing they acknowledged.

Each trial forks a writer (from a forkserver with memroot preloaded, so a trial costs
milliseconds) that appends single events, batches (every event of a batch carries the batch id
and size in its metadata), bulk groups of batches, and signs checkpoints, in a random mix. After
each call returns, the writer appends an acknowledgement line to a file. The parent kills it
with SIGKILL after a random delay (3-200 ms, log-uniform, so kills land during start-up as well
as mid-stream), reopens the ledger and checks that

- every auditor step passes (``verify``),
- every acknowledged append is present with the acknowledged hash,
- every batch is all there or not there at all,
- every acknowledged checkpoint is stored, and successive signed checkpoints are consistent
  (RFC 9162 consistency proofs between each pair of neighbours verify).

25 trials on each of 4 ledgers: 100 kills in all, each ledger growing across its trials, so
recovery is also tested on ledgers that were killed before.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

import pytest

from memroot.ledger.entries import EventInput, Kind, new_uuid
from memroot.ledger.ledger import Ledger
from memroot.ledger.merkle import verify_consistency
from memroot.ledger.note import Verifier, open_checkpoint
from memroot.ledger.verify import audit

ORIGIN = "example.org/crash-test"
TRIALS = 25
LAYERED_TRIALS = 20
SNAPSHOT_EVERY = 7
MIN_DELAY, MAX_DELAY = 0.003, 0.2


def _event(rng: random.Random, batch: str | None = None, k: int = 1) -> EventInput:
    metadata: dict[str, Any] = {"batch": batch, "k": k} if batch else {"single": True}
    return EventInput(
        stream="s",
        actor_id="agent-7",
        actor_type="AI_AGENT",
        role="ASSISTANT",
        content="x" * rng.randrange(0, 300),
        namespace_id="ns",
        metadata=metadata,
    )


def layer_hooks(layered: bool) -> list[Any]:
    """The CLI's append hooks (memory state, automatic memory_root snapshots), or none."""
    if not layered:
        return []
    from memroot.memory_root.stack import default_hooks

    return list(default_hooks())


def writer(path: str, ack_path: str, seed: int, ready: Any, layered: bool = False) -> None:
    """Append and checkpoint forever, acknowledging every call after it returned.

    ``layered`` installs the layers' hooks, so appends also fold derived state and take
    memory_root snapshots (SNAPSHOT entries) inside the same transactions.
    """
    rng = random.Random(seed)
    fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    if os.path.getsize(ack_path):
        with open(ack_path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                os.write(fd, b"\n")  # a line the last kill cut short ends here, not in ours

    def ack(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    with Ledger.open(Path(path), hooks=layer_hooks(layered)) as ledger:
        # Start-up (opening, installing the layers' tables) is over: the parent's random delay
        # starts now, so on a loaded machine the kills still land among the appends.
        ready.set()
        while True:
            r = rng.random()
            if r < 0.3:
                a = ledger.append(_event(rng))
                ack(f"S {a.seq} {a.entry_hash.hex()}")
            elif r < 0.7:
                bid, k = new_uuid(), rng.randrange(2, 12)
                out = ledger.append_batch([_event(rng, bid, k) for _ in range(k)])
                ack(f"B {bid} {out[0].seq} {k} {out[-1].seq} {out[-1].entry_hash.hex()}")
            elif r < 0.85:
                groups = [(new_uuid(), rng.randrange(2, 6)) for _ in range(rng.randrange(2, 4))]
                with ledger.bulk():
                    outs = [
                        ledger.append_batch([_event(rng, bid, k) for _ in range(k)])
                        for bid, k in groups
                    ]
                for (bid, k), out in zip(groups, outs, strict=True):
                    ack(f"B {bid} {out[0].seq} {k} {out[-1].seq} {out[-1].entry_hash.hex()}")
            else:
                cp = ledger.checkpoint().checkpoint
                ack(f"C {cp.size} {cp.root.hex()}")


_ACK_FIELDS: Final = {"S": 3, "B": 6, "C": 3}
"""Fields of each kind of acknowledgement line, the last one a 32-byte hash in hex."""


def acknowledged(ack_path: Path) -> list[list[str]]:
    """Return the complete acknowledgement lines.

    A kill may cut a line short anywhere, not only the last one: a write that crosses a page
    of the file is two copies, and a fatal signal between them ends it (the next writer then
    starts on a new line). A line is complete when it has its kind's fields and ends in a
    whole hash.
    """
    if not ack_path.exists():
        return []
    lines = [line.split() for line in ack_path.read_text().split("\n")]
    return [f for f in lines if f and len(f) == _ACK_FIELDS.get(f[0], -1) and len(f[-1]) == 64]


def acked_size(ack_path: Path) -> int:
    """Return the ledger size the acknowledgements show (one past the newest acked entry)."""
    size = 0
    for line in acknowledged(ack_path):
        if line[0] == "S":
            size = max(size, int(line[1]) + 1)
        elif line[0] == "B":
            size = max(size, int(line[4]) + 1)
        else:
            size = max(size, int(line[1]))
    return size


def wait_until_acked(ack_path: Path, size: int, timeout: float = 120.0) -> None:
    """Wait until the writer acknowledged a ledger of at least ``size`` entries.

    A trial's kill then lands after progress the test can observe, not after a wall-clock
    delay alone, which on a loaded machine may all go to the writer's start-up.
    """
    deadline = time.monotonic() + timeout
    while acked_size(ack_path) < size:
        assert time.monotonic() < deadline, f"the writer did not reach {size} entries"
        time.sleep(0.01)


def check_after_crash(path: Path, ack_path: Path, vkey: str, layered: bool = False) -> int:
    """Reopen a killed writer's ledger and check every crash-safety property; return its size.

    With ``layered`` the layers' replay checks run too (memory roots, derived state).
    """
    with Ledger.open(path, hooks=layer_hooks(layered)) as ledger:
        checks: list[Any] = []
        if layered:
            from memroot.memory_root.stack import replay_checks

            checks = list(replay_checks(ledger))
        report = audit(ledger.store, origin=ORIGIN, vkeys=[vkey], checks=checks)
        assert report.ok, [str(f) for f in report.findings]
        size = ledger.size()
        batches: Counter[str] = Counter()
        expected_k: dict[str, int] = {}
        for e in ledger.entries():
            if e.kind is Kind.EVENT and "batch" in e.body.get("metadata", {}):
                bid = e.body["metadata"]["batch"]
                batches[bid] += 1
                expected_k[bid] = e.body["metadata"]["k"]
        for bid, n in batches.items():
            assert n == expected_k[bid], f"batch {bid} is half present: {n} of {expected_k[bid]}"
        stored = {
            open_checkpoint(note, [Verifier.from_vkey(vkey)]).checkpoint.size: note
            for note in ledger.checkpoints()
        }
        for line in acknowledged(ack_path):
            if line[0] == "S":
                assert ledger.entry(int(line[1])).hash.hex() == line[2], line
            elif line[0] == "B":
                bid, first, k, last, last_hash = line[1], *map(int, line[2:5]), line[5]
                assert batches[bid] == k, f"acknowledged batch {bid} is missing"
                assert ledger.entry(first).body["metadata"]["batch"] == bid
                assert ledger.entry(last).hash.hex() == last_hash
            else:
                cp_size, cp_root = int(line[1]), bytes.fromhex(line[2])
                assert cp_size in stored, f"acknowledged checkpoint {cp_size} is missing"
                assert ledger.root(cp_size) == cp_root
        sizes = sorted(stored)
        for s1, s2 in itertools.pairwise(sizes):
            verify_consistency(
                s1, s2, ledger.consistency_proof(s1, s2), ledger.root(s1), ledger.root(s2)
            )
    return size


def start_forkserver(module: str) -> Any:
    """Return a forkserver context that has memroot and the test module ``module`` preloaded.

    The server imports them once, so every writer forks from it quickly; the writer signals
    when it is running, and only then does the random delay before the kill start.
    """
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:  # the server imports this test module by name (importlib mode)
        sys.path.insert(0, root)
    ctx = multiprocessing.get_context("forkserver")
    # Modules that fail to import are skipped by the server; the layers' modules make the
    # layered writer start as fast as the plain one.
    layers = [
        "memroot.memory_root.stack",
        "memroot.memory_root.hook",
        "memroot.memory_root.replay",
        "memroot.projections.hook",
    ]
    ctx.set_forkserver_preload(["memroot.ledger.ledger", "memroot.ledger.verify", *layers, module])
    return ctx


@pytest.fixture(scope="module")
def forkserver() -> Any:
    return start_forkserver(__name__)


@pytest.mark.parametrize("ledger_no", range(4))
def test_sigkill_at_random_moments_loses_nothing_acknowledged(
    tmp_path: Path, forkserver: Any, ledger_no: int
) -> None:
    """After 25 SIGKILLs of a busy writer, every acknowledged write is there and it verifies."""
    path = tmp_path / "crash.ledger"
    ack_path = tmp_path / "acks"
    with Ledger.init(path, origin=ORIGIN) as ledger:
        vkey = ledger.vkey()
    rng = random.Random(1000 + ledger_no)
    sizes = []
    for trial in range(TRIALS):
        ready = forkserver.Event()
        seed = rng.randrange(2**32)
        p = forkserver.Process(target=writer, args=(str(path), str(ack_path), seed, ready))
        p.start()
        assert ready.wait(60), "the writer did not start"
        time.sleep(math.exp(rng.uniform(math.log(MIN_DELAY), math.log(MAX_DELAY))))
        if trial == TRIALS - 1:  # the last kill comes after at least one acknowledged append
            wait_until_acked(ack_path, 2)
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
        assert p.exitcode == -signal.SIGKILL, f"trial {trial}: the writer died on its own"
        sizes.append(check_after_crash(path, ack_path, vkey))
    assert sizes == sorted(sizes)
    assert sizes[-1] > 1, "no trial appended anything: the kills came too early to test much"


def test_sigkill_during_appends_with_automatic_snapshots(tmp_path: Path, forkserver: Any) -> None:
    """With the layers' hooks (snapshot every 7 entries) 20 SIGKILLs leave every step passing."""
    path = tmp_path / "layered.ledger"
    ack_path = tmp_path / "acks"
    with Ledger.init(
        path, origin=ORIGIN, snapshot_every=SNAPSHOT_EVERY, hooks=layer_hooks(True)
    ) as ledger:
        vkey = ledger.vkey()
    rng = random.Random(77)
    for trial in range(LAYERED_TRIALS):
        ready = forkserver.Event()
        args = (str(path), str(ack_path), rng.randrange(2**32), ready, True)
        p = forkserver.Process(target=writer, args=args)
        p.start()
        assert ready.wait(60), "the writer did not start"
        time.sleep(math.exp(rng.uniform(math.log(MIN_DELAY), math.log(MAX_DELAY))))
        if trial == LAYERED_TRIALS - 1:  # the last kill comes after a third snapshot point
            wait_until_acked(ack_path, 3 * SNAPSHOT_EVERY + 1)
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
        assert p.exitcode == -signal.SIGKILL, f"trial {trial}: the writer died on its own"
        check_after_crash(path, ack_path, vkey, layered=True)
    with Ledger.open(path) as ledger:
        assert sum(1 for e in ledger.entries() if e.type == "SNAPSHOT") > 1


def unsafe_writer(path: str, ack_path: str, seed: int, ready: Any) -> None:
    """A deliberately broken writer: each event of a batch in its own transaction."""
    rng = random.Random(seed)
    ready.set()
    with Ledger.open(Path(path), hooks=()) as ledger:  # the bare ledger: opens at once
        while True:
            bid, k = new_uuid(), rng.randrange(2, 12)
            for _ in range(k):
                ledger.append(_event(rng, bid, k))


def test_the_checks_catch_a_writer_that_is_not_atomic(tmp_path: Path, forkserver: Any) -> None:
    """The same kills and checks find a half-written batch when batches are not atomic."""
    path = tmp_path / "unsafe.ledger"
    with Ledger.init(path, origin=ORIGIN, hooks=()) as ledger:
        vkey = ledger.vkey()
    rng = random.Random(7)
    for _ in range(40):
        ready = forkserver.Event()
        args = (str(path), str(tmp_path / "acks"), rng.randrange(2**32), ready)
        p = forkserver.Process(target=unsafe_writer, args=args)
        p.start()
        assert ready.wait(60)
        time.sleep(rng.uniform(0.02, 0.1))
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
        try:
            check_after_crash(path, tmp_path / "acks", vkey)
        except AssertionError as e:
            assert "half present" in str(e)
            return
    pytest.fail("40 kills of a non-atomic writer never left a half batch: the check is blind")
