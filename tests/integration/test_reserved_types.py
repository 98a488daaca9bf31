"""Every operation type memroot writes itself is refused from callers (issue 23 point 6).

The types are not a hand list: a scripted session runs every feature through the CLI and the
facade (memory, roots, SelfModel, falsification, cascade, restore, branches, merge, policy,
key rotation, read receipts, erasure), and the entries it wrote are read back. Every type in
``RESERVED_OPS`` (the one registry memroot's writers must use, ``_library_op``) must occur
there, so a reserved type with no writer in the session fails this test; each is then refused
through ``memroot append``, ``memroot import`` and the facade's ``record``, exit 3 with the
command that writes it, nothing written, ``verify`` still OK. And every type the session
wrote, reserved or not, is appended again by a caller (its own payload, and an empty one):
refused or accepted, ``verify`` passes after, so no caller can plant a record that fails
every later audit (a READ_RECEIPT did).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import memroot
from memroot.cli.main import cli
from memroot.ledger.entries import RESERVED_OPS, Kind
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType

ORIGIN = "example.org/reserved-session"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "events.jsonl"


def memroot_cli(ledger: Path, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["-l", str(ledger), *args], input=stdin, catch_exceptions=False)


def ok(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if result.stdout.lstrip().startswith(("{", "[")) else None


def as_caller(body: dict[str, Any], payload: Any = None) -> dict[str, Any]:
    """The JSON a caller would append to write ``body``'s operation again."""
    fields = ("op_type", "actor_id", "actor_type", "namespace_id", "policy_version")
    op = {"kind": "op", **{k: body[k] for k in fields if k in body}}
    op["op_type"] = body.get("op_type", body.get("type"))
    for k in ("target_id", "target_type"):
        if body.get(k) is not None:
            op[k] = body[k]
    op["payload"] = body.get("payload", {}) if payload is None else payload
    return op


def _json_safe(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def scripted_session(tmp: Path) -> Path:
    """Run every feature that writes memroot's own records; return the ledger."""
    led = tmp / "session.ledger"
    ok(memroot_cli(led, "init", "--origin", ORIGIN))
    ok(memroot_cli(led, "import", str(EXAMPLES)))
    objects = ok(memroot_cli(led, "query", "--json"))
    oid = objects[0]["id"]
    ok(memroot_cli(led, "snapshot"))
    model = tmp / "agent.json"
    model.write_text(
        json.dumps({"agent_id": "agent-7", "identity": {"name": "agent-7"}, "capabilities": []})
    )
    ok(memroot_cli(led, "selfmodel", "record", str(model)))
    ok(memroot_cli(led, "falsify", oid, "--reason", "wrong"))
    ok(memroot_cli(led, "cascade", oid))
    ok(memroot_cli(led, "restore", oid, "--reason", "right after all"))
    branch = ok(
        memroot_cli(led, "branch", "create", "--type", "PLANNING", "--purpose", "p", "--json")
    )
    b = branch["branch_id"]
    assertion = {
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
            "evidence_ids": ["01900000-0000-7000-8000-0000000000a3"],
            "value": "Bob helps with the Q3 report",
            "confidence": None,
            "salience": 0.5,
        },
    }
    ok(memroot_cli(led, "append", "-b", b, json.dumps(assertion)))
    on_branch = [
        o["id"] for o in ok(memroot_cli(led, "query", "-b", b, "--json")) if o["branch"] == b
    ]
    ok(memroot_cli(led, "branch", "merge", b, "--objects", ",".join(on_branch)))
    ok(memroot_cli(led, "branch", "close", b, "--reason", "merged"))
    from memroot.memory_root.branches import set_branch_policy

    with memroot.open(led) as mem:
        set_branch_policy(mem.ledger, "alice", {"SANDBOX": 7}, actor_id="alice")
        mem.recall(text="tea", receipt="run-1")
    ok(memroot_cli(led, "key", "add", "--name", "host-b", "--out", str(tmp / "host-b.key")))
    ok(memroot_cli(led, "key", "revoke", "host-b"))
    ok(memroot_cli(led, "rotate-key"))
    return led


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The session's ledger and, per operation type it wrote, one entry body of that type."""
    tmp = tmp_path_factory.mktemp("reserved")
    # Module-scoped, so conftest's per-test MEMROOT_TRUSTED is not in force here: without its
    # own file the session would record (and the next run check) the user-wide trusted state,
    # where the same origin with another genesis key is a rollback/fork.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMROOT_TRUSTED", str(tmp / "trusted.json"))
        led = scripted_session(tmp)
    written: dict[str, dict[str, Any]] = {}
    with Ledger.open(led, readonly=True) as ledger:
        for branch in ledger.store.branches():
            for e in ledger.entries(branch=branch.name):
                if e.kind is Kind.OP:
                    written.setdefault(str(e.type), {**e.body, "op_type": e.type})
    return led, written


