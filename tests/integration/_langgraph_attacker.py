"""An attacker without the signing key, editing a ledger file a LangGraph saver has open.

Run as its own process by tests/integration/test_langgraph_attacks.py:
``python _langgraph_attacker.py ACTION LEDGER``. It goes through what anyone who can write the
file can do: SQL on the file, and memroot's public encoding functions (the library, not the
key). Prints what it did as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import apsw

from memroot.ledger import encoding
from memroot.ledger.entries import new_uuid
from memroot.ledger.hashing import content_commitment, leaf_hash

FORGED_ID = "ffffffff-ffff-6fff-8fff-ffffffffffff"


def _main_branch(db: apsw.Connection) -> tuple[int, int, bytes]:
    no, size, head = db.execute(
        "SELECT no, size, head FROM branches WHERE name = 'main'"
    ).fetchone()
    return int(no), int(size), bytes(head)


def _forge_after(db: apsw.Connection, seq: int, edit: Any) -> dict[str, Any]:
    """Append a copy of event ``seq`` with its content edited, and move the head onto it."""
    no, size, head = _main_branch(db)
    data, content = db.execute(
        "SELECT data, content FROM entries WHERE k = ?", (no << 40 | seq,)
    ).fetchone()
    value = encoding.decode(bytes(data))
    c = json.loads(bytes(content))
    edit(c)
    forged = json.dumps(c, sort_keys=True, separators=(",", ":")).encode()
    salt = os.urandom(32)
    body = dict(value[7])
    body["id"] = str(new_uuid())
    body["content_commitment"] = content_commitment(salt, forged)
    value[1], value[2], value[7] = head, size, body
    raw = encoding.encode(value)
    h = leaf_hash(raw)
    db.execute(
        "INSERT INTO entries(k, hash, data, digest, salt, content, erased_by) "
        "VALUES (?, ?, ?, NULL, ?, ?, NULL)",
        (no << 40 | size, h, raw, salt, forged),
    )
    db.execute("UPDATE branches SET size = ?, head = ? WHERE no = ?", (size + 1, h, no))
    return {"forged_seq": size}


def delete_newest_checkpoint_row(db: apsw.Connection) -> dict[str, Any]:
    """Delete the lookup row of the newest checkpoint: the thread would roll back one step."""
    (cid,) = db.execute("SELECT MAX(id) FROM lg_checkpoints").fetchone()
    db.execute("DELETE FROM lg_checkpoints WHERE id = ?", (cid,))
    return {"deleted": cid}


def point_newest_at_older_entry(db: apsw.Connection) -> dict[str, Any]:
    """Point the newest checkpoint's lookup row at the entry of the one before it."""
    rows = db.execute("SELECT id, seq FROM lg_checkpoints ORDER BY id DESC LIMIT 2").fetchall()
    (new_id, new_seq), (_, old_seq) = rows
    db.execute("DELETE FROM lg_checkpoints WHERE seq = ?", (new_seq,))
    db.execute("UPDATE lg_checkpoints SET id = ? WHERE seq = ?", (new_id, old_seq))
    return {"moved": new_id, "to_seq": old_seq}


def forge_checkpoint(db: apsw.Connection) -> dict[str, Any]:
    """Append a forged newest checkpoint entry (another id) and move the branch head on it."""
    (seq,) = db.execute("SELECT seq FROM lg_checkpoints ORDER BY id DESC LIMIT 1").fetchone()

    def edit(c: dict[str, Any]) -> None:
        c["checkpoint_id"] = FORGED_ID

    return _forge_after(db, int(seq), edit)


def remove_newest_checkpoint_content(db: apsw.Connection) -> dict[str, Any]:
    """Remove the newest checkpoint's content as if erased, without any TOMBSTONE."""
    no, _, _ = _main_branch(db)
    (seq,) = db.execute("SELECT seq FROM lg_checkpoints ORDER BY id DESC LIMIT 1").fetchone()
    db.execute("UPDATE entries SET content = NULL, salt = NULL WHERE k = ?", (no << 40 | int(seq),))
    return {"emptied_seq": seq}


def delete_newest_store_row(db: apsw.Connection) -> dict[str, Any]:
    """Delete the store's row of an item's newest version: its older value would show."""
    (seq,) = db.execute("SELECT MAX(seq) FROM lg_store").fetchone()
    db.execute("DELETE FROM lg_store WHERE seq = ?", (seq,))
    return {"deleted_seq": seq}


def forge_store_item(db: apsw.Connection) -> dict[str, Any]:
    """Append a forged newer version of the newest store item and move the head on it."""
    (seq,) = db.execute("SELECT MAX(seq) FROM lg_store").fetchone()

    def edit(c: dict[str, Any]) -> None:
        c["value"] = {"v": "forged"}

    return _forge_after(db, int(seq), edit)


ACTIONS = {
    "delete-newest-checkpoint-row": delete_newest_checkpoint_row,
    "point-newest-at-older-entry": point_newest_at_older_entry,
    "forge-checkpoint": forge_checkpoint,
    "remove-newest-checkpoint-content": remove_newest_checkpoint_content,
    "delete-newest-store-row": delete_newest_store_row,
    "forge-store-item": forge_store_item,
}


if __name__ == "__main__":
    action, path = sys.argv[1], sys.argv[2]
    conn = apsw.Connection(path)
    conn.setbusytimeout(5000)
    with conn:
        done = ACTIONS[action](conn)
    conn.close()
    print(json.dumps(done))
