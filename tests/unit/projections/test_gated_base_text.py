"""A gated row's base and intent texts, written directly, are the encoder's, byte for byte (§12.4).

The third pass of issue 15 builds a ``mem_gated`` row's base JSON without the sort-keys encoder
(it is on every lifecycle operation's path), and the fourth the intent of score and transition
operations; this checks the two agree on the values that could make them differ (floats,
escapes, non-float numbers).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from memroot.projections import gated
from memroot.projections.engine import Op
from memroot.projections.model import MemoryObject


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"superseded_by": "01900000-0000-7000-8000-00000000000a", "valid_to": 17},
        {"confidence": 1.0, "salience": 0.1 + 0.2, "lifecycle_state": "SUPERSEDED"},
        {"confidence": 1e-7, "salience": 0.0, "evidence_ids": ("a", 'b\u00e9\\"')},
        {"confidence": 1, "salience": True, "version": 3},  # not floats: the encoder writes it
    ],
)
def test_base_text_is_what_the_encoder_writes(changes: dict[str, Any]) -> None:
    """The first row's base, written directly, is byte for byte the encoder's (FORMAT §12.4)."""
    o = MemoryObject(
        id="01900000-0000-7000-8000-000000000001",
        type="FACT",
        version=1,
        epistemic_type="ASSERTED",
        source_type="USER_STATED",
        evidence_ids=("01900000-0000-7000-8000-000000000002",),
        asserted_by="agent",
        valid_from=1_700_000_000_000_000,
        valid_to=None,
        created_at=1_700_000_000_000_000,
        last_modified_at=1_700_000_000_000_001,
        lifecycle_state="ACTIVE",
        superseded_by=None,
        confidence=0.8,
        salience=0.5,
        namespace_id="ns",
        value="v",
    )
    o = dataclasses.replace(o, **changes)
    assert gated._base_text(o) == gated._S.of(o).to_json()


def _op(op_type: str, **p: Any) -> Op:
    return Op(op_type, "op", 1, 1, "main", "agent", "AI_AGENT", "ns", "obj", None, p)


_EV = ("01900000-0000-7000-8000-000000000002", 'b\u00e9\\"')


@pytest.mark.parametrize(
    "op",
    [
        _op("REINFORCE", new_confidence=0.9, new_salience=0.1 + 0.2, delta=0.1),
        _op("REINFORCE", new_confidence=1, new_salience=1.0, delta=0),  # ints
        _op("DECAY_APPLIED", new_confidence=1e-7, new_salience=0.0, decay_delta=0.25),
        _op("PENALTY", new_confidence=0.6, delta=0.2),
        _op("PENALTY", new_confidence=True, delta=0.2),  # not a number: the encoder writes it
        _op("PENALTY", new_confidence=float("nan"), delta=0.2),  # the encoder's NaN
        _op("EPISTEMIC_TRANSITION", from_type="ASSERTED", to_type="OBSERVED", evidence_ids=_EV),
        _op("EPISTEMIC_TRANSITION", from_type="ASSERTED", to_type="OBSERVED", evidence_ids=()),
        _op("SUPERSEDE", new_object_id=_EV[0]),
        _op("DEPRECATE"),
        _op("ARCHIVE"),
        _op("FALSIFY"),
    ],
)
def test_intent_text_is_what_the_encoder_writes(op: Op) -> None:
    """A row's intent, written directly, is byte for byte the sort-keys encoder's (§12.4)."""
    assert gated._intent_text(op) == gated._canonical(gated._intent(op))
