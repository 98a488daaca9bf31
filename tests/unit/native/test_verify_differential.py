"""Verify with the native core against verify with the reference, on the same files.

Random histories (events, operations, erasures, branches, checkpoints at random sizes, long
enough to cross the verifier's chunk and flush boundaries), then random damage to the file:
both backends must produce the same report, finding for finding, in the same order. The
attack fixtures of tests/integration/test_attacks.py are compared the same way there.
"""

from __future__ import annotations

import itertools
import random
import shutil
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger import _backend, encoding
from memroot.ledger.entries import OpInput
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import verify_path

pytest.importorskip("memroot._native", reason="the native core is not built")
if _backend.NATIVE is None:
    pytestmark = pytest.mark.skip(reason="MEMROOT_BACKEND=python: nothing native to compare")

ORIGIN = "example.org/native-diff"


def both(path: Path, **kw: Any) -> dict[str, Any]:
    """Verify ``path`` with each backend; assert the reports are identical; return one."""
    mine = verify_path(path, update_trusted=False, **kw).to_json()
    with _backend.reference():
        ref = verify_path(path, update_trusted=False, **kw).to_json()
    assert mine == ref
    return mine


def fork(ledger: Ledger, name: str, parent: str = "main") -> None:
    op = OpInput(
        op_type="BRANCH_CREATE",
        actor_id="a",
        actor_type="AI_AGENT",
        namespace_id="ns",
        policy_version="p/1",
        payload={"branch_id": name, "branch_type": "SIMULATION", "purpose": "p"},
    )
    ledger.fork(op, parent=parent, genesis={"branch_type": "SIMULATION"})


def history(path: Path, inputs: Any, seed: int, n: int) -> str:
    """A random history of about ``n`` entries on main and a branch; return the vkey."""
    rng = random.Random(seed)
    with Ledger.init(path, origin=ORIGIN, hooks=()) as ledger:
        events: list[str] = []
        done = 0
        while done < n:
            step = rng.choice([1, 3, 50, 700])
            items = inputs.mixed(step, seed=rng.randrange(1 << 30))
            for a in ledger.append_batch(items):
                if a.kind.value == "event":
                    events.append(a.id)
            done += step
            if rng.random() < 0.3:
                ledger.checkpoint()
            if events and rng.random() < 0.2:
                ledger.append(inputs.tombstone(events.pop(rng.randrange(len(events)))))
        ledger.append(inputs.tombstone(events.pop(0)))
        fork(ledger, "side")
        ledger.append_batch(inputs.mixed(40, seed=seed), branch="side")
        ledger.checkpoint("side")
        ledger.checkpoint()
        return ledger.vkey()


@pytest.fixture(scope="module")
def histories(tmp_path_factory: pytest.TempPathFactory, inputs: Any) -> list[tuple[Path, str]]:
    out = []
    for seed, n in ((1, 300), (2, 9000)):
        path = tmp_path_factory.mktemp("hist") / f"h{seed}.db"
        out.append((path, history(path, inputs, seed, n)))
    return out


def test_clean_histories_verify_identically(histories: list[tuple[Path, str]]) -> None:
    for path, vkey in histories:
        report = both(path, vkeys=(vkey,))
        assert report["ok"], report["findings"]
        assert report["erased"] > 0


