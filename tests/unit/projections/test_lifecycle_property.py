"""Strict reads on random honest ledgers with forks and merges (issue 28, issue 23 point 10).

Random conversation trees grow on main and on SIMULATION forks (forks of forks too) through
``memroot.open`` (every default hook: memory, branches, falsification, erasure), interleaved
with ASSERT, SUPERSEDE, DEPRECATE and ARCHIVE (with and without evidence), REINFORCE,
EPISTEMIC_TRANSITION, DEDUP_RESOLVED, FALSIFY / MARK_STALE / RESTORE, TOMBSTONE with
``on_dependents`` and selective merges (the ledger refuses some; they never happened). Then,
on every branch, with and without anchors, in DEFAULT and AUDIT mode:

- no strict read (``recall``, ``why``; now and as of earlier entries) refuses the honest
  ledger (no false alarm);
- every served object is re-derived: editing its stored row (value, confidence or lifecycle
  state) in a copy makes the same read refuse;
- the same for reads at an anchor, checked against the log's replay: deleting a served
  object's ``DERIVED_FROM`` edges in a copy makes the anchored read refuse;
- the same for reads by words, types, entity (entities created and merged, objects tied by
  their ASSERT or by RELATE) and actor (namespaces with policies, READ granted and revoked),
  whose selections the read gate takes from the log; deleting an ``ABOUT_ENTITY`` edge row or
  a ``READ`` grant row that an entity or actor read rests on makes it refuse;
- no ACTIVE object resting on erased evidence is served without ``EVIDENCE_ERASED``;
- a merge imported only live objects, and refused every falsified or stale one;
- ``verify`` holds and ``rebuild`` gives identical tables.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memroot
from memroot.ledger.errors import IntegrityError, MemrootError, NotFoundError, RefusedError
from memroot.memory import Memory
from memroot.memory_root.falsify import Falsifier
from memroot.projections import requests as rq
from memroot.projections.checked import checked_query, unchecked_query
from memroot.projections.query import MAX_LIMIT, Query, Result, get_object
from memroot.projections.replay import rebuild

AGENT = rq.Actor("agent", "AI_AGENT", "ns")
POLICED = ("ns2", "ns3")
"""Namespaces the random ledgers give policies (and objects) to; ``ns`` keeps none."""
READERS = ("agent", "reader", "nobody")
STATES = ("ACTIVE", "DEPRECATED", "SUPERSEDED", "ARCHIVED")


@dataclass
class Line:
    """What a branch sees: its events (inherited at the fork and its own) and objects."""

    events: list[str] = field(default_factory=list)
    own_events: list[str] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)
    own_objects: list[str] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)


@dataclass
class World:
    mem: Memory
    lines: dict[str, Line]
    merges: list[tuple[str, list[str], dict[str, str], bool]] = field(default_factory=list)
    """(branch, objects, their falsification states before the merge, whether it landed)."""


def _try(f: Any) -> Any:
    try:
        return f()
    except RefusedError:
        return None


def _relations(rng: random.Random, w: World, b: str) -> None:
    """One entity or namespace step on branch ``b`` (the ledger refuses some: never happened)."""
    mem, line = w.mem, w.lines[b]
    k = rng.randrange(7)
    if k == 0 or not line.entities:
        eid = str(uuid.uuid4())
        req = rq.entity_create(AGENT, "PERSON", f"p{eid[:4]}", (), eid)
        if _try(lambda: mem.ledger.append(req, branch=b)) is not None:
            line.entities.append(eid)
    elif k == 1 and len(line.entities) > 1:
        one, other = rng.sample(line.entities, 2)
        _try(lambda: mem.ledger.append(rq.entity_merge(AGENT, one, other), branch=b))
    elif k == 2 and line.events:
        ns = rng.choice(("ns", *POLICED))
        ents = rng.sample(line.entities, min(rng.choice([1, 1, 2]), len(line.entities)))
        got = _try(
            lambda: mem.remember(
                f"v{rng.randrange(100)}",
                evidence=[rng.choice(line.events)],
                branch=b,
                entity_ids=ents,
                namespace=ns,
            )
        )
        if got is not None:
            line.objects.append(got.id)
            line.own_objects.append(got.id)
    elif k == 3 and line.objects:
        oid, eid = rng.choice(line.objects), rng.choice(line.entities)
        _try(lambda: mem.ledger.append(rq.relate(AGENT, "ABOUT_ENTITY", oid, eid), branch=b))
    else:
        by = rq.Actor("agent", "AI_AGENT", rng.choice(POLICED))
        who, perm = rng.choice(READERS[:2]), rng.choice(["READ", "READ", "ASSERT"])
        make = rng.choice(
            [
                lambda: rq.namespace_create(by, "PROJECT"),
                lambda: rq.grant(by, who, perm),
                lambda: rq.revoke(by, who, perm),
            ]
        )
        _try(lambda: mem.ledger.append(make(), branch=b))


def _step(rng: random.Random, w: World) -> None:
    mem, lines = w.mem, w.lines
    b = rng.choice(sorted(lines))
    line = lines[b]
    db = mem.ledger.derived.db
    if rng.random() < 0.2:
        _relations(rng, w, b)
        return
    r = rng.random()
    if r < 0.18 or not line.events:
        parent = rng.choice(line.events) if line.events and rng.random() < 0.8 else None
        e = mem.record(content=f"m{rng.randrange(10**6)}", parent=parent, branch=b).id
        line.events.append(e)
        line.own_events.append(e)
        return
    if r < 0.36 or not line.objects:
        ev = rng.sample(line.events, min(rng.choice([1, 1, 2]), len(line.events)))
        got = _try(lambda: mem.remember(f"v{rng.randrange(100)}", evidence=ev, branch=b))
        if got is not None:
            line.objects.append(got.id)
            line.own_objects.append(got.id)
        return
    if r < 0.44 and len(lines) < 4:
        child = mem.fork("what if", parent=b, branch_id=f"sim-{len(lines)}")
        p = lines[b]
        lines[child] = Line(list(p.events), [], list(p.objects), [], list(p.entities))
        return
    if r < 0.52 and b != "main" and line.own_objects:
        ids = rng.sample(line.own_objects, min(2, len(line.own_objects)))
        before = {}
        for i in ids:
            try:
                before[i] = get_object(db, i, branch=b).state
            except MemrootError:
                before[i] = "missing"
        landed = _try(lambda: mem.merge(b, ids)) is not None
        w.merges.append((b, ids, before, landed))
        if landed:
            parent = _parent(mem, b)
            lines[parent].objects += [
                r.object.id for r in mem.recall(branch=parent, mode="AUDIT", limit=MAX_LIMIT)
            ]
        return
    oid = rng.choice(line.objects)
    evidence = [rng.choice(line.events)] if rng.random() < 0.5 else []
    kind = rng.randrange(11)
    f = Falsifier(mem.ledger)
    try:
        o = get_object(db, oid, branch=b)
    except MemrootError:
        return
    ops: dict[int, Any] = {
        0: lambda: rq.supersede(AGENT, oid, rng.choice(line.objects), "newer"),
        1: lambda: rq.deprecate(AGENT, oid, "r", evidence_ids=evidence),
        2: lambda: rq.archive(AGENT, oid, "old", "policy", evidence_ids=evidence),
        3: lambda: rq.reinforce(
            AGENT,
            oid,
            "use",
            0.05,
            min(1.0, round(o.confidence + 0.05, 6)),
            min(1.0, round(o.salience + 0.05, 6)),
            "t",
            evidence_ids=evidence,
        ),
        4: lambda: rq.transition(
            AGENT, oid, o.epistemic_type, "OBSERVED", "checked", evidence_ids=evidence
        ),
        5: lambda: rq.dedup_resolved(
            AGENT, oid, rng.sample(line.objects, min(2, len(line.objects))), "KEEP"
        ),
    }
    if kind in ops:
        _try(lambda: mem.ledger.append(ops[kind](), branch=b))
    elif kind == 6:
        _try(lambda: f.falsify(oid, "wrong", evidence, branch=b))
    elif kind == 7:
        _try(lambda: f.mark_stale(oid, "check", evidence, branch=b))
    elif kind == 8:
        _try(lambda: f.restore(oid, "checked", evidence, branch=b))
    elif kind == 9 and line.own_events:
        target = rng.choice(line.own_events)
        how = rng.choice(["DEPRECATE", "ARCHIVE"])
        _try(lambda: mem.ledger.append(rq.tombstone(AGENT, target, "r", "p", how), branch=b))
    else:
        _try(lambda: mem.ledger.append(rq.penalty(AGENT, oid, "w", 0.05, 0.0, "r"), branch=b))


def _parent(mem: Memory, branch: str) -> str:
    row = mem.ledger.derived.db.execute(
        "SELECT parent FROM mem_forks WHERE branch = ?", (branch,)
    ).fetchone()
    return str(row[0])


def _erased(mem: Memory) -> set[str]:
    db = mem.ledger.derived.db
    return {i for (i,) in db.execute("SELECT id FROM mem_events WHERE erased_by IS NOT NULL")}


def _copy(path: Path, copy: Path) -> Path:
    """Copy the ledger (a consistent snapshot, its key beside it) for an attack on the copy."""
    src, dst = apsw.Connection(str(path)), apsw.Connection(str(copy))
    with dst.backup("main", src, "main") as backup:
        backup.step()
    src.close()
    dst.close()
    shutil.copyfile(f"{path}.key", f"{copy}.key")
    return copy


def _tampered_read(
    path: Path, tmp: Path, o: Any, branch: str, anchor: str | None, n: int, rng: random.Random
) -> None:
    """Edit the served version's row of ``o`` in a copy; the same strict read must refuse."""
    copy = _copy(path, tmp / f"copy{n}.ledger")
    column = rng.choice(["value", "confidence", "lifecycle_state"])
    new: Any = {
        "value": f"{o.value} (edited)",
        "confidence": round((o.confidence + 0.37) % 1.0, 6),
        "lifecycle_state": rng.choice([s for s in STATES if s != o.lifecycle_state]),
    }[column]
    db = apsw.Connection(str(copy))
    with db:
        db.execute(
            f"UPDATE mem_objects SET {column} = ? WHERE id = ? AND branch = ? AND vfrom = ?",
            (new, o.id, o.branch, o.seq),
        )
    db.close()
    with memroot.open(copy, actor="agent", namespace="ns") as mem:
        try:
            mem.recall(branch=branch, anchor=anchor, mode="AUDIT", limit=MAX_LIMIT)
        except IntegrityError as e:
            assert "step 9" in str(e)
        else:
            raise AssertionError(f"edited {column} of {o.id} on {branch} (anchor {anchor}) served")
        try:
            mem.why(o.id, branch=branch)
        except IntegrityError:
            pass
        else:
            raise AssertionError(f"edited {column} of {o.id}: why served it on {branch}")


