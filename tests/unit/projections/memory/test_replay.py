"""Derived memory state: incremental maintenance, rebuild and replay give identical state."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger.entries import EventInput, OpInput, _library_op, new_uuid
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import audit
from memroot.ledger.vocab import (
    EdgeType,
    EntityType,
    EpistemicType,
    MemoryType,
    NamespaceType,
    Permission,
    SourceType,
)
from memroot.projections import requests as rq
from memroot.projections.digest import first_difference, state_digest
from memroot.projections.epistemic import CONFIDENCE_MATRIX
from memroot.projections.hook import MemoryHook, sync
from memroot.projections.query import Query, get_object, query
from memroot.projections.replay import MemoryReplayCheck, rebuild, replay

NAMESPACES = ["ns-a", "ns-b", "ns-c"]
ACTORS = ["alice", "bob", "agent"]
VALID = sorted(k for k, v in CONFIDENCE_MATRIX.items() if v is not None)


def fast(ledger: Ledger) -> Ledger:
    """Single appends without fsync: these tests check logic, not durability."""
    ledger.store.db.execute("PRAGMA synchronous=OFF")
    return ledger


class Generator:
    """Random, mostly plausible events and RFC-0002 operations over a growing state."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.events: list[str] = []
        self.objects: list[str] = []
        self.entities: list[str] = []
        self.pending: tuple[list[str], str] | None = None

    def accepted(self) -> None:
        """The last request landed: its new id may be referenced from now on."""
        if self.pending is not None:
            self.pending[0].append(self.pending[1])
        self.pending = None

    def pick(self, items: list[str]) -> str:
        if not items or self.rng.random() < 0.03:
            return new_uuid()  # a dangling reference now and then
        return self.rng.choice(items)

    def actor(self) -> rq.Actor:
        ns = "ns-c" if self.rng.random() < 0.15 else self.rng.choice(NAMESPACES[:2])
        return rq.Actor(self.rng.choice(ACTORS), "AI_AGENT", ns)

    def types(self) -> tuple[EpistemicType, SourceType]:
        if self.rng.random() < 0.15:
            return self.rng.choice(list(EpistemicType)), self.rng.choice(list(SourceType))
        epi, src = self.rng.choice(VALID)
        return EpistemicType(epi), SourceType(src)

    def next(self, db: apsw.Connection | None) -> EventInput | OpInput:
        self.pending = None
        r, rng = self.rng.random(), self.rng
        by = self.actor()
        if r < 0.30 or not self.events:
            event_id = new_uuid()
            self.pending = (self.events, event_id)
            return EventInput(
                stream="s",
                actor_id=by.actor_id,
                actor_type="HUMAN_USER",
                role="USER",
                content=f"said {rng.random()}",
                namespace_id=by.namespace_id,
                id=event_id,
            )
        if r < 0.50 or not self.objects:
            epi, src = self.types()
            cond = (
                ("it rains", rng.choice(["TRUE", "FALSE", "UNKNOWN"]))
                if (epi == EpistemicType.CONDITIONAL)
                else None
            )
            conf: float | None = None
            if src == SourceType.IMPORTED or epi == EpistemicType.CONDITIONAL:
                conf = round(rng.random(), 3)
            ents = [self.pick(self.entities)] if self.entities and rng.random() < 0.3 else []
            oid = new_uuid()
            self.pending = (self.objects, oid)
            return rq.assert_object(
                by,
                rng.choice(list(MemoryType)),
                epi,
                src,
                sorted({self.pick(self.events) for _ in range(rng.randint(1, 2))}),
                f"value {rng.choice(['tea', 'coffee', 'paris', 'rome'])} {rng.random()}",
                confidence=conf,
                salience=round(rng.random(), 3),
                object_id=oid,
                entity_ids=ents,
                condition=cond,
            )
        target = self.pick(self.objects)
        cur = None if db is None else _current(db, target)
        if r < 0.56:
            return rq.deprecate(by, target, "stale")
        if r < 0.60:
            return rq.archive(by, target, "retention", "policy-7")
        if r < 0.64:
            return rq.supersede(by, target, self.pick(self.objects), "newer")
        if r < 0.67:
            return rq.tombstone(
                by,
                self.pick(self.events),
                "erasure",
                "gdpr-17",
                rng.choice([None, "DEPRECATE", "ARCHIVE", "KEEP"]),
            )
        if r < 0.72:
            frm = (
                cur["epistemic_type"]
                if cur and rng.random() < 0.8
                else rng.choice(list(EpistemicType))
            )
            return rq.transition(
                by,
                target,
                frm,
                rng.choice(list(EpistemicType)),
                "checked",
                [self.pick(self.events)] if rng.random() < 0.5 else [],
            )
        if r < 0.76:
            return rq.contradiction(by, target, self.pick(self.objects), "disagree")
        if r < 0.84:
            c = cur["confidence"] if cur else 0.5
            s = cur["salience"] if cur else 0.5
            d = round(rng.random() / 4, 3)
            kind = rng.randrange(3)
            if kind == 0:
                return rq.decay(by, target, d, max(0.0, s - d), max(0.0, c - d / 2), "exp")
            if kind == 1:
                return rq.reinforce(
                    by, target, "use", d, min(1.0, c + d), min(1.0, s + d), "retrieval"
                )
            return rq.penalty(by, target, "contradicted", d, max(0.0, c - d), "wrong")
        if r < 0.88:
            et = rng.choice(
                [
                    EdgeType.SUPPORTS,
                    EdgeType.RELATES_TO,
                    EdgeType.ABOUT_ENTITY,
                    EdgeType.CONTRADICTS,
                ]
            )
            dst = self.pick(self.entities if et == EdgeType.ABOUT_ENTITY else self.objects)
            return rq.relate(
                by,
                et,
                target,
                dst,
                round(rng.random(), 2),
                "near" if et == EdgeType.RELATES_TO else None,
            )
        if r < 0.92:
            eid = new_uuid()
            self.pending = (self.entities, eid)
            return rq.entity_create(
                by,
                rng.choice(list(EntityType)),
                f"E{len(self.entities)}",
                [f"e{rng.randrange(5)}"],
                entity_id=eid,
            )
        if r < 0.94:
            return rq.entity_merge(
                by, self.pick(self.entities), self.pick(self.entities), ["alias"]
            )
        if r < 0.95:
            return rq.summary_created(by, target, [self.pick(self.objects)], (0, 10), "daily")
        if r < 0.96:
            return rq.dedup_resolved(by, target, [self.pick(self.objects)], "keep-primary")
        if r < 0.975:
            by = rq.Actor(rng.choice(ACTORS), "AI_AGENT", "ns-c")  # policies only in ns-c
            k = rng.randrange(3)
            if k == 0:
                return rq.namespace_create(by, rng.choice(list(NamespaceType)))
            perm = rng.choice(list(Permission))
            grantee = rng.choice(ACTORS)
            return (rq.grant if k == 1 else rq.revoke)(by, grantee, perm)
        return _library_op(
            OpInput(
                op_type="INTEGRITY_CHECK",
                actor_id="memroot",
                actor_type="SYSTEM_PROCESS",
                namespace_id="system",
                payload={"result": "ok"},
                policy_version="p",
            )
        )