COLUMNS = ["hash", "data", "digest", "salt", "content", "erased_by"]


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_damaged_histories_verify_identically(
    histories: list[tuple[Path, str]], tmp_path: Path, data: st.DataObject
) -> None:
    """Flipped bytes, deleted, swapped or nulled rows: the same findings from both backends."""
    src, vkey = histories[data.draw(st.integers(0, len(histories) - 1))]
    path = tmp_path / "copy.db"
    shutil.copy2(src, path)
    db = apsw.Connection(str(path))
    keys = [k for (k,) in db.execute("SELECT k FROM entries ORDER BY k")]
    for _ in range(data.draw(st.integers(1, 3))):
        # Everything is drawn before the file is looked at, so the draws never depend on it.
        k, other = data.draw(st.sampled_from(keys)), data.draw(st.sampled_from(keys))
        how = data.draw(st.sampled_from(["flip", "delete", "null", "swap"]))
        column = data.draw(st.sampled_from(COLUMNS))
        pos, xor = data.draw(st.integers(0, 1 << 16)), data.draw(st.integers(1, 255))
        if how == "delete":
            db.execute("DELETE FROM entries WHERE k = ?", (k,))
        elif how == "null" and column not in ("data", "hash"):  # NOT NULL columns
            db.execute(f"UPDATE entries SET {column} = NULL WHERE k = ?", (k,))
        elif how == "swap":
            a = db.execute(f"SELECT {column} FROM entries WHERE k = ?", (k,)).fetchone()
            b = db.execute(f"SELECT {column} FROM entries WHERE k = ?", (other,)).fetchone()
            if a is not None and b is not None:
                db.execute(f"UPDATE entries SET {column} = ? WHERE k = ?", (b[0], k))
                db.execute(f"UPDATE entries SET {column} = ? WHERE k = ?", (a[0], other))
        else:
            row = db.execute(f"SELECT {column} FROM entries WHERE k = ?", (k,)).fetchone()
            if row is not None and isinstance(row[0], bytes) and row[0]:
                raw = bytearray(row[0])
                raw[pos % len(raw)] ^= xor
                db.execute(f"UPDATE entries SET {column} = ? WHERE k = ?", (bytes(raw), k))
    # The caches beside the entries: a tree node and an event index row.
    node_keys = [k for (k,) in db.execute("SELECT k FROM nodes ORDER BY k")]
    id_keys = [i for (i,) in db.execute("SELECT id FROM event_ids ORDER BY id")]
    what = data.draw(st.sampled_from(["none", "node_flip", "node_delete", "index_k", "index_del"]))
    node, ident = data.draw(st.sampled_from(node_keys)), data.draw(st.sampled_from(id_keys))
    if what == "node_flip":
        db.execute("UPDATE nodes SET h = ? WHERE k = ?", (bytes(32), node))
    elif what == "node_delete":
        db.execute("DELETE FROM nodes WHERE k = ?", (node,))
    elif what == "index_k":
        db.execute("UPDATE event_ids SET k = k + 1 WHERE id = ?", (ident,))
    elif what == "index_del":
        db.execute("DELETE FROM event_ids WHERE id = ?", (ident,))
    db.close()
    both(path, vkeys=(vkey,))


@pytest.mark.parametrize("type_", ["BRANCH_CREATE", "KEY_ROTATE", "TOMBSTONE", "GENESIS", "X"])
def test_events_retyped_verify_identically(
    histories: list[tuple[Path, str]], tmp_path: Path, type_: str
) -> None:
    """An event entry rewritten with another type (and a payload) is checked alike."""
    src, vkey = histories[0]
    path = tmp_path / "retyped.db"
    shutil.copy2(src, path)
    db = apsw.Connection(str(path))
    rows = db.execute("SELECT k, data FROM entries ORDER BY k LIMIT 40").fetchall()
    for k, data in rows:
        value = encoding.decode(data)
        if value[5] != "event":
            continue
        value[6] = type_
        value[7]["payload"] = {"branch_id": "side", "target_event_id": value[7]["id"]}
        raw = encoding.encode(value)
        db.execute("UPDATE entries SET data = ?, hash = ? WHERE k = ?", (raw, leaf_hash(raw), k))
        break
    db.close()
    report = both(path, vkeys=(vkey,))
    assert not report["ok"]


def test_event_index_with_imported_ids_verifies_identically(tmp_path: Path, inputs: Any) -> None:
    """Events with ids of their own spread over the whole index (the span scan's fallback).

    9,000 events, half with random ids: the 4,096 events of a verify batch span the whole
    index, so the span scan would read more than twice as many rows and the IN look-up runs.
    """
    import uuid

    rng = random.Random(5)
    path = tmp_path / "ids.db"
    with Ledger.init(path, origin=ORIGIN, hooks=()) as ledger:
        for _ in range(3):
            items = [
                inputs.event(rng, i, id=str(uuid.UUID(int=rng.getrandbits(128), version=4)))
                if i % 2
                else inputs.event(rng, i)
                for i in range(3000)
            ]
            ledger.append_batch(items)
        vkey = ledger.vkey()
    assert both(path, vkeys=(vkey,))["ok"]
    db = apsw.Connection(str(path))
    (victim,) = db.execute("SELECT id FROM event_ids ORDER BY id LIMIT 1 OFFSET 7").fetchone()
    db.execute("UPDATE event_ids SET k = k + 1 WHERE id = ?", (victim,))
    db.close()
    report = both(path, vkeys=(vkey,))
    assert [f["step"] for f in report["findings"]] == [5]


