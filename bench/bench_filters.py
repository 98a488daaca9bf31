"""The read gate's cost for queries by words, entity and actor, checked and unchecked.

``python -m memroot.bench.bench_filters [--objects N] [--reads R]``: one ledger of N
remembered facts, each about one of N/20 entities (a tenth of those merged into another) and
in one of four namespaces (two with a policy that lets ``reader`` READ one of them). For
each query (``text``, ``entity``, ``actor``, and the plain query for comparison) the median
CPU time (``time.process_time``) of R reads through the gate
(``projections.checked.checked_query``: the filters' selections taken from the log,
``projections.assert_index``) beside the same query through ``unchecked_query`` on the same
open ledger, repeated (nothing changed), and right after another connection's ``record``
(the gate's memos of the query end; the log index is fed the entry appended).
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


def _cpu(fn: Callable[[], Any]) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def build(path: Path, objects: int) -> list[str]:
    """Write the ledger; return the entity ids (primaries first)."""
    import memroot
    from memroot.projections import requests as rq

    me = rq.Actor("agent", "AI_AGENT", "ns0")
    entities = [str(uuid.UUID(int=i + 1)) for i in range(max(2, objects // 20))]
    with memroot.open(path, actor="agent", namespace="ns0", trusted=False) as mem:
        with mem.ledger.bulk():
            for i, eid in enumerate(entities):
                mem.ledger.append(rq.entity_create(me, "PERSON", f"person {i}", (), eid))
            for ns in ("ns2", "ns3"):
                by = rq.Actor("agent", "AI_AGENT", ns)
                mem.ledger.append(rq.namespace_create(by, "PROJECT"))
                mem.ledger.append(rq.grant(by, "agent", "ASSERT"))
            mem.ledger.append(rq.grant(rq.Actor("agent", "AI_AGENT", "ns2"), "reader", "READ"))
            for i in range(objects):
                ev = mem.record(content=f"fact number {i}")
                mem.remember(
                    f"fact {i} holds",
                    evidence=[ev.id],
                    entity_ids=[entities[i % len(entities)]],
                    namespace=f"ns{i % 4}",
                )
            for i in range(1, len(entities) // 10 + 1):
                mem.ledger.append(rq.entity_merge(me, entities[0], entities[i]))
    return entities


def run(objects: int, reads: int) -> list[tuple[str, float, float, float, float]]:
    """Return per query: (name, checked, unchecked, checked after a commit, unchecked after)."""
    import memroot
    from memroot.projections.checked import checked_query, unchecked_query
    from memroot.projections.epistemic import RetrievalMode
    from memroot.projections.query import Query

    out = []
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "filters.ledger"
        entities = build(path, objects)
        queries = {
            "plain": Query(mode=RetrievalMode.DEFAULT, limit=20),
            "text": Query(text="holds", mode=RetrievalMode.DEFAULT, limit=20),
            "entity": Query(entity=entities[0], mode=RetrievalMode.DEFAULT, limit=20),
            "actor": Query(actor="reader", mode=RetrievalMode.DEFAULT, limit=20),
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
                assert [r.object.id for r in checked(q)()] == [
                    r.object.id for r in unchecked(q)()
                ]
                rep = [_cpu(checked(q)) for _ in range(reads)]
                plain = [_cpu(unchecked(q)) for _ in range(reads)]
                after, after_plain = [], []
                for _ in range(reads):
                    other.record(content="another agent's note")
                    after.append(_cpu(checked(q)))
                    other.record(content="another agent's note")
                    after_plain.append(_cpu(unchecked(q)))
                med = [statistics.median(x) * 1e6 for x in (rep, plain, after, after_plain)]
                out.append((name, *med))
    return out


def main() -> None:
    """Print the figures, one line per query."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--reads", type=int, default=50)
    a = ap.parse_args()
    for name, c, u, ca, ua in run(a.objects, a.reads):
        print(
            f"{name:<7} checked {c:7.0f} us, unchecked {u:6.0f} us, {c / u:5.2f}x; after "
            f"another connection's commit {ca:7.0f} us, unchecked after it {ua:6.0f} us, "
            f"{ca / ua:5.2f}x"
        )


if __name__ == "__main__":
    main()
