"""The RFC 9162 Merkle tree of a branch: roots, proofs and their verification.

SPEC "Normative formats" 4. The tree is exactly RFC 9162 section 2.1 (leaf and node hashes
live in ``memroot.ledger.hashing``); this module is the arithmetic over it and holds no state but
the
``CompactRange`` a writer keeps.

Storage model. The store serves the hash of every *complete* (perfect) subtree: node
``(level, index)`` covers leaves ``[index * 2**level, (index + 1) * 2**level)`` and exists only
once all of them do; level 0 is the leaf hash (SQLite keeps the levels >= 2 as rows and folds
level 1 from its two leaves: ``store.NODE_MIN_LEVEL``, FORMAT.md 4). Any subtree of the
RFC's recursion that is not complete (on the right edge of the tree) is folded here from the
complete nodes that cover it.
Every root or proof first collects the O(log n) node ids it needs, reads them with ONE call
of a ``NodeReader`` (one SQL query), then assembles: never a rescan.

Errors. A request for a proof that cannot exist (``index >= size``, ``size1 > size2``,
``size1 == 0``) and any negative size or index raise ``ValueError``: programming mistakes, as
the ledger layer turns user requests into its own errors before calling here. Anything a
verifier is handed that does not verify raises ``ProofError``, including an index or sizes
that no proof can serve (they come from untrusted proofs and checkpoints); a root mismatch
carries the expected and computed roots in hex in ``expected``/``actual``. A hash that is not
32 bytes is never accepted, wherever it appears.

With the native core (``memroot.ledger._backend``) the folds (roots, the compact range, proof
verification) run in Rust; the Python code here is the reference, and it raises every error:
where the native core refuses, the reference runs and says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias

from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.errors import DecodeError, ProofError
from memroot.ledger.hashing import EMPTY_ROOT, HASH_SIZE, TreeRoot, node_hash

__all__ = [
    "LEAF_LEVEL",
    "CompactRange",
    "NewNode",
    "NodeId",
    "NodeReader",
    "consistency_proof",
    "inclusion_proof",
    "perfect_subtrees",
    "root_from_inclusion_proof",
    "root_from_subtrees",
    "tree_root",
    "verify_consistency",
    "verify_inclusion",
]

NodeId: TypeAlias = tuple[int, int]
"""``(level, index)`` of a complete subtree: leaves ``[index << level, (index + 1) << level)``."""
NodeReader: TypeAlias = Callable[[Sequence[NodeId]], list[bytes]]
"""Return the stored hashes of the given complete nodes, in the order asked (one batch read)."""
NewNode: TypeAlias = tuple[int, int, bytes]
"""``(level, index, hash)`` of an interior node that an append completed."""

LEAF_LEVEL = 0  # level of the leaf hashes themselves; they are the store's level-0 nodes


# -- tree shape ---------------------------------------------------------------------------------


def _subtrees_from(start: int, count: int) -> list[NodeId]:
    """Return the complete subtrees covering ``[start, start + count)``, largest first.

    ``start`` must be a multiple of a power of two above ``count`` (true of every range the
    algorithms below ask for), so the sizes are exactly the binary digits of ``count``.
    """
    out: list[NodeId] = []
    while count:
        level = count.bit_length() - 1
        out.append((level, start >> level))
        start += 1 << level
        count ^= 1 << level
    return out


def perfect_subtrees(size: int) -> list[NodeId]:
    """Return the left-to-right decomposition of a tree of ``size`` leaves into complete subtrees.

    Their sizes are the binary digits of ``size``, largest first; these are the subtrees an
    RFC 9162 section 2.1.1 ``MTH`` of ``size`` leaves is folded from (the tree's right edge).

    Raises:
        ValueError: if ``size`` is negative.

    """
    if size < 0:
        raise ValueError(f"a tree size cannot be negative, got {size}")
    return _subtrees_from(0, size)


def root_from_subtrees(hashes: Sequence[bytes]) -> bytes:
    """Return the RFC 9162 section 2.1.1 ``MTH`` from the hashes of ``perfect_subtrees(size)``.

    The fold runs right to left (``h = node_hash(h_i, h)``): in the RFC's recursion the split
    point ``k`` is the largest power of two below ``n``, so the largest subtree is the left
    child of the root and the rest of the tree its right child. No hashes: the empty root.
    """
    if not hashes:
        return EMPTY_ROOT
    if _N is not None:
        try:
            return _N.root_from_subtrees(list(hashes))
        except _N.Reject:
            pass  # a hash that is not 32 bytes: the reference folds it as it is
    h = hashes[-1]
    for left in reversed(hashes[:-1]):
        h = node_hash(left, h)
    return h


def _read(read: NodeReader, ids: Sequence[NodeId]) -> list[bytes]:
    """Read ``ids`` with one reader call and check the answer's shape.

    Raises:
        ValueError: if the reader returns a different number of hashes (a reader bug).
        DecodeError: if a stored hash is not 32 bytes (a damaged store).

    """
    if not ids:
        return []
    hashes = read(ids)
    if len(hashes) != len(ids):
        raise ValueError(f"node reader returned {len(hashes)} hashes for {len(ids)} ids")
    for h in hashes:
        if len(h) != HASH_SIZE:
            raise DecodeError(
                f"stored tree node {ids[hashes.index(h)]} is {len(h)} bytes, not {HASH_SIZE}",
                expected=str(HASH_SIZE),
                actual=str(len(h)),
            )
    return hashes


def tree_root(size: int, read: NodeReader) -> TreeRoot:
    """Return the RFC 9162 section 2.1.1 root of the first ``size`` leaves (one batch read).

    Raises:
        ValueError: if ``size`` is negative.
        DecodeError: if a stored node is not 32 bytes.

    """
    return TreeRoot(root_from_subtrees(_read(read, perfect_subtrees(size))))


# -- proof generation ---------------------------------------------------------------------------


def _path_plan(
    level: int, index: int, size: int
) -> tuple[list[NodeId], list[NodeId], list[NodeId]]:
    """Plan the audit path of the complete node ``(level, index)`` in a tree of ``size`` leaves.

    RFC 9162 section 2.1.3.1 ``PATH`` walks down from the root; read bottom-up it is:

    1. the siblings of the node's ancestors up to the *fork*, the highest ancestor that is
       still a complete subtree (where the paths to the node and to leaf ``size`` part). All
       of them lie inside the fork, so all are complete;
    2. the hash of ``[end, size)`` right of the fork, if that range is not empty: the only
       incomplete subtree on the path, folded from the complete subtrees that cover it;
    3. the complete subtrees of ``[0, begin)`` left of the fork, lowest first: the left
       siblings of the fork's ancestors on the tree's right edge.

    Returns the ids of parts 1, 3 and 2, in that order.
    """
    inner = (index ^ (size >> level)).bit_length() - 1
    siblings = [(level + i, (index >> i) ^ 1) for i in range(inner)]
    fork_level = level + inner
    begin = (index >> inner) << fork_level
    end = begin + (1 << fork_level)
    left = _subtrees_from(0, begin)
    left.reverse()
    return siblings, left, _subtrees_from(end, size - end)


def _read_path(
    read: NodeReader, level: int, index: int, size: int, seed: list[NodeId]
) -> list[bytes]:
    """Return the hashes of ``seed`` then the audit path of ``(level, index)`` (one read)."""
    siblings, left, right = _path_plan(level, index, size)
    hashes = _read(read, seed + siblings + left + right)
    split = len(seed) + len(siblings)
    stop = split + len(left)
    proof = hashes[:split]
    if right:
        proof.append(root_from_subtrees(hashes[stop:]))
    proof += hashes[split:stop]
    return proof


def inclusion_proof(index: int, size: int, read: NodeReader) -> list[bytes]:
    """Return the RFC 9162 section 2.1.3.1 inclusion proof (audit path) of leaf ``index``.

    The hashes are ordered bottom-up, as ``PATH(index, D[size])`` lists them. O(log size)
    nodes, read with one reader call.

    Raises:
        ValueError: unless ``0 <= index < size``.
        DecodeError: if a stored node is not 32 bytes.

    """
    if not 0 <= index < size:
        raise ValueError(f"no leaf {index} in a tree of size {size}")
    return _read_path(read, LEAF_LEVEL, index, size, [])


def consistency_proof(size1: int, size2: int, read: NodeReader) -> list[bytes]:
    """Return the RFC 9162 section 2.1.4.1 consistency proof ``PROOF(size1, D[size2])``.

    It is the inclusion path, in the tree of ``size2``, of the last complete subtree of the
    tree of ``size1``, preceded by that subtree's hash unless it is the whole first tree (when
    ``size1`` is a power of two the verifier already has it: it is the first root). Equal
    sizes give the empty proof. O(log size2) nodes, read with one reader call.

    Raises:
        ValueError: unless ``0 < size1 <= size2``; the RFC defines no proof from the empty
            tree (it would prove nothing, and ``verify_consistency`` refuses it).
        DecodeError: if a stored node is not 32 bytes.

    """
    if not 0 < size1 <= size2:
        raise ValueError(f"no consistency proof from size {size1} to size {size2}")
    if size1 == size2:
        return []
    level = (size1 & -size1).bit_length() - 1
    index = (size1 - 1) >> level
    seed = [] if index == 0 else [(level, index)]
    return _read_path(read, level, index, size2, seed)


# -- proof verification -------------------------------------------------------------------------


def _check_hash(what: str, h: bytes) -> None:
    """Raise ``ProofError`` unless ``h`` is a 32-byte SHA-256 hash."""
    if len(h) != HASH_SIZE:
        raise ProofError(
            f"{what} is {len(h)} bytes, a SHA-256 hash is {HASH_SIZE}",
            expected=str(HASH_SIZE),
            actual=str(len(h)),
        )


def _check_proof_hashes(proof: Sequence[bytes]) -> None:
    """Raise ``ProofError`` unless every proof element is a 32-byte hash."""
    for h in proof:
        if len(h) != HASH_SIZE:
            _check_hash(f"proof[{proof.index(h)}]", h)


def _wrong_length(kind: str, got: int, want: int) -> ProofError:
    """Return the error for a proof of the wrong length."""
    return ProofError(
        f"{kind} proof has {got} hashes, {want} expected",
        expected=str(want),
        actual=str(got),
    )


def _mismatch(what: str, expected: bytes, actual: bytes) -> ProofError:
    """Return the error for a root that the proof does not reproduce, both in hex."""
    return ProofError(
        f"{what} is {actual.hex()}, expected {expected.hex()}",
        expected=expected.hex(),
        actual=actual.hex(),
    )


def _path_length(level: int, index: int, size: int) -> int:
    """Return the number of hashes in the audit path of ``(level, index)`` in ``size`` leaves."""
    siblings, left, right = _path_plan(level, index, size)
    return len(siblings) + len(left) + (1 if right else 0)


def root_from_inclusion_proof(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes]
) -> bytes:
    """Return the root that ``proof`` gives leaf ``index`` in a tree of ``size`` leaves.

    Steps 1-4 of RFC 9162 section 2.1.3.2, plus the ``sn == 0`` check of step 5; the caller
    compares the result with the root it trusts (``verify_inclusion`` does).

    Raises:
        ValueError: if ``index`` or ``size`` is negative (no format can carry that).
        ProofError: if ``index >= size``, a hash is not 32 bytes, or the proof's length is
            wrong for ``(index, size)``.

    """
    if index < 0 or size < 0:
        raise ValueError(f"negative leaf index {index} or tree size {size}")
    if _N is not None and type(leaf_hash) is bytes and size < 1 << 64:
        try:
            return _N.root_from_inclusion_proof(leaf_hash, index, size, list(proof))
        except _N.Reject:
            pass  # the reference below raises the ProofError and its message
    _check_hash("leaf hash", leaf_hash)
    _check_proof_hashes(proof)
    # (1) leaf_index >= tree_size fails.
    if index >= size:
        raise ProofError(
            f"leaf index {index} is not in a tree of size {size}",
            expected=f"< {size}",
            actual=str(index),
        )
    # (2) fn = leaf_index, sn = tree_size - 1; (3) r = hash.
    fn, sn = index, size - 1
    r = leaf_hash
    # (4) chain every p of the path.
    for p in proof:
        # (4a) the path is longer than the tree is high.
        if sn == 0:
            raise _wrong_length("inclusion", len(proof), _path_length(0, index, size))
        # (4b) p is a left sibling (or the right edge skips a level), else a right sibling.
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        # (4c)
        fn >>= 1
        sn >>= 1
    # (5, first half) the path must reach the root.
    if sn != 0:
        raise _wrong_length("inclusion", len(proof), _path_length(0, index, size))
    return r


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Verify that leaf ``index`` of the tree of ``size`` leaves with ``root`` is ``leaf_hash``.

    RFC 9162 section 2.1.3.2, every step.

    Raises:
        ValueError: if ``index`` or ``size`` is negative.
        ProofError: if the proof does not verify: ``index >= size``, any hash not 32 bytes, a
            proof of the wrong length, or a computed root that is not ``root`` (both in hex in
            ``expected``/``actual``).

    """
    _check_hash("root", root)
    computed = root_from_inclusion_proof(leaf_hash, index, size, proof)
    # (5, second half) r must equal the root hash.
    if computed != root:
        raise _mismatch(
            f"root from the inclusion proof of leaf {index} in a tree of size {size}",
            root,
            computed,
        )


