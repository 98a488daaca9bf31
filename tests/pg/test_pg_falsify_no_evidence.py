"""A FALSIFY citing no event has one outcome on every PostgreSQL host (docs/FORMAT.md §8.2).

Two hosts (processes with their own caches) share one PostgreSQL ledger; a writer without the
hooks appends a ``FALSIFY`` of a live fact whose ``evidence_ids`` names no event. Both layers
refuse it, so every host's catch-up skips it: each host (and a fresh one) serves the fact in
``query``, ``why`` says it is live, verify passes with the entry noted, and a rebuilt cache
agrees.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from tests.pg.test_pg_invalid_entry import host, ok_json

WRITER = r"""
import sys
from pathlib import Path
from memroot.ledger.entries import OpInput
from memroot.ledger.ledger import Ledger
url, key, cache, target, ev = sys.argv[1:6]
with Ledger.open(url, key_path=Path(key), hooks=[], cache_path=Path(cache)) as ledger:
    done = ledger.append(OpInput(op_type="FALSIFY", actor_id="mallory", actor_type="HUMAN_USER",
        namespace_id="team", policy_version="p/1", target_id=target, target_type="memory_object",
        payload={"reason": "no such evidence", "evidence_ids": [ev]}))
print(done.seq)
"""


def test_falsify_citing_no_event_same_outcome_on_two_hosts(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
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
    w = subprocess.run(
        [
            sys.executable,
            "-c",
            WRITER,
            pg_url,
            str(pg_key),
            str(tmp_path / "w.cache"),
            tea,
            str(uuid.uuid4()),
        ],
        capture_output=True,
        text=True,
    )
    assert w.returncode == 0, w.stderr
    bad = int(w.stdout.strip())
    for cache in (a, b, tmp_path / "fresh.cache"):
        rows = ok_json(host(pg_url, pg_key, cache, "query", "--json"))
        assert [r["id"] for r in rows] == [tea]
        why = host(pg_url, pg_key, cache, "why", tea)
        assert why.returncode == 0 and "states: live (never falsified" in why.stdout, why.stderr
        report = ok_json(host(pg_url, pg_key, cache, "verify", "--json"))
        assert report["ok"], report["findings"]
        assert [n for n in report["notes"] if n["step"] == 9 and n["seq"] == bad]
    assert host(pg_url, pg_key, a, "rebuild").returncode == 0
    rows = ok_json(host(pg_url, pg_key, a, "query", "--json"))
    assert [r["id"] for r in rows] == [tea]
