"""Every hash memroot computes, in one module (the only importer of hashlib and blake3).

SPEC "Normative formats" 2 and 4:

- The Merkle tree and the chain use SHA-256 exactly as RFC 9162 section 2.1:
  ``leaf = SHA-256(0x00 || entry_bytes)``, ``node = SHA-256(0x01 || left || right)``, and the
  root of the empty tree is ``SHA-256("")``.
- Roots derived above the tree (rule, summary and memory roots) are SHA-256 with a domain tag
  ``tag || 0x00 || data`` so they can never collide with a leaf or an interior node, whose
  preimages start with 0x00 or 0x01.
- Event content is hashed with BLAKE3: ``content_digest`` addresses the stored bytes, and
  ``content_commitment`` (BLAKE3 keyed with a random 32-byte salt) is what an entry commits to,
  so once content and salt are erased nobody can confirm a guess of the erased content.

With the native core (``memroot.ledger._backend``) the hashes run in Rust (``sha2`` with the
CPU's SHA extensions, ``blake3``); the hashlib/blake3 lines below are the reference, and run
for any input the native functions do not take (a ``bytearray`` or ``memoryview``).
"""

from __future__ import annotations

import hashlib
from typing import Any, NewType

from memroot.ledger._backend import NATIVE as _N

try:
    import blake3
except ImportError:  # pragma: no cover - exercised by the offline-auditor test in a subprocess
    # An offline auditor may have only the standard library, cbor2 and cryptography: fall
    # back to the pure-Python BLAKE3 (same bytes, far slower) so step 4 is still checked.
    from memroot.ledger import _blake3 as blake3  # type: ignore[no-redef]

__all__ = [
    "BLAKE3_NATIVE",
    "EMPTY_ROOT",
    "HASH_SIZE",
    "LEAF_PREFIX",
    "NODE_PREFIX",
    "SALT_SIZE",
    "ContentDigest",
    "EntryHash",
    "TreeRoot",
    "content_commitment",
    "content_digest",
    "domain_hash",
    "leaf_hash",
    "node_hash",
    "sha256",
    "sha256_stream",
]

BLAKE3_NATIVE = blake3.__name__ == "blake3"
"""False when content hashing runs on the pure-Python fallback (``memroot.ledger._blake3``)."""

HASH_SIZE = 32
SALT_SIZE = 32
LEAF_PREFIX = b"\x00"  # RFC 9162 section 2.1.1: leaf hash domain separation
NODE_PREFIX = b"\x01"  # RFC 9162 section 2.1.1: interior node domain separation

EntryHash = NewType("EntryHash", bytes)
"""SHA-256(0x00 || entry_bytes): an entry's identity, its Merkle leaf and the next ``prev``."""
TreeRoot = NewType("TreeRoot", bytes)
"""The RFC 9162 Merkle tree head over a branch's entries."""
ContentDigest = NewType("ContentDigest", bytes)
"""Unkeyed BLAKE3 of event content: the address of the stored content bytes."""

_sha256 = hashlib.sha256
EMPTY_ROOT = TreeRoot(_sha256(b"").digest())


def sha256(data: bytes) -> bytes:
    """Return the plain SHA-256 digest of ``data`` (key hashes, note key ids)."""
    if _N is not None and type(data) is bytes:
        return _N.sha256(data)
    return _sha256(data).digest()


def sha256_stream() -> Any:
    """Return an incremental SHA-256 (``update``/``hexdigest``) for digests of large files."""
    return _sha256()


def leaf_hash(entry_bytes: bytes) -> EntryHash:
    """Return the RFC 9162 leaf hash ``SHA-256(0x00 || entry_bytes)`` of one entry."""
    if _N is not None and type(entry_bytes) is bytes:
        return EntryHash(_N.leaf_hash(entry_bytes))
    return EntryHash(_sha256(LEAF_PREFIX + entry_bytes).digest())


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return the RFC 9162 interior node hash ``SHA-256(0x01 || left || right)``."""
    if _N is not None and type(left) is bytes and type(right) is bytes:
        return _N.node_hash(left, right)
    return _sha256(NODE_PREFIX + left + right).digest()


def domain_hash(tag: str, data: bytes) -> bytes:
    """Return ``SHA-256(tag || 0x00 || data)``, a root that no leaf or node can equal.

    Raises:
        ValueError: if ``tag`` contains a NUL byte (it would make the separation ambiguous).
    """
    raw = tag.encode("ascii")
    if b"\x00" in raw:
        raise ValueError("a domain tag must not contain NUL")
    if _N is not None and type(data) is bytes:
        return _N.domain_hash(raw, data)
    return _sha256(raw + b"\x00" + data).digest()


def content_digest(content: bytes) -> ContentDigest:
    """Return the unkeyed BLAKE3 digest that addresses stored content."""
    if _N is not None and type(content) is bytes:
        return ContentDigest(_N.content_digest(content))
    return ContentDigest(blake3.blake3(content).digest())


def content_commitment(salt: bytes, content: bytes) -> bytes:
    """Return BLAKE3 keyed with the 32-byte ``salt`` over ``content``: what an entry commits to.

    Raises:
        ValueError: if the salt is not exactly 32 bytes.
    """
    if len(salt) != SALT_SIZE:
        raise ValueError(f"salt must be {SALT_SIZE} bytes, got {len(salt)}")
    if _N is not None and type(salt) is bytes and type(content) is bytes:
        return _N.content_commitment(salt, content)
    return blake3.blake3(content, key=salt).digest()
