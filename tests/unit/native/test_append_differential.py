"""The native batch append against the reference append loop, on copies of one ledger.

A ledger is created once and copied; one copy is appended to with the native core (which
builds runs of plain events in one call, ``native.build_events``), the other with the
reference (``_backend.reference()``), given the ids, timestamps and salts the native run
chose. Every stored byte must then be the same: entries (data, hash, digest, salt, content),
the event index, the tree nodes and the chain head. Refusals must be the reference's, with
nothing written.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger import _appending as appending_module
from memroot.ledger import _backend
from memroot.ledger._state import _MAX_ENTRY_BYTES, Appended, AppendedRun, PackedEvents
from memroot.ledger.backends.store import NODE_MIN_LEVEL, unpack_entry_row, unpack_keyed
from memroot.ledger.entries import (
    MAX_SNAPSHOT_EVERY,
    TS_MAX_AHEAD_US,
    EventInput,
    Kind,
    OpInput,
    new_uuid,
    now_us,
)
from memroot.ledger.errors import RefusedError, ValidationError
from memroot.ledger.ledger import Ledger

pytest.importorskip("memroot._native", reason="the native core is not built")
if _backend.NATIVE is None:
    pytestmark = pytest.mark.skip(reason="MEMROOT_BACKEND=python: nothing native to compare")

TABLES = (
    "SELECT k, hash, data, digest, salt, content, erased_by FROM entries ORDER BY k",
    "SELECT id, k FROM event_ids ORDER BY id",
    "SELECT k, h FROM nodes ORDER BY k",
    "SELECT no, name, size, head FROM branches ORDER BY no",
)


def dump(ledger: Ledger) -> list[list[Any]]:
    return [list(ledger.store.db.execute(q)) for q in TABLES]


def make_pair(where: Path) -> tuple[Path, Path]:
    """Two copies of one fresh ledger (same genesis and key)."""
    a, b = where / "a.ledger", where / "b.ledger"
    Ledger.init(a, hooks=()).close()
    shutil.copy(a, b)
    shutil.copy(f"{a}.key", f"{b}.key")
    return a, b


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """Two copies of one fresh ledger (same genesis and key)."""
    return make_pair(tmp_path)


def salts_of(ledger: Ledger) -> dict[int, bytes]:
    """The commitment salt of every event not erased, by seq."""
    return {
        r.seq: bytes(r.salt)
        for r in ledger.store.iter_entry_rows(ledger.branch_row().no)
        if r.salt is not None
    }


def replay_reference(
    path: Path,
    batches: list[list[EventInput | OpInput]],
    done: Ledger,
    salts: dict[int, bytes] | None = None,
    hooks: tuple[()] | None = (),
) -> Ledger:
    """Append ``batches`` to ``path`` with the reference, with the ids, ts and salts of ``done``.

    ``salts`` holds the salts of events erased since (taken before the erasure).
    """
    salts = {**(salts or {}), **salts_of(done)}
    rows = list(done.store.iter_entry_rows(done.branch_row().no, 1))
    entries = [done.entry(r.seq) for r in rows]
    ref = Ledger.open(path, hooks=hooks)
    pos = 0
    with _backend.reference():
        for batch in batches:
            fixed: list[EventInput | OpInput] = []
            given = b""
            for item in batch:
                e, r = entries[pos], rows[pos]
                pos += 1
                fixed.append(dataclasses.replace(item, id=e.body["id"], ts=e.ts))
                given += salts.get(r.seq, bytes(32))  # the reference takes salt n for item n
            saved = appending_module.os
            fake = types.SimpleNamespace(urandom=lambda n, s=given: s[:n])
            appending_module.os = fake  # type: ignore[assignment]
            try:
                ref.append_batch(fixed)
            finally:
                appending_module.os = saved
    return ref


def test_native_loop_is_in_use() -> None:
    assert appending_module._N is not None
    with _backend.reference():
        assert appending_module._N is None


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 1 << 30), sizes=st.lists(st.integers(1, 300), min_size=1, max_size=4))
def test_native_batches_store_the_reference_bytes(inputs: Any, seed: int, sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory() as where:
        a, b = make_pair(Path(where))
        rng = random.Random(seed)
        batches: list[list[EventInput | OpInput]] = []
        known: list[str] = []  # ids given by the requests, not yet erased
        earlier: list[str] = []  # those of them appended by an earlier batch
        base = now_us() - 10_000_000
        for size in sizes:
            batch = inputs.mixed(size, seed=rng.randrange(1 << 30))
            # Some requests carry their own ts: the native run stops there and the reference
            # loop takes that item, then the native run resumes.
            for i, item in enumerate(batch):
                if rng.random() < 0.1:
                    batch[i] = dataclasses.replace(item, ts=base + i)
                if isinstance(item, EventInput) and rng.random() < 0.1:
                    # An id of its own, and a parent named by id: the reference loop takes
                    # both and checks them against the events of the batch.
                    parent = rng.choice(known) if known and rng.random() < 0.5 else None
                    batch[i] = dataclasses.replace(batch[i], id=new_uuid(), parent_event_id=parent)
                    known.append(batch[i].id)
            if earlier and rng.random() < 0.5:  # erase an event of an earlier batch
                target = earlier.pop(0)
                known.remove(target)
                batch.append(inputs.tombstone(target))
            earlier = list(known)
            batches.append(batch)
        with Ledger.open(a, hooks=()) as native:
            salts: dict[int, bytes] = {}
            for batch in batches:
                native.append_batch(batch)
                salts.update(salts_of(native))
            with replay_reference(b, batches, native, salts) as ref:
                assert dump(native) == dump(ref)
                assert native.root() == ref.root()
                # Both store the levels >= NODE_MIN_LEVEL only, each node once (FORMAT.md 4).
                levels = {k & 63 for k, _ in dump(native)[2]}  # node_key: the level in bits 0-5
                assert not levels or min(levels) >= NODE_MIN_LEVEL
                size = native.store.branch("main").size
                assert len(dump(native)[2]) == sum(size >> lv for lv in range(NODE_MIN_LEVEL, 42))


def test_unicode_floats_and_nested_maps_match(pair: tuple[Path, Path], inputs: Any) -> None:
    a, b = pair
    rng = random.Random(7)
    batch: list[EventInput | OpInput] = [
        inputs.event(
            rng,
            i,
            content="héllo \u2603 " * i,
            stream="s\u00e9ssion",
            metadata={
                "f": 1.5,
                "big": 2**64 - 1,
                "neg": -(2**64),
                "z": {"b": [1.1, None, b"x"], "a": ""},
            },
            context={"k": 1e300, "kk": -0.0},
        )
        for i in range(20)
    ]
    with Ledger.open(a, hooks=()) as native:
        native.append_batch(batch)
        with replay_reference(b, [batch], native) as ref:
            assert dump(native) == dump(ref)


@pytest.mark.parametrize("backend", ["native", "reference"])
def test_a_refused_event_after_plain_ones_writes_nothing(
    tmp_path: Path, inputs: Any, backend: str
) -> None:
    rng = random.Random(3)
    late = inputs.event(rng, 9, ts=now_us() + TS_MAX_AHEAD_US + 60_000_000)
    with Ledger.init(tmp_path / "l.ledger", hooks=()) as ledger:
        before = dump(ledger)
        with (
            _backend.reference() if backend == "reference" else _nothing(),
            pytest.raises(ValidationError, match="ahead of the clock") as info,
        ):
            ledger.append_batch([inputs.event(rng, i) for i in range(5)] + [late])
        assert info.value.field == "ts"
        assert dump(ledger) == before
        # The cached right edge is still the stored one: the next append lands after it.
        ledger.append(inputs.event(rng, 10))
        assert ledger.size() == 2


def test_an_oversized_event_is_refused_by_the_reference(tmp_path: Path, inputs: Any) -> None:
    rng = random.Random(4)
    huge = inputs.event(rng, 1, metadata={"blob": "x" * (1024 * 1024 + 2000)})
    with Ledger.init(tmp_path / "l.ledger", hooks=()) as ledger:
        with pytest.raises(ValidationError, match="limit is"):
            ledger.append_batch([inputs.event(rng, 0), huge])
        assert ledger.size() == 1


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# -- with the append hooks: the native runs handed to every hook (``apply_events``) ------------

# Derived tables whose rows hold nothing random (no salt, signature or clock of their own):
# every table but the ledger's signed checkpoints and meta.
_UNCOMPARED = frozenset({"checkpoints", "meta"})


def dump_all(ledger: Ledger) -> dict[str, list[Any]]:
    db = ledger.store.db
    names = [
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name"
        )
    ]
    return {
        n: sorted(map(tuple, db.execute(f'SELECT * FROM "{n}"')), key=repr)
        for n in names
        if n not in _UNCOMPARED
    }


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 1 << 30), sizes=st.lists(st.integers(1, 300), min_size=1, max_size=3))
def test_hooked_native_batches_store_the_reference_bytes(
    inputs: Any, seed: int, sizes: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as where:
        a, b = Path(where) / "a.ledger", Path(where) / "b.ledger"
        # No automatic snapshot (its id and ts are the clock's): every entry is a request's.
        Ledger.init(a, snapshot_every=MAX_SNAPSHOT_EVERY).close()
        shutil.copy(a, b)
        shutil.copy(f"{a}.key", f"{b}.key")
        rng = random.Random(seed)
        batches: list[list[EventInput | OpInput]] = []
        known: list[str] = []
        earlier: list[str] = []
        base = now_us() - 10_000_000
        for size in sizes:
            batch = inputs.mixed(size, seed=rng.randrange(1 << 30))
            for i, item in enumerate(batch):
                if rng.random() < 0.05:
                    batch[i] = dataclasses.replace(item, ts=base + i)
                if isinstance(item, EventInput) and rng.random() < 0.1:
                    parent = rng.choice(known) if known and rng.random() < 0.5 else None
                    batch[i] = dataclasses.replace(batch[i], id=new_uuid(), parent_event_id=parent)
                    known.append(batch[i].id)
            if earlier and rng.random() < 0.5:
                target = earlier.pop(0)
                known.remove(target)
                batch.append(inputs.tombstone(target))
            earlier = list(known)
            batches.append(batch)
        with Ledger.open(a) as native:
            assert native.hooks and all(hasattr(h, "apply_events") for h in native.hooks)
            salts: dict[int, bytes] = {}
            for batch in batches:
                native.append_batch(batch)
                salts.update(salts_of(native))
            with replay_reference(b, batches, native, salts, hooks=None) as ref:
                assert dump(native) == dump(ref)
                assert dump_all(native) == dump_all(ref)
                assert native.root() == ref.root()


def test_runs_end_where_the_reference_takes_its_automatic_snapshots(
    tmp_path: Path, inputs: Any
) -> None:
    rng = random.Random(5)
    kinds = {}
    for backend in ("native", "reference"):
        with (
            _backend.reference() if backend == "reference" else _nothing(),
            Ledger.init(tmp_path / f"{backend}.ledger", snapshot_every=5) as ledger,
        ):
            ledger.append_batch([inputs.event(rng, i) for i in range(23)])
            ledger.append_batch([inputs.event(rng, i, namespace_id="ns-a") for i in range(3)])
            kinds[backend] = [
                (e.type, e.body["payload"]["high_water"]["seq"] if e.type == "SNAPSHOT" else None)
                for e in ledger.entries(0, ledger.size())
            ]
    assert kinds["native"] == kinds["reference"]
    assert [k for k in kinds["native"] if k[0] == "SNAPSHOT"]


class _Recorder:
    """A hook that records what it is handed; with ``batch``, it takes runs of events."""

    def __init__(self, log: list[tuple[str, int]], name: str) -> None:
        self.log, self.name = log, name

    def install(self, db: Any) -> None:
        pass

    def apply(self, db: Any, ledger: Ledger, entry: Any, content: str | None) -> list[OpInput]:
        self.log.append((self.name, entry.seq))
        return []


class _RunRecorder(_Recorder):
    def apply_events(
        self, db: Any, ledger: Ledger, entries: list[Any], contents: list[str]
    ) -> list[OpInput]:
        assert [type(c) for c in contents] == [str] * len(entries)
        self.log.append((self.name + "-run", len(entries)))
        return []


def test_a_hook_without_apply_events_sees_every_event_in_turn(tmp_path: Path, inputs: Any) -> None:
    rng = random.Random(6)
    Ledger.init(tmp_path / "l.ledger", hooks=()).close()
    log: list[tuple[str, int]] = []
    with Ledger.open(
        tmp_path / "l.ledger", hooks=[_RunRecorder(log, "r"), _Recorder(log, "p")]
    ) as led:
        led.append_batch([inputs.event(rng, i, metadata=None, context=None) for i in range(3)])
    # One event at a time to every hook, in hook order, as the reference loop does.
    assert log == [("r", 1), ("p", 1), ("r", 2), ("p", 2), ("r", 3), ("p", 3)]
    log.clear()
    with Ledger.open(tmp_path / "l.ledger", hooks=[_RunRecorder(log, "r")]) as led:
        led.append_batch([inputs.event(rng, i, metadata=None, context=None) for i in range(3)])
    assert log == [("r-run", 3)]


@pytest.mark.parametrize("backend", ["native", "reference"])
@pytest.mark.parametrize("hooks", [(), None])
def test_an_own_id_taken_is_refused_after_the_events_before_it(
    tmp_path: Path, inputs: Any, backend: str, hooks: tuple[()] | None
) -> None:
    rng = random.Random(8)
    stored, fresh = new_uuid(), new_uuid()
    Ledger.init(tmp_path / "l.ledger", hooks=hooks).close()
    with (
        _backend.reference() if backend == "reference" else _nothing(),
        Ledger.open(tmp_path / "l.ledger", hooks=hooks) as ledger,
    ):
        ledger.append(inputs.event(rng, 0, id=stored))
        before = dump(ledger)
        for batch in (
            [inputs.event(rng, 1), inputs.event(rng, 2, id=fresh), inputs.event(rng, 3, id=stored)],
            [inputs.event(rng, 4, id=fresh), inputs.event(rng, 5), inputs.event(rng, 6, id=fresh)],
        ):
            taken = batch[-1].id
            with pytest.raises(RefusedError, match=f"an event with id {taken} already exists"):
                ledger.append_batch(batch)
            assert dump(ledger) == before
        done = ledger.append_batch([inputs.event(rng, 7, id=fresh), inputs.event(rng, 8)])
        assert done[0].id == fresh and ledger.find_event(fresh) == ("main", 2)


def test_packed_runs_hold_the_rows_build_events_makes(inputs: Any) -> None:
    """build_events' packed rows, events and nodes unpack to its unpacked ones."""
    native = appending_module._N
    assert native is not None
    rng = random.Random(11)
    base = now_us() - 1_000_000
    # Own ids and ts: both calls then build the same entries from the same randomness.
    items = [inputs.event(rng, i, id=new_uuid(), ts=base + i) for i in range(40)]
    items[3] = dataclasses.replace(items[3], content="")  # empty content stays a blob
    queue = list(reversed(items))
    rand = bytes(rng.randrange(256) for _ in range(42 * len(items)))
    args = (queue, EventInput, Appended, Kind.EVENT, "main", 0, 1, bytes(32), None, now_us())
    tail = (_MAX_ENTRY_BYTES, rand)
    plain = native.build_events(*args, *tail)
    packed = native.build_events(*args, *tail, None, True)
    assert packed[0] == plain[0] == len(items)
    assert [unpack_entry_row(r[0], p) for r, p in zip(plain[1], packed[1], strict=True)] == plain[1]
    assert unpack_keyed(*packed[2], 16) == plain[2]
    assert packed[3] == b"".join(plain[3])
    assert AppendedRun([PackedEvents("main", 1, packed[3], packed[4])]) == plain[4]
    assert packed[5] == plain[5] and packed[6:] == (None, None, True) == plain[6:]
    hashes = [bytes(32)]  # a tree of size 1
    rows = native.compact_append_rows(0, 1, hashes, packed[3], NODE_MIN_LEVEL, True)
    pack = native.compact_append_pack(0, 1, hashes, packed[3], NODE_MIN_LEVEL, True)
    assert pack[0] == rows[0]
    assert [(k, h) for h, k in unpack_keyed(pack[2], pack[1], 32)] == rows[1]


