"""The state check's kept scan, indexed by name, finds what a scan of the whole log finds.

``checked._state_ops`` looks the operations naming an item up in an index of the kept scan
(so a ``FALSIFY``'s check costs what the item's operations are, not the log's length); the
reference is the filter it replaced: every state operation of entries ``0..stop`` whose
``target_id`` is the id or whose payload holds it as a text anywhere (a cascade's lists).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memroot.ledger.entries import Entry, Kind
from memroot.ledger.ledger import Ledger
from memroot.memory_root.falsify import Falsifier, checked
from memroot.memory_root.falsify.deps import STATE_OPS
from tests.unit.memory_root.falsify.test_cascade import _event, _obj, _story


def _linear(ledger: Ledger, stop: int, item: str) -> list[Entry]:
    def names(value: object) -> bool:
        if isinstance(value, str):
            return value == item
        if isinstance(value, dict):
            return any(names(v) for v in value.values())
        if isinstance(value, list):
            return any(names(v) for v in value)
        return False

    return [
        e
        for e in ledger.entries(0, stop, "main")
        if e.kind is Kind.OP
        and e.type in STATE_OPS
        and (e.body.get("target_id") == item or names(e.body.get("payload")))
    ]


def _check_every_cut(ledger: Ledger, ids: list[str]) -> int:
    size = ledger.size()
    seen = 0
    for stop in range(0, size + 1):
        for item in ids:
            want = _linear(ledger, stop, item)
            got = checked._state_ops(ledger, "main", size, stop, (item,))
            assert [e.seq for e in got] == [e.seq for e in want], (stop, item)
            seen += len(want)
    together = checked._state_ops(ledger, "main", size, size, ids)
    assert [e.seq for e in together] == sorted(
        {e.seq for item in ids for e in _linear(ledger, size, item)}
    )
    return seen


def test_the_index_finds_what_the_whole_scan_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At every cut of the log, for targets, cascade-listed items, payload texts and unknown
    ids, alone and together; again after the log grew (the kept scan extended)."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    ledger, ids = _story(tmp_path / "a.ledger")
    with ledger:
        f = Falsifier(ledger)
        f.falsify(ids["o1"], "wrong")
        f.cascade(ids["o1"], 2, 1000, reason="re-check")
        f.mark_stale(ids["o2"], "old")
        names = [*ids.values(), "wrong", "re-check", "00000000-0000-7000-8000-00000000dead"]
        assert _check_every_cut(ledger, names) > 5
        f.restore(ids["o2"], "checked again")
        o4 = _obj(ledger, _event(ledger, "more"))
        f.falsify(o4, "wrong too")
        assert _check_every_cut(ledger, [*names, o4, "checked again"]) > 8
