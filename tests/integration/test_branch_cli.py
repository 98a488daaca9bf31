"""Branch commands end to end: merge, divergence, diff, and --branch/--anchor/--git-branch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli

ORIGIN = "example.org/branch-cli"
NS = "team"


def memroot(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def ok(path: Path, *args: str) -> Any:
    result = memroot(path, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def append(path: Path, obj: dict[str, Any], branch: str = "main") -> str:
    return str(ok(path, "append", "-b", branch, json.dumps(obj))[0]["id"])


def event(
    path: Path, branch: str = "main", parent: str | None = None, git: str | None = None
) -> str:
    obj: dict[str, Any] = {
        "kind": "event",
        "stream": "s",
        "actor_id": "agent",
        "actor_type": "AI_AGENT",
        "role": "USER",
        "content": "said",
        "namespace_id": NS,
    }
    if parent is not None:
        obj["parent_event_id"] = parent
    if git is not None:
        obj["context"] = {"git": {"branch": git}}
    return append(path, obj, branch)


def op(op_type: str, payload: dict[str, Any], actor: str = "agent", **extra: Any) -> dict[str, Any]:
    return {
        "kind": "op",
        "op_type": op_type,
        "actor_id": actor,
        "actor_type": "AI_AGENT",
        "namespace_id": NS,
        "policy_version": "p/1",
        "payload": payload,
        **extra,
    }


def fact(
    path: Path,
    evidence: list[str],
    branch: str = "main",
    *,
    epistemic: str = "ASSERTED",
    sv: Any = None,
    git: str | None = None,
    salience: float = 0.5,
) -> str:
    payload: dict[str, Any] = {
        "object_type": "FACT",
        "epistemic_type": epistemic,
        "source_type": "USER_STATED",
        "evidence_ids": evidence,
        "value": "v",
        "confidence": None,
        "salience": salience,
    }
    if sv is not None:
        payload["structured_value"] = sv
    extra = {} if git is None else {"context": {"git": {"branch": git}}}
    return append(path, op("ASSERT", payload, **extra), branch)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    p = tmp_path / "b.ledger"
    assert memroot(p, "init", "--origin", ORIGIN).exit_code == 0
    append(p, op("NAMESPACE_CREATE", {"namespace_type": "PROJECT"}, actor="admin"))
    for who, perms in (("admin", "WRITE ASSERT DEPRECATE READ"), ("agent", "WRITE ASSERT")):
        for perm in perms.split():
            append(p, op("GRANT", {"actor_id": who, "permission": perm}, actor="admin"))
    return p


def branch(path: Path, btype: str = "SIMULATION", parent: str = "main") -> str:
    result = memroot(
        path, "branch", "create", "--type", btype, "--purpose", "p", "--parent", parent
    )
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def _pair(path: Path) -> tuple[str, str, str]:
    """A branch with a FACT that conflicts with one main asserted after the fork."""
    e = event(path)
    b = branch(path)
    mine = fact(path, [event(path, b)], b, sv={"attribute": "city"})
    theirs = fact(path, [e], sv={"attribute": "city"})
    return b, mine, theirs


@pytest.mark.parametrize(
    ("strategy", "outcome"),
    [
        ("PRESERVE_BOTH", "IMPORTED"),
        ("PREFER_CANONICAL", "REJECTED"),
        ("PREFER_BRANCH", "IMPORTED"),
    ],
)
def test_branch_merge_with_each_strategy(path: Path, strategy: str, outcome: str):
    """merge --objects lands the strategy's outcome and prints it as JSON."""
    b, mine, theirs = _pair(path)
    data = ok(
        path, "branch", "merge", b, "--objects", mine, "--strategy", strategy, "--actor", "admin"
    )
    [item] = data["items"]
    assert (item["object_id"], item["outcome"], item["conflicts_with"]) == (mine, outcome, [theirs])
    assert data["divergence"]["branch_id"] == b and "warning" in data
    state = {r["id"]: r for r in ok(path, "query", "--mode", "AUDIT")}
    assert state[theirs]["lifecycle_state"] == (
        "DEPRECATED" if strategy == "PREFER_BRANCH" else "ACTIVE"
    )
    if outcome == "IMPORTED":
        new = state[item["new_object_id"]]
        assert new["source_type"] == "IMPORTED" and new["asserted_by"] == "agent"
    assert (data["override_seq"] is not None) == (strategy == "PREFER_BRANCH")
    log = ok(path, "log", "--start", str(data["merge_seq"]), "--limit", "1")
    assert log[0]["type"] == "BRANCH_MERGE"


