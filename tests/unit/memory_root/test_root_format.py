"""The memory_root preimage and payload format (SPEC 6), re-derived with hashlib and cbor2."""

from __future__ import annotations

import hashlib
from typing import Any

import cbor2
import pytest

from memroot.ledger.errors import ValidationError
from memroot.ledger.hashing import EntryHash, TreeRoot
from memroot.memory_root.root import (
    HighWater,
    MemoryRoot,
    ProjectionDigest,
    RootPreimage,
    compute_root,
)
from memroot.projections.builtins import Corrections, FailureMotifs
from memroot.projections.projection import RuleDigest, Summary, SummaryDigest

HW = HighWater(41, EntryHash(b"\x11" * 32), 42, TreeRoot(b"\x22" * 32))


def _items() -> tuple[ProjectionDigest, ...]:
    return (
        ProjectionDigest("a", RuleDigest(b"\x01" * 32), SummaryDigest(b"\x02" * 32), 3),
        ProjectionDigest("b", RuleDigest(b"\x03" * 32), SummaryDigest(b"\x04" * 32), 0),
    )


def test_root_is_the_tagged_sha256_of_the_canonical_preimage():
    """memory_root = SHA-256("memroot/root/v1" || 0x00 || cbor({v, branch, parent, ...}))."""
    pre = RootPreimage("main", None, HW, _items())
    plain = {
        "v": 1,
        "branch": "main",
        "parent": None,
        "high_water": {
            "seq": 41,
            "entry_hash": b"\x11" * 32,
            "tree_size": 42,
            "tree_root": b"\x22" * 32,
        },
        "projections": [
            {"id": "a", "rule": b"\x01" * 32, "digest": b"\x02" * 32, "count": 3},
            {"id": "b", "rule": b"\x03" * 32, "digest": b"\x04" * 32, "count": 0},
        ],
    }
    assert pre.preimage() == cbor2.dumps(plain, canonical=True)
    want = hashlib.sha256(b"memroot/root/v1\x00" + cbor2.dumps(plain, canonical=True)).digest()
    assert pre.root() == want


def test_payload_round_trips_and_carries_the_root():
    """The SNAPSHOT payload is the preimage map plus memory_root, and parses back."""
    pre = RootPreimage("main", MemoryRoot(b"\x09" * 32), HW, _items())
    payload = pre.payload()
    assert payload["memory_root"] == pre.root()
    back, claimed = RootPreimage.from_payload(payload)
    assert back == pre and claimed == pre.root()


def test_compute_root_sorts_projections_by_id():
    """Summaries given in any order give the same root (sorted by projection id)."""
    pairs: list[tuple[Any, Summary]] = [
        (FailureMotifs(), Summary(b"\xa0", 0)),
        (Corrections(), Summary(b"\xa0", 0)),
    ]
    a = compute_root("main", None, HW, pairs)
    b = compute_root("main", None, HW, list(reversed(pairs)))
    assert a.root() == b.root()
    assert [p.id for p in a.projections] == ["corrections", "failure-motifs"]


def test_every_preimage_field_changes_the_root():
    """Branch, parent, any high-water field and any projection field reach the root."""
    base = RootPreimage("main", None, HW, _items())
    items = _items()
    variants = [
        RootPreimage("sim", None, HW, items),
        RootPreimage("main", MemoryRoot(b"\x00" * 32), HW, items),
        RootPreimage("main", None, HighWater(42, HW.entry_hash, 43, HW.tree_root), items),
        RootPreimage("main", None, HighWater(41, EntryHash(b"\x12" * 32), 42, HW.tree_root), items),
        RootPreimage("main", None, HighWater(41, HW.entry_hash, 42, TreeRoot(b"\x23" * 32)), items),
        RootPreimage("main", None, HW, items[:1]),
        RootPreimage(
            "main", None, HW, (items[0], ProjectionDigest("b", items[1].rule, items[1].digest, 1))
        ),
    ]
    roots = {v.root() for v in variants} | {base.root()}
    assert len(roots) == len(variants) + 1


def test_preimage_refuses_unsorted_or_duplicate_projections():
    """Projections must be sorted by id with no id twice (one preimage per meaning)."""
    a, b = _items()
    with pytest.raises(ValueError):
        RootPreimage("main", None, HW, (b, a))
    with pytest.raises(ValueError):
        RootPreimage("main", None, HW, (a, a))


def test_high_water_tree_size_is_seq_plus_one():
    """tree_size is the number of entries up to and including the high-water entry."""
    with pytest.raises(ValueError):
        HighWater(41, HW.entry_hash, 41, HW.tree_root)


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda p: p.pop("v"), "payload"),
        (lambda p: p.update(v=4), "payload.v"),
        (lambda p: p.update(v=2), "payload"),  # a v2 payload has a map
        (lambda p: p.update(v=3), "payload"),  # and so has a v3 payload
        (lambda p: p.update(map=b"\x00" * 32), "payload"),  # and a v1 payload none
        (lambda p: p.update(parent=b"\x00"), "payload.parent"),
        (lambda p: p.update(memory_root="ab"), "payload.memory_root"),
        (lambda p: p["high_water"].update(tree_size=7), "payload.high_water.tree_size"),
        (lambda p: p["projections"][0].update(count=-1), "payload.projections[0].count"),
        (lambda p: p["projections"].reverse(), "payload.projections"),
        (lambda p: p.update(extra=1), "payload"),
    ],
)
def test_malformed_payload_is_refused_naming_the_field(mutate: Any, field: str):
    """Every malformed SNAPSHOT payload is a ValidationError naming the offending field."""
    payload = RootPreimage("main", None, HW, _items()).payload()
    mutate(payload)
    with pytest.raises(ValidationError) as e:
        RootPreimage.from_payload(payload)
    assert e.value.field == field
