"""Generate ``proofs/``: proof files (docs/FORMAT.md §6.15) on fixed inputs.

Where they come from (every key is a public test key that must never sign anything real):

- the log key: Ed25519 with RFC 8032 seed ``01 02 .. 20``, origin ``example.org/memroot/test``
  (the key of ``checkpoint-kat.txt``; its vkey is ``proofs/test.vkey``);
- the memory map: the items of ``map-vectors.json`` (namespace ``alice``: five items of both
  kinds; ``bob``: two), built with ``memroot.memory_root.state_map``;
- a log of five entries on ``main``: a genesis, an event, an ASSERT, the SNAPSHOT of a memory
  root v2 (§6.13) committing to that map at entry 3, and one more operation; a checkpoint of
  all five, signed with the test key. Timestamps from 2026-01-01T00:00:00Z;
- the same five entries on a branch ``sim-1`` (its genesis anchored at a made-up parent
  entry: a proof file checks the root's tree, not the branch's anchor), with a checkpoint of
  origin ``example.org/memroot/test/branch/sim-1`` signed by the same key under that name
  (FORMAT.md §5), for ``object-branch``.

The files: ``object`` (an object present, with its state), ``state`` (a falsification state
present), ``object-absent`` (an id the map does not hold in ``alice``), ``object-absent-ns``
(an object of a namespace the map does not hold), ``namespace`` (every item of ``alice``),
``namespace-empty`` (namespace ``carol``: no item), ``object-branch``, ``object-v3root``
(``object``'s claim at a memory root v3, §6.16: the same log with the SNAPSHOT's projection
list committed by its hash), and ``object-branch-r1`` (``object-branch``'s claim with its
branch checkpoint signed under the log's own key name, as before checkpoint signatures
revision 2, §5: a note version 3 does not rebuild, so it carries the text). Every proof is
written in
the three versions: ``NAME.proof.json`` (1), ``NAME.proof`` (2), ``NAME.v3.proof`` (3).
Ed25519 is
deterministic, so running this again must give identical bytes
(``tests/unit/ledger/test_prove_vectors.py`` checks it, and checks every file with an outside
auditor's implementation written from FORMAT.md alone).

Usage, from the repository root: ``python tests/vectors/memroot/gen_proof_vectors.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from memroot.ledger import encoding, merkle
from memroot.ledger.bundle.proof_file import ProofFile
from memroot.ledger.entries import Entry, Kind, build_entry
from memroot.ledger.hashing import domain_hash
from memroot.ledger.note import Checkpoint, sign_checkpoint, sign_note, vkey_of
from memroot.ledger.signing import Ed25519Signer
from memroot.memory_root import state_map as mm
from memroot.memory_root.proofs import MapPreimages, SignedSnapshot, prove_item, prove_items_of

OUT = Path(__file__).with_name("proofs")
SEED = bytes(range(1, 33))
ORIGIN = "example.org/memroot/test"
T0 = 1767225600000000  # 2026-01-01T00:00:00Z, microseconds


def _id(n: int) -> str:
    return f"01900000-0000-7000-8000-{n:012d}"


ITEMS: dict[str, list[tuple[str, str, Any]]] = {
    "alice": [
        ("object", _id(1), {"lifecycle": "ACTIVE", "seq": 3}),
        ("object", _id(2), {"lifecycle": "DEPRECATED", "seq": 9}),
        ("object", _id(3), {"lifecycle": "ACTIVE", "seq": 5}),
        ("state/memory_object", _id(2), {"state": "falsified", "seq": 8}),
        ("state/memory_object", _id(3), {"state": "stale", "seq": 11}),
    ],
    "bob": [
        ("object", _id(21), {"lifecycle": "ACTIVE", "seq": 12}),
        ("state/memory_object", _id(21), {"state": "live", "seq": 14}),
    ],
}


class MemoryNodes:
    """A ``state_map.NodeSource`` in memory."""

    def __init__(self) -> None:
        """Start empty."""
        self.nodes: dict[bytes, mm.Node] = {}

    def node(self, h: bytes) -> mm.Node | None:
        """Return the node of hash ``h``, or None."""
        return self.nodes.get(h)


def signer(origin: str = ORIGIN) -> Ed25519Signer:
    """Return the public test key under ``origin``'s name."""
    return Ed25519Signer.from_seed(origin, SEED)


