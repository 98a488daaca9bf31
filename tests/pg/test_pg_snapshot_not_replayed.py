"""A SNAPSHOT that does not replay gets one outcome on every host: refused, never skipped.

Two hosts (each a process with its own derived-state cache) share one PostgreSQL ledger. An
attacker holding the key, in a process of its own, appends without the hooks a ``SNAPSHOT``
whose memory root the log does not give (an earlier root's payload again). ``verify``
reports it at step 8 (``SNAPSHOT does not replay``). A host's catch-up used to skip it
silently (``_fold_op`` rolled the roots hook back), so both hosts went on serving memory as
if the log held no such root. Now each host's catch-up refuses the entry with verify's own
finding: every read of either host, and of a fresh host, refuses with it (nothing served),
a write writes nothing, and verify on each host reports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HOST = r"""
import json, sys
import memroot
from memroot.ledger.errors import IntegrityError

url, key, action = sys.argv[1:4]
try:
    with memroot.open(url, key_path=key, trusted=False, namespace="alice") as mem:
        if action == "seed":
            said = mem.record(content="I take my tea without sugar")
            for v in ("Alice takes tea without sugar", "Bob likes coffee"):
                mem.remember(v, evidence=[said.id])
            mem.snapshot()
            out = None
        elif action == "record":
            out = mem.record(content="hello").id
        else:
            out = sorted(r.object.value for r in mem.recall(limit=100))
except IntegrityError as e:
    print(json.dumps({"refused": str(e), "step": e.step, "seq": e.seq}))
    sys.exit(3)
print(json.dumps(out))
"""

ATTACKER = r"""
import sys
from pathlib import Path
from memroot.ledger.entries import _library_op
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType
url, key, cache = sys.argv[1:4]
with Ledger.open(url, key_path=Path(key), hooks=[], cache_path=Path(cache)) as ledger:
    size = ledger.size()
    old = next(e for e in reversed(list(ledger.entries(0, size))) if e.type == "SNAPSHOT")
    op = _library_op(Ledger.system_op(OpType.SNAPSHOT, old.body["payload"]))
    print(ledger.append(op).seq)
"""

FACTS = ["Alice takes tea without sugar", "Bob likes coffee"]


def _env(cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "MEMROOT_CACHE": str(cache),
        "MEMROOT_TRUSTED": str(cache.with_suffix(".trusted.json")),
    }


def host(url: str, key: Path, cache: Path, action: str) -> tuple[int, Any]:
    """Run a facade script as a host of its own (a process, its own cache file)."""
    done = subprocess.run(
        [sys.executable, "-c", HOST, url, str(key), action],
        capture_output=True,
        text=True,
        env=_env(cache),
        timeout=180,
    )
    assert done.returncode in (0, 3), done.stderr
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def cli(url: str, key: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``memroot ARGS`` as that host."""
    exe = str(Path(sys.executable).with_name("memroot"))
    return subprocess.run(
        [exe, "-l", url, "--key", str(key), *args],
        capture_output=True,
        text=True,
        env=_env(cache),
        timeout=180,
    )


def _pg_rows(url: str) -> tuple[int, ...]:
    import psycopg

    with psycopg.connect(url) as db:
        got = db.execute(
            "SELECT (SELECT count(*) FROM entries), (SELECT count(*) FROM checkpoints)"
        ).fetchone()
    assert got is not None
    return tuple(int(x) for x in got)


def test_snapshot_not_replayed_is_refused_on_every_host(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    a, b, fresh = tmp_path / "a.cache", tmp_path / "b.cache", tmp_path / "fresh.cache"
    init = cli(pg_url, pg_key, a, "init", "--origin", "example.org/pg-bad-snapshot")
    assert init.returncode == 0, init.stderr
    assert host(pg_url, pg_key, a, "seed") == (0, None)
    assert host(pg_url, pg_key, b, "recall") == (0, sorted(FACTS))
    assert cli(pg_url, pg_key, a, "verify", "--json").returncode == 0

    w = subprocess.run(
        [sys.executable, "-c", ATTACKER, pg_url, str(pg_key), str(tmp_path / "w.cache")],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert w.returncode == 0, w.stderr
    bad = int(w.stdout.strip())
    before = _pg_rows(pg_url)

    findings = []
    for cache in (a, b, fresh):
        code, out = host(pg_url, pg_key, cache, "recall")
        assert code == 3, out  # refused: nothing served
        assert out["step"] == 8 and out["seq"] == bad, out
        assert "SNAPSHOT does not replay" in out["refused"], out
        assert not any(f in out["refused"] for f in FACTS)
        q = cli(pg_url, pg_key, cache, "query", "--json")
        assert q.returncode == 1, (q.stdout, q.stderr)
        assert not any(f in q.stdout for f in FACTS)
        assert "SNAPSHOT does not replay" in q.stderr and f"entry {bad}" in q.stderr, q.stderr
        # A write catches up first: refused, nothing written.
        code, out = host(pg_url, pg_key, cache, "record")
        assert code == 3 and out["seq"] == bad, out
        v = cli(pg_url, pg_key, cache, "verify", "--json")
        assert v.returncode == 1, (v.stdout, v.stderr)
        report = json.loads(v.stdout)
        step8 = [f for f in report["findings"] if f["step"] == 8 and f["seq"] == bad]
        assert step8, report["findings"]
        findings.append(step8[0]["message"])
        assert findings[-1] in out["refused"]  # the read's refusal words verify's finding
    assert findings[0] == findings[1] == findings[2]
    assert _pg_rows(pg_url) == before  # no refused read or write wrote anything
