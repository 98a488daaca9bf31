"""``gated_digest`` streams its rows: the same digest as the one-list definition, flat memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from memroot.ledger import encoding
from memroot.ledger.entries import EventInput
from memroot.ledger.hashing import domain_hash
from memroot.ledger.ledger import Ledger
from memroot.projections import requests as rq
from memroot.projections.anchors import ConversationTree
from memroot.projections.digest import array_head as _array_head
from memroot.projections.gated import DIGEST_TAG, gated_digest, gated_rows
from memroot.projections.hook import MemoryHook

AGENT = rq.Actor("agent", "AI_AGENT", "ns")


@pytest.mark.parametrize("n", [0, 1, 23, 24, 255, 256, 65535, 65536])
def test_array_head_is_the_canonical_cbor_head(n: int) -> None:
    """The head of an n-item array, as the encoder writes it (every length class)."""
    assert encoding.encode([0] * n) == _array_head(n) + b"\x00" * n


def _reference(ledger: Ledger, branch: str, as_of: int | None) -> bytes:
    """The digest as FORMAT.md defines it: all rows in one CBOR array."""
    rows = gated_rows(ledger.store.db, branch, as_of)
    return domain_hash(DIGEST_TAG, encoding.encode([1, branch, rows]))


def test_streamed_digest_equals_the_one_list_definition(tmp_path: Path) -> None:
    """Over 1024 rows (several chunks), at every as_of tried and on an empty branch."""
    ledger = Ledger.init(tmp_path / "chat.ledger", hooks=[ConversationTree(), MemoryHook()])
    ledger.store.db.execute("PRAGMA synchronous=OFF")
    try:
        parent = None
        batch = []
        for i in range(1500):
            item = EventInput(
                stream="chat",
                actor_id="alice",
                actor_type="HUMAN_USER",
                role="USER",
                content=f"message {i}",
                namespace_id="ns",
                parent_event_id=parent,
            )
            batch.append(item)
            if len(batch) == 500:
                parent = ledger.append_batch(batch)[-1].id
                batch = []
        ev = ledger.append(
            EventInput(
                stream="chat",
                actor_id="alice",
                actor_type="HUMAN_USER",
                role="USER",
                content="tea",
                namespace_id="ns",
            )
        ).id
        ledger.append(rq.assert_object(AGENT, "FACT", "ASSERTED", "USER_STATED", [ev], "tea"))
        db = ledger.store.db
        total = len(gated_rows(db, "main"))
        assert total > 1024  # more than one chunk
        for as_of in (None, 0, 1, 24, 600, 1024, 1200, ledger.size() - 2):
            assert gated_digest(db, "main", as_of) == _reference(ledger, "main", as_of)
        assert gated_digest(db, "nope") == _reference(ledger, "nope", None)
        # Rows matter: a changed row changes the digest.
        before = gated_digest(db, "main")
        db.execute("UPDATE mem_conv SET parent = NULL WHERE seq = 700")
        assert gated_digest(db, "main") != before
    finally:
        ledger.close()