def test_branch_merge_refusals_exit_3(path: Path):
    """No --objects, a HYPOTHETICAL object, a COUNTERFACTUAL branch: exit 3, named."""
    e = event(path)
    b = branch(path)
    h = fact(path, [e], b, epistemic="HYPOTHETICAL")
    none = memroot(path, "branch", "merge", b)
    assert none.exit_code == 3 and "--objects" in none.stderr
    hyp = memroot(path, "branch", "merge", b, "--objects", h)
    assert hyp.exit_code == 3 and h in hyp.stderr and "EPISTEMIC_TRANSITION" in hyp.stderr
    cf = branch(path, "COUNTERFACTUAL")
    x = fact(path, [e], cf)
    refused = memroot(path, "branch", "merge", cf, "--objects", x)
    assert refused.exit_code == 3 and "COUNTERFACTUAL branches never merge" in refused.stderr
    admin_only = memroot(
        path,
        "branch",
        "merge",
        b,
        "--objects",
        h,
        "--strategy",
        "PREFER_BRANCH",
        "--actor",
        "agent",
    )
    assert admin_only.exit_code == 3


def test_divergent_merge_prints_a_warning_and_goes_ahead(path: Path):
    """Above 0.70 the human output warns on stderr; the merge lands."""
    b = branch(path)
    x = fact(path, [event(path, b)], b)
    result = memroot(path, "branch", "merge", b, "--objects", x, "--actor", "admin")
    assert result.exit_code == 0
    assert "warning: divergence 1.00 is above 0.70" in result.stderr
    assert f"{x}: IMPORTED" in result.stdout


def test_branch_divergence_and_diff(path: Path):
    """divergence and diff report the branch's changes against its parent at the fork."""
    e = event(path)
    x = fact(path, [e])
    b = branch(path)
    append(
        path,
        op(
            "REINFORCE",
            {
                "signal_type": "s",
                "delta": 0.05,
                "new_confidence": 0.85,
                "new_salience": 0.55,
                "signal_source": "t",
            },
            target_id=x,
        ),
        b,
    )
    y = fact(path, [e], b)
    d = ok(path, "branch", "divergence", b)
    assert (d["objects_created"], d["objects_modified"], d["objects_at_fork"]) == (1, 1, 1)
    assert d["divergence_score"] == 1.0 and d["warning"] is True
    human = memroot(path, "branch", "divergence", b)
    assert "divergence_score: 1.0" in human.stdout and "warning" in human.stderr
    diff = ok(path, "branch", "diff", b)
    assert [c["id"] for c in diff["created"]] == [y]
    assert [(c["id"], "confidence" in c["changed"]) for c in diff["modified"]] == [(x, True)]
    assert f"+ {y}" in memroot(path, "branch", "diff", b).stdout


def test_query_branch_anchor_and_git_branch(path: Path):
    """query reads a branch's view, at an anchor, and ranked for a git branch."""
    r = event(path)
    a, c = event(path, parent=r), event(path, parent=r)
    on = fact(path, [a], git="feature/x", salience=0.3)
    off = fact(path, [c], git="feature/y", salience=0.9)
    b = branch(path)
    h = fact(path, [r], b, epistemic="HYPOTHETICAL")
    late = fact(path, [r])
    in_branch = ok(path, "query", "--branch", b)
    assert {q["id"]: q["flags"] for q in in_branch} == {h: ["HYPOTHETICAL"], on: [], off: []}
    assert [q["id"] for q in ok(path, "query")] == [late, off, on]
    assert [q["id"] for q in ok(path, "query", "--anchor", a)] == [late, on]  # not off (c)
    ranked = ok(path, "query", "--git-branch", "feature/x")
    assert [q["id"] for q in ranked][:1] == [on] and "score" in ranked[0]
    missing = memroot(path, "query", "--anchor", "01900000-0000-7000-8000-000000000000")
    assert missing.exit_code == 3 and "anchor" in missing.stderr


