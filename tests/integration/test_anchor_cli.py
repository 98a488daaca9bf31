"""`--anchor` on append and import: new events continue the conversation at the anchor."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from memroot.ledger.ledger import Ledger


def _parent(path: Path, seq: int) -> str | None:
    with Ledger.open(path) as ledger:
        return ledger.entry(seq).body.get("parent_event_id")


def test_append_and_import_at_an_anchor(tmp_path: Path, cmd: Any):
    """append --anchor parents the event; import --anchor chains the file's events from it."""
    path = tmp_path / "a.ledger"
    cmd.json_at(path, "init")
    root = cmd.json_at(path, "append", json.dumps({**cmd.CHAT_EVENT, "content": "root"}))[0]
    child = cmd.json_at(
        path, "append", json.dumps({**cmd.CHAT_EVENT, "content": "reply"}), "--anchor", root["id"]
    )
    assert _parent(path, child[0]["seq"]) == root["id"]
    lines = tmp_path / "more.jsonl"
    lines.write_text(
        "\n".join(json.dumps({**cmd.CHAT_EVENT, "content": f"m{i}"}) for i in range(3))
    )
    added = cmd.json_at(path, "import", str(lines), "--anchor", child[0]["id"])
    events = [a for a in added if a["type"] == "EVENT"]
    assert _parent(path, events[0]["seq"]) == child[0]["id"]
    for before, after in itertools.pairwise(events):
        assert _parent(path, after["seq"]) == before["id"]


def test_explicit_parent_wins_and_bad_anchor_is_refused(tmp_path: Path, cmd: Any):
    """An event naming its own parent keeps it; an anchor that is no UUID is refused (exit 3)."""
    path = tmp_path / "b.ledger"
    cmd.json_at(path, "init")
    a = cmd.json_at(path, "append", json.dumps({**cmd.CHAT_EVENT, "content": "a"}))[0]
    b = cmd.json_at(path, "append", json.dumps({**cmd.CHAT_EVENT, "content": "b"}))[0]
    c = cmd.json_at(
        path,
        "append",
        json.dumps({**cmd.CHAT_EVENT, "content": "c", "parent_event_id": a["id"]}),
        "--anchor",
        b["id"],
    )
    assert _parent(path, c[0]["seq"]) == a["id"]
    result = cmd.at(
        path, "append", json.dumps({**cmd.CHAT_EVENT, "content": "d"}), "--anchor", "nope"
    )
    assert result.exit_code == 3 and "--anchor" in result.stderr


def _chat(cmd: Any, path: Path, n: int) -> list[dict]:
    """n events, each the child of the one before; returns their append results."""
    out: list[dict] = []
    for i in range(n):
        args = ["append", json.dumps({**cmd.CHAT_EVENT, "content": f"turn {i}"})]
        if out:
            args += ["--anchor", out[-1]["id"]]
        out.append(cmd.json_at(path, *args)[0])
    return out


def test_verify_anchor_proves_the_conversation_path(tmp_path: Path, cmd: Any):
    """verify --anchor proves every ancestor of the anchor in a signed checkpoint."""
    path = tmp_path / "v.ledger"
    cmd.json_at(path, "init")
    turns = _chat(cmd, path, 4)
    cmd.json_at(path, "checkpoint")
    report = cmd.json_at(path, "verify", "--anchor", turns[-1]["id"], "--no-update")
    steps = report["trusted"]["anchor_path"]
    assert [s["event_id"] for s in steps] == [t["id"] for t in reversed(turns)]
    assert all(s["proven_in"] and s["problem"] is None for s in steps)


def test_verify_anchor_reports_a_broken_path(tmp_path: Path, cmd: Any):
    """An anchor not in the ledger fails; every appended turn is already signed (sealed)."""
    path = tmp_path / "v.ledger"
    cmd.json_at(path, "init")
    turns = _chat(cmd, path, 2)
    sealed = cmd.json_at(path, "verify", "--anchor", turns[-1]["id"], "--no-update")
    assert sealed["ok"] and all(s["proven_in"] for s in sealed["trusted"]["anchor_path"])
    bad = cmd.at(path, "verify", "--anchor", "01900000-0000-7000-8000-00000000dead", "--no-update")
    assert bad.exit_code == 1 and "not in the ledger" in bad.output + bad.stderr


def test_roots_and_snapshot_at_an_anchor(tmp_path: Path, cmd: Any):
    """snapshot --anchor snapshots the anchor's branch; roots --anchor lists roots covering it."""
    path = tmp_path / "r.ledger"
    cmd.json_at(path, "init")
    early = _chat(cmd, path, 2)
    first = cmd.json_at(path, "snapshot", "--anchor", early[-1]["id"])
    late = _chat(cmd, path, 2)
    second = cmd.json_at(path, "snapshot", "--anchor", late[-1]["id"])
    covering_early = {
        r["memory_root"] for r in cmd.json_at(path, "roots", "--anchor", early[0]["id"])
    }
    covering_late = {
        r["memory_root"] for r in cmd.json_at(path, "roots", "--anchor", late[-1]["id"])
    }
    assert {first["memory_root"], second["memory_root"]} <= covering_early
    assert covering_late == {second["memory_root"]}
