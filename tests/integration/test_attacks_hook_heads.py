"""mem_heads_moved_between_writes: an open writer notices derived state edited between its writes.

The memory hook knows the head its last fold left without reading it again while no other
connection has committed (``PRAGMA data_version``, which this connection's own commits do not
move). An attacker in another process who edits the hook's ``mem_heads`` between two appends
of a long-lived handle commits, so the next append reads the stored head again and refuses:
nothing is written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memroot.ledger.entries import EventInput
from memroot.ledger.errors import StorageError
from memroot.ledger.ledger import Ledger
from memroot.memory_root.stack import default_hooks


def _event(n: int) -> EventInput:
    return EventInput(
        stream="s1",
        actor_id="alice",
        actor_type="HUMAN_USER",
        role="USER",
        namespace_id="alice",
        content=f"note {n}",
    )


def test_mem_heads_moved_between_writes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.ledger"
    with Ledger.init(path, origin="example.org/heads", hooks=default_hooks()) as ledger:
        ledger.append(_event(1))
        ledger.append(_event(2))  # the head is now known from memory
        attacker = (
            "import apsw, sys; db = apsw.Connection(sys.argv[1]); "
            "db.execute(\"UPDATE mem_heads SET size = size + 5 WHERE branch = 'main'\"); "
            "db.close()"
        )
        subprocess.run([sys.executable, "-c", attacker, str(path)], check=True, timeout=60)
        size = ledger.size()
        with pytest.raises(StorageError, match="derived memory state has folded"):
            ledger.append(_event(3))
        assert ledger.size() == size  # nothing written
