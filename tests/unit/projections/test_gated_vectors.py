"""The gated-invalidation vectors of docs/FORMAT.md §12 regenerate identically and re-derive."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import cbor2

from tests.vectors.generators import generator

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "memroot"


def test_regenerating_gives_identical_bytes():
    """Running the generator again reproduces gated-vectors.json byte for byte."""
    assert (
        generator(VECTORS / "gen_gated_vectors.py").render()
        == (VECTORS / "gated-vectors.json").read_text()
    )


def test_digest_rederived_with_plain_hashlib_and_cbor2():
    """gated_digest = SHA-256(tag || 0x00 || cbor([1, branch, rows])), per FORMAT.md §12."""
    v = json.loads((VECTORS / "gated-vectors.json").read_text())
    data = cbor2.dumps([1, "main", v["gated_rows"]], canonical=True)
    assert hashlib.sha256(b"memroot/gated-state/v1\x00" + data).hexdigest() == v["gated_digest"]


def test_vectors_show_the_correction_gated_by_provenance():
    """At A the supersede from B does not apply; the DEPRECATE from B2 was refused."""
    v = json.loads((VECTORS / "gated-vectors.json").read_text())
    f1 = "01900000-0000-7000-8000-000000000011"
    by = {name: {o["id"]: o for o in objs} for name, objs in v["at_anchor"].items()}
    assert by["root"][f1]["lifecycle_state"] == "ACTIVE"
    assert by["A"][f1]["superseded_by"].endswith("12")
    assert by["B"][f1]["superseded_by"].endswith("13")
    refused = [e for e in v["entries"] if e["seq"] is None]
    assert [e["input"]["op_type"] for e in refused] == ["DEPRECATE"]
    assert refused[0]["refused"] == "RFC-0001 lifecycle"
