"""Shared fixtures: isolated trusted state, and real ledgers with a mix of events and operations."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import apsw
import pytest
from click.testing import CliRunner, Result

from memroot.ledger import encoding
from memroot.ledger.backends.store import NODE_MIN_LEVEL, entry_key, node_key
from memroot.ledger.entries import Entry, EventInput, OpInput
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.merkle import CompactRange
from memroot.ledger.vocab import ActorType, EntityType, OpType, Role

ORIGIN = "example.org/memroot-test"

MakeLedger = Callable[..., Path]


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test reads or writes the home directory's trusted state or a stray MEMROOT_LEDGER."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    monkeypatch.delenv("MEMROOT_LEDGER", raising=False)
    yield


@pytest.fixture
def trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The trusted-state file of this test (also exported as MEMROOT_TRUSTED)."""
    path = tmp_path / "trusted.json"
    monkeypatch.setenv("MEMROOT_TRUSTED", str(path))
    return path


def event_input(rng: random.Random, i: int, **over: Any) -> EventInput:
    """A valid event with varied optional fields (deterministic for a given ``rng``)."""
    fields: dict[str, Any] = {
        "stream": f"session-{rng.randrange(3)}",
        "actor_id": rng.choice(["alice", "bob", "agent-7"]),
        "actor_type": rng.choice(list(ActorType)).value,
        "role": rng.choice(list(Role)).value,
        "content": f"message {i}: " + "x" * rng.randrange(0, 200),
        "namespace_id": rng.choice(["ns-a", "ns-b"]),
    }
    if rng.random() < 0.3:
        fields["metadata"] = {"n": i, "tags": ["t", str(rng.random())], "ok": True}
    if rng.random() < 0.2:
        fields["context"] = {"git_branch": "feature/x", "commit": "abc123"}
    fields.update(over)
    return EventInput(**fields)


def op_input(rng: random.Random, i: int, **over: Any) -> OpInput:
    """A valid operation (an ENTITY_CREATE, which the memory model accepts on its own)."""
    fields: dict[str, Any] = {
        "op_type": OpType.ENTITY_CREATE.value,
        "actor_id": rng.choice(["extractor", "agent-7"]),
        "actor_type": ActorType.AI_AGENT.value,
        "namespace_id": "ns-a",
        "payload": {
            "entity_type": rng.choice(list(EntityType)).value,
            "canonical_name": f"entity {i}",
            "aliases": [f"e{i}"] if rng.random() < 0.5 else [],
        },
        "policy_version": "policy/1",
    }
    if rng.random() < 0.3:
        fields["context"] = {"git_branch": "main", "weight": rng.random()}
    fields.update(over)
    return OpInput(**fields)


def mixed_items(n: int, seed: int = 0) -> list[EventInput | OpInput]:
    """``n`` valid append requests, about two thirds events, one third operations."""
    rng = random.Random(seed)
    return [event_input(rng, i) if rng.random() < 0.67 else op_input(rng, i) for i in range(n)]


def tombstone_input(event_id: str) -> OpInput:
    """A TOMBSTONE erasing the content of ``event_id``."""
    return OpInput(
        op_type=OpType.TOMBSTONE.value,
        actor_id="dpo",
        actor_type=ActorType.HUMAN_USER.value,
        namespace_id="ns-a",
        target_id=event_id,
        target_type="EVENT",
        payload={"target_event_id": event_id, "reason": "erasure request", "policy_ref": "gdpr-17"},
        policy_version="policy/1",
    )


def oversized_op() -> OpInput:
    """A valid ASSERT whose entry exceeds 65535 bytes (tlog-tiles' uint16 entry length)."""
    return OpInput(
        op_type="ASSERT",
        actor_id="a",
        actor_type="AI_AGENT",
        namespace_id="ns",
        payload={"value": "x" * 70_000},
        policy_version="p/1",
    )


class Inputs:
    """The request builders above, for tests (conftest is not importable in importlib mode)."""

    event = staticmethod(event_input)
    op = staticmethod(op_input)
    mixed = staticmethod(mixed_items)
    tombstone = staticmethod(tombstone_input)
    oversized = staticmethod(oversized_op)


@pytest.fixture(scope="session")
def inputs() -> type[Inputs]:
    """Builders of valid events, operations, mixed lists, TOMBSTONEs and oversized entries."""
    return Inputs


