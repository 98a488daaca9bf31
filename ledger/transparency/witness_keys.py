"""How a witness learns a log's key set (docs/FORMAT.md 11.5): ``POST /add-keys``.

A witness is configured with a log's **root** vkey (``witness follow DIR ROOT_VKEY``). To
cosign checkpoints signed by a writer key or by a rotated root key, it is shown ``main``'s key
entries (``KEY_ROTATE``, ``KEY_ADD``, ``KEY_REVOKE``) with proofs, in a memroot extension of
tlog-witness (JSON, ``memroot-keys/v1``)::

    {"format": "memroot-keys/v1", "origin": O,
     "checkpoint": <a signed checkpoint note of main>,
     "entries": [{"seq": s, "entry": base64(entry bytes), "proof": [base64 hash, ...],
                  "signoff": {"note": <checkpoint note>, "proof": [...]}   (KEY_ROTATE only)}]}

The witness folds the entries in seq order from its root key (``KeySet``): a ``KEY_ADD`` /
``KEY_REVOKE`` must carry the root key's signature over its authority statement; a
``KEY_ROTATE`` must come with its sign-off, a checkpoint the root key in force signed whose
tree includes the rotation (the proof). Then ``checkpoint`` must open with a key the folded
set allows at its size, and every entry must be in its tree (each ``proof``). What it learned
is kept (``keys.json``); a later request must extend it (the same entries first), else it is
refused as another history. The witness then accepts, for origin ``O`` and ``O/branch/B``,
signatures by any key the set allows at the checkpoint's size (``KeySet.signers_at``).

A witness sees only the key entries it is shown: a revocation it was never shown is not
applied. Its cosignature says the tree is consistent with what it saw; the auditor's step 6
still decides whose signature counts.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Final

from memroot.ledger import merkle
from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import DecodeError, ProofError
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.keyset import KEY_ENTRY_TYPES, KeyEntryError, KeySet
from memroot.ledger.note import Verifier, open_checkpoint, parse_checkpoint, split_note
from memroot.ledger.vocab import OpType

__all__ = ["ADD_KEYS_FORMAT", "LearnedKeys", "learn_keys", "load_learned", "render_add_keys"]

ADD_KEYS_FORMAT: Final = "memroot-keys/v1"


@dataclass(frozen=True, slots=True)
class LearnedKeys:
    """A log's key set as a witness learned it, and the entries it was folded from."""

    keys: KeySet
    entries: tuple[tuple[int, str], ...]  # (seq, base64 entry bytes), in seq order

    def verifiers(self, branch: str, size: int) -> list[Verifier]:
        """Return the keys that may sign ``branch``'s checkpoint of ``size``."""
        return [Verifier.from_vkey(k) for k in self.keys.signers_at(branch, size)]