def test_the_reader_thread_is_used_only_on_the_auditors_state(tmp_path: Path, inputs: Any) -> None:
    from memroot.ledger.backends.store import Store, entry_key
    from memroot.ledger.verify.store_source import _ChunkReader, _row_chunks

    path = tmp_path / "l.ledger"
    with Ledger.init(path, hooks=()) as ledger:
        ledger.append_batch(inputs.mixed(5000, seed=5))
        store = Store(path, readonly=True)
        try:
            lo, hi = entry_key(1, 0), entry_key(1, (1 << 40) - 1)
            with store.read():
                reader = _ChunkReader(store, lo, hi, 1)
                try:
                    assert reader.same_state()
                    got = list(reader)
                    assert [rows for rows, *_ in got] == list(_row_chunks(store.db, lo, hi))
                    # With each chunk, the stored nodes its leaves complete (by position).
                    assert [done for _, _, done, *_ in got] == list(
                        itertools.accumulate(len(rows) for rows, *_ in got)
                    )
                    read_ahead: dict[int, bytes] = {}
                    for _, nodes, *_ in got:
                        assert not read_ahead.keys() & nodes.keys()
                        read_ahead.update(nodes)
                    stored = dict(store.db.execute("SELECT k, h FROM nodes WHERE k >> 48 = 1"))
                    # Levels >= 2 only (NODE_MIN_LEVEL): all but the 2,500 nodes of level 1.
                    assert read_ahead == stored
                    assert len(stored) == 5001 - (5001).bit_count() - 5001 // 2
                    # And the event index rows of each chunk's events: the check of a chunk's
                    # events finds every one where the index has it, reading nothing.
                    assert _backend.NATIVE is not None
                    for rows, _, _, span, digests in got:
                        assert span is not None
                        assert digests == _backend.NATIVE.content_digests_ok(rows)
                        assert digests.count(1) == sum(r[5] is not None for r in rows)
                        events = _chunk_events(rows)
                        assert (
                            _backend.NATIVE.event_index_check_ahead(events, entry_key(1, 0), [span])
                            == _backend.NATIVE.event_index_check(
                                events, entry_key(1, 0), _index_rows(store)
                            )
                            == []
                        )
                finally:
                    reader.close()
                ledger.append(inputs.event(random.Random(1), 1))  # commits after our snapshot
                reader = _ChunkReader(store, lo, hi, 1)
                try:
                    assert not reader.same_state()
                finally:
                    reader.close()
                # An audit of this snapshot reads its rows itself and sees 5001 entries.
            report = both(path)
            assert report["entries"] == 5002
        finally:
            store.close()


def _chunk_events(rows: list[Any]) -> list[tuple[str, int]]:
    """The ``(event id, seq)`` of the events among store row tuples, by the reference."""
    out = []
    for k, _, data, *_ in rows:
        value = encoding.decode(data)
        if value[5] == "event":
            out.append((value[7]["id"], k & ((1 << 40) - 1)))
    return out


def _index_rows(store: Any) -> list[tuple[bytes, int]]:
    return store.db.execute("SELECT id, k FROM event_ids").fetchall()  # type: ignore[no-any-return]


