"""Proof files (``memroot-proof`` versions 1-3): what memory held at a root, checked offline.

docs/FORMAT.md §6.15. A proof file carries everything a third party needs to check, with a
trusted verifier key and nothing else, a claim about the memory map (§6.12) at one memory
root v2 or v3 (§6.13, §6.16). Version 1 is one JSON object (byte strings in base64);
version 2 is the same content as one canonical CBOR array (``ProofFile.encode``; its root is
its entry's ``memory_root``); version 3, what ``memroot prove`` writes by default, is
version 2 without what the checker re-derives (``ProofFile.encode_v3``: no index, no
``memory_root`` in the entry, the checkpoint as its tree size and signature when its note
is the one rebuilt from the trusted key's name, ``true`` for the paths' own end leaves, a
bitmap for the empty siblings). ``parse`` tells them apart by the first byte (a CBOR array
head is binary) and byte 15 (the version), and refuses unknown versions. The claim:

- ``kind`` ``object`` or ``state``: one item of one namespace, present with its state, or
  absent (a proof of absence: exit 0, labelled "ABSENT");
- ``kind`` ``namespace``: every item of one namespace and nothing else (a range proof), or
  that the namespace holds no item.

The claim is tied to a signed tree: the SNAPSHOT entry that records the root, its RFC 9162
inclusion proof in a signed checkpoint (§4, §5), the root's preimage inside that entry (which
holds the map root), and the map paths from the map root down to the item(s).

``ProofFile`` is the file's model (``parse``: strict, any version; ``render``: the
canonical version 1 text; ``encode``: the version 2 bytes; ``encode_v3``: the version 3
bytes; ``with_note``: a version 3 file's checkpoint note rebuilt and verified).
``check_proof`` runs the checks P1-P6 below and returns what is proven (``Proven``), or
raises naming the first check that fails. This module is the offline auditor's side: it
imports the log's core only (canonical CBOR, hashes, entries, Merkle proofs, signed notes),
never a storage driver, so it runs where only the standard library, cbor2 and cryptography
are installed. The map's hash rules are ``memroot.ledger.map_tree``, the one copy that
``memroot.memory_root.state_map`` (which builds and proves maps) uses too.

Checks (numbered as in FORMAT.md §6.15)::

    (P1) parse: the exact keys (versions 2, 3: positions) and types, canonical base64 and
         hex (versions 2, 3: canonical CBOR; version 3: one form for each content), bounded
         sizes.
    (P2) checkpoint: the note verifies with a trusted vkey; its origin is the log's (main)
         or the branch origin ``<log>/branch/<B>`` of the entry's branch.
    (P3) entry: the SNAPSHOT entry decodes strictly (§3), its seq is the proof's index, and
         its leaf is included at that index in the checkpoint's tree (RFC 9162 §2.1.3.2).
    (P4) root: the entry's payload is a v2 or v3 root whose ``memory_root`` is the hash of the rest
         of the payload, equal to the file's ``root``.
    (P5) map: the namespace path and the item path (or the namespace's items) give the
         payload's map root.
    (P6) claim: the item's key and value hash (or every item's) are those the paths end at.

Kept whole: the file's model, its two encodings' strict readers (P1, each building the one
``ProofFile``) and the checks P2-P6 on the fields both share are one format; the readers
cannot leave without the model (``ProofFile.parse`` calls them: an import circle), and the
model without its reader would be a format without its strictness.
"""

from __future__ import annotations

import binascii
import dataclasses
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from memroot.ledger import encoding, merkle
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind
from memroot.ledger.errors import DecodeError, ProofError
from memroot.ledger.hashing import HASH_SIZE, domain_hash, leaf_hash
from memroot.ledger.map_tree import (
    EMPTY,
    KEY_BITS,
    Leaf,
    MapProof,
    item_key,
    namespace_key,
    path_root,
    tree_root,
    value_hash_of,
)
from memroot.ledger.note import (
    MAX_NOTE_SIZE,
    MAX_PROOF_HASHES,
    Checkpoint,
    SignedCheckpoint,
    Verifier,
    branch_of_origin,
    open_checkpoint,
    parse_checkpoint,
    split_note,
)

__all__ = [
    "FORMAT",
    "KINDS",
    "MAX_PROOF_FILE",
    "V2_MAGIC",
    "V3_MAGIC",
    "VERSION",
    "VERSIONS",
    "VERSION_BINARY",
    "VERSION_COMPACT",
    "CheckMemo",
    "ProofFile",
    "ProofItem",
    "Proven",
    "check_proof",
    "checkpoint_note",
    "compact_checkpoint",
    "is_binary",
]

FORMAT: Final = "memroot-proof"
VERSION: Final = 1
"""The JSON file (FORMAT.md §6.15, base64 byte strings)."""
VERSION_BINARY: Final = 2
"""The binary file: one canonical CBOR array (FORMAT.md §6.15, "Version 2")."""
VERSION_COMPACT: Final = 3
"""The compact binary file (FORMAT.md §6.15, "Version 3"): version 2 without the bytes the
checker can derive (the index, the entry's ``memory_root``, the checkpoint's text, the
item's and the namespace's own end leaves, the empty siblings)."""
VERSIONS: Final = (VERSION, VERSION_BINARY, VERSION_COMPACT)
V2_FIELDS: Final = 10
V2_MAGIC: Final = bytes([0x80 | V2_FIELDS, 0x60 | len(FORMAT)]) + FORMAT.encode("ascii")
"""A version 2 file's first 15 bytes (an array of 10, the text ``memroot-proof``); the
version number is the 16th."""
V3_FIELDS: Final = 9
V3_MAGIC: Final = bytes([0x80 | V3_FIELDS]) + V2_MAGIC[1:]
"""A version 3 file's first 15 bytes (an array of 9, the text ``memroot-proof``); the
version number (3) is the 16th."""
_HEADS: Final = {VERSION_BINARY: V2_MAGIC[0], VERSION_COMPACT: V3_MAGIC[0]}
SIGNATURE_SIZE: Final = 64  # an Ed25519 signature
_SIG_PREFIX: Final = "\u2014 "  # a signed note's signature line begins so (FORMAT.md §5)
KINDS: Final = ("object", "state", "namespace")
MAX_PROOF_FILE: Final = 256 << 20
"""Bytes; a namespace proof of 10^6 items with small states is about 150 MB."""
MAX_ITEMS: Final = 1 << 24
MAX_ID: Final = 4096  # an identifier's limit at append (FORMAT.md §3.1)
WORDS_ITEMS: Final = 20  # items a namespace's plain-words summary lists

ROOT_V2_TAG: Final = "memroot/root/v2"
ROOT_V2: Final = 2
ROOT_V3_TAG: Final = "memroot/root/v3"
ROOT_V3: Final = 3
_MAP_ROOT_TAGS: Final = {ROOT_V2: ROOT_V2_TAG, ROOT_V3: ROOT_V3_TAG}
SNAPSHOT: Final = "SNAPSHOT"

_TOP_KEYS: Final = {
    "object": frozenset(
        {"format", "version", "kind", "root", "checkpoint", "snapshot", "namespace"}
        | {"namespace_path", "item", "item_path"}
    ),
    "namespace": frozenset(
        {"format", "version", "kind", "root", "checkpoint", "snapshot", "namespace"}
        | {"namespace_path", "items"}
    ),
}
_TOP_KEYS_BY_KIND: Final = {
    "object": _TOP_KEYS["object"],
    "state": _TOP_KEYS["object"],
    "namespace": _TOP_KEYS["namespace"],
}