def test_verify_branch_restricts_to_the_branch_and_its_ancestors(path: Path):
    """verify -b checks the branch and main; a tampered sibling is outside its scope."""
    e = event(path)
    x = fact(path, [e])
    b, sibling = branch(path), branch(path)
    for name in (b, sibling):
        append(
            path,
            op(
                "REINFORCE",
                {
                    "signal_type": "s",
                    "delta": 0.05,
                    "new_confidence": 0.85,
                    "new_salience": 0.55,
                    "signal_source": "t",
                },
                target_id=x,
            ),
            name,
        )
    db = apsw.Connection(str(path))
    db.execute("UPDATE mem_objects SET confidence = 0.99 WHERE branch = ?", (sibling,))
    db.close()
    scoped = memroot(path, "verify", "--no-update", "-b", b, "--json")
    assert scoped.exit_code == 0, scoped.output
    assert json.loads(scoped.stdout)["branches"] == 2
    full = memroot(path, "verify", "--no-update", "--json")
    assert full.exit_code == 1
    findings = json.loads(full.stdout)["findings"]
    assert any(f["step"] == 9 and f["branch"] == sibling for f in findings)
    bad = memroot(path, "verify", "-b", "nope")
    assert bad.exit_code == 3 and "nope" in bad.stderr


def test_snapshot_and_roots_on_a_branch(path: Path):
    """A branch's first memory_root has the parent's root at the fork as its parent."""
    fact(path, [event(path)])
    main_root = ok(path, "snapshot")["memory_root"]
    b = branch(path)
    fact(path, [event(path, b)], b)
    snap = ok(path, "snapshot", "--branch", b)
    assert snap["branch"] == b and snap["parent"] == main_root
    chain = ok(path, "roots", "--branch", b)
    assert [r["memory_root"] for r in chain][:2] == [snap["memory_root"], main_root]


@pytest.mark.parametrize("command", ["merge", "divergence", "diff"])
def test_new_branch_commands_have_help_with_an_example(path: Path, command: str):
    """Every branch command documents itself with an Example: line."""
    result = memroot(path, "branch", command, "--help")
    assert result.exit_code == 0 and "Example:" in result.stdout
    docs = (Path(__file__).parents[2] / "docs" / "branches.md").read_text()
    assert f"branch {command}" in docs


def test_a_branch_created_with_max_events_2_refuses_the_third_append(path: Path) -> None:
    """Issue 16.2 scenario: `branch create --max-events 2`, then five appends: two land,
    the other three exit 3 naming the limit and the branch, and nothing of them is written;
    verify passes."""
    made = memroot(
        path, "branch", "create", "--type", "SIMULATION", "--purpose", "p", "--max-events", "2"
    )
    assert made.exit_code == 0, made.output
    b = made.stdout.strip()
    codes = []
    for i in range(5):
        obj = {
            "kind": "event",
            "stream": "s",
            "actor_id": "agent",
            "actor_type": "AI_AGENT",
            "role": "USER",
            "content": f"said {i}",
            "namespace_id": NS,
        }
        r = memroot(path, "append", "-b", b, json.dumps(obj))
        codes.append(r.exit_code)
        if r.exit_code:
            assert "max_events = 2" in r.stderr and repr(b) in r.stderr, r.output
    assert codes == [0, 0, 3, 3, 3]
    assert ok(path, "branch", "show", b)["size"] == 3
    assert memroot(path, "verify").exit_code == 0


def _tables(path: Path) -> dict[str, Any]:
    """A ledger file's state as an exporter and an importer must agree on it.

    Every table as its sorted rows, but for the memory model's tables (``mem_*``), whose
    surrogate row ids follow the order the entries were folded in (branch by branch on an
    import, interleaved live): those are compared by the memory model's own digest of each
    branch (what verify's step 9 compares). ``meta`` leaves out the signer's transient head
    checkpoints, which a bundle does not carry (it has the retained ones).
    """
    from memroot.projections.digest import state_digest

    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out: dict[str, Any] = {
            n: sorted(db.execute(f'SELECT * FROM "{n}"').fetchall(), key=repr)
            for n in names
            if not n.startswith("mem_")
        }
        out["meta"] = [r for r in out["meta"] if not r[0].startswith("transient_checkpoint/")]
        branches = [name for (name,) in db.execute("SELECT name FROM branches ORDER BY no")]
        out["memory digests"] = [state_digest(db, branch=b) for b in branches]
        return out
    finally:
        db.close()