def _current(db: apsw.Connection, object_id: str) -> dict[str, Any] | None:
    try:
        return get_object(db, object_id).to_dict()
    except RefusedError:
        return None


def drive(
    ledger: Ledger, gen: Generator, n: int, *, every: int = 0
) -> tuple[int, int, dict[int, bytes]]:
    """Append ``n`` generated requests one by one; return (accepted, refused, digests)."""
    accepted = refused = 0
    digests: dict[int, bytes] = {}
    for i in range(n):
        try:
            ledger.append(gen.next(ledger.store.db))
        except RefusedError:
            refused += 1
        else:
            gen.accepted()
            accepted += 1
        if every and i % every == 0:
            digests[ledger.size() - 1] = state_digest(ledger.store.db)
    return accepted, refused, digests


def step9(path: Path) -> list[str]:
    from memroot.ledger.backends.store import Store

    store = Store(path)
    try:
        report = audit(store, origin=str(store.meta("origin")), checks=[MemoryReplayCheck(path)])
    finally:
        store.close()
    return [str(f) for f in report.findings]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1))
def test_rebuild_equals_incremental_for_random_histories(tmp_path: Path, seed: int) -> None:
    """For any history of mixed operations, rebuild and replay reproduce the stored state."""
    path = tmp_path / f"{new_uuid()}.db"
    with fast(Ledger.init(path, hooks=[MemoryHook()])) as ledger:
        accepted, refused, _ = drive(ledger, Generator(random.Random(seed)), 150)
        assert refused > 0
        assert accepted > 50
        stored = state_digest(ledger.store.db)
        again = replay(ledger.entries())
        assert first_difference(ledger.store.db, again) is None
        assert state_digest(again) == stored
        report = rebuild(ledger)
        assert report.before == stored and report.after == stored
    assert step9(path) == []