def test_an_event_erased_in_its_own_batch_matches_the_reference(
    pair: tuple[Path, Path], inputs: Any
) -> None:
    """A TOMBSTONE of an event its own batch packed natively stores the reference's bytes."""
    a, b = pair
    rng = random.Random(12)
    target = new_uuid()
    batch: list[EventInput | OpInput] = [inputs.event(rng, i) for i in range(5)]
    batch[2] = dataclasses.replace(batch[2], id=target)
    batch.append(inputs.tombstone(target))
    batch += [inputs.event(rng, i) for i in range(5, 8)]
    drawn: list[bytes] = []  # the randomness of the native runs: the target's salt is in it

    def urandom(n: int) -> bytes:
        drawn.append(os.urandom(n))
        return drawn[-1]

    saved = appending_module.os
    appending_module.os = types.SimpleNamespace(urandom=urandom)  # type: ignore[assignment]
    try:
        with Ledger.open(a, hooks=()) as native:
            before = native.store.branch("main").size
            native.append_batch(batch[:2])
            drawn.clear()
            native.append_batch(batch[2:])  # a native run from the target, then the TOMBSTONE
    finally:
        appending_module.os = saved
    with Ledger.open(a, hooks=()) as native:
        erased = native.store.entry_row(native.branch_row().no, before + 2)
        assert erased.content is None and erased.salt is None
        assert erased.erased_by == before + 5
        salts = {before + 2: drawn[0][:32]}  # the run's first event: the first 32 bytes
        with replay_reference(b, [batch[:2], batch[2:]], native, salts) as ref:
            assert dump(native) == dump(ref)
