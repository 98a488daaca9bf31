"""Provenance-only visibility on conversation trees, checked against a brute-force reference."""

from __future__ import annotations

import random
from pathlib import Path

from memroot.ledger.entries import EventInput, new_uuid
from memroot.ledger.ledger import Ledger
from memroot.projections.anchors import (
    ConversationTree,
    ancestor_path,
    ancestor_path_in,
    filter_visible,
    visible,
)


def _random_tree(rng: random.Random, n: int) -> tuple[list[str], dict[str, str | None]]:
    """A random rooted forest: each node's parent is an earlier node (or none)."""
    ids = [f"e{i}" for i in range(n)]
    parents: dict[str, str | None] = {}
    for i, node in enumerate(ids):
        parents[node] = None if i == 0 or rng.random() < 0.03 else ids[rng.randrange(i)]
    return ids, parents


def _reference_ancestors(ids: list[str], parents: dict[str, str | None]) -> dict[str, set[str]]:
    """Ancestor-or-self sets computed top-down over children (no parent walking)."""
    children: dict[str | None, list[str]] = {}
    for node in ids:
        children.setdefault(parents[node], []).append(node)
    out: dict[str, set[str]] = {}
    stack = [(root, {root}) for root in children.get(None, [])]
    while stack:
        node, path = stack.pop()
        out[node] = path
        for child in children.get(node, []):
            stack.append((child, path | {child}))
    return out


def test_differential_against_brute_force_on_100k_decisions():
    """Random trees, shuffled arrival: every visibility decision equals the reference."""
    rng = random.Random(20261129)
    decisions = 0
    while decisions < 100_000:
        ids, parents = _random_tree(rng, rng.randrange(5, 80))
        full = _reference_ancestors(ids, parents)
        arrival = ids[:]
        rng.shuffle(arrival)
        arrived: dict[str, str | None] = {}
        objects = [rng.sample(ids, rng.randrange(1, 4)) for _ in range(30)]
        for step, node in enumerate(arrival, 1):
            arrived[node] = parents[node]
            if step % 10 and step != len(arrival):
                continue
            for anchor in rng.sample(list(arrived), min(8, len(arrived))):
                path = ancestor_path_in(arrived, anchor)
                for evidence in objects:
                    # Reference: e is an ancestor-or-self of the anchor in the full tree, and
                    # every link from the anchor up to e is known (each node below e arrived).
                    want = all(
                        e in full[anchor] and all(n in arrived for n in full[anchor] - full[e])
                        for e in evidence
                    )
                    assert visible(evidence, path) == want, (anchor, evidence)
                    decisions += 1
    assert decisions >= 100_000


def test_no_anchor_shows_nothing_and_switching_back_restores():
    """Without an anchor nothing is visible; moving the anchor back restores what it hid."""
    parents = {"root": None, "a": "root", "b": "root", "a2": "a"}
    fact_a = ["root", "a"]
    assert not visible(fact_a, None)
    assert visible(fact_a, ancestor_path_in(parents, "a2"))
    assert not visible(fact_a, ancestor_path_in(parents, "b"))
    assert visible(fact_a, ancestor_path_in(parents, "a"))
    assert not visible([], ancestor_path_in(parents, "a"))
    items = [("x", fact_a), ("y", ["root"]), ("z", ["b"])]
    assert [
        i for i, _ in filter_visible(items, lambda t: t[1], ancestor_path_in(parents, "b"))
    ] == ["y", "z"]


def test_stored_tree_matches_in_memory_walk(tmp_path: Path):
    """Events appended in a random parent-first order give the right path from the links."""
    path = tmp_path / "c.ledger"
    Ledger.init(path, hooks=[ConversationTree()]).close()
    rng = random.Random(7)
    ids, parents = _random_tree(rng, 60)
    uid = {n: new_uuid() for n in ids}
    # A parent must be in the ledger before an event names it (docs/FORMAT.md).
    order = sorted(ids, key=lambda n: (len(ancestor_path_in(parents, n)), rng.random()))
    with Ledger.open(path, hooks=[ConversationTree()]) as ledger:
        ledger.append_batch(
            EventInput(
                stream="chat",
                actor_id="u",
                actor_type="HUMAN_USER",
                role="USER",
                content=n,
                namespace_id="ns",
                id=uid[n],
                parent_event_id=uid[parents[n]] if parents[n] else None,
            )
            for n in order
        )
        db = ledger.store.db
        for anchor in ids:
            stored = ancestor_path(db, uid[anchor])
            expected = {uid[n] for n in ancestor_path_in(parents, anchor)}
            assert stored == expected
