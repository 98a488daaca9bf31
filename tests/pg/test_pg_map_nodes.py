"""Memory-map nodes on a PostgreSQL ledger: kept in the host's derived cache, like every
derived table, through ``Ledger.write``; the same map roots as in a ledger file."""

from __future__ import annotations

from pathlib import Path

import pytest

from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from memroot.memory_root import RootsHook
from memroot.memory_root import state_map as mm
from memroot.memory_root.map_nodes import StoredNodes

ORIGIN = "example.org/pg-map"


def _changes(n: int, tag: str) -> dict[str, dict[bytes, bytes | None]]:
    return {"team": {mm.item_key("object", f"o{i}"): mm.value_hash({tag: i}) for i in range(n)}}


@pytest.mark.parametrize("where", ["pg", "file"])
def test_map_nodes_stored_in_the_ledgers_derived_state(where, pg_url, pg_key, tmp_path: Path):
    """Nodes written in a ledger's write transaction read back and prove the same root."""
    # The layers above the ledger keep their tables in ``ledger.derived`` (on PostgreSQL the
    # host's SQLite cache), which a ledger opened with their hooks has.
    target = pg_url if where == "pg" else str(tmp_path / "m.ledger")
    with Ledger.init(target, origin=ORIGIN, key_path=pg_key, hooks=[RootsHook()]) as ledger:
        with ledger.write() as db:
            nodes = StoredNodes(db)
            u = mm.update_map(nodes, mm.EMPTY, _changes(300, "a"))
            nodes.put(u.nodes)
        with ledger.write() as db:
            nodes = StoredNodes(db)
            u2 = mm.update_map(nodes, u.root, _changes(3, "b"))
            nodes.put(u2.nodes)
    with Ledger.open(target, key_path=pg_key, hooks=[RootsHook()]) as again:
        nodes = StoredNodes(again.derived.db)
        want = {**_changes(300, "a")["team"], **_changes(3, "b")["team"]}
        proof = mm.prove_namespace(nodes, u2.root, "team")
        assert mm.verify_namespace(u2.root, proof) == want
        assert u2.root == mm.map_root({"team": want})
        with pytest.raises(IntegrityError):
            mm.verify_namespace(u.root, proof)
