"""Benchmark proof files (docs/FORMAT.md §6.15): generation + offline check, and their size.

Not a test. For each size N this builds, untimed, a stored memory map of N object items
(``memory_map_nodes`` in a SQLite file, read back through ``StoredNodes``, which re-hashes
every node), in ``--namespaces`` namespaces of equal size, and a SNAPSHOT entry of a v2 root
committing to it with the projection list a real memroot root has (taken from a small real
ledger's first root), at entry ``6 N`` of a log of ``10 N`` entries (the other leaves are one
repeated hash, so the tree's nodes are computed per level, not stored), signed with the
public test key. Then, over ``--proofs`` random objects, each figure beside its baseline
in the same run:

- ``map_per_s``: **the map proof of one object against a root the verifier has already
  checked to a signed checkpoint**: both paths (namespace tree, item tree) generated from the
  stored nodes by ``state_map.prove_many`` (level by level, one ``SELECT`` per level, the
  walk in ``memroot._native``; a fresh node cache and a new connection, as a new process
  has: ``_reader``) and both checked by ``map_tree.path_root`` (native) against the root;
  ``map_per_s_warm``: the same in a long-lived prover, whose node cache holds what the
  proofs of as many other random objects of the root read first (the upper levels every
  path crosses, shared: ``StoredNodes``' bounded row cache; each object's own lower nodes
  are still read); ``map_per_s_python``: the same with ``MEMROOT_BACKEND=python``'s lines
  (``map_tree._N`` off); ``map_per_s_before``: the code before (one ``state_map.prove`` per
  path, one query per uncached node, the checker's pure-Python walk);
- ``file_per_s``: **whole self-contained files**: ``proofs.prove_items`` (the paths walked
  together, each file built, rendered and checked as ``memroot audit --proof`` checks it, the
  signed snapshot once, ``CheckMemo``); ``file_per_s_before``: ``prove_item`` per object,
  each file checked in full from scratch (the code before);
- ``check_per_s``: ``check_proof`` alone on each rendered file, from scratch (what an auditor
  given one file runs); ``check_per_s_memo``: with a ``CheckMemo`` (many files of one root);
- ``file_bytes`` and ``map_bytes``: the mean proof file size, and the mean size of its map
  part in binary (32 bytes per sibling, 64 per end leaf, both paths); ``binary_bytes``: the
  file's content without base64 and JSON (what a binary encoding would carry), and
  ``entry_checkpoint_map_bytes`` the same without the inclusion path.

CPU time (``process_time``), since the machine is shared. Usage::

    python bench/bench_prove.py --sizes 100000 1000000 [--proofs 5000] [--cache N] [--rows N]
        [--keep DIR] [--json out.json] [--map-only | --sizes-only | --check-versions]

``--sizes-only``: the mean object-file size (``sizes``) for a v2 root and for a v3 root
(docs/FORMAT.md §6.16: the projection list by its hash), each against a checkpoint of the
whole log and against the SNAPSHOT's own kept checkpoint, nothing timed: ``file_bytes`` the
``memroot-proof`` version 1 file (JSON), ``file_v2_bytes`` (mean) and ``file_v2_max_bytes``
(largest) the version 2 file (binary, §6.15), ``file_v3_bytes`` and ``file_v3_max_bytes``
the version 3 file (compact binary, §6.15), ``binary_bytes`` the content alone.
``--check-versions``: ``check_proof`` from scratch on the version 1, 2 and 3 files of the
same proofs (a v3 root, its own checkpoint), interleaved rounds, CPU time.
``--every-key``: the version 2 and 3 object files of **every** object of the map (a v3 root,
its own checkpoint; built and checked in batches, only their sizes kept): the mean and the
largest of each, and the object of the largest version 3 file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import apsw

from memroot.ledger import encoding, map_tree
from memroot.ledger.bundle.proof_file import CheckMemo, ProofFile, check_proof
from memroot.ledger.entries import Entry, Kind, build_entry
from memroot.ledger.hashing import domain_hash, node_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import Checkpoint, sign_checkpoint, vkey_of
from memroot.ledger.signing import Ed25519Signer
from memroot.memory_root import state_map as mm
from memroot.memory_root.map_nodes import StoredNodes, install
from memroot.memory_root.proofs import MapPreimages, SignedSnapshot, prove_item, prove_items

ORIGIN = "example.org/memroot/bench"
SEED = bytes(range(1, 33))
CHUNK = 100_000
FILLER = b"\x5a" * 32  # every leaf of the log but the SNAPSHOT's


BATCH = 1000  # proofs walked together


@contextlib.contextmanager
def _python_map() -> Iterator[None]:
    """Run the map's walk and path check on their pure-Python lines (the reference)."""
    space = vars(map_tree)
    saved, space["_N"] = space["_N"], None
    try:
        yield
    finally:
        space["_N"] = saved


