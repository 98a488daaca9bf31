"""Ledger.on_commit: the observers the ledger tells of its committed checkpoints."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from memroot.ledger.entries import EventInput
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import DEFAULT_OBSERVERS, Ledger
from memroot.ledger.note import SignedCheckpoint
from memroot.ledger.transparency.witness import COMMIT_OBSERVER

LEDGER_DIR = Path(__file__).resolve().parents[3] / "ledger"


def _event(i: int) -> EventInput:
    return EventInput(
        stream="s",
        actor_id="a",
        actor_type="AI_AGENT",
        role="USER",
        content=f"event {i}",
        namespace_id="ns",
    )


class _Recorder:
    """A commit observer that writes down what it is told."""

    def __init__(self) -> None:
        self.told: list[tuple[str, int]] = []

    def committed(self, ledger: Ledger) -> None:
        self.told.append(("committed", ledger.size()))

    def checkpointed(self, ledger: Ledger, signed: SignedCheckpoint) -> SignedCheckpoint:
        self.told.append(("checkpointed", signed.checkpoint.size))
        return signed


def test_an_observer_is_told_of_each_sealed_commit_and_checkpoint(tmp_path: Path) -> None:
    """An observer hears every committed seal and checkpoint, and nothing rolled back."""
    with Ledger.init(tmp_path / "l.db", origin="example.org/observer", hooks=()) as led:
        seen = _Recorder()
        led.on_commit(seen)
        led.append(_event(0))
        led.append_batch([_event(1), _event(2)])
        with pytest.raises(RefusedError), led.write():
            led.append(_event(3))
            raise RefusedError("rolled back on purpose")
        led.checkpoint()
        assert led.size() == 4
    assert seen.told == [("committed", 2), ("committed", 4), ("checkpointed", 4)]


def test_the_default_observer_is_transparencys_and_comes_first(tmp_path: Path) -> None:
    """Every ledger tells the witnesses and tiles first, then the observers registered."""
    assert DEFAULT_OBSERVERS == ("memroot.ledger.transparency.witness:COMMIT_OBSERVER",)
    with Ledger.init(tmp_path / "l.db", origin="example.org/observer", hooks=()) as led:
        seen = _Recorder()
        led.on_commit(seen)
        assert led._commit_observers() == [COMMIT_OBSERVER, seen]


def test_the_log_core_imports_no_transparency_module() -> None:
    """No module of ledger/ outside transparency/ and bundle/ imports transparency."""
    offenders = []
    for path in LEDGER_DIR.rglob("*.py"):
        rel = path.relative_to(LEDGER_DIR)
        if rel.parts[0] in {"transparency", "bundle"}:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{rel}: {n}" for n in names if "transparency" in n]
    assert offenders == []