def _gated(mem: Memory, q: Query) -> list[Result]:
    with mem.ledger.reading():
        return checked_query(mem.ledger, q)


def _check_relations(
    mem: Memory, path: Path, tmp: Path, b: str, line: Line, rng: random.Random
) -> None:
    """Entity and actor reads never refuse the honest ledger; deleting what one rests on does."""
    size = mem.ledger.size(b)
    stray = str(uuid.uuid4())
    for mode in ("DEFAULT", "AUDIT"):
        for limit in (2, MAX_LIMIT):
            for as_of in (None, *rng.sample(range(size), min(2, size))):
                for eid in (*rng.sample(line.entities, min(3, len(line.entities))), stray):
                    with contextlib.suppress(NotFoundError):  # not (yet) in this view
                        _gated(
                            mem, Query(entity=eid, branch=b, mode=mode, limit=limit, as_of=as_of)
                        )
                for actor in READERS:
                    _gated(mem, Query(actor=actor, branch=b, mode=mode, limit=limit, as_of=as_of))
    for eid in rng.sample(line.entities, min(2, len(line.entities))):
        q = Query(entity=eid, branch=b, mode="AUDIT", limit=MAX_LIMIT)
        got = _gated(mem, q)
        if got:
            _tampered_relation(path, tmp, q, got, "edge")
            break
    q = Query(actor="reader", branch=b, mode="AUDIT", limit=MAX_LIMIT)
    _tampered_relation(path, tmp, q, _gated(mem, q), "grant")


