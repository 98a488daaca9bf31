"""SelfModel snapshots: the body, selfmodel_root, hooks after each snapshot, validation."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import cbor2
import pytest

from memroot.ledger.entries import _library_op
from memroot.ledger.errors import ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType
from memroot.memory_root import (
    Capability,
    RootRecord,
    Roots,
    RootsHook,
    SelfModel,
    StaticSelfModel,
    selfmodel_root,
)
from memroot.memory_root.selfmodel import parse_selfmodel_payload, selfmodel_payload

Make = Callable[..., tuple[Ledger, Roots]]

# The example SelfModel of docs/roots.md.
EXAMPLE = SelfModel(
    agent_id="agent-7",
    identity={"name": "Arborist research agent", "model": "m-2026-05", "profile": "physics"},
    capabilities=(
        Capability("cite-sources", "cites the article a claim comes from", ("bench/titles-v3",)),
        Capability("answer-physics", "answers graduate-level physics questions"),
    ),
)


def test_selfmodel_root_is_the_tagged_hash_of_the_body_including_the_memory_root():
    """selfmodel_root = SHA-256("memroot/selfmodel/v1" || 0x00 || cbor(body))."""
    root = b"\x42" * 32
    body = EXAMPLE.body(root, "main")
    assert body["memory_root"] == root
    assert [c["name"] for c in body["capabilities"]] == ["answer-physics", "cite-sources"]
    want = hashlib.sha256(b"memroot/selfmodel/v1\x00" + cbor2.dumps(body, canonical=True))
    assert selfmodel_root(body) == want.digest()
    assert selfmodel_root(EXAMPLE.body(b"\x43" * 32, "main")) != selfmodel_root(body)


def test_payload_parses_back_and_refuses_tampering():
    """A payload round-trips; a changed claim or a non-canonical body is refused."""
    payload = selfmodel_payload(EXAMPLE, b"\x42" * 32, "main")
    model, cited, branch, sm = parse_selfmodel_payload(payload)
    assert cited == b"\x42" * 32 and branch == "main" and sm == payload["selfmodel_root"]
    assert model.body(cited, branch) == payload["body"]
    tampered = {**payload, "body": {**payload["body"], "agent_id": "agent-8"}}
    with pytest.raises(ValidationError) as e:
        parse_selfmodel_payload(tampered)
    assert e.value.field == "payload.selfmodel_root"
    body = dict(payload["body"])
    body["capabilities"] = list(reversed(body["capabilities"]))
    with pytest.raises(ValidationError) as e:
        parse_selfmodel_payload({"body": body, "selfmodel_root": selfmodel_root(body)})
    assert e.value.field == "payload.body.capabilities"


def test_selfmodel_from_json_names_bad_fields():
    """The JSON form (CLI) is validated field by field."""
    ok = SelfModel.from_json(
        {"agent_id": "a", "identity": {"k": "v"}, "capabilities": [{"name": "n", "claim": "c"}]}
    )
    assert ok.capabilities == (Capability("n", "c"),)
    for bad, field in [
        ({"identity": {}}, "agent_id"),
        ({"agent_id": "a", "mood": 1}, "mood"),
        ({"agent_id": "a", "capabilities": [{"name": "n"}]}, "capabilities.claim"),
        ({"agent_id": "a", "capabilities": [{"name": "n", "claim": "c"}] * 2}, "capabilities"),
    ]:
        with pytest.raises(ValidationError) as e:
            SelfModel.from_json(bad)
        assert e.value.field == field


def test_hooks_receive_every_new_live_root_and_record_a_selfmodel(mr_make: Make, mr: Any):
    """After each snapshot the hook sees the new root; its SelfModel cites that root."""
    seen: list[RootRecord] = []

    class Recorder:
        def on_root(self, root: RootRecord) -> SelfModel | None:
            seen.append(root)
            return EXAMPLE

    ledger, roots = mr_make(every=4, hooks=[RootsHook(selfmodel_hooks=[Recorder()])])
    roots.append_batch(mr.mixed(6))
    roots.snapshot()
    assert [r.root for r in seen] == [r.root for r in reversed(roots.chain())]
    assert all(r.state == "live" for r in seen)
    models = [e for e in ledger.entries() if e.type == "SELFMODEL_SNAPSHOT"]
    assert len(models) == len(seen)
    for e, root in zip(models, seen, strict=True):
        assert e.seq == root.seq + 1
        assert e.body["payload"]["body"]["memory_root"] == root.root
    roots_of_models = {e.body["payload"]["selfmodel_root"] for e in models}
    assert len(roots_of_models) == len(models)  # a new memory_root, a new selfmodel_root
    view = roots.selfmodel()
    assert view is not None and view.memory_root_state == "live"
    assert view.record.memory_root == roots.chain()[0].root


def test_a_hook_that_returns_none_records_nothing(mr_make: Make, mr: Any):
    """Returning None from on_root appends no SELFMODEL_SNAPSHOT."""

    class Quiet:
        def on_root(self, root: RootRecord) -> SelfModel | None:
            return None

    ledger, roots = mr_make(hooks=[RootsHook(selfmodel_hooks=[Quiet()])])
    ledger.append_batch(mr.mixed(3))
    roots.snapshot()
    assert not [e for e in ledger.entries() if e.type == "SELFMODEL_SNAPSHOT"]
    assert roots.selfmodel() is None


def test_record_selfmodel_cites_the_latest_live_root(mr_make: Make, mr: Any):
    """Recorded on demand, a SelfModel cites the branch's latest live root (or none yet)."""
    ledger, roots = mr_make()
    first = roots.record_selfmodel(EXAMPLE)
    assert first.memory_root is None
    ledger.append_batch(mr.mixed(3))
    root = roots.snapshot().record.root
    second = roots.record_selfmodel(EXAMPLE)
    assert second.memory_root == root and second.selfmodel_root != first.selfmodel_root
    # Falsification (another layer) flips the state: the next SelfModel cites the older root.
    ledger.store.db.execute("UPDATE memory_roots SET state = 'falsified' WHERE root = ?", (root,))
    assert roots.record_selfmodel(EXAMPLE).memory_root is None


def test_a_selfmodel_citing_another_root_is_refused(mr_make: Make, mr: Any):
    """A SELFMODEL_SNAPSHOT must cite the latest live root of its branch."""
    ledger, roots = mr_make()
    ledger.append_batch(mr.mixed(3))
    old = roots.snapshot().record.root
    ledger.append_batch(mr.mixed(3))
    roots.snapshot()
    size = ledger.size()
    with pytest.raises(ValidationError) as e:
        ledger.append(
            _library_op(
                Ledger.system_op(OpType.SELFMODEL_SNAPSHOT, selfmodel_payload(EXAMPLE, old, "main"))
            )
        )
    assert e.value.field == "payload.body.memory_root"
    assert ledger.size() == size


def test_static_selfmodel_hook_gives_the_same_claims_at_every_root():
    """The example hook returns its fixed model whatever root it is told about."""
    hook = StaticSelfModel(EXAMPLE)
    assert hook.on_root(None) is EXAMPLE  # type: ignore[arg-type]
