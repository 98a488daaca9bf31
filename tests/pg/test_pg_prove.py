"""`memroot prove` and `audit --proof` on a PostgreSQL ledger (map nodes in the host's cache)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from memroot.cli.main import cli
from memroot.ledger.entries import EventInput, OpInput, new_uuids
from memroot.ledger.ledger import Ledger
from memroot.projections import requests as rq


def test_prove_and_audit_a_postgres_ledger(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """An object and a namespace of a PostgreSQL ledger are proven and checked offline."""
    ev, *objects = new_uuids(4)
    who = rq.Actor("agent-7", "AI_AGENT", "alice")
    items: list[EventInput | OpInput] = [
        EventInput(
            stream="s",
            actor_id="alice",
            actor_type="HUMAN_USER",
            role="USER",
            content="tea",
            namespace_id="alice",
            id=ev,
        )
    ]
    items += [
        rq.assert_object(who, "FACT", "ASSERTED", "USER_STATED", [ev], "tea", object_id=o)
        for o in objects
    ]
    with Ledger.init(pg_url, key_path=pg_key, origin="example.org/pgprove") as led:
        led.append_batch(items)
    base = ["-l", pg_url, "--key", str(pg_key)]
    run = CliRunner().invoke
    assert run(cli, [*base, "snapshot"], catch_exceptions=False).exit_code == 0
    vkey = run(cli, [*base, "vkey"], catch_exceptions=False).stdout.strip()
    for args, name in ((["--object", objects[1]], "obj"), (["--namespace", "alice"], "ns")):
        out = tmp_path / f"{name}.proof.json"
        made = run(cli, [*base, "prove", *args, "-o", str(out)], catch_exceptions=False)
        assert made.exit_code == 0, made.output
        checked = run(cli, ["audit", "--proof", str(out), "--vkey", vkey, "--json"])
        assert checked.exit_code == 0, checked.output
        got = json.loads(checked.stdout)
        assert got["present"] and got["origin"] == "example.org/pgprove"
    assert len(got["items"]) == 3