def _tampered_relation(path: Path, tmp: Path, q: Query, got: list[Result], what: str) -> None:
    """Delete in a copy what a served entity or actor read rests on; the same read must refuse."""
    copy = _copy(path, tmp / f"rel-{uuid.uuid4().hex[:8]}.ledger")
    db = apsw.Connection(str(copy))
    with db:
        if what == "derived":
            # Every DERIVED_FROM edge of the newest object served at the anchor.
            db.execute(
                "DELETE FROM mem_edges WHERE type = 'DERIVED_FROM' AND source_id = ?",
                (got[0].object.id,),
            )
        elif what == "edge":
            # Every ABOUT_ENTITY edge of the newest object served: it is about nothing now.
            db.execute(
                "DELETE FROM mem_edges WHERE type = 'ABOUT_ENTITY' AND source_id = ?",
                (got[0].object.id,),
            )
        else:
            # The reader's READ of a namespace with a policy whose objects it was served.
            ns = [r.object.namespace_id for r in got if r.object.namespace_id in POLICED]
            db.execute(
                "DELETE FROM mem_grants WHERE actor_id = 'reader' AND permission = 'READ' AND "
                "namespace_id IN (SELECT value FROM json_each(?)) AND namespace_id IN "
                "(SELECT id FROM mem_namespaces)",
                (json.dumps(ns),),
            )
    shown = [r.object.id for r in unchecked_query(db, q)]
    db.close()
    if shown == [r.object.id for r in got]:
        return  # the rows deleted were none the read rested on (closed, or another view's)
    with memroot.open(copy, actor="agent", namespace="ns") as mem:
        try:
            _gated(mem, q)
        except IntegrityError as e:
            assert "step 9" in str(e)
        else:
            raise AssertionError(f"{what} rows deleted, the read still served: {q}")


