"""Build proof files (docs/FORMAT.md §6.15): one item or one namespace at a memory root v2.

The prover's side of ``memroot.ledger.bundle.proof_file`` (the format and the offline
checker). A proof is assembled from three parts, each read through a checked path:

- ``SignedSnapshot``: the SNAPSHOT entry of the root, a signed checkpoint covering it and the
  entry's RFC 9162 inclusion proof (``signed_snapshot`` reads them from a ledger strictly);
- the map's nodes (``state_map.NodeSource``, e.g. ``map_nodes.StoredNodes``, which hashes
  every node it reads again): the paths ``state_map.prove`` / ``prove_namespace`` walk from
  the map root the entry commits to;
- ``Preimages``: what the map's hashes stand for, an item key's ``(kind, id)`` and a value
  hash's state (canonical CBOR). A preimage is checked against the hash it is asked for, so
  a wrong one makes the proof fail, never lie.

Every proof built here is checked with ``check_proof`` against the ledger's own keys before
it is returned (``prove_item``, ``prove_items_of``: ``vkeys``), so a proof the stored state
cannot back is refused at the prover, not discovered by the auditor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import apsw

from memroot.ledger import encoding, map_tree
from memroot.ledger.bundle.proof_file import (
    ROOT_V2,
    ROOT_V3,
    CheckMemo,
    ProofFile,
    ProofItem,
    Proven,
    check_proof,
)
from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import IntegrityError, NotFoundError, RefusedError
from memroot.ledger.hashing import HASH_SIZE
from memroot.ledger.ledger import Ledger
from memroot.memory_root import root_v2, state_map
from memroot.memory_root.map_nodes import StoredNodes

__all__ = [
    "MapPreimages",
    "Preimages",
    "RootProofSource",
    "SignedSnapshot",
    "open_root",
    "prove_item",
    "prove_items",
    "prove_items_of",
    "signed_snapshot",
]


@dataclass(frozen=True, slots=True)
class SignedSnapshot:
    """A v2 root's SNAPSHOT entry, a signed checkpoint covering it, and its inclusion proof.

    Attributes:
        checkpoint: the signed checkpoint note.
        entry: the SNAPSHOT entry (its bytes in ``entry.raw``).
        inclusion: the entry's RFC 9162 inclusion proof in the checkpoint's tree.
        root: the memory root the entry records; ``map_root``: the map root it commits to.
    """

    checkpoint: str
    entry: Entry
    inclusion: tuple[bytes, ...]
    root: bytes
    map_root: bytes

    @classmethod
    def of(cls, checkpoint: str, entry: Entry, inclusion: Sequence[bytes]) -> SignedSnapshot:
        """Read the root and map root from ``entry``'s payload.

        Raises:
            RefusedError: if the entry does not record a v2 or v3 root (a v1 root commits
                to no memory map, so nothing in it can be proven this way).
        """
        payload = entry.body.get("payload")
        if entry.type != "SNAPSHOT" or type(payload) is not dict:
            raise RefusedError(f"entry {entry.seq} of branch {entry.branch} is not a SNAPSHOT")
        if payload.get("v") not in (ROOT_V2, ROOT_V3):
            raise RefusedError(
                f"the root of entry {entry.seq} (branch {entry.branch}) is a version "
                f"{payload.get('v')!r} root: it commits to no memory map, so it proves no item "
                "(v2 roots do; take a snapshot with this version first)"
            )
        root, map_root = payload.get("memory_root"), payload.get("map")
        if type(root) is not bytes or type(map_root) is not bytes:
            raise IntegrityError(f"the root of entry {entry.seq} is malformed")
        return cls(checkpoint, entry, tuple(inclusion), root, map_root)


def signed_snapshot(
    ledger: Ledger, seq: int, branch: str = CANONICAL_BRANCH, *, at_snapshot: bool = False
) -> SignedSnapshot:
    """Return the SNAPSHOT entry at ``(branch, seq)`` with its proof in a signed checkpoint.

    The entry is read strictly (proven in the signed head). The checkpoint is the head (the
    newest signed one, so the proof ties the root to the log as it stands now), or with
    ``at_snapshot`` the smallest kept checkpoint that covers the entry: the one that sealed
    the SNAPSHOT's own transaction, kept for good (docs/FORMAT.md §5, "Head and
    retention"), whose shorter inclusion path makes a smaller file. That checkpoint was
    signed by the key of its time (after a rotation, the auditor needs the old key, §6.15
    P2); the proof file is checked like any other before it is returned.

    Raises:
        IntegrityError: if a strict read of the entry or the head fails.
        NotFoundError: if the branch has no signed checkpoint (covering the entry).
        RefusedError: if the entry is not a v2 or v3 SNAPSHOT.
    """
    with ledger.reading():
        head = ledger.head_checkpoint(branch)
        if head is None:
            raise NotFoundError(f"branch {branch!r} has no signed checkpoint")
        entry = ledger.entry(seq, branch)
        size, note = head.checkpoint.size, head.note
        if at_snapshot:
            kept = [
                (n, text)
                for n, _, text in ledger.store.checkpoints(ledger.store.branch(branch).no)
                if seq < n <= size
            ]
            if not kept:
                raise NotFoundError(f"no kept checkpoint of branch {branch!r} covers entry {seq}")
            size, note = kept[0]
        proof = ledger.inclusion_proof(seq, size, branch)
    return SignedSnapshot.of(note, entry, proof)


class Preimages(Protocol):
    """What the map's hashes stand for, as the prover knows it at one root."""

    def item(self, key: bytes) -> tuple[str, str] | None:
        """Return the ``(kind, id)`` whose item key is ``key``, or None if unknown."""

    def state(self, value: bytes) -> bytes | None:
        """Return the canonical CBOR of the state whose value hash is ``value``, or None."""


