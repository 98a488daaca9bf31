"""A replay's fold of ``main`` answers its gated reads from the rows it keeps (``gated._KEPT``).

``rebuild`` and verify's step 9 fold ``main`` into fresh tables through one ``complete``
holder (``gated.Pending``), which keeps every ``mem_gated`` row of the fold by object: the
operations' gated reads (``Folder``, ``own_view_state`` of FALSIFY / MARK_STALE / RESTORE)
read those instead of writing what is held and querying the table, and a walk of the
conversation tree writes only the ``mem_conv`` rows. With ``_KEPT`` off every read writes
everything held and queries, as the append path does: the reference. Random histories with
conversation links, evidence on lifecycle and falsification operations, supersedes, dedups,
erasures, refusals and a fork must rebuild to the same tables, row for row, and digests both
ways, and step 9 must say the same; a history appended through the default hooks (the
per-entry path) must rebuild to the state it stored.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger.backends.store import Store
from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import audit
from memroot.memory_root import stack
from memroot.memory_root.falsify import OBJECT
from memroot.memory_root.falsify.api import POLICY_VERSION
from memroot.memory_root.falsify.replay import StatesRebuild
from memroot.memory_root.tables_check import LayerTablesCheck, LayerTablesRebuild
from memroot.projections import gated
from memroot.projections import requests as rq
from memroot.projections.replay import MemoryReplayCheck, rebuild
from tests._derived import derived_tables
from tests.unit.native.test_event_rows_differential import _event, _uuid, append_each, append_fork

_SETTINGS = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_AGENT = rq.Actor("alice", "HUMAN_USER", "ns")
_STATE_OPS = ("FALSIFY", "MARK_STALE", "RESTORE")


def _state_op(op_type: str, target: str, evidence: list[str]) -> OpInput:
    payload: dict[str, Any] = {"reason": "re-checked"}
    if evidence:
        payload["evidence_ids"] = evidence
    return OpInput(
        op_type=op_type,
        actor_id="auditor",
        actor_type="HUMAN_USER",
        namespace_id="ns",
        payload=payload,
        policy_version=POLICY_VERSION,
        target_id=target,
        target_type=OBJECT,
    )


def _history(rng: random.Random, n: int) -> list[EventInput | OpInput]:
    """Events in conversation trees and operations on their objects, with provenance."""
    items: list[EventInput | OpInput] = []
    ids: list[str] = []
    objects: list[str] = []

    def some(k: int) -> list[str]:
        return list(dict.fromkeys(rng.choice(ids) for _ in range(k)))

    for i in range(n):
        r = rng.random()
        if r < 0.6 or len(ids) < 3:
            ev = _event(rng, ids, i)
            items.append(ev)
            ids.append(str(ev.id))
        elif r < 0.72 or len(objects) < 2:
            oid = _uuid(rng)
            objects.append(oid)
            items.append(
                rq.assert_object(
                    _AGENT, "FACT", "OBSERVED", "USER_STATED", some(2), f"v{i}", object_id=oid
                )
            )
        elif r < 0.84:
            op_type = rng.choice(_STATE_OPS)
            evidence = some(rng.randrange(0, 3))
            items.append(_state_op(op_type, rng.choice(objects), evidence))
        elif r < 0.89:
            items.append(rq.deprecate(_AGENT, rng.choice(objects), "stale", evidence_ids=some(1)))
        elif r < 0.92:
            items.append(
                rq.archive(_AGENT, rng.choice(objects), "old", "p/1", evidence_ids=some(1))
            )
        elif r < 0.96:
            old, new = rng.sample(objects, 2)
            items.append(rq.supersede(_AGENT, old, new, "newer"))
        elif r < 0.98 and len(objects) >= 3:
            primary, *merged = rng.sample(objects, 3)
            items.append(rq.dedup_resolved(_AGENT, primary, merged, "KEEP_PRIMARY"))
        else:
            items.append(rq.tombstone(_AGENT, rng.choice(ids), "gdpr", "p/1", "DEPRECATE"))
    return items


def _ledger(path: Path, seed: int, *, hooked: bool) -> None:
    """A random history: without the hooks (refusals land and are skipped), or through them."""
    rng = random.Random(seed)
    Ledger.init(path, hooks=()).close()
    hooks = stack.default_hooks() if hooked else ()
    with Ledger.open(path, hooks=hooks) as led:
        append_each(led, _history(rng, rng.randrange(60, 200)))
    if not hooked:
        append_fork(path, _history(rng, rng.randrange(5, 40)))


_PREFIXES = ("mem_", "fz_", "conv_", "git_")


def _derived(db: Any) -> dict[str, list[Any]]:
    """Every derived table of the file, row for row (the full-text index by its shadow rows)."""
    return derived_tables(db, _PREFIXES)


def _rebuilt(path: Path) -> tuple[Any, ...]:
    with Ledger.open(path) as led:
        report = rebuild(led, also=[StatesRebuild(led), LayerTablesRebuild(led)])
        db = led.store.db
        digests = {b.name: gated.gated_digest(db, b.name) for b in led.store.branches()}
        assert gated._COMPLETE.get(db) is None  # the holder let go at the end
        return report, digests, _derived(db)


def _step9(path: Path) -> list[str]:
    store = Store(path)
    try:
        checks: list[Any] = [MemoryReplayCheck(path), LayerTablesCheck(path)]
        report = audit(store, origin=str(store.meta("origin")), checks=checks)
    finally:
        store.close()
    return sorted(str(f) for f in report.findings)


def _both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, *, hooked: bool) -> Any:
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))  # one folder per example
    path = tmp_path / "h.db"
    _ledger(path, seed, hooked=hooked)
    reference = tmp_path / "r.db"
    shutil.copyfile(path, reference)
    kept, kept_digests, kept_tables = _rebuilt(path)
    kept_findings = _step9(path)
    with monkeypatch.context() as m:
        m.setattr(gated, "_KEPT", False)
        ref, ref_digests, ref_tables = _rebuilt(reference)
        ref_findings = _step9(reference)
    assert kept_tables.keys() == ref_tables.keys()
    for name, rows in kept_tables.items():
        assert rows == ref_tables[name], name
    assert (kept.after, dict(kept.branches_after)) == (ref.after, dict(ref.branches_after))
    assert dict(kept.gated_after) == dict(ref.gated_after)
    assert kept_digests == ref_digests
    assert kept_findings == ref_findings
    assert not [f for f in kept_findings if "differs" in f]
    return kept, kept_tables


@_SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_a_history_without_the_hooks_rebuilds_the_same_with_kept_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Refused entries (skipped by every replay) and a fork: same tables, digests, findings."""
    _both(tmp_path, monkeypatch, seed, hooked=False)