def test_thousands_of_mixed_operations_rebuild_identically(tmp_path: Path) -> None:
    """4000 mixed appends (hundreds refused) rebuild to the same digest, and as-of digests hold."""
    path = tmp_path / "big.db"
    with fast(Ledger.init(path, hooks=[MemoryHook()])) as ledger:
        accepted, refused, digests = drive(ledger, Generator(random.Random(7)), 4000, every=250)
        assert accepted > 2500 and refused > 500
        db = ledger.store.db
        ops = db.execute("SELECT count(*) FROM mem_objects WHERE version > 1").fetchone()[0]
        assert ops > 200  # mutations happened, not only creations
        for seq, digest in digests.items():
            assert state_digest(db, as_of=seq) == digest, seq
        stored = state_digest(db)
        report = rebuild(ledger)
        assert report.identical and report.after == stored and report.skipped == 0
        for seq, digest in digests.items():
            assert state_digest(db, as_of=seq) == digest, seq
    assert step9(path) == []


def test_ledger_written_without_hook_folds_the_same_way(tmp_path: Path) -> None:
    """Entries appended without the hook (some invalid) fold by sync exactly as replay does."""
    bare = tmp_path / "bare.db"
    gen = Generator(random.Random(3))
    with fast(Ledger.init(bare, hooks=())) as plain:
        for _ in range(400):
            try:  # only the ledger's own checks apply here
                plain.append(gen.next(None))
            except RefusedError:
                continue
            gen.accepted()
        size = plain.size()
    with fast(Ledger.open(bare, hooks=[MemoryHook()])) as ledger:
        assert sync(ledger) == size
        skipped = ledger.store.db.execute("SELECT count(*) FROM mem_skipped").fetchone()[0]
        assert skipped > 0
        stored = state_digest(ledger.store.db)
        assert rebuild(ledger).after == stored
    assert step9(bare) == []


def test_step9_names_the_first_tampered_object(tmp_path: Path) -> None:
    """A derived row edited behind the ledger's back is a step 9 finding naming the object."""
    path = tmp_path / "t.db"
    with fast(Ledger.init(path, hooks=[MemoryHook()])) as ledger:
        drive(ledger, Generator(random.Random(11)), 120)
        db = ledger.store.db
        victim, rid = db.execute(
            "SELECT id, rid FROM mem_objects WHERE vto IS NULL ORDER BY rid LIMIT 1"
        ).fetchone()
        db.execute("UPDATE mem_objects SET confidence = 0.999 WHERE rid = ?", (rid,))
    findings = step9(path)
    assert len(findings) == 1
    assert "step 9" in findings[0] and victim in findings[0] and "confidence" in findings[0]