def _check(w: World, path: Path, tmp: Path, rng: random.Random) -> None:
    mem = w.mem
    erased = _erased(mem)
    # Merges: only live objects landed; every falsified or stale one was refused.
    for _b, _ids, before, landed in w.merges:
        if any(s in ("stale", "falsified") for s in before.values()):
            assert not landed, before
    tampered = 0
    for b, line in sorted(w.lines.items()):
        anchors: list[str | None] = [None, *rng.sample(line.events, min(3, len(line.events)))]
        for anchor in anchors:
            for mode in ("DEFAULT", "AUDIT"):
                got = mem.recall(branch=b, anchor=anchor, mode=mode, limit=MAX_LIMIT)
                for r in got:
                    o = r.object
                    if o.lifecycle_state == "ACTIVE" and erased & set(o.evidence_ids):
                        assert "EVIDENCE_ERASED" in r.flags, (b, anchor, o.id)
                    if mode == "DEFAULT":
                        assert o.state != "falsified", (b, anchor, o.id)
                if mode == "AUDIT" and got and anchor is not None and tampered < 6:
                    q = Query(anchor=anchor, branch=b, mode="AUDIT", limit=MAX_LIMIT)
                    _tampered_relation(path, tmp, q, _gated(mem, q), "derived")
                if mode == "AUDIT" and got and tampered < 6:
                    pick = rng.choice(got).object
                    stored = get_object(mem.ledger.derived.db, pick.id, branch=b)
                    _tampered_read(path, tmp, stored, b, anchor, tampered, rng)
                    tampered += 1
        # Words and types: the page taken by the log's ASSERTs is the index's (no refusal).
        for mode in ("DEFAULT", "AUDIT"):
            for limit in (2, MAX_LIMIT):
                for text in (f"v{rng.randrange(100)}", "v*"):
                    got = mem.recall(branch=b, text=text, mode=mode, limit=limit)
                    word = text.rstrip("*")
                    assert all(
                        any(w.lower().startswith(word) for w in re.findall(r"\w+", r.object.value))
                        for r in got
                    ), text
                typed = mem.recall(branch=b, types=["FACT"], mode=mode, limit=limit)
                assert all(r.object.type == "FACT" for r in typed)
                assert mem.recall(branch=b, types=["PREFERENCE"], mode=mode, limit=limit) == []
        _check_relations(mem, path, tmp, b, line, rng)
        size = mem.ledger.size(b)
        for as_of in rng.sample(range(size), min(3, size)):
            for anchor in (None, *rng.sample(line.events, min(1, len(line.events)))):
                # As of an earlier entry (the anchor may not exist yet: then refused, named).
                with contextlib.suppress(NotFoundError):
                    mem.recall(branch=b, anchor=anchor, as_of=as_of, mode="AUDIT", limit=MAX_LIMIT)
        for oid in rng.sample(line.objects, min(2, len(line.objects))):
            with contextlib.suppress(NotFoundError):
                mem.why(oid, branch=b)
    assert mem.verify().ok


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(60, 150))
def test_strict_reads_on_random_forked_ledgers_never_false_alarm(seed: int, steps: int) -> None:
    """Strict reads of honest random ledgers with forks and merges serve, re-derive and flag."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        path = tmp / "m.ledger"
        with memroot.open(path, actor="agent", namespace="ns") as mem:
            w = World(mem, {"main": Line()})
            for _ in range(steps):
                _step(rng, w)
            _check(w, path, tmp, rng)
            report = rebuild(mem.ledger)
            assert report.identical
