"""Every CLI command given hostile values: never a traceback, and an exit code from the table.

The README's exit codes: 0 ok, 1 integrity violation, 2 usage, 3 refused request, 4 storage
failure, 5 key file problem. hypothesis picks a command and fills its arguments with huge,
negative and malformed integers, control characters, empty and oversized text, deep and
duplicate-keyed JSON; the run is bounded (``max_examples``) so it stays well under a minute.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.cli.main import cli

EXIT_CODES = {0, 1, 2, 3, 4, 5}
EVENT = {
    "kind": "event",
    "stream": "s",
    "actor_id": "alice",
    "actor_type": "HUMAN_USER",
    "role": "USER",
    "content": "I take tea",
    "namespace_id": "ns",
}

ints = st.sampled_from(
    ["0", "-1", "1", "2", "999999", str(2**40), str(2**63), str(2**64 + 5), str(-(2**70)), "1e9"]
)
texts = st.sampled_from(
    [
        "",
        " ",
        "x",
        "a\nb",
        "\x1b[2Jevil",
        "\x00",
        "é" * 5000,
        "main",
        "../../etc/passwd",
        "01890a5d-ac96-774b-bcce-b302099a8057",
        "NaN",
        "-1",
    ]
)


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _json_values() -> st.SearchStrategy[str]:
    base: list[Any] = [
        {**EVENT, "ts": 9_000_000_000_000_000_000},
        {**EVENT, "ts": -5},
        {**EVENT, "ts": 2**64},
        {**EVENT, "ts": 1},
        {**EVENT, "actor_id": "a\nb"},
        {**EVENT, "metadata": {"x": json.loads(_deep(40))}},
        {**EVENT, "parent_event_id": "01890a5d-ac96-774b-bcce-b302099a8057"},
        {**EVENT, "content": 7},
        {
            "kind": "op",
            "op_type": "KEY_ROTATE",
            "actor_id": "m",
            "actor_type": "HUMAN_USER",
            "namespace_id": "ns",
            "policy_version": "p",
            "payload": {"new_vkey": "x", "old_vkey": "y"},
        },
        {
            "kind": "op",
            "op_type": "ASSERT",
            "actor_id": "m",
            "actor_type": "AI_AGENT",
            "namespace_id": "ns",
            "policy_version": "p",
            "payload": {"value": "v", "bogus": 1},
        },
    ]
    raw = [json.dumps(v) for v in base] + [
        _deep(100_000),
        '{"kind": "event", "kind": "op"}',
        '{"kind": "event", "stream": NaN}',
        "not json",
        "\udcff",
        "",
    ]
    return st.sampled_from(raw)


def _commands(ledger: Path, tmp: Path) -> st.SearchStrategy[list[str]]:
    """Return argument vectors for every command, hostile values in every slot."""
    out = str(tmp / "out")

    def cmd(*parts: Any) -> st.SearchStrategy[list[str]]:
        return st.tuples(
            *[p if isinstance(p, st.SearchStrategy) else st.just(p) for p in parts]
        ).map(lambda t: ["-l", str(ledger), *[str(x) for x in t]])

    return st.one_of(
        cmd("append", _json_values()),
        cmd("append", "-b", texts, _json_values()),
        cmd("log", "--start", ints, "--limit", ints),
        cmd("log", "-b", texts),
        cmd("show", ints),
        cmd("show", ints, "-b", texts),
        cmd("prove", "--index", ints),
        cmd("prove", "--index", ints, "--size", ints),
        cmd("prove", "--consistency", ints, ints),
        cmd("checkpoint", "-b", texts),
        cmd("vkey"),
        cmd("verify", "--no-update", "--branch", texts),
        cmd("verify", "--no-update", "--anchor", texts),
        cmd("verify", "--no-update", "--vkey", texts),
        cmd("query", "--limit", ints),
        cmd("query", "--as-of", ints),
        cmd("query", "--text", texts),
        cmd("query", "--anchor", texts),
        cmd("query", "--mode", texts),
        cmd("query", "--git-branch", texts),
        cmd("why", texts),
        cmd("rebuild"),
        cmd("snapshot", "--anchor", texts),
        cmd("roots", "--anchor", texts),
        cmd("root", "show", texts),
        cmd("root", "diff", texts, texts),
        cmd("selfmodel", "show"),
        cmd("falsify", texts, "--reason", texts),
        cmd("mark-stale", texts, "--reason", texts),
        cmd("restore", texts, "--reason", texts),
        cmd("cascade", texts, "--max-depth", ints, "--max-items", ints, "--dry-run"),
        cmd("branch", "create", "--type", "SIMULATION", "--purpose", texts, "--expiry-days", ints),
        cmd("branch", "create", "--type", "PLANNING", "--purpose", "p", "--max-events", ints),
        cmd("branch", "create", "--type", "SANDBOX", "--purpose", "p", "--id", texts),
        cmd("branch", "create", "--type", "TEST", "--purpose", "p", "--actor", texts),
        cmd("branch", "list"),
        cmd("branch", "show", texts),
        cmd("branch", "close", texts, "--reason", texts),
        cmd("branch", "discard", texts, "--reason", "r"),
        cmd("branch", "archive", texts, "--reason", "r"),
        cmd("branch", "merge", texts, "--objects", texts),
        cmd("branch", "diff", texts),
        cmd("branch", "divergence", texts),
        cmd("gc", "--now", st.one_of(ints, texts), "--dry-run"),
        cmd("gc", "--now", st.one_of(ints, texts)),
        cmd("export", out),
        cmd("audit", st.sampled_from([out, str(tmp / "missing"), str(ledger)]), "--vkey", texts),
        cmd("tiles", str(tmp / "tiles")),
        cmd("init", "--snapshot-every", ints),
        cmd("import", st.sampled_from([str(tmp / f"lines{i}.jsonl") for i in range(3)])),
        cmd(
            "selfmodel", "record", st.sampled_from([str(tmp / f"lines{i}.jsonl") for i in range(3)])
        ),
        cmd("import-bundle", st.sampled_from([out, str(tmp / "missing")]), "--vkey", texts),
        cmd("rotate-key"),
        # bench runs for as long as it is asked to: only values it must refuse up front
        cmd("bench", "--sizes", st.sampled_from(["", "x", "-5", "0", "1,,2", "1e3"])),
        cmd("bench", "--durable", st.sampled_from(["0", "-1", "x"])),
    )


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger with events, objects, a branch and a snapshot: something for every command."""
    base = tmp_path_factory.mktemp("hostile")
    path = base / "seed.ledger"
    run = CliRunner()
    assert run.invoke(cli, ["-l", str(path), "init"], catch_exceptions=False).exit_code == 0
    ev = run.invoke(cli, ["-l", str(path), "append", json.dumps(EVENT), "--json"])
    event_id = json.loads(ev.stdout)[0]["id"]
    op = {
        "kind": "op",
        "op_type": "ASSERT",
        "actor_id": "agent",
        "actor_type": "AI_AGENT",
        "namespace_id": "ns",
        "policy_version": "p/1",
        "payload": {
            "object_type": "FACT",
            "epistemic_type": "OBSERVED",
            "source_type": "USER_STATED",
            "evidence_ids": [event_id],
            "value": "tea",
            "confidence": 0.9,
            "salience": 0.5,
        },
    }
    assert run.invoke(cli, ["-l", str(path), "append", json.dumps(op)]).exit_code == 0
    args = ["-l", str(path), "branch", "create", "--type", "SIMULATION", "--purpose", "p"]
    assert run.invoke(cli, args).exit_code == 0
    assert run.invoke(cli, ["-l", str(path), "snapshot"]).exit_code == 0
    return path


