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
