"""Write a JSON Lines history for ``memroot import`` (benchmarks of the CLI hooks, issue 12).

    python bench/gen_history.py events 100000 ev100k.jsonl
    python bench/gen_history.py mixed 100000 mix100k.jsonl   # 90% events, 10% memory ops

``events``: events only, ~100 bytes of content each (as ``bench.ledger.events``). ``mixed``:
one line in ten is a memory operation (ASSERT about half of them, the rest REINFORCE, DECAY,
PENALTY, RELATE, CONTRADICTION_DETECTED and DEPRECATE on live objects), every one valid, the
history fully determined by the seed. Timestamps are left to the ledger.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from typing import Any

from memroot.ledger.entries import new_uuid
from memroot.projections import requests as rq

_WORDS = [
    "tea",
    "coffee",
    "alice",
    "bob",
    "paris",
    "london",
    "project",
    "deadline",
    "meeting",
    "code",
    "review",
    "test",
]


def _event(i: int, eid: str | None) -> dict[str, Any]:
    head = f"{i:09d} "
    line: dict[str, Any] = {
        "kind": "event",
        "stream": "bench-session",
        "actor_id": "bench-agent",
        "actor_type": "AI_AGENT",
        "role": "ASSISTANT" if i & 1 else "USER",
        "content": head + "x" * (100 - len(head)),
        "namespace_id": "bench",
    }
    if eid is not None:
        line["id"] = eid
    return line


def _op(op: Any) -> dict[str, Any]:
    d = {
        k: v
        for k, v in dataclasses.asdict(op).items()
        if v is not None and k not in ("plain", "_library")
    }
    return {"kind": "op", **d}


def lines(mode: str, n: int, seed: int = 1) -> list[dict[str, Any]]:
    """Return ``n`` request objects of a history (``mode`` ``events`` or ``mixed``)."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    cited: list[str] = []
    live: dict[str, list[float]] = {}  # object id -> [confidence, salience]
    agent = rq.Actor("agent-1", "AI_AGENT", "bench")
    i = 0
    while len(out) < n:
        i += 1
        if mode == "events" or i % 10 or not cited:
            eid = new_uuid() if mode == "mixed" and i % 10 == 9 else None
            if eid is not None:
                cited.append(eid)
            out.append(_event(i, eid))
            continue
        r = rng.random()
        words = " ".join(rng.choices(_WORDS, k=8))
        if r < 0.5 or len(live) < 3:
            oid = new_uuid()
            out.append(
                _op(
                    rq.assert_object(
                        agent,
                        "FACT",
                        "ASSERTED",
                        "USER_STATED",
                        [cited[-1]],
                        words,
                        salience=0.5,
                        object_id=oid,
                    )
                )
            )
            live[oid] = [0.8, 0.5]
            continue
        recent = list(live)[-200:]
        oid = rng.choice(recent)
        c, s = live[oid]
        if r < 0.6 and c <= 0.9 and s <= 0.9:
            out.append(_op(rq.reinforce(agent, oid, "used", 0.1, c + 0.1, s + 0.1, "chat")))
            live[oid] = [c + 0.1, s + 0.1]
        elif r < 0.7 and c >= 0.1 and s >= 0.1:
            out.append(_op(rq.decay(agent, oid, 0.1, s - 0.1, c - 0.05, "exp")))
            live[oid] = [c - 0.05, s - 0.1]
        elif r < 0.8 and c >= 0.1:
            out.append(_op(rq.penalty(agent, oid, "wrong", 0.1, c - 0.1, "contradicted")))
            live[oid] = [c - 0.1, s]
        elif r < 0.88:
            a, b = rng.sample(recent, 2)
            out.append(_op(rq.relate(agent, "SUPPORTS", a, b, 0.7)))
        elif r < 0.95:
            a, b = rng.sample(recent, 2)
            out.append(_op(rq.contradiction(agent, a, b, "clash")))
        else:
            del live[oid]
            out.append(_op(rq.deprecate(agent, oid, "stale")))
    return out


def main(argv: list[str]) -> None:
    """Write the history ``argv = [mode, n, path]``."""
    mode, n, path = argv[0], int(argv[1]), argv[2]
    if mode not in ("events", "mixed"):
        raise SystemExit("mode must be events or mixed")
    with open(path, "w", encoding="utf-8") as f:
        for line in lines(mode, n):
            f.write(json.dumps(line, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