@_SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_a_hooked_history_rebuilds_to_what_the_append_path_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Appended entry by entry through the default hooks: the rebuild is identical to it."""
    report, _ = _both(tmp_path, monkeypatch, seed, hooked=True)
    assert report.identical


def test_the_histories_reach_the_kept_rows(tmp_path: Path) -> None:
    """The random histories exercise what the kept rows answer: own views with gated rows.

    Without this the differential tests above could pass on histories whose operations never
    read a gated row of an object (every answer then the same trivially).
    """
    reads: list[int] = []
    real = gated.Folder.load

    def counting(self: gated.Folder, rows: Any, ids: Any) -> None:
        rows = list(rows)
        reads.append(len(rows))
        real(self, rows, ids)

    mp = pytest.MonkeyPatch()
    mp.setattr(gated.Folder, "load", counting)
    try:
        for seed in range(6):
            path = tmp_path / f"c{seed}.db"
            _ledger(path, seed, hooked=True)
            with Ledger.open(path) as led:
                before = len(reads)
                rebuild(led, also=[StatesRebuild(led), LayerTablesRebuild(led)])
                assert any(reads[before:]), seed  # some object's rows were read in the fold
            with Ledger.open(path) as led:
                db = led.store.db
                for table in ("fz_states", "mem_gated"):
                    (count,) = db.execute(f"SELECT count(*) FROM {table}").fetchall()[0]
                    assert count != 0, table
    finally:
        mp.undo()
