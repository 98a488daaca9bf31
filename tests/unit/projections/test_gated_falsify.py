"""Invalidation gated by provenance in the falsification layer (issue 15 point 3).

A ``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` of a memory object with ``evidence_ids`` is
validated by the falsification layer (``FalsifyHook``) in its own view, as the memory model
does, while ``fz_states`` (the global state) keeps only what it can apply. These tests run the
default hook stack (``Ledger.init``), so both layers must accept an operation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import verify_path
from memroot.memory_root.falsify import Falsifier
from memroot.memory_root.falsify.replay import TABLES, FalsifyReplayCheck, rebuild
from memroot.projections import requests as rq
from memroot.projections.epistemic import RetrievalMode
from memroot.projections.query import Query, get_object, query
from memroot.projections.replay import MemoryReplayCheck
from memroot.projections.rules import RuleError

AGENT = rq.Actor("agent", "AI_AGENT", "ns")


class Chat:
    """A ledger with every default hook: say things, remember them, falsify them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ledger = Ledger.init(path)
        self.db = self.ledger.store.db
        self.f = Falsifier(self.ledger)

    def say(self, content: str, parent: str | None = None) -> str:
        e = EventInput(
            stream="chat",
            actor_id="alice",
            actor_type="HUMAN_USER",
            role="USER",
            content=content,
            namespace_id="ns",
            parent_event_id=parent,
        )
        return self.ledger.append(e).id

    def fact(self, value: str, *evidence: str) -> str:
        op = rq.assert_object(AGENT, "FACT", "ASSERTED", "USER_STATED", list(evidence), value)
        return self.ledger.append(op).id

    def state_at(self, anchor: str, object_id: str) -> str | None:
        """The object's falsification state at the anchor (None: not visible there)."""
        for r in query(self.db, Query(anchor=anchor, mode=RetrievalMode.AUDIT, limit=10_000)):
            if r.object.id == object_id:
                return r.object.state
        return None

    def globally(self, object_id: str) -> str:
        """The global state, which both layers must agree on."""
        fz = self.f.state(object_id)
        assert get_object(self.db, object_id).state == fz
        return fz

    def unapplied(self) -> list[tuple[Any, ...]]:
        return self.db.execute("SELECT op_type, id FROM fz_unapplied ORDER BY seq").fetchall()

    def tables(self) -> dict[str, list[Any]]:
        return {
            t: self.db.execute(f"SELECT {', '.join(c)} FROM {t} ORDER BY {', '.join(c)}").fetchall()
            for t, c in TABLES
        }


@pytest.fixture
def chat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Chat]:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    c = Chat(tmp_path / "chat.ledger")
    try:
        yield c
    finally:
        c.ledger.close()


def _two_lines(chat: Chat) -> tuple[str, str, str, str]:
    """root -> a, root -> b (an edit of a); fact f from root, visible on both lines."""
    root = chat.say("I live in Chengdu")
    a = chat.say("actually I moved away last year", root)
    b = chat.say("(edited) actually I moved to Hangzhou", root)
    return root, a, b, chat.fact("lives in Chengdu", root)


def test_falsify_from_line_b_after_line_a_is_accepted(chat: Chat) -> None:
    """The second FALSIFY of the same fact, from a sibling line where it is live, is valid."""
    root, a, b, f = _two_lines(chat)
    chat.f.falsify(f, "the user moved", [a])
    chat.f.falsify(f, "the user moved (edited line)", [b])  # was refused: falsified globally
    assert (chat.state_at(a, f), chat.state_at(b, f), chat.state_at(root, f)) == (
        "falsified",
        "falsified",
        "live",
    )
    assert chat.globally(f) == "falsified"
    # The global state could not take the second one: it is listed, not recorded as a change.
    assert [h.seq for h in chat.f.history(f)] == [chat.ledger.size() - 2]
    assert chat.unapplied() == [("FALSIFY", f)]
    assert chat.db.execute("SELECT op_type, applied FROM mem_gated ORDER BY seq").fetchall() == [
        ("FALSIFY", 1),
        ("FALSIFY", 0),
    ]


def test_restore_from_line_b_does_not_unfalsify_line_a(chat: Chat) -> None:
    """RESTORE from B (falsified on B's path) restores B only; A keeps its falsification."""
    _, a, b, f = _two_lines(chat)
    chat.f.falsify(f, "moved", [a])
    chat.f.falsify(f, "moved", [b])
    chat.f.restore(f, "the edit was a typo", [b])
    assert (chat.state_at(a, f), chat.state_at(b, f)) == ("falsified", "live")
    # The global state applies what it allows: the RESTORE, in ledger order.
    assert chat.globally(f) == "live"
    assert chat.unapplied() == [("FALSIFY", f)]
    # DEFAULT reads: gone on A, back on B.
    assert [r.object.id for r in query(chat.db, Query(anchor=b))] == [f]
    assert [r.object.id for r in query(chat.db, Query(anchor=a))] == []


