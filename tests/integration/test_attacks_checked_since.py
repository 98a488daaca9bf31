"""Checks kept across another connection's commit still refuse every edit made with it.

After another connection commits, the read gate keeps what it checked where that commit
left it holding (``strict_rows._holds``: no operation since names the object, the entries
it was derived from are byte for byte the same; ``complete._still_holds``: no operation
since, no page of the tables the completeness check reads written since, by the WAL). Each
test keeps one ``Memory`` open, reads so the checks are remembered, lets another agent
commit (an honest handle) and an attacker in its own process (plain ``sqlite3``, no memroot
code, no key) edit the file, and reads again through the open handle: refused, nothing
served, nothing written; an honest commit alone is no false alarm.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import memroot
from memroot.ledger.errors import IntegrityError
from memroot.memory_root import complete
from memroot.projections import checked, strict_rows
from tests.integration._attack import attacker, opened, other_agent, two_facts
from tests.integration._attack import counts as sizes


@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    return two_facts(tmp_path / "m.ledger")


def _ids(mem: memroot.Memory) -> dict[str, str]:
    return {("tea" if "tea" in r.object.value else "lyon"): r.object.id for r in mem.recall()}


def _settle(mem: memroot.Memory, path: Path) -> None:
    """Read until the checks are kept by position (the WAL floor is known from then on)."""
    other_agent(path, "mem.record(content='hello')")
    mem.recall()
    assert complete._HELD[mem.ledger]  # the completeness check is held by position
    assert strict_rows._PROOFS[mem.ledger]  # and each object's check by what it rested on


def test_benign_commit_keeps_the_checks(path: Path) -> None:
    """Another agent's event: the next recall replays nothing, checks no row again and scans
    no hidden row again (no page of the object rows written, no operation appended)."""
    with opened(path) as mem:
        mem.recall()
        _settle(mem, path)
        calls: list[str] = []
        real, scan = strict_rows._check_objects, checked._check_hidden
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(strict_rows, "_check_objects", lambda *a: calls.append("row") or real(*a))
            mp.setattr(checked, "_check_hidden", lambda *a: calls.append("hidden") or scan(*a))
            other_agent(path, "mem.record(content='how are you')")
            assert len(mem.recall()) == 2
        assert calls == []


def _kept_past_a_benign_commit(mem: memroot.Memory, path: Path) -> str:
    """Serve one row, then read again after another agent's event (the completeness check
    kept by position: the watched pages are exact from here); return a row not served."""
    served = mem.recall(limit=1)[0].object.id
    gone = next(i for i in _ids(mem).values() if i != served)
    mem.recall(limit=1)
    _settle(mem, path)
    other_agent(path, "mem.record(content='how are you')")
    mem.recall(limit=1)
    return gone


def test_unserved_row_deleted_after_benign_commit(path: Path) -> None:
    """A row the page did not serve deleted (with its edges) after another agent's commit:
    the completeness check, kept by position, sees the page written and refuses."""
    with opened(path) as mem:
        gone = _kept_past_a_benign_commit(mem, path)
        attacker(
            path,
            f"DELETE FROM mem_objects WHERE id = '{gone}'; "
            f"DELETE FROM mem_edges WHERE source_id = '{gone}';",
        )
        before = sizes(path)
        with pytest.raises(IntegrityError) as e:
            mem.recall(limit=1, receipt="run-1")
        assert e.value.step == 9
        assert sizes(path) == before


def test_row_deleted_and_wal_truncated(path: Path) -> None:
    """The same deletion, then the WAL checkpointed and truncated (the pages written are no
    longer listed): the kept check cannot tell, so it checks again, and refuses."""
    with opened(path) as mem:
        served = mem.recall(limit=1)[0].object.id
        gone = next(i for i in _ids(mem).values() if i != served)
        mem.recall(limit=1)
        _settle(mem, path)
        attacker(
            path,
            f"DELETE FROM mem_objects WHERE id = '{gone}'; "
            f"DELETE FROM mem_edges WHERE source_id = '{gone}'; "
            "PRAGMA wal_checkpoint(TRUNCATE);",
        )
        with pytest.raises(IntegrityError):
            mem.recall(limit=1)


def test_object_table_moved_to_a_copy_after_benign_commit(path: Path) -> None:
    """The object table pointed at a copy without one row (each schema row's root page
    rewritten, the schema version moved), after another agent's commit: no page of the table
    the kept completeness check watched is written, only the schema table's: its rows are
    read, they differ, and the check runs again and refuses."""
    with opened(path) as mem:
        gone = _kept_past_a_benign_commit(mem, path)
        attacker(path, _moved_to_a_copy(path, gone))
        with pytest.raises(IntegrityError) as e:
            mem.recall(limit=1)
        assert e.value.step == 9


def _moved_to_a_copy(path: Path, gone: str) -> str:
    """The attacker's script: ``mem_objects`` and its indexes copied without ``gone``, each
    schema row then naming its copy's root page (the table's own pages are left unwritten)."""
    import apsw

    db = apsw.Connection(str(path))
    try:
        rows = db.execute(
            "SELECT name, sql FROM sqlite_master WHERE tbl_name = 'mem_objects' "
            "AND type IN ('table', 'index') AND sql IS NOT NULL"
        ).fetchall()
        version = int(db.execute("PRAGMA schema_version").fetchone()[0])
    finally:
        db.close()
    copies = {name: name.replace("mem_objects", "mem_copy") for name, _ in rows}
    script = [
        sql.replace("mem_objects", "mem_copy") + ";"
        for name, sql in sorted(rows, key=lambda r: r[0] != "mem_objects")  # the table first
    ]
    script.append(f"INSERT INTO mem_copy SELECT * FROM mem_objects WHERE id != '{gone}';")
    script.append("PRAGMA writable_schema = ON;")
    for name, copy in copies.items():
        script.append(
            "UPDATE sqlite_master SET rootpage = (SELECT rootpage FROM sqlite_master WHERE "
            f"name = '{copy}') WHERE name = '{name}';"
        )
    script += [f"DELETE FROM sqlite_master WHERE name = '{copy}';" for copy in copies.values()]
    script.append(f"PRAGMA schema_version = {version + 1}; PRAGMA writable_schema = OFF;")
    script.append(f"DELETE FROM mem_edges WHERE source_id = '{gone}';")
    return " ".join(script)


def test_served_value_edited_after_benign_commit(path: Path) -> None:
    """A served value edited in the same commit as another agent's event: refused."""
    with opened(path) as mem:
        tea = _ids(mem)["tea"]
        _settle(mem, path)
        other_agent(path, "mem.record(content='how are you')")
        attacker(path, f"UPDATE mem_objects SET value = 'MALLORY sugar' WHERE id = '{tea}';")
        with pytest.raises(IntegrityError) as e:
            mem.recall()
        assert "MALLORY" not in str(e.value)


