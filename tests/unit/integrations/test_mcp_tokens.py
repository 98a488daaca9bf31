"""The MCP token file (docs/FORMAT.md section 13): the vector, lookup, revocation, damage."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed (extra memroot[mcp])")

from memroot.integrations.mcp.tokens import FORMAT, TokenStore
from memroot.ledger.errors import NotFoundError, StorageError, ValidationError

VECTOR_TOKEN = "mrt_0123456789abcdef_" + "A" * 43
VECTOR_SHA256 = "38595bcb529eb5a5bf194ddb09d4825c126a7018b013280bb1d38b31058a17b2"


def _vector_file(path: Path, revoked_at: int | None = None) -> None:
    record = {
        "id": "0123456789abcdef",
        "actor": "agent-7",
        "actor_type": "AI_AGENT",
        "namespace": "alice",
        "created_at": 1764633600000000,
        "revoked_at": revoked_at,
        "sha256": VECTOR_SHA256,
    }
    path.write_text(json.dumps({"format": FORMAT, "tokens": [record]}))


def test_the_format_vector_is_accepted_and_only_with_its_secret(tmp_path: Path) -> None:
    """A file written by hand per FORMAT.md admits the vector token, not a changed one."""
    path = tmp_path / "t.mcp-tokens"
    _vector_file(path)
    store = TokenStore(path)
    found = store.find(VECTOR_TOKEN)
    assert found is not None and (found.actor, found.namespace) == ("agent-7", "alice")
    assert store.find(VECTOR_TOKEN[:-1] + "B") is None
    assert store.find("mrt_0123456789abcdee_" + "A" * 43) is None
    assert store.find("") is None and store.find(VECTOR_TOKEN + "A") is None


def test_add_stores_a_hash_revoke_holds_for_a_running_reader(tmp_path: Path) -> None:
    """add returns a token the file does not hold; another store's revoke is seen at once."""
    path = tmp_path / "t.mcp-tokens"
    server, cli = TokenStore(path), TokenStore(path)
    token, record = cli.add("agent-7", "alice")
    assert token not in path.read_text() and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert server.find(token) == record
    cli.revoke(record.id)
    assert server.find(token) is None
    assert [r.revoked_at is not None for r in cli.records()] == [True]


def test_bad_names_and_unknown_ids_are_refused(tmp_path: Path) -> None:
    """add refuses a bad actor, namespace or actor type; revoke names an unknown id."""
    store = TokenStore(tmp_path / "t.mcp-tokens")
    with pytest.raises(ValidationError, match="actor must be"):
        store.add("agent 7", "alice")
    with pytest.raises(ValidationError, match="namespace must be"):
        store.add("agent-7", "")
    with pytest.raises(ValidationError, match="actor type 'ROBOT'"):
        store.add("agent-7", "alice", "ROBOT")
    with pytest.raises(NotFoundError, match="no MCP token 'nope'"):
        store.revoke("nope")
    assert not (tmp_path / "t.mcp-tokens").exists()


def test_a_damaged_token_file_admits_no_one(tmp_path: Path) -> None:
    """A token file that does not parse refuses every token and names itself to the CLI."""
    path = tmp_path / "t.mcp-tokens"
    _vector_file(path)
    store = TokenStore(path)
    assert store.find(VECTOR_TOKEN) is not None
    path.write_text(path.read_text()[:-5])
    assert store.find(VECTOR_TOKEN) is None
    with pytest.raises(StorageError, match="is damaged"):
        store.records()
