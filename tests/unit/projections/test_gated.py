"""Invalidation gated by provenance: seed 001's branch operations, validation in each view."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from memroot.ledger.entries import EventInput, OpInput, new_uuid
from memroot.ledger.errors import NotFoundError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.projections import requests as rq
from memroot.projections import rules
from memroot.projections.anchors import ConversationTree
from memroot.projections.digest import state_digest
from memroot.projections.epistemic import RetrievalMode
from memroot.projections.gated import gated_digest
from memroot.projections.hook import MemoryHook
from memroot.projections.model import MemoryObject
from memroot.projections.query import Query, get_object, query
from memroot.projections.replay import MemoryReplayCheck, rebuild
from memroot.projections.rules import RuleError
from memroot.projections.why import why

AGENT = rq.Actor("agent", "AI_AGENT", "ns")


class Chat:
    """A ledger with conversation-tree and memory hooks, and short ways to talk and remember."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.db = ledger.store.db

    def say(self, content: str, parent: str | None = None) -> str:
        return self.ledger.append(
            EventInput(
                stream="chat",
                actor_id="alice",
                actor_type="HUMAN_USER",
                role="USER",
                content=content,
                namespace_id="ns",
                parent_event_id=parent,
            )
        ).id

    def fact(self, value: str, *evidence: str) -> str:
        return self.op(
            rq.assert_object(AGENT, "FACT", "ASSERTED", "USER_STATED", list(evidence), value)
        )

    def op(self, item: OpInput) -> str:
        return self.ledger.append(item).id

    def at(self, anchor: str, **kw: object) -> list[str]:
        """Values DEFAULT retrieval returns at the anchor."""
        return sorted(r.object.value for r in query(self.db, Query(anchor=anchor, **kw)))  # type: ignore[arg-type]

    def obj_at(self, anchor: str, object_id: str) -> MemoryObject | None:
        for r in query(self.db, Query(anchor=anchor, mode=RetrievalMode.AUDIT, limit=10_000)):
            if r.object.id == object_id:
                return r.object
        return None


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[Chat]:
    ledger = Ledger.init(tmp_path / "chat.ledger", hooks=[ConversationTree(), MemoryHook()])
    ledger.store.db.execute("PRAGMA synchronous=OFF")
    try:
        yield Chat(ledger)
    finally:
        ledger.close()


# -- seed 001: the five branch operations ------------------------------------------------------


def test_edit_a_message_correction_stays_on_the_edited_line(chat: Chat) -> None:
    """Chengdu edited to Hangzhou: the SUPERSEDE from the edit never hides Chengdu on its line."""
    root = chat.say("hi")
    a = chat.say("I'm moving to Chengdu next month", root)
    f1 = chat.fact("moving to Chengdu", a)
    b = chat.say("I'm moving to Hangzhou next month", root)  # the edit: a sibling of a
    f2 = chat.fact("moving to Hangzhou", b)
    chat.op(rq.supersede(AGENT, f1, f2, "the user edited the message"))
    assert chat.at(b) == ["moving to Hangzhou"]
    assert chat.at(a) == ["moving to Chengdu"]
    assert chat.at(root) == []
    # Without an anchor, reads are as they always were.
    assert get_object(chat.db, f1).lifecycle_state == "SUPERSEDED"
    assert [r.object.id for r in query(chat.db, Query())] == [f2]


def test_regenerate_a_reply_scores_stay_with_their_reply(chat: Chat) -> None:
    """Each regenerated reply's REINFORCE / PENALTY counts on its own line only."""
    u = chat.say("I take tea without sugar")
    tea = chat.fact("takes tea without sugar", u)
    r1 = chat.say("Noted: no sugar.", u)
    r2 = chat.say("Are you sure? Most people take sugar.", u)  # regenerated reply
    chat.op(rq.reinforce(AGENT, tea, "confirmed", 0.1, 0.9, 0.6, "reply", evidence_ids=[r1]))
    chat.op(rq.penalty(AGENT, tea, "doubted", 0.2, 0.6, "reply", evidence_ids=[r2]))
    at_u, at_r1, at_r2 = (chat.obj_at(x, tea) for x in (u, r1, r2))
    assert at_u is not None and at_r1 is not None and at_r2 is not None
    assert (at_u.confidence, at_r1.confidence, at_r2.confidence) == (0.8, 0.9, 0.6)
    assert (at_u.version, at_r1.version, at_r2.version) == (1, 2, 2)
    # The PENALTY was checked on r2's line (0.8 -> 0.6, within its delta), not after r1's
    # REINFORCE; the global state (0.9) cannot take it, and keeps what it had.
    assert get_object(chat.db, tea).confidence == 0.9
    assert chat.db.execute("SELECT op_type, applied FROM mem_gated ORDER BY seq").fetchall() == [
        ("REINFORCE", 1),
        ("PENALTY", 0),
    ]


