"""An entry that is not a valid operation gets one outcome on every host and every replay.

Two hosts (two processes, each with its own derived-state cache) share one PostgreSQL
ledger. A third process, holding the key, appends a second ``DEPRECATE`` of an object already
deprecated without the hooks (what an old client, the Python API without hooks, or a host
that validated against an edited cache leaves in the log). The rule (docs/FORMAT.md §3.1):
every replay skips it and records the skip; ``verify`` reports it as a note naming the
entry. So both hosts answer every command, with the same memory; neither fails with
"cannot apply entry"; a rebuilt cache and a fresh host agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

WRITER = r"""
import json, sys
from pathlib import Path
from memroot.ledger.entries import OpInput
from memroot.ledger.ledger import Ledger
url, key, cache, target, ev = sys.argv[1:6]
with Ledger.open(url, key_path=Path(key), hooks=[], cache_path=Path(cache)) as ledger:
    done = ledger.append(OpInput(op_type="DEPRECATE", actor_id="agent-7", actor_type="AI_AGENT",
        namespace_id="team", policy_version="p/1", target_id=target,
        payload={"reason": "again", "deprecated_by": "agent-7", "evidence_ids": [ev]}))
print(done.seq)
"""

_CLI = "from memroot.cli.main import main; main()"


def host(url: str, key: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``memroot ARGS`` as a host of its own (a process, its own cache file)."""
    env = {**os.environ, "MEMROOT_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-c", _CLI, "-l", url, "--key", str(key), *args],
        capture_output=True,
        text=True,
        env=env,
    )


def ok_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_invalid_entry_same_outcome_on_two_hosts(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    a, b = tmp_path / "a.cache", tmp_path / "b.cache"
    assert host(pg_url, pg_key, a, "init").returncode == 0
    event = {
        "kind": "event",
        "stream": "s",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "role": "USER",
        "content": "I take my tea without sugar",
        "namespace_id": "team",
    }
    ev = ok_json(host(pg_url, pg_key, a, "append", "--json", json.dumps(event)))[0]["id"]
    fact = {
        "kind": "op",
        "op_type": "ASSERT",
        "actor_id": "agent-7",
        "actor_type": "AI_AGENT",
        "namespace_id": "team",
        "policy_version": "p/1",
        "payload": {
            "object_type": "PREFERENCE",
            "epistemic_type": "OBSERVED",
            "source_type": "USER_STATED",
            "evidence_ids": [ev],
            "value": "Alice takes tea without sugar",
            "confidence": None,
            "salience": 0.7,
        },
    }
    tea = ok_json(host(pg_url, pg_key, b, "append", "--json", json.dumps(fact)))[0]["id"]
    deprecate = {
        **fact,
        "op_type": "DEPRECATE",
        "target_id": tea,
        "payload": {"reason": "changed", "deprecated_by": "alice", "evidence_ids": [ev]},
    }
    ok_json(host(pg_url, pg_key, a, "append", "--json", json.dumps(deprecate)))
    # A host with the hooks refuses the second DEPRECATE by its rule...
    refused = host(pg_url, pg_key, b, "append", "--json", json.dumps(deprecate))
    assert refused.returncode != 0 and "DEPRECATED" in refused.stderr + refused.stdout
    # ...a writer without them puts it in the log.
    w = subprocess.run(
        [sys.executable, "-c", WRITER, pg_url, str(pg_key), str(tmp_path / "w.cache"), tea, ev],
        capture_output=True,
        text=True,
    )
    assert w.returncode == 0, w.stderr
    bad = int(w.stdout.strip())
    answers = []
    for cache in (a, b, tmp_path / "fresh.cache"):
        rows = ok_json(host(pg_url, pg_key, cache, "query", "--mode", "AUDIT", "--json"))
        answers.append([(r["id"], r["lifecycle_state"], r["version"]) for r in rows])
        report = ok_json(host(pg_url, pg_key, cache, "verify", "--json"))
        assert report["ok"], report["findings"]
        noted = [n for n in report["notes"] if n["step"] == 9 and n["seq"] == bad]
        assert noted and "not a valid memory operation" in noted[0]["message"]
    assert answers[0] == answers[1] == answers[2] == [(tea, "DEPRECATED", 2)]
    # Both hosts still write.
    for cache in (a, b):
        ok_json(host(pg_url, pg_key, cache, "append", "--json", json.dumps(event)))
    # A rebuilt cache agrees with the others.
    assert host(pg_url, pg_key, a, "rebuild").returncode == 0
    rows = ok_json(host(pg_url, pg_key, a, "query", "--mode", "AUDIT", "--json"))
    assert [(r["id"], r["lifecycle_state"], r["version"]) for r in rows] == answers[0]
