"""failure-motifs vectors (docs/FORMAT.md §6.6 and §6.13), re-derived with hashlib and cbor2.

Written from the document, as an outside auditor would: decode each entry, run the
Space-Saving rule of version 2 (and version 1's exact counts) as the text says, hash the rule
and the summary (§6.1), and rebuild the v2 root the vectors give with the built-ins since
version 2 (the map math is the one the v2 vectors' own test wrote from §6.12).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cbor2

from tests.unit.memory_root import test_rootsv2_vectors as v2
from tests.vectors.generators import printed

HERE = Path(__file__).parents[2] / "vectors" / "memroot"
VEC = json.loads((HERE / "motifs-vectors.json").read_text())


def _decoded() -> list[list[Any]]:
    return [cbor2.loads(bytes.fromhex(e["entry_cbor"])) for e in VEC["entries"]]


def _violations(entries: list[list[Any]], params: dict[str, Any]) -> list[tuple[str, str]]:
    """(motif, source) of each VIOLATION_RECORDED of the slice with both texts, in log order."""
    out = []
    for _, _, _, _, _, kind, op, body in entries:
        if kind != "op" or op != "VIOLATION_RECORDED":
            continue
        if params["namespaces"] and body.get("namespace_id") not in params["namespaces"]:
            continue
        p = body.get("payload", {})
        motif, source = p.get("motif"), p.get("source")
        if not (isinstance(motif, str) and motif and isinstance(source, str) and source):
            continue
        if params["motifs"] and motif not in params["motifs"]:
            continue
        out.append((motif, source))
    return out


def _count(table: dict[str, Any], key: str, capacity: int, fresh: Any) -> Any:
    """§6.6 count(table, key, capacity); ``fresh(c, e)`` builds an entry, ``c`` read as ``[0]``
    or ``["count"]`` through ``_c_of``."""
    if key in table:
        _bump(table[key])
        return table[key]
    if len(table) < capacity:
        table[key] = fresh(1, 0)
        return table[key]
    m = min(_c_of(e) for e in table.values())
    gone = sorted((k for k, e in table.items() if _c_of(e) == m), key=lambda k: k.encode())[-1]
    del table[gone]
    table[key] = fresh(m + 1, m)
    return table[key]


def _c_of(e: Any) -> int:
    return int(e["count"] if isinstance(e, dict) else e[0])


def _bump(e: Any) -> None:
    if isinstance(e, dict):
        e["count"] += 1
    else:
        e[0] += 1


def _v2(entries: list[list[Any]], params: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for motif, source in _violations(entries, params):
        at = _count(
            state,
            motif,
            params["top_motifs"],
            lambda c, e: {"count": c, "error": e, "sources": {}},
        )
        _count(at["sources"], source, params["top_sources"], lambda c, e: [c, e])
    return state


def _v1(entries: list[list[Any]], params: dict[str, Any]) -> tuple[Any, Any]:
    counts: dict[str, dict[str, int]] = {}
    for motif, source in _violations(entries, params):
        by = counts.setdefault(motif, {})
        by[source] = by.get(source, 0) + 1
    summary = {}
    for motif, by in counts.items():
        top = sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[: params["top_sources"]]
        summary[motif] = {
            "count": sum(by.values()),
            "distinct_sources": len(by),
            "sources": dict(top),
        }
    return summary, counts


def test_regenerating_gives_identical_bytes() -> None:
    """gen_motifs_vectors.py reproduces motifs-vectors.json byte for byte."""
    assert printed(HERE / "gen_motifs_vectors.py") == (HERE / "motifs-vectors.json").read_text()


def test_every_rule_rederives_from_the_entries() -> None:
    """Rules, summaries, counts, digests and fold states of v2 (and v1) follow from §6.6."""
    entries = _decoded()
    for e, raw in zip(VEC["entries"], entries, strict=True):
        assert v2._c(raw).hex() == e["entry_cbor"]
    assert [r["version"] for r in VEC["failure_motifs"]] == [2, 2, 2, 1]
    for r in VEC["failure_motifs"]:
        params = r["params"]
        rule = v2._c({"id": "failure-motifs", "version": r["version"], "params": params})
        assert rule.hex() == r["rule_cbor"]
        assert v2._h("memroot/rule/v1", rule).hex() == r["rule"]
        if r["version"] == 2:
            state: Any = _v2(entries, params)
            summary: Any = state
            early: Any = _v2(entries[:6], params)
        else:
            summary, state = _v1(entries, params)
            early = _v1(entries[:6], params)[1]
        data = v2._c(summary)
        assert data.hex() == r["summary"]
        assert v2._h("memroot/summary/v1", data).hex() == r["summary_digest"]
        assert r["count"] == len(summary)
        assert v2._c(state).hex() == r["fold_state"]
        assert v2._c(early).hex() == r["fold_state_at_5"]


def test_the_small_tables_hold_what_the_document_says() -> None:
    """With two places per table: the replacements the generator's docstring walks through,
    and the invariants of §6.6 (sources' counts add up to the motif's count minus its error)."""
    small = next(r for r in VEC["failure_motifs"] if r["params"]["top_sources"] == 2)
    assert not small["params"]["motifs"]
    assert cbor2.loads(bytes.fromhex(small["fold_state_at_5"])) == {
        "TITLE_MISMATCH": {"count": 5, "error": 0, "sources": {"a": [2, 0], "d": [3, 2]}}
    }
    got = cbor2.loads(bytes.fromhex(small["summary"]))
    assert got == {
        "TITLE_MISMATCH": {"count": 6, "error": 0, "sources": {"a": [3, 0], "d": [3, 2]}},
        "DEFLECTION": {"count": 3, "error": 2, "sources": {"x": [1, 0]}},
    }
    for at in got.values():
        assert sum(c for c, _ in at["sources"].values()) == at["count"] - at["error"]
    default = next(r for r in VEC["failure_motifs"] if r["version"] == 2)
    exact = cbor2.loads(bytes.fromhex(default["summary"]))  # room left: every count exact
    assert all(at["error"] == 0 for at in exact.values())
    assert exact["TITLE_MISMATCH"]["sources"] == {
        "a": [3, 0],
        "b": [1, 0],
        "c": [1, 0],
        "d": [1, 0],
    }
    sliced = next(r for r in VEC["failure_motifs"] if r["params"]["namespaces"])
    assert set(cbor2.loads(bytes.fromhex(sliced["summary"]))) == {"TITLE_MISMATCH"}


def test_the_v2_root_with_the_built_ins_since_motifs_v2_rederives() -> None:
    """The map, the preimage and the root at high-water 11 list failure-motifs v2's rule."""
    entries = _decoded()
    hashes = [bytes.fromhex(e["entry_hash"]) for e in VEC["entries"]]
    by_ns: dict[str, dict[bytes, bytes]] = {}
    for e in entries:
        for ns, kind, item, st in v2._leaves_of(e):
            by_ns.setdefault(ns, {})[v2._h("memroot/map/item/v1", v2._c([kind, item]))] = v2._h(
                "memroot/map/value/v1", v2._c(st)
            )
    map_root = v2._root(
        {v2._h("memroot/map/ns/v1", ns.encode()): v2._root(i) for ns, i in by_ns.items()}
    )
    assert map_root.hex() == VEC["map_root"]
    motifs = next(p for p in VEC["projections"] if p["id"] == "failure-motifs")
    default = next(r for r in VEC["failure_motifs"] if r["version"] == 2)
    assert (motifs["rule"], motifs["summary"]) == (default["rule"], default["summary"])
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