@pytest.fixture(scope="session")
def make_ledger() -> MakeLedger:
    """Return ``make(directory, n, *, name, origin, seed, checkpoint)`` -> path of a new ledger.

    The ledger holds the genesis plus ``n`` appended entries (events and operations, appended
    singly and in batches), so its size is ``n + 1``; ``init`` signs a checkpoint at size 1 and,
    with ``checkpoint`` (the default), one more is signed at the end. The Ledger is closed.
    """

    def make(
        directory: Path,
        n: int,
        *,
        name: str = "ledger.db",
        origin: str = ORIGIN,
        seed: int = 0,
        checkpoint: bool = True,
    ) -> Path:
        path = Path(directory) / name
        items = mixed_items(n, seed)
        rng = random.Random(seed + 1)
        with Ledger.init(path, origin=origin, hooks=()) as ledger:  # the bare ledger
            i = 0
            while i < len(items):
                step = 1 if rng.random() < 0.3 else rng.randrange(2, 40)
                chunk = items[i : i + step]
                if len(chunk) == 1:
                    ledger.append(chunk[0])
                else:
                    ledger.append_batch(chunk)
                i += step
            if checkpoint:
                ledger.checkpoint()
        return path

    return make


class RawLedger:
    """Edits of a closed ledger's SQLite file with plain apsw, no memroot code: what someone
    with write access to the disk (but without the signing key) does. Canonical branch only."""

    MAIN_NO = 1  # branches.no of the canonical branch
    COLUMNS = ("hash", "data", "digest", "salt", "content", "erased_by")

    @staticmethod
    @contextlib.contextmanager
    def db(path: Path) -> Iterator[apsw.Connection]:
        """Open the ledger file with plain apsw and edit it in one transaction."""
        db = apsw.Connection(str(path))
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        finally:
            db.close()

    @staticmethod
    def k(seq: int) -> int:
        """The ``entries.k`` of entry ``seq``."""
        return entry_key(RawLedger.MAIN_NO, seq)

    @staticmethod
    def row(db: apsw.Connection, seq: int) -> dict[str, Any]:
        """The stored columns of entry ``seq``."""
        cols = RawLedger.COLUMNS
        r = db.execute(
            f"SELECT {', '.join(cols)} FROM entries WHERE k = ?", (RawLedger.k(seq),)
        ).fetchone()
        assert r is not None, f"no stored entry {seq}"
        return dict(zip(cols, r, strict=True))

    @staticmethod
    def rewrite(path: Path, seq: int | None = None) -> None:
        """Attack: set entry ``seq``'s ``actor_id`` to ``mallory`` in place (default: the newest
        entry of main); its leaf hash, the tree nodes, the head and checkpoints are left alone."""
        at = RawLedger.size_of(path) - 1 if seq is None else seq
        with RawLedger.db(path) as db:
            data = bytes(RawLedger.row(db, at)["data"])
            RawLedger.put_data(db, at, RawLedger.reencode(data, actor_id="mallory"), fix_hash=False)

    @staticmethod
    def size_of(path: Path) -> int:
        """The branch size the file records."""
        with RawLedger.db(path) as db:
            row = db.execute("SELECT size FROM branches WHERE no = ?", (RawLedger.MAIN_NO,))
            return int(row.fetchone()[0])

    @staticmethod
    def put_data(db: apsw.Connection, seq: int, data: bytes, *, fix_hash: bool) -> None:
        """Replace entry ``seq``'s bytes (and, with ``fix_hash``, its leaf hash cache)."""
        if fix_hash:
            db.execute(
                "UPDATE entries SET data = ?, hash = ? WHERE k = ?",
                (data, leaf_hash(data), RawLedger.k(seq)),
            )
        else:
            db.execute("UPDATE entries SET data = ? WHERE k = ?", (data, RawLedger.k(seq)))

    @staticmethod
    def reencode(data: bytes, **change: Any) -> bytes:
        """Re-encode entry bytes canonically with header fields or body keys changed."""
        v, prev, seq, branch, ts, kind, type_, body = encoding.decode(data)
        header = {"prev": prev, "seq": seq, "branch": branch, "ts": ts}
        body = dict(body)
        for name, value in change.items():
            if name in header:
                header[name] = value
            else:
                body[name] = value
        return encoding.encode(
            [v, header["prev"], header["seq"], header["branch"], header["ts"], kind, type_, body]
        )

    @staticmethod
    def rebuild_caches(db: apsw.Connection) -> None:
        """Recompute leaf hashes, every tree node and the chain head from the stored entry bytes.

        This is what a careful attacker does after editing rows, so that only the signed
        checkpoints and the verifier's trusted state are left to disagree.
        """
        no = RawLedger.MAIN_NO
        compact = CompactRange()
        last = None
        db.execute("DELETE FROM nodes WHERE k >> 48 = ?", (no,))
        rows = db.execute(
            "SELECT k, data FROM entries WHERE k >> 40 = ? ORDER BY k", (no,)
        ).fetchall()
        for key, data in rows:
            h = leaf_hash(bytes(data))
            db.execute("UPDATE entries SET hash = ? WHERE k = ?", (h, key))
            for level, index, node in compact.append(h):
                if level >= NODE_MIN_LEVEL:  # as memroot stores them (FORMAT.md 4)
                    db.execute(
                        "INSERT INTO nodes(k, h) VALUES(?, ?)", (node_key(no, level, index), node)
                    )
            last = h
        assert last is not None
        db.execute("UPDATE branches SET size = ?, head = ? WHERE no = ?", (len(rows), last, no))

    @staticmethod
    def truncate(db: apsw.Connection, new_size: int, *, drop_checkpoints: bool) -> None:
        """Delete every entry from ``new_size`` on and tidy up the caches (and checkpoints)."""
        no, k = RawLedger.MAIN_NO, RawLedger.k
        db.execute("DELETE FROM entries WHERE k >= ? AND k >> 40 = ?", (k(new_size), no))
        db.execute("DELETE FROM event_ids WHERE k >= ? AND k >> 40 = ?", (k(new_size), no))
        if drop_checkpoints:
            db.execute("DELETE FROM checkpoints WHERE branch = ? AND size > ?", (no, new_size))
        RawLedger.rebuild_caches(db)

    @staticmethod
    def swap(db: apsw.Connection, a: int, b: int) -> None:
        """Swap two stored entries, every column."""
        cols, k = RawLedger.COLUMNS, RawLedger.k
        ra, rb = RawLedger.row(db, a), RawLedger.row(db, b)
        sets = ", ".join(f"{c} = ?" for c in cols)
        db.execute(f"UPDATE entries SET {sets} WHERE k = ?", (*(rb[c] for c in cols), k(a)))
        db.execute(f"UPDATE entries SET {sets} WHERE k = ?", (*(ra[c] for c in cols), k(b)))

    @staticmethod
    def shift_up(db: apsw.Connection, at: int) -> None:
        """Move every entry from ``at`` on (and its event id) one seq up, leaving ``at`` free."""
        no, k = RawLedger.MAIN_NO, RawLedger.k
        keys = [
            r[0]
            for r in db.execute(
                "SELECT k FROM entries WHERE k >= ? AND k >> 40 = ? ORDER BY k DESC", (k(at), no)
            )
        ]
        for key in keys:
            db.execute("UPDATE entries SET k = ? WHERE k = ?", (key + 1, key))
        db.execute("UPDATE event_ids SET k = k + 1 WHERE k >= ? AND k >> 40 = ?", (k(at), no))

    @staticmethod
    def plant(db: apsw.Connection, entry: Entry) -> None:
        """Insert ``entry`` (bytes and leaf hash) at its seq, then rebuild the caches."""
        db.execute(
            "INSERT INTO entries(k, hash, data) VALUES(?, ?, ?)",
            (RawLedger.k(entry.seq), entry.hash, entry.raw),
        )
        RawLedger.rebuild_caches(db)