class MapPreimages:
    """``Preimages`` from the items themselves: ``{(kind, id): state}`` (any CBOR states)."""

    def __init__(self, states: dict[tuple[str, str], Any] | None = None) -> None:
        """Index ``states`` (more with ``add``)."""
        self._items: dict[bytes, tuple[str, str]] = {}
        self._states: dict[bytes, bytes] = {}
        for (kind, item_id), state in (states or {}).items():
            self.add(kind, item_id, state)

    def add(self, kind: str, item_id: str, state: Any) -> tuple[bytes, bytes]:
        """Index one item; return its ``(item key, value hash)``."""
        raw = encoding.encode(state)
        key, value = map_tree.item_key(kind, item_id), map_tree.value_hash_of(raw)
        self._items[key] = (kind, item_id)
        self._states[value] = raw
        return key, value

    def item(self, key: bytes) -> tuple[str, str] | None:
        """Return the ``(kind, id)`` of an item key, or None."""
        return self._items.get(key)

    def state(self, value: bytes) -> bytes | None:
        """Return the state CBOR of a value hash, or None."""
        return self._states.get(value)


def _state_of(pre: Preimages, kind: str, item_id: str, value: bytes) -> bytes:
    raw = pre.state(value)
    if raw is None or map_tree.value_hash_of(raw) != value:
        raise IntegrityError(
            f"the state of {kind} {item_id!r} at this root is not known to the prover (its "
            f"value hash {value.hex()} has no checked preimage)"
        )
    return raw


def _checked(
    proof: ProofFile, vkeys: Sequence[str], memo: CheckMemo | None = None
) -> tuple[ProofFile, Proven]:
    """Check ``proof`` as an auditor would before handing it out (fail closed).

    The bytes checked are the version 3 file's (``ProofFile.encode_v3``), the one written by
    default; a caller that writes version 1 or 2 checks those bytes too (``memroot prove
    --format 1|2``).
    """
    try:
        return proof, check_proof(proof.encode_v3(), vkeys, memo=memo)
    except IntegrityError as e:
        raise IntegrityError(
            f"the proof built from the stored map does not verify, so none is given: {e}"
        ) from e


def _base(snap: SignedSnapshot, namespace: str) -> dict[str, Any]:
    return {
        "root": snap.root,
        "checkpoint": snap.checkpoint,
        "index": snap.entry.seq,
        "entry": snap.entry.raw,
        "inclusion": snap.inclusion,
        "namespace": namespace,
    }


def prove_item(
    snap: SignedSnapshot,
    nodes: state_map.NodeSource,
    preimages: Preimages,
    namespace: str,
    kind: str,
    item_id: str,
    vkeys: Sequence[str],
) -> tuple[ProofFile, Proven]:
    """Return the proof of one item (``kind`` ``object`` or ``state/<type>``) at ``snap``'s root.

    An item the map does not hold gets a proof of absence (``Proven.present`` False).

    Raises:
        IntegrityError: if a node or a state preimage is missing or wrong, or the proof
            built does not verify with ``vkeys``.
    """
    if len(snap.map_root) != HASH_SIZE:
        raise IntegrityError("the root's map root is not 32 bytes")
    nk = state_map.namespace_key(namespace)
    npath = state_map.prove(nodes, snap.map_root, nk)
    ik = map_tree.item_key(kind, item_id)
    item_path = None
    if npath.leaf is not None and npath.leaf.key == nk:
        item_path = state_map.prove(nodes, npath.leaf.value, ik)
    proof = _item_file(snap, preimages, namespace, kind, item_id, npath, item_path)
    return _checked(proof, vkeys)