# -- the file ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProofItem:
    """One item a proof names: its kind, its id, and its state (canonical CBOR) or None.

    ``state`` None claims that the map holds no item of that kind and id in the namespace.
    """

    kind: str
    id: str
    state: bytes | None


@dataclass(frozen=True, slots=True)
class ProofFile:
    """A ``memroot-proof`` file (FORMAT.md §6.15), parsed but not checked.

    Attributes:
        kind: ``object``, ``state`` or ``namespace``.
        root: the memory root (32 bytes) the claim is about.
        checkpoint: the signed checkpoint note, as signed.
        index: the SNAPSHOT entry's seq, its leaf index in the checkpoint's tree.
        entry: the SNAPSHOT entry's bytes.
        inclusion: its RFC 9162 inclusion proof in the checkpoint's tree.
        namespace: the namespace the claim is about.
        namespace_path: the namespace key's path in the namespace tree.
        item: (object, state) the item claimed, present or absent.
        item_path: (object, state) its path in the namespace's item tree; None when the
            namespace is absent from the map.
        items: (namespace) every item of the namespace, sorted by item key.
        compact_checkpoint: (a version 3 file that carries the checkpoint as its tree size
            and signature) ``(size, signature)``; ``checkpoint`` is then empty until the
            checker rebuilds the note from a trusted key's name (``with_note``).
    """

    kind: str
    root: bytes
    checkpoint: str
    index: int
    entry: bytes
    inclusion: tuple[bytes, ...]
    namespace: str
    namespace_path: MapProof
    item: ProofItem | None = None
    item_path: MapProof | None = None
    items: tuple[ProofItem, ...] = ()
    compact_checkpoint: tuple[int, bytes] | None = None

    def _note(self) -> str:
        if self.compact_checkpoint is not None:
            raise ValueError(
                "this version 3 file carries its checkpoint as a tree size and a signature: "
                "rebuild the note first (ProofFile.with_note(vkeys))"
            )
        return self.checkpoint

    def with_note(self, vkeys: Sequence[str]) -> ProofFile:
        """Return this file with its checkpoint note as text, rebuilt if it was compact.

        A version 3 file may carry the checkpoint as ``[size, signature]`` (FORMAT.md §6.15,
        "Version 3"); its note is rebuilt from the trusted key's name, the entry's branch and
        the root its inclusion path gives, and kept only if it verifies (P2). A file that
        carries the text is returned as it is (nothing is checked).

        Raises:
            ProofError: (P2, P3) no trusted key's rebuilt note verifies, or the inclusion
                path gives no root.
            DecodeError: a vkey is malformed.
            ValueError: if ``vkeys`` is empty.
        """
        if self.compact_checkpoint is None:
            return self
        note, _cp = _rebuilt_checkpoint(self, vkeys)
        return dataclasses.replace(self, checkpoint=note, compact_checkpoint=None)

    def to_json(self) -> dict[str, Any]:
        """Return the file's JSON object (bytes as canonical base64, the root in hex).

        Raises:
            ValueError: for a compact version 3 checkpoint not yet rebuilt (``with_note``).
        """
        out: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "kind": self.kind,
            "root": self.root.hex(),
            "checkpoint": self._note(),
            "snapshot": {
                "index": self.index,
                "entry": _b64(self.entry),
                "inclusion": [_b64(h) for h in self.inclusion],
            },
            "namespace": self.namespace,
            "namespace_path": _path_json(self.namespace_path),
        }
        if self.kind == "namespace":
            out["items"] = [_item_json(i) for i in self.items]
        else:
            assert self.item is not None
            out["item"] = _item_json(self.item)
            out["item_path"] = None if self.item_path is None else _path_json(self.item_path)
        return out

    def render(self) -> str:
        """Return the file's text: compact JSON, keys sorted, one final newline.

        Raises:
            ValueError: as ``to_json``.
        """
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")) + "\n"

    def to_cbor(self) -> list[Any]:
        """Return the version 2 file's value: the CBOR array of FORMAT.md §6.15, "Version 2".

        The root is not repeated: it is the SNAPSHOT entry's ``memory_root``.

        Raises:
            ValueError: as ``to_json``.
        """
        claim: list[Any]
        if self.kind == "namespace":
            claim = [_item_cbor(i) for i in self.items]
        else:
            assert self.item is not None
            claim = [
                _item_cbor(self.item),
                None if self.item_path is None else _path_cbor(self.item_path),
            ]
        return [
            FORMAT,
            VERSION_BINARY,
            self.kind,
            self._note(),
            self.index,
            self.entry,
            b"".join(self.inclusion),
            self.namespace,
            _path_cbor(self.namespace_path),
            claim,
        ]

    def to_cbor_v3(self) -> list[Any]:
        """Return the version 3 file's value: the CBOR array of FORMAT.md §6.15, "Version 3".

        Left out, since the checker derives them: the index (the entry's ``seq``), the
        entry's ``payload.memory_root`` (P4's hash of the rest of the payload), the
        checkpoint's text when it is exactly what the checker rebuilds (then ``[size,
        signature]``), an item path's end leaf when it is the item's own and the namespace
        path's when it is the namespace's own (``true``), and every sibling that is the
        empty-subtree hash (marked in a bitmap).

        Raises:
            ValueError: if the entry is not an entry with a payload map.
        """
        entry, branch = _strip_root(self.entry)
        compact = self.compact_checkpoint or compact_checkpoint(self.checkpoint, branch)
        note: Any = self.checkpoint if compact is None else [compact[0], compact[1]]
        claim: list[Any]
        ns_own = None
        if self.kind == "namespace":
            claim = [_item_cbor(i) for i in self.items]
        else:
            assert self.item is not None
            own = _own_leaf(self.item)
            claim = [
                _item_cbor(self.item),
                None if self.item_path is None else _path_cbor3(self.item_path, own),
            ]
            ns_own = _namespace_leaf(self.namespace, self.item, self.item_path)
        return [
            FORMAT,
            VERSION_COMPACT,
            self.kind,
            note,
            entry,
            b"".join(self.inclusion),
            self.namespace,
            _path_cbor3(self.namespace_path, ns_own),
            claim,
        ]

    def encode(self) -> bytes:
        """Return the version 2 file's bytes: its value (``to_cbor``) as canonical CBOR.

        Raises:
            ValueError: as ``to_json``.
        """
        return encoding.encode(self.to_cbor())

    def encode_v3(self) -> bytes:
        """Return the version 3 file's bytes: its value (``to_cbor_v3``) as canonical CBOR.

        Raises:
            ValueError: as ``to_cbor_v3``.
        """
        return encoding.encode(self.to_cbor_v3())

    def serialize(self, version: int = VERSION_COMPACT) -> bytes:
        """Return the file's bytes in ``version`` 3 (compact binary, the default), 2 or 1.

        Raises:
            ValueError: for another version, or (1, 2) a compact checkpoint not yet rebuilt.
        """
        if version == VERSION_COMPACT:
            return self.encode_v3()
        if version == VERSION_BINARY:
            return self.encode()
        if version == VERSION:
            return self.render().encode("utf-8")
        raise ValueError(f"memroot-proof has versions 1, 2 and 3, not {version!r}")

    @classmethod
    def parse(cls, text: str | bytes) -> ProofFile:
        """Parse a proof file of either version strictly (P1); nothing is verified.

        The version is told by the first bytes: a binary file (any file whose first byte is
        a CBOR array head) begins with ``V2_MAGIC`` or ``V3_MAGIC`` and its version number
        (byte 15: 02 or 03), anything else is read as a version 1 JSON text. A version 3
        file's entry gets its ``memory_root`` back here (P4's rule) and its index is its
        ``seq``; a compact checkpoint stays ``compact_checkpoint`` (its note needs the
        trusted key's name: ``with_note``, or ``check_proof``).

        Raises:
            DecodeError: naming the field that is malformed, or the unknown version.
        """
        if isinstance(text, bytes | bytearray | memoryview) and is_binary(bytes(text[:1])):
            return _parse_binary(bytes(text))
        return _parse(text if isinstance(text, str) else bytes(text))


