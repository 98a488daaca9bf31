"""Shared fixtures: isolated trusted state, and real ledgers with a mix of events and operations."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import ActorType, EntityType, OpType, Role

ORIGIN = "example.org/memroot-test"

MakeLedger = Callable[..., Path]


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test reads or writes the home directory's trusted state or a stray MEMROOT_LEDGER."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    monkeypatch.delenv("MEMROOT_LEDGER", raising=False)
    yield


@pytest.fixture
def trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The trusted-state file of this test (also exported as MEMROOT_TRUSTED)."""
    path = tmp_path / "trusted.json"
    monkeypatch.setenv("MEMROOT_TRUSTED", str(path))
    return path


def event_input(rng: random.Random, i: int, **over: Any) -> EventInput:
    """A valid event with varied optional fields (deterministic for a given ``rng``)."""
    fields: dict[str, Any] = {
        "stream": f"session-{rng.randrange(3)}",
        "actor_id": rng.choice(["alice", "bob", "agent-7"]),
        "actor_type": rng.choice(list(ActorType)).value,
        "role": rng.choice(list(Role)).value,
        "content": f"message {i}: " + "x" * rng.randrange(0, 200),
        "namespace_id": rng.choice(["ns-a", "ns-b"]),
    }
    if rng.random() < 0.3:
        fields["metadata"] = {"n": i, "tags": ["t", str(rng.random())], "ok": True}
    if rng.random() < 0.2:
        fields["context"] = {"git_branch": "feature/x", "commit": "abc123"}
    fields.update(over)
    return EventInput(**fields)


def op_input(rng: random.Random, i: int, **over: Any) -> OpInput:
    """A valid operation (an ENTITY_CREATE, which the memory model accepts on its own)."""
    fields: dict[str, Any] = {
        "op_type": OpType.ENTITY_CREATE.value,
        "actor_id": rng.choice(["extractor", "agent-7"]),
        "actor_type": ActorType.AI_AGENT.value,
        "namespace_id": "ns-a",
        "payload": {
            "entity_type": rng.choice(list(EntityType)).value,
            "canonical_name": f"entity {i}",
            "aliases": [f"e{i}"] if rng.random() < 0.5 else [],
        },
        "policy_version": "policy/1",
    }
    if rng.random() < 0.3:
        fields["context"] = {"git_branch": "main", "weight": rng.random()}
    fields.update(over)
    return OpInput(**fields)


def mixed_items(n: int, seed: int = 0) -> list[EventInput | OpInput]:
    """``n`` valid append requests, about two thirds events, one third operations."""
    rng = random.Random(seed)
    return [event_input(rng, i) if rng.random() < 0.67 else op_input(rng, i) for i in range(n)]


def tombstone_input(event_id: str) -> OpInput:
    """A TOMBSTONE erasing the content of ``event_id``."""
    return OpInput(
        op_type=OpType.TOMBSTONE.value,
        actor_id="dpo",
        actor_type=ActorType.HUMAN_USER.value,
        namespace_id="ns-a",
        target_id=event_id,
        target_type="EVENT",
        payload={"target_event_id": event_id, "reason": "erasure request", "policy_ref": "gdpr-17"},
        policy_version="policy/1",
    )


class Inputs:
    """The request builders above, for tests (conftest is not importable in importlib mode)."""

    event = staticmethod(event_input)
    op = staticmethod(op_input)
    mixed = staticmethod(mixed_items)
    tombstone = staticmethod(tombstone_input)


@pytest.fixture(scope="session")
def inputs() -> type[Inputs]:
    """Builders of valid events, operations, mixed lists and TOMBSTONEs."""
    return Inputs


@pytest.fixture(scope="session")
def make_ledger() -> MakeLedger:
    """Return ``make(directory, n, *, name, origin, seed, checkpoint)`` -> path of a new ledger.

    The ledger holds the genesis plus ``n`` appended entries (events and operations, appended
    singly and in batches), so its size is ``n + 1``; ``init`` signs a checkpoint at size 1 and,
    with ``checkpoint`` (the default), one more is signed at the end. The Ledger is closed.
    """

    def make(
        directory: Path,
        n: int,
        *,
        name: str = "ledger.db",
        origin: str = ORIGIN,
        seed: int = 0,
        checkpoint: bool = True,
    ) -> Path:
        path = Path(directory) / name
        items = mixed_items(n, seed)
        rng = random.Random(seed + 1)
        with Ledger.init(path, origin=origin, hooks=()) as ledger:  # the bare ledger
            i = 0
            while i < len(items):
                step = 1 if rng.random() < 0.3 else rng.randrange(2, 40)
                chunk = items[i : i + step]
                if len(chunk) == 1:
                    ledger.append(chunk[0])
                else:
                    ledger.append_batch(chunk)
                i += step
            if checkpoint:
                ledger.checkpoint()
        return path

    return make
