"""Tests of ledger.verify: the report's shape, the raising form, and never crashing on garbage."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger import encoding
from memroot.ledger.backends.store import Store
from memroot.ledger.entries import Entry
from memroot.ledger.errors import IntegrityError, StorageError
from memroot.ledger.ledger import Ledger
from memroot.ledger.trust import TrustedState
from memroot.ledger.verify import (
    MAX_FINDINGS,
    STEPS,
    AfterScan,
    AuditReport,
    Finding,
    audit,
    verify,
    verify_path,
)

ORIGIN = "example.org/verify-test"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, inputs: Any) -> Path:
    """A closed ledger with events, operations, an erased event and two checkpoints."""
    path = tmp_path_factory.mktemp("small") / "small.db"
    with Ledger.init(path, origin=ORIGIN) as ledger:
        ledger.append_batch(inputs.mixed(10, seed=21))
        target = ledger.append(inputs.event(random.Random(0), 0, content="erase me"))
        ledger.append_batch(inputs.mixed(5, seed=22))
        ledger.append(inputs.tombstone(target.id))
        ledger.checkpoint()
    return path


def fresh_copy(src: Path, directory: Path) -> Path:
    dst = directory / src.name
    shutil.copy2(src, dst)
    return dst


# -- the report --------------------------------------------------------------------------------


def test_clean_report_json_shape(small: Path, tmp_path: Path) -> None:
    """A clean report serialises to JSON with every step, counts, notes and trust source."""
    report = verify_path(fresh_copy(small, tmp_path), trusted=TrustedState(tmp_path / "t.json"))
    data = json.loads(json.dumps(report.to_json()))
    assert set(data) == {
        "ok",
        "entries",
        "branches",
        "checkpoints",
        "erased",
        "steps",
        "findings",
        "notes",
        "trusted",
        "truncated_findings",
        "dropped_findings",
        "dropped_notes",
    }
    assert data["ok"] is True and data["findings"] == [] and data["truncated_findings"] is False
    assert data["dropped_findings"] == 0 and data["dropped_notes"] == 0
    assert (data["entries"], data["branches"], data["checkpoints"], data["erased"]) == (18, 1, 2, 1)
    assert list(data["steps"]) == [str(s) for s in STEPS]
    for step, info in data["steps"].items():
        assert set(info) == {"what", "checked", "violations"}
        assert info["what"] == STEPS[int(step)] and info["violations"] == 0
        if int(step) in (1, 2, 3, 4, 5, 6, 10):
            assert info["checked"] is True
    assert {n["step"] for n in data["notes"]} == {4, 6}  # erased-by note, trust on first use
    for note in data["notes"]:
        assert note["severity"] == "note" and isinstance(note["message"], str)
    assert data["trusted"]["keys"] == "genesis (trust on first use)"


def test_finding_json_and_text() -> None:
    """A finding's JSON leaves out what is unknown; its text names step, branch and entry."""
    f = Finding(3, "prev does not match", "main", 7, expected="aa", actual="bb")
    assert f.to_json() == {
        "step": 3,
        "message": "prev does not match",
        "branch": "main",
        "seq": 7,
        "expected": "aa",
        "actual": "bb",
        "severity": "error",
    }
    assert str(f) == "step 3: branch main entry 7 prev does not match (expected aa, found bb)"
    bare = Finding(6, "bad key")
    assert bare.to_json() == {"step": 6, "message": "bad key", "severity": "error"}
    assert str(bare) == "step 6: bad key"


def test_failed_report_json_shape(small: Path, tmp_path: Path) -> None:
    """A violation appears in findings with step, branch, seq, expected and actual."""
    path = fresh_copy(small, tmp_path)
    db = apsw.Connection(str(path))
    db.execute("UPDATE entries SET hash = zeroblob(32) WHERE k = (1 << 40) | 4")
    db.close()
    data = verify_path(path, update_trusted=False).to_json()
    assert data["ok"] is False and data["steps"]["5"]["violations"] == 1
    (f,) = data["findings"]
    assert (f["step"], f["branch"], f["seq"], f["actual"]) == (5, "main", 4, "00" * 32)
    assert len(f["expected"]) == 64