def test_fork_from_a_checkpoint_keeps_what_the_main_line_dropped_later(chat: Chat) -> None:
    """A deprecation after the checkpoint on the main line does not reach the fork."""
    c1 = chat.say("we use postgres")
    db_fact = chat.fact("uses postgres", c1)
    c2 = chat.say("plan the schema", c1)  # the checkpoint
    c3 = chat.say("we are moving to sqlite", c2)
    chat.op(rq.deprecate(AGENT, db_fact, "moved to sqlite", evidence_ids=[c3]))
    d3 = chat.say("(fork) what indexes do we need?", c2)
    assert chat.at(c3) == []
    assert chat.at(d3) == ["uses postgres"]
    assert chat.at(c2) == ["uses postgres"]


def test_switch_back_restores_the_abandoned_line_and_stores_nothing(chat: Chat) -> None:
    """Switching back only moves the anchor; corrections made there stay there."""
    root = chat.say("hi")
    a = chat.say("moving to Chengdu", root)
    f1 = chat.fact("moving to Chengdu", a)
    b = chat.say("moving to Hangzhou", root)
    f2 = chat.fact("moving to Hangzhou", b)
    chat.op(rq.supersede(AGENT, f1, f2, "edited"))
    before = (state_digest(chat.db), gated_digest(chat.db, "main"))
    assert chat.at(a) == ["moving to Chengdu"]  # switched back
    assert (state_digest(chat.db), gated_digest(chat.db, "main")) == before
    a2 = chat.say("Chengdu, in March", a)  # the conversation goes on from a
    f3 = chat.fact("moving to Chengdu in March", a, a2)
    chat.op(rq.supersede(AGENT, f1, f3, "more precise"))  # valid on a's line
    assert chat.at(a2) == ["moving to Chengdu in March"]
    assert chat.at(a) == ["moving to Chengdu"]
    assert chat.at(b) == ["moving to Hangzhou"]
    at_b = chat.obj_at(b, f2)
    assert at_b is not None and at_b.lifecycle_state == "ACTIVE"
    at_a2 = chat.obj_at(a2, f1)
    assert at_a2 is not None and at_a2.superseded_by == f3
    # Globally F1 stays superseded by F2: the second SUPERSEDE was valid only on a's line.
    assert get_object(chat.db, f1).superseded_by == f2


def test_correct_within_a_branch_peanuts_and_shrimp_never_both_come_back(chat: Chat) -> None:
    """Peanuts on one line, shrimp on the other, a correction within the second: never both."""
    root = chat.say("any allergies?")
    a = chat.say("I'm allergic to peanuts", root)
    peanuts = chat.fact("allergic to peanuts", a)
    b = chat.say("I'm allergic to shrimp", root)  # edited
    shrimp = chat.fact("allergic to shrimp", b)
    chat.op(rq.supersede(AGENT, peanuts, shrimp, "edited"))
    b2 = chat.say("actually: shrimp and crab", b)  # a correction within b's line
    crab = chat.fact("allergic to shrimp and crab", b2)
    chat.op(rq.supersede(AGENT, shrimp, crab, "corrected"))
    a2 = chat.say("and peanut oil too", a)
    oil = chat.fact("allergic to peanuts and peanut oil", a2)
    chat.op(rq.supersede(AGENT, peanuts, oil, "corrected"))
    seen = {x: chat.at(x) for x in (root, a, a2, b, b2)}
    assert seen == {
        root: [],
        a: ["allergic to peanuts"],
        a2: ["allergic to peanuts and peanut oil"],
        b: ["allergic to shrimp"],
        b2: ["allergic to shrimp and crab"],
    }
    for values in seen.values():
        assert not (any("peanut" in v for v in values) and any("shrimp" in v for v in values))