def _reader(path: Path) -> apsw.Connection:
    """Open the map's file as a new prover process does, with a cold page cache.

    Of the size ``Store`` gives every ledger connection (``PRAGMA cache_size=-65536``, 64 MiB):
    the connection ``memroot prove`` reads the derived nodes through.
    """
    db = apsw.Connection(str(path))
    db.execute("PRAGMA cache_size=-65536")
    return db


def _oid(i: int) -> str:
    return f"01900000-0000-7000-8000-{i:012d}"


def _state(i: int) -> dict[str, Any]:
    return {"branch": "main", "seq": 10 * i + 3}


def _real_projections(tmp: Path) -> list[Any]:
    """Return the projection list of a real v2 root (a new ledger's first snapshot)."""
    from memroot.memory_root.roots import Roots

    with Ledger.init(tmp / "real.ledger", origin=ORIGIN) as led:
        res = Roots(led).snapshot()
        payload = led.entry(res.record.seq).body["payload"]
    return list(payload["projections"])


class _Tree:
    """An RFC 9162 tree of ``size`` leaves, all ``FILLER`` but leaf ``index`` (= ``leaf``)."""

    def __init__(self, size: int, index: int, leaf: bytes) -> None:
        self.size, self.index, self.leaf = size, index, leaf

    @cache  # noqa: B019 - one tree per run
    def _filler(self, n: int) -> bytes:
        if n == 1:
            return FILLER
        k = 1 << ((n - 1).bit_length() - 1)
        return node_hash(self._filler(k), self._filler(n - k))

    def mth(self, lo: int, hi: int) -> bytes:
        """RFC 9162 §2.1.1 MTH of leaves ``[lo, hi)``."""
        n = hi - lo
        if not lo <= self.index < hi:
            return self._filler(n)
        if n == 1:
            return self.leaf
        k = 1 << ((n - 1).bit_length() - 1)
        return node_hash(self.mth(lo, lo + k), self.mth(lo + k, hi))

    def path(self, lo: int, hi: int) -> list[bytes]:
        """RFC 9162 §2.1.3.1 PATH(index, D[lo:hi])."""
        n = hi - lo
        if n == 1:
            return []
        k = 1 << ((n - 1).bit_length() - 1)
        if self.index < lo + k:
            return [*self.path(lo, lo + k), self.mth(lo + k, hi)]
        return [*self.path(lo + k, hi), self.mth(lo, lo + k)]


def _snapshot(
    map_root: bytes, size: int, projections: list[Any], v: int = 2, own: bool = False
) -> SignedSnapshot:
    """Return a signed SNAPSHOT of a root of version ``v`` (2, or 3: the list by its hash).

    Signed in a checkpoint of the whole log (``size`` entries; the SNAPSHOT at ``6/10`` of
    it, an older root: a full-length inclusion path), or with ``own`` in the checkpoint that
    sealed the SNAPSHOT's own transaction (the SNAPSHOT its last entry: tree size seq + 1).
    """
    seq = size * 3 // 5
    hw = {"seq": seq - 1, "entry_hash": FILLER, "tree_size": seq, "tree_root": b"\x01" * 32}
    listed: Any = projections
    if v == 3:
        listed = domain_hash("memroot/projections/v1", encoding.encode(projections))
    pre = {"v": v, "branch": "main", "parent": b"\x02" * 32, "high_water": hw, "map": map_root,
           "projections": listed}  # fmt: skip
    payload = {**pre, "memory_root": domain_hash(f"memroot/root/v{v}", encoding.encode(pre))}
    if own:
        size = seq + 1
    body = {"id": _oid(10**11), "actor_id": "memroot", "actor_type": "SYSTEM_PROCESS",
            "namespace_id": "system", "payload": payload,
            "policy_version": "memroot/1"}  # fmt: skip
    entry: Entry = build_entry(FILLER, seq, "main", 1767225600000000, Kind.OP, "SNAPSHOT", body)
    tree = _Tree(size, seq, entry.hash)
    signer = Ed25519Signer.from_seed(ORIGIN, SEED)
    note = sign_checkpoint(Checkpoint(ORIGIN, size, tree.mth(0, size)), [signer])
    return SignedSnapshot.of(note, entry, tree.path(0, size))


