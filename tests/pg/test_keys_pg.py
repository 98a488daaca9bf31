"""Keys for a fleet on a real PostgreSQL: hosts with their own writer keys, key operations at once.

Every host is its own process (the ``memroot`` command) with its own key file and its own
derived-state cache, against one shared database, as two machines would be.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

EVENT = {
    "kind": "event",
    "role": "USER",
    "stream": "s1",
    "actor_id": "alice",
    "actor_type": "HUMAN_USER",
    "namespace_id": "alice",
    "content": "hello",
}


class Host:
    """One machine: a directory with its key file and its own cache, running ``memroot``."""

    def __init__(self, root: Path, name: str, url: str) -> None:
        self.dir = root / name
        self.dir.mkdir()
        self.key = self.dir / "ledger.key"
        self.url = url
        self.env = {
            **os.environ,
            "MEMROOT_TRUSTED": str(self.dir / "trusted.json"),
            "MEMROOT_CACHE": str(self.dir / "cache.sqlite"),
        }

    def argv(self, *args: str) -> list[str]:
        return [
            str(Path(sys.executable).with_name("memroot")),
            "-l",
            self.url,
            "--key",
            str(self.key),
            *args,
        ]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args), capture_output=True, text=True, env=self.env, timeout=120
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )

    def ok(self, *args: str) -> Any:
        r = self.run(*args)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout) if "--json" in args else r.stdout


def _fleet(tmp_path: Path, url: str, *writers: str) -> tuple[Host, dict[str, Host], str]:
    """A root host that created the ledger, and one host per writer key it authorized."""
    root = Host(tmp_path, "root", url)
    root.ok("init", "--origin", "example.org/fleet", "--key", str(root.key), "--json")
    vkey = root.ok("vkey").strip()
    hosts = {}
    for name in writers:
        h = Host(tmp_path, name, url)
        root.ok("key", "add", "--name", name, "--out", str(h.key), "--json")
        hosts[name] = h
    return root, hosts, vkey


def _verify(host: Host, vkey: str) -> dict[str, Any]:
    r = host.run("verify", "--vkey", vkey, "--no-update", "--json")
    report = json.loads(r.stdout)
    assert r.returncode == 0 and report["ok"], r.stdout + r.stderr
    return report


def _main_size(host: Host) -> int:
    rows = host.ok("log", "--json")
    return len(rows)


def _hold_main_lock(url: str) -> Any:
    """Take main's head row lock as a writer would, so key operations queue behind it."""
    import psycopg

    conn = psycopg.connect(url)
    conn.execute("BEGIN")
    conn.execute("SELECT size FROM branches WHERE name = 'main' FOR UPDATE")
    return conn