# -- validation in the operation's own view ------------------------------------------------------


def test_supersede_from_b_needs_f1_active_on_b_path_whatever_happened_on_a(chat: Chat) -> None:
    """Accepted in B's view though F1 is superseded on A's; refused once B's path superseded it."""
    root = chat.say("hi")
    a = chat.say("Chengdu", root)
    b = chat.say("Hangzhou", root)
    f1 = chat.fact("city", root)
    f2, f3 = chat.fact("Chengdu", a), chat.fact("Hangzhou", b)
    chat.op(rq.supersede(AGENT, f1, f2, "on a"))
    chat.op(rq.supersede(AGENT, f1, f3, "on b"))  # F1 is ACTIVE on b's path
    applied = chat.db.execute(
        "SELECT applied FROM mem_gated WHERE object_id = ? ORDER BY seq", (f1,)
    ).fetchall()
    assert applied == [(1,), (0,)]  # the global state could not apply the second
    b2 = chat.say("Hangzhou, west lake", b)
    f4 = chat.fact("West Lake", b2)
    size = chat.ledger.size()
    with pytest.raises(RuleError) as e:
        chat.op(rq.supersede(AGENT, f1, f4, "on b2"))
    assert e.value.rule == rules.LIFECYCLE and "SUPERSEDED" in str(e.value)
    assert chat.ledger.size() == size


def test_the_state_machine_holds_in_every_view(chat: Chat) -> None:
    """DEPRECATED on a's line may be ARCHIVED there, not SUPERSEDED; b's line is untouched."""
    root = chat.say("hi")
    a, b = chat.say("a", root), chat.say("b", root)
    f = chat.fact("f", root)
    chat.op(rq.deprecate(AGENT, f, "wrong on a", evidence_ids=[a]))
    a2 = chat.say("a2", a)
    g = chat.fact("g", a2)
    with pytest.raises(RuleError, match="DEPRECATED"):
        chat.op(rq.supersede(AGENT, f, g, "no: deprecated here"))
    chat.op(rq.archive(AGENT, f, "done", "p", evidence_ids=[a2]))
    h = chat.fact("h", b)
    chat.op(rq.supersede(AGENT, f, h, "on b"))
    states = {x: chat.obj_at(x, f) for x in (root, a, a2, b)}
    assert {x: (s.lifecycle_state if s else None) for x, s in states.items()} == {
        root: "ACTIVE",
        a: "DEPRECATED",
        a2: "ARCHIVED",
        b: "SUPERSEDED",
    }
    with pytest.raises(RuleError, match="ARCHIVED"):  # scores change only ACTIVE objects
        chat.op(rq.reinforce(AGENT, f, "x", 0.1, 0.9, 0.6, "y", evidence_ids=[a2]))
    chat.op(rq.reinforce(AGENT, f, "x", 0.1, 0.9, 0.6, "y", evidence_ids=[root]))  # ACTIVE there


def test_an_operation_without_provenance_applies_everywhere(chat: Chat) -> None:
    """A DEPRECATE without evidence_ids hides the object at every anchor, as before."""
    root = chat.say("hi")
    a, b = chat.say("a", root), chat.say("b", root)
    f = chat.fact("f", root)
    chat.op(rq.deprecate(AGENT, f, "wrong"))
    assert chat.at(a) == chat.at(b) == chat.at(root) == []


def test_a_flat_log_validates_against_the_global_state(chat: Chat) -> None:
    """Events with no conversation links: a second SUPERSEDE is refused, as before."""
    f = chat.fact("f", chat.say("x"))
    chat.op(rq.supersede(AGENT, f, chat.fact("g", chat.say("y")), "newer"))
    with pytest.raises(RuleError) as e:
        chat.op(rq.supersede(AGENT, f, chat.fact("h", chat.say("z")), "newer"))
    assert e.value.rule == rules.LIFECYCLE


