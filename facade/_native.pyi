"""Type stubs of ``memroot._native``, the optional Rust core (native/, issue 12).

Private: use it through ``memroot.ledger._backend`` only. Every function computes exactly what
its pure-Python reference in ``memroot.ledger`` computes; where the reference raises, these
raise ``Reject`` and the caller re-runs the reference for its error and message.
"""

from collections.abc import Callable, Mapping
from typing import Any, final

__all__ = [
    "Ed25519Key",
    "Ed25519Verifier",
    "IndexSpan",
    "PayloadPlan",
    "Reject",
    "build_events",
    "compact_append",
    "compact_append_pack",
    "compact_append_rows",
    "content_commitment",
    "content_digest",
    "content_digests_ok",
    "decode",
    "decode_chunk",
    "decode_entry",
    "derived_id",
    "domain_hash",
    "encode",
    "encode_leaf",
    "encode_rows",
    "event_id_span",
    "event_index_check",
    "event_index_check_ahead",
    "event_index_span",
    "event_inputs",
    "event_rows",
    "inclusion_from_rows",
    "inclusion_keys",
    "leaf_hash",
    "map_descend",
    "map_descend_all",
    "map_hashes_ok",
    "map_path_root",
    "map_put_rows",
    "map_rows_into",
    "map_update",
    "merkle_leaves_plan",
    "merkle_leaves_root",
    "mismatches",
    "node_hash",
    "node_keys",
    "node_mismatches_ahead",
    "root_from_inclusion_proof",
    "root_from_subtrees",
    "roots_from_consistency_proof",
    "row_event_ids",
    "sha256",
    "uuid_bytes",
    "verify_rows",
]

class Reject(ValueError):
    """The native core refuses the input; the Python reference says why."""

def encode(value: Any) -> bytes:
    """Canonical CBOR of a value of the data model (``encoding.encode``)."""

def encode_leaf(value: Any) -> tuple[bytes, bytes]:
    """Canonical CBOR of ``value`` and the RFC 9162 leaf hash of those bytes."""

def encode_rows(rows: list[Any], floats_as_bytes: bool) -> bytes:
    """Canonical CBOR of the array of ``rows`` (tuples or lists), floats optionally as bytes."""

def decode(data: bytes) -> Any:
    """Strict canonical CBOR decoding (``encoding.decode``)."""

def decode_chunk(
    rows: list[Any],
    branch: str,
    start: int,
    prev: bytes | None,
    canonical: str,
    entry_type: type[Any],
    kinds: dict[str, Any],
) -> tuple[list[Any], list[bytes]]:
    """``(entries, leaves)`` of a chunk of stored rows, checked as ``StrictReader.rows`` does.

    Steps 1-3 of each row of ``branch`` from ``start``; ``Reject`` on any row it would refuse.
    """

def event_rows(
    entries: list[Any], event: Any
) -> tuple[
    list[tuple[str, str, int, int, str, str, None]],
    list[tuple[str, str | None, str, int]],
    list[tuple[str, str | None]],
    list[tuple[str, str]],
    list[int],
]:
    """``(events, conv, parents, keys, contexts)`` of a run of events of one branch.

    The ``mem_events``, ``mem_conv`` and ``conv_parents`` rows, the distinct
    ``(actor_id, namespace_id)`` pairs in order, and the positions of events with a
    ``context``; ``Reject`` on an entry that is not an ``event`` of the first's branch or on a
    body field missing or of an unexpected type.
    """

@final
class PayloadPlan:
    """One operation type's payload schema (``ops.SCHEMAS[op]``), prepared once."""

    def __new__(cls, fields: list[tuple[str, str, bool, Any]]) -> PayloadPlan:
        """``(name, kind, required, arg)`` of each field, in schema order."""

    def validate(self, payload: Any) -> dict[str, Any]:
        """``ops.validate_payload`` of ``payload``; ``Reject`` where the reference raises."""

def derived_id(op_id: str, n: int) -> str:
    """``engine.derived_id``: the UUIDv8 of the ``n``-th thing operation ``op_id`` creates."""

def decode_entry(
    raw: bytes, entry_hash: bytes | None = None
) -> tuple[int, bytes, int, str, int, str, str, dict[str, Any], bytes]:
    """``(v, prev, seq, branch, ts, kind, type, body, hash)`` of entry bytes, strictly."""

def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)``."""

def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``."""

def sha256(data: bytes) -> bytes:
    """Plain SHA-256."""

def domain_hash(tag: bytes, data: bytes) -> bytes:
    """``SHA-256(tag || 0x00 || data)`` (the caller checks the tag)."""

def content_digest(content: bytes) -> bytes:
    """Unkeyed BLAKE3 of content."""

def content_commitment(salt: bytes, content: bytes) -> bytes:
    """BLAKE3 keyed with the 32-byte salt over content."""

def root_from_subtrees(hashes: list[bytes]) -> bytes:
    """Return the RFC 9162 root from perfect-subtree hashes, largest first."""

