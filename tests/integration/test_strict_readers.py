"""Every read command of the CLI reads strictly: a tampered ledger prints nothing and exits 1.

One story ledger holds what each reader serves (events, ASSERTs, two memory roots, a
SelfModel, a branch with its own ASSERT, a read receipt). Each read command must work on the
untouched copy (so a test cannot pass because a reader always fails), then:

- **head**: the newest entry of main is rewritten (no key, caches left as they were): every
  read command refuses at open;
- **served**: the entry the command serves is rewritten (the tree nodes and the head left
  alone, so only a strict read of that entry notices): the command refuses it;
- ``--no-strict`` reads both and says so on stderr.

And every read command of the CLI tree offers ``--no-strict`` in its help.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import click
import pytest
from click.testing import CliRunner, Result

import memroot
from memroot.cli.main import cli, load_all_commands
from memroot.ledger import encoding
from memroot.ledger.backends.store import entry_key, node_key

ORIGIN = "example.org/strict-readers"
MAIN_NO = 1


def run(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def ok(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The story ledger and what names its parts (ids, roots, branch, seqs)."""
    path = tmp_path_factory.mktemp("golden") / "agent.ledger"
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        said = mem.record(content="I take my tea without sugar")
        tea = mem.remember("Alice takes tea without sugar", evidence=[said.id])
        first = mem.snapshot().record
        mem.record(content="and coffee in the morning")
        second = mem.snapshot().record
        mem.recall(text="tea", receipt="run-1")
    model = path.parent / "model.json"
    model.write_text(
        json.dumps(
            {
                "agent_id": "agent-7",
                "identity": {"name": "helper"},
                "capabilities": [{"name": "tea", "claim": "remembers tea", "evidence": []}],
            }
        )
    )
    sm = ok(run(path, "selfmodel", "record", str(model), "--json"))
    made = ok(run(path, "branch", "create", "--type", "SIMULATION", "--purpose", "p", "--json"))
    br = made["branch_id"]
    ev = ok(
        run(
            path,
            "append",
            "--branch",
            br,
            "--json",
            json.dumps(
                {
                    "kind": "event",
                    "stream": "s",
                    "actor_id": "alice",
                    "actor_type": "HUMAN_USER",
                    "role": "USER",
                    "content": "what if tea had sugar",
                    "namespace_id": "alice",
                }
            ),
        )
    )[0]
    ok(
        run(
            path,
            "append",
            "--branch",
            br,
            "--json",
            json.dumps(
                {
                    "kind": "op",
                    "op_type": "ASSERT",
                    "actor_id": "agent-7",
                    "actor_type": "AI_AGENT",
                    "namespace_id": "alice",
                    "policy_version": "policy/1",
                    "payload": {
                        "object_type": "PREFERENCE",
                        "epistemic_type": "HYPOTHETICAL",
                        "source_type": "SYSTEM_INFERRED",
                        "evidence_ids": [ev["id"]],
                        "value": "Alice might like sugar",
                        "confidence": None,
                        "salience": 0.5,
                    },
                }
            ),
        )
    )
    receipts = ok(run(path, "receipts", "--json"))
    ids = {
        "tea": tea.id,
        "root1": first.root.hex(),
        "root1_seq": first.seq,
        "root2": second.root.hex(),
        "root2_seq": second.seq,
        "selfmodel_seq": sm["seq"],
        "branch": br,
        "receipt_seq": receipts[0]["seq"],
        "tiles": str(path.parent / "tiles-unused"),
    }
    return path, ids


