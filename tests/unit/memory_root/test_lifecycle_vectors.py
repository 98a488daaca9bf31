"""lifecycle-counts vectors (docs/FORMAT.md §6.6 and §6.13), re-derived with hashlib and cbor2.

Written from the document, as an outside auditor would: decode each entry, fold both versions
of the rule as the text says, hash the rule and the summary (§6.1), and rebuild the v2 root
the vectors give with today's built-ins (the map math is the one the v2 vectors' own test
wrote from §6.12).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cbor2

from tests.unit.memory_root import test_rootsv2_vectors as v2
from tests.vectors.generators import printed

HERE = Path(__file__).parents[2] / "vectors" / "memroot"
VEC = json.loads((HERE / "lifecycle-vectors.json").read_text())
ENTERS = {
    "ASSERT": "ACTIVE",
    "DEPRECATE": "DEPRECATED",
    "SUPERSEDE": "SUPERSEDED",
    "ARCHIVE": "ARCHIVED",
}


def _decoded() -> list[list[Any]]:
    return [cbor2.loads(bytes.fromhex(e["entry_cbor"])) for e in VEC["entries"]]


def _sliced(body: dict[str, Any], namespaces: list[str]) -> bool:
    return not namespaces or body.get("namespace_id") in namespaces


def _v2(entries: list[list[Any]], namespaces: list[str]) -> dict[str, int]:
    """§6.13: one count for the state each lifecycle operation of the slice moves into."""
    counts: dict[str, int] = {}
    for _, _, _, _, _, kind, op, body in entries:
        if kind == "op" and op in ENTERS and _sliced(body, namespaces):
            counts[ENTERS[op]] = counts.get(ENTERS[op], 0) + 1
    return counts


def _v1(entries: list[list[Any]], namespaces: list[str]) -> tuple[dict[str, int], list[str]]:
    """§6.6: objects per state; an ARCHIVE leaves DEPRECATED if its target was deprecated."""
    counts: dict[str, int] = {}
    remembered: list[str] = []
    for _, _, _, _, _, kind, op, body in entries:
        if kind != "op" or op not in ENTERS or not _sliced(body, namespaces):
            continue
        target = body.get("target_id")
        frm: str | None = "ACTIVE"
        if op == "ASSERT":
            frm = None
        elif op == "DEPRECATE" and target not in remembered:
            remembered.append(target)
        elif op == "ARCHIVE" and target in remembered:
            remembered.remove(target)
            frm = "DEPRECATED"
        if frm is not None:
            counts[frm] = counts.get(frm, 0) - 1
        counts[ENTERS[op]] = counts.get(ENTERS[op], 0) + 1
    return counts, remembered


def test_regenerating_gives_identical_bytes() -> None:
    """gen_lifecycle_vectors.py reproduces lifecycle-vectors.json byte for byte."""
    assert (
        printed(HERE / "gen_lifecycle_vectors.py") == (HERE / "lifecycle-vectors.json").read_text()
    )


def test_both_versions_rederive_from_the_entries() -> None:
    """Rules, summaries, counts and digests of v1 and v2 follow from the entries and §6."""
    entries = _decoded()
    for e, raw in zip(VEC["entries"], entries, strict=True):
        assert v2._c(raw).hex() == e["entry_cbor"]
    assert len(VEC["lifecycle_counts"]) == 4
    for r in VEC["lifecycle_counts"]:
        ns = r["namespaces"]
        rule = v2._c(
            {"id": "lifecycle-counts", "version": r["version"], "params": {"namespaces": ns}}
        )
        assert rule.hex() == r["rule_cbor"]
        assert v2._h("memroot/rule/v1", rule).hex() == r["rule"]
        if r["version"] == 2:
            counts = _v2(entries, ns)
            state: Any = counts
            early: Any = _v2(entries[:5], ns)
        else:
            counts, ids = _v1(entries, ns)
            early_counts, early_ids = _v1(entries[:5], ns)
            state = {"counts": counts, "deprecated": "\n".join(ids)}
            early = {"counts": early_counts, "deprecated": "\n".join(early_ids)}
        summary = v2._c({k: n for k, n in counts.items() if n})
        assert summary.hex() == r["summary"]
        assert v2._h("memroot/summary/v1", summary).hex() == r["summary_digest"]
        assert r["count"] == len(cbor2.loads(summary))
        assert v2._c(state).hex() == r["fold_state"]
        assert v2._c(early).hex() == r["fold_state_at_4"]
    by = {(r["version"], tuple(r["namespaces"])): r for r in VEC["lifecycle_counts"]}
    assert cbor2.loads(bytes.fromhex(by[2, ()]["summary"])) == {
        "ACTIVE": 4,
        "DEPRECATED": 1,
        "SUPERSEDED": 1,
        "ARCHIVED": 2,
    }
    assert cbor2.loads(bytes.fromhex(by[1, ()]["summary"])) == {
        "ACTIVE": 1,
        "SUPERSEDED": 1,
        "ARCHIVED": 2,
    }
    assert cbor2.loads(bytes.fromhex(by[1, ()]["fold_state_at_4"]))["deprecated"] == (
        "00000000-0000-7000-8000-0000000000a1"
    )


def test_the_v2_root_with_todays_built_ins_rederives() -> None:
    """The map, the preimage and the root at high-water 9 list lifecycle-counts v2's rule."""
    entries = _decoded()
    hashes = [bytes.fromhex(e["entry_hash"]) for e in VEC["entries"]]
    by_ns: dict[str, dict[bytes, bytes]] = {}
    for e in entries:
        for ns, kind, item, st in v2._leaves_of(e):
            by_ns.setdefault(ns, {})[v2._h("memroot/map/item/v1", v2._c([kind, item]))] = v2._h(
                "memroot/map/value/v1", v2._c(st)
            )
    assert set(by_ns) == {"agent-7", "other"}
    map_root = v2._root(
        {v2._h("memroot/map/ns/v1", ns.encode()): v2._root(i) for ns, i in by_ns.items()}
    )
    assert map_root.hex() == VEC["map_root"]
    lifecycle = next(p for p in VEC["projections"] if p["id"] == "lifecycle-counts")
    assert lifecycle["rule"] == next(
        r["rule"] for r in VEC["lifecycle_counts"] if r["version"] == 2 and not r["namespaces"]
    )
    pre = bytes.fromhex(VEC["preimage"])
    hw = len(hashes) - 1
    assert cbor2.loads(pre) == {
        "v": 2,
        "branch": "main",
        "parent": None,
        "map": map_root,
        "high_water": {
            "seq": hw,
            "entry_hash": hashes[hw],
            "tree_size": hw + 1,
            "tree_root": v2._mth(hashes),
        },
        "projections": [
            {
                "id": p["id"],
                "rule": bytes.fromhex(p["rule"]),
                "digest": v2._h("memroot/summary/v1", bytes.fromhex(p["summary"])),
                "count": p["count"],
            }
            for p in VEC["projections"]
        ],
    }
    assert v2._c(cbor2.loads(pre)) == pre
    assert v2._h("memroot/root/v2", pre).hex() == VEC["memory_root"]