def verify_consistency(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes
) -> None:
    """Verify that the tree of ``size2`` leaves with ``root2`` extends the one with ``root1``.

    RFC 9162 section 2.1.4.2, every step, after the cases the RFC leaves to the caller:
    ``size1 > size2`` fails (a rollback); ``size1 == 0`` fails (the RFC defines proofs only for
    ``0 < size1``: a "consistent with the empty tree" answer would have checked nothing);
    ``size1 == size2`` needs an empty proof and ``root1 == root2``.

    Raises:
        ValueError: if a size is negative (no format can carry that).
        ProofError: if the proof does not verify, any hash is not 32 bytes, or the proof has
            the wrong length; a root mismatch has both roots in hex in ``expected``/``actual``.

    """
    if size1 < 0 or size2 < 0:
        raise ValueError(f"negative tree size {size1} or {size2}")
    _check_hash("first root", root1)
    _check_hash("second root", root2)
    _check_proof_hashes(proof)
    if size1 > size2:
        raise ProofError(
            f"tree size went down from {size1} to {size2}",
            expected=f">= {size1}",
            actual=str(size2),
        )
    if size1 == 0:
        raise ProofError("a consistency proof from the empty tree proves nothing")
    if size1 == size2:
        if proof:
            raise _wrong_length("consistency", len(proof), 0)
        if root1 != root2:
            raise _mismatch(f"second root of a tree of the same size {size1}", root1, root2)
        return
    if _N is not None and type(root1) is bytes and size2 < 1 << 64:
        try:
            fr, sr = _N.roots_from_consistency_proof(size1, size2, list(proof), root1)
        except _N.Reject:
            pass  # the reference below raises the ProofError and its message
        else:
            if fr != root1:
                raise _mismatch(f"first root (size {size1}) from the consistency proof", root1, fr)
            if sr != root2:
                raise _mismatch(f"second root (size {size2}) from the consistency proof", root2, sr)
            return
    # (1) an empty path fails.
    if not proof:
        raise _wrong_length("consistency", 0, _consistency_length(size1, size2))
    # (2) first is a power of two: prepend first_hash.
    path = [root1, *proof] if size1 & (size1 - 1) == 0 else list(proof)
    # (3)
    fn, sn = size1 - 1, size2 - 1
    # (4) skip the levels where the first tree's last subtree is complete.
    while fn & 1:
        fn >>= 1
        sn >>= 1
    # (5)
    fr = sr = path[0]
    # (6)
    for c in path[1:]:
        # (6a)
        if sn == 0:
            raise _wrong_length("consistency", len(proof), _consistency_length(size1, size2))
        # (6b) c is left of both paths (or the right edge skips a level), else right of the
        # second tree's path only.
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        # (6c)
        fn >>= 1
        sn >>= 1
    # (7) sn == 0, fr == first_hash, sr == second_hash.
    if sn != 0:
        raise _wrong_length("consistency", len(proof), _consistency_length(size1, size2))
    if fr != root1:
        raise _mismatch(f"first root (size {size1}) from the consistency proof", root1, fr)
    if sr != root2:
        raise _mismatch(f"second root (size {size2}) from the consistency proof", root2, sr)


