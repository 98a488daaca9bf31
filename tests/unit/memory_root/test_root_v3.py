"""Memory roots v3 (docs/FORMAT.md §6.16): the projection list committed by one hash.

The codec (payload, root, the list attached back by its hash), re-derived with hashlib and
cbor2; the writer writing v3; and the auditor's replay (verify step 8, rebuild) checking v3
SNAPSHOT entries: the list found among every rule it knows (retired ones too), a wrong list
refused naming ``payload.projections``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
from pathlib import Path
from typing import Any

import cbor2
import pytest

from memroot.ledger.entries import Entry, Kind, OpInput, build_entry
from memroot.ledger.hashing import EntryHash, TreeRoot
from memroot.ledger.merkle import CompactRange
from memroot.memory_root._fold import SnapshotMismatch, find_listed
from memroot.memory_root.replay import RootsReplay
from memroot.memory_root.root import (
    ROOT_VERSION,
    HighWater,
    ProjectionDigest,
    RootPreimage,
    compute_root,
    list_digest,
)
from memroot.memory_root.root_v2 import MapAt, leaf_changes
from memroot.memory_root.state_map import EMPTY
from memroot.projections.builtins import Corrections, builtin_projections
from memroot.projections.projection import Projection
from memroot.projections.registry import default_registry

HERE = Path(__file__).parents[2] / "vectors" / "memroot"


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CV = _load("gen_corrections_vectors")
LC = CV.LC


class _NoNodes:
    def node(self, h: bytes) -> None:
        del h


def _h(tag: str, data: bytes) -> bytes:
    return hashlib.sha256(tag.encode() + b"\x00" + data).digest()


def _v3(es: list[Entry], projections: list[Projection]) -> RootPreimage:
    """The v3 root at the last of ``es`` listing ``projections``."""
    tree = CompactRange()
    for e in es:
        tree.append(e.hash)
    hw = HighWater(len(es) - 1, EntryHash(es[-1].hash), len(es), TreeRoot(tree.root()))
    map_root = MapAt(EMPTY, None, [c for e in es for c in leaf_changes(e)]).apply(_NoNodes())[0]
    pairs = [(p, p.summarize(LC.fold(p, es))) for p in projections]
    return compute_root("main", None, hw, pairs, map_root, v=3)


def _snapshot(es: list[Entry], payload: dict[str, Any]) -> Entry:
    item = OpInput(
        op_type="SNAPSHOT",
        actor_id="memroot",
        actor_type="SYSTEM_PROCESS",
        namespace_id="system",
        payload=payload,
        policy_version="memroot/1",
        id="00000000-0000-7000-8000-000000000099",
    )
    n = len(es)
    return build_entry(es[-1].hash, n, "main", LC.TS + n, Kind.OP, "SNAPSHOT", item.body(item.id))


def test_the_writer_writes_v3():
    """The version this memroot writes is 3 (FORMAT §6.16, "Versions in a ledger")."""
    assert ROOT_VERSION == 3


def test_a_v3_payload_holds_the_lists_hash_and_its_root_rederives():
    """Seven keys, ``projections`` a 32-byte hash of the list's canonical CBOR, the root
    SHA-256("memroot/root/v3" || 0x00 || cbor(preimage)); parsed back, the list is known by
    its hash only and attaches again when it hashes right."""
    es = CV.entries()
    pre = _v3(es, builtin_projections())
    payload = pre.payload()
    assert set(payload) == {
        "v", "branch", "parent", "high_water", "map", "projections", "memory_root"
    }  # fmt: skip
    listed = cbor2.dumps([p.to_cbor() for p in pre.projections], canonical=True)
    assert payload["projections"] == _h("memroot/projections/v1", listed)
    body = {k: v for k, v in payload.items() if k != "memory_root"}
    assert payload["memory_root"] == _h("memroot/root/v3", cbor2.dumps(body, canonical=True))
    parsed, claimed = RootPreimage.from_payload(payload)
    assert claimed == pre.root() == parsed.root()
    assert not parsed.list_known and parsed.projections == ()
    assert parsed.with_projections(pre.projections) == pre
    wrong = [dataclasses.replace(pre.projections[0], count=pre.projections[0].count + 1)]
    with pytest.raises(ValueError, match="does not hash"):
        parsed.with_projections([*wrong, *pre.projections[1:]])


def test_find_listed_picks_the_one_list_among_known_rules():
    """From every rule the auditor knows (active and retired, two per id here), the list
    whose hash the root holds: active rules, a retired one in place of an active one, or a
    shorter list; none when no choice hashes to it."""
    a = ProjectionDigest("a", b"\x01" * 32, b"\x02" * 32, 1)  # type: ignore[arg-type]
    a_old = ProjectionDigest("a", b"\x03" * 32, b"\x04" * 32, 2)  # type: ignore[arg-type]
    b = ProjectionDigest("b", b"\x05" * 32, b"\x06" * 32, 3)  # type: ignore[arg-type]
    known = [b, a_old, a]
    for listed in ([a, b], [a_old, b], [b], [a], []):
        assert find_listed(list_digest(listed), known, exact=False) == tuple(listed)
    assert find_listed(list_digest([a, b]), known, exact=True) is None  # not all of them
    assert find_listed(b"\x00" * 32, known, exact=False) is None


def _replayed(es: list[Entry]) -> list[Any]:
    replay = RootsReplay(default_registry())
    return [r for e in es if (r := replay.feed(e)) is not None]


def test_the_replay_checks_a_v3_snapshot_and_finds_its_list():
    """The auditor's replay recomputes the v3 root: the active built-ins' list, and also a
    list with corrections v1 (retired, but a rule it can replay) in place of v2."""
    es = CV.entries()
    for projections in (
        builtin_projections(),
        [Corrections(), *(p for p in builtin_projections() if p.id != "corrections")],
    ):
        pre = _v3(es, projections)
        [got] = _replayed([*es, _snapshot(es, pre.payload())])
        assert got.root == pre.root()
        assert got.prepared.preimage == pre
        assert {d.rule for d, _ in got.prepared.items} == {d.rule for d in pre.projections}


def test_a_v3_snapshot_whose_list_the_replay_does_not_give_is_refused():
    """A list with a count the log does not give, hashed into a self-consistent payload,
    is refused naming payload.projections; so is a map the log does not give."""
    es = CV.entries()
    pre = _v3(es, builtin_projections())
    bad = [dataclasses.replace(d, count=d.count + 1) for d in pre.projections]
    forged = dataclasses.replace(pre, projections=tuple(bad))
    with pytest.raises(SnapshotMismatch) as e:
        _replayed([*es, _snapshot(es, forged.payload())])
    assert e.value.field == "payload.projections"
    other_map = dataclasses.replace(pre, map_root=b"\x07" * 32)
    with pytest.raises(SnapshotMismatch) as e:
        _replayed([*es, _snapshot(es, other_map.payload())])
    assert e.value.field == "payload.map"


class _Bundle:
    def __init__(self, records: list[Any]) -> None:
        self.records = records

    def section_names(self) -> tuple[str, ...]:
        return ("memory_roots",)

    def section(self, name: str) -> Any:
        return iter(self.records)


def test_a_bundles_v3_record_is_checked_against_the_list_its_summaries_make():
    """A bundle's record of a v3 root: the list its summaries make (id, rule, the digest of
    the bytes, count) must hash to the payload's ``projections``; an edited count fails."""
    from memroot.ledger.verify import AuditReport
    from memroot.memory_root.bundle_section import RootsSectionCheck
    from memroot.projections.projection import rule_digest, rule_preimage

    es = CV.entries()
    projections = builtin_projections()
    pre = _v3(es, projections)
    snap = _snapshot(es, pre.payload())
    summaries = []
    for p in projections:
        s = p.summarize(LC.fold(p, es))
        summaries.append(
            {
                "id": p.id,
                "rule": rule_digest(p),
                "rule_cbor": rule_preimage(p),
                "digest": s.digest,
                "count": s.count,
                "data": s.data,
            }
        )

    def audit(records: list[Any]) -> AuditReport:
        check = RootsSectionCheck(_Bundle(records))  # type: ignore[arg-type]
        report = AuditReport()
        check.feed("main", snap, report)
        check.finish(report)
        return report

    record = {"branch": "main", "seq": snap.seq, "payload": pre.payload(), "state": "live"}
    assert audit([{**record, "summaries": summaries}]).ok
    edited = [{**summaries[0], "count": summaries[0]["count"] + 1}, *summaries[1:]]
    report = audit([{**record, "summaries": edited}])
    assert not report.ok
    assert "projection list its root commits to" in str(report.findings[0])


