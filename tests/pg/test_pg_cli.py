"""Every CLI command on a PostgreSQL ledger: the ledger's own commands and those of the layers
above work, and bad URLs, a server that is down or a wrong key exit cleanly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli

EVENT = {
    "kind": "event",
    "stream": "s",
    "actor_id": "a",
    "actor_type": "HUMAN_USER",
    "role": "USER",
    "content": "hello",
    "namespace_id": "ns",
}


def _run(*args: str, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=True)
    # never a traceback: the only exception is click's own exit
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


def _ok(*args: str, env: dict[str, str] | None = None) -> Result:
    result = _run(*args, env=env)
    assert result.exit_code == 0, (args, result.output)
    return result


def test_core_commands_on_postgres(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """init, append, import, log, show, checkpoint, prove, vkey, verify, export + audit,
    rotate-key, tiles, publish, witness list, receipts: all on a postgresql:// ledger."""
    base = ["-l", pg_url, "--key", str(pg_key)]
    init = json.loads(_ok(*base, "init", "--origin", "example.org/pgcli", "--json").stdout)
    assert init["key_file"] == str(pg_key) and init["ledger"] == pg_url
    _ok(*base, "append", json.dumps(EVENT))
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps({**EVENT, "content": f"c{i}"}) + "\n" for i in range(5)))
    _ok(*base, "import", str(lines))
    log = _ok(*base, "log", "--json").stdout
    assert len(json.loads(log)) == 7
    assert json.loads(_ok(*base, "show", "1", "--json").stdout)["seq"] == 1
    _ok(*base, "checkpoint")
    assert "tlog-proof" in _ok(*base, "prove", "--index", "3").stdout
    vkey = _ok(*base, "vkey").stdout.strip()
    assert vkey == init["vkey"]
    report = json.loads(_ok(*base, "verify", "--json").stdout)
    assert report["ok"] and report["entries"] == 7
    _ok(*base, "export", str(tmp_path / "bundle"))
    assert json.loads(_ok("audit", str(tmp_path / "bundle"), "--vkey", vkey, "--json").stdout)["ok"]
    _ok(*base, "rotate-key")
    _ok(*base, "append", json.dumps(EVENT))
    _ok(*base, "tiles", str(tmp_path / "tiles"))
    _ok(*base, "publish", str(tmp_path / "pub"))
    _ok(*base, "witness", "list")
    _ok(*base, "receipts")
    env = {"MEMROOT_LEDGER": pg_url, "MEMROOT_KEY": str(pg_key)}
    assert json.loads(_ok("verify", "--json", env=env).stdout)["ok"]
    _ok("append", json.dumps(EVENT), env=env)


@pytest.mark.parametrize(
    "args",
    [
        ["query"],
        ["why", "x"],
        ["roots"],
        ["snapshot"],
        ["branch", "list"],
        ["gc"],
        ["cascade", "x"],
        ["rebuild"],
        ["falsify", "x", "--reason", "r"],
        ["mark-stale", "x", "--reason", "r"],
        ["restore", "x", "--reason", "r"],
        ["selfmodel", "show"],
    ],
)
def test_layers_above_run_as_on_a_file(
    args: list[str], pg_url: str, pg_key: Path, tmp_path: Path
) -> None:
    """The commands of the layers above exit as they do on a ledger file, with the same
    message (the derived state lives in the cache file beside the key)."""
    results = []
    for target, key in ((pg_url, pg_key), (str(tmp_path / "f.ledger"), tmp_path / "f.key")):
        base = ["-l", target, "--key", str(key)]
        _ok(*base, "init", "--origin", "example.org/pgcli")
        _ok(*base, "append", json.dumps(EVENT))
        results.append(_run(*base, *args))
    on_pg, on_file = results
    assert on_pg.exit_code == on_file.exit_code, (on_pg.output, on_file.output)
    assert "PostgreSQL" not in on_pg.output
    if on_pg.exit_code:
        assert on_pg.output == on_file.output


def test_cli_errors(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """No ledger, no key, a foreign key, a server that is down, a bad URL: exit codes."""
    no_ledger = _run("-l", pg_url, "log")
    assert no_ledger.exit_code == 4 and "no memroot ledger" in no_ledger.output
    no_key = _run("-l", pg_url, "init")
    assert no_key.exit_code == 5 and "--key" in no_key.output
    _ok("-l", pg_url, "--key", str(pg_key), "init", "--origin", "example.org/pgcli")
    again = _run("-l", pg_url, "--key", str(tmp_path / "k2"), "init")
    assert again.exit_code == 4 and "already holds memroot tables" in again.output
    missing = _run("-l", pg_url, "append", json.dumps(EVENT))
    assert missing.exit_code == 5 and "--key" in missing.output
    _ok("-l", str(tmp_path / "other.ledger"), "init")
    foreign = _run("-l", pg_url, "--key", str(tmp_path / "other.ledger.key"), "append", "{}")
    assert foreign.exit_code in (3, 5)
    foreign = _run(
        "-l", pg_url, "--key", str(tmp_path / "other.ledger.key"), "append", json.dumps(EVENT)
    )
    assert foreign.exit_code == 5, foreign.output
    down = _run("-l", f"postgresql://postgres@/x?host={tmp_path}", "log")
    assert down.exit_code == 4 and "cannot connect to PostgreSQL" in down.output
    bad = _run("-l", "postgresql://u:pw@h/db?nonsense=1", "log")
    assert bad.exit_code == 4 and "pw" not in bad.output
    assert json.loads(_ok("-l", pg_url, "log", "--json").stdout)[0]["seq"] == 0


def test_witness_on_postgres(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """A loopback witness cosigns a PostgreSQL ledger's checkpoints; verify requires them.

    The witness tables go through the ledger layer's SQLite-dialect SQL (``INSERT OR
    REPLACE``, ``CAST(note AS BLOB)``, ``sqlite_master``), translated by ``PgConnection``.
    """
    import select
    import subprocess
    import sys

    base = ["-l", pg_url, "--key", str(pg_key)]
    _ok(*base, "init", "--origin", "example.org/pgw")
    vkey = _ok(*base, "vkey").stdout.strip()
    wdir = tmp_path / "witness"
    made = _ok("witness", "init", str(wdir), "--name", "witness.example.org/w1", "--log", vkey)
    wvkey = next(w for w in made.stdout.split() if w.startswith("witness.example.org/w1+"))
    serve = ["witness", "serve", str(wdir), "--listen", "127.0.0.1:0", "--quiet"]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from memroot.cli.main import main; main()", *serve],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.split(" ")[-1].strip()
        _ok(*base, "witness", "add", url, wvkey)
        _ok(*base, "append", json.dumps(EVENT))
        listed = _ok(*base, "witness", "list", "--json").stdout
        assert '"pending": 0' in listed
        report = json.loads(_ok(*base, "verify", "--witness-vkey", wvkey, "--json").stdout)
        assert report["ok"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
