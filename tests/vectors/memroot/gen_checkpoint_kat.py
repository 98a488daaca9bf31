"""Generate ``checkpoint-kat.txt``: a known-answer vector for memroot's signed checkpoints.

Where it comes from: a checkpoint (origin ``example.org/memroot/test``, tree size 5, root
32 bytes of 0xAA) signed per C2SP signed-note / tlog-checkpoint with the Ed25519 key whose
RFC 8032 seed is the bytes 0x01, 0x02, ..., 0x20. That seed is public: the key is a test
key and must never sign anything real. Ed25519 signatures are deterministic, so running
this script again must produce identical bytes (``tests/unit/ledger/test_note.py`` checks).

An independent implementation can check itself against the file: derive the key from the
seed, compare the ``vkey`` and ``skey`` lines (the Go ``sumdb/note`` key formats), sign the
checkpoint body and compare the note byte for byte.

File layout, one ``<label> <value>`` per line, then the note verbatim::

    seed <hex>
    vkey <verifier key>
    skey <private key text>
    note
    <signed note, up to the end of the file>

Usage, from the repository root: ``python tests/vectors/memroot/gen_checkpoint_kat.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from memroot.ledger.note import Checkpoint, sign_checkpoint, vkey_of
from memroot.ledger.signing import Ed25519Signer

SEED = bytes(range(1, 33))
ORIGIN = "example.org/memroot/test"
SIZE = 5
ROOT = b"\xaa" * 32
KAT_PATH = Path(__file__).with_name("checkpoint-kat.txt")


def render() -> str:
    """Return the full text of ``checkpoint-kat.txt``."""
    signer = Ed25519Signer.from_seed(ORIGIN, SEED)
    note = sign_checkpoint(Checkpoint(origin=ORIGIN, size=SIZE, root=ROOT), [signer])
    return (
        f"seed {SEED.hex()}\nvkey {vkey_of(signer)}\nskey {signer.private_key_text()}\nnote\n{note}"
    )


def main() -> int:
    """Write the vector next to this script."""
    KAT_PATH.write_bytes(render().encode("utf-8"))
    print(f"wrote {KAT_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