def is_binary(data: bytes) -> bool:
    """Whether ``data`` (a file's first byte or more) is read as a binary (version 2 or 3) file.

    A CBOR array head (major type 4: bytes 0x80-0x9f) can begin no JSON text.
    """
    return bool(data) and 0x80 <= data[0] <= 0x9F


def _path_cbor(path: MapProof) -> list[Any]:
    leaf = None if path.leaf is None else path.leaf.key + path.leaf.value
    return [b"".join(path.siblings), leaf]


def _item_cbor(item: ProofItem) -> list[Any]:
    return [item.kind, item.id, item.state]


def _own_leaf(item: ProofItem) -> Leaf | None:
    """Return the leaf an item with a state is at (its key and value hash), else None."""
    if item.state is None:
        return None
    return Leaf(item_key(item.kind, item.id), value_hash_of(item.state))


def _namespace_leaf(namespace: str, item: ProofItem, item_path: MapProof | None) -> Leaf | None:
    """Return the namespace's own leaf an object/state file's paths imply, else None.

    ``(namespace_key(namespace), R)`` with ``R`` the root the item path gives the item's key
    (the namespace's item tree, when the file is honest); None without an item path, or when
    the item path gives no root (its end leaf is off the key's path: P5 refuses that).
    """
    if item_path is None:
        return None
    try:
        sub = path_root(item_key(item.kind, item.id), item_path)
    except ProofError:
        return None
    return Leaf(namespace_key(namespace), sub)