def build_map(
    items: dict[str, list[tuple[str, str, Any]]],
) -> tuple[MemoryNodes, bytes, MapPreimages]:
    """Return the map of ``items`` (its nodes, root and preimages)."""
    nodes = MemoryNodes()
    pre = MapPreimages()
    changes: dict[str, dict[bytes, bytes | None]] = {}
    for ns, listed in items.items():
        changes[ns] = {}
        for kind, item_id, state in listed:
            k, v = pre.add(kind, item_id, state)
            changes[ns][k] = v
    u = mm.update_map(nodes, mm.EMPTY, changes)
    nodes.nodes.update(u.nodes)
    return nodes, u.root, pre


def _op(prev: bytes, seq: int, branch: str, type_: str, payload: dict[str, Any]) -> Entry:
    body = {
        "id": _id(100 + seq),
        "actor_id": "memroot",
        "actor_type": "SYSTEM_PROCESS",
        "namespace_id": "system",
        "payload": payload,
        "policy_version": "memroot/1",
    }
    return build_entry(prev, seq, branch, T0 + seq * 1000, Kind.OP, type_, body)


def snapshot_payload(
    branch: str, high_water: Entry, tree_root: bytes, map_root: bytes, v: int = 2
) -> dict[str, Any]:
    """Return a v2 SNAPSHOT payload (FORMAT.md §6.13): the preimage and its memory root.

    With ``v`` 3 a v3 payload (§6.16): the same list committed by its hash.
    """
    listed: Any = [{"id": "entity-count", "rule": b"\x11" * 32, "digest": b"\x22" * 32, "count": 0}]
    if v == 3:
        listed = domain_hash("memroot/projections/v1", encoding.encode(listed))
    preimage = {
        "v": v,
        "branch": branch,
        "parent": None,
        "high_water": {
            "seq": high_water.seq,
            "entry_hash": high_water.hash,
            "tree_size": high_water.seq + 1,
            "tree_root": tree_root,
        },
        "map": map_root,
        "projections": listed,
    }
    tag = f"memroot/root/v{v}"
    return {**preimage, "memory_root": domain_hash(tag, encoding.encode(preimage))}


def build_log(map_root: bytes, branch: str = "main", v: int = 2) -> tuple[list[Entry], int]:
    """Return five entries with a v``v`` SNAPSHOT of ``map_root`` (and the SNAPSHOT's seq)."""
    if branch == "main":
        first = build_entry(
            b"\x00" * 32,
            0,
            branch,
            T0,
            Kind.GENESIS,
            "GENESIS",
            {
                "branch_type": "CANONICAL",
                "format": 1,
                "keys": [vkey_of(signer())],
                "ledger_id": _id(999),
                "origin": ORIGIN,
                "snapshot_every": 1000,
            },
        )
    else:
        first = build_entry(
            b"\x33" * 32,
            0,
            branch,
            T0,
            Kind.GENESIS,
            "GENESIS",
            {
                "anchor": {"branch": "main", "seq": 4, "entry_hash": b"\x33" * 32},
                "branch_type": "SIMULATION",
                "format": 1,
                "ledger_id": _id(999),
                "origin": f"{ORIGIN}/branch/{branch}",
            },
        )
    entries = [first]
    entries.append(_op(entries[-1].hash, 1, branch, "REINFORCE", {"note": "before the root"}))
    entries.append(_op(entries[-1].hash, 2, branch, "REINFORCE", {"note": "the high-water"}))
    hw = entries[-1]
    tree_root = _root(entries)
    entries.append(
        _op(hw.hash, 3, branch, "SNAPSHOT", snapshot_payload(branch, hw, tree_root, map_root, v))
    )
    entries.append(_op(entries[-1].hash, 4, branch, "REINFORCE", {"note": "after the root"}))
    return entries, 3