def test_refusals_in_the_operation_own_view_are_still_refused(chat: Chat) -> None:
    """FALSIFY twice on one line, RESTORE where it was never falsified: refused, nothing written."""
    root, a, _, f = _two_lines(chat)
    a2 = chat.say("and I won't go back", a)
    c = chat.say("(another edit) I still live there", root)
    chat.f.falsify(f, "moved", [a])
    size = chat.ledger.size()
    # (The memory model, first in the stack, refuses them already; the falsification layer's
    # own refusal is the next test's.)
    with pytest.raises(RuleError, match="already falsified"):
        chat.f.falsify(f, "moved, again", [a2])
    # On c's line f was never falsified, though it is globally.
    with pytest.raises(RuleError, match="is live: there is nothing to restore"):
        chat.f.restore(f, "fine", [c])
    assert chat.ledger.size() == size and chat.unapplied() == []
    assert (chat.state_at(a2, f), chat.state_at(c, f)) == ("falsified", "live")


def test_own_view_refuses_what_the_global_state_would_allow(chat: Chat) -> None:
    """After B's RESTORE the fact is live globally, but still falsified on A's line."""
    _, a, b, f = _two_lines(chat)
    a2 = chat.say("yes, I moved", a)
    chat.f.falsify(f, "moved", [a])
    chat.f.falsify(f, "moved", [b])
    chat.f.restore(f, "typo", [b])
    assert chat.globally(f) == "live"
    with pytest.raises(RuleError, match="already falsified"):
        chat.f.falsify(f, "moved", [a2])
    # MARK_STALE from B: live on B's path, so valid; the global state applies it too.
    chat.f.mark_stale(f, "re-check", [b])
    assert (chat.state_at(a, f), chat.state_at(b, f), chat.globally(f)) == (
        "falsified",
        "stale",
        "stale",
    )


def test_mark_stale_on_a_line_where_it_is_live_is_kept_off_a_falsified_global_state(
    chat: Chat,
) -> None:
    """MARK_STALE valid in its view, while the global state (falsified) cannot take it."""
    _, a, b, f = _two_lines(chat)
    chat.f.falsify(f, "moved", [a])
    chat.f.mark_stale(f, "re-check", [b])
    assert (chat.state_at(a, f), chat.state_at(b, f), chat.globally(f)) == (
        "falsified",
        "stale",
        "falsified",
    )
    why = chat.db.execute("SELECT reason FROM fz_unapplied").fetchone()[0]
    assert "only a live item can be marked stale" in why


def test_without_evidence_or_on_a_flat_log_the_global_state_decides(chat: Chat) -> None:
    """No evidence_ids, or evidence outside any conversation tree: checked globally."""
    _, a, _, f = _two_lines(chat)
    chat.f.falsify(f, "moved", [a])
    with pytest.raises(RuleError, match=r"is already falsified$"):
        chat.f.falsify(f, "moved")  # no provenance: applies everywhere, refused globally
    e1, e2 = chat.say("flat one"), chat.say("flat two")  # no parents, no children
    g = chat.fact("g", e1)
    chat.f.falsify(g, "wrong", [e1])
    with pytest.raises(RuleError, match=r"is already falsified$"):
        chat.f.falsify(g, "wrong", [e2])


def test_step_9_and_rebuild_agree_with_the_append_path(chat: Chat) -> None:
    """The falsify replay (with the file, and without it as for a bundle) and rebuild."""
    root, a, b, f = _two_lines(chat)
    g = chat.fact("g", a)
    chat.f.falsify(f, "moved", [a])
    chat.f.falsify(f, "moved", [b])
    chat.f.mark_stale(g, "re-check", [a])
    chat.f.restore(f, "typo", [b])
    chat.f.mark_stale(f, "hm", [root])  # globally live -> stale; on A falsified: refused
    before = chat.tables()
    assert before["fz_unapplied"] and before["fz_states"]
    assert not verify_path(chat.path, checks=[FalsifyReplayCheck(chat.path)]).findings
    # Sharing the audit's memory replay gives the same result.
    memory = MemoryReplayCheck(chat.path)
    shared = verify_path(chat.path, checks=[memory, FalsifyReplayCheck(chat.path, memory=memory)])
    assert not shared.findings
    # No file (an auditor's bundle): the replay refuses nothing the append accepted.
    bundle_like = verify_path(chat.path, checks=[FalsifyReplayCheck()])
    assert not bundle_like.findings
    assert not [n for n in bundle_like.notes if "falsification rules" in n.message]
    rebuild(chat.ledger)
    assert chat.tables() == before
    # The whole default verification is clean too.
    assert not verify_path(chat.path).findings