def _item_file(
    snap: SignedSnapshot,
    preimages: Preimages,
    namespace: str,
    kind: str,
    item_id: str,
    npath: state_map.MapProof,
    item_path: state_map.MapProof | None,
) -> ProofFile:
    """Return the proof file of one item from its two paths (with the state, when present)."""
    ik = map_tree.item_key(kind, item_id)
    state: bytes | None = None
    if item_path is not None and item_path.leaf is not None and item_path.leaf.key == ik:
        state = _state_of(preimages, kind, item_id, item_path.leaf.value)
    return ProofFile(
        kind="object" if kind == "object" else "state",
        namespace_path=npath,
        item=ProofItem(kind, item_id, state),
        item_path=item_path,
        **_base(snap, namespace),
    )


def prove_items(
    snap: SignedSnapshot,
    rows: state_map.RowSource,
    preimages: Preimages,
    wanted: Sequence[tuple[str, str, str]],
    vkeys: Sequence[str],
    *,
    memo: CheckMemo | None = None,
) -> list[tuple[ProofFile, Proven]]:
    """Return the proof of each ``(namespace, kind, id)`` of ``wanted`` at ``snap``'s root.

    As ``prove_item`` for each, but the namespace paths, then the item paths, are walked
    together (``state_map.prove_many``: one batched read per level of the map), and each file
    is checked as an auditor would check it with one ``CheckMemo``, so the signed snapshot
    (signature, entry, inclusion, root) is checked once and every file's map paths in full.

    Raises:
        IntegrityError: as ``prove_item``, for the first item that fails.
    """
    if len(snap.map_root) != HASH_SIZE:
        raise IntegrityError("the root's map root is not 32 bytes")
    memo = CheckMemo() if memo is None else memo
    nks = [state_map.namespace_key(ns) for ns, _, _ in wanted]
    npaths = state_map.prove_many(rows, [(snap.map_root, nk) for nk in nks])
    inside = [
        i for i, (nk, p) in enumerate(zip(nks, npaths, strict=True))
        if p.leaf is not None and p.leaf.key == nk
    ]  # fmt: skip
    walks = []
    for i in inside:
        leaf = npaths[i].leaf
        assert leaf is not None
        walks.append((leaf.value, map_tree.item_key(wanted[i][1], wanted[i][2])))
    item_paths: list[state_map.MapProof | None] = [None] * len(wanted)
    for i, p in zip(inside, state_map.prove_many(rows, walks), strict=True):
        item_paths[i] = p
    out = []
    for (ns, kind, item_id), npath, ipath in zip(wanted, npaths, item_paths, strict=True):
        proof = _item_file(snap, preimages, ns, kind, item_id, npath, ipath)
        out.append(_checked(proof, vkeys, memo))
    return out


def prove_items_of(
    snap: SignedSnapshot,
    nodes: state_map.NodeSource,
    preimages: Preimages,
    namespace: str,
    vkeys: Sequence[str],
) -> tuple[ProofFile, Proven]:
    """Return the range proof of ``namespace`` at ``snap``'s root: every item, nothing else.

    An empty namespace gets a proof that the map holds none of its items.

    Raises:
        IntegrityError: if a node or a preimage is missing or wrong, or the proof built
            does not verify with ``vkeys``.
    """
    ns = state_map.prove_namespace(nodes, snap.map_root, namespace)
    items = []
    for key, value in ns.items:
        named = preimages.item(key)
        if named is None or map_tree.item_key(*named) != key:
            raise IntegrityError(
                f"an item of namespace {namespace!r} (key {key.hex()}) is not known to the "
                "prover: its kind and id have no checked preimage"
            )
        items.append(ProofItem(named[0], named[1], _state_of(preimages, *named, value)))
    proof = ProofFile(
        kind="namespace",
        namespace_path=ns.path,
        items=tuple(items),
        **_base(snap, namespace),
    )
    return _checked(proof, vkeys)


# -- from a ledger ----------------------------------------------------------------------------


