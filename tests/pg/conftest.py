"""A real PostgreSQL server for the PostgreSQL ledger's tests, and a fresh database per test.

``MEMROOT_TEST_PG_URL`` (a ``postgresql://`` URL of a role that may create databases) names
a running server; without it a throw-away cluster is started here (``initdb`` + ``pg_ctl``
on a unix socket in a temporary directory; as root the server runs as the ``postgres``
user). When neither works the tests are skipped, naming why.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

PG_BIN_DIRS = [
    "/usr/lib/postgresql/17/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/15/bin",
]


def _tool(name: str) -> str | None:
    for d in PG_BIN_DIRS:
        if os.access(f"{d}/{name}", os.X_OK):
            return f"{d}/{name}"
    return shutil.which(name)


def _start_cluster() -> tuple[str | None, str, list[str]]:
    """Start a throw-away cluster; return (URL or None, reason, command to stop it)."""
    initdb, pg_ctl = _tool("initdb"), _tool("pg_ctl")
    if initdb is None or pg_ctl is None:
        return None, "no initdb/pg_ctl found (install PostgreSQL or set MEMROOT_TEST_PG_URL)", []
    run_as: list[str] = []
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            return None, "running as root and there is no postgres user to run the server", []
        run_as = ["runuser", "-u", "postgres", "--"]
    base = tempfile.mkdtemp(prefix="memroot-pg-")
    if run_as:
        os.chown(base, user.pw_uid, user.pw_gid)
    data = f"{base}/data"
    init = subprocess.run(
        [*run_as, initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
        capture_output=True,
        text=True,
        cwd=base,
    )
    if init.returncode != 0:
        return None, f"initdb failed: {init.stderr.strip()[:300]}", []
    opts = f"-k {base} -c listen_addresses='' -c fsync=off -c max_connections=60"
    start = subprocess.run(
        [*run_as, pg_ctl, "-D", data, "-l", f"{base}/log", "-o", opts, "-w", "start"],
        capture_output=True,
        text=True,
        cwd=base,
    )
    if start.returncode != 0:
        return None, f"pg_ctl start failed: {start.stderr.strip()[:300]}", []
    return (
        f"postgresql://postgres@/postgres?host={base}",
        "",
        [*run_as, pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"],
    )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a PostgreSQL server's admin database (skips the tests without one)."""
    psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (memroot[postgres])")
    url = os.environ.get("MEMROOT_TEST_PG_URL")
    stop: list[str] = []
    if not url:
        url, reason, stop = _start_cluster()
        if url is None:
            pytest.skip(f"no PostgreSQL server: {reason}")
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.Error as e:
        pytest.skip(f"PostgreSQL server at {url} does not answer: {e}")
    try:
        yield url
    finally:
        if stop:
            subprocess.run(stop, capture_output=True, cwd="/")
            shutil.rmtree(urlsplit(url).query.removeprefix("host="), ignore_errors=True)


def with_database(url: str, dbname: str) -> str:
    """Return ``url`` naming database ``dbname`` instead."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{dbname}"))


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A URL of a new, empty database (dropped after the test)."""
    import psycopg

    name = f"memroot_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield with_database(pg_server, name)
    finally:
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(pg_server, autocommit=True) as admin,
        ):
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def pg_key(tmp_path: Path) -> Path:
    """Where the test's PostgreSQL ledger keeps its signing key (not created yet)."""
    return tmp_path / "pg.key"


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Derived-state caches of ledgers opened without a key land in the test's directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("MEMROOT_CACHE", raising=False)