def test_the_falsification_layer_refuses_in_the_own_view_by_itself(chat: Chat) -> None:
    """Appended without hooks, a FALSIFY invalid in its view is skipped by the layer's rules.

    The global state (live after B's RESTORE) would allow it: the catch-up, step 9 and
    rebuild all skip it for the own view's reason.
    """
    _, a, b, f = _two_lines(chat)
    chat.f.falsify(f, "moved", [a])
    chat.f.falsify(f, "moved", [b])
    chat.f.restore(f, "typo", [b])
    chat.ledger.close()
    bare = Ledger.open(chat.path, hooks=())
    a2 = bare.append(
        EventInput(
            stream="chat",
            actor_id="alice",
            actor_type="HUMAN_USER",
            role="USER",
            content="yes, I moved",
            namespace_id="ns",
            parent_event_id=a,
        )
    ).id
    bare.append(_falsify_input(f, {"reason": "moved", "evidence_ids": [a2]}))
    bare.close()
    chat.ledger = Ledger.open(chat.path)
    chat.db = chat.ledger.store.db
    chat.f = Falsifier(chat.ledger)
    # The falsification layer catches up first: it folds the memory model (which has not
    # seen a2 yet) as far, so a2's line is known when the FALSIFY is decided.
    chat.f.sync()
    skipped = chat.db.execute("SELECT op_type, reason FROM fz_skipped").fetchall()
    assert len(skipped) == 1 and skipped[0][0] == "FALSIFY"
    assert skipped[0][1].endswith("is already falsified in the view of its evidence_ids")
    assert chat.globally(f) == "live"
    before = chat.tables()
    report = verify_path(chat.path, checks=[FalsifyReplayCheck(chat.path)])
    assert not report.findings
    assert [n.seq for n in report.notes if "falsification rules" in n.message] == [
        chat.ledger.size() - 1
    ]
    rebuild(chat.ledger)
    assert chat.tables() == before


def _falsify_input(object_id: str, payload: dict[str, Any]) -> OpInput:
    return OpInput(
        "FALSIFY", "agent", "AI_AGENT", "ns", payload, "memroot/1", object_id, "memory_object"
    )


def test_step_9_finds_a_tampered_unapplied_row(chat: Chat) -> None:
    """fz_unapplied is derived state: a stored row the log does not give is a finding."""
    _, a, b, f = _two_lines(chat)
    chat.f.falsify(f, "moved", [a])
    chat.f.falsify(f, "moved", [b])
    with chat.ledger.store.write() as db:
        db.execute("UPDATE fz_unapplied SET reason = 'made up'")
    report = verify_path(chat.path, checks=[FalsifyReplayCheck(chat.path)])
    assert any("fz_unapplied" in x.message for x in report.findings)


def test_restore_cascade_is_validated_in_its_own_view(chat: Chat) -> None:
    """RESTORE --cascade from line A, where the fact is still falsified: accepted there.

    Globally the fact is live again (B's RESTORE), so the global state applies nothing of it
    (neither the origin nor its cascade part) and fz_unapplied lists it.
    """
    _, a, b, f = _two_lines(chat)
    chat.f.falsify(f, "moved", [a])
    chat.f.falsify(f, "moved", [b])
    chat.f.restore(f, "typo", [b])
    a2 = chat.say("no wait, I never moved", a)
    history = chat.f.history(f)
    result = chat.f.restore_cascade(f, "back on line A", 3, [a2])  # was refused: live globally
    assert result.appended[-1].type == "RESTORE"
    assert (chat.state_at(a2, f), chat.state_at(a, f), chat.state_at(b, f)) == (
        "live",
        "falsified",
        "live",
    )
    assert chat.globally(f) == "live" and chat.f.history(f) == history
    assert chat.unapplied() == [("FALSIFY", f), ("RESTORE", f)]
    why = chat.db.execute("SELECT reason FROM fz_unapplied WHERE op_type = 'RESTORE'").fetchone()
    assert "is live: there is nothing to restore" in why[0]
    before = chat.tables()
    assert not verify_path(chat.path, checks=[FalsifyReplayCheck(chat.path)]).findings
    rebuild(chat.ledger)
    assert chat.tables() == before


def test_restore_cascade_refused_in_its_own_view_by_the_falsification_layer(chat: Chat) -> None:
    """Appended without hooks, a RESTORE --cascade from a line where the fact is live.

    Globally the fact is falsified (the global state would take it); on line C it never
    was: the layer skips it for the own view's reason, at catch-up, step 9 and rebuild.
    """
    root, a, _, f = _two_lines(chat)
    chat.f.falsify(f, "moved", [a])
    c = chat.say("(another edit) I still live there", root)
    part = chat.f.plan_restore(f, 2).payload()
    chat.ledger.close()
    bare = Ledger.open(chat.path, hooks=())
    payload = {"reason": "fine", "evidence_ids": [c], "cascade": part}
    bare.append(
        OpInput("RESTORE", "agent", "AI_AGENT", "ns", payload, "memroot/1", f, "memory_object")
    )
    bare.close()
    chat.ledger = Ledger.open(chat.path)
    chat.db = chat.ledger.store.db
    chat.f = Falsifier(chat.ledger)
    chat.f.sync()
    skipped = chat.db.execute("SELECT op_type, reason FROM fz_skipped").fetchall()
    assert len(skipped) == 1 and skipped[0][0] == "RESTORE"
    assert skipped[0][1].endswith(
        "is live: there is nothing to restore in the view of its evidence_ids"
    )
    assert chat.globally(f) == "falsified"
    before = chat.tables()
    report = verify_path(chat.path, checks=[FalsifyReplayCheck(chat.path)])
    assert not report.findings
    rebuild(chat.ledger)
    assert chat.tables() == before