def compact_append(
    size: int, hashes: list[bytes], leaves: list[bytes]
) -> tuple[list[bytes], list[tuple[int, int, bytes]]]:
    """Fold leaves into a compact range; the new hashes and the completed nodes."""

def root_from_inclusion_proof(leaf: bytes, index: int, size: int, proof: list[bytes]) -> bytes:
    """Return the root an inclusion proof gives, or raise ``Reject``."""

def roots_from_consistency_proof(
    size1: int, size2: int, proof: list[bytes], root1: bytes
) -> tuple[bytes, bytes]:
    """Return the two roots a consistency proof gives (``0 < size1 < size2``)."""

def verify_rows(
    rows: list[Any],
    start: int,
    max_rows: int,
    branch: str,
    expected_seq: int,
    prev: bytes,
    compact_size: int,
    compact_hashes: list[bytes],
    caches: bool,
    no_tombstones: bool,
    stop_size: int | None,
    node_room: int,
    event_room: int,
    want_entries: bool,
    digests_ok: bytes | None = None,
) -> tuple[
    int,
    bytes,
    list[bytes],
    list[tuple[int, int, bytes]],
    list[tuple[str, int]],
    list[tuple[int, bytes, int, str, int, str, str, dict[str, Any], bytes]],
]:
    """Check steps 1-5 of the plain rows of a chunk in one call (native/src/verify.rs)."""

def node_keys(branch_no: int, nodes: list[tuple[int, int, bytes]], by_end: bool) -> list[int]:
    """Return the ``nodes.k`` of each ``(level, index, hash)`` (``Store.key_of_node``)."""

def uuid_bytes(ids: list[str]) -> list[bytes | None]:
    """Return the 16 bytes of each canonical UUID text, None for any other text."""

def mismatches(keys: list[Any], want: list[Any], found: dict[Any, Any]) -> list[int]:
    """Return the positions ``i`` where ``found.get(keys[i]) != want[i]``."""

def node_mismatches_ahead(
    branch_no: int, nodes: list[tuple[int, int, bytes]], found: dict[int, bytes], by_end: bool
) -> list[tuple[int, bytes | None]]:
    """``(position, stored)`` of the nodes ``found`` lacks or differs on; takes them out of it."""

def build_events(
    queue: list[Any],
    event_type: type,
    appended_type: type,
    event_kind: Any,
    branch: str,
    branch_no: int,
    seq: int,
    prev: bytes,
    last_ts: int | None,
    now: int,
    max_raw: int,
    rand: bytes,
    entry_type: type | None = None,
    pack: bool = False,
) -> tuple[
    int,
    list[tuple[int, bytes, bytes, bytes | None, bytes | None, bytes | None]] | list[bytes],
    list[tuple[bytes, int]] | tuple[bytes, bytes],
    list[bytes] | bytes,
    list[Any] | bytes,
    int | None,
    list[Any] | None,
    list[str] | None,
    bool,
]:
    """Build the plain events on top of an append queue in one call (``_append_locked``).

    ``(count, rows, events, leaves, appended, last_ts, entries, contents, given)``; ``given``:
    whether any event kept its request's own id. With ``entry_type``, also each event's
    ``Entry`` and content (for the hooks). With ``pack`` (no ``entry_type``), each
    ``entries`` row is one byte string (``store.pack_entry_row``), the event index rows are
    ``(ids, keys)``: the 16-byte ids end to end, in id order, and their entry keys as native
    int64s; and no object is made an event: ``leaves`` is the leaf hashes end to end and
    ``appended`` the ids' texts end to end (36 bytes each), in seq order.
    """

def compact_append_pack(
    branch_no: int,
    size: int,
    hashes: list[bytes],
    leaves: bytes,
    min_level: int,
    by_end: bool,
) -> tuple[list[bytes], bytes, bytes]:
    """``compact_append_rows`` with the ``nodes`` rows packed.

    The keys as native int64s and the hashes end to end, in key order.
    """

def compact_append_rows(
    branch_no: int,
    size: int,
    hashes: list[bytes],
    leaves: bytes,
    min_level: int,
    by_end: bool,
) -> tuple[list[bytes], list[tuple[int, bytes]]]:
    """Fold leaf hashes (end to end) into a compact range; the new hashes and ``nodes`` rows.

    Only the rows of level ``min_level`` or above (``store.NODE_MIN_LEVEL``), keyed as
    ``Store.key_of_node`` (``by_end``: ``store.node_key``, else ``level_node_key``).
    """

def event_id_span(events: list[tuple[str, int]]) -> tuple[bytes, bytes]:
    """Return the smallest and largest 16-byte id of ``(event id, seq)`` pairs."""

def event_index_check(
    events: list[tuple[str, int]], base: int, found: list[tuple[bytes, int]]
) -> list[tuple[str, int, int | None]]:
    """``(event id, seq, indexed key)`` of the events not indexed at ``base + seq``."""

@final
class IndexSpan:
    """Every event index row whose id lies in a span, read ahead (``event_index_span``)."""

def event_index_span(lo: bytes, hi: bytes, found: list[tuple[bytes, int]]) -> IndexSpan:
    """Return the ``IndexSpan`` of ``found``: every index row with an id in ``[lo, hi]``."""

