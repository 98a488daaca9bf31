"""The judge of recorded skips after an append: fed only what is new, or replayed whole.

``python -m memroot.bench.bench_skip_judge [--objects N] [--rounds R]``: one ledger of N
remembered facts (each with its evidence event) that holds skip rows of both layers (a bare
``ASSERT`` and a bare ``FALSIFY``, each citing an event that does not exist, appended
without the hooks), opened by one long-lived handle. Each round, another connection appends
a fact and a bare ``FALSIFY`` of it (a new skip), then the handle's checked ``recall``
(completeness check: both judges of skip rows) is timed in CPU time
(``time.process_time``), alternately in two modes on the same handle:

- ``incremental``: as the read gate runs (``strict_rows.kept_replay``: the kept replays fed
  the new entries);
- ``whole``: the kept replays dropped before the read, so both are replayed from the
  genesis (what every read after an append cost before: a replay per change of heads).

Prints the min and median CPU milliseconds of each, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any


def run(objects: int, rounds: int) -> dict[str, list[float]]:
    """Return the CPU seconds of each timed recall, per mode."""
    import memroot
    from memroot.ledger.entries import OpInput
    from memroot.ledger.ledger import Ledger
    from memroot.memory_root.falsify import replay
    from memroot.projections import strict_rows

    def bare(path: Path, op_type: str, target: str | None, payload: dict[str, Any]) -> None:
        with Ledger.open(path, hooks=()) as led:
            led.append(
                OpInput(
                    op_type=op_type,
                    actor_id="mallory",
                    actor_type="HUMAN_USER",
                    namespace_id="alice",
                    policy_version="p/1",
                    target_id=target,
                    target_type="memory_object" if target else None,
                    payload=payload,
                )
            )

    missing = str(uuid.uuid4())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "skips.ledger"
        with (
            memroot.open(path, actor="a", namespace="alice", trusted=False) as mem,
            mem.ledger.bulk(),
        ):
            for i in range(objects):
                ev = mem.record(content=f"fact number {i}")
                last = mem.remember(f"fact {i} holds", evidence=[ev.id]).id
        assert_payload = {
            "object_type": "FACT",
            "epistemic_type": "OBSERVED",
            "source_type": "USER_STATED",
            "evidence_ids": [missing],
            "value": "cites no event",
            "confidence": None,
            "salience": 0.5,
        }
        bare(path, "ASSERT", None, assert_payload)
        bare(path, "FALSIFY", last, {"reason": "r", "evidence_ids": [missing]})
        times: dict[str, list[float]] = {"incremental": [], "whole": []}
        with memroot.open(path, actor="a", namespace="alice", trusted=False) as mem:
            mem.recall(limit=20)  # the first judgement: a whole replay in either mode
            with memroot.open(path, actor="a", namespace="alice", trusted=False) as other:
                for i in range(2 * rounds):
                    ev = other.record(content=f"heard {i}")
                    fact = other.remember(f"heard {i} holds", evidence=[ev.id]).id
                    bare(path, "FALSIFY", fact, {"reason": "r", "evidence_ids": [missing]})
                    mode = "whole" if i % 2 else "incremental"
                    if mode == "whole":
                        strict_rows._SKIPS.clear()
                        replay._SKIPS.clear()
                    t = time.process_time()
                    mem.recall(limit=20)
                    times[mode].append(time.process_time() - t)
    return times


def main() -> None:
    """Run the A/B and print it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    times = run(a.objects, a.rounds)
    for mode, ts in times.items():
        print(
            f"{mode:12} recall after an append: min {min(ts) * 1e3:8.1f} ms CPU, "
            f"median {statistics.median(ts) * 1e3:8.1f} ms CPU ({len(ts)} reads)"
        )
    inc, whole = times["incremental"], times["whole"]
    print(
        f"whole / incremental: min {min(whole) / min(inc):.1f}x, "
        f"median {statistics.median(whole) / statistics.median(inc):.1f}x"
    )


if __name__ == "__main__":
    main()
