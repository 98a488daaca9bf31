"""The read gate's memory on PostgreSQL: an edit after a remembered read is still refused.

A long-lived agent (``memroot.open`` on a PostgreSQL URL) recalls twice: the second read is
served from what the first checked (the snapshot the entries were read in, and the local
cache's counters, unchanged). An attacker in its own process then edits the evidence event's
content in PostgreSQL (psycopg, no key), or the derived row in this host's cache file; the
next recall of the same open handle must refuse it (``IntegrityError``), serving nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import memroot
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from memroot.projections import strict_rows

PG_ATTACKER = r"""
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as db:
    db.execute(sys.argv[2])
"""

SQLITE_ATTACKER = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.executescript(sys.argv[2]); db.commit(); db.close()
"""


def _run(script: str, *args: str) -> None:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def agent(
    tmp_path: Path, pg_url: str, pg_key: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, Path]:
    cache = tmp_path / "host.cache"
    Ledger.init(pg_url, origin="example.org/pg-gate", key_path=pg_key, cache_path=cache).close()
    monkeypatch.setenv("MEMROOT_CACHE", str(cache))
    with memroot.open(pg_url, key_path=pg_key, trusted=False) as mem:
        said = mem.record(content="I take my tea without sugar")
        mem.remember("Alice takes tea without sugar", evidence=[said.id])
    return pg_url, cache


def test_pg_remembered_recall_then_content_edited_in_postgres(
    agent: tuple[str, Path], pg_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cache = agent
    monkeypatch.setenv("MEMROOT_CACHE", str(cache))
    with memroot.open(url, key_path=pg_key, trusted=False) as mem:
        first = mem.recall()
        assert mem.recall() == first
        memo = strict_rows._CHECKED[mem.ledger]["query"]
        assert memo.token is not None and memo.keys  # remembered on PostgreSQL too
        _run(
            PG_ATTACKER,
            url,
            "UPDATE entries SET content = convert_to('I take my tea with MALLORY sugar', "
            "'UTF8') WHERE convert_from(content, 'UTF8') = 'I take my tea without sugar'",
        )
        with pytest.raises(IntegrityError) as e:
            mem.recall()
        assert "MALLORY" not in str(e.value)


def test_pg_remembered_recall_then_cache_row_edited(
    agent: tuple[str, Path], pg_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cache = agent
    monkeypatch.setenv("MEMROOT_CACHE", str(cache))
    with memroot.open(url, key_path=pg_key, trusted=False) as mem:
        mem.recall()
        mem.recall()
        _run(SQLITE_ATTACKER, str(cache), "UPDATE mem_objects SET value = 'MALLORY';")
        with pytest.raises(IntegrityError):
            mem.recall()
