"""``memroot rebuild`` replays the memory model and falsification in one pass over the log:
what it writes is, row for row, what the append hooks wrote and what falsification's own
``rebuild`` (its own pass, after the memory model's) writes."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import apsw

from memroot.bench.hooked import mixed_history
from memroot.ledger.ledger import Ledger
from memroot.memory_root import Roots
from memroot.memory_root import stack as hooks
from memroot.memory_root.falsify.replay import TABLES, rebuild
from memroot.projections.registry import default_registry

_DERIVED = (*(t for t, _ in TABLES), "fz_heads", "memory_roots", "memory_root_resnapshots")


def _tables(path: Path) -> dict[str, list[str]]:
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        out: dict[str, list[str]] = {}
        for t in _DERIVED:
            if t in names:
                out[t] = sorted(map(repr, db.execute(f"SELECT * FROM {t}")))
        return out
    finally:
        db.close()


def test_one_pass_rebuild_writes_what_the_hooks_and_the_own_pass_wrote(
    tmp_path: Path, cmd: Any
) -> None:
    path = tmp_path / "m.ledger"
    cmd.json_at(path, "init")
    items = mixed_history(3000, batch=500)
    with Ledger.open(path, hooks=hooks.default_hooks()) as led:
        roots = Roots(led)
        while chunk := list(itertools.islice(items, 500)):
            led.append_batch(chunk)
            roots.sign_pending()
        size = led.size()
    appended = _tables(path)
    assert len(appended["fz_states"]) > 20  # FALSIFY entries were replayed
    copy = tmp_path / "own.ledger"
    shutil.copy(path, copy)
    shutil.copy(path.with_name(path.name + ".key"), copy.with_name(copy.name + ".key"))
    rebuilt = cmd.json_at(path, "rebuild")
    assert rebuilt["identical"] is True
    assert rebuilt["entries"] == size
    assert _tables(path) == appended
    with Ledger.open(copy, hooks=hooks.default_hooks()) as led:
        own = rebuild(led, default_registry())
    assert own.changes == rebuilt["falsification"]["state_changes"]
    assert own.skipped == rebuilt["falsification"]["skipped"]
    assert _tables(copy) == appended
    assert cmd.json_at(path, "verify", "--no-update")["ok"]
