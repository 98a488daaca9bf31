"""Generate ``format-vectors.json``: known-answer vectors for docs/FORMAT.md (ledger layer).

A four-entry canonical branch built from fixed inputs: a genesis, an event with a fixed salt,
an ASSERT operation and a TOMBSTONE. For each entry the file gives the canonical CBOR bytes
(hex) and the entry hash; it also gives the content commitment and digest of the event, the
Merkle root at every size, an inclusion and a consistency proof, and the checkpoint note at
size 4 signed with the public test key (RFC 8032 seed 0x01..0x20; never use it for anything
real). Everything is deterministic, so running this script again must give identical bytes
(``tests/unit/ledger/test_format_vectors.py`` checks, and re-derives the hashes with plain
hashlib so the vectors do not only agree with the code that made them).

Usage, from the repository root: ``python tests/vectors/memroot/gen_format_vectors.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from memroot.ledger import merkle
from memroot.ledger.entries import ZERO_HASH, EventInput, Kind, OpInput, build_entry
from memroot.ledger.hashing import content_commitment, content_digest
from memroot.ledger.note import Checkpoint, sign_checkpoint, vkey_of
from memroot.ledger.signing import Ed25519Signer

SEED = bytes(range(1, 33))
ORIGIN = "example.org/memroot/test"
SALT = bytes(range(32))
CONTENT = "I take my tea without sugar."
T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds
EVENT_ID = "01900000-0000-7000-8000-000000000001"
ASSERT_ID = "01900000-0000-7000-8000-000000000002"
TOMB_ID = "01900000-0000-7000-8000-000000000003"
VECTORS_PATH = Path(__file__).with_name("format-vectors.json")


def render() -> str:
    """Return the full text of ``format-vectors.json``."""
    signer = Ed25519Signer.from_seed(ORIGIN, SEED)
    genesis_body = {
        "branch_type": "CANONICAL",
        "format": 1,
        "keys": [vkey_of(signer)],
        "ledger_id": "01900000-0000-7000-8000-000000000000",
        "origin": ORIGIN,
        "snapshot_every": 1000,
    }
    entries = [build_entry(ZERO_HASH, 0, "main", T0, Kind.GENESIS, "GENESIS", genesis_body)]
    data = CONTENT.encode()
    commitment = content_commitment(SALT, data)
    event = EventInput(
        stream="session-1",
        actor_id="alice",
        actor_type="HUMAN_USER",
        role="USER",
        content=CONTENT,
        namespace_id="alice-personal",
    )
    entries.append(
        build_entry(
            entries[-1].hash,
            1,
            "main",
            T0 + 1_000_000,
            Kind.EVENT,
            "EVENT",
            event.body(EVENT_ID, commitment),
        )
    )
    assert_op = OpInput(
        op_type="ASSERT",
        actor_id="agent-7",
        actor_type="AI_AGENT",
        namespace_id="alice-personal",
        policy_version="demo-policy/1",
        target_type="MEMORY_OBJECT",
        payload={
            "object_type": "PREFERENCE",
            "epistemic_type": "OBSERVED",
            "source_type": "USER_STATED",
            "evidence_ids": [EVENT_ID],
            "value": "Alice takes tea without sugar",
            "confidence": 0.9,
            "salience": 0.5,
        },
    )
    entries.append(
        build_entry(
            entries[-1].hash,
            2,
            "main",
            T0 + 2_000_000,
            Kind.OP,
            "ASSERT",
            assert_op.body(ASSERT_ID),
        )
    )
    tomb = OpInput(
        op_type="TOMBSTONE",
        actor_id="alice",
        actor_type="HUMAN_USER",
        namespace_id="alice-personal",
        policy_version="demo-policy/1",
        payload={
            "target_event_id": EVENT_ID,
            "reason": "right to erasure",
            "policy_ref": "gdpr-art-17",
        },
    )
    entries.append(
        build_entry(
            entries[-1].hash, 3, "main", T0 + 3_000_000, Kind.OP, "TOMBSTONE", tomb.body(TOMB_ID)
        )
    )
    leaves = [e.hash for e in entries]
    nodes: dict[tuple[int, int], bytes] = {(0, i): h for i, h in enumerate(leaves)}
    compact = merkle.CompactRange()
    roots = []
    for leaf in leaves:
        for level, index, h in compact.append(leaf):
            nodes[(level, index)] = h
        roots.append(compact.root().hex())

    def read(ids: Any) -> list[bytes]:
        return [nodes[i] for i in ids]

    note = sign_checkpoint(Checkpoint(ORIGIN, 4, compact.root()), [signer])
    out = {
        "about": "memroot FORMAT v1 known-answer vectors; see docs/FORMAT.md",
        "seed": SEED.hex(),
        "vkey": vkey_of(signer),
        "event": {
            "content_utf8": CONTENT,
            "salt": SALT.hex(),
            "content_digest_blake3": content_digest(data).hex(),
            "content_commitment_blake3_keyed": commitment.hex(),
        },
        "entries": [
            {"seq": e.seq, "type": e.type, "cbor": e.raw.hex(), "entry_hash": e.hash.hex()}
            for e in entries
        ],
        "roots": {str(i + 1): r for i, r in enumerate(roots)},
        "empty_root": merkle.root_from_subtrees([]).hex(),
        "inclusion": {
            "index": 1,
            "size": 4,
            "proof": [h.hex() for h in merkle.inclusion_proof(1, 4, read)],
        },
        "consistency": {
            "size1": 2,
            "size2": 4,
            "proof": [h.hex() for h in merkle.consistency_proof(2, 4, read)],
        },
        "checkpoint_note": note,
    }
    return json.dumps(out, indent=2) + "\n"


def main() -> int:
    """Write the vectors file next to this script."""
    VECTORS_PATH.write_text(render(), encoding="utf-8")
    print(f"wrote {VECTORS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