def test_import_bundle_restores_every_layers_state(path: Path, tmp_path: Path):
    """A bundle of a ledger with forks, a merge, closed branches, conversation parents, git
    context and a falsification imports into a file whose derived state equals the
    exporter's: the branch registry, the conversation tree and the git index too, not only
    the memory model (only that, roots and states were replayed before, and the imported
    ledger listed no branch)."""
    b, mine, theirs = _pair(path)
    first = event(path, git="feature/x")
    event(path, parent=first, git="feature/x")
    nested = branch(path, "PLANNING", parent=b)
    fact(path, [event(path, nested)], nested)
    merged = ("branch", "merge", b, "--objects", mine, "--strategy", "PREFER_BRANCH")
    ok(path, *merged, "--actor", "admin")
    falsified = memroot(path, "falsify", theirs, "--reason", "wrong city", "--actor", "admin")
    assert falsified.exit_code == 0, falsified.output
    # Closed inner branch first, then its parent: the import folds each branch whole, main
    # first, so it meets both closes before the entries they came after.
    for closed in (nested, b):
        assert memroot(path, "branch", "close", closed, "--reason", "done").exit_code == 0
    event(path)
    assert memroot(path, "export", str(tmp_path / "bundle")).exit_code == 0
    vkey = str(ok(path, "vkey")["vkey"])
    copy = tmp_path / "copy.ledger"
    ok(copy, "import-bundle", str(tmp_path / "bundle"), "--vkey", vkey)
    before, after = _tables(path), _tables(copy)
    assert before["branch_meta"] and before["conv_parents"]
    assert before.keys() == after.keys()
    assert [n for n in before if before[n] != after[n]] == []
    listed = [r["branch_id"] for r in ok(path, "branch", "list")]
    assert [r["branch_id"] for r in ok(copy, "branch", "list")] == listed and len(listed) == 2
    assert ok(copy, "verify", "--vkey", vkey, "--no-update")["ok"]


@pytest.fixture
def rich(path: Path) -> Path:
    """A ledger whose branch registry, conversation tree and git index all hold rows."""
    b, mine, _ = _pair(path)
    first = event(path, git="feature/x")
    event(path, parent=first, git="feature/x")
    ok(path, "branch", "merge", b, "--objects", mine, "--actor", "admin")
    assert memroot(path, "branch", "close", branch(path), "--reason", "done").exit_code == 0
    return path


def _edit(path: Path, *statements: str) -> None:
    db = apsw.Connection(str(path))
    with db:
        for sql in statements:
            db.execute(sql)
            assert db.changes() >= 1, sql
    db.close()


_FORGED_BRANCH = (
    "INSERT INTO branch_meta SELECT 'ghost', parent, type, purpose, created_by, namespace_id, "
    "created_at, fork_size, max_age_days, max_events, max_storage_mb, on_expiry, state, "
    "closed_at, closed_reason, create_seq FROM branch_meta LIMIT 1"
)


