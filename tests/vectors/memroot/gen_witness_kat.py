"""Generate ``witness-kat.json``: known answers for cosignature/v1 and branch checkpoints.

Where it comes from (all keys are public test keys that must never sign anything real):

- the log key: Ed25519 with RFC 8032 seed ``01 02 .. 20`` under the log's origin
  ``example.org/memroot/test`` (the key of ``checkpoint-kat.txt``);
- the witness key: Ed25519 with seed ``21 22 .. 40``, named ``witness.example.org/w1``;
- the cosigned checkpoint: the size-5 checkpoint of ``checkpoint-kat.txt`` (root 32 x 0xAA),
  cosigned at POSIX time 1790000000 (C2SP tlog-cosignature ``cosignature/v1``);
- a branch checkpoint (FORMAT.md 5, checkpoint key names since 2026-12): origin
  ``example.org/memroot/test/branch/sim-1``, size 3, root 32 x 0xBB, signed by the log key
  under the key name of its own origin.

Ed25519 signatures are deterministic, so running this again must give identical bytes
(``tests/unit/ledger/test_witness.py`` checks, and re-derives every field with nothing but
``hashlib`` and ``cryptography``). Usage: ``python tests/vectors/memroot/gen_witness_kat.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from memroot.ledger.note import Checkpoint, Verifier, sign_checkpoint, vkey_of
from memroot.ledger.signing import Ed25519Signer
from memroot.ledger.transparency.cosignature import WitnessKey, cosign, cosigned_message

LOG_SEED = bytes(range(1, 33))
WITNESS_SEED = bytes(range(0x21, 0x41))
ORIGIN = "example.org/memroot/test"
WITNESS = "witness.example.org/w1"
TIMESTAMP = 1790000000
BRANCH_ORIGIN = f"{ORIGIN}/branch/sim-1"
KAT_PATH = Path(__file__).with_name("witness-kat.json")


def render() -> str:
    """Return the full text of ``witness-kat.json``."""
    log = Ed25519Signer.from_seed(ORIGIN, LOG_SEED)
    witness = Ed25519Signer.from_seed(WITNESS, WITNESS_SEED)
    checkpoint = Checkpoint(origin=ORIGIN, size=5, root=b"\xaa" * 32)
    note = sign_checkpoint(checkpoint, [log])
    body = checkpoint.body()
    line = cosign(witness, body, TIMESTAMP)
    message = cosigned_message(body, TIMESTAMP)
    branch_cp = Checkpoint(origin=BRANCH_ORIGIN, size=3, root=b"\xbb" * 32)
    data = {
        "cosignature_v1": {
            "witness_name": WITNESS,
            "witness_seed": WITNESS_SEED.hex(),
            "witness_public_key": witness.public_key.hex(),
            "witness_vkey": WitnessKey.from_signer(witness).vkey(),
            "timestamp": TIMESTAMP,
            "log_vkey": vkey_of(log),
            "checkpoint_note": note,
            "signed_message": message.decode("utf-8"),
            "signed_message_hex": message.hex(),
            "signature_hex": witness.sign(message).hex(),
            "cosignature_line": line,
            "cosigned_note": note + line,
        },
        "branch_checkpoint": {
            "log_vkey": vkey_of(log),
            "branch_vkey": Verifier.from_signer(log).for_origin(BRANCH_ORIGIN).vkey(),
            "note": sign_checkpoint(branch_cp, [log]),
        },
    }
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    """Write the vector next to this script."""
    KAT_PATH.write_bytes(render().encode("utf-8"))
    print(f"wrote {KAT_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
