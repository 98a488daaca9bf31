"""The ledger commands of the ``memroot`` CLI, run through click on real files."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import COMMAND_MODULES, cli, load_all_commands
from memroot.ledger.entries import Entry, now_us
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.merkle import verify_consistency, verify_inclusion
from memroot.ledger.note import Verifier, open_checkpoint, parse_tlog_proof
from memroot.ledger.trust import TrustedState

ORIGIN = "example.org/cli-test"
README = Path(__file__).resolve().parents[2] / "README.md"

EVENT = {
    "kind": "event",
    "stream": "s1",
    "actor_id": "alice",
    "actor_type": "HUMAN_USER",
    "role": "USER",
    "content": "I take tea without sugar",
    "namespace_id": "alice",
}
OP = {
    "kind": "op",
    "op_type": "ENTITY_CREATE",
    "actor_id": "extractor",
    "actor_type": "AI_AGENT",
    "namespace_id": "alice",
    "payload": {"entity_type": "PERSON", "canonical_name": "Alice", "aliases": ["Al"]},
    "policy_version": "policy/1",
}


def run(args: list[str], *, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, args, input=input, catch_exceptions=False)


def memroot(ledger: Path, *args: str, input: str | None = None) -> Result:
    return run(["-l", str(ledger), *args], input=input)


def ok_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """A new ledger made with ``memroot init`` holding a few events and operations."""
    path = tmp_path / "agent.ledger"
    assert memroot(path, "init", "--origin", ORIGIN).exit_code == 0
    lines = [json.dumps({**EVENT, "content": f"message {i}"}) for i in range(6)]
    lines += [
        json.dumps({**OP, "payload": {**OP["payload"], "canonical_name": f"E{i}"}})
        for i in range(3)
    ]
    (tmp_path / "seed.jsonl").write_text("\n".join(lines) + "\n")
    assert memroot(path, "import", str(tmp_path / "seed.jsonl")).exit_code == 0
    return path


def size(path: Path) -> int:
    with Ledger.open(path) as led:
        return led.size()


# -- init --------------------------------------------------------------------------------------


def test_init_prints_vkey_not_private_key(tmp_path: Path) -> None:
    """init prints the vkey, writes the key file with mode 0600 and never prints the key."""
    path = tmp_path / "a.ledger"
    result = memroot(path, "init", "--origin", ORIGIN)
    assert result.exit_code == 0, result.output
    key_file = Path(f"{path}.key")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    secret = key_file.read_text().strip()
    assert secret.startswith("PRIVATE+KEY+")
    seed_b64 = secret.split("+", 4)[4]  # base64 may itself contain "+"
    with Ledger.open(path) as led:
        vkey = led.vkey()
    assert f"vkey: {vkey}" in result.stdout
    Verifier.from_vkey(vkey)
    data = ok_json(memroot(tmp_path / "b.ledger", "init", "--json"))
    assert data["vkey"].startswith("memroot.local/")
    for out in (result.output, json.dumps(data)):
        assert "PRIVATE" not in out and seed_b64 not in out


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    """A second init on the same path fails (exit 4) and leaves ledger and key untouched."""
    path = tmp_path / "a.ledger"
    assert memroot(path, "init").exit_code == 0
    before = (file_digest(path), file_digest(Path(f"{path}.key")))
    result = memroot(path, "init")
    assert result.exit_code == 4
    assert "refusing to overwrite" in result.stderr
    assert (file_digest(path), file_digest(Path(f"{path}.key"))) == before


def test_init_refuses_existing_key(tmp_path: Path) -> None:
    """init refuses (exit 5) when the key file already exists, and creates no ledger."""
    path = tmp_path / "a.ledger"
    key = tmp_path / "mine.key"
    key.write_text("keep me\n")
    result = memroot(path, "init", "--key", str(key))
    assert result.exit_code == 5
    assert "refusing to overwrite" in result.stderr
    assert not path.exists() and key.read_text() == "keep me\n"


# -- append ------------------------------------------------------------------------------------


def test_append_argument(ledger: Path) -> None:
    """append takes the JSON as an argument and prints the new seq and entry hash."""
    n = size(ledger)
    rows = ok_json(memroot(ledger, "append", json.dumps(EVENT), "--json"))
    assert len(rows) == 1 and rows[0]["seq"] == n and rows[0]["kind"] == "event"
    with Ledger.open(ledger) as led:
        assert led.entry(n).hash.hex() == rows[0]["entry_hash"]
        assert led.content(n) == EVENT["content"]
        assert led.entry(n).body["id"] == rows[0]["id"]


def test_append_stdin(ledger: Path) -> None:
    """append reads the JSON from stdin when no argument is given (human output)."""
    n = size(ledger)
    result = memroot(ledger, "append", input=json.dumps(OP))
    assert result.exit_code == 0, result.output
    seq, entry_hash, op_type, _ = result.stdout.strip().split("\t")
    with Ledger.open(ledger) as led:
        assert (int(seq), entry_hash, op_type) == (n, led.entry(n).hash.hex(), "ENTITY_CREATE")


def test_append_keeps_given_id_and_ts(ledger: Path) -> None:
    """An id and ts given in the JSON are the ones recorded."""
    given = {**EVENT, "id": "01890a5d-ac96-774b-bcce-b302099a8057", "ts": now_us() - 60_000_000}
    rows = ok_json(memroot(ledger, "append", json.dumps(given), "--json"))
    with Ledger.open(ledger) as led:
        e = led.entry(rows[0]["seq"])
    assert (e.body["id"], e.ts) == (given["id"], given["ts"])


BAD_INPUTS = {
    "not_json": ("{'kind': 'event'", "not valid JSON"),
    "not_an_object": ("[1, 2]", "JSON object"),
    "bad_kind": (json.dumps({**EVENT, "kind": "note"}), "kind"),
    "bad_actor_type": (json.dumps({**EVENT, "actor_type": "ROBOT"}), "actor_type"),
    "bad_role": (json.dumps({**EVENT, "role": "NARRATOR"}), "role"),
    "bad_op_type": (json.dumps({**OP, "op_type": "DELETE"}), "op_type"),
    "missing_stream": (json.dumps({k: v for k, v in EVENT.items() if k != "stream"}), "stream"),
    "missing_content": (json.dumps({k: v for k, v in EVENT.items() if k != "content"}), "content"),
    "missing_policy": (
        json.dumps({k: v for k, v in OP.items() if k != "policy_version"}),
        "policy_version",
    ),
    "unknown_field": (json.dumps({**EVENT, "colour": "red"}), "colour"),
    "bad_id": (json.dumps({**EVENT, "id": "not-a-uuid"}), "id"),
    "bad_ts": (json.dumps({**EVENT, "ts": -5}), "ts"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_append_refuses_bad_input(ledger: Path, case: str) -> None:
    """Bad JSON, a bad enumeration or a missing field: exit 3, the field named, nothing written."""
    text, named = BAD_INPUTS[case]
    before = size(ledger)
    for result in (memroot(ledger, "append", text), memroot(ledger, "append", input=text)):
        assert result.exit_code == 3, result.output
        assert result.stdout == ""
        assert result.stderr.startswith("error: ") and named in result.stderr
    assert size(ledger) == before


# -- import ------------------------------------------------------------------------------------


def jsonl(tmp_path: Path, lines: list[str], name: str = "in.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_import_jsonl(ledger: Path, tmp_path: Path) -> None:
    """import appends every line in order (blank lines skipped) and prints seq and hash."""
    lines = [json.dumps({**EVENT, "content": f"c{i}"}) for i in range(20)]
    lines.insert(7, "   ")
    lines.append(json.dumps(OP))
    start = size(ledger)
    rows = ok_json(memroot(ledger, "import", str(jsonl(tmp_path, lines)), "--json"))
    assert [r["seq"] for r in rows] == list(range(start, start + 21))
    with Ledger.open(ledger) as led:
        assert led.size() == start + 21
        assert [led.content(r["seq"]) for r in rows[:20]] == [f"c{i}" for i in range(20)]
        assert all(led.entry(r["seq"]).hash.hex() == r["entry_hash"] for r in rows)
    human = memroot(ledger, "import", str(jsonl(tmp_path, lines[:3], "b.jsonl")))
    assert human.exit_code == 0 and "imported 3 entries" in human.stdout


@pytest.mark.parametrize(
    ("bad", "named"),
    [("{not json", "not valid JSON"), (json.dumps({**EVENT, "role": "BOSS"}), "role")],
    ids=["json", "enum"],
)
def test_import_broken_line_writes_nothing(
    ledger: Path, tmp_path: Path, bad: str, named: str
) -> None:
    """A broken line N (after whole batches went in) names line N; the ledger is unchanged."""
    lines = [json.dumps({**EVENT, "content": f"c{i}"}) for i in range(40)]
    lines[26] = bad  # line 27, in the third batch of 10
    before = (size(ledger), ok_json(memroot(ledger, "log", "--json", "--limit", "1000")))
    result = memroot(ledger, "import", str(jsonl(tmp_path, lines)), "--batch-size", "10")
    assert result.exit_code == 3
    assert "line 27" in result.stderr and named in result.stderr
    assert result.stdout == ""
    assert (size(ledger), ok_json(memroot(ledger, "log", "--json", "--limit", "1000"))) == before


def test_import_invalid_utf8_writes_nothing(ledger: Path, tmp_path: Path) -> None:
    """A line that is not UTF-8 is refused naming its line (exit 3, no traceback), nothing lands."""
    path = tmp_path / "bad.jsonl"
    path.write_bytes(json.dumps(EVENT).encode() + b"\n" + b'{"kind": "\xff"}\n')
    before = size(ledger)
    result = memroot(ledger, "import", str(path))
    assert result.exit_code == 3
    assert "line 2" in result.stderr and "UTF-8" in result.stderr
    assert size(ledger) == before


def test_import_stdin(ledger: Path) -> None:
    """import - reads the JSON lines from stdin."""
    start = size(ledger)
    text = "\n".join(json.dumps({**EVENT, "content": f"s{i}"}) for i in range(3)) + "\n"
    rows = ok_json(memroot(ledger, "import", "-", "--json", input=text))
    assert [r["seq"] for r in rows] == [start, start + 1, start + 2]


def test_import_no_progress_bar_off_a_terminal(ledger: Path, tmp_path: Path) -> None:
    """A large import (above the progress threshold) draws nothing when stderr is no terminal."""
    rng = random.Random(3)
    lines = [
        json.dumps({**EVENT, "content": f"m{i}", "role": rng.choice(["USER", "ASSISTANT"])})
        for i in range(10_001)
    ]
    start = size(ledger)
    result = memroot(ledger, "import", str(jsonl(tmp_path, lines)))
    assert result.exit_code == 0
    assert result.stderr == ""
    assert result.stdout.startswith("imported 10001 entries")
    with Ledger.open(ledger) as led:  # (plus the memory layer's automatic snapshots)
        assert sum(e.kind.value == "event" for e in led.entries(start)) == 10_001


# -- reading -----------------------------------------------------------------------------------


def test_log(ledger: Path) -> None:
    """log lists entries with seq, hash, type and id, from --start for --limit entries."""
    rows = ok_json(memroot(ledger, "log", "--json", "--start", "2", "--limit", "4"))
    with Ledger.open(ledger) as led:
        want = list(led.entries(2, 6))
    assert [r["seq"] for r in rows] == [2, 3, 4, 5]
    assert [r["entry_hash"] for r in rows] == [e.hash.hex() for e in want]
    assert [r["type"] for r in rows] == [e.type for e in want]
    human = memroot(ledger, "log")
    assert human.exit_code == 0
    assert len(human.stdout.strip().splitlines()) == size(ledger)
    assert human.stdout.splitlines()[0].split("\t")[3] == "GENESIS"


def test_show_json(ledger: Path) -> None:
    """show --json gives entry_hash in hex and entry_cbor in base64 whose leaf hash it is."""
    data = ok_json(memroot(ledger, "show", "1", "--json"))
    raw = base64.b64decode(data["entry_cbor"], validate=True)
    assert leaf_hash(raw).hex() == data["entry_hash"]
    entry = Entry.from_bytes(raw)
    assert (entry.seq, entry.kind.value, data["content"]) == (1, "event", "message 0")
    assert data["body"]["content_commitment"] == entry.body["content_commitment"].hex()
    assert data["prev"] == entry.prev.hex() and data["erased_by"] is None
    genesis = ok_json(memroot(ledger, "show", "0", "--json"))
    assert base64.b64decode(genesis["entry_cbor"])[4:36] == bytes(32)


def test_show_missing_entry(ledger: Path) -> None:
    """show of a seq past the end is refused (exit 3) with a message."""
    result = memroot(ledger, "show", str(size(ledger)))
    assert result.exit_code == 3 and "no entry" in result.stderr


# -- checkpoints, keys and proofs ------------------------------------------------------------------


def test_checkpoint_opens_with_vkey(ledger: Path) -> None:
    """checkpoint prints a signed note that verifies under the key `memroot vkey` prints."""
    vkey = ok_json(memroot(ledger, "vkey", "--json"))["vkey"]
    assert memroot(ledger, "vkey").stdout.strip() == vkey
    result = memroot(ledger, "checkpoint")
    assert result.exit_code == 0
    signed = open_checkpoint(result.stdout, [Verifier.from_vkey(vkey)], origin=ORIGIN)
    with Ledger.open(ledger) as led:
        assert signed.checkpoint.size == led.size()
        assert signed.checkpoint.root == led.root()
    again = ok_json(memroot(ledger, "checkpoint", "--json"))
    assert again["note"] == result.stdout  # nothing new to sign: the same note
    assert again["size"] == size(ledger) and again["root"] == signed.checkpoint.root.hex()


def test_prove_index(ledger: Path) -> None:
    """prove --index prints a tlog-proof@v1 that verifies against its signed checkpoint."""
    vkey = memroot(ledger, "vkey").stdout.strip()
    n = size(ledger)
    for index in (0, 3, n - 1):
        text = memroot(ledger, "prove", "--index", str(index)).stdout
        proof = parse_tlog_proof(text)
        cp = open_checkpoint(proof.checkpoint_note, [Verifier.from_vkey(vkey)]).checkpoint
        assert (proof.index, cp.size) == (index, n)
        raw = base64.b64decode(ok_json(memroot(ledger, "show", str(index), "--json"))["entry_cbor"])
        verify_inclusion(leaf_hash(raw), index, cp.size, list(proof.proof), cp.root)
    # against an older signed checkpoint, chosen with --size: one asked for is kept (a head
    # checkpoint that no retention rule keeps is dropped when the next append is sealed)
    memroot(ledger, "checkpoint")
    memroot(ledger, "append", json.dumps(EVENT))
    proof = parse_tlog_proof(memroot(ledger, "prove", "--index", "2", "--size", str(n)).stdout)
    cp = open_checkpoint(proof.checkpoint_note, [Verifier.from_vkey(vkey)]).checkpoint
    assert cp.size == n
    with Ledger.open(ledger) as led:
        verify_inclusion(led.entry(2).hash, 2, n, list(proof.proof), cp.root)
    data = ok_json(memroot(ledger, "prove", "--index", "2", "--json"))
    assert parse_tlog_proof(data["tlog_proof"]).index == 2


def test_prove_index_refusals(ledger: Path) -> None:
    """An index outside the tree or a size with no signed checkpoint is refused (exit 3)."""
    n = size(ledger)
    assert memroot(ledger, "prove", "--index", str(n)).exit_code == 3
    assert memroot(ledger, "prove", "--index", "1", "--size", "3").exit_code == 3
    assert memroot(ledger, "prove").exit_code == 2  # neither --index nor --consistency


def test_prove_consistency_json(ledger: Path) -> None:
    """prove --consistency N1 N2 --json gives sizes, roots and a proof that verifies."""
    n = size(ledger)
    for n1, n2 in ((1, n), (3, 7), (4, n), (n, n)):
        data = ok_json(memroot(ledger, "prove", "--consistency", str(n1), str(n2), "--json"))
        assert (data["size1"], data["size2"]) == (n1, n2)
        root1, root2 = (base64.b64decode(data[k], validate=True) for k in ("root1", "root2"))
        proof = [base64.b64decode(h, validate=True) for h in data["proof"]]
        verify_consistency(n1, n2, proof, root1, root2)
        with Ledger.open(ledger) as led:
            assert (root1, root2) == (led.root(n1), led.root(n2))
    assert memroot(ledger, "prove", "--consistency", "5", "3").exit_code == 3


# -- verify ------------------------------------------------------------------------------------


def test_verify_json(ledger: Path, trusted: Path) -> None:
    """verify --json: exit 0, every ledger step checked, and the checkpoint remembered."""
    memroot(ledger, "checkpoint")
    data = ok_json(memroot(ledger, "verify", "--json"))  # MEMROOT_TRUSTED is the default
    assert data["ok"] is True and data["findings"] == []
    assert data["entries"] == size(ledger) and data["branches"] == 1
    for step in (1, 2, 3, 4, 5, 6, 10):
        assert data["steps"][str(step)] == {
            "what": data["steps"][str(step)]["what"],
            "checked": True,
            "violations": 0,
        }
    assert data["trusted"]["keys"] == "genesis (trust on first use)"
    remembered = TrustedState(trusted).get(ORIGIN)
    assert remembered is not None and remembered.size == size(ledger)
    again = ok_json(memroot(ledger, "verify", "--json"))
    assert again["trusted"]["keys"] == "trusted state"
    human = memroot(ledger, "verify")
    assert human.exit_code == 0 and "OK: every step holds" in human.stdout


def test_verify_no_update_keeps_trusted_state(ledger: Path, trusted: Path) -> None:
    """verify --no-update and --trusted FILE: the given file is used and left unwritten."""
    other = trusted.parent / "other.json"
    ok_json(memroot(ledger, "verify", "--json", "--no-update", "--trusted", str(other)))
    assert not other.exists() and not trusted.exists()


# -- errors and help ---------------------------------------------------------------------------


def test_no_ledger_given_is_usage_error(tmp_path: Path) -> None:
    """A command without -l and without MEMROOT_LEDGER is a usage error (exit 2)."""
    result = run(["log"])
    assert result.exit_code == 2 and "MEMROOT_LEDGER" in result.stderr


def test_missing_ledger_file_is_storage_error(tmp_path: Path) -> None:
    """A ledger path that does not exist fails with exit 4 and a hint, and is not created."""
    path = tmp_path / "nope.ledger"
    result = memroot(path, "log")
    assert result.exit_code == 4 and "memroot init" in result.stderr
    assert not path.exists()


def test_ledger_from_environment(ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MEMROOT_LEDGER names the ledger when -l is not given."""
    monkeypatch.setenv("MEMROOT_LEDGER", str(ledger))
    assert len(ok_json(run(["log", "--json"]))) == size(ledger)


