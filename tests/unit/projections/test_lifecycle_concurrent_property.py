"""Strict reads after two concurrent writer processes, with cascades and erasures (issue 23).

The random honest ledgers of ``test_lifecycle_property`` (branches, merges, falsifications,
erasures) grow in this process while two other processes write to the same file at the
same time through ``memroot.open``: events, facts citing them, memory root snapshots,
FALSIFY / MARK_STALE / RESTORE of their own facts and roots, and CASCADE from a falsified
root or fact (the ledger refuses some; they never happened). This process also snapshots,
falsifies roots and cascades. Every write validates against checked state (issue 23.3), so
the property is that none of them is refused as an integrity failure, and then, as in the
single-writer property: no strict read on any branch refuses (no false alarm), an edit of a
served row is refused, ``verify`` holds and ``rebuild`` gives identical tables.
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memroot
from memroot.ledger.errors import IntegrityError, RefusedError
from memroot.projections.replay import rebuild
from tests.unit.projections.test_lifecycle_property import Line, World, _check, _step

WRITER = r"""
import random, sys
import memroot
from memroot.ledger.errors import IntegrityError, RefusedError
path, seed, n, name = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = random.Random(seed)
events, facts, roots, bad = [], [], [], []
with memroot.open(path, actor=name, namespace="ns", trusted=False) as mem:
    for i in range(n):
        r = rng.random()
        try:
            if r < 0.3 or not events:
                parent = rng.choice(events) if events and rng.random() < 0.7 else None
                events.append(mem.record(content=f"{name} {i}", parent=parent).id)
            elif r < 0.55 or not facts:
                facts.append(mem.remember(f"{name} v{i}", evidence=[rng.choice(events)]).id)
            elif r < 0.65:
                roots.append(mem.snapshot().record.root.hex())
            else:
                item = rng.choice(facts + roots)
                what = rng.choice(["falsify", "mark_stale", "restore", "cascade"])
                if what == "cascade":
                    mem.cascade(item, reason="walk")
                else:
                    getattr(mem, what)(item, "random")
        except IntegrityError as e:
            print(f"INTEGRITY {e}", flush=True)
            sys.exit(3)
        except RefusedError:
            pass
print("done", flush=True)
"""


def _extra(rng: random.Random, w: World, roots: list[str]) -> None:
    """A step of this process beside ``_step``: a snapshot, a root falsified, a cascade."""
    mem = w.mem
    r = rng.random()
    try:
        if r < 0.4:
            roots.append(mem.snapshot().record.root.hex())
        elif r < 0.7 and roots:
            mem.falsify(rng.choice(roots), "bad snapshot")
        else:
            items = roots + w.lines["main"].objects
            if items:
                mem.cascade(rng.choice(items), reason="walk")
    except IntegrityError:
        raise
    except RefusedError:
        pass


def _writers(path: Path, seed: int, n: int) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(seed + k), str(n), f"writer-{k}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in (1, 2)
    ]


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(seed=st.integers(0, 2**31), steps=st.integers(40, 90))
def test_concurrent_writers_cascades_never_false_alarm(seed: int, steps: int) -> None:
    """Three writers at once (two processes): no write or strict read refuses the honest file."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        path = tmp / "m.ledger"
        with memroot.open(path, actor="agent", namespace="ns", trusted=False) as mem:
            mem.record(content="start")
        procs = _writers(path, seed, steps)
        roots: list[str] = []
        outs: list[Any] = []
        try:
            with memroot.open(path, actor="agent", namespace="ns", trusted=False) as mem:
                w = World(mem, {"main": Line()})
                for _ in range(steps):
                    if rng.random() < 0.15:
                        _extra(rng, w, roots)
                    else:
                        _step(rng, w)
                outs = [p.communicate(timeout=600) for p in procs]
                for p, (out, err) in zip(procs, outs, strict=True):
                    assert p.returncode == 0 and "done" in out, (out, err)
                _check(w, path, tmp, rng)
                assert rebuild(mem.ledger).identical
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