def test_the_event_index_read_ahead_answers_only_what_it_covers(
    tmp_path: Path, inputs: Any
) -> None:
    """``event_index_check_ahead`` gives ``event_index_check``'s answer or, if unsure, None.

    None for an event whose id lies outside every span read ahead, an id that is not
    canonical UUID text, or an id that repeats (the reference's look-up decides those); a
    misplaced, missing or foreign index row inside a span is reported as the reference does.
    """
    from memroot.ledger.backends.store import Store, entry_key

    native = _backend.NATIVE
    assert native is not None
    path = tmp_path / "l.ledger"
    with Ledger.init(path, hooks=()) as ledger:
        ledger.append_batch(inputs.mixed(300, seed=3))
    store = Store(path, readonly=True)
    try:
        rows = store.db.execute(
            "SELECT k, hash, data, digest, salt, content, erased_by FROM entries ORDER BY k"
        ).fetchall()
        events = _chunk_events(rows)
        index = _index_rows(store)
    finally:
        store.close()
    base = entry_key(1, 0)
    assert native.row_event_ids(rows[:1]) is None  # the genesis only: no event
    count, lo, hi = native.row_event_ids(rows)
    raws = sorted(bytes.fromhex(e.replace("-", "")) for e, _ in events)
    assert (count, lo, hi) == (len(events), raws[0], raws[-1])
    span = native.event_index_span(lo, hi, index)
    # Split by id, not by position: ids of one batch share a clock reading (their order is
    # random), so a span of the first half by position could cover the second half too.
    by_id = sorted(events, key=lambda e: bytes.fromhex(e[0].replace("-", "")))
    first, second = by_id[: len(by_id) // 2], by_id[len(by_id) // 2 :]
    half = native.event_index_span(*_span_of(first), index)
    assert native.event_index_check_ahead(events, base, [span]) == []
    assert native.event_index_check_ahead(events, base, [half]) is None  # not covered
    assert native.event_index_check_ahead(first, base, [half]) == []
    assert native.event_index_check_ahead(second, base, [half, span]) == []
    assert native.event_index_check_ahead([*events, events[0]], base, [span]) is None
    odd = [(events[0][0].upper(), events[0][1])]
    assert native.event_index_check_ahead(odd, base, [span]) is None
    # Damaged index rows: moved, missing, and one left out of a span that claims it all.
    moved = [(i, k + 1) if i == raws[3] else (i, k) for i, k in index]
    missing = [(i, k) for i, k in index if i != raws[5]]
    for damaged in (moved, missing):
        want = native.event_index_check(events, base, damaged)
        assert want
        assert (
            native.event_index_check_ahead(events, base, [native.event_index_span(lo, hi, damaged)])
            == want
        )
    with pytest.raises(native.Reject):
        native.event_index_span(lo[:8], hi, index)


def test_the_content_address_flags_read_ahead(tmp_path: Path, inputs: Any) -> None:
    """``content_digests_ok``: 1 exactly where a row's digest is the BLAKE3 of its content."""
    from memroot.ledger.hashing import content_digest

    native = _backend.NATIVE
    assert native is not None
    path = tmp_path / "l.ledger"
    with Ledger.init(path, hooks=()) as ledger:
        ledger.append_batch(inputs.mixed(50, seed=4))
    db = apsw.Connection(str(path))
    rows = db.execute(
        "SELECT k, hash, data, digest, salt, content, erased_by FROM entries ORDER BY k"
    ).fetchall()
    db.close()
    events = [i for i, r in enumerate(rows) if r[5] is not None]
    assert len(events) > 3
    a, b, c = events[:3]
    rows[a] = (*rows[a][:5], rows[a][5] + b"!", rows[a][6])  # content edited
    rows[b] = (*rows[b][:3], None, *rows[b][4:])  # no stored address
    rows[c] = list(rows[c])  # not a row tuple
    want = bytes(
        i not in (a, b, c)
        and isinstance(r[3], bytes)
        and isinstance(r[5], bytes)
        and content_digest(r[5]) == r[3]
        for i, r in enumerate(rows)
    )
    assert native.content_digests_ok(rows) == want
    assert want.count(1) == len(events) - 3


def _span_of(events: list[tuple[str, int]]) -> tuple[bytes, bytes]:
    raws = [bytes.fromhex(e.replace("-", "")) for e, _ in events]
    return min(raws), max(raws)


def test_the_node_check_against_the_read_ahead_takes_the_nodes_out() -> None:
    """``node_mismatches_ahead`` is ``mismatches`` on ``node_keys``, then pops what it checked."""
    native = _backend.NATIVE
    assert native is not None
    nodes = [(1, i, bytes([i]) * 32) for i in range(6)] + [(2, 1, b"\x09" * 32)]
    keys = native.node_keys(3, nodes, True)
    found = {k: h for k, (_, _, h) in zip(keys, nodes, strict=True)}
    found[keys[2]] = b"\x00" * 32  # a stored node that differs
    del found[keys[4]]  # and one missing
    found[12345] = b"other"  # a node read ahead for later leaves
    want = [(i, found.get(keys[i])) for i in native.mismatches(keys, [h for *_, h in nodes], found)]
    assert want == [(2, b"\x00" * 32), (4, None)]
    assert native.node_mismatches_ahead(3, [*nodes, nodes[0]], found, True) == want
    assert found == {12345: b"other"}
    with pytest.raises(native.Reject):
        native.node_mismatches_ahead(1 << 15, nodes, found, True)
