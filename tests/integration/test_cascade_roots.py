"""A cascade writes what it lists and leaves a usable chain of roots (issues 16.3, 11.10)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli


def memroot(ledger: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(ledger), *args], catch_exceptions=False)


def ok_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _assert(path: Path, ev: str, value: str) -> str:
    op = {
        "kind": "op",
        "op_type": "ASSERT",
        "actor_id": "agent-7",
        "actor_type": "AI_AGENT",
        "namespace_id": "alice",
        "policy_version": "policy/1",
        "payload": {
            "object_type": "FACT",
            "epistemic_type": "OBSERVED",
            "source_type": "USER_STATED",
            "evidence_ids": [ev],
            "value": value,
            "confidence": None,
            "salience": 0.5,
        },
    }
    return str(ok_json(memroot(path, "append", json.dumps(op), "--json"))[0]["id"])


def _snapshot(path: Path) -> dict[str, Any]:
    out: dict[str, Any] = ok_json(memroot(path, "snapshot", "--json"))
    assert out["created"], out
    return out


@pytest.fixture
def chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Three roots r1 <- r2 <- r3, each over one more fact (o1 under r1, o2, o3)."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    path = tmp_path / "agent.ledger"
    assert memroot(path, "init", "--origin", "example.org/cascade").exit_code == 0
    event = {
        "kind": "event",
        "stream": "s",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "role": "USER",
        "content": "I take tea",
        "namespace_id": "alice",
    }
    ev = str(ok_json(memroot(path, "append", json.dumps(event), "--json"))[0]["id"])
    out: dict[str, Any] = {"path": path, "ev": ev}
    for i in (1, 2, 3):
        out[f"o{i}"] = _assert(path, ev, f"fact {i}")
        out[f"r{i}"] = _snapshot(path)["memory_root"]
    return out


def _verify_ok(path: Path) -> None:
    r = memroot(path, "verify")
    assert r.exit_code == 0, r.output


def test_a_cascade_from_a_falsified_root_writes_the_re_snapshots_it_lists(
    chain: dict[str, Any],
) -> None:
    """Issue 16.3 scenario: `cascade R1` with R1 falsified and R2 its child. The dry run
    and the applied run list the same roots, each gets a re-snapshot, the falsified R1 is
    not among them, R2's re-snapshot sits over R1's parent and R3's over R2's re-snapshot."""
    path, r1, r2, r3 = chain["path"], chain["r1"], chain["r2"], chain["r3"]
    assert memroot(path, "falsify", r1, "--reason", "bad snapshot").exit_code == 0
    dry = ok_json(memroot(path, "cascade", r1, "--dry-run", "--json"))
    done = ok_json(memroot(path, "cascade", r1, "--json"))
    assert dry["roots_to_resnapshot"] == done["roots_to_resnapshot"] == [r2, r3]
    assert dry["resnapshots"] == done["resnapshots"]
    by = {x["replaces"]: x for x in done["resnapshots"]}
    assert set(by) == {r2, r3}
    parent_of_r1 = ok_json(memroot(path, "root", "show", r1, "--json"))["parent"]
    assert by[r2]["parent"] == parent_of_r1  # over the falsified root's parent
    assert by[r3]["parent"] == by[r2]["memory_root"]  # replacement roots chain
    again = memroot(path, "cascade", r1, "--dry-run")  # r2, r3 are stale now: walked through
    assert "roots to re-snapshot without falsified inputs: 0" in again.stdout
    _verify_ok(path)


def test_a_cascade_leaves_a_usable_chain_of_roots(chain: dict[str, Any]) -> None:
    """Issue 11.10: re-snapshots are listed by `roots`, shown by `root show`/`root diff`,
    counted by `why`; the next snapshot chains from the replacement of the stale root;
    verify and rebuild agree."""
    path, o2, r2, r3 = chain["path"], chain["o2"], chain["r2"], chain["r3"]
    assert memroot(path, "falsify", o2, "--reason", "wrong").exit_code == 0
    done = ok_json(memroot(path, "cascade", o2, "--max-depth", "3", "--json"))
    by = {x["replaces"]: x["memory_root"] for x in done["resnapshots"]}
    assert set(by) == {r2, r3}
    listed = ok_json(memroot(path, "roots", "--json"))
    rows = {r["memory_root"]: r for r in listed}
    assert rows[by[r3]]["replaces"] == r3 and rows[by[r3]]["state"] == "live"
    assert rows[by[r3]]["entry"] == "CASCADE" and rows[r3]["state"] == "stale"
    order = [r["memory_root"] for r in listed]
    assert order.index(by[r3]) < order.index(r3) < order.index(by[r2])
    show = ok_json(memroot(path, "root", "show", by[r2][:12], "--json"))
    counts = {s["id"]: s["summary"] for s in show["summaries"]}
    assert counts["epistemic-distribution"] == {"OBSERVED": 1}  # o2 left out (o1 counted)
    diff = ok_json(memroot(path, "root", "diff", r2, by[r2], "--json"))
    changed = {p["id"]: p["status"] for p in diff["projections"]}
    assert changed["epistemic-distribution"] == "changed" and not diff["a_is_ancestor_of_b"]
    assert "re-snapshot of" in memroot(path, "why", by[r3][:12]).stdout
    new = _snapshot(path)
    assert new["parent"] == by[r3]  # not the stale r3
    why_new_parent = ok_json(memroot(path, "why", by[r3], "--json"))
    assert {"type": "memory_root", "id": new["memory_root"]} in why_new_parent["dependents"]
    assert ok_json(memroot(path, "why", r3, "--json"))["replaced_by"][0]["memory_root"] == by[r3]
    again = ok_json(memroot(path, "roots", "--json"))
    assert [r["memory_root"] for r in again[:2]] == [new["memory_root"], by[r3]]
    _verify_ok(path)
    assert ok_json(memroot(path, "rebuild", "--json"))["identical"] is True
    _verify_ok(path)


def test_restore_cascade_undoes_its_staleness_within_the_bound(chain: dict[str, Any]) -> None:
    """Issue 11.10: `restore ID --cascade --max-depth N` makes live again what the
    cascade from ID marked stale up to depth N (deeper stays stale, listed), withdraws the
    re-snapshots of the restored roots, is one RESTORE entry listing it all, and the next
    snapshot chains from the restored root."""
    path, r1, r2, r3 = chain["path"], chain["r1"], chain["r2"], chain["r3"]
    assert memroot(path, "falsify", r1, "--reason", "bad").exit_code == 0
    done = ok_json(memroot(path, "cascade", r1, "--json"))
    by = {x["replaces"]: x["memory_root"] for x in done["resnapshots"]}
    size = len(ok_json(memroot(path, "log", "--json")))
    args = ["restore", r1, "--reason", "fine after all", "--cascade", "--max-depth", "1"]
    dry = ok_json(memroot(path, *args, "--dry-run", "--json"))
    assert len(ok_json(memroot(path, "log", "--json"))) == size
    out = ok_json(memroot(path, *args, "--json"))
    for key in ("restored", "beyond", "withdrawn", "max_depth"):
        assert dry[key] == out[key], key
    assert out["state"] == "live"
    assert out["restored"] == [{"type": "memory_root", "id": r2, "depth": 1}]
    assert out["beyond"] == [{"type": "memory_root", "id": r3, "depth": 2}]
    assert out["withdrawn"] == [{"memory_root": by[r2], "replaces": r2}]
    log = ok_json(memroot(path, "log", "--json"))
    assert len(log) == size + 1 and log[-1]["type"] == "RESTORE"

    def state(x: str) -> str:
        return str(ok_json(memroot(path, "why", x, "--json"))["state"])

    assert (state(r1), state(r2), state(r3)) == ("live", "live", "stale")
    assert (state(by[r2]), state(by[r3])) == ("stale", "live")
    why = ok_json(memroot(path, "why", r2, "--json"))
    assert why["history"][-1]["op"] == "RESTORE"
    # The next snapshot follows r3's re-snapshot (r3 is still stale, beyond the bound).
    assert _snapshot(path)["parent"] == by[r3]
    _verify_ok(path)
    assert ok_json(memroot(path, "rebuild", "--json"))["identical"] is True


def test_restore_cascade_relinks_the_next_snapshot_to_the_restored_root(
    chain: dict[str, Any],
) -> None:
    """When the re-snapshot the next snapshot would chain from is withdrawn, the next
    snapshot chains from the root it had replaced, live again."""
    path, o3, r3 = chain["path"], chain["o3"], chain["r3"]
    assert memroot(path, "falsify", o3, "--reason", "wrong").exit_code == 0
    done = ok_json(memroot(path, "cascade", o3, "--json"))
    assert [x["replaces"] for x in done["resnapshots"]] == [r3]
    args = ["restore", o3, "--reason", "right after all", "--cascade", "--max-depth", "5"]
    out = ok_json(memroot(path, *args, "--json"))
    assert {"type": "memory_root", "id": r3, "depth": 1} in out["restored"]
    _assert(path, chain["ev"], "fact 4")
    assert _snapshot(path)["parent"] == r3
    _verify_ok(path)


def test_a_hand_written_restore_cascade_must_list_what_the_undo_gives(
    chain: dict[str, Any],
) -> None:
    """A RESTORE whose cascade part is not what the ledger gives is refused (exit 3),
    naming the field; nothing is written."""
    path, r1, r2 = chain["path"], chain["r1"], chain["r2"]
    assert memroot(path, "falsify", r1, "--reason", "bad").exit_code == 0
    assert memroot(path, "cascade", r1).exit_code == 0
    size = len(ok_json(memroot(path, "log", "--json")))
    forged = {
        "kind": "op",
        "op_type": "RESTORE",
        "actor_id": "mallory",
        "actor_type": "HUMAN_USER",
        "namespace_id": "system",
        "policy_version": "memroot-falsify/1",
        "target_id": r1,
        "target_type": "memory_root",
        "payload": {
            "reason": "x",
            "cascade": {
                "max_depth": 1,
                "restored": [],
                "beyond": {"count": 0, "items": []},
                "withdrawn": [],
            },
        },
    }
    r = memroot(path, "append", json.dumps(forged))
    assert r.exit_code == 3 and "payload.cascade" in r.stderr, r.output
    assert len(ok_json(memroot(path, "log", "--json"))) == size
    assert ok_json(memroot(path, "why", r2, "--json"))["state"] == "stale"


def test_verify_catches_an_edited_re_snapshot_record(chain: dict[str, Any]) -> None:
    """A stored re-snapshot record whose state or parent was edited fails verify (step 9),
    naming the re-snapshot; rebuild restores it."""
    import apsw

    path, o2 = chain["path"], chain["o2"]
    assert memroot(path, "falsify", o2, "--reason", "wrong").exit_code == 0
    done = ok_json(memroot(path, "cascade", o2, "--json"))
    new = done["resnapshots"][0]["memory_root"]
    db = apsw.Connection(str(path))
    db.execute(
        "UPDATE memory_root_resnapshots SET state = 'falsified' WHERE root = ?",
        (bytes.fromhex(new),),
    )
    db.close()
    r = memroot(path, "verify", "--json")
    assert r.exit_code == 1, r.output
    found = [f for f in json.loads(r.stdout)["findings"] if new[:16] in f["message"]]
    assert found and found[0]["step"] == 9
    assert memroot(path, "rebuild").exit_code == 0
    _verify_ok(path)


def test_a_branch_forked_after_a_cascade_chains_from_the_re_snapshot(
    chain: dict[str, Any],
) -> None:
    """A branch forked after a cascade: its first root links to the re-snapshot of the
    parent's root at the fork, not to the stale root; verify replays it."""
    path, o3, r3 = chain["path"], chain["o3"], chain["r3"]
    assert memroot(path, "falsify", o3, "--reason", "wrong").exit_code == 0
    done = ok_json(memroot(path, "cascade", o3, "--json"))
    (x,) = [x["memory_root"] for x in done["resnapshots"] if x["replaces"] == r3]
    made = memroot(path, "branch", "create", "--type", "SIMULATION", "--purpose", "p")
    b = made.stdout.strip()
    _assert(path, chain["ev"], "fact in the branch")  # on main: the branch sees none of it
    first = ok_json(memroot(path, "snapshot", "-b", b, "--json"))
    assert first["parent"] == x
    _verify_ok(path)
