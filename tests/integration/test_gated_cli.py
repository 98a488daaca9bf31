"""The CLI on gated invalidation: query and why at an anchor, verify and rebuild agree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def op(op_type: str, payload: dict, target: str | None = None) -> str:
    body = {
        "kind": "op",
        "op_type": op_type,
        "actor_id": "agent",
        "actor_type": "AI_AGENT",
        "namespace_id": "ns",
        "policy_version": "p/1",
        "payload": payload,
    }
    if target is not None:
        body["target_id"] = target
    return json.dumps(body)


def fact(value: str, event: str) -> str:
    return op(
        "ASSERT",
        {
            "object_type": "FACT",
            "epistemic_type": "ASSERTED",
            "source_type": "USER_STATED",
            "evidence_ids": [event],
            "value": value,
            "confidence": None,
            "salience": 0.5,
        },
    )


def _two_replies(cmd: Any, path: Path, first: str, second: str) -> tuple[str, str, str]:
    """Init ``path``, append a root turn "hi" and two replies to it; return the three ids."""
    cmd.json_at(path, "init")

    def say(content: str, *anchor: str) -> str:
        turn = json.dumps({**cmd.CHAT_EVENT, "content": content})
        return str(cmd.json_at(path, "append", turn, *anchor)[0]["id"])

    root = say("hi")
    return root, say(first, "--anchor", root), say(second, "--anchor", root)


def test_edit_then_switch_back_through_the_cli(tmp_path: Path, cmd: Any):
    """query/why --anchor read the gated state; verify is clean and rebuild identical."""
    path = tmp_path / "g.ledger"
    _, a, b = _two_replies(cmd, path, "Chengdu", "Hangzhou")
    f1 = cmd.json_at(path, "append", fact("moving to Chengdu", a))[0]["id"]
    f2 = cmd.json_at(path, "append", fact("moving to Hangzhou", b))[0]["id"]
    cmd.json_at(path, "append", op("SUPERSEDE", {"new_object_id": f2, "reason": "edited"}, f1))
    at_a = cmd.json_at(path, "query", "--anchor", a)
    at_b = cmd.json_at(path, "query", "--anchor", b)
    assert [r["value"] for r in at_a] == ["moving to Chengdu"]
    assert [r["value"] for r in at_b] == ["moving to Hangzhou"]
    assert [r["value"] for r in cmd.json_at(path, "query")] == ["moving to Hangzhou"]
    w = cmd.json_at(path, "why", f1, "--anchor", a)
    assert w["at_anchor"]["object"]["lifecycle_state"] == "ACTIVE"
    sup = [s for s in w["at_anchor"]["operations"] if s["op_type"] == "SUPERSEDE"]
    assert sup and not sup[0]["applies"] and "not on this path" in sup[0]["reason"]
    human = cmd.at(path, "why", f1, "--anchor", a)
    assert human.exit_code == 0 and f"at anchor {a}: ASSERTED ACTIVE" in human.output
    assert "SUPERSEDE            does not apply: its provenance is not on this path" in human.output
    hidden = cmd.at(path, "why", f1, "--anchor", b)
    assert f"at anchor {b}: not visible" in hidden.output
    report = cmd.json_at(path, "verify", "--no-update")
    assert report["ok"], report
    rebuilt = cmd.json_at(path, "rebuild")
    assert rebuilt["identical"] is True and rebuilt["gated"]["main"]["digest_after"]
    bad = cmd.at(path, "why", f1, "--anchor", "nope")
    assert bad.exit_code != 0 and "anchor" in bad.output + bad.stderr


def test_a_read_receipt_of_an_anchored_recall_verifies(tmp_path: Path):
    """The receipt names each object's version and state at the anchor; step 9 checks those."""
    import memroot

    m = memroot.open(tmp_path / "r.ledger")
    try:
        root = m.record(content="hi").id
        a = m.record(content="Chengdu", parent=root).id
        b = m.record(content="Hangzhou", parent=root).id
        f1 = m.remember("moving to Chengdu", evidence=[a]).id
        f2 = m.remember("moving to Hangzhou", evidence=[b]).id
        m.record(json.loads(op("SUPERSEDE", {"new_object_id": f2, "reason": "edited"}, f1)))
        got = m.recall(anchor=a, receipt="run-1")
        assert [(r.object.id, r.object.version) for r in got] == [(f1, 1)]
        assert not [str(f) for f in m.verify().findings]
    finally:
        m.close()