def test_verify_raises_first_finding(small: Path, tmp_path: Path) -> None:
    """verify() raises an IntegrityError carrying the first finding's fields; audit() does not."""
    path = fresh_copy(small, tmp_path)
    db = apsw.Connection(str(path))
    db.execute("DELETE FROM entries WHERE k = (1 << 40) | 6")
    db.close()
    store = Store(path)
    try:
        report = audit(store, origin=ORIGIN, update_trusted=False)
        first = report.findings[0]
        with pytest.raises(IntegrityError) as info:
            verify(store, origin=ORIGIN, update_trusted=False)
    finally:
        store.close()
    err = info.value
    assert (err.step, err.branch, err.seq, err.expected, err.actual) == (
        first.step,
        first.branch,
        first.seq,
        first.expected,
        first.actual,
    )
    assert (err.step, err.seq) == (2, 7)


def test_progress_reports_every_entry(tmp_path: Path, make_ledger: Any) -> None:
    """progress is called with (done, total) and ends at (total, total)."""
    path = make_ledger(tmp_path, 9000)
    calls: list[tuple[int, int]] = []
    report = verify_path(path, progress=lambda d, t: calls.append((d, t)), update_trusted=False)
    assert report.ok
    assert calls[-1] == (9001, 9001) and calls[0][0] < 9001
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_findings_are_capped(tmp_path: Path, make_ledger: Any) -> None:
    """More than MAX_FINDINGS violations: the report keeps MAX_FINDINGS and says it cut."""
    path = make_ledger(tmp_path, MAX_FINDINGS + 50, checkpoint=False)
    db = apsw.Connection(str(path))
    db.execute("UPDATE entries SET hash = zeroblob(32)")
    db.close()
    report = verify_path(path, update_trusted=False)
    assert len(report.findings) == MAX_FINDINGS and report.truncated_findings
    assert report.dropped_findings >= 50 and report.to_json()["dropped_findings"] >= 50
    assert report.to_json()["truncated_findings"] is True
    assert report.violations(5) == sum(1 for f in report.findings if f.step == 5) + (
        report.dropped_by_step.get(5, 0)
    )


def test_dropped_findings_fail_the_report() -> None:
    """Past the cap a violation is counted, not kept, and the report still fails with it."""
    report = AuditReport()
    for i in range(MAX_FINDINGS + 7):
        report.add(Finding(4, f"content missing {i}", "main", i))
    report.findings = [f for f in report.findings if f.step != 4]  # a caller filtering
    assert report.dropped_findings == 7 and report.dropped_by_step == {4: 7}
    assert not report.ok and report.to_json()["ok"] is False
    first = report.first_failure()
    assert first is not None and "7 violation(s) found and not kept" in first.message
    with pytest.raises(IntegrityError, match="not kept"):
        report.raise_first()


def test_a_finding_after_the_scan_keeps_the_trusted_state(small: Path, tmp_path: Path) -> None:
    """A check that fails at finish (AfterScan) runs before a passing audit would move trust."""
    path = fresh_copy(small, tmp_path)
    state = TrustedState(tmp_path / "t.json")
    failing = AfterScan(lambda r: r.add(Finding(6, "a witness cosignature does not verify")), (6,))
    report = verify_path(path, trusted=state, checks=[failing])
    assert not report.ok and not (tmp_path / "t.json").exists()
    assert verify_path(path, trusted=state).ok and (tmp_path / "t.json").exists()