class RootProofSource:
    """Everything a proof at one stored v2 root is built from, each part read checked.

    Attributes:
        snap: the root's SNAPSHOT entry (read strictly), the head checkpoint, the proof.
        nodes: the stored map nodes (every read re-hashed).
        vkeys: the ledger's verifier keys, to check each proof before it is given.
        root_state: the root's own state (``live``, ``stale``, ``falsified``) as the
            derived record says; not part of any proof (a proof says what the root
            committed to, whatever was decided about the root later).

    What the map's hashes stand for (an item's namespace and state) is looked up by id
    first (``hints``: the derived rows of the item, by index), and each hint is only used
    when it hashes to what the committed map holds. Only when no hint does (an absent item,
    a namespace proof, edited rows) are the view's operations read, once (``scan``).
    """

    def __init__(
        self,
        snap: SignedSnapshot,
        nodes: StoredNodes,
        vkeys: Sequence[str],
        root_state: str = "live",
        *,
        scan: Callable[[], tuple[MapPreimages, dict[tuple[str, str], str]]],
        hints: Callable[[str, str], list[tuple[str, Any]]] | None = None,
    ) -> None:
        """Hold the parts; ``scan`` reads the view's operations, ``hints`` an item's rows."""
        self.snap = snap
        self.nodes = nodes
        self.vkeys = tuple(vkeys)
        self.root_state = root_state
        self._scan = scan
        self._hints = hints
        self._scanned: tuple[MapPreimages, dict[tuple[str, str], str]] | None = None
        self.scans = 0

    def scanned(self) -> tuple[MapPreimages, dict[tuple[str, str], str]]:
        """Return the preimages and namespaces of every item the view sets (read once)."""
        if self._scanned is None:
            self._scanned = self._scan()
            self.scans += 1
        return self._scanned

    def _from_hints(
        self, kind: str, item_id: str, namespace: str | None
    ) -> tuple[ProofFile, Proven] | None:
        """Return the proof of a present item from its indexed rows, or None if none holds."""
        if self._hints is None:
            return None
        by_ns: dict[str, MapPreimages] = {}
        for ns, state in self._hints(kind, item_id):
            if namespace is None or ns == namespace:
                by_ns.setdefault(ns, MapPreimages()).add(kind, item_id, state)
        for ns, pre in by_ns.items():
            try:
                (done,) = prove_items(self.snap, self.nodes, pre, [(ns, kind, item_id)], self.vkeys)
            except IntegrityError:
                continue  # a hint that is not what the map holds: the scan decides
            if done[1].present:
                return done
        return None

    def prove_item(
        self, kind: str, item_id: str, namespace: str | None = None
    ) -> tuple[ProofFile, Proven]:
        """Return the proof of one item; its namespace is the one the log gives it.

        Raises:
            NotFoundError: if the view never set the item and no ``namespace`` is given
                (an absence can only be proven in a namespace).
            IntegrityError: as ``prove_item``.
        """
        hinted = self._from_hints(kind, item_id, namespace)
        if hinted is not None:
            return hinted
        preimages, namespaces = self.scanned()
        ns = namespace if namespace is not None else namespaces.get((kind, item_id))
        if ns is None:
            raise NotFoundError(
                f"no operation up to root {self.snap.root.hex()} names {kind} {item_id!r}, so "
                "its namespace is unknown: give --namespace N to prove it in (or absent from) "
                "namespace N"
            )
        (done,) = prove_items(self.snap, self.nodes, preimages, [(ns, kind, item_id)], self.vkeys)
        return done

    def prove_namespace(self, namespace: str) -> tuple[ProofFile, Proven]:
        """Return the range proof of ``namespace`` (every item, or a proof that it has none).

        Raises:
            IntegrityError: as ``prove_items_of``.
        """
        preimages, _ = self.scanned()
        return prove_items_of(self.snap, self.nodes, preimages, namespace, self.vkeys)


def _item_hints(ledger: Ledger) -> Callable[[str, str], list[tuple[str, Any]]]:
    """Return the look-up of an item's candidate ``(namespace, state)`` in the derived rows.

    By index, never a scan: an object's rows (``mem_objects`` by ``id``: the namespace and
    each version's ``(branch, vfrom)``, one of which is its ``ASSERT``), an item state's rows
    (``fz_states`` by ``(kind, id)``, ``fz_items`` for its namespace). Derived rows are not
    trusted: a candidate only counts when it hashes to the leaf the committed map holds.
    """
    db = ledger.derived.db

    def rows(sql: str, args: tuple[str, ...]) -> list[Any]:
        try:
            return list(db.execute(sql, args).fetchall())
        except apsw.SQLError as e:  # a table not there yet: no hint, the scan decides
            if "no such table" in str(e):
                return []
            raise

    def hints(kind: str, item_id: str) -> list[tuple[str, Any]]:
        if kind == root_v2.OBJECT_KIND:
            found = rows(
                "SELECT namespace_id, branch, vfrom FROM mem_objects WHERE id = ?", (item_id,)
            )
            return [(ns, root_v2.object_state(b, seq)) for ns, b, seq in found]
        if not kind.startswith(root_v2.STATE_KIND_PREFIX):
            return []
        target = kind[len(root_v2.STATE_KIND_PREFIX) :]
        spaces = [
            ns for (ns,) in rows("SELECT namespace FROM fz_items WHERE kind = ? AND id = ?",
                                 (target, item_id))
        ]  # fmt: skip
        states = rows(
            "SELECT state, seq FROM fz_states WHERE kind = ? AND id = ?", (target, item_id)
        )
        return [(ns, root_v2.item_state(st, seq)) for ns in spaces for st, seq in states]

    return hints