def render_add_keys(
    origin: str,
    checkpoint: str,
    entries: list[tuple[int, bytes, list[bytes], tuple[str, list[bytes]] | None]],
) -> bytes:
    """Render a ``/add-keys`` request body (``entries``: seq, bytes, proof, sign-off)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    items: list[dict[str, Any]] = []
    for seq, data, proof, signoff in entries:
        item: dict[str, Any] = {"seq": seq, "entry": b64(data), "proof": [b64(h) for h in proof]}
        if signoff is not None:
            item["signoff"] = {"note": signoff[0], "proof": [b64(h) for h in signoff[1]]}
        items.append(item)
    body = {"format": ADD_KEYS_FORMAT, "origin": origin, "checkpoint": checkpoint, "entries": items}
    return json.dumps(body, sort_keys=True).encode("utf-8")


def _b64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise DecodeError(f"{what} is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise DecodeError(f"{what} is not base64") from e


def _proof(value: object, what: str) -> list[bytes]:
    if not isinstance(value, list) or len(value) > 64:
        raise DecodeError(f"{what} is not a list of at most 64 hashes")
    return [_b64(h, what) for h in value]


def learn_keys(
    body: bytes, origin_root: dict[str, Verifier], known: dict[str, LearnedKeys]
) -> tuple[str, LearnedKeys]:
    """Check an ``/add-keys`` request; return the origin and what the witness learns.

    ``origin_root`` maps each followed origin to its configured root key; ``known`` is what
    was learned before (the new entries must extend it).

    Raises:
        DecodeError: the body is malformed (400).
        KeyError: the origin is not followed (404).
        ProofError: a signature, a statement, a sign-off or a proof does not verify, or the
            entries do not extend what was learned (403 / 409 as the message says).
    """
    try:
        req = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise DecodeError(f"not a JSON {ADD_KEYS_FORMAT} request") from err
    if not isinstance(req, dict) or req.get("format") != ADD_KEYS_FORMAT:
        raise DecodeError(f"not a {ADD_KEYS_FORMAT} request")
    origin, note, items = req.get("origin"), req.get("checkpoint"), req.get("entries")
    if not isinstance(origin, str) or not isinstance(note, str) or not isinstance(items, list):
        raise DecodeError("origin, checkpoint and entries are required")
    root = origin_root[origin]  # KeyError: not followed
    text, _ = split_note(note)
    cp = parse_checkpoint(text)
    if cp.origin != origin:
        raise DecodeError(f"the checkpoint is of {cp.origin!r}, not {origin!r}")
    ks = KeySet.start(origin, root.vkey())
    seen: list[tuple[int, str]] = []
    proofs: list[tuple[int, bytes, list[bytes]]] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("seq"), int):
            raise DecodeError("every entry needs a seq")
        seq = int(item["seq"])
        data = _b64(item.get("entry"), f"entry {seq}")
        e = Entry.from_bytes(data)
        if e.seq != seq or e.branch != "main" or e.kind is not Kind.OP:
            raise DecodeError(f"entry {seq} is not an operation at {seq} on main")
        if e.type not in KEY_ENTRY_TYPES or seq >= cp.size:
            raise DecodeError(f"entry {seq} is not a key entry inside the checkpoint")
        if e.type == OpType.KEY_ROTATE.value:
            signoff = item.get("signoff")
            if not isinstance(signoff, dict) or not isinstance(signoff.get("note"), str):
                raise ProofError(f"KEY_ROTATE at {seq} comes without its sign-off")
            try:
                off = open_checkpoint(signoff["note"], [ks.root_verifier()], origin=origin)
            except (DecodeError, ProofError) as err:
                raise ProofError(
                    f"KEY_ROTATE at {seq}: the sign-off is not signed by the root key: {err}"
                ) from err
            merkle.verify_inclusion(
                leaf_hash(data),
                seq,
                off.checkpoint.size,
                _proof(signoff.get("proof"), "sign-off proof"),
                off.checkpoint.root,
            )
        try:
            ks.apply(seq, bytes(e.prev), str(e.type), e.body.get("payload"))
        except KeyEntryError as err:
            raise ProofError(f"entry {seq}: {err}") from err
        seen.append((seq, base64.b64encode(data).decode("ascii")))
        proofs.append((seq, data, _proof(item.get("proof"), f"proof of {seq}")))
    verifiers = [Verifier.from_vkey(k) for k in ks.signers_at("main", cp.size)]
    try:
        open_checkpoint(note, verifiers, origin=origin)
    except (DecodeError, ProofError) as err:
        raise ProofError(f"the checkpoint is not signed by a key of the log: {err}") from err
    for seq, data, proof in proofs:
        merkle.verify_inclusion(leaf_hash(data), seq, cp.size, proof, cp.root)
    before = known.get(origin)
    if before is not None and tuple(seen[: len(before.entries)]) != before.entries:
        raise ProofError("409: these key entries do not extend the ones shown before")
    return origin, LearnedKeys(ks, tuple(seen))


def load_learned(origin: str, root: Verifier, entries: list[Any]) -> LearnedKeys:
    """Fold the entries a witness kept (``keys.json``) again; they were checked when learned.

    Raises:
        DecodeError: if the kept file is damaged.
    """
    ks = KeySet.start(origin, root.vkey())
    kept: list[tuple[int, str]] = []
    for item in entries:
        seq, text = int(item[0]), str(item[1])
        e = Entry.from_bytes(_b64(text, "kept entry"))
        try:
            ks.apply(seq, bytes(e.prev), str(e.type), e.body.get("payload"))
        except KeyEntryError as err:
            raise DecodeError(f"the kept key entry {seq} does not fold: {err}") from err
        kept.append((seq, text))
    return LearnedKeys(ks, tuple(kept))