def test_trust_sources_and_updates(small: Path, tmp_path: Path) -> None:
    """Keys come from --vkey, else the trusted state, else the genesis; only a clean run
    records the newest checkpoint."""
    path = fresh_copy(small, tmp_path)
    state = tmp_path / "t.json"
    with Ledger.open(small) as ledger:  # the copy has no key file beside it
        vkey = ledger.vkey()
    assert verify_path(path, vkeys=[vkey], update_trusted=False).trusted["keys"] == "given"
    first = verify_path(path, trusted=TrustedState(state))
    assert first.trusted["keys"] == "genesis (trust on first use)"
    assert TrustedState(state).get(ORIGIN).vkeys == (vkey,)
    second = verify_path(path, trusted=TrustedState(state))
    assert second.trusted["keys"] == "trusted state"
    assert not any("trust on first use" in n.message for n in second.notes)
    before = state.read_bytes()
    db = apsw.Connection(str(path))
    db.execute("UPDATE checkpoints SET root = zeroblob(32)")
    db.close()
    assert not verify_path(path, trusted=TrustedState(state)).ok
    assert state.read_bytes() == before


def test_forked_history_against_trusted_state(tmp_path: Path, make_ledger: Any) -> None:
    """Another ledger under the same origin (a fork) fails the trusted key and root (6, 10)."""
    a = make_ledger(tmp_path, 20, name="a.db")
    b = make_ledger(tmp_path, 30, name="b.db", seed=5)
    state = tmp_path / "t.json"
    assert verify_path(a, trusted=TrustedState(state)).ok
    report = verify_path(b, trusted=TrustedState(state), update_trusted=False)
    steps = {f.step for f in report.findings}
    assert {6, 10} <= steps


def test_genesis_only_ledger_verifies(tmp_path: Path) -> None:
    """A new ledger (genesis and its first checkpoint) verifies."""
    Ledger.init(tmp_path / "g.db", origin=ORIGIN).close()
    report = verify_path(tmp_path / "g.db", update_trusted=False)
    assert report.ok and report.entries == 1 and report.checkpoints == 1


def test_replay_checks_are_fed_every_entry(small: Path, tmp_path: Path) -> None:
    """A ReplayCheck sees every decoded entry in order, finishes once, and its steps count."""

    class Counting:
        steps = (8,)

        def __init__(self) -> None:
            self.seen: list[int] = []
            self.finished = 0

        def feed(self, branch: str, entry: Entry, report: AuditReport) -> None:
            self.seen.append(entry.seq)

        def finish(self, report: AuditReport) -> None:
            self.finished += 1
            report.add(Finding(8, "replayed", "main"))

    check = Counting()
    report = verify_path(fresh_copy(small, tmp_path), checks=[check], update_trusted=False)
    assert check.seen == list(range(18)) and check.finished == 1
    assert 8 in report.steps_checked and report.to_json()["steps"]["8"]["violations"] == 1


# -- never crashing on garbage ---------------------------------------------------------------

BLOB = st.binary(max_size=48)
ENTRY_LIKE = st.builds(
    lambda seq, kind, type_, body, prev: encoding.encode(
        [1, prev, seq, "main", 5, kind, type_, body]
    ),
    st.integers(0, 20),
    st.sampled_from(["event", "op", "genesis", "x"]),
    st.sampled_from(
        ["EVENT", "TOMBSTONE", "GENESIS", "ASSERT", "BRANCH_CREATE", "KEY_ROTATE", "SNAPSHOT"]
    ),
    st.dictionaries(
        st.sampled_from(
            [
                "id",
                "payload",
                "content_commitment",
                "keys",
                "target_event_id",
                "origin",
                "ledger_id",
                "snapshot_every",
                "branch",
                "anchor",
            ]
        ),
        st.one_of(
            st.none(),
            st.integers(-5, 5),
            st.text(max_size=8),
            BLOB,
            st.lists(st.text(max_size=4), max_size=2),
            st.dictionaries(
                st.sampled_from(["target_event_id", "vkey", "seq"]),
                st.one_of(st.text(max_size=40), st.integers(-(2**63), 2**63), BLOB),
                max_size=2,
            ),
        ),
        max_size=6,
    ),
    st.one_of(st.just(bytes(32)), st.binary(min_size=32, max_size=32)),
)
INT = st.integers(-(2**63), 2**63 - 1)
TEXT = st.one_of(st.text(max_size=40), st.binary(max_size=20).map(lambda b: ("raw", b)))
ANY = st.one_of(st.none(), INT, st.floats(allow_nan=False), st.text(max_size=20), BLOB)