VEC3 = __import__("json").loads((HERE / "rootsv3-vectors.json").read_text())


def test_regenerating_the_v3_vectors_gives_identical_bytes():
    """gen_rootsv3_vectors.py reproduces rootsv3-vectors.json byte for byte."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _load("gen_rootsv3_vectors").main()
    assert out.getvalue() == (HERE / "rootsv3-vectors.json").read_text()


def test_the_v3_vectors_rederive_with_hashlib_and_cbor2():
    """From the vectors alone: the list's CBOR from the projections (sorted by id, each
    ``{id, rule, digest, count}``, digest = SHA-256("memroot/summary/v1" || 0x00 || summary)),
    its hash under ``memroot/projections/v1``, the preimage holding it as ``projections``
    beside ``map``, the root under ``memroot/root/v3``; the v2 preimage of the same list
    differs only in ``v`` and the list carried whole."""
    items = [
        {
            "id": p["id"],
            "rule": bytes.fromhex(p["rule"]),
            "digest": _h("memroot/summary/v1", bytes.fromhex(p["summary"])),
            "count": p["count"],
        }
        for p in VEC3["projections"]
    ]
    assert [i["id"] for i in items] == sorted(i["id"] for i in items)
    listed = cbor2.dumps(items, canonical=True)
    assert listed.hex() == VEC3["list_cbor"]
    digest = _h("memroot/projections/v1", listed)
    assert digest.hex() == VEC3["list_digest"]
    pre = cbor2.loads(bytes.fromhex(VEC3["preimage"]))
    assert pre["v"] == 3 and pre["projections"] == digest
    assert pre["map"].hex() == VEC3["map_root"] and pre["parent"] is None
    assert cbor2.dumps(pre, canonical=True).hex() == VEC3["preimage"]
    assert _h("memroot/root/v3", bytes.fromhex(VEC3["preimage"])).hex() == VEC3["memory_root"]
    v2 = cbor2.loads(bytes.fromhex(VEC3["v2_preimage"]))
    assert v2 == {**pre, "v": 2, "projections": items}
    assert _h("memroot/root/v2", bytes.fromhex(VEC3["v2_preimage"])).hex() == VEC3["v2_memory_root"]
    hashes = [bytes.fromhex(e["entry_hash"]) for e in VEC3["entries"]]
    assert pre["high_water"]["entry_hash"] == hashes[-1]
    assert pre["high_water"]["seq"] + 1 == pre["high_water"]["tree_size"] == len(hashes)


def test_verify_step_8_accepts_a_v3_root_without_a_note():
    """RootsReplayCheck (verify's step 8) accepts the v3 root, and notes nothing about it:
    cascades find v3 roots (the falsification index takes their lists from the records)."""
    from memroot.ledger.verify import AuditReport
    from memroot.memory_root.replay import RootsReplayCheck

    es = CV.entries()
    pre = _v3(es, builtin_projections())
    check = RootsReplayCheck()  # no file: the entries alone, as for a bundle
    report = AuditReport()
    for e in [*es, _snapshot(es, pre.payload())]:
        check.feed("main", e, report)
    assert report.ok
    assert not report.notes