def _binary_size(f: ProofFile) -> int:
    """Return the bytes of a file's content without base64 or JSON (a binary encoding's)."""
    paths = [p for p in (f.namespace_path, f.item_path) if p is not None]
    item = f.item
    assert item is not None
    return (
        len(f.entry) + 32 * len(f.inclusion) + len(f.checkpoint.encode())
        + sum(32 * len(p.siblings) + (64 if p.leaf is not None else 0) for p in paths)
        + len(f.namespace.encode()) + len(item.kind) + len(item.id) + len(item.state or b"")
    )  # fmt: skip


def sizes(
    n_items: int, namespaces: int, proofs: int, tmp: Path, projections: list[Any]
) -> dict[str, Any]:
    """Mean object-file sizes for v2 and v3 roots, against the head's and the own checkpoint.

    ``memroot-proof`` version 1 files (JSON, base64) and their content without base64 and
    JSON (``binary``), over ``proofs`` random objects of a map of ``n_items`` (built or reused
    in ``tmp`` as ``run`` does).
    """
    db, path, root, built, _ = _map(n_items, namespaces, tmp)
    rng = random.Random(n_items)
    sample = [rng.randrange(n_items) for _ in range(proofs)]
    ns_of = [f"ns-{i % namespaces}" for i in range(namespaces)]
    pre = MapPreimages({("object", _oid(i)): _state(i) for i in sample})
    wanted = [(ns_of[i % namespaces], "object", _oid(i)) for i in sample]
    vkeys = [vkey_of(Ed25519Signer.from_seed(ORIGIN, SEED))]
    out: dict[str, Any] = {"items": n_items, "proofs": proofs, "reused_map": built}
    reader = _reader(path)
    nodes = StoredNodes(reader)
    for v in (2, 3):
        for own in (False, True):
            snap = _snapshot(root, 10 * n_items, projections, v, own)
            files = prove_items(snap, nodes, pre, wanted, vkeys)
            key = f"v{v}_{'own' if own else 'head'}"
            out[f"{key}_file_bytes"] = round(sum(len(f.render()) for f, _ in files) / proofs)
            v2 = [f.encode() for f, _ in files]
            out[f"{key}_file_v2_bytes"] = round(sum(map(len, v2)) / proofs)
            out[f"{key}_file_v2_max_bytes"] = max(map(len, v2))
            v3 = [f.encode_v3() for f, _ in files]
            out[f"{key}_file_v3_bytes"] = round(sum(map(len, v3)) / proofs)
            out[f"{key}_file_v3_max_bytes"] = max(map(len, v3))
            out[f"{key}_binary_bytes"] = round(sum(_binary_size(f) for f, _ in files) / proofs)
            out[f"{key}_entry_bytes"] = len(snap.entry.raw)
            out[f"{key}_inclusion_hashes"] = len(snap.inclusion)
    reader.close()
    db.close()
    return out


