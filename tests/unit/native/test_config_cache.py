"""The witness-table look-up every sealed append makes is cached per connection (issue 12).

The cache must never hide a witness: one added through this ledger, or through another
connection to the same file (another process, another ``Ledger``), is seen by the next
append, which then submits to it (a witness that is down leaves a warning and a pending
checkpoint).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from memroot.ledger.ledger import Ledger
from memroot.ledger.transparency.witness import WitnessWarning, _has_tables, add_witness
from memroot.ledger.transparency.witness_server import init_witness

DOWN = "http://127.0.0.1:9"  # nothing listens on the discard port: every submission fails


def _append_warns(ledger: Ledger, inputs: Any, i: int) -> bool:
    import random

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ledger.append(inputs.event(random.Random(i), i))
    return any(issubclass(w.category, WitnessWarning) for w in seen)


def test_a_witness_added_here_is_seen_by_the_next_append(tmp_path: Path, inputs: Any) -> None:
    vkey = init_witness(tmp_path / "w", "witness.example/cache")
    with Ledger.init(tmp_path / "l.ledger", hooks=()) as ledger:
        assert not _append_warns(ledger, inputs, 1)
        assert not _has_tables(ledger.store)  # cached now
        add_witness(ledger, DOWN, vkey)
        assert _has_tables(ledger.store)
        assert _append_warns(ledger, inputs, 2)


def test_a_witness_added_by_another_connection_is_seen(tmp_path: Path, inputs: Any) -> None:
    vkey = init_witness(tmp_path / "w", "witness.example/cache2")
    path = tmp_path / "l.ledger"
    with Ledger.init(path, hooks=()) as ledger:
        assert not _append_warns(ledger, inputs, 1)
        assert not _has_tables(ledger.store)
        with Ledger.open(path, hooks=()) as other:
            add_witness(other, DOWN, vkey)
        assert _has_tables(ledger.store)
        assert _append_warns(ledger, inputs, 2)