GARBAGE = {
    ("entries", "data"): st.one_of(BLOB, ENTRY_LIKE),
    ("entries", "hash"): BLOB,
    ("entries", "digest"): st.one_of(st.none(), BLOB),
    ("entries", "salt"): st.one_of(st.none(), BLOB),
    ("entries", "content"): st.one_of(st.none(), BLOB),
    ("entries", "erased_by"): st.one_of(st.none(), INT),
    ("nodes", "h"): BLOB,
    ("branches", "head"): BLOB,
    ("branches", "size"): INT,
    ("branches", "name"): TEXT,
    ("checkpoints", "note"): TEXT,
    ("checkpoints", "root"): BLOB,
    ("meta", "value"): ANY,
    ("event_ids", "k"): INT,
}
KEYS = {
    "entries": "k",
    "nodes": "k",
    "branches": "no",
    "checkpoints": "size",
    "meta": "key",
    "event_ids": "id",
}


def put(db: apsw.Connection, table: str, column: str, pk: Any, value: Any) -> None:
    if isinstance(value, tuple):  # bytes stored as (possibly invalid UTF-8) text
        sql, value = "CAST(? AS TEXT)", value[1]
    else:
        sql = "?"
    db.execute(f"UPDATE {table} SET {column} = {sql} WHERE {KEYS[table]} = ?", (value, pk))


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_audit_never_raises_on_garbage_rows(small: Path, data: st.DataObject) -> None:
    """Garbage of the column's type in 1-3 stored values: audit returns a report, never raises.

    Every SQLite type the STRICT schema admits is tried, including text that is not UTF-8
    and entry bytes that are canonical CBOR arrays with odd bodies (TOMBSTONE without a map
    payload, genesis keys that are not vkeys, ...). Only opening can refuse, with a
    StorageError, when the schema version itself is garbage.
    """
    with tempfile.TemporaryDirectory() as d:
        path = fresh_copy(small, Path(d))
        db = apsw.Connection(str(path))
        try:
            for _ in range(data.draw(st.integers(1, 3), label="changes")):
                table, column = data.draw(st.sampled_from(sorted(GARBAGE)), label="column")
                pks = [r[0] for r in db.execute(f"SELECT {KEYS[table]} FROM {table}")]
                pk = data.draw(st.sampled_from(pks), label="row")
                value = data.draw(GARBAGE[(table, column)], label="value")
                # NOT NULL or a primary key collision: SQLite itself refuses the change.
                with contextlib.suppress(apsw.ConstraintError):
                    put(db, table, column, pk, value)
        finally:
            db.close()
        try:
            report = verify_path(path, update_trusted=False, trusted=TrustedState(Path(d) / "t"))
        except StorageError:
            return
        json.dumps(report.to_json())


@pytest.mark.parametrize("size", [-9223372036854775807, -1, 1 << 63])
def test_an_out_of_range_stored_checkpoint_size_is_a_finding(
    small: Path, tmp_path: Path, size: int
) -> None:
    """A stored checkpoint size edited to a value no tree can have (negative, or past 2^63) is
    reported as a violation, on either backend, never a crash of the verifier."""
    path = fresh_copy(small, tmp_path)
    db = apsw.Connection(str(path))
    (largest,) = db.execute("SELECT max(size) FROM checkpoints").fetchone()
    # SQLite integers stop at 2^63-1: "past 2^63" is stored as the wrapped negative value.
    stored = size if size < 1 << 63 else size - (1 << 64)
    db.execute("UPDATE checkpoints SET size = ? WHERE size = ?", (stored, largest))
    assert db.changes() == 1
    db.close()
    report = verify_path(path, trusted=TrustedState(tmp_path / "t.json"), update_trusted=False)
    assert not report.ok
    assert any(f.step in (5, 6) for f in report.findings), [str(f) for f in report.findings]