def _consistency_length(size1: int, size2: int) -> int:
    """Return the number of hashes in ``PROOF(size1, D[size2])`` for ``0 < size1 < size2``."""
    level = (size1 & -size1).bit_length() - 1
    index = (size1 - 1) >> level
    return (0 if index == 0 else 1) + _path_length(level, index, size2)


# -- the writer's right edge --------------------------------------------------------------------


class CompactRange:
    """The right edge of a growing tree: the hashes of its ``perfect_subtrees(size)``.

    A writer keeps one per branch; ``append`` folds a new leaf in and returns the interior
    nodes it completed (level >= 1), which are exactly the nodes the store must persist.
    Appending is O(1) amortized: one node hash per leaf on average.
    """

    __slots__ = ("_hashes", "_size")

    def __init__(self) -> None:
        self._size = 0
        self._hashes: list[bytes] = []

    @classmethod
    def from_hashes(cls, size: int, hashes: Sequence[bytes]) -> CompactRange:
        """Return the range of a tree of ``size`` leaves from its perfect-subtree hashes.

        ``hashes`` are those of ``perfect_subtrees(size)``, left to right (largest first).

        Raises:
            ValueError: if ``size`` is negative, the count is not the number of one bits of
                ``size``, or a hash is not 32 bytes.

        """
        if size < 0:
            raise ValueError(f"a tree size cannot be negative, got {size}")
        want = size.bit_count()
        if len(hashes) != want:
            raise ValueError(
                f"a tree of size {size} has {want} perfect subtrees, not {len(hashes)}"
            )
        for i, h in enumerate(hashes):
            if len(h) != HASH_SIZE:
                raise ValueError(f"subtree hash {i} is {len(h)} bytes, not {HASH_SIZE}")
        cr = cls()
        cr._size = size
        cr._hashes = [bytes(h) for h in hashes]
        return cr

    @property
    def size(self) -> int:
        """The number of leaves appended so far."""
        return self._size

    @property
    def hashes(self) -> tuple[bytes, ...]:
        """The hashes of ``perfect_subtrees(self.size)``, left to right."""
        return tuple(self._hashes)

    def root(self) -> TreeRoot:
        """Return the RFC 9162 section 2.1.1 root of the leaves appended so far."""
        return TreeRoot(root_from_subtrees(self._hashes))

    def append(self, leaf: bytes) -> list[NewNode]:
        """Append one leaf hash; return the nodes it completed, lowest first.

        The new leaf is leaf number ``size``; each trailing one bit of ``size`` is a complete
        subtree on the left that now merges with the new one into a node one level up.

        Raises:
            ValueError: if ``leaf`` is not 32 bytes.

        """
        if len(leaf) != HASH_SIZE:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, got {len(leaf)}")
        n = self._size
        if not n & 1:  # half of all appends complete no node
            self._hashes.append(leaf)
            self._size = n + 1
            return []
        hashes = self._hashes
        completed: list[NewNode] = []
        h = leaf
        level = 0
        m = n
        while m & 1:
            h = node_hash(hashes.pop(), h)
            level += 1
            m >>= 1
            completed.append((level, m, h))
        hashes.append(h)
        self._size = n + 1
        return completed

    def append_many(self, leaves: Iterable[bytes]) -> list[NewNode]:
        """Append leaf hashes in order; return every node they completed, in that order.

        The same fold as ``append``, inlined: a batch import runs it once per entry.

        Raises:
            ValueError: if a leaf is not 32 bytes (the leaves before it stay appended).

        """
        if _N is not None:
            leaves = list(leaves)
            try:
                new, completed = _N.compact_append(self._size, self._hashes, leaves)
            except _N.Reject:
                pass  # a leaf that is not 32 bytes: the reference appends up to it and raises
            else:
                self._hashes = new
                self._size += len(leaves)
                return completed
        hashes = self._hashes
        pop = hashes.pop
        push = hashes.append
        completed = []
        add = completed.append
        n = self._size
        try:
            for leaf in leaves:
                if len(leaf) != HASH_SIZE:
                    raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, got {len(leaf)}")
                h = leaf
                level = 0
                m = n
                while m & 1:
                    h = node_hash(pop(), h)
                    level += 1
                    m >>= 1
                    add((level, m, h))
                push(h)
                n += 1
        finally:
            self._size = n
        return completed

    def __repr__(self) -> str:
        return f"CompactRange(size={self._size}, root={self.root().hex()})"