def verify_ok(led: Path) -> None:
    result = memroot_cli(led, "verify", "--no-update", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True


def size(led: Path) -> int:
    with Ledger.open(led, readonly=True) as ledger:
        return sum(b.size for b in ledger.store.branches())


def test_the_session_writes_every_reserved_type(session: tuple[Path, dict[str, Any]]) -> None:
    """Each reserved type has a writer the session ran (INTEGRITY_CHECK has none yet)."""
    led, written = session
    assert OpType.READ_RECEIPT.value in written
    assert set(RESERVED_OPS) - set(written) <= {OpType.INTEGRITY_CHECK.value, "MERGE_OVERRIDE"}
    verify_ok(led)


@pytest.mark.parametrize("op_type", sorted(RESERVED_OPS))
def test_reserved_type_is_refused_from_callers(
    session: tuple[Path, dict[str, dict[str, Any]]], tmp_path: Path, op_type: str
) -> None:
    """append, import and the facade's record refuse a reserved type: exit 3, nothing written."""
    src, written = session
    led = tmp_path / "copy.ledger"
    led.write_bytes(src.read_bytes())
    (tmp_path / "copy.ledger.key").write_bytes(Path(f"{src}.key").read_bytes())
    (tmp_path / "copy.ledger.key").chmod(0o600)
    body = written.get(op_type) or {
        "op_type": op_type,
        "actor_id": "mallory",
        "actor_type": "HUMAN_USER",
        "namespace_id": "ns",
        "policy_version": "p/1",
        "payload": {},
    }
    before = size(led)
    for payload in (_json_safe(body.get("payload", {})), {}):
        line = json.dumps(as_caller(body, payload))
        appended = memroot_cli(led, "append", line)
        assert appended.exit_code == 3, appended.output
        assert f"{op_type} is" in appended.stderr and "only by" in appended.stderr
        assert "Traceback" not in appended.output
        jsonl = tmp_path / "forged.jsonl"
        jsonl.write_text(line + "\n")
        imported = memroot_cli(led, "import", str(jsonl))
        assert imported.exit_code == 3 and "only by" in imported.stderr
        with memroot.open(led) as mem, pytest.raises(RefusedError, match=f"{op_type} is .*only by"):
            mem.record(as_caller(body, payload))
    assert size(led) == before
    verify_ok(led)


def test_a_caller_copy_of_any_written_type_never_breaks_verify(
    session: tuple[Path, dict[str, dict[str, Any]]], tmp_path: Path
) -> None:
    """Every type the session wrote, appended again by a caller: refused or accepted, verify OK."""
    src, written = session
    led = tmp_path / "copy.ledger"
    led.write_bytes(src.read_bytes())
    (tmp_path / "copy.ledger.key").write_bytes(Path(f"{src}.key").read_bytes())
    (tmp_path / "copy.ledger.key").chmod(0o600)
    for op_type, body in sorted(written.items()):
        for payload in (_json_safe(body.get("payload", {})), {}):
            result = memroot_cli(led, "append", json.dumps(as_caller(body, payload)))
            assert result.exit_code in (0, 3), (op_type, result.output)
            assert "Traceback" not in result.output
    verify_ok(led)


def test_every_library_op_marking_names_a_reserved_type() -> None:
    """In the code, every op memroot marks as its own (`_library_op`) is of a reserved type.

    The literal types at each marking site are read from the source; a marked type that is
    not reserved is refused at run time too (``_library_op`` raises ValueError).
    """
    root = Path(memroot.__file__).parent  # the installed package (every layer)
    marked: set[str] = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_library_op":
                for sub in ast.walk(node):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id == "OpType"
                    ):
                        marked.add(sub.attr)
    assert {"SNAPSHOT", "SELFMODEL_SNAPSHOT", "READ_RECEIPT", "CASCADE"} <= marked
    assert marked <= set(RESERVED_OPS)
    with pytest.raises(ValueError, match="not in RESERVED_OPS"):
        from memroot.ledger.entries import _library_op

        _library_op(Ledger.system_op(OpType.ASSERT, {}))
