"""Generate ``receipt-vectors.json``: known-answer vectors for FORMAT.md §10 (read receipts v2).

Two value digests (a plain value; a value with a structured value) with the canonical CBOR
they hash, and one whole version-2 ``READ_RECEIPT`` payload in canonical CBOR. Everything is
deterministic, so running this script again must give identical bytes
(``tests/unit/facade/test_receipts_v2.py`` checks, and re-derives each digest with plain
hashlib).

Usage, from the repository root: ``python tests/vectors/memroot/gen_receipt_vectors.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from memroot.ledger.encoding import encode
from memroot.memory_root.receipts import RECEIPT_V, VALUE_TAG, value_digest

VECTORS_PATH = Path(__file__).with_name("receipt-vectors.json")
OBJECT_ID = "01900000-0000-7000-8000-000000000002"
ROOT = bytes(range(32))


class _Value:
    """The two fields of a memory object a value digest covers."""

    def __init__(self, value: str, structured_value: Any) -> None:
        self.value = value
        self.structured_value = structured_value


def render() -> str:
    """Return the full text of ``receipt-vectors.json``."""
    values = [
        _Value("Alice takes tea without sugar", None),
        _Value("Alice's tea", {"milk": False, "sugar": 0, "kind": ["green", "black"]}),
    ]
    digests = []
    for v in values:
        cbor = encode({"structured_value": v.structured_value, "value": v.value})
        digests.append(
            {
                "value": v.value,
                "structured_value": v.structured_value,
                "cbor": cbor.hex(),
                "value_digest": value_digest(v).hex(),  # type: ignore[arg-type]
            }
        )
    payload = {
        "v": RECEIPT_V,
        "run_id": "run-2026-12-01-a",
        "query": {"branch": "main", "limit": 20, "mode": "DEFAULT", "text": "tea"},
        "memory_root": ROOT,
        "objects": [
            {
                "id": OBJECT_ID,
                "version": 1,
                "state": "live",
                "value_digest": bytes.fromhex(digests[0]["value_digest"]),
            }
        ],
    }
    out = {
        "about": "FORMAT.md §10: read receipt value digests and a version-2 payload",
        "tag": VALUE_TAG,
        "digests": digests,
        "payload_v2_cbor": encode(payload).hex(),
    }
    return json.dumps(out, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if VECTORS_PATH.read_text() == text else 1)
    VECTORS_PATH.write_text(text)