def test_a_transition_on_one_line_neither_hides_nor_changes_the_object_on_another(
    chat: Chat,
) -> None:
    """Evidence a transition adds counts only where the transition applies."""
    root = chat.say("I think I like jazz")
    a, b = chat.say("a", root), chat.say("I went to three jazz concerts", root)
    f = chat.fact("likes jazz", root)
    chat.op(rq.transition(AGENT, f, "ASSERTED", "OBSERVED", "seen", [b]))
    at_a, at_b = chat.obj_at(a, f), chat.obj_at(b, f)
    assert at_a is not None and at_b is not None
    assert (at_a.epistemic_type, at_a.evidence_ids) == ("ASSERTED", (root,))
    assert (at_b.epistemic_type, at_b.evidence_ids) == ("OBSERVED", (root, b))


def test_a_contradiction_counts_only_where_both_objects_are_visible(chat: Chat) -> None:
    """CONFLICT at an anchor needs the contradicting object on its path too."""
    root = chat.say("hi")
    a, b = chat.say("a", root), chat.say("b", root)
    f, g = chat.fact("f", root), chat.fact("g", b)
    chat.op(rq.contradiction(AGENT, f, g, "disagree"))
    at = {x: {r.object.id: r for r in query(chat.db, Query(anchor=x))} for x in (a, b)}
    assert at[a][f].conflicts_with == () and "CONFLICT" not in at[a][f].flags
    assert at[b][f].conflicts_with == (g,) and "CONFLICT" in at[b][f].flags


def test_falsification_state_is_gated_too(chat: Chat) -> None:
    """FALSIFY with evidence on one line leaves the object live on the other."""
    root = chat.say("hi")
    a, b = chat.say("a", root), chat.say("b", root)
    f = chat.fact("f", root)
    chat.op(
        OpInput(
            "FALSIFY",
            "agent",
            "AI_AGENT",
            "ns",
            {"reason": "refuted", "evidence_ids": [a]},
            "memroot/1",
            f,
            "memory_object",
        )
    )
    at_a, at_b = chat.obj_at(a, f), chat.obj_at(b, f)
    assert at_a is not None and at_b is not None
    assert (at_a.state, at_b.state) == ("falsified", "live")
    assert get_object(chat.db, f).state == "falsified"
    # DEFAULT never serves a falsified object: gone at a, still there at b.
    assert chat.at(a) == [] and chat.at(b) == ["f"]


def test_evidence_ids_on_lifecycle_operations_are_checked(chat: Chat) -> None:
    """Unknown or malformed evidence_ids are refused, naming the field; nothing is written."""
    f = chat.fact("f", chat.say("x"))
    size = chat.ledger.size()
    with pytest.raises(RuleError) as e:
        chat.op(rq.deprecate(AGENT, f, "r", evidence_ids=[new_uuid()]))
    assert e.value.rule == rules.EVIDENCE
    with pytest.raises(ValidationError, match="evidence_ids"):
        chat.op(
            OpInput(
                "ARCHIVE",
                "agent",
                "AI_AGENT",
                "ns",
                {"reason": "r", "policy_ref": "p", "evidence_ids": ["nope"]},
                "memroot/1",
                f,
            )
        )
    assert chat.ledger.size() == size


# -- why --anchor, rebuild, step 9 ---------------------------------------------------------------


def test_why_at_an_anchor_says_which_operations_apply_and_why_not(chat: Chat) -> None:
    """why(anchor=) lists each operation, whether it applies there, and the reason if not."""
    root = chat.say("hi")
    a, b = chat.say("Chengdu", root), chat.say("Hangzhou", root)
    f1 = chat.fact("city", root)
    f2, f3 = chat.fact("Chengdu", a), chat.fact("Hangzhou", b)
    chat.op(rq.supersede(AGENT, f1, f2, "on a"))
    chat.op(rq.supersede(AGENT, f1, f3, "on b"))
    chat.ledger.checkpoint()
    w = why(chat.ledger, f1, anchor=b)
    assert w.at_anchor is not None and w.at_anchor.visible
    assert w.at_anchor.object is not None and w.at_anchor.object.superseded_by == f3
    steps = [(s["op_type"], s["applies"], s["reason"]) for s in w.at_anchor.steps]
    assert steps == [
        ("ASSERT", True, "creates the object; all its evidence lies on the path"),
        ("SUPERSEDE", False, "its provenance is not on this path"),
        ("SUPERSEDE", True, None),
    ]
    assert json.loads(json.dumps(w.to_dict()))["at_anchor"]["operations"][2]["applies"]
    hidden = why(chat.ledger, f2, anchor=b).at_anchor
    assert hidden is not None and not hidden.visible and hidden.object is None
    with pytest.raises(NotFoundError, match="anchor"):
        why(chat.ledger, f1, anchor=new_uuid())
    assert "at_anchor" not in why(chat.ledger, f1).to_dict()


