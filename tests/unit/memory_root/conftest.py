"""Fixtures for the memory_root tests: ledgers with the RootsHook, and entry builders."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.ledger import AppendHook, Ledger
from memroot.memory_root import Roots, RootsHook


class Items:
    """Builders of the entries memory_root tests append (the ``mr`` fixture)."""

    @staticmethod
    def event(i: int, ns: str = "ns") -> EventInput:
        return mr_event(i, ns)

    @staticmethod
    def op(op_type: str, payload: dict[str, Any], **kw: Any) -> OpInput:
        return mr_op(op_type, payload, **kw)

    @staticmethod
    def violation(
        motif: str = "TITLE_MISMATCH", source: str = "Quantum chromodynamics", ns: str = "ns"
    ) -> OpInput:
        return mr_violation(motif, source, ns)

    @staticmethod
    def mixed(n: int) -> list[EventInput | OpInput]:
        """n entries cycling through a violation, an event and an ASSERT."""
        out: list[EventInput | OpInput] = []
        for i in range(n):
            if i % 3 == 0:
                out.append(mr_violation(source=f"src{i % 4}"))
            elif i % 3 == 1:
                out.append(mr_event(i))
            else:
                out.append(mr_op("ASSERT", {"epistemic_type": "OBSERVED", "object_type": "FACT"}))
        return out


@pytest.fixture
def mr() -> Items:
    """Entry builders."""
    return Items()


def mr_event(i: int, ns: str = "ns") -> EventInput:
    return EventInput(
        stream="s",
        actor_id="u1",
        actor_type="HUMAN_USER",
        role="USER",
        content=f"message {i}",
        namespace_id=ns,
    )


def mr_op(
    op_type: str,
    payload: dict[str, Any],
    *,
    target_id: str | None = None,
    target_type: str | None = None,
    ns: str = "ns",
) -> OpInput:
    return OpInput(
        op_type=op_type,
        actor_id="verifier-1",
        actor_type="SYSTEM_PROCESS",
        namespace_id=ns,
        payload=payload,
        policy_version="policy/1",
        target_id=target_id,
        target_type=target_type,
    )


def mr_violation(
    motif: str = "TITLE_MISMATCH", source: str = "Quantum chromodynamics", ns: str = "ns"
) -> OpInput:
    return mr_op("VIOLATION_RECORDED", {"motif": motif, "source": source}, ns=ns)


@pytest.fixture
def mr_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., tuple[Ledger, Roots]]]:
    """Return a factory of (ledger, roots) in tmp_path; every ledger is closed at teardown."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    opened: list[Ledger] = []

    def make(
        name: str = "l.ledger", *, every: int = 1000, hooks: list[AppendHook] | None = None
    ) -> tuple[Ledger, Roots]:
        ledger = Ledger.init(
            tmp_path / name,
            origin=f"example.org/{name}",
            snapshot_every=every,
            hooks=hooks if hooks is not None else [RootsHook()],
        )
        opened.append(ledger)
        return ledger, Roots(ledger)

    yield make
    for ledger in opened:
        ledger.close()