def test_step9_catches_a_deleted_version(tmp_path: Path) -> None:
    """Deleting a version row (rewriting history of a belief) is a step 9 finding."""
    path = tmp_path / "d.db"
    with fast(Ledger.init(path, hooks=[MemoryHook()])) as ledger:
        drive(ledger, Generator(random.Random(5)), 120)
        ledger.store.db.execute(
            "DELETE FROM mem_objects WHERE rid = (SELECT min(rid) FROM mem_objects WHERE vto "
            "IS NOT NULL)"
        )
    findings = step9(path)
    assert findings and all("step 9" in f for f in findings)


def test_step9_compares_a_lagging_state_up_to_its_head(tmp_path: Path) -> None:
    """Entries appended without the hook after materialisation are a note, not a violation."""
    path = tmp_path / "lag.db"
    gen = Generator(random.Random(9))
    with fast(Ledger.init(path, hooks=[MemoryHook()])) as ledger:
        drive(ledger, gen, 60)
    with fast(Ledger.open(path, hooks=())) as ledger:
        drive(ledger, gen, 20)
    assert step9(path) == []


def test_rebuild_report_counts(tmp_path: Path) -> None:
    """rebuild reports what it replayed, and None for 'identical' when there was no state."""
    path = tmp_path / "r.db"
    with fast(Ledger.init(path, hooks=())) as ledger:
        ev = ledger.append(
            EventInput(
                stream="s",
                actor_id="u",
                actor_type="HUMAN_USER",
                role="USER",
                content="hi",
                namespace_id="n",
            )
        )
        ledger.append(
            rq.assert_object(
                rq.Actor("a", namespace_id="n"), "FACT", "OBSERVED", "USER_STATED", [ev.id], "hi"
            )
        )
        report = rebuild(ledger)
        assert report.identical is None
        assert (report.entries, report.objects, report.versions, report.edges) == (3, 1, 1, 1)
        assert rebuild(ledger).identical is True


@pytest.mark.parametrize("seed", [1, 2])
def test_replay_is_deterministic(tmp_path: Path, seed: int) -> None:
    """Two replays of the same entries give the same digest (no clock, no randomness)."""
    path = tmp_path / "x.db"
    with fast(Ledger.init(path, hooks=[MemoryHook()])) as ledger:
        drive(ledger, Generator(random.Random(seed)), 100)
        a, b = replay(ledger.entries()), replay(ledger.entries())
        assert state_digest(a) == state_digest(b) == state_digest(ledger.store.db)


def test_as_of_query_matches_what_was_believed_then(tmp_path: Path) -> None:
    """query(as_of=S) later returns exactly what query returned when S was the head."""
    path = tmp_path / "asof.db"
    gen = Generator(random.Random(13))
    seen: dict[int, list[dict[str, Any]]] = {}
    with fast(Ledger.init(path, hooks=[MemoryHook()])) as ledger:
        for i in range(400):
            try:
                ledger.append(gen.next(ledger.store.db))
            except RefusedError:
                pass
            else:
                gen.accepted()
            if i % 40 == 39:
                q = Query(mode="AUDIT", limit=10_000)  # type: ignore[arg-type]
                seen[ledger.size() - 1] = [r.to_dict() for r in query(ledger.store.db, q)]
        for seq, then in seen.items():
            q = Query(mode="AUDIT", limit=10_000, as_of=seq)  # type: ignore[arg-type]
            assert [r.to_dict() for r in query(ledger.store.db, q)] == then


