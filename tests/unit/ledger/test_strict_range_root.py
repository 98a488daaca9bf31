"""``strict.range_root`` / ``leaves_root``: the signed root from some leaves and stored nodes.

Contiguous runs (a strict read of consecutive entries) recompute whole subtrees in one call;
scattered leaves take the node-by-node path. Both must give the tree's root exactly when
every given leaf is the one at its position.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from memroot.ledger import merkle
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.strict import leaves_root, range_root


def _root(leaves: list[bytes]) -> bytes:
    c = merkle.CompactRange()
    c.append_many(leaves)
    return bytes(c.root())


@pytest.mark.parametrize("seed", range(6))
def test_roots_from_runs_and_scattered_leaves(seed: int) -> None:
    """The root of the whole tree, and a different one when any given leaf is wrong."""
    rng = random.Random(seed)
    reads: list[int] = []
    for _ in range(25):
        size = rng.randint(1, 2500)
        leaves = [leaf_hash(f"{seed} {i}".encode()) for i in range(size)]
        want = _root(leaves)

        def read(
            ids: Sequence[tuple[int, int]], leaves: list[bytes] = leaves, reads: list[int] = reads
        ) -> list[bytes]:
            out = [_root(leaves[i << lv : (i + 1) << lv]) for lv, i in ids]
            reads.append(len(out))
            return out

        start = rng.randrange(size)
        n = rng.randint(1, size - start)
        assert range_root(size, start, leaves[start : start + n], read) == want
        wrong = leaves[start : start + n]
        wrong[rng.randrange(n)] = leaf_hash(b"tampered")
        assert range_root(size, start, wrong, read) != want
        known = {i: leaves[i] for i in rng.sample(range(size), min(size, rng.randint(1, 20)))}
        assert leaves_root(size, known, read) == want
        known[next(iter(known))] = leaf_hash(b"tampered")
        assert leaves_root(size, known, read) != want
    assert reads  # stored nodes were used for the subtrees outside the leaves


@pytest.mark.parametrize("seed", range(4))
def test_runs_that_end_the_tree(seed: int) -> None:
    """A run that ends the tree (the entries appended since an earlier head) is folded onto
    the stored perfect subtrees left of it: the tree's root, the same as the general walk's,
    and a different one when any given leaf, or a stored node it reads, is wrong."""
    rng = random.Random(1000 + seed)
    for _ in range(40):
        size = rng.randint(2, 3000)
        leaves = [leaf_hash(f"{seed} {i}".encode()) for i in range(size)]
        want = _root(leaves)
        start = rng.randrange(1, size)
        asked: list[list[tuple[int, int]]] = []

        def read(
            ids: Sequence[tuple[int, int]],
            leaves: list[bytes] = leaves,
            asked: list[list[tuple[int, int]]] = asked,
        ) -> list[bytes]:
            asked.append(list(ids))
            return [_root(leaves[i << lv : (i + 1) << lv]) for lv, i in ids]

        run = leaves[start:]
        assert range_root(size, start, run, read) == want
        assert asked[-1] == merkle.perfect_subtrees(start)  # the subtrees left of the run
        known = dict(enumerate(run, start))
        assert leaves_root(size, known, read) == want
        wrong = list(run)
        wrong[rng.randrange(len(wrong))] = leaf_hash(b"tampered")
        assert range_root(size, start, wrong, read) != want

        def forged(ids: Sequence[tuple[int, int]]) -> list[bytes]:
            out = read(ids)
            out[rng.randrange(len(out))] = leaf_hash(b"forged node")
            return out

        assert range_root(size, start, run, forged) != want
