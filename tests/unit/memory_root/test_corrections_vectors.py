"""corrections vectors (docs/FORMAT.md §6.6 and §6.13), re-derived with hashlib and cbor2.

Written from the document, as an outside auditor would: decode each entry, fold every
``CORRECTION_APPLIED`` of the slice as the text says (the item, ``total``, the chain, the last
``recent``; version 2's tables by §6.6's count(table, key, capacity), version 1's exact
counts), and hash the rule and the summary (§6.1).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cbor2

from tests.unit.memory_root import test_rootsv2_vectors as v2
from tests.unit.memory_root.test_motifs_vectors import _count
from tests.vectors.generators import printed

HERE = Path(__file__).parents[2] / "vectors" / "memroot"
VEC = json.loads((HERE / "corrections-vectors.json").read_text())
FIELDS = (
    "correction", "accepted_by", "motif", "violation_id", "benchmark", "policy_ref",
    "evidence_ids",
)  # fmt: skip


def _fold(entries: list[list[Any]], params: dict[str, Any], version: int) -> dict[str, Any]:
    state: dict[str, Any] = {
        "total": 0, "by_motif": {}, "by_verifier": {}, "recent": [], "chain": bytes(32)
    }  # fmt: skip
    for _, _, seq, _, _, kind, op, body in entries:
        if kind != "op" or op != "CORRECTION_APPLIED":
            continue
        if params["namespaces"] and body.get("namespace_id") not in params["namespaces"]:
            continue
        item = {"id": body["id"], "seq": seq}
        item.update({k: v for k, v in body.get("payload", {}).items() if k in FIELDS})
        state["total"] += 1
        for key, group, cap in (
            ("motif", "by_motif", "top_motifs"),
            ("accepted_by", "by_verifier", "top_verifiers"),
        ):
            text = item.get(key)
            if not (isinstance(text, str) and text):
                continue
            if version == 2:
                _count(state[group], text, params[cap], lambda c, e: [c, e])
            else:
                state[group][text] = state[group].get(text, 0) + 1
        state["chain"] = hashlib.sha256(state["chain"] + v2._c(item)).digest()
        state["recent"] = [*state["recent"], item][-params["recent"] :]
    return state


def test_regenerating_gives_identical_bytes() -> None:
    """gen_corrections_vectors.py reproduces corrections-vectors.json byte for byte."""
    assert (
        printed(HERE / "gen_corrections_vectors.py")
        == (HERE / "corrections-vectors.json").read_text()
    )


def test_every_rule_rederives_from_the_entries() -> None:
    """Rules, summaries, counts, digests and fold states of v2 (and v1) follow from §6.6."""
    entries = [cbor2.loads(bytes.fromhex(e["entry_cbor"])) for e in VEC["entries"]]
    assert [r["version"] for r in VEC["corrections"]] == [2, 2, 2, 1]
    for r in VEC["corrections"]:
        params = r["params"]
        rule = v2._c({"id": "corrections", "version": r["version"], "params": params})
        assert rule.hex() == r["rule_cbor"]
        assert v2._h("memroot/rule/v1", rule).hex() == r["rule"]
        state = _fold(entries, params, r["version"])
        data = v2._c(state)
        assert data.hex() == r["summary"] == r["fold_state"]
        assert v2._h("memroot/summary/v1", data).hex() == r["summary_digest"]
        assert r["count"] == state["total"]
        assert v2._c(_fold(entries[:6], params, r["version"])).hex() == r["fold_state_at_5"]


def test_the_small_tables_hold_what_the_document_says() -> None:
    """With one motif place and two verifier places: the replacements the generator's
    docstring walks through, and §6.6's invariant (the table's counts add up to the texts
    counted)."""
    small = VEC["corrections"][1]
    at5 = cbor2.loads(bytes.fromhex(small["fold_state_at_5"]))
    assert at5["by_verifier"] == {"a": [2, 0], "d": [3, 2]}
    assert at5["by_motif"] == {"TITLE_MISMATCH": [4, 3]}
    got = cbor2.loads(bytes.fromhex(small["summary"]))
    assert got["total"] == 9 and len(got["recent"]) == 3
    assert sum(c for c, _ in got["by_verifier"].values()) == 8  # one accepted_by is empty
    assert sum(c for c, _ in got["by_motif"].values()) == 8  # one has no motif
    exact = cbor2.loads(bytes.fromhex(VEC["corrections"][0]["summary"]))
    v1 = cbor2.loads(bytes.fromhex(VEC["corrections"][3]["summary"]))
    assert exact["by_verifier"] == {k: [c, 0] for k, c in v1["by_verifier"].items()}
    assert exact["chain"] == v1["chain"] and exact["recent"] == v1["recent"]