def test_evidence_content_edited_after_benign_commit(path: Path) -> None:
    """A served object's evidence content edited after another agent's commit: the entry's
    stored row is not the one its kept check rested on, so it is checked again: refused."""
    with opened(path) as mem:
        _settle(mem, path)
        attacker(
            path,
            "UPDATE entries SET content = CAST('I take my tea with MALLORY sugar' AS BLOB) "
            "WHERE CAST(content AS TEXT) = 'I take my tea without sugar';",
        )
        with pytest.raises(IntegrityError):
            mem.recall()


def test_row_hidden_after_benign_commit(path: Path) -> None:
    """A row archived in the derived table after another agent's commit: refused."""
    with opened(path) as mem:
        tea = _ids(mem)["tea"]
        _settle(mem, path)
        attacker(path, f"UPDATE mem_objects SET lifecycle_state = 'ARCHIVED' WHERE id = '{tea}';")
        with pytest.raises(IntegrityError):
            mem.recall()


def test_another_agent_falsifies_a_served_object(path: Path) -> None:
    """Another agent's FALSIFY of a served object names it: checked again, no false alarm,
    and the next recall no longer serves it."""
    with opened(path) as mem:
        tea = _ids(mem)["tea"]
        _settle(mem, path)
        other_agent(path, f"mem.falsify({tea!r}, 'she takes sugar now')")
        assert [r.object.id for r in mem.recall()] == [_ids(mem)["lyon"]]


def test_another_agent_remembers_a_fact(path: Path) -> None:
    """Another agent's ASSERT (an operation: a map leaf): checked in full, no false alarm."""
    with opened(path) as mem:
        _settle(mem, path)
        other_agent(
            path,
            "ev = mem.record(content='I have a cat'); "
            "mem.remember('Alice has a cat', evidence=[ev.id])",
        )
        assert len(mem.recall()) == 3
