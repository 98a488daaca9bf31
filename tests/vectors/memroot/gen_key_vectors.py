"""Generate ``key-vectors.json``: known-answer vectors for writer keys (docs/FORMAT.md 7.5).

A three-entry ``main`` built from fixed inputs: the genesis of ``format-vectors.json``'s test
log (root key: RFC 8032 seed 0x01..0x20, origin ``example.org/memroot/test``), a ``KEY_ADD``
of the writer key ``host-b`` (seed 0x41..0x60, named after the origin) and a ``KEY_REVOKE`` of
it. For each key entry the file gives the authority statement (canonical CBOR, hex), the root
key's signature of it, the payload and the entry's bytes and hash; and a checkpoint of size 2
signed by the writer key (valid: the KEY_ADD is entry 1 < 2) with the writer's vkey, which is
what a plain C2SP note verifier needs to check it. Never use these keys for anything real.

Deterministic: running it again must give identical bytes (``tests/unit/ledger/
test_key_vectors.py`` checks that, and re-derives every value with plain hashlib,
cryptography and cbor2).

Usage, from the repository root: ``python tests/vectors/memroot/gen_key_vectors.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from memroot.ledger import merkle
from memroot.ledger.entries import ZERO_HASH, Kind, OpInput, build_entry
from memroot.ledger.keyset import authority_statement, sign_statement
from memroot.ledger.note import Checkpoint, sign_checkpoint, vkey_of
from memroot.ledger.signing import Ed25519Signer

ROOT_SEED = bytes(range(1, 33))
WRITER_SEED = bytes(range(0x41, 0x61))
ORIGIN = "example.org/memroot/test"
T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds
ADD_ID = "01900000-0000-7000-8000-0000000000a1"
REVOKE_ID = "01900000-0000-7000-8000-0000000000a2"
VECTORS_PATH = Path(__file__).with_name("key-vectors.json")


def _op(op_type: str, payload: dict[str, Any], op_id: str) -> dict[str, Any]:
    return OpInput(
        op_type=op_type,
        actor_id="memroot",
        actor_type="SYSTEM_PROCESS",
        namespace_id="memroot",
        policy_version="memroot/1",
        payload=payload,
    ).body(op_id)


def render() -> str:
    """Return the full text of ``key-vectors.json``."""
    root = Ed25519Signer.from_seed(ORIGIN, ROOT_SEED)
    writer = Ed25519Signer.from_seed(ORIGIN, WRITER_SEED)
    genesis_body = {
        "branch_type": "CANONICAL",
        "format": 1,
        "keys": [vkey_of(root)],
        "ledger_id": "01900000-0000-7000-8000-000000000000",
        "origin": ORIGIN,
        "snapshot_every": 1000,
    }
    entries = [build_entry(ZERO_HASH, 0, "main", T0, Kind.GENESIS, "GENESIS", genesis_body)]
    out: dict[str, Any] = {
        "origin": ORIGIN,
        "root_vkey": vkey_of(root),
        "writer_vkey": vkey_of(writer),
        "genesis": {"bytes": entries[0].raw.hex(), "hash": entries[0].hash.hex()},
        "key_entries": [],
    }
    for seq, op_type, op_id, branches in (
        (1, "KEY_ADD", ADD_ID, None),
        (2, "KEY_REVOKE", REVOKE_ID, {"main": 2}),
    ):
        prev = entries[-1].hash
        statement = authority_statement(
            origin=ORIGIN,
            seq=seq,
            prev=prev,
            op_type=op_type,
            name="host-b",
            vkey=vkey_of(writer),
            branches=branches,
        )
        payload: dict[str, Any] = {
            "name": "host-b",
            "vkey": vkey_of(writer),
            "root_vkey": vkey_of(root),
            "sig": sign_statement(root, statement),
        }
        if branches is not None:
            payload["branches"] = branches
        e = build_entry(
            prev, seq, "main", T0 + seq * 1_000_000, Kind.OP, op_type, _op(op_type, payload, op_id)
        )
        entries.append(e)
        out["key_entries"].append(
            {
                "seq": seq,
                "type": op_type,
                "statement": statement.hex(),
                "sig": payload["sig"],
                "payload": payload,
                "bytes": e.raw.hex(),
                "hash": e.hash.hex(),
            }
        )
    cr = merkle.CompactRange()
    cr.append_many([e.hash for e in entries[:2]])
    note = sign_checkpoint(Checkpoint(ORIGIN, 2, cr.root()), [writer])
    out["writer_checkpoint"] = {"size": 2, "root": bytes(cr.root()).hex(), "note": note}
    return json.dumps(out, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if VECTORS_PATH.read_text("utf-8") == text else 1)
    VECTORS_PATH.write_text(text, "utf-8")