def test_strict_query_at_an_anchor_accepts_an_object_its_ops_change_elsewhere(
    tmp_path: Path, cmd: Any
):
    """A transition off the anchor's path: the strict read checks the stored row, not refuses."""
    path = tmp_path / "s.ledger"
    root, a, b = _two_replies(cmd, path, "a", "b")
    f = cmd.json_at(path, "append", fact("likes jazz", root))[0]["id"]
    move = {"from_type": "ASSERTED", "to_type": "OBSERVED", "reason": "seen", "evidence_ids": [b]}
    cmd.json_at(path, "append", op("EPISTEMIC_TRANSITION", move, f))
    cmd.json_at(path, "checkpoint")
    at_a = cmd.json_at(path, "query", "--anchor", a)
    at_b = cmd.json_at(path, "query", "--anchor", b)
    assert [(r["epistemic_type"], r["version"]) for r in at_a] == [("ASSERTED", 1)]
    assert [(r["epistemic_type"], r["version"]) for r in at_b] == [("OBSERVED", 2)]


def test_falsification_readers_show_what_the_global_state_left_out(tmp_path: Path, cmd: Any):
    """falsify / mark-stale / restore --cascade and why (with and without --anchor) show
    an operation accepted in its own view that the global state could not take
    (fz_unapplied), with why."""
    path = tmp_path / "f.ledger"
    root, a, b = _two_replies(cmd, path, "I moved away", "(edited) I still live here")
    f = cmd.json_at(path, "append", fact("lives in Chengdu", root))[0]["id"]
    done = cmd.json_at(path, "falsify", f, "--reason", "moved", "--evidence", a)
    assert (done["state"], done["applied"], done["unapplied"]) == ("falsified", True, None)
    # From B's line, where f is live: valid there, but the global state is falsified.
    human = cmd.ok(cmd.at(path, "mark-stale", f, "--reason", "re-check", "--evidence", b))
    assert f"memory_object {f} stays falsified globally" in human.output
    assert "not applied globally: " in human.output and "marked stale" in human.output
    w = cmd.json_at(path, "why", f)
    assert [(u["op_type"], u["branch"]) for u in w["unapplied"]] == [("MARK_STALE", "main")]
    assert "only a live item can be marked stale" in w["unapplied"][0]["reason"]
    assert len(w["unapplied"][0]["entry_hash"]) == 64
    text = cmd.ok(cmd.at(path, "why", f)).output
    assert "accepted in their own view, not applied globally (fz_unapplied):" in text
    at_b = cmd.json_at(path, "why", f, "--anchor", b)
    stale = [s for s in at_b["at_anchor"]["operations"] if s["op_type"] == "MARK_STALE"]
    assert stale[0]["applies"] and not stale[0]["applied_globally"]
    assert "only a live item can be marked stale" in stale[0]["unapplied"]
    assert at_b["at_anchor"]["object"]["state"] == "stale"
    fz = [s for s in at_b["at_anchor"]["operations"] if s["op_type"] == "FALSIFY"]
    assert fz[0]["unapplied"] is None and not fz[0]["applies"]
    text = cmd.ok(cmd.at(path, "why", f, "--anchor", b)).output
    assert "MARK_STALE           applies: ok (globally not applied: " in text
    # RESTORE from A: live again globally; B's line is still stale, so a RESTORE --cascade
    # from B is valid there and left out globally (nothing of it applies there).
    cmd.json_at(path, "restore", f, "--reason", "typo", "--evidence", a)
    back = cmd.json_at(
        path, "restore", f, "--reason", "fine", "--evidence", b, "--cascade", "--max-depth", "1"
    )
    assert back["state"] == "live" and back["applied"] is False
    assert "there is nothing to restore" in back["unapplied"]
    assert [u["op_type"] for u in cmd.json_at(path, "why", f)["unapplied"]] == [
        "MARK_STALE",
        "RESTORE",
    ]
    assert cmd.json_at(path, "verify", "--no-update")["ok"]
