"""A writer with a witness refuses to append onto a head below the witness's cosigned size.

The witness is a real ``memroot witness serve`` process on loopback; it cosigns the ledger's
checkpoints and the ledger records the cosigned size (``witness_state``). The attacker, in its
own process with no key, puts the log's tables of an older copy back (a rollback of the
entries, the tree and the checkpoints; the witness record stays, as a truncation in place
leaves it). ``memroot append`` must then exit 1 naming the rollback and write nothing: the
history the witness vouched for is not forked. (A whole-file restore also takes the witness
record back; that one is caught by the trusted state, ``test_attacks_writes``.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration import test_witness_loopback as loopback
from tests.integration._attack import counts

world = loopback.world  # its fixture: a ledger, a witness process, the witness configured

ROLL_BACK = r"""
import shutil, sqlite3, sys
live, old = sys.argv[1], sys.argv[2]
db = sqlite3.connect(live)
kept = db.execute("SELECT * FROM witness_state").fetchall()
db.close()
shutil.copy(old, live)
db = sqlite3.connect(live)
db.executemany("INSERT OR REPLACE INTO witness_state VALUES(?,?,?,?,?,?)", kept)
db.commit()
db.close()
"""


@pytest.fixture
def witnessed(request: pytest.FixtureRequest, cmd: Any) -> tuple[Path, Path]:
    """The loopback witness's ledger cosigned up to 6 entries, and a copy of it at 3."""
    w = request.getfixturevalue("world")
    ledger: Path = w["ledger"]
    append = loopback.append
    append(cmd, ledger, 2)
    old = w["tmp"] / "old.ledger"
    shutil.copy(ledger, old)
    shutil.copy(f"{ledger}.key", f"{old}.key")
    append(cmd, ledger, 3)
    status = cmd.ok_json(cmd.at(ledger, "witness", "list", "--json"))
    assert [s["cosigned_size"] for s in status] == [6]
    return ledger, old


def test_append_onto_log_rolled_back_below_cosigned_size(
    witnessed: tuple[Path, Path], cmd: Any
) -> None:
    """The log rolled back to 3 entries, the witness cosigned 6: append exits 1, writes none."""
    ledger, old = witnessed
    done = subprocess.run(
        [sys.executable, "-c", ROLL_BACK, str(ledger), str(old)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    for suffix in ("-wal", "-shm"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    before = counts(ledger)
    r = cmd.at(ledger, "append", json.dumps({**cmd.EVENT, "content": "fork"}))
    assert r.exit_code == 1, r.output
    assert "rollback" in r.output and "cosigned 6" in r.output
    assert counts(ledger) == before
    # The honest copy with its own witness record (3 cosigned) still takes appends.
    cmd.ok(cmd.at(old, "append", json.dumps({**cmd.EVENT, "content": "honest"})))