def _path_cbor3(path: MapProof, own: Leaf | None) -> list[Any]:
    """Return a version 3 ``PATH3``: the empty-sibling bitmap, the other siblings, the end.

    The end is ``true`` when it is ``own`` (the path's own leaf), else 64 bytes or null.
    """
    bitmap = bytearray((len(path.siblings) + 7) // 8)
    hashes = []
    for i, sibling in enumerate(path.siblings):
        if sibling == EMPTY:
            bitmap[i >> 3] |= 0x80 >> (i & 7)
        else:
            hashes.append(sibling)
    leaf = path.leaf
    end: Any = None
    if leaf is not None:
        mine = own is not None and leaf.key == own.key and leaf.value == own.value
        end = True if mine else leaf.key + leaf.value
    return [bytes(bitmap), b"".join(hashes), end]


def _strip_root(entry: bytes) -> tuple[bytes, str]:
    """Return the entry's bytes without ``payload.memory_root``, and the entry's branch."""
    try:
        value = encoding.decode(entry)
    except DecodeError as e:
        raise ValueError(f"the SNAPSHOT entry is not canonical CBOR: {e}") from e
    if type(value) is not list or len(value) != 8 or type(value[7]) is not dict:
        raise ValueError("the SNAPSHOT entry is not an entry (an array of 8 ending in its body)")
    body = value[7]
    payload = body.get("payload")
    if type(payload) is not dict or type(value[3]) is not str:
        raise ValueError("the SNAPSHOT entry has no payload map or no branch")
    bare = {k: v for k, v in payload.items() if k != "memory_root"}
    return encoding.encode([*value[:7], {**body, "payload": bare}]), value[3]


def checkpoint_note(origin: str, size: int, root: bytes, key_id: bytes, signature: bytes) -> str:
    """Return the signed checkpoint note a version 3 ``[size, signature]`` stands for.

    FORMAT.md §5: the note text ``origin``, ``size`` in decimal and ``root`` in base64, one
    line each, then a blank line and one signature line named ``origin``, its base64 the
    key id ``key_id`` (4 bytes) and the Ed25519 ``signature`` (64 bytes).

    Raises:
        ValueError: if the origin is not one line, or a size is out of range.
    """
    body = Checkpoint(origin, size, root).body()
    return f"{body}\n{_SIG_PREFIX}{origin} {_b64(key_id + signature)}\n"


def compact_checkpoint(note: str, branch: str) -> tuple[int, bytes] | None:
    """Return the ``(size, signature)`` a version 3 file carries for ``note``, or None.

    A note is carried compact exactly when the checker's rebuild (``checkpoint_note``, for
    the origin a trusted key gives the entry's ``branch``) can give it back: its text is the
    three lines origin, size and root (no extension line), its one signature line is named
    as its origin with an Ed25519 signature, and on a branch other than ``main`` its origin
    is ``<log>/branch/<branch>``. Any other note (a witness's cosignature, an extension
    line, a branch checkpoint signed under the log's own name) is carried as its text; None.
    """
    try:
        text, lines = split_note(note)
        cp = parse_checkpoint(text)
    except DecodeError:
        return None
    if cp.extensions or len(lines) != 1:
        return None
    name, key_id, signature = lines[0]
    suffix = f"/branch/{branch}"
    on_branch = cp.origin.endswith(suffix) and len(cp.origin) > len(suffix)
    if name != cp.origin or len(signature) != SIGNATURE_SIZE:
        return None
    if branch != CANONICAL_BRANCH and not on_branch:
        return None
    try:
        again = checkpoint_note(cp.origin, cp.size, bytes(cp.root), key_id, signature)
    except ValueError:
        return None
    return (cp.size, signature) if again == note else None


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _path_json(path: MapProof) -> dict[str, Any]:
    return {
        "siblings": [_b64(s) for s in path.siblings],
        "leaf": None
        if path.leaf is None
        else {"key": _b64(path.leaf.key), "value": _b64(path.leaf.value)},
    }


def _item_json(item: ProofItem) -> dict[str, Any]:
    return {
        "kind": item.kind,
        "id": item.id,
        "state": None if item.state is None else _b64(item.state),
    }


# -- (P1) parsing -----------------------------------------------------------------------------


def _bad(where: str, what: str) -> DecodeError:
    return DecodeError(f"proof file: {where}: {what}")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _bad(k, "the key appears twice")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise _bad("a number", f"{name} is not a JSON number")


def _obj(value: Any, where: str, keys: frozenset[str]) -> dict[str, Any]:
    if type(value) is not dict:
        raise _bad(where, "must be a JSON object")
    if set(value) != keys:
        missing = sorted(keys - set(value))
        extra = sorted(set(value) - keys)
        raise _bad(
            where,
            "has the wrong fields"
            + (f" (missing {', '.join(missing)})" if missing else "")
            + (f" (unknown {', '.join(extra)})" if extra else ""),
        )
    return value


def _text(value: Any, where: str, limit: int, kind: str = "a text string") -> str:
    if type(value) is not str:
        raise _bad(where, f"must be {kind}")
    if not value or len(value) > limit:
        raise _bad(where, f"must be 1 to {limit} characters")
    return value


def _bytes(value: Any, where: str, size: int | None = None) -> bytes:
    if type(value) is not str:
        raise _bad(where, "must be a base64 string")
    try:
        # strict: the alphabet only, padding exactly where it belongs, nothing after it.
        raw = binascii.a2b_base64(value, strict_mode=True)
    except (binascii.Error, ValueError) as e:
        raise _bad(where, "is not valid base64") from e
    if binascii.b2a_base64(raw, newline=False) != value.encode("ascii"):
        raise _bad(where, "is not canonical base64 (padding bits must be zero)")
    if size is not None and len(raw) != size:
        raise _bad(where, f"must be {size} bytes, not {len(raw)}")
    return raw


def _hashes(values: list[Any], where: str) -> tuple[bytes, ...]:
    """Decode a list of canonical base64 32-byte hashes (as ``_bytes`` each, in one pass)."""
    try:
        raw = [binascii.a2b_base64(v, strict_mode=True) for v in values if type(v) is str]
    except (binascii.Error, ValueError):
        raw = []
    if len(raw) == len(values) and all(
        len(r) == HASH_SIZE and binascii.b2a_base64(r, newline=False) == v.encode("ascii")
        for r, v in zip(raw, values, strict=True)
    ):
        return tuple(raw)
    # One is malformed: the field-by-field reading names it.
    return tuple(_bytes(v, f"{where}[{i}]", HASH_SIZE) for i, v in enumerate(values))


def _uint(value: Any, where: str) -> int:
    if type(value) is not int or not 0 <= value < 1 << 63:
        raise _bad(where, "must be a non-negative integer")
    return value


def _path(value: Any, where: str) -> MapProof:
    p = _obj(value, where, frozenset({"siblings", "leaf"}))
    sib = p["siblings"]
    if type(sib) is not list or len(sib) > KEY_BITS:
        raise _bad(f"{where}.siblings", f"must be a list of at most {KEY_BITS} hashes")
    siblings = _hashes(sib, f"{where}.siblings")
    end = p["leaf"]
    leaf = None
    if end is not None:
        e = _obj(end, f"{where}.leaf", frozenset({"key", "value"}))
        leaf = Leaf(
            _bytes(e["key"], f"{where}.leaf.key", HASH_SIZE),
            _bytes(e["value"], f"{where}.leaf.value", HASH_SIZE),
        )
    return MapProof(siblings, leaf)


def _item(value: Any, where: str) -> ProofItem:
    i = _obj(value, where, frozenset({"kind", "id", "state"}))
    state = None if i["state"] is None else _bytes(i["state"], f"{where}.state")
    if state is not None:
        try:
            encoding.decode(state)
        except DecodeError as e:
            raise _bad(f"{where}.state", f"is not canonical CBOR ({e})") from e
    return ProofItem(
        _text(i["kind"], f"{where}.kind", MAX_ID), _text(i["id"], f"{where}.id", MAX_ID), state
    )


def _parse(text: str | bytes) -> ProofFile:
    if isinstance(text, bytes):
        if len(text) > MAX_PROOF_FILE:
            raise _bad("the file", f"is larger than {MAX_PROOF_FILE} bytes")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _bad("the file", "is not UTF-8") from e
    if len(text) > MAX_PROOF_FILE:
        raise _bad("the file", f"is larger than {MAX_PROOF_FILE} bytes")
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        if isinstance(e, DecodeError):
            raise
        raise _bad("the file", f"is not JSON ({e})") from e
    if type(data) is not dict:
        raise _bad("the file", "must be a JSON object")
    if data.get("format") != FORMAT:
        raise _bad("format", f"must be {FORMAT!r}")
    if data.get("version") != VERSION or type(data.get("version")) is not int:
        raise _bad(
            "version",
            f"must be {VERSION} in a JSON file (version {VERSION_BINARY} is binary, as is "
            f"{VERSION_COMPACT}; this reader knows versions {', '.join(map(str, VERSIONS))} only)",
        )
    kind = data.get("kind")
    if kind not in KINDS:
        raise _bad("kind", f"must be one of {', '.join(KINDS)}")
    _obj(data, "the file", _TOP_KEYS_BY_KIND[kind])
    root = data["root"]
    if type(root) is not str or len(root) != 2 * HASH_SIZE or root.strip("0123456789abcdef"):
        raise _bad("root", "must be 64 lowercase hex digits")
    cp = data["checkpoint"]
    if type(cp) is not str or not cp or len(cp) > MAX_NOTE_SIZE:
        raise _bad("checkpoint", "must be a signed checkpoint note (text)")
    snap = _obj(data["snapshot"], "snapshot", frozenset({"index", "entry", "inclusion"}))
    inc = snap["inclusion"]
    if type(inc) is not list or len(inc) > MAX_PROOF_HASHES:
        raise _bad("snapshot.inclusion", f"must be a list of at most {MAX_PROOF_HASHES} hashes")
    common: dict[str, Any] = {
        "kind": kind,
        "root": bytes.fromhex(root),
        "checkpoint": cp,
        "index": _uint(snap["index"], "snapshot.index"),
        "entry": _bytes(snap["entry"], "snapshot.entry"),
        "inclusion": _hashes(inc, "snapshot.inclusion"),
        "namespace": _text(data["namespace"], "namespace", MAX_ID),
        "namespace_path": _path(data["namespace_path"], "namespace_path"),
    }
    if kind == "namespace":
        items = data["items"]
        if type(items) is not list or len(items) > MAX_ITEMS:
            raise _bad("items", f"must be a list of at most {MAX_ITEMS} items")
        return ProofFile(
            **common, items=tuple(_item(x, f"items[{i}]") for i, x in enumerate(items))
        )
    item = _item(data["item"], "item")
    ip = data["item_path"]
    return ProofFile(**common, item=item, item_path=None if ip is None else _path(ip, "item_path"))


# -- (P1) parsing version 2 ------------------------------------------------------------------


def _v2_array(value: Any, where: str, size: int | None = None) -> list[Any]:
    if type(value) is not list:
        raise _bad(where, "must be a CBOR array")
    if size is not None and len(value) != size:
        raise _bad(where, f"must be an array of {size}, not {len(value)}")
    return value


def _v2_text(value: Any, where: str, limit: int) -> str:
    return _text(value, where, limit, "a CBOR text string")


def _v2_bytes(value: Any, where: str) -> bytes:
    if type(value) is not bytes:
        raise _bad(where, "must be a CBOR byte string")
    return value


def _v2_hashes(value: Any, where: str, limit: int) -> tuple[bytes, ...]:
    raw = _v2_bytes(value, where)
    if len(raw) % HASH_SIZE or len(raw) > limit * HASH_SIZE:
        raise _bad(where, f"must be at most {limit} hashes of {HASH_SIZE} bytes, concatenated")
    return tuple(raw[i : i + HASH_SIZE] for i in range(0, len(raw), HASH_SIZE))


def _v2_path(value: Any, where: str) -> MapProof:
    sib, end = _v2_array(value, where, 2)
    siblings = _v2_hashes(sib, f"{where}.siblings", KEY_BITS)
    if end is None:
        return MapProof(siblings, None)
    e = _v2_bytes(end, f"{where}.leaf")
    if len(e) != 2 * HASH_SIZE:
        raise _bad(f"{where}.leaf", f"must be {2 * HASH_SIZE} bytes (key, value), not {len(e)}")
    return MapProof(siblings, Leaf(e[:HASH_SIZE], e[HASH_SIZE:]))


def _v2_item(value: Any, where: str) -> ProofItem:
    kind, item_id, state = _v2_array(value, where, 3)
    if state is not None:
        _v2_bytes(state, f"{where}.state")
        try:
            encoding.decode(state)
        except DecodeError as e:
            raise _bad(f"{where}.state", f"is not canonical CBOR ({e})") from e
    return ProofItem(
        _v2_text(kind, f"{where}.kind", MAX_ID), _v2_text(item_id, f"{where}.id", MAX_ID), state
    )


def _v2_root(entry: bytes) -> bytes:
    """Return the root a version 2 file is about: its entry's ``memory_root`` (P4 checks it)."""
    try:
        payload = Entry.from_bytes(entry).body.get("payload")
    except DecodeError as e:
        raise _bad("entry", f"does not decode as an entry ({e})") from e
    root = payload.get("memory_root") if type(payload) is dict else None
    if type(root) is not bytes or len(root) != HASH_SIZE:
        raise _bad("entry", "has no 32-byte payload.memory_root (the root the file is about)")
    return root


def _parse_v2(data: Any) -> ProofFile:
    fields = _v2_array(data, "the file", V2_FIELDS)
    _fmt, _version, kind, cp, index, entry, inc, namespace, npath, claim = fields
    if type(_version) is not int or _fmt != FORMAT:  # the magic bytes said so already
        raise _bad("the file", f"does not begin as a {FORMAT} file")
    if kind not in KINDS:
        raise _bad("kind", f"must be one of {', '.join(KINDS)}")
    if type(cp) is not str or not cp or len(cp) > MAX_NOTE_SIZE:
        raise _bad("checkpoint", "must be a signed checkpoint note (text)")
    entry = _v2_bytes(entry, "entry")
    common: dict[str, Any] = {
        "kind": kind,
        "checkpoint": cp,
        "index": _uint(index, "index"),
        "entry": entry,
        "inclusion": _v2_hashes(inc, "inclusion", MAX_PROOF_HASHES),
        "namespace": _v2_text(namespace, "namespace", MAX_ID),
        "namespace_path": _v2_path(npath, "namespace_path"),
    }
    claim = _v2_array(claim, "claim")
    if kind == "namespace":
        if len(claim) > MAX_ITEMS:
            raise _bad("claim", f"must list at most {MAX_ITEMS} items")
        items = tuple(_v2_item(x, f"claim[{i}]") for i, x in enumerate(claim))
        return ProofFile(**common, root=_v2_root(entry), items=items)
    item, ip = _v2_array(claim, "claim", 2)
    return ProofFile(
        **common,
        root=_v2_root(entry),
        item=_v2_item(item, "claim.item"),
        item_path=None if ip is None else _v2_path(ip, "claim.item_path"),
    )


# -- (P1) parsing version 3 ------------------------------------------------------------------


def _parse_binary(raw: bytes) -> ProofFile:
    """Read a binary file: the magic bytes, the version (byte 15), then that version's reader."""
    if len(raw) > MAX_PROOF_FILE:
        raise _bad("the file", f"is larger than {MAX_PROOF_FILE} bytes")
    if raw[1 : len(V2_MAGIC)] != V2_MAGIC[1:] or len(raw) <= len(V2_MAGIC):
        raise _bad("the file", f"is binary but does not begin as a {FORMAT} file")
    version = raw[len(V2_MAGIC)]
    head = _HEADS.get(version)
    if head is None:
        shown = version if version < 0x18 else "unknown"
        raise _bad(
            "version",
            f"is {shown}: this reader knows version {VERSION} (JSON), {VERSION_BINARY} and "
            f"{VERSION_COMPACT} (binary) only",
        )
    if raw[0] != head:
        fields = V2_FIELDS if version == VERSION_BINARY else V3_FIELDS
        raise _bad(
            "the file",
            f"must be an array of {fields} (first byte 0x{head:02x}), not first byte "
            f"0x{raw[0]:02x} (a version {version} file)",
        )
    try:
        data = encoding.decode(raw)
    except DecodeError as e:
        raise _bad("the file", f"is not one canonical CBOR value ({e})") from e
    return _parse_v2(data) if version == VERSION_BINARY else _parse_v3(data)


def _v3_entry(raw: bytes) -> tuple[bytes, bytes, int, str]:
    """Put a version 3 entry's ``memory_root`` back (P4's rule): its bytes, root, seq, branch."""
    try:
        value = encoding.decode(raw)
    except DecodeError as e:
        raise _bad("entry", f"is not canonical CBOR ({e})") from e
    if type(value) is not list or len(value) != 8 or type(value[7]) is not dict:
        raise _bad("entry", "is not an entry (an array of 8 whose last item is its body map)")
    body = value[7]
    payload = body.get("payload")
    if type(payload) is not dict:
        raise _bad("entry", "has no payload map (a SNAPSHOT entry's payload is its root)")
    if "memory_root" in payload:
        raise _bad(
            "entry",
            "holds payload.memory_root: a version 3 file leaves it out (the checker "
            "recomputes it from the rest of the payload)",
        )
    v = payload.get("v")
    tag = _MAP_ROOT_TAGS.get(v) if type(v) is int else None
    if tag is None:
        raise _bad(
            "entry",
            f"payload.v is {v!r}: a version 3 file carries the entry of a v2 or v3 root "
            "(whose memory_root the checker recomputes)",
        )
    seq = _uint(value[2], "entry.seq")
    if type(value[3]) is not str:
        raise _bad("entry.branch", "must be a CBOR text string")
    root = domain_hash(tag, encoding.encode(payload))
    full = encoding.encode([*value[:7], {**body, "payload": {**payload, "memory_root": root}}])
    return full, root, seq, value[3]


def _v3_checkpoint(value: Any, branch: str) -> tuple[str, tuple[int, bytes] | None]:
    """Read the checkpoint field: the note's text, or ``("", (size, signature))``."""
    if type(value) is str:
        if not value or len(value) > MAX_NOTE_SIZE:
            raise _bad("checkpoint", "must be a signed checkpoint note (text) or [size, signature]")
        if compact_checkpoint(value, branch) is not None:
            raise _bad(
                "checkpoint",
                "is a note the checker rebuilds (three lines, one signature named as its "
                "origin): a version 3 file carries it as [tree size, signature], not as text",
            )
        return value, None
    if type(value) is not list:
        raise _bad("checkpoint", "must be a signed checkpoint note (text) or [size, signature]")
    size, signature = _v2_array(value, "checkpoint", 2)
    size = _uint(size, "checkpoint.size")
    signature = _v2_bytes(signature, "checkpoint.signature")
    if len(signature) != SIGNATURE_SIZE:
        raise _bad(
            "checkpoint.signature",
            f"must be {SIGNATURE_SIZE} bytes (Ed25519), not {len(signature)}",
        )
    return "", (size, signature)


def _v3_path(value: Any, where: str, own: Leaf | None) -> MapProof:
    """Read a ``PATH3`` (bitmap of empty siblings, the other siblings, end), strictly."""
    bitmap, raw, end = _v2_array(value, where, 3)
    bitmap = _v2_bytes(bitmap, f"{where}.empty")
    raw = _v2_bytes(raw, f"{where}.siblings")
    if len(raw) % HASH_SIZE:
        raise _bad(f"{where}.siblings", f"must be hashes of {HASH_SIZE} bytes, concatenated")
    depth = len(raw) // HASH_SIZE + sum(b.bit_count() for b in bitmap)
    if depth > KEY_BITS:
        raise _bad(where, f"has {depth} siblings, more than {KEY_BITS}")
    if len(bitmap) != (depth + 7) // 8:
        raise _bad(
            f"{where}.empty",
            f"must be {(depth + 7) // 8} byte(s) for a path of {depth} siblings, not {len(bitmap)}",
        )
    if depth % 8 and bitmap[-1] & (0xFF >> (depth % 8)):
        raise _bad(f"{where}.empty", f"has a bit set past the path's last sibling ({depth})")
    siblings = [raw[i : i + HASH_SIZE] for i in range(0, len(raw), HASH_SIZE)]
    if EMPTY in siblings:
        raise _bad(
            f"{where}.siblings",
            f"hash {siblings.index(EMPTY)} is the empty-subtree hash: a version 3 path marks "
            "it in the bitmap",
        )
    # The marked positions, lowest first (bit i is bit 8 * len - 1 - i of the big-endian
    # integer); inserting EMPTY at each in that order puts every sibling at its index.
    marks, top, marked = int.from_bytes(bitmap, "big"), 8 * len(bitmap) - 1, []
    while marks:
        low = marks & -marks
        marked.append(top - (low.bit_length() - 1))
        marks ^= low
    for i in reversed(marked):
        siblings.insert(i, EMPTY)
    if end is None:
        return MapProof(tuple(siblings), None)
    if end is True:
        if own is None:
            raise _bad(
                f"{where}.leaf",
                "is true (the claim's own leaf), but only the path of an item with a state, "
                "or the namespace path of a file with an item path, may end so",
            )
        return MapProof(tuple(siblings), own)
    if type(end) is not bytes or len(end) != 2 * HASH_SIZE:
        raise _bad(f"{where}.leaf", f"must be null, true or {2 * HASH_SIZE} bytes (key, value)")
    if own is not None and end == own.key + own.value:
        raise _bad(f"{where}.leaf", "is the claim's own leaf: a version 3 file writes it as true")
    return MapProof(tuple(siblings), Leaf(end[:HASH_SIZE], end[HASH_SIZE:]))


def _parse_v3(data: Any) -> ProofFile:
    fields = _v2_array(data, "the file", V3_FIELDS)
    _fmt, _version, kind, cp, entry, inc, namespace, npath, claim = fields
    if _version != VERSION_COMPACT or _fmt != FORMAT:  # the magic bytes said so already
        raise _bad("the file", f"does not begin as a {FORMAT} file")
    if kind not in KINDS:
        raise _bad("kind", f"must be one of {', '.join(KINDS)}")
    full, root, seq, branch = _v3_entry(_v2_bytes(entry, "entry"))
    note, compact = _v3_checkpoint(cp, branch)
    common: dict[str, Any] = {
        "kind": kind,
        "root": root,
        "checkpoint": note,
        "compact_checkpoint": compact,
        "index": seq,
        "entry": full,
        "inclusion": _v2_hashes(inc, "inclusion", MAX_PROOF_HASHES),
        "namespace": _v2_text(namespace, "namespace", MAX_ID),
    }
    claim = _v2_array(claim, "claim")
    if kind == "namespace":
        if len(claim) > MAX_ITEMS:
            raise _bad("claim", f"must list at most {MAX_ITEMS} items")
        items = tuple(_v2_item(x, f"claim[{i}]") for i, x in enumerate(claim))
        npath = _v3_path(npath, "namespace_path", None)
        return ProofFile(**common, namespace_path=npath, items=items)
    item, ip = _v2_array(claim, "claim", 2)
    it = _v2_item(item, "claim.item")
    path = None if ip is None else _v3_path(ip, "claim.item_path", _own_leaf(it))
    ns_own = _namespace_leaf(common["namespace"], it, path)
    npath = _v3_path(npath, "namespace_path", ns_own)
    return ProofFile(**common, namespace_path=npath, item=it, item_path=path)


# -- what is proven ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Proven:
    """What a proof file proves, once every check passed.

    Attributes:
        kind: the file's kind.
        origin: the checkpoint's origin; ``signers``: the trusted key names that signed it.
        tree_size: the checkpoint's tree size; ``tree_root``: its root.
        branch: the branch the root is on; ``seq``: its SNAPSHOT entry; ``ts``: its time.
        root: the memory root; ``map_root``: the map root it commits to.
        high_water: the root's high-water mark (``seq``, ``entry_hash``, ...).
        namespace: the namespace of the claim.
        present: (object, state) whether the item is in the map; (namespace) whether the
            namespace holds any item.
        items: the items proven, with their decoded states (one for object/state, none when
            absent; every item for a namespace).
    """

    kind: str
    origin: str
    signers: tuple[str, ...]
    tree_size: int
    tree_root: bytes
    branch: str
    seq: int
    ts: int
    root: bytes
    map_root: bytes
    high_water: dict[str, Any]
    namespace: str
    present: bool
    items: tuple[tuple[str, str, Any], ...]
    absent_item: tuple[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return what is proven as JSON (bytes in hex)."""
        return {
            "ok": True,
            "kind": self.kind,
            "origin": self.origin,
            "signed_by": list(self.signers),
            "tree_size": self.tree_size,
            "tree_root": self.tree_root.hex(),
            "branch": self.branch,
            "snapshot_seq": self.seq,
            "snapshot_ts": self.ts,
            "root": self.root.hex(),
            "map_root": self.map_root.hex(),
            "high_water": _jsonable(self.high_water),
            "namespace": self.namespace,
            "present": self.present,
            "absent": None
            if self.absent_item is None
            else {"kind": self.absent_item[0], "id": self.absent_item[1]},
            "items": [{"kind": k, "id": i, "state": _jsonable(s)} for k, i, s in self.items],
            "words": self.words(),
        }

    def words(self) -> list[str]:
        """Return what is proven, in plain words, one line each."""
        hw = self.high_water
        out = [
            f"checkpoint of log {self.origin!r} at tree size {self.tree_size} "
            f"(root {self.tree_root.hex()}) is signed by {', '.join(self.signers)}",
            f"memory root {self.root.hex()} is entry {self.seq} (SNAPSHOT) of branch "
            f"{self.branch!r} in that signed tree; it covers the log up to entry "
            f"{hw.get('seq')} and commits to memory map {self.map_root.hex()}",
        ]
        at = f"at root {self.root.hex()[:16]}, namespace {self.namespace!r}"
        if self.kind == "namespace":
            if self.present:
                out.append(
                    f"{at} holds exactly these {len(self.items)} item(s) and no other "
                    "(the items rebuild the namespace's committed subtree):"
                )
                out += [f"  {k} {i!r}: {_show(st)}" for k, i, st in self.items[:WORDS_ITEMS]]
                if len(self.items) > WORDS_ITEMS:
                    out.append(f"  ... and {len(self.items) - WORDS_ITEMS} more (--json lists all)")
            else:
                out.append(f"{at} holds no item at all (proof of absence)")
        elif self.present:
            k, i, s = self.items[0]
            out.append(f"{at} holds {k} {i!r} with state {_show(s)}")
        else:
            assert self.absent_item is not None
            k, i = self.absent_item
            out.append(f"ABSENT: {at} holds no {k} {i!r} (proof of absence)")
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _show(value: Any) -> str:
    return json.dumps(_jsonable(value), sort_keys=True, ensure_ascii=False)


def _walk(key: bytes, path: MapProof) -> bytes:
    """(P5) The root ``path`` gives for ``key`` (§6.12, "Proof of a key's path")."""
    try:
        return path_root(key, path)
    except ProofError as e:
        raise _fail("P5", str(e)) from e


# -- the checks -------------------------------------------------------------------------------


def _fail(
    step: str,
    what: str,
    *,
    expected: bytes | None = None,
    actual: bytes | None = None,
    seq: int | None = None,
    branch: str | None = None,
) -> ProofError:
    return ProofError(
        f"proof refused ({step}): {what}",
        expected=None if expected is None else expected.hex(),
        actual=None if actual is None else actual.hex(),
        seq=seq,
        branch=branch,
    )


def _verifiers(vkeys: Sequence[str]) -> list[Verifier]:
    verifiers = []
    for k in vkeys:
        try:
            verifiers.append(Verifier.from_vkey(k))
        except DecodeError as e:
            raise DecodeError(f"the verifier key {k[:60]!r} is malformed: {e}") from e
    if not verifiers:
        raise ValueError("check_proof needs at least one trusted vkey")
    return verifiers


def _open_checkpoint(note: str, vkeys: Sequence[str]) -> SignedCheckpoint:
    verifiers = _verifiers(vkeys)
    try:
        return open_checkpoint(note, verifiers)
    except (ProofError, DecodeError) as e:
        raise _fail("P2", f"the checkpoint does not verify with the trusted key(s): {e}") from e


def _rebuilt_checkpoint(
    p: ProofFile, vkeys: Sequence[str], entry: Entry | None = None
) -> tuple[str, SignedCheckpoint]:
    """(P2) A compact checkpoint's note, rebuilt for a trusted key, and the note opened.

    The origin is the key's name (branch ``main``) or ``<name>/branch/<B>`` (the entry's
    branch ``B``), the root the one the inclusion path gives the entry at its index in a tree
    of the carried size (P3's computation), the key id that of the origin's name and the key.
    """
    assert p.compact_checkpoint is not None
    size, signature = p.compact_checkpoint
    verifiers = _verifiers(vkeys)
    branch = (_decode_entry(p) if entry is None else entry).branch
    try:
        root = merkle.root_from_inclusion_proof(
            leaf_hash(p.entry), p.index, size, list(p.inclusion)
        )
    except ProofError as e:
        raise _fail(
            "P3",
            f"the inclusion path of SNAPSHOT entry {p.index} gives no root of a tree of size "
            f"{size}: {e}",
            seq=p.index,
            branch=branch,
        ) from e
    tried: list[str] = []
    for v in verifiers:
        origin = v.name if branch == CANONICAL_BRANCH else f"{v.name}/branch/{branch}"
        try:
            named = v.for_origin(origin)
            note = checkpoint_note(origin, size, root, named.key_id, signature)
            return note, open_checkpoint(note, [v])
        except (ValueError, ProofError, DecodeError):
            tried.append(origin)
    raise _fail(
        "P2",
        f"the checkpoint (tree size {size} and a signature) is not signed by a trusted key: "
        f"the note rebuilt for origin {', '.join(map(repr, tried))} does not verify (the "
        "signature, the size, the entry or its inclusion path was changed, or another key "
        "or log signed it)",
    )


def _check_origin(cp: SignedCheckpoint, vkeys: Sequence[str], branch: str) -> None:
    """(P2) The checkpoint's origin is the trusted log's, or its branch origin for ``branch``."""
    origin = cp.checkpoint.origin
    for k in vkeys:
        log = Verifier.from_vkey(k).name
        if (branch == CANONICAL_BRANCH and origin == log) or branch_of_origin(
            log, origin
        ) == branch:
            return
    raise _fail(
        "P2",
        f"the checkpoint's origin {origin!r} is not the trusted log's origin for branch "
        f"{branch!r} (main: the log's origin; a branch B: <origin>/branch/B)",
    )


def _decode_entry(p: ProofFile) -> Entry:
    """(P3) The SNAPSHOT entry, decoded strictly (§3, step 1)."""
    try:
        return Entry.from_bytes(p.entry)
    except DecodeError as e:
        raise _fail("P3", f"the SNAPSHOT entry does not decode: {e}") from e


def _check_snapshot(p: ProofFile, cp: SignedCheckpoint, entry: Entry | None = None) -> Entry:
    """(P3) The entry decodes, is a SNAPSHOT at the index, and is in the signed tree."""
    if entry is None:
        entry = _decode_entry(p)
    if entry.kind is not Kind.OP or entry.type != SNAPSHOT:
        raise _fail("P3", f"the entry is a {entry.kind.value} {entry.type}, not a SNAPSHOT")
    if entry.seq != p.index:
        raise _fail("P3", f"the entry is entry {entry.seq}, not the proof's index {p.index}")
    size, signed_root = cp.checkpoint.size, bytes(cp.checkpoint.root)
    try:
        merkle.verify_inclusion(leaf_hash(p.entry), p.index, size, list(p.inclusion), signed_root)
    except ProofError as e:
        raise _fail(
            "P3",
            f"the SNAPSHOT entry {p.index} is not in the signed tree of size {size}: {e}",
            seq=p.index,
            branch=entry.branch,
        ) from e
    return entry


def _check_root(p: ProofFile, entry: Entry) -> dict[str, Any]:
    """(P4) The payload is a v2 or v3 root that hashes to its ``memory_root``, the file's root.

    A v3 root's ``projections`` is the 32-byte hash of its projection list (FORMAT §6.16);
    the root is computed the same way, under its version's tag.
    """
    payload = entry.body.get("payload")
    if type(payload) is not dict:
        raise _fail("P4", "the SNAPSHOT entry has no payload map")
    v = payload.get("v")
    if type(v) is not int or v not in _MAP_ROOT_TAGS:
        raise _fail(
            "P4",
            f"root of entry {entry.seq} is a version {v!r} root: only a v2 or v3 root "
            "commits to a memory map",
        )
    claimed = payload.get("memory_root")
    map_root = payload.get("map")
    checked = [("memory_root", claimed), ("map", map_root)]
    if v == ROOT_V3:
        checked.append(("projections", payload.get("projections")))
    for name, value in checked:
        if type(value) is not bytes or len(value) != HASH_SIZE:
            raise _fail("P4", f"the root's {name} is not a 32-byte string")
    assert isinstance(claimed, bytes)
    if payload.get("branch") != entry.branch:
        raise _fail("P4", f"the root names branch {payload.get('branch')!r}, not its entry's")
    preimage = {k: v for k, v in payload.items() if k != "memory_root"}
    computed = domain_hash(_MAP_ROOT_TAGS[v], encoding.encode(preimage))
    if computed != claimed:
        raise _fail(
            "P4",
            "the root's preimage does not hash to its memory_root",
            expected=claimed,
            actual=computed,
        )
    if claimed != p.root:
        raise _fail(
            "P4",
            "the SNAPSHOT entry records another root than the file's",
            expected=p.root,
            actual=claimed,
        )
    return payload


def _state_value(item: ProofItem) -> Any:
    assert item.state is not None
    return encoding.decode(item.state)


def _check_map(p: ProofFile, map_root: bytes) -> tuple[bool, tuple[tuple[str, str, Any], ...]]:
    """(P5, P6) The paths give ``map_root`` and end where the claim says."""
    nk = namespace_key(p.namespace)
    npath = p.namespace_path
    ns_present = npath.leaf is not None and npath.leaf.key == nk
    got = _walk(nk, npath)
    if got != map_root:
        raise _fail(
            "P5",
            f"the path of namespace {p.namespace!r} does not give the root's map root",
            expected=map_root,
            actual=got,
        )
    if p.kind == "namespace":
        if not p.items:
            if ns_present:
                raise _fail("P6", f"namespace {p.namespace!r} is in the map, but no item is listed")
            return False, ()
        if not ns_present:
            raise _fail("P6", f"namespace {p.namespace!r} is not in the map, yet items are listed")
        assert npath.leaf is not None
        pairs = []
        out = []
        for n, it in enumerate(p.items):
            if it.state is None:
                raise _fail("P6", f"items[{n}] has no state (a namespace lists present items)")
            pairs.append((item_key(it.kind, it.id), value_hash_of(it.state)))
            out.append((it.kind, it.id, _state_value(it)))
        if any(a[0] >= b[0] for a, b in itertools.pairwise(pairs)):
            raise _fail("P6", "the items are not sorted by item key, each once")
        rebuilt = tree_root(pairs)
        if rebuilt != npath.leaf.value:
            raise _fail(
                "P6",
                f"the {len(pairs)} item(s) listed do not rebuild namespace {p.namespace!r}'s "
                "subtree (an item was left out, added or changed)",
                expected=npath.leaf.value,
                actual=rebuilt,
            )
        return True, tuple(out)
    item = p.item
    assert item is not None
    kind_ok = (
        item.kind == "object"
        if p.kind == "object"
        else (item.kind.startswith("state/") and len(item.kind) > len("state/"))
    )
    if not kind_ok:
        raise _fail("P1", f"a {p.kind} proof names an item of kind {item.kind!r}")
    ik = item_key(item.kind, item.id)
    if not ns_present:
        if item.state is not None:
            raise _fail("P6", f"namespace {p.namespace!r} is not in the map, so holds no item")
        if p.item_path is not None:
            raise _fail("P6", "an absent namespace's proof has an item path")
        return False, ()
    assert npath.leaf is not None
    if p.item_path is None:
        raise _fail("P6", "the namespace is in the map but the item path is missing")
    got = _walk(ik, p.item_path)
    if got != npath.leaf.value:
        raise _fail(
            "P5",
            f"the path of {item.kind} {item.id!r} does not give namespace {p.namespace!r}'s "
            "subtree",
            expected=npath.leaf.value,
            actual=got,
        )
    end = p.item_path.leaf
    if item.state is None:
        if end is not None and end.key == ik:
            raise _fail("P6", f"{item.kind} {item.id!r} is in the map: it is not absent")
        return False, ()
    value = value_hash_of(item.state)
    if end is None or end.key != ik:
        raise _fail("P6", f"the item path ends elsewhere: {item.kind} {item.id!r} is not there")
    if end.value != value:
        raise _fail(
            "P6",
            f"the state given for {item.kind} {item.id!r} is not the one the map holds",
            expected=end.value,
            actual=value,
        )
    return True, ((item.kind, item.id, _state_value(item)),)


class CheckMemo:
    """What ``check_proof`` remembers between files of one signed snapshot, by exact bytes.

    ``checkpoints``: each checkpoint note verified (its text and the trusted keys);
    ``snapshots``: each signed snapshot checked (P2-P4: the note, the keys, the index, the
    entry bytes, the inclusion proof and the root). A file that repeats those bytes exactly
    gets the same result without the signature, the decoding and the hashing being done
    again; any other byte is a miss, checked in full.
    """

    def __init__(self) -> None:
        """Start empty."""
        self.checkpoints: dict[tuple[str, tuple[str, ...]], SignedCheckpoint] = {}
        self.snapshots: dict[tuple[Any, ...], tuple[SignedCheckpoint, Entry, dict[str, Any]]] = {}


def _signed_snapshot(
    p: ProofFile, vkeys: Sequence[str], memo: CheckMemo | None
) -> tuple[SignedCheckpoint, Entry, dict[str, Any]]:
    """(P2-P4) The checkpoint, the SNAPSHOT entry in its tree and the v2 root it records.

    A compact checkpoint (version 3) is rebuilt first; its note depends on the entry and the
    inclusion path too, so only the whole signed snapshot is remembered for it.
    """
    note = (p.checkpoint, tuple(vkeys))
    key = (*note, p.compact_checkpoint, p.index, p.entry, p.inclusion, p.root)
    if memo is not None and key in memo.snapshots:
        return memo.snapshots[key]
    cp: SignedCheckpoint | None
    decoded = None
    if p.compact_checkpoint is not None:
        decoded = _decode_entry(p)  # (P3, first: the rebuilt note needs the branch)
        _text, cp = _rebuilt_checkpoint(p, vkeys, decoded)  # (P2)
    else:
        cp = memo.checkpoints.get(note) if memo is not None else None
    if cp is None:
        cp = _open_checkpoint(p.checkpoint, vkeys)  # (P2)
        if memo is not None:
            memo.checkpoints[note] = cp
    entry = _check_snapshot(p, cp, decoded)  # (P3)
    _check_origin(cp, vkeys, entry.branch)  # (P2) the origin, once the branch is known
    payload = _check_root(p, entry)  # (P4)
    if memo is not None:
        memo.snapshots[key] = (cp, entry, payload)
    return cp, entry, payload


def check_proof(
    text: str | bytes | ProofFile,
    vkeys: Sequence[str],
    *,
    memo: CheckMemo | None = None,
) -> Proven:
    """Check a proof file with the trusted verifier key(s) ``vkeys``; return what it proves.

    Runs P1-P6 (module docstring, FORMAT.md §6.15) and stops at the first that fails. A
    proof of absence passes (``Proven.present`` is False): it proves that the map holds no
    such item (or namespace) at that root.

    ``memo``, when given, remembers each checkpoint and signed snapshot checked (by their
    exact bytes and the keys), so an auditor checking many files of one root verifies its
    signature, entry and inclusion once (``CheckMemo``).

    Raises:
        DecodeError: (P1) the file or a vkey is malformed.
        ProofError: a check failed; the message names the check (P2-P6) and what is wrong.
        ValueError: if ``vkeys`` is empty.
    """
    p = text if isinstance(text, ProofFile) else ProofFile.parse(text)
    cp, entry, payload = _signed_snapshot(p, vkeys, memo)  # (P2-P4)
    present, items = _check_map(p, payload["map"])  # (P5, P6)
    absent = None
    if p.kind != "namespace" and not present:
        assert p.item is not None
        absent = (p.item.kind, p.item.id)
    hw = payload.get("high_water")
    return Proven(
        kind=p.kind,
        origin=cp.checkpoint.origin,
        signers=tuple(cp.signer_names),
        tree_size=cp.checkpoint.size,
        tree_root=bytes(cp.checkpoint.root),
        branch=entry.branch,
        seq=entry.seq,
        ts=entry.ts,
        root=p.root,
        map_root=payload["map"],
        high_water=hw if type(hw) is dict else {},
        namespace=p.namespace,
        present=present,
        items=items,
        absent_item=absent,
    )
