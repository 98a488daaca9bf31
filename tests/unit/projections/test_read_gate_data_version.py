"""One read, one ``data_version``: the gate's tokens and the completeness stamp share it.

A checked read after another connection's commit asks SQLite's ``PRAGMA data_version`` once
(``Store.data_version``, kept for the read transaction: its snapshot's number); the
completeness check's stamp (``memory_root.complete._stamp``) takes the same number, so a
commit an attacker's process made still moves it and the next read checks again.
"""

from __future__ import annotations

from pathlib import Path

import apsw

import memroot


def _pragmas(db: apsw.Connection) -> list[str]:
    seen: list[str] = []

    def trace(_cursor: object, sql: str, _bindings: object) -> bool:
        if "data_version" in sql:
            seen.append(sql)
        return True

    db.exec_trace = trace
    return seen


def test_a_read_after_another_commit_asks_data_version_once(tmp_path: Path) -> None:
    """The head check, the gate's tokens and the completeness stamp: one PRAGMA."""
    path = tmp_path / "m.ledger"
    with memroot.open(path, trusted=False) as mem:
        for i in range(3):
            ev = mem.record(content=f"fact number {i}")
            mem.remember(f"fact {i} holds", evidence=[ev.id])
    with memroot.open(path, trusted=False) as mem, memroot.open(path, trusted=False) as other:
        assert len(mem.recall()) == 3
        other.record(content="heard")
        seen = _pragmas(mem.ledger.store.db)
        assert len(mem.recall()) == 3
        mem.ledger.store.db.exec_trace = None
        assert len(seen) == 1, seen
