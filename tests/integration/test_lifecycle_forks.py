"""Lifecycle across forks and merges (issue 28, issue 23 point 10), through the CLI and the API.

Each test is one reproduction of the issue: strict reads of inherited objects on a fork, every
served object re-derived (an edited row refused, the attacker in its own process), erasure
flags on a fork, falsified or stale objects refused by a merge, DEDUP_RESOLVED all or nothing
at an anchor, and merged memory at a main anchor.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import memroot
from memroot.cli.main import cli
from memroot.ledger.errors import IntegrityError, RefusedError

NS = "alice"
README = Path(__file__).resolve().parents[2] / "README.md"


def run(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def ok(path: Path, *args: str) -> Any:
    result = run(path, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def append(path: Path, obj: dict[str, Any], branch: str = "main") -> str:
    return str(ok(path, "append", "-b", branch, json.dumps(obj))[0]["id"])


def event(path: Path, branch: str = "main", parent: str | None = None, text: str = "said") -> str:
    obj: dict[str, Any] = {
        "kind": "event",
        "stream": "s",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "role": "USER",
        "content": text,
        "namespace_id": NS,
    }
    if parent is not None:
        obj["parent_event_id"] = parent
    return append(path, obj, branch)


def op(op_type: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "kind": "op",
        "op_type": op_type,
        "actor_id": "agent",
        "actor_type": "AI_AGENT",
        "namespace_id": NS,
        "policy_version": "p/1",
        "payload": payload,
        **extra,
    }


def fact(path: Path, evidence: list[str], value: str = "v", branch: str = "main") -> str:
    payload = {
        "object_type": "FACT",
        "epistemic_type": "ASSERTED",
        "source_type": "USER_STATED",
        "evidence_ids": evidence,
        "value": value,
        "confidence": None,
        "salience": 0.5,
    }
    return append(path, op("ASSERT", payload), branch)


def fork(path: Path) -> str:
    result = run(path, "branch", "create", "--type", "SIMULATION", "--purpose", "p")
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def served(path: Path, *args: str) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in ok(path, "query", *args)}


def verified(path: Path) -> None:
    result = run(path, "verify")
    assert result.exit_code == 0 and "OK: every step holds" in result.output, result.output


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "m.ledger"
    assert run(path, "init").exit_code == 0
    return path


# -- 1. strict reads of inherited objects on a fork ----------------------------------------------


def test_inherited_object_on_a_fork_reads_strictly_through_the_cli(ledger: Path) -> None:
    """why/query --branch (with and without --anchor) serve an inherited object; verify OK."""
    e = event(ledger)
    o = fact(ledger, [e])
    b = fork(ledger)
    why = run(ledger, "why", o, "--branch", b)
    assert why.exit_code == 0, why.output
    assert set(served(ledger, "--branch", b)) == {o}
    assert set(served(ledger, "--branch", b, "--anchor", e)) == {o}
    assert ok(ledger, "why", o, "--branch", b, "--anchor", e)["at_anchor"]["visible"] is True
    verified(ledger)


def test_inherited_object_on_a_fork_reads_strictly_through_the_api(tmp_path: Path) -> None:
    """Memory.why(branch=) and Memory.recall(branch=, anchor=) serve an inherited object."""
    with memroot.open(tmp_path / "m.ledger", actor="agent", namespace=NS) as mem:
        e = mem.record(content="I like tea").id
        o = mem.remember("Alice likes tea", evidence=[e]).id
        b = mem.fork("what if")
        assert mem.why(o, branch=b).to_dict()["object"]["id"] == o
        assert [r.object.id for r in mem.recall(branch=b)] == [o]
        assert [r.object.id for r in mem.recall(branch=b, anchor=e)] == [o]
        assert [r.object.id for r in mem.recall(branch=b, mode="AUDIT", receipt="run-1")] == [o]
        assert mem.verify().ok


def test_readme_branch_example_runs_as_written(tmp_path: Path) -> None:
    """The README's Branches block runs in a fresh directory, every command exiting 0."""
    text = README.read_text()
    block = re.search(r"## Branches\n\n```sh\n(.*?)```", text, re.S)
    assert block is not None
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MEMROOT_LEDGER", None)
    done = subprocess.run(
        ["bash", "-e", "-c", block.group(1)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: every step holds" in done.stdout
    assert "IMPORTED as" in done.stdout  # the merge landed


# -- 2. every served object re-derived (the attacker in its own process) ------------------------

_EDIT = """
import sys, apsw
db = apsw.Connection(sys.argv[1])
with db:
    db.execute(
        "UPDATE mem_objects SET " + sys.argv[3] + " WHERE id = ? AND vto IS NULL", (sys.argv[2],)
    )
"""


def _attack(path: Path, object_id: str, assignment: str) -> None:
    subprocess.run([sys.executable, "-c", _EDIT, str(path), object_id, assignment], check=True)


@pytest.mark.parametrize(
    "assignment",
    ["value = 'Alice takes sugar'", "confidence = 0.99", "lifecycle_state = 'ARCHIVED'"],
)
def test_edited_row_of_an_object_deprecated_with_evidence_is_refused(
    ledger: Path, assignment: str
) -> None:
    """A DEPRECATE citing evidence no longer leaves the object unchecked: query and why refuse."""
    e = event(ledger)
    why_ev = event(ledger, parent=e, text="it changed")
    o = fact(ledger, [e], "Alice takes no sugar")
    append(ledger, op("DEPRECATE", {"reason": "r", "deprecated_by": "agent"}, target_id=o))
    other = fact(ledger, [e], "Alice likes tea")
    append(
        ledger,
        op(
            "DEPRECATE",
            {"reason": "r", "deprecated_by": "agent", "evidence_ids": [why_ev]},
            target_id=other,
        ),
    )
    b = fork(ledger)
    size = ok(ledger, "log")[-1]["seq"]
    _attack(ledger, other, assignment)
    for args in (
        ("query", "--mode", "AUDIT"),
        ("query", "--mode", "AUDIT", "--branch", b),
        ("query", "--mode", "AUDIT", "--anchor", why_ev),
        ("why", other),
        ("why", other, "--branch", b),
    ):
        result = run(ledger, *args)
        assert result.exit_code == 1, (args, result.output)
        assert "step 9" in result.output and other in result.output
        assert "Alice takes sugar" not in result.stdout
    with memroot.open(ledger, actor="agent", namespace=NS) as mem:
        with pytest.raises(IntegrityError, match="step 9"):
            mem.recall(mode="AUDIT", branch=b)
        with pytest.raises(IntegrityError, match="step 9"):
            mem.why(other, branch=b)
    assert ok(ledger, "log")[-1]["seq"] == size  # nothing written by the refused reads
    # The untouched object still reads strictly: only the edited row is refused.
    _attack(
        ledger, other, "value = 'Alice likes tea', confidence = 0.8, lifecycle_state = 'DEPRECATED'"
    )
    verified(ledger)
    assert set(served(ledger, "--mode", "AUDIT", "--branch", b)) == {o, other}


# -- 3. an erasure leaves nothing ACTIVE unflagged on a fork ------------------------------------


def test_erasure_flags_an_object_active_only_at_an_anchor_on_a_fork(ledger: Path) -> None:
    """F1 superseded from a sibling line, its evidence erased: flagged on main and on a fork."""
    root = event(ledger)
    r = event(ledger, parent=root, text="moving to Chengdu")
    s = event(ledger, parent=root, text="moving to Hangzhou")
    f1 = fact(ledger, [r], "moves to Chengdu")
    f2 = fact(ledger, [s], "moves to Hangzhou")
    append(ledger, op("SUPERSEDE", {"new_object_id": f2, "reason": "edited"}, target_id=f1))
    b = fork(ledger)
    tomb = {
        "target_event_id": r,
        "reason": "asked",
        "policy_ref": "gdpr",
        "on_dependents": "DEPRECATE",
    }
    append(ledger, op("TOMBSTONE", tomb, target_id=r, target_type="EVENT"))
    for args in ((), ("--branch", b)):
        got = served(ledger, "--mode", "AUDIT", "--anchor", r, *args)
        assert got[f1]["lifecycle_state"] == "ACTIVE", args
        assert "EVIDENCE_ERASED" in got[f1]["flags"], args
    with memroot.open(ledger, actor="agent", namespace=NS) as mem:
        (res,) = [x for x in mem.recall(branch=b, anchor=r) if x.object.id == f1]
        assert "EVIDENCE_ERASED" in res.flags
    verified(ledger)


# -- 4. a falsified or stale branch object is not merged live -----------------------------------


def test_merge_refuses_falsified_and_stale_branch_objects(ledger: Path) -> None:
    """merge names a falsified and a stale object, writes nothing; after restore it merges."""
    b = fork(ledger)
    e = event(ledger, branch=b)
    x = fact(ledger, [e], "wrong", branch=b)
    y = fact(ledger, [e], "to re-check", branch=b)
    assert run(ledger, "falsify", x, "--reason", "wrong", "-b", b).exit_code == 0
    assert run(ledger, "mark-stale", y, "--reason", "check", "-b", b).exit_code == 0
    size = len(ok(ledger, "log"))
    for obj, state in ((x, "falsified"), (y, "stale")):
        result = run(ledger, "branch", "merge", b, "--objects", obj, "--actor", "alice")
        assert result.exit_code == 3, result.output
        assert f"{obj} ({state})" in result.output and "restore" in result.output
    assert len(ok(ledger, "log")) == size
    assert served(ledger, "--mode", "AUDIT") == {}
    with (
        memroot.open(ledger, actor="alice", namespace=NS) as mem,
        pytest.raises(RefusedError, match="falsified or stale"),
    ):
        mem.merge(b, [x])
    assert run(ledger, "restore", x, "--reason", "checked", "-b", b).exit_code == 0
    merged = ok(ledger, "branch", "merge", b, "--objects", x, "--actor", "alice")
    (item,) = merged["items"]
    got = served(ledger)
    assert got[item["new_object_id"]]["state"] == "live"
    verified(ledger)


# -- 5. DEDUP_RESOLVED is one decision, globally and at every anchor -----------------------------


def test_dedup_applies_to_all_merged_objects_or_none_at_an_anchor(ledger: Path) -> None:
    """M0 deprecated on c's line: DEDUP P <- [M0, M1] changes neither, globally and at c."""
    pe = event(ledger)
    c = event(ledger, parent=pe, text="M0 was wrong")
    p = fact(ledger, [pe], "primary")
    m0 = fact(ledger, [pe], "dup 0")
    m1 = fact(ledger, [pe], "dup 1")
    dep = {"reason": "r", "deprecated_by": "agent", "evidence_ids": [c]}
    append(ledger, op("DEPRECATE", dep, target_id=m0))
    dedup = {"primary_id": p, "merged_ids": [m0, m1], "resolution_strategy": "KEEP_PRIMARY"}
    append(ledger, op("DEDUP_RESOLVED", dedup, target_id=p))
    glob = served(ledger, "--mode", "AUDIT")
    at_c = served(ledger, "--mode", "AUDIT", "--anchor", c)
    at_pe = served(ledger, "--mode", "AUDIT", "--anchor", pe)
    assert (glob[m0]["lifecycle_state"], glob[m1]["lifecycle_state"]) == ("DEPRECATED", "ACTIVE")
    assert (at_c[m0]["lifecycle_state"], at_c[m1]["lifecycle_state"]) == ("DEPRECATED", "ACTIVE")
    assert (at_pe[m0]["lifecycle_state"], at_pe[m1]["lifecycle_state"]) == (
        "SUPERSEDED",
        "SUPERSEDED",
    )
    steps = ok(ledger, "why", m1, "--anchor", c)["at_anchor"]["operations"]
    (step,) = [s for s in steps if s["op_type"] == "DEDUP_RESOLVED"]
    assert step["applies"] is False and "all of its objects or to none" in step["reason"]
    with memroot.open(ledger, actor="agent", namespace=NS) as mem:
        states = {r.object.id: r.object.lifecycle_state for r in mem.recall(anchor=c, mode="AUDIT")}
        assert states[m1] == "ACTIVE"
    verified(ledger)


# -- 6. merged memory at a main anchor -----------------------------------------------------------


def test_merged_objects_join_main_where_the_branch_line_continued(ledger: Path) -> None:
    """An import citing a fork event is visible at main anchors on the line the fork continued."""
    root = event(ledger)
    e = event(ledger, parent=root, text="we plan")
    s = event(ledger, parent=root, text="another line")
    b = fork(ledger)
    f = event(ledger, branch=b, parent=e, text="in the branch")
    g = event(ledger, branch=b, text="a conversation of the branch alone")
    x = fact(ledger, [f], "continued from e", branch=b)
    y = fact(ledger, [g], "from the branch alone", branch=b)
    merged = ok(ledger, "branch", "merge", b, "--objects", f"{x},{y}", "--actor", "alice")
    new = {i["object_id"]: i["new_object_id"] for i in merged["items"]}
    later = event(ledger, parent=e, text="on e's line, later")
    assert set(served(ledger, "--anchor", e)) == {new[x], new[y]}
    assert set(served(ledger, "--anchor", later)) == {new[x], new[y]}
    assert set(served(ledger, "--anchor", s)) == {new[y]}
    assert set(served(ledger, "--anchor", root)) == {new[y]}
    assert ok(ledger, "why", new[x], "--anchor", s)["at_anchor"]["visible"] is False
    with memroot.open(ledger, actor="agent", namespace=NS) as mem:
        assert {r.object.id for r in mem.recall(anchor=later)} == {new[x], new[y]}
        assert {r.object.id for r in mem.recall(anchor=s)} == {new[y]}
    verified(ledger)


def test_a_fork_cannot_cite_an_event_its_parent_erased_after_the_fork(ledger: Path) -> None:
    """The fork's frozen view still lists the event, but its content is gone: ASSERT refused."""
    e = event(ledger)
    b = fork(ledger)
    tomb = {
        "target_event_id": e,
        "reason": "asked",
        "policy_ref": "gdpr",
        "on_dependents": "DEPRECATE",
    }
    append(ledger, op("TOMBSTONE", tomb, target_id=e, target_type="EVENT"))
    size = len(ok(ledger, "log", "-b", b))
    payload = {
        "object_type": "FACT",
        "epistemic_type": "ASSERTED",
        "source_type": "USER_STATED",
        "evidence_ids": [e],
        "value": "v",
        "confidence": None,
        "salience": 0.5,
    }
    result = run(ledger, "append", "-b", b, json.dumps(op("ASSERT", payload)))
    assert result.exit_code == 3, result.output
    assert f"evidence event {e} was erased" in result.output
    assert len(ok(ledger, "log", "-b", b)) == size
    assert served(ledger, "--mode", "AUDIT", "--branch", b) == {}
    verified(ledger)


_ROLL_BACK = """
import sys, apsw
db = apsw.Connection(sys.argv[1])
with db:
    db.execute("UPDATE mem_objects SET vto = NULL WHERE id = ? AND version = 1", (sys.argv[2],))
"""


def test_derived_row_rolled_back_to_an_older_version_is_refused(ledger: Path) -> None:
    """An older, honest version reopened as current (a deprecation undone) is refused.

    (Deleting the newer row as well is not caught here: a strict read learns an object's
    operations from its rows; that completeness is issue 23's.)
    """
    e = event(ledger)
    o = fact(ledger, [e], "Alice takes sugar")
    append(ledger, op("DEPRECATE", {"reason": "wrong", "deprecated_by": "agent"}, target_id=o))
    b = fork(ledger)
    assert served(ledger) == {}
    subprocess.run([sys.executable, "-c", _ROLL_BACK, str(ledger), o], check=True)
    for args in (("query",), ("query", "--branch", b)):
        result = run(ledger, *args)
        assert result.exit_code == 1, (args, result.output)
        assert "step 9" in result.output and "Alice takes sugar" not in result.stdout
    # why shows the newest version, which is honest: DEPRECATED (nothing tampered served).
    assert ok(ledger, "why", o, "--branch", b)["object"]["lifecycle_state"] == "DEPRECATED"
    # As of the ASSERT, version 1 is what the ledger held: that read is honest and served.
    assert served(ledger, "--as-of", "2", "--mode", "AUDIT")[o]["version"] == 1
