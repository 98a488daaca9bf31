"""``strict.range_root`` / ``leaves_root``: the signed root from some leaves and stored nodes.

Contiguous runs (a strict read of consecutive entries) recompute whole subtrees in one call;
scattered leaves take the node-by-node path. Both must give the tree's root exactly when
every given leaf is the one at its position.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memroot.ledger import merkle, strict
from memroot.ledger._backend import NATIVE
from memroot.ledger.errors import DecodeError
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


def _reference(
    size: int, known: dict[int, bytes], read: Callable[[Sequence[tuple[int, int]]], list[bytes]]
) -> bytes:
    with mock.patch.object(strict, "_N", None):
        return leaves_root(size, known, read)


@pytest.mark.skipif(NATIVE is None, reason="the native core is not built")
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 700), st.data())
def test_native_leaves_root_reads_and_gives_the_references(size: int, data: st.DataObject) -> None:
    """The native plan asks the reference's subtrees in its order, and the walk gives its root,
    for runs, scattered leaves and a tampered leaf or stored node alike."""
    leaves: list[bytes] = [leaf_hash(b"%d" % i) for i in range(size)]
    pick = data.draw(
        st.sets(st.integers(0, max(0, size - 1)), max_size=40) if size else st.just(set())
    )
    if size and data.draw(st.booleans()):
        lo = data.draw(st.integers(0, size - 1))
        pick = set(range(lo, data.draw(st.integers(lo + 1, size))))
    known: dict[int, bytes] = {i: leaves[i] for i in pick}
    tamper = data.draw(st.booleans())
    if known and tamper:
        known[data.draw(st.sampled_from(sorted(known)))] = leaf_hash(b"tampered")
    forge = data.draw(st.booleans())
    asked: dict[bool, list[list[tuple[int, int]]]] = {True: [], False: []}

    def reader(native: bool) -> Callable[[Sequence[tuple[int, int]]], list[bytes]]:
        def read(ids: Sequence[tuple[int, int]]) -> list[bytes]:
            asked[native].append(list(ids))
            out = [_root(leaves[i << lv : (i + 1) << lv]) for lv, i in ids]
            if forge and out:
                out[0] = leaf_hash(b"forged node")
            return out

        return read

    got = leaves_root(size, known, reader(True))
    assert got == _reference(size, known, reader(False))
    assert asked[True] == asked[False]


@pytest.mark.skipif(NATIVE is None, reason="the native core is not built")
def test_a_stored_node_not_32_bytes_is_refused_natively_too() -> None:
    """A stored subtree hash of another length is the reference's ``DecodeError`` (step 5)."""
    leaves = [leaf_hash(b"%d" % i) for i in range(10)]
    with pytest.raises(DecodeError, match="not 32 bytes"):
        leaves_root(10, {3: leaves[3]}, lambda ids: [b"short" for _ in ids])