def test_every_command_survives_hostile_values(seeded: Path, tmp_path_factory: Any) -> None:
    """No traceback reaches stderr and every exit code is one of the README's."""
    work = tmp_path_factory.mktemp("hostile-run")
    ledger = work / "l.ledger"
    shutil.copy(seeded, ledger)
    shutil.copy(f"{seeded}.key", f"{ledger}.key")
    (work / "out").mkdir(exist_ok=True)
    (work / "lines0.jsonl").write_bytes(b"\xff\xfe not utf-8\n")
    (work / "lines1.jsonl").write_text(
        json.dumps(EVENT) + "\n" + '{"kind": "event", "kind": "op"}\n' + "[" * 100_000 + "\n"
    )
    (work / "lines2.jsonl").write_text(json.dumps({**EVENT, "ts": 2**70}) + "\n")
    runner = CliRunner(env={"MEMROOT_TRUSTED": str(work / "trusted.json")})

    @settings(
        max_examples=300,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(_commands(ledger, work))
    def check(argv: list[str]) -> None:
        result = runner.invoke(cli, argv)
        shown = f"{argv}: exit {result.exit_code}\n{result.output}\n{result.stderr}"
        assert result.exception is None or isinstance(result.exception, SystemExit), shown + repr(
            result.exception
        )
        assert "Traceback" not in result.stderr, shown
        assert result.exit_code in EXIT_CODES, shown

    check()
