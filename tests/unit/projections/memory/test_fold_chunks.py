"""Replay folds runs of events together (``Engine.fold_events``): the rows are the same as
folding every entry on its own, refused events included."""

from __future__ import annotations

import random
from pathlib import Path

import apsw

from memroot.ledger.entries import EventInput, Kind, OpInput, new_uuid
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import AuditReport
from memroot.projections import requests as rq
from memroot.projections import tables
from memroot.projections.digest import state_digest
from memroot.projections.fold import fold_entries
from memroot.projections.gated import gated_rows
from memroot.projections.replay import MemoryReplayCheck, replay

ADMIN = rq.Actor("alice", "HUMAN_USER", "team")


def _event(actor: str, ns: str, parent: str | None) -> EventInput:
    return EventInput(
        stream="s",
        actor_id=actor,
        actor_type="HUMAN_USER",
        role="USER",
        content=f"hello {new_uuid()}",
        namespace_id=ns,
        id=new_uuid(),
        parent_event_id=parent,
    )


def _one_by_one(ledger: Ledger) -> apsw.Connection:
    """The reference: every entry folded on its own, through SQL (no chunks, no memory)."""
    db = apsw.Connection(":memory:")
    db.execute("BEGIN")
    tables.install(db, fts=False)
    fold_entries(db, ledger.entries(), fresh=False)
    db.execute("COMMIT")
    return db


def _skipped(db: apsw.Connection) -> list[tuple[object, ...]]:
    sql = "SELECT branch, seq, op_type, reason FROM mem_skipped ORDER BY seq"
    return db.execute(sql).fetchall()


def test_runs_of_events_fold_as_each_event_on_its_own(tmp_path: Path) -> None:
    """Events refused by policy (appended without the hook) are skipped in place, others kept.

    The history written without the memory hook has long runs of events (beyond the chunk
    size), a namespace policy that refuses some writers mid-run, a grant that admits one
    later, and assertions citing the events: the chunked replay and the one-by-one fold give
    the same state digest, the same gated rows and the same skipped entries.
    """
    rng = random.Random(7)
    with Ledger.init(tmp_path / "bare.ledger", hooks=()) as ledger:
        ledger.store.db.execute("PRAGMA synchronous=OFF")
        events: list[str] = []
        inputs: list[EventInput | OpInput] = []
        for i in range(2600):
            if i == 700:
                inputs.append(rq.namespace_create(ADMIN, "PROJECT"))
            elif i == 1500:
                inputs.append(rq.grant(ADMIN, "bob", "WRITE"))
            elif i % 97 == 0 and events:
                inputs.append(
                    rq.assert_object(
                        rq.Actor("carol", "AI_AGENT", "other"),
                        "SEMANTIC",
                        "FACT",
                        "USER_STATED",
                        [rng.choice(events)],
                        f"value {i}",
                        object_id=new_uuid(),
                    )
                )
            else:
                ev = _event(
                    rng.choice(["alice", "bob", "carol"]),
                    rng.choice(["team", "other"]),
                    rng.choice(events) if events and rng.random() < 0.7 else None,
                )
                events.append(str(ev.id))
                inputs.append(ev)
        for item in inputs:
            ledger.append(item)  # no hook: only the ledger's own checks apply
        chunked = replay(ledger.entries())
        reference = _one_by_one(ledger)
    skipped = _skipped(chunked)
    assert sum(1 for r in skipped if r[2] == "EVENT") > 100  # refused events were replayed
    assert skipped == _skipped(reference)
    assert state_digest(chunked) == state_digest(reference)
    assert gated_rows(chunked, "main", None) == gated_rows(reference, "main", None)
    assert chunked.execute("SELECT count(*) FROM mem_conv").fetchone()[0] > 1500


def test_step9_fed_runs_of_events_replays_what_it_replays_fed_each_entry(tmp_path: Path) -> None:
    """``MemoryReplayCheck.feed_events`` (the audit's runs) folds as ``feed`` on each event."""
    with Ledger.init(tmp_path / "bare.ledger", hooks=()) as ledger:
        ledger.store.db.execute("PRAGMA synchronous=OFF")
        parent = None
        for i in range(1200):
            if i == 300:
                ledger.append(rq.namespace_create(ADMIN, "PROJECT"))
                continue
            ev = _event("bob" if i % 3 else "alice", "team" if i % 2 else "other", parent)
            parent = str(ev.id)
            ledger.append(ev)
        entries = list(ledger.entries())
        one, runs = (MemoryReplayCheck(ledger.path) for _ in range(2))
        report = AuditReport()
        for e in entries:
            one.feed("main", e, report)
        runs.feed("main", entries[0], report)
        for k in range(1, len(entries), 97):
            part = [e for e in entries[k : k + 97] if e.kind is Kind.EVENT]
            ops = [e for e in entries[k : k + 97] if e.kind is not Kind.EVENT]
            assert len(ops) <= 1 and (not ops or ops[0].seq == 301)
            if ops:  # the namespace policy: fed on its own, between its events
                runs.feed_events("main", [e for e in part if e.seq < 301], report)
                runs.feed("main", ops[0], report)
                runs.feed_events("main", [e for e in part if e.seq > 301], report)
            else:
                runs.feed_events("main", part, report)
        assert not report.findings
        for check in (one, runs):
            check.state.finish()
        assert state_digest(one.db) == state_digest(runs.db)
        assert _skipped(one.db) == _skipped(runs.db) and len(_skipped(one.db)) > 200
        assert gated_rows(one.db, "main") == gated_rows(runs.db, "main")
        assert one.size == runs.size == len(entries)