def _view_ops(ledger: Ledger, branch: str, stop: int, depth: int = 0) -> Iterator[Entry]:
    """Yield the operations of ``branch``'s view before ``stop`` (its parent's up to the fork).

    Read from the stored rows without proofs, events skipped undecoded: what they give is
    only a hint of what the committed map's hashes stand for (an item key's kind and id, a
    value hash's state), and every hint is checked against the hash it is used for
    (``_state_of``, ``prove_items_of``) before it goes into a proof, which is then checked
    whole. A row edited or hidden makes the prover refuse, never prove something else.

    Raises:
        NotFoundError: if the chain of forks is broken.
        DecodeError: if a stored operation does not decode.
    """
    if depth > 64:
        raise NotFoundError(f"branch {branch!r} has a broken chain of forks")
    anchor = root_v2.fork_anchor_of(ledger, branch) if stop > 0 else None
    if anchor is not None:
        yield from _view_ops(ledger, anchor[0], anchor[1], depth + 1)
    if stop > 0:
        no = ledger.store.branch(branch).no
        for r in ledger.store.iter_entry_rows(no, 0, stop):
            if r.digest is None and r.erased_by is None:
                yield Entry.from_bytes(r.data)


def open_root(
    ledger: Ledger,
    root: bytes | str | None = None,
    branch: str = CANONICAL_BRANCH,
    *,
    at_snapshot: bool = False,
) -> RootProofSource:
    """Return what proofs at ``root`` (default: the newest root of ``branch``) are built from.

    With ``at_snapshot`` the proofs are against the SNAPSHOT's own kept checkpoint, not the
    head (``signed_snapshot``).

    The root record (a derived, untrusted row) only names the SNAPSHOT entry: the entry is
    read strictly and must record that root; the map nodes are re-hashed as they are read;
    the items' kinds, ids and states come from the view's operations up to the root's
    high-water, folded with the map's own leaf rule (``root_v2.leaf_changes``), and each is
    checked against the committed hash it stands for (``_view_ops``).

    Raises:
        NotFoundError: if there is no such root (or the branch has none).
        RefusedError: if the root is a v1 root or a cascade's re-snapshot (no SNAPSHOT of
            its own), which no proof file can prove.
        IntegrityError: if a strict read fails or the stored root disagrees with its entry.
    """
    from memroot.memory_root.roots import Roots

    roots = Roots(ledger)
    if root is None:
        record = roots.latest(branch)
        if record is None:
            raise NotFoundError(f"branch {branch!r} has no memory root yet (`memroot snapshot`)")
    else:
        record = roots.get(root)
    if record.replaces is not None:
        raise RefusedError(
            f"root {record.root.hex()} is a cascade's re-snapshot, recorded by a CASCADE entry "
            "and not by a SNAPSHOT of its own: prove the root it replaces, or a later one"
        )
    snap = signed_snapshot(ledger, record.seq, record.branch, at_snapshot=at_snapshot)
    if snap.root != bytes(record.root):
        raise IntegrityError(
            f"strict read refused: branch {record.branch} entry {record.seq}: step 9: memory "
            f"root {record.root.hex()} is not the one this entry records (derived state "
            "edited); run `memroot verify`, or `memroot rebuild` to re-derive it",
            branch=record.branch,
            seq=record.seq,
            step=9,
        )
    hw = snap.entry.body["payload"]["high_water"]["seq"]

    def scan() -> tuple[MapPreimages, dict[tuple[str, str], str]]:
        pre = MapPreimages()
        namespaces: dict[tuple[str, str], str] = {}
        for e in _view_ops(ledger, record.branch, hw + 1):
            for c in root_v2.leaf_changes(e):
                pre.add(c.kind, c.item_id, c.state)
                namespaces[(c.kind, c.item_id)] = c.namespace
        return pre, namespaces

    return RootProofSource(
        snap,
        root_v2.map_nodes(ledger),
        ledger.genesis_vkeys(),
        str(record.state),
        scan=scan,
        hints=_item_hints(ledger),
    )