def _wait_for_waiters(url: str, n: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        for _ in range(600):
            row = c.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
            if row is not None and row[0] >= n:
                return
            time.sleep(0.05)
    raise AssertionError(f"{n} key operations never queued on the lock")


def test_two_hosts_with_their_own_writer_keys_append_concurrently(
    tmp_path: Path, pg_url: str
) -> None:
    """Two hosts, each with its own writer key, write at once; verify --vkey ROOT passes on both."""
    _, hosts, vkey = _fleet(tmp_path, pg_url, "host-b", "host-c")
    data = tmp_path / "lines.jsonl"
    data.write_text(
        "".join(json.dumps({**EVENT, "content": f"line {i}"}) + "\n" for i in range(20))
    )
    procs = [h.start("import", str(data)) for h in hosts.values() for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    for h in hosts.values():
        report = _verify(h, vkey)
        assert report["entries"] >= 3 + 6 * 20
    # Each host signs with its own key: after its append, main's head names its key id.
    keys = hosts["host-b"].ok("vkey", "--all", "--json")["keys"]
    ids = {k["name"]: k["vkey"].split("+")[1] for k in keys if k["role"] == "writer"}
    for name, h in hosts.items():
        h.ok("append", json.dumps(EVENT))
        assert _head_signer(pg_url) == ids[name]
        _verify(h, vkey)


def _head_signer(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as c:
        row = c.execute(
            "SELECT c.note FROM checkpoints c JOIN branches b ON b.no = c.branch "
            "WHERE b.name = 'main' ORDER BY c.size DESC LIMIT 1"
        ).fetchone()
    assert row is not None
    line = next(x for x in str(row[0]).splitlines() if x.startswith("\u2014 "))
    return base64.b64decode(line.split(" ")[2])[:4].hex()


def test_concurrent_revocations_one_wins_the_other_exits_3(tmp_path: Path, pg_url: str) -> None:
    """Two root holders revoke at once: one wins, the other exits 3 and writes nothing."""
    root, hosts, vkey = _fleet(tmp_path, pg_url, "host-b", "host-c")
    twin = Host(tmp_path, "root-twin", pg_url)
    twin.key.write_bytes(root.key.read_bytes())
    twin.key.chmod(0o600)
    before = _main_size(root)
    lock = _hold_main_lock(pg_url)
    try:
        a = root.start("key", "revoke", "host-b", "--json")
        b = twin.start("key", "revoke", "host-c", "--json")
        _wait_for_waiters(pg_url, 2)
    finally:
        lock.rollback()
        lock.close()
    results = [(p.wait(timeout=120), p.communicate()) for p in (a, b)]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 3], results
    loser = next(io for code, io in results if code == 3)
    assert "the key set changed meanwhile" in loser[1]
    assert _main_size(root) == before + 1  # one KEY_REVOKE, nothing else
    for h in (root, twin):
        _verify(h, vkey)
    revoked = "host-b" if results[0][0] == 0 else "host-c"
    r = hosts[revoked].run("append", json.dumps(EVENT))
    assert r.returncode == 5, r.stderr
    assert "revoked by entry" in r.stderr
    assert _main_size(root) == before + 1


def test_concurrent_rotations_one_wins_verify_passes_on_both(tmp_path: Path, pg_url: str) -> None:
    """Two root holders rotate at once: one rotation lands, the other exits 3; verify passes."""
    root, hosts, vkey = _fleet(tmp_path, pg_url, "host-b")
    twin = Host(tmp_path, "root-twin", pg_url)
    twin.key.write_bytes(root.key.read_bytes())
    twin.key.chmod(0o600)
    before = _main_size(root)
    lock = _hold_main_lock(pg_url)
    try:
        a = root.start("rotate-key", "--json")
        b = twin.start("rotate-key", "--json")
        _wait_for_waiters(pg_url, 2)
    finally:
        lock.rollback()
        lock.close()
    results = [(p.wait(timeout=120), p.communicate()) for p in (a, b)]
    assert sorted(code for code, _ in results) == [0, 3], results
    assert _main_size(root) == before + 1
    loser = root if results[0][0] == 3 else twin
    assert not Path(f"{loser.key}.new").exists()
    for h in (root, twin, hosts["host-b"]):
        _verify(h, vkey)
    # The winner signs with the new root key, the writer key still works, the loser's copy of
    # the old root key is retired: refused, naming the rotation.
    winner = twin if loser is root else root
    assert winner.run("append", json.dumps(EVENT)).returncode == 0
    assert hosts["host-b"].run("append", json.dumps(EVENT)).returncode == 0
    r = loser.run("append", json.dumps(EVENT))
    assert r.returncode == 5 and "retired by entry" in r.stderr
    _verify(root, vkey)


def test_a_revoked_host_racing_its_revocation_never_leaves_a_bad_signature(
    tmp_path: Path, pg_url: str
) -> None:
    """A host appending while the root revokes it: its appends land before or are refused after."""
    root, hosts, vkey = _fleet(tmp_path, pg_url, "host-b")
    data = tmp_path / "lines.jsonl"
    data.write_text("".join(json.dumps({**EVENT, "content": f"{i}"}) + "\n" for i in range(5)))
    writers = [hosts["host-b"].start("import", str(data)) for _ in range(4)]
    time.sleep(0.3)
    root.ok("key", "revoke", "host-b", "--json")
    for p in writers:
        out = p.communicate(timeout=180)
        assert p.returncode in (0, 5), out
    _verify(root, vkey)