def _root(entries: list[Entry]) -> bytes:
    r = merkle.CompactRange()
    r.append_many([e.hash for e in entries])
    return bytes(r.root())


def _inclusion(entries: list[Entry], index: int) -> list[bytes]:
    hashes = {}
    r = merkle.CompactRange()
    for n in r.append_many([e.hash for e in entries]):
        hashes[(n[0], n[1])] = n[2]
    for i, e in enumerate(entries):
        hashes[(0, i)] = e.hash

    def read(ids: Any) -> list[bytes]:
        return [hashes[(lvl, i)] for lvl, i in ids]

    return merkle.inclusion_proof(index, len(entries), read)


def signed_snapshot(
    map_root: bytes, branch: str = "main", v: int = 2, revision: int = 2
) -> SignedSnapshot:
    """Return a signed v``v`` snapshot of ``map_root`` in a five-entry log on ``branch``.

    With ``revision`` 1 a branch checkpoint is signed under the log's own key name (as
    before checkpoint signatures revision 2, FORMAT.md §5), not under its origin.
    """
    entries, seq = build_log(map_root, branch, v)
    origin = ORIGIN if branch == "main" else f"{ORIGIN}/branch/{branch}"
    checkpoint = Checkpoint(origin, len(entries), _root(entries))
    if revision == 1:
        note = sign_note(checkpoint.body(), [signer()])
    else:
        note = sign_checkpoint(checkpoint, [signer()])
    return SignedSnapshot.of(note, entries[seq], _inclusion(entries, seq))


def render() -> dict[str, str]:
    """Return every file of ``proofs/`` by name (its bytes).

    Each proof in the three versions: ``NAME.proof.json`` (version 1, JSON), ``NAME.proof``
    (version 2, binary: one canonical CBOR value) and ``NAME.v3.proof`` (version 3, compact
    binary), the same content.
    """
    nodes, root, pre = build_map(ITEMS)
    vkeys = [vkey_of(signer())]
    snap = signed_snapshot(root)
    proofs: dict[str, ProofFile] = {}
    cases = {
        "object": ("alice", "object", _id(1)),
        "state": ("alice", "state/memory_object", _id(2)),
        "object-absent": ("alice", "object", _id(77)),
        "object-absent-ns": ("carol", "object", _id(1)),
    }
    for name, (ns, kind, item_id) in cases.items():
        proofs[name] = prove_item(snap, nodes, pre, ns, kind, item_id, vkeys)[0]
    proofs["namespace"] = prove_items_of(snap, nodes, pre, "alice", vkeys)[0]
    proofs["namespace-empty"] = prove_items_of(snap, nodes, pre, "carol", vkeys)[0]
    branch_snap = signed_snapshot(root, "sim-1")
    proofs["object-branch"] = prove_item(branch_snap, nodes, pre, "bob", "object", _id(21), vkeys)[
        0
    ]
    v3_snap = signed_snapshot(root, v=3)
    proofs["object-v3root"] = prove_item(v3_snap, nodes, pre, "alice", "object", _id(1), vkeys)[0]
    r1_snap = signed_snapshot(root, "sim-1", revision=1)
    proofs["object-branch-r1"] = prove_item(r1_snap, nodes, pre, "bob", "object", _id(21), vkeys)[0]
    out: dict[str, bytes] = {"test.vkey": (vkeys[0] + "\n").encode()}
    for name, proof in proofs.items():
        out[f"{name}.proof.json"] = proof.render().encode("utf-8")
        out[f"{name}.proof"] = proof.encode()
        out[f"{name}.v3.proof"] = proof.encode_v3()
    return out


def main() -> int:
    """Write every file into ``proofs/``."""
    OUT.mkdir(exist_ok=True)
    for name, data in render().items():
        (OUT / name).write_bytes(data)
    sys.stdout.write(f"wrote {OUT}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