@pytest.fixture
def story(tmp_path: Path, golden: tuple[Path, dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    """A private copy of the story ledger (file and key)."""
    src, ids = golden
    dst = tmp_path / "agent.ledger"
    shutil.copy2(src, dst)
    shutil.copy2(f"{src}.key", f"{dst}.key")
    return dst, {**ids, "tiles": str(tmp_path / "tiles")}


# -- tampering (with disk access, without the key) ---------------------------------------------


def _branch_no(db: apsw.Connection, name: str) -> int:
    return int(db.execute("SELECT no FROM branches WHERE name = ?", (name,)).fetchone()[0])


def rewrite_entry(path: Path, seq: int, branch: str = "main") -> None:
    """Change one field of an entry's body in place; hashes, nodes and head left alone."""
    db = apsw.Connection(str(path))
    try:
        with db:
            k = entry_key(_branch_no(db, branch), seq)
            (data,) = db.execute("SELECT data FROM entries WHERE k = ?", (k,)).fetchone()
            v, prev, s, b, ts, kind, type_, body = encoding.decode(bytes(data))
            body = {**body, "actor_id": "mallory"}
            new = encoding.encode([v, prev, s, b, ts, kind, type_, body])
            db.execute("UPDATE entries SET data = ? WHERE k = ?", (new, k))
    finally:
        db.close()


def last_seq(path: Path, branch: str = "main") -> int:
    db = apsw.Connection(str(path))
    try:
        (size,) = db.execute("SELECT size FROM branches WHERE name = ?", (branch,)).fetchone()
    finally:
        db.close()
    return int(size) - 1


def corrupt_node(path: Path, level: int, index: int) -> None:
    """Overwrite one stored tree node of main (its entries untouched)."""
    db = apsw.Connection(str(path))
    try:
        with db:
            db.execute(
                "UPDATE nodes SET h = ? WHERE k = ?",
                (b"\x66" * 32, node_key(MAIN_NO, level, index)),
            )
            assert db.changes() == 1
    finally:
        db.close()


def corrupt_leaf_cache(path: Path, seq: int) -> None:
    """Overwrite the stored leaf hash of entry ``seq`` of main (its bytes untouched)."""
    db = apsw.Connection(str(path))
    try:
        with db:
            db.execute(
                "UPDATE entries SET hash = ? WHERE k = ?",
                (b"\x66" * 32, entry_key(MAIN_NO, seq)),
            )
            assert db.changes() == 1
    finally:
        db.close()


# -- the read commands ---------------------------------------------------------------------------

Args = Callable[[dict[str, Any]], list[str]]
Tamper = Callable[[Path, dict[str, Any]], None]

READERS: dict[str, tuple[Args, Tamper | None]] = {
    # name: (arguments, the tampering of what this command serves)
    "roots": (lambda i: ["roots"], lambda p, i: rewrite_entry(p, i["root2_seq"])),
    "root show": (
        lambda i: ["root", "show", i["root1"]],
        lambda p, i: rewrite_entry(p, i["root1_seq"]),
    ),
    "root diff": (
        lambda i: ["root", "diff", i["root1"], i["root2"]],
        lambda p, i: rewrite_entry(p, i["root2_seq"]),
    ),
    "why (root)": (lambda i: ["why", i["root1"]], lambda p, i: rewrite_entry(p, i["root1_seq"])),
    "selfmodel show": (
        lambda i: ["selfmodel", "show"],
        lambda p, i: rewrite_entry(p, i["selfmodel_seq"]),
    ),
    "branch list": (
        lambda i: ["branch", "list"],
        lambda p, i: rewrite_entry(p, last_seq(p, i["branch"]), i["branch"]),
    ),
    "branch show": (
        lambda i: ["branch", "show", i["branch"]],
        lambda p, i: rewrite_entry(p, last_seq(p, i["branch"]), i["branch"]),
    ),
    "branch divergence": (
        lambda i: ["branch", "divergence", i["branch"]],
        lambda p, i: rewrite_entry(p, last_seq(p, i["branch"]), i["branch"]),
    ),
    "branch diff": (
        lambda i: ["branch", "diff", i["branch"]],
        lambda p, i: rewrite_entry(p, last_seq(p, i["branch"]), i["branch"]),
    ),
    # A stored tree node on the printed path (level 2: leaves 4-7), off the head's path.
    "prove --index": (lambda i: ["prove", "--index", "1"], lambda p, i: corrupt_node(p, 2, 1)),
    "prove --consistency": (
        lambda i: ["prove", "--consistency", "2", "8"],
        lambda p, i: corrupt_node(p, 2, 1),
    ),
    # A level-1 node of the path is not stored (FORMAT.md 4): it is folded from the leaf
    # hashes of entries 2-3, and a rewritten one of those is refused as the node was.
    "prove --index, leaf cache": (
        lambda i: ["prove", "--index", "1"],
        lambda p, i: corrupt_leaf_cache(p, 3),
    ),
    "prove --consistency, leaf cache": (
        lambda i: ["prove", "--consistency", "2", "4"],
        lambda p, i: corrupt_leaf_cache(p, 3),
    ),
    "tiles": (lambda i: ["tiles", i["tiles"]], lambda p, i: rewrite_entry(p, 1)),
    "receipts": (lambda i: ["receipts"], lambda p, i: rewrite_entry(p, i["receipt_seq"])),
    "log": (lambda i: ["log", "--limit", "1000"], lambda p, i: rewrite_entry(p, 1)),
    "show": (lambda i: ["show", "1"], lambda p, i: rewrite_entry(p, 1)),
    "query": (lambda i: ["query"], lambda p, i: rewrite_entry(p, 2)),
    "why (object)": (lambda i: ["why", i["tea"]], lambda p, i: rewrite_entry(p, 2)),
}


def _refused(result: Result) -> None:
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert "strict read refused" in result.stderr
    assert "Traceback" not in result.stderr
    assert "mallory" not in result.output


@pytest.mark.parametrize("name", sorted(READERS))
def test_reader_refuses_a_rewritten_head_and_reads_it_with_no_strict(
    name: str, story: tuple[Path, dict[str, Any]]
) -> None:
    path, ids = story
    args = READERS[name][0](ids)
    assert run(path, *args, "--json").exit_code == 0  # the untouched ledger reads
    shutil.rmtree(ids["tiles"], ignore_errors=True)
    rewrite_entry(path, last_seq(path))
    _refused(run(path, *args, "--json"))
    assert not Path(ids["tiles"]).exists()  # tiles: nothing written
    forensic = run(path, *args, "--no-strict", "--json")
    # tiles recomputes the tree it publishes anyway: it refuses (exit 3) even then.
    assert forensic.exit_code == (3 if name == "tiles" else 0), forensic.output
    assert "--no-strict" in forensic.stderr and "NOT checked" in forensic.stderr


@pytest.mark.parametrize("name", sorted(READERS))
def test_reader_refuses_the_entry_it_serves_rewritten(
    name: str, story: tuple[Path, dict[str, Any]]
) -> None:
    path, ids = story
    args, tamper = READERS[name]
    assert tamper is not None
    assert run(path, *args(ids), "--json").exit_code == 0
    shutil.rmtree(ids["tiles"], ignore_errors=True)
    tamper(path, ids)
    _refused(run(path, *args(ids), "--json"))
    assert not Path(ids["tiles"]).exists()
    forensic = run(path, *args(ids), "--no-strict", "--json")
    # Forensics reads on; a command with checks of its own (tiles, why's proofs) may still
    # refuse, never with a traceback.
    assert forensic.exit_code in (0, 1, 3), forensic.output
    assert "Traceback" not in forensic.stderr
    assert run(path, "verify").exit_code == 1  # and verify reports it too


def test_witness_list_refuses_a_rewritten_head(story: tuple[Path, dict[str, Any]]) -> None:
    """`witness list` serves no entry, but it reads the ledger: the head is checked first."""
    path, _ = story
    assert ok(run(path, "witness", "list", "--json")) == []
    rewrite_entry(path, last_seq(path))
    _refused(run(path, "witness", "list", "--json"))
    forensic = run(path, "witness", "list", "--no-strict", "--json")
    assert forensic.exit_code == 0 and "NOT checked" in forensic.stderr


def test_no_strict_reads_the_served_tampering(story: tuple[Path, dict[str, Any]]) -> None:
    """--no-strict serves what is on disk (forensics): the rewritten SNAPSHOT's roots list."""
    path, ids = story
    rewrite_entry(path, ids["root2_seq"])
    listed = ok(run(path, "roots", "--no-strict", "--json"))
    assert {r["memory_root"] for r in listed} >= {ids["root1"], ids["root2"]}


def test_a_derived_root_row_edited_is_refused(story: tuple[Path, dict[str, Any]]) -> None:
    """A root's high-water hash edited in the derived table: refused at step 9."""
    path, ids = story
    db = apsw.Connection(str(path))
    try:
        with db:
            db.execute(
                "UPDATE memory_roots SET hw_hash = ? WHERE root = ?",
                (b"\x01" * 32, bytes.fromhex(ids["root1"])),
            )
            assert db.changes() == 1
    finally:
        db.close()
    result = run(path, "root", "show", ids["root1"], "--json")
    _refused(result)
    assert "step 9" in result.stderr
    assert run(path, "root", "show", ids["root1"], "--no-strict", "--json").exit_code == 0


# -- prove --size --------------------------------------------------------------------------------


def test_prove_size_names_the_kept_sizes(story: tuple[Path, dict[str, Any]]) -> None:
    """A size no kept checkpoint has is refused (exit 3), naming the kept ones; they work."""
    path, _ = story
    cp = ok(run(path, "checkpoint", "--json"))
    result = run(path, "prove", "--index", "1", "--size", "3")
    assert result.exit_code == 3 and result.stdout == ""
    assert "kept sizes" in result.stderr and str(cp["size"]) in result.stderr
    assert "--consistency 3" in result.stderr
    good = run(path, "prove", "--index", "1", "--size", str(cp["size"]))
    assert good.exit_code == 0 and good.stdout.startswith("c2sp.org/tlog-proof@v1")


# -- every read command offers --no-strict --------------------------------------------------------

# Commands that write, only verify (they read a damaged ledger to report on it), or read no
# ledger data; each is named, so a new command must be classified.
NOT_READERS = {
    "append",
    "audit",
    "bench",
    "branch archive",
    "branch close",
    "branch create",
    "branch discard",
    "branch merge",
    "cascade",
    "checkpoint",
    "demo",
    "falsify",
    "gc",
    "import",
    "import-bundle",
    "init",
    "mark-stale",
    "rebuild",
    "restore",
    "rotate-key",
    "selfmodel record",
    "snapshot",
    "verify",
    "key add",
    "key revoke",
    "mcp token add",  # the MCP server's token file: no ledger data
    "mcp token list",
    "mcp token revoke",
    "witness add",
    "witness follow",
    "witness init",
    "witness log-vkey",
    "witness remove",
    "witness serve",
    "witness submit",
}
# Commands that read strictly with no forensics mode: the MCP server serves an agent, which must
# never be handed unchecked memory; publish writes a public directory, which must never hold
# unchecked entries (it recomputes the signed root before writing a file).
# vkey and key list print keys read from the ledger strictly (the key entries proven in the
# signed tree): keys an auditor is handed must never come from unchecked rows.
STRICT_ONLY = {"mcp", "publish", "vkey", "key list"}


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    for name, cmd in group.commands.items():
        full = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            out.update(_commands(cmd, full + " "))
            if cmd.invoke_without_command:  # a group that is a command too (`memroot mcp`)
                out[full] = cmd
        else:
            out[full] = cmd
    return out


def test_every_read_command_lists_no_strict_in_its_help() -> None:
    load_all_commands()
    commands = _commands(cli)
    readers = sorted(set(commands) - NOT_READERS - STRICT_ONLY)
    assert {"roots", "root show", "branch list", "prove", "tiles", "receipts", "report"} <= set(
        readers
    )
    missing = []
    for name in readers:
        result = CliRunner().invoke(cli, [*name.split(), "--help"])
        assert result.exit_code == 0, result.output
        if "--no-strict" not in result.stdout:
            missing.append(name)
    assert missing == []
    assert set(commands) >= (NOT_READERS | STRICT_ONLY)  # the lists name real commands