def _step9(path: Path) -> list[str]:
    from memroot.ledger.backends.store import Store
    from memroot.ledger.verify import audit

    store = Store(path)
    try:
        report = audit(store, origin=str(store.meta("origin")), checks=[MemoryReplayCheck(path)])
    finally:
        store.close()
    return [str(f) for f in report.findings]


def test_rebuild_reproduces_the_gated_state_and_step_9_checks_it(chat: Chat) -> None:
    """rebuild gives the identical gated bookkeeping; a changed row is a step 9 finding."""
    root = chat.say("hi")
    a, b = chat.say("a", root), chat.say("b", root)
    f1 = chat.fact("city", root)
    chat.op(rq.supersede(AGENT, f1, chat.fact("Chengdu", a), "on a"))
    chat.op(rq.supersede(AGENT, f1, chat.fact("Hangzhou", b), "on b"))
    stale = OpInput(
        "MARK_STALE", "agent", "AI_AGENT", "ns", {"reason": "old"}, "memroot/1", f1, "memory_object"
    )
    chat.op(stale)  # no provenance, after the gated ones: recorded too
    before = {x: chat.at(x) for x in (root, a, b)}
    digest = gated_digest(chat.db, "main")
    report = rebuild(chat.ledger)
    assert report.identical is True and report.gated_after == {"main": digest}
    assert {x: chat.at(x) for x in (root, a, b)} == before
    path = chat.ledger.path
    assert not [f for f in _step9(path) if "step 9" in f and "note" not in f]
    chat.db.execute("UPDATE mem_gated SET applied = 1 - applied WHERE object_id = ?", (f1,))
    findings = _step9(path)
    assert any("gated-invalidation state differs" in f for f in findings), findings


def test_gated_state_in_a_ledger_branch_over_its_parent_at_the_fork(chat: Chat) -> None:
    """A branch's corrections are gated in the branch; main's after the fork never reach it."""
    root = chat.say("hi")
    a, b = chat.say("Chengdu", root), chat.say("Hangzhou", root)
    f1 = chat.fact("city", root)
    f2, f3 = chat.fact("Chengdu", a), chat.fact("Hangzhou", b)
    chat.op(rq.supersede(AGENT, f1, f2, "on a, before the fork"))
    chat.ledger.fork(
        OpInput(
            "BRANCH_CREATE",
            "u",
            "HUMAN_USER",
            "ns",
            {"branch_id": "sim", "branch_type": "SIMULATION", "purpose": "p"},
            "p/1",
        ),
        genesis={"branch_type": "SIMULATION"},
    )
    chat.ledger.append(rq.supersede(AGENT, f1, f3, "on b, in the branch"), branch="sim")
    chat.ledger.append(rq.deprecate(AGENT, f2, "after the fork", evidence_ids=[a]))

    def state(anchor: str, branch: str) -> tuple[str, str | None] | None:
        for r in query(
            chat.db, Query(anchor=anchor, branch=branch, mode=RetrievalMode.AUDIT, limit=100)
        ):
            if r.object.id == f1:
                return r.object.lifecycle_state, r.object.superseded_by
        return None

    assert state(a, "sim") == ("SUPERSEDED", f2)
    assert state(b, "sim") == ("SUPERSEDED", f3)
    assert state(b, "main") == ("ACTIVE", None)  # the branch's correction stays in the branch
    main_a = {r.object.id for r in query(chat.db, Query(anchor=a))}
    sim_a = {r.object.id for r in query(chat.db, Query(anchor=a, branch="sim"))}
    assert f2 not in main_a and f2 in sim_a  # main's DEPRECATE came after the fork
    report = rebuild(chat.ledger)
    assert report.identical is True and set(report.gated_after) == {"main", "sim"}
    assert not [f for f in _step9(chat.ledger.path) if "note" not in f]