def sizes_every(
    n_items: int, namespaces: int, tmp: Path, projections: list[Any], batch: int = 10_000
) -> dict[str, Any]:
    """Version 2 and 3 object-file sizes of every object of the map (v3 root, own checkpoint).

    Each file is built and checked by ``prove_items`` (on its version 3 bytes) in batches of
    ``batch``; only the sizes are kept. Returns the mean and largest of each version and the
    index of the object with the largest version 3 file.
    """
    db, path, root, built, _ = _map(n_items, namespaces, tmp)
    vkeys = [vkey_of(Ed25519Signer.from_seed(ORIGIN, SEED))]
    reader = _reader(path)
    nodes = StoredNodes(reader)
    snap = _snapshot(root, 10 * n_items, projections, 3, own=True)
    total = {2: 0, 3: 0}
    largest = {2: 0, 3: 0}
    where = 0
    for lo in range(0, n_items, batch):
        ids = range(lo, min(n_items, lo + batch))
        pre = MapPreimages({("object", _oid(i)): _state(i) for i in ids})
        wanted = [(f"ns-{i % namespaces}", "object", _oid(i)) for i in ids]
        for i, (f, _) in zip(ids, prove_items(snap, nodes, pre, wanted, vkeys), strict=True):
            n2, n3 = len(f.encode()), len(f.encode_v3())
            total[2] += n2
            total[3] += n3
            largest[2] = max(largest[2], n2)
            if n3 > largest[3]:
                largest[3], where = n3, i
    reader.close()
    db.close()
    return {
        "items": n_items,
        "proofs": n_items,
        "reused_map": built,
        "file_v2_bytes": round(total[2] / n_items),
        "file_v2_max_bytes": largest[2],
        "file_v3_bytes": round(total[3] / n_items),
        "file_v3_max_bytes": largest[3],
        "file_v3_max_object": _oid(where),
    }