def _step9(path: Path) -> list[str]:
    result = memroot(path, "verify", "--no-update", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == (0 if report["ok"] else 1)
    return [f["message"] for f in report["findings"] if f["step"] == 9]


def test_layer_tables_of_a_clean_ledger_replay_equal(rich: Path):
    """verify step 9 replays the registry, conversation tree and git index: no finding."""
    db = apsw.Connection(str(rich), flags=apsw.SQLITE_OPEN_READONLY)
    for table in ("branch_meta", "branch_merges", "conv_parents", "git_context"):
        assert db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table
    db.close()
    assert _step9(rich) == []
    # verify --branch covers some branches only: the check (which spans them) is not run
    report = ok(rich, "verify", "--no-update", "--branch", "main")
    assert report["ok"]


@pytest.mark.parametrize(
    ("attack", "statements", "table"),
    [
        (
            "branch_reopened",
            ["UPDATE branch_meta SET state = 'OPEN' WHERE state = 'CLOSED'"],
            "branch_meta",
        ),
        (
            "branch_purpose_rewritten",
            ["UPDATE branch_meta SET purpose = 'nothing to see'"],
            "branch_meta",
        ),
        (
            "branch_forged",
            [_FORGED_BRANCH],
            "branch_meta",
        ),
        ("merge_record_deleted", ["DELETE FROM branch_merges"], "branch_merges"),
        (
            "conversation_parent_rewritten",
            ["UPDATE conv_parents SET parent = NULL WHERE parent IS NOT NULL"],
            "conv_parents",
        ),
        (
            "conversation_link_deleted",
            ["DELETE FROM conv_parents WHERE id = (SELECT min(id) FROM conv_parents)"],
            "conv_parents",
        ),
        ("git_context_rewritten", ["UPDATE git_context SET git_branch = 'main'"], "git_context"),
    ],
)
def test_attack_on_a_layer_table_is_reported_by_verify(
    rich: Path, attack: str, statements: list[str], table: str
):
    """A derived row changed, forged or removed behind the ledger's back: step 9 names it."""
    _edit(rich, *statements)
    [finding] = _step9(rich)
    assert finding.startswith(f"{table} (") and "differs from a replay" in finding, attack


@pytest.mark.parametrize(
    ("attack", "statement"),
    [
        ("branch_purpose_rewritten", "UPDATE branch_meta SET purpose = 'nothing to see'"),
        ("branch_expiry_extended", "UPDATE branch_meta SET max_age_days = 3650"),
        ("branch_reparented", "UPDATE branch_meta SET parent = 'elsewhere'"),
        ("branch_forged", _FORGED_BRANCH),
        ("branch_create_seq_moved", "UPDATE branch_meta SET create_seq = create_seq - 1"),
    ],
)
def test_attack_on_the_branch_registry_is_refused_by_reads(rich: Path, attack: str, statement: str):
    """`branch list` and `branch show` refuse a registry row its BRANCH_CREATE did not make
    (exit 1, nothing of the data printed); --no-strict shows it; verify reports it."""
    shown = "ghost" if attack == "branch_forged" else ok(rich, "branch", "list")[0]["branch_id"]
    _edit(rich, statement)
    for args in (["branch", "list"], ["branch", "show", shown]):
        refused = memroot(rich, *args, "--json")
        assert refused.exit_code == 1, (attack, args, refused.output)
        assert "strict read refused" in refused.stderr and "step 9" in refused.stderr
        assert refused.stdout == ""
    assert ok(rich, "branch", "list", "--no-strict")
    assert _step9(rich)


def test_branch_state_edit_is_left_to_verify(rich: Path):
    """A reopened branch (state OPEN again) is not located by a read: verify reports it."""
    _edit(rich, "UPDATE branch_meta SET state = 'OPEN' WHERE state = 'CLOSED'")
    assert memroot(rich, "branch", "list").exit_code == 0
    [finding] = _step9(rich)
    assert finding.startswith("branch_meta (")


def test_rebuild_rederives_the_layer_tables(rich: Path):
    """`memroot rebuild` replays the branch registry, conversation tree and git index too:
    after an edit of each, rebuild restores what the entries say and verify holds again."""
    before = _tables(rich)
    _edit(
        rich,
        "UPDATE branch_meta SET state = 'OPEN', purpose = 'edited'",
        "DELETE FROM conv_parents WHERE id = (SELECT min(id) FROM conv_parents)",
        "UPDATE git_context SET git_branch = 'main'",
        "DELETE FROM branch_merges",
    )
    assert len(_step9(rich)) == 4
    done = ok(rich, "rebuild")
    layers = done["branches_conversation_git"]
    db = apsw.Connection(str(rich), flags=apsw.SQLITE_OPEN_READONLY)
    (stored,) = db.execute("SELECT count(*) FROM entries").fetchone()
    db.close()
    assert layers == {"entries": stored, "skipped": 0}
    assert _step9(rich) == []
    after = _tables(rich)
    assert [n for n in before if before[n] != after[n]] == []
