"""Inclusion proofs assembled natively from one query against the reference (issue 12).

``Ledger.inclusion_proof`` reads an audit path's leaves and the nodes its cache lacks with
one query and folds them natively (``native.inclusion_keys``/``inclusion_from_rows``); the
reference is ``merkle.inclusion_proof`` over ``Store.read_nodes``. Both must give the same
hashes for every leaf and tree size, keep the same node cache, and a damaged node store
must get the reference's error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memroot.ledger import _backend, merkle
from memroot.ledger import _reading as reading_module
from memroot.ledger.backends import store as store_module
from memroot.ledger.errors import StorageError
from memroot.ledger.ledger import Ledger

native = pytest.importorskip("memroot._native", reason="the native core is not built")
if _backend.NATIVE is None:
    pytestmark = pytest.mark.skip(reason="MEMROOT_BACKEND=python: nothing native to compare")


@pytest.fixture(scope="module")
def ledger_path(tmp_path_factory: pytest.TempPathFactory, inputs: Any) -> Path:
    path = tmp_path_factory.mktemp("proofs") / "l.ledger"
    with Ledger.init(path, hooks=()) as ledger:
        for i in range(7):
            ledger.append_batch(inputs.mixed(37 + 11 * i, seed=i))
    return path


def test_every_leaf_at_every_size_matches_the_reference(ledger_path: Path) -> None:
    with Ledger.open(ledger_path, hooks=(), readonly=True) as mine:
        n = mine.size()
        root_checks = 0
        for size in [*range(1, 40), 64, 65, 127, 128, 129, n - 1, n]:
            for index in range(0, size, max(1, size // 23)):
                got = mine.inclusion_proof(index, size)
                with _backend.reference():
                    want = mine.inclusion_proof(index, size)
                assert got == want, (index, size)
                leaf = bytes(mine.store.entry_row(mine.branch_row().no, index).hash)
                merkle.verify_inclusion(leaf, index, size, got, mine.root(size))
                root_checks += 1
        assert root_checks > 300


@pytest.mark.parametrize("cache_max", [5, store_module.NODE_CACHE_MAX])
def test_the_node_cache_is_filled_and_cleared_alike(
    ledger_path: Path, monkeypatch: pytest.MonkeyPatch, cache_max: int
) -> None:
    monkeypatch.setattr(store_module, "_CACHE_MAX", cache_max)  # read_nodes (the reference)
    monkeypatch.setattr(reading_module, "NODE_CACHE_MAX", cache_max)  # the native path
    with (
        Ledger.open(ledger_path, hooks=(), readonly=True) as mine,
        Ledger.open(ledger_path, hooks=(), readonly=True) as ref,
    ):
        n = mine.size()
        for index in [*range(0, n, 7), *range(n - 1, 0, -13)]:
            p1 = mine.inclusion_proof(index, n)
            with _backend.reference():
                p2 = ref.inclusion_proof(index, n)
            assert p1 == p2
            assert mine.store.node_cache == ref.store.node_cache
        assert mine.store.node_cache
        assert len(mine.store.node_cache) <= cache_max


def test_a_missing_node_gets_the_reference_error(tmp_path: Path, inputs: Any) -> None:
    path = tmp_path / "l.ledger"
    with Ledger.init(path, hooks=()) as ledger:
        ledger.append_batch(inputs.mixed(40, seed=3))
        ledger.store.db.execute("DELETE FROM nodes")  # damage: the node cache is gone
    with Ledger.open(path, hooks=(), readonly=True, strict=False) as damaged:
        with pytest.raises(StorageError, match=r"tree node \(2, \d+\) is missing") as mine:
            damaged.inclusion_proof(0, 40)
        with _backend.reference(), pytest.raises(StorageError) as ref:
            damaged.inclusion_proof(0, 40)
        assert str(mine.value) == str(ref.value)


def test_the_one_statement_path_refuses_what_the_reference_refuses(ledger_path: Path) -> None:
    """Once the branch's number is known a proof is one statement; the refusals stay."""
    from memroot.ledger.errors import NotFoundError, RefusedError

    with Ledger.open(ledger_path, hooks=(), readonly=True) as mine:
        n = mine.size()
        mine.inclusion_proof(0, n)  # learns the branch's number
        assert mine._branch_nos == {"main": mine.branch_row().no}
        for index, size in ((0, n + 1), (n, n), (-1, n), (5, 0)):
            with pytest.raises(RefusedError) as got:
                mine.inclusion_proof(index, size)
            with _backend.reference(), pytest.raises(RefusedError) as want:
                mine.inclusion_proof(index, size)
            assert str(got.value) == str(want.value)
        with pytest.raises(NotFoundError, match="no branch named 'nope'"):
            mine.inclusion_proof(0, 1, branch="nope")
        mine._branch_nos["nope"] = 1  # a stale number: the branch row read with it disagrees
        with pytest.raises(NotFoundError, match="no branch named 'nope'"):
            mine.inclusion_proof(0, 1, branch="nope")


def test_a_grown_tree_is_proved_at_its_new_size(tmp_path: Path, inputs: Any) -> None:
    """The size is checked against the branch row read with the path, not a remembered one."""
    from memroot.ledger.errors import RefusedError

    path = tmp_path / "l.ledger"
    with Ledger.init(path, hooks=()) as writer:
        writer.append_batch(inputs.mixed(10, seed=1))
        with Ledger.open(path, hooks=(), readonly=True) as reader:
            n = reader.size()
            reader.inclusion_proof(3, n)
            with pytest.raises(RefusedError):
                reader.inclusion_proof(3, n + 5)
            writer.append_batch(inputs.mixed(5, seed=2))
            got = reader.inclusion_proof(3, n + 5)
            assert got == writer.inclusion_proof(3, n + 5)
            merkle.verify_inclusion(
                bytes(writer.store.entry_row(writer.branch_row().no, 3).hash),
                3,
                n + 5,
                got,
                writer.root(n + 5),
            )
