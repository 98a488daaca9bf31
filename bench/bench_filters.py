"""The read gate's cost for queries by words, entity and actor, checked and unchecked.

``python -m memroot.bench.bench_filters [--objects N] [--reads R]``: one ledger of N
remembered facts, each about one of N/20 entities (a tenth of those merged into another) and
in one of four namespaces (two with a policy that lets ``reader`` READ one of them), the
events conversations of ``--turns`` turns (20; each the parent of the next). For each query
(``text``, ``entity``, ``actor``, ``anchor`` at the newest event, and the plain query) the
median CPU time (``time.process_time``) of R reads through the gate
(``projections.checked.checked_query``: the filters' selections taken from the log,
``projections.assert_index``) beside the same query through ``unchecked_query`` on the same
open ledger, repeated (nothing changed), and right after another connection's ``record``
(the gate's memos of the query end; the log index is fed the entry appended). And the
first checked anchored read of a process (``cold``: the log's replay that read is checked
against built from the start, ``strict_rows.replayed_model``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHAIN = 20
"""Turns per conversation (``--turns``)."""


def _cpu(fn: Callable[[], Any]) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def build(path: Path, objects: int) -> tuple[list[str], str]:
    """Write the ledger; return the entity ids (primaries first) and the newest event."""
    import memroot
    from memroot.projections import requests as rq

    me = rq.Actor("agent", "AI_AGENT", "ns0")
    entities = [str(uuid.UUID(int=i + 1)) for i in range(max(2, objects // 20))]
    with (
        memroot.open(path, actor="agent", namespace="ns0", trusted=False) as mem,
        mem.ledger.bulk(),
    ):
        for i, eid in enumerate(entities):
            mem.ledger.append(rq.entity_create(me, "PERSON", f"person {i}", (), eid))
        for ns in ("ns2", "ns3"):
            by = rq.Actor("agent", "AI_AGENT", ns)
            mem.ledger.append(rq.namespace_create(by, "PROJECT"))
            mem.ledger.append(rq.grant(by, "agent", "ASSERT"))
        mem.ledger.append(rq.grant(rq.Actor("agent", "AI_AGENT", "ns2"), "reader", "READ"))
        parent = None
        for i in range(objects):
            ev = mem.record(content=f"fact number {i}", parent=parent if i % CHAIN else None)
            parent = ev.id
            mem.remember(
                f"fact {i} holds",
                evidence=[ev.id],
                entity_ids=[entities[i % len(entities)]],
                namespace=f"ns{i % 4}",
            )
        for i in range(1, len(entities) // 10 + 1):
            mem.ledger.append(rq.entity_merge(me, entities[0], entities[i]))
    assert parent is not None
    return entities, parent


def run(objects: int, reads: int) -> list[tuple[str, float, float, float, float]]:
    """Return per query: (name, checked, unchecked, checked after a commit, unchecked after)."""
    import memroot
    from memroot.projections import checked as gate
    from memroot.projections import strict_rows
    from memroot.projections.checked import checked_query, unchecked_query
    from memroot.projections.epistemic import RetrievalMode
    from memroot.projections.query import Query

    out: list[tuple[str, float, float, float, float]] = []
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "filters.ledger"
        entities, last = build(path, objects)
        queries = {
            "plain": Query(mode=RetrievalMode.DEFAULT, limit=20),
            "text": Query(text="holds", mode=RetrievalMode.DEFAULT, limit=20),
            "entity": Query(entity=entities[0], mode=RetrievalMode.DEFAULT, limit=20),
            "actor": Query(actor="reader", mode=RetrievalMode.DEFAULT, limit=20),
            "anchor": Query(anchor=last, mode=RetrievalMode.DEFAULT, limit=20),
        }
        with (
            memroot.open(path, actor="agent", namespace="ns0", trusted=False) as mem,
            memroot.open(path, actor="other", namespace="ns0", trusted=False) as other,
        ):
            led = mem.ledger

            def checked(q: Query) -> Callable[[], Any]:
                def f() -> Any:
                    with led.reading():
                        return checked_query(led, q)

                return f

            def unchecked(q: Query) -> Callable[[], Any]:
                def f() -> Any:
                    with led.reading() as db:
                        return unchecked_query(db, q)

                return f

            for name, q in queries.items():
                assert [r.object.id for r in checked(q)()] == [r.object.id for r in unchecked(q)()]
                rep = [_cpu(checked(q)) for _ in range(reads)]
                plain = [_cpu(unchecked(q)) for _ in range(reads)]
                after, after_plain = [], []
                for _ in range(reads):
                    other.record(content="another agent's note")
                    after.append(_cpu(checked(q)))
                    other.record(content="another agent's note")
                    after_plain.append(_cpu(unchecked(q)))
                med = [statistics.median(x) * 1e6 for x in (rep, plain, after, after_plain)]
                out.append((name, med[0], med[1], med[2], med[3]))
            cold = []
            for _ in range(3):
                strict_rows._SKIPS.clear()
                gate._KEPT.clear()
                other.record(content="another agent's note")
                cold.append(_cpu(checked(queries["anchor"])))
            out.append(("cold", statistics.median(cold) * 1e6, out[-1][2], 0.0, 1.0))
    return out


def main() -> None:
    """Print the figures, one line per query."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--reads", type=int, default=50)
    ap.add_argument("--turns", type=int, default=20, help="turns per conversation")
    a = ap.parse_args()
    global CHAIN
    CHAIN = a.turns
    for name, c, u, ca, ua in run(a.objects, a.reads):
        if name == "cold":
            print(f"anchor, the first checked read of a process: {c:7.0f} us ({c / u:.0f}x)")
            continue
        print(
            f"{name:<7} checked {c:7.0f} us, unchecked {u:6.0f} us, {c / u:5.2f}x; after "
            f"another connection's commit {ca:7.0f} us, unchecked after it {ua:6.0f} us, "
            f"{ca / ua:5.2f}x"
        )


if __name__ == "__main__":
    main()