def all_commands() -> list[tuple[str, ...]]:
    """Every command path of the CLI, groups included, e.g. ("prove",), ("branch", "create")."""
    out: list[tuple[str, ...]] = []

    def walk(group: click.Group, prefix: tuple[str, ...]) -> None:
        for name, cmd in sorted(group.commands.items()):
            out.append((*prefix, name))
            if isinstance(cmd, click.Group):
                walk(cmd, (*prefix, name))

    load_all_commands()
    walk(cli, ())
    return out


def test_every_command_is_loaded_on_demand_from_its_module() -> None:
    """COMMAND_MODULES names every registered command's module, and nothing else.

    A command registered by a module the map does not name would be missing from a CLI call
    that has not imported that module; one the map names that no module registers would fail
    on use.
    """
    load_all_commands()
    registered = {
        name: cmd.callback.__module__ for name, cmd in cli.commands.items() if cmd.callback
    }
    assert {n: f"memroot.cli.{m}" for n, m in COMMAND_MODULES.items()} == registered


def test_a_cli_call_imports_only_its_own_command_module() -> None:
    """`memroot --version` imports no command module; `--help` still lists every command."""
    code = (
        "import sys\n"
        "from memroot.cli.main import main\n"
        "sys.argv = ['memroot', '--version']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('memroot.cli.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = out.strip().splitlines()[-1]
    for module in set(COMMAND_MODULES.values()):
        assert f"'memroot.cli.{module}'" not in loaded
    listed = CliRunner().invoke(cli, ["--help"], catch_exceptions=False).output
    for name in COMMAND_MODULES:
        assert name in listed


LEDGER_COMMANDS = {
    "init",
    "append",
    "import",
    "log",
    "show",
    "checkpoint",
    "vkey",
    "prove",
    "verify",
}


def test_ledger_commands_exist() -> None:
    """The command names other checks rely on are registered."""
    assert {p[0] for p in all_commands()} >= LEDGER_COMMANDS


@pytest.mark.parametrize("path", all_commands(), ids=" ".join)
def test_every_command_has_help_with_example(path: tuple[str, ...]) -> None:
    """Every command answers --help with a description and an `Example:` line."""
    result = run([*path, "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.stdout, f"memroot {' '.join(path)} --help has no Example: line"
    if path[0] in LEDGER_COMMANDS:
        assert "--json" in result.stdout


@pytest.mark.parametrize("path", [(), *all_commands()], ids=lambda p: " ".join(p) or "memroot")
def test_every_command_lists_the_ledger_option(path: tuple[str, ...]) -> None:
    """Every command and group, the root included, lists -l/--ledger in its --help."""
    result = run([*path, "--help"])
    assert result.exit_code == 0
    assert "-l, --ledger PATH" in result.stdout
    assert "MEMROOT_LEDGER" in result.stdout


@pytest.mark.parametrize("path", all_commands(), ids=" ".join)
def test_every_command_documented_in_readme(path: tuple[str, ...]) -> None:
    """Every command is shown in README.md as `memroot <command>`."""
    assert f"memroot {' '.join(path)}" in README.read_text(encoding="utf-8")


def test_key_file_mode_is_kept_private_after_init(tmp_path: Path) -> None:
    """The key file created by init has no group or other permission bits, whatever the umask."""
    old = os.umask(0)
    try:
        path = tmp_path / "open-umask.ledger"
        assert memroot(path, "init").exit_code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(Path(f"{path}.key").stat().st_mode) == 0o600