def check_versions(
    n_items: int, namespaces: int, proofs: int, tmp: Path, projections: list[Any], rounds: int = 6
) -> dict[str, Any]:
    """``check_proof`` from scratch on version 1 texts, version 2 and 3 bytes of the same files.

    The object files of ``proofs`` random objects at a v3 root in its SNAPSHOT's own
    checkpoint (the ``v3_own`` files of ``sizes``); ``rounds`` passes of each version, in a
    rotating order, CPU time; the median rate of each.
    """
    db, path, root, built, _ = _map(n_items, namespaces, tmp)
    rng = random.Random(n_items)
    sample = [rng.randrange(n_items) for _ in range(proofs)]
    pre = MapPreimages({("object", _oid(i)): _state(i) for i in sample})
    wanted = [(f"ns-{i % namespaces}", "object", _oid(i)) for i in sample]
    vkeys = [vkey_of(Ed25519Signer.from_seed(ORIGIN, SEED))]
    reader = _reader(path)
    snap = _snapshot(root, 10 * n_items, projections, 3, own=True)
    files = prove_items(snap, StoredNodes(reader), pre, wanted, vkeys)
    texts: dict[str, list[str | bytes]] = {
        "v1": [f.render() for f, _ in files],
        "v2": [f.encode() for f, _ in files],
        "v3": [f.encode_v3() for f, _ in files],
    }
    rates: dict[str, list[float]] = {"v1": [], "v2": [], "v3": []}
    order = ("v1", "v2", "v3")
    for r in range(rounds):
        for name in order[r % 3 :] + order[: r % 3]:
            t = time.process_time()
            for text in texts[name]:
                check_proof(text, vkeys)
            rates[name].append(proofs / (time.process_time() - t))
    reader.close()
    db.close()
    out: dict[str, Any] = {"items": n_items, "proofs": proofs, "reused_map": built}
    for name, got in rates.items():
        out[f"check_{name}_per_s"] = round(sorted(got)[len(got) // 2])
        out[f"check_{name}_rounds"] = [round(x) for x in got]
    return out


def _map(
    n_items: int, namespaces: int, tmp: Path
) -> tuple[apsw.Connection, Path, bytes, bool, float]:
    """Build (or reuse, from ``tmp``) the stored map of ``n_items`` objects; return its root."""
    path = tmp / f"prove{n_items}-{namespaces}.db"
    built = path.exists()
    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode=WAL")
    nodes = StoredNodes(db)
    root: bytes = mm.EMPTY
    ns_of = [f"ns-{i % namespaces}" for i in range(namespaces)]
    t0 = time.perf_counter()
    with db:
        install(db)
        db.execute("CREATE TABLE IF NOT EXISTS bench_root(root BLOB NOT NULL)")
    if built:
        root = bytes(db.execute("SELECT root FROM bench_root").fetchall()[0][0])  # type: ignore[arg-type]
    for start in range(0, 0 if built else n_items, CHUNK):
        changes: dict[str, dict[bytes, bytes | None]] = {}
        for i in range(start, min(n_items, start + CHUNK)):
            changes.setdefault(ns_of[i % namespaces], {})[mm.item_key("object", _oid(i))] = (
                mm.value_hash(_state(i))
            )
        with db:
            u = mm.update_map(nodes, root, changes)
            nodes.put(u.nodes)
        root = u.root
    if not built:
        with db:
            db.execute("INSERT INTO bench_root VALUES(?)", (root,))
    return db, path, root, built, time.perf_counter() - t0


def run(
    n_items: int,
    namespaces: int,
    proofs: int,
    tmp: Path,
    projections: list[Any],
    cache: int,
    rows: int,
    map_only: bool = False,
) -> dict[str, Any]:
    """Measure one map size (see the module docstring); a map built before in ``tmp`` is reused.

    ``map_only``: the cold map pass alone (``map_per_s``, after the untimed one), for A/B
    runs of two checkouts of the library alternately.
    """
    rng = random.Random(n_items)
    db, path, root, built, build_s = _map(n_items, namespaces, tmp)
    ns_of = [f"ns-{i % namespaces}" for i in range(namespaces)]
    snap = _snapshot(root, 10 * n_items, projections)
    vkeys = [vkey_of(Ed25519Signer.from_seed(ORIGIN, SEED))]
    sample = [rng.randrange(n_items) for _ in range(proofs)]
    pre = MapPreimages({("object", _oid(i)): _state(i) for i in sample})
    wanted = [(ns_of[i % namespaces], "object", _oid(i)) for i in sample]
    walks = [(mm.namespace_key(ns), mm.item_key(k, i)) for ns, k, i in wanted]
    others = [
        (mm.namespace_key(ns_of[i % namespaces]), mm.item_key("object", _oid(i)))
        for i in (rng.randrange(n_items) for _ in range(proofs))
    ]

    def walk_all(nodes: StoredNodes, ws: Sequence[tuple[bytes, bytes]], batched: bool) -> int:
        """Prove and check both paths of every walk of ``ws``; return the map parts' bytes."""
        size = 0
        for lo in range(0, len(ws), BATCH):
            part = ws[lo : lo + BATCH]
            if batched:
                tops = mm.prove_many(nodes, [(root, nk) for nk, _ in part])
                subs = [t.leaf.value for t in tops if t.leaf is not None]
                items = mm.prove_many(
                    nodes, [(r, ik) for r, (_, ik) in zip(subs, part, strict=True)]
                )
            else:
                tops = [mm.prove(nodes, root, nk) for nk, _ in part]
                subs = [t.leaf.value for t in tops if t.leaf is not None]
                items = [mm.prove(nodes, r, ik) for r, (_, ik) in zip(subs, part, strict=True)]
            for (nk, ik), top, sub, item in zip(part, tops, subs, items, strict=True):
                assert map_tree.path_root(nk, top) == root and map_tree.path_root(ik, item) == sub
                size += 32 * (len(top.siblings) + len(item.siblings)) + 128
        return size

    def map_half(batched: bool, warm: bool = False) -> tuple[float, int]:
        reader = _reader(path)  # fresh caches (SQLite's and the nodes'), as a new process has
        nodes = StoredNodes(reader, cache=cache, rows=rows)
        if warm:  # untimed: a long-lived prover that proved as many other objects before
            walk_all(nodes, others, True)
        c0 = time.process_time()
        size = walk_all(nodes, walks, batched)
        spent = time.process_time() - c0
        reader.close()
        return spent, size

    map_half(True)  # untimed: the file's pages in the OS cache for every pass alike
    map_cpu, map_bytes = map_half(True)
    if map_only:
        db.close()
        return {"items": n_items, "proofs": proofs, "map_per_s": round(proofs / map_cpu)}
    map_warm_cpu, _ = map_half(True, warm=True)
    with _python_map():
        map_py_cpu, _ = map_half(True)
        map_before_cpu, _ = map_half(False)

    reader = _reader(path)
    nodes = StoredNodes(reader, cache=cache, rows=rows)
    c0 = time.process_time()
    files = []
    for lo in range(0, proofs, BATCH):
        files += prove_items(snap, nodes, pre, wanted[lo : lo + BATCH], vkeys)
    file_cpu = time.process_time() - c0
    texts = [f.render() for f, _ in files]
    reader.close()
    reader = _reader(path)
    nodes = StoredNodes(reader, cache=cache)
    c0 = time.process_time()
    for ns, kind, oid in wanted[: max(1, proofs // 5)]:
        prove_item(snap, nodes, pre, ns, kind, oid, vkeys)
    file_before_cpu = (time.process_time() - c0) * proofs / max(1, proofs // 5)
    c0 = time.process_time()
    for text in texts:
        check_proof(text, vkeys)
    check_cpu = time.process_time() - c0
    memo = CheckMemo()
    c0 = time.process_time()
    for text in texts:
        check_proof(text, vkeys, memo=memo)
    check_memo_cpu = time.process_time() - c0
    reader.close()
    db.close()
    return {
        "items": n_items,
        "namespaces": namespaces,
        "log_size": 10 * n_items,
        "proofs": proofs,
        "node_cache": cache,
        "row_cache": rows,
        "reused_map": built,
        "build_s": round(build_s, 1),
        "map_per_s": round(proofs / map_cpu),
        "map_per_s_warm": round(proofs / map_warm_cpu),
        "map_per_s_python": round(proofs / map_py_cpu),
        "map_per_s_before": round(proofs / map_before_cpu),
        "file_per_s": round(proofs / file_cpu),
        "file_per_s_before": round(proofs / file_before_cpu),
        "check_per_s": round(proofs / check_cpu),
        "check_per_s_memo": round(proofs / check_memo_cpu),
        "file_bytes": round(sum(len(t) for t in texts) / proofs),
        "binary_bytes": round(sum(_binary_size(f) for f, _ in files) / proofs),
        "entry_checkpoint_map_bytes": round(
            sum(_binary_size(f) - 32 * len(f.inclusion) for f, _ in files) / proofs
        ),
        "map_bytes": round(map_bytes / proofs),
        "entry_bytes": len(snap.entry.raw),
        "inclusion_hashes": len(snap.inclusion),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print one JSON line per size."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--namespaces", type=int, default=1)
    ap.add_argument("--proofs", type=int, default=5_000)
    ap.add_argument("--cache", type=int, default=1 << 16, help="StoredNodes cache (nodes)")
    ap.add_argument("--rows", type=int, default=1 << 18, help="StoredNodes row cache (nodes)")
    ap.add_argument("--keep", type=Path, help="build the maps here and reuse them next run")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--map-only", action="store_true", help="the cold map pass alone (A/B)")
    ap.add_argument(
        "--sizes-only", action="store_true", help="file sizes, v2 and v3 roots (``sizes``)"
    )
    ap.add_argument(
        "--check-versions",
        action="store_true",
        help="check_proof on version 1, 2 and 3 files, interleaved (``check_versions``)",
    )
    ap.add_argument(
        "--every-key",
        action="store_true",
        help="v2 and v3 file sizes of every object of the map (``sizes_every``)",
    )
    args = ap.parse_args(argv)
    out = []
    with tempfile.TemporaryDirectory() as d:
        projections = _real_projections(Path(d))
        where = Path(d) if args.keep is None else args.keep
        where.mkdir(parents=True, exist_ok=True)
        for n in args.sizes:
            if args.every_key:
                r = sizes_every(n, args.namespaces, where, projections)
            elif args.check_versions:
                r = check_versions(n, args.namespaces, args.proofs, where, projections)
            elif args.sizes_only:
                r = sizes(n, args.namespaces, args.proofs, where, projections)
            else:
                r = run(
                    n, args.namespaces, args.proofs, where, projections, args.cache, args.rows,
                    args.map_only,
                )  # fmt: skip
            out.append(r)
            sys.stdout.write(json.dumps(r) + "\n")
            sys.stdout.flush()
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