def test_the_hook_catches_up_on_entries_appended_without_it(tmp_path: Path) -> None:
    """The first hooked append folds the entries appended without the hook first."""
    path = tmp_path / "gap.db"
    gen = Generator(random.Random(21))
    with fast(Ledger.init(path, hooks=[MemoryHook()])) as ledger:
        drive(ledger, gen, 40)
    with fast(Ledger.open(path, hooks=())) as ledger:
        drive(ledger, gen, 40)  # no hook: the derived state falls behind
    with fast(Ledger.open(path, hooks=[MemoryHook()])) as ledger:
        db = ledger.store.db
        behind = db.execute("SELECT size FROM mem_heads").fetchone()[0]
        assert behind < ledger.size()
        drive(ledger, gen, 5)
        assert db.execute("SELECT size FROM mem_heads").fetchone()[0] == ledger.size()
        assert first_difference(db, replay(ledger.entries())) is None


def test_why_without_the_signing_key_uses_the_sealed_head_checkpoint(tmp_path: Path) -> None:
    """Without the key, why proves every step against the head checkpoint each append sealed."""
    from memroot.projections.why import why

    path = tmp_path / "nokey.db"
    with fast(Ledger.init(path, hooks=[MemoryHook()])) as ledger:
        ev = ledger.append(
            EventInput(
                stream="s",
                actor_id="u",
                actor_type="HUMAN_USER",
                role="USER",
                content="hi",
                namespace_id="n",
            )
        )
        agent = rq.Actor("a", namespace_id="n")
        oid = ledger.append(
            rq.assert_object(agent, "FACT", "OBSERVED", "USER_STATED", [ev.id], "hi")
        ).id
        ledger.checkpoint()
        ledger.append(rq.penalty(agent, oid, "x", 0.1, 0.8, "doubt"))
    Path(f"{path}.key").rename(tmp_path / "elsewhere.key")
    with Ledger.open(path, hooks=[MemoryHook()]) as ledger:
        w = why(ledger, oid)
    assert w.checkpoint is not None and w.checkpoint.checkpoint.size == 4
    assert [(s.op_type, s.proof is not None) for s in w.operations] == [
        ("ASSERT", True),
        ("PENALTY", True),
    ]
    assert w.evidence[0].proof is not None and w.evidence[0].content == "hi"


class _RefuseBoom:
    """A hook after the memory hook that refuses events saying "boom" (a late rollback)."""

    def install(self, db: apsw.Connection) -> None:
        pass

    def apply(
        self, db: apsw.Connection, ledger: Ledger, entry: Any, content: str | None
    ) -> list[OpInput]:
        if content == "boom":
            raise RefusedError("boom")
        return []


def test_head_tracking_survives_rollbacks_and_other_writers(tmp_path: Path) -> None:
    """After a batch rolled back by a later hook, and appends by another connection without
    the memory hook that reuse those seqs, the hook still folds every entry exactly once."""
    path = tmp_path / "two.db"
    gen = Generator(random.Random(31))
    hooked = fast(Ledger.init(path, hooks=[MemoryHook(), _RefuseBoom()]))
    drive(hooked, gen, 30)
    good = [
        EventInput(
            stream="s",
            actor_id="u",
            actor_type="HUMAN_USER",
            role="USER",
            content=f"e{i}",
            namespace_id="ns-a",
        )
        for i in range(3)
    ]
    boom = EventInput(
        stream="s",
        actor_id="u",
        actor_type="HUMAN_USER",
        role="USER",
        content="boom",
        namespace_id="ns-a",
    )
    with pytest.raises(RefusedError):
        hooked.append_batch([*good, boom])  # the memory hook folded all four, then rollback
    # Another connection without the hook fills exactly the seqs the rolled-back batch used,
    # so the next hooked entry has the seq the memory hook last expected.
    with fast(Ledger.open(path, hooks=())) as bare:
        bare.append_batch([*good, dataclasses.replace(boom, content="fine")])
    drive(hooked, gen, 10)
    db = hooked.store.db
    assert db.execute("SELECT size FROM mem_heads").fetchone()[0] == hooked.size()
    assert first_difference(db, replay(hooked.entries())) is None
    hooked.close()