@pytest.fixture(scope="session")
def raw() -> type[RawLedger]:
    """Plain-apsw edits of a closed ledger's file (attacks): see ``RawLedger``."""
    return RawLedger


class Cli:
    """The ``memroot`` CLI run in-process through click (``catch_exceptions=False``: a
    traceback fails the test), and the events the CLI tests append."""

    EVENT: Final[dict[str, Any]] = {
        "kind": "event",
        "stream": "s1",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "role": "USER",
        "content": "I take tea without sugar",
        "namespace_id": "alice",
    }
    """One valid event as ``memroot append`` takes it."""

    CHAT_EVENT: Final[dict[str, Any]] = {
        "kind": "event",
        "stream": "chat",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "role": "USER",
        "namespace_id": "ns",
    }
    """A chat turn without its ``content`` (namespace ``ns``), for conversation tests."""

    @staticmethod
    def run(
        *args: str, input: str | None = None, env: dict[str, str | None] | None = None
    ) -> Result:
        """Run ``memroot ARGS``."""
        from memroot.cli.main import cli

        return CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)

    @staticmethod
    def at(
        ledger: Path, *args: str, input: str | None = None, env: dict[str, str | None] | None = None
    ) -> Result:
        """Run ``memroot -l LEDGER ARGS``."""
        return Cli.run("-l", str(ledger), *args, input=input, env=env)

    @staticmethod
    def ok(result: Result) -> Result:
        """The result of a command that must succeed (exit 0, else its output is shown)."""
        assert result.exit_code == 0, result.output
        return result

    @staticmethod
    def ok_json(result: Result) -> Any:
        """The parsed stdout of a command that must succeed."""
        return json.loads(Cli.ok(result).stdout)

    @staticmethod
    def json_at(ledger: Path, *args: str) -> Any:
        """The parsed output of ``memroot -l LEDGER ARGS --json``, which must succeed."""
        return Cli.ok_json(Cli.at(ledger, *args, "--json"))


@pytest.fixture(scope="session")
def cmd() -> type[Cli]:
    """The CLI in-process and the events its tests append: see ``Cli``."""
    return Cli
