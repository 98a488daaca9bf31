"""Known-answer vectors for re-snapshot chains and RESTORE cascades (docs/FORMAT.md §6.4, §8)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import apsw
import cbor2
import pytest

from memroot.ledger.entries import Entry
from memroot.memory_root._fold import SnapshotMismatch
from memroot.memory_root.falsify import _core
from memroot.memory_root.falsify.deps import ROOT, ItemRef, view_of
from memroot.memory_root.falsify.states import current
from memroot.memory_root.replay import RootsReplay
from memroot.projections.registry import default_registry
from tests.vectors.generators import generator, printed

HERE = Path(__file__).parent / "vectors"
KAT = json.loads((HERE / "cascade-kat.json").read_text())


def _entries(part: str | None) -> list[Entry]:
    rows = KAT["prefix"] + ([] if part is None else KAT[part]["entries"])
    return [Entry.from_bytes(bytes.fromhex(r["entry_cbor"])) for r in rows]


def _payload(row: dict[str, Any]) -> dict[str, Any]:
    entry = cbor2.loads(bytes.fromhex(row["entry_cbor"]))
    body: dict[str, Any] = entry[7]
    return dict(body["payload"])


def test_regenerating_the_vectors_gives_identical_bytes() -> None:
    """gen_cascade_kat.py reproduces cascade-kat.json byte for byte."""
    assert printed(HERE / "gen_cascade_kat.py") == (HERE / "cascade-kat.json").read_text()


def test_the_chain_re_derives_with_hashlib_and_cbor2() -> None:
    """The re-snapshot is r2 over r1's parent; the next SNAPSHOT links to it; after the
    RESTORE's cascade part withdraws it, the next SNAPSHOT links to r2 again."""
    roots = KAT["roots"]
    pre = bytes.fromhex(roots["r2x_preimage"])
    tag = b"memroot/root/v1\x00"
    assert hashlib.sha256(tag + pre).hexdigest() == roots["r2x"]
    r2_payload = _payload(KAT["prefix"][4])
    assert r2_payload.pop("memory_root").hex() == roots["r2"]
    assert cbor2.loads(pre) == {**r2_payload, "parent": None}  # r1 (falsified) passed over
    cascade = _payload(KAT["prefix"][6])
    assert cascade["resnapshots"] == [
        {"replaces": roots["r2"], "memory_root": roots["r2x"], "parent": None}
    ]
    relinked = _payload(KAT["relinked"]["entries"][-1])
    assert relinked["parent"].hex() == roots["r2x"]
    restored = KAT["restored"]["entries"]
    part = _payload(restored[0])["cascade"]
    assert cbor2.dumps(part, canonical=True).hex() == KAT["restored"]["cascade_part_cbor"]
    assert part["withdrawn"] == [{"memory_root": roots["r2x"], "replaces": roots["r2"]}]
    assert _payload(restored[-1])["parent"].hex() == roots["r2"]


@pytest.mark.parametrize("part", ["relinked", "restored"])
def test_step_8_replays_the_relinked_snapshots(part: str) -> None:
    """memroot's own step 8 replay accepts both continuations (the parents above)."""
    replay = RootsReplay(default_registry())
    got = [replay.feed(e) for e in _entries(part)]
    assert got[-1] is not None and got[-1].root.hex() == KAT[part]["r3"]  # type: ignore[union-attr]


def test_step_8_refuses_a_snapshot_that_chains_from_the_stale_root() -> None:
    """A SNAPSHOT after the CASCADE that still names r2 as parent does not replay."""
    gen = generator(HERE / "gen_cascade_kat.py")
    es, _, r2, _ = gen.prefix()
    gen._add(es, gen._violation(7))
    gen._snapshot(es, 8, r2.root())
    replay = RootsReplay(default_registry())
    for e in es[:-1]:
        replay.feed(e)
    with pytest.raises(SnapshotMismatch, match="parent"):
        replay.feed(es[-1])


def test_the_falsification_rules_accept_the_restore_cascade_part() -> None:
    """FalsifyCore (as an auditor without summaries runs it) recomputes the RESTORE's cascade
    part and accepts it: r1 and r2 live again, the re-snapshot stale."""
    db = apsw.Connection(":memory:")
    _core.install(db)
    core = _core.FalsifyCore(
        db,
        default_registry(),
        summary_keys=None,
        source=None,
        state_replay=None,
        find_event=None,
        root_states=False,
    )
    for e in _entries("restored"):
        assert core.apply(e, strict=True) is None
    view = view_of(db, "main")
    roots = KAT["roots"]

    def state(root: str) -> str:
        now = current(db, view, ItemRef(ROOT, root))
        return "live" if now is None else now.state

    assert (state(roots["r1"]), state(roots["r2"]), state(roots["r2x"])) == (
        "live",
        "live",
        "stale",
    )