def event_index_check_ahead(
    events: list[tuple[str, int]], base: int, ahead: list[IndexSpan]
) -> list[tuple[str, int, int | None]] | None:
    """``event_index_check`` against index spans read ahead; None if one does not cover it."""

def content_digests_ok(rows: list[Any]) -> bytes:
    """One byte a store row tuple: 1 when its ``digest`` is the BLAKE3 of its ``content``."""

def row_event_ids(rows: list[Any]) -> tuple[int, bytes, bytes] | None:
    """``(count, smallest, largest)`` 16-byte id of the events among store row tuples."""

def inclusion_keys(
    branch_no: int, index: int, size: int, cache: dict[int, bytes], by_end: bool
) -> tuple[list[int], list[int]]:
    """Return the ``entries`` and ``nodes`` keys of an audit path that ``cache`` lacks."""

def inclusion_from_rows(
    branch_no: int,
    index: int,
    size: int,
    cache: dict[int, bytes],
    rows: list[tuple[int, int, bytes]],
    cache_min_level: int,
    cache_max: int,
    by_end: bool,
) -> list[bytes]:
    """Return the inclusion proof of leaf ``index`` from the cache and the rows read."""

@final
class Ed25519Key:
    """An Ed25519 signing key made from its 32-byte seed (``Reject`` for another size)."""

    def __new__(cls, seed: bytes) -> Ed25519Key: ...
    def public_key(self) -> bytes:
        """Return the raw 32-byte public key."""

    def sign(self, message: bytes) -> bytes:
        """Return the 64-byte RFC 8032 signature of ``message``."""

@final
class Ed25519Verifier:
    """An Ed25519 public key decoded once (``Reject`` if it is not one)."""

    def __new__(cls, public_key: bytes) -> Ed25519Verifier: ...
    def verify_strict(self, message: bytes, signature: bytes) -> bool:
        """Return whether the signature verifies by the strict rules (False for wrong sizes)."""

def event_inputs(
    lines: list[str],
    cls: type,
    setattr: Any,
    actor_types: list[str],
    roles: list[str],
    max_content: int,
) -> list[Any]:
    """Each line's ``EventInput`` when it is a flat, valid event request; None otherwise."""

# -- the memory map's paths (native/src/map.rs; reference: memroot.ledger.map_tree) -------------

def map_path_root(
    key: bytes, siblings: tuple[bytes, ...] | list[bytes], leaf: tuple[bytes, bytes] | None
) -> bytes:
    """Return the root the path gives for ``key`` (``Reject`` where the reference raises)."""

def map_hashes_ok(siblings: tuple[bytes, ...]) -> bool:
    """Whether ``siblings`` holds at most 256 items, each exactly ``bytes`` of 32."""

def map_descend(
    key: bytes, h: bytes, siblings: list[bytes], known: dict[bytes, tuple[bool, bytes, bytes]]
) -> tuple[bool, bytes, tuple[bytes, bytes] | None]:
    """Walk ``key``'s path from node ``h`` through ``known``, appending the siblings passed."""

def map_rows_into(
    rows: list[tuple[bytes, int, bytes, bytes]], known: dict[bytes, tuple[bool, bytes, bytes]]
) -> bool:
    """Check the stored rows and add them to ``known``; False (nothing added) if one is bad."""

def map_descend_all(
    keys: list[bytes],
    heads: list[bytes],
    siblings: list[list[bytes]],
    ends: list[Any],
    active: list[int],
    known: dict[bytes, tuple[bool, bytes, bytes]],
) -> tuple[list[int], list[bytes]]:
    """``map_descend`` for each walk of ``active``; return the waiting walks and their nodes."""

def map_put_rows(
    nodes: dict[bytes, Any],
    at: dict[bytes, int],
    base: int,
    places: Callable[[list[bytes]], object],
    starts: Callable[[list[bytes]], object],
    leaf_cls: type,
    inner_cls: type,
) -> tuple[
    list[tuple[int, int, bytes, bytes, int | None, int | None]],
    dict[bytes, int],
    list[bytes],
    bytes | None,
]:
    """``StoredNodes._put``'s rows: the new nodes numbered from ``base``, their children's rows."""

def map_update(
    root: bytes,
    groups: list[tuple[bytes, Mapping[bytes, bytes | None]]],
    known: dict[bytes, Any],
    read: Callable[[list[bytes]], list[Any]],
    leaf_cls: type,
    inner_cls: type,
) -> tuple[bytes, dict[bytes, Any]]:
    """``state_map.update_map`` level by level: the new root and the nodes made."""

def merkle_leaves_plan(size: int, positions: list[int]) -> list[tuple[int, int]]:
    """``strict.leaves_root``'s plan: the complete subtrees to read, in the order used."""

def merkle_leaves_root(
    size: int, positions: list[int], leaves: list[bytes], got: list[bytes]
) -> bytes:
    """``strict.leaves_root``: the root from the known leaves and the planned subtrees."""
