"""Attacks on a closed ledger's file, each refused by EVERY read path, not only by verify.

One test per attack, named after it. Each builds the same small memory story through the CLI
(events, ASSERTs, a REINFORCE, filler), checks that every read path works on the untouched
copy (so a test cannot pass because a reader always fails), tampers with the file the way
someone with disk access (but without the signing key) would, then asserts:

- ``memroot verify`` reports it (exit 1, the step named);
- ``log``, ``show``, ``why``, ``query`` and ``export`` exit 1 with an error naming the branch,
  entry and step on stderr, print nothing on stdout and write no bundle;
- the Python API (``Ledger.open`` / ``entry`` / ``entries`` / ``content``) raises
  ``IntegrityError``;
- ``--no-strict`` (forensics) still reads it and says so on stderr.

The checks before and after are one context manager, ``attack``; a test's ``with`` body is
its tampering.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli
from memroot.ledger.entries import Entry, Kind, build_entry
from memroot.ledger.errors import IntegrityError
from memroot.ledger.hashing import content_digest
from memroot.ledger.ledger import Ledger
from memroot.ledger.trust import TrustedState, default_trusted_path
from tests.integration._attack import event, op

ORIGIN = "example.org/read-attacks"
MAIN_NO = 1


def memroot(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def ok(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def append(path: Path, obj: dict[str, Any]) -> dict[str, Any]:
    return dict(ok(memroot(path, "append", "--json", json.dumps(obj)))[0])


def build(path: Path, fillers: int = 12) -> dict[str, Any]:
    """The story: event (1), ASSERT tea (2), REINFORCE (3), fillers; returns ids and seqs."""
    assert memroot(path, "init", "--origin", ORIGIN).exit_code == 0
    ev = append(path, event("I take my tea without sugar"))
    tea = append(
        path,
        op(
            "ASSERT",
            {
                "object_type": "PREFERENCE",
                "epistemic_type": "OBSERVED",
                "source_type": "USER_STATED",
                "evidence_ids": [ev["id"]],
                "value": "Alice takes tea without sugar",
                "confidence": None,
                "salience": 0.7,
            },
        ),
    )
    reinforce = append(
        path,
        op(
            "REINFORCE",
            {
                "signal_type": "used",
                "delta": 0.05,
                "new_confidence": 0.95,
                "new_salience": 0.75,
                "signal_source": "chat",
            },
            tea["id"],
        ),
    )
    for i in range(fillers):
        append(path, event(f"filler message {i}"))
    return {"event": ev, "tea": tea, "reinforce": reinforce}


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("golden") / "agent.ledger"
    return path, build(path)


@pytest.fixture
def story(tmp_path: Path, golden: tuple[Path, dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    """A private copy of the golden ledger (file and key)."""
    src, ids = golden
    dst = tmp_path / "agent.ledger"
    shutil.copy2(src, dst)
    shutil.copy2(f"{src}.key", f"{dst}.key")
    return dst, ids


# -- forged entries (the file is edited with the `raw` fixture: tests/conftest.py, RawLedger) --


def forged_entity(prev: Entry, event_id: str) -> Entry:
    """A well-formed ENTITY_CREATE by mallory linked after ``prev``: no key signed it."""
    return build_entry(
        prev.hash,
        prev.seq + 1,
        "main",
        prev.ts + 1,
        Kind.OP,
        "ENTITY_CREATE",
        {
            "actor_id": "mallory",
            "actor_type": "HUMAN_USER",
            "id": event_id,
            "namespace_id": "alice",
            "payload": {"entity_type": "PERSON", "canonical_name": "mallory", "aliases": []},
            "policy_version": "p/1",
        },
    )


# -- the read paths ----------------------------------------------------------------------------


def read_paths(path: Path, ids: dict[str, Any], seq: int) -> dict[str, Result]:
    """Run every read command that serves the tampered data (``seq``: the entry hit)."""
    tea = ids["tea"]["id"]
    return {
        "log": memroot(path, "log", "--limit", "1000", "--json"),
        "show": memroot(path, "show", str(seq), "--json"),
        "why": memroot(path, "why", tea, "--json"),
        "query": memroot(path, "query", "--json"),
        "export": memroot(path, "export", str(path.parent / "bundle")),
    }


def api_reads(path: Path, seq: int) -> None:
    """Everything the Python API serves: open, entry, entries, content (with the trusted
    state the CLI uses, so a rollback is caught as the reads are)."""
    with Ledger.open(path, trusted=TrustedState(default_trusted_path())) as ledger:
        ledger.entry(seq)
        list(ledger.entries())
        for s in range(ledger.size()):
            ledger.content(s)


def assert_untouched_reads_work(path: Path, ids: dict[str, Any], seq: int) -> None:
    for name, result in read_paths(path, ids, seq).items():
        assert result.exit_code == 0, (name, result.output)
    shutil.rmtree(path.parent / "bundle")
    api_reads(path, seq)


def assert_every_read_refuses(
    path: Path,
    ids: dict[str, Any],
    seq: int,
    *,
    step: int,
    secret: str | None = None,
    paths: tuple[str, ...] = ("log", "show", "why", "query", "export"),
) -> None:
    """verify reports ``step``; each read path exits 1 naming a step and printing nothing."""
    verify = memroot(path, "verify", "--json", "--no-update")
    assert verify.exit_code == 1
    report = json.loads(verify.stdout)
    assert report["steps"][str(step)]["violations"] >= 1, report["findings"]
    results = read_paths(path, ids, seq)
    for name in paths:
        result = results[name]
        assert result.exit_code == 1, (name, result.output)
        assert result.stdout == "", (name, result.stdout)  # nothing of the tampered data
        assert "strict read refused" in result.stderr and "step" in result.stderr, name
        assert "Traceback" not in result.output
        if secret is not None:
            assert secret not in result.output
    if "export" in paths:
        assert not (path.parent / "bundle").exists()
    if paths == ("log", "show", "why", "query", "export"):
        with pytest.raises(IntegrityError) as refused:
            api_reads(path, seq)
        assert refused.value.step is not None and refused.value.branch == "main"


def assert_forensics_reads(path: Path, seq: int) -> None:
    """--no-strict reads the tampered ledger anyway and warns on stderr."""
    result = memroot(path, "show", str(seq), "--no-strict", "--json")
    assert "--no-strict" in result.stderr and "NOT checked" in result.stderr
    with Ledger.open(path, strict=False) as ledger:
        ledger.size()


# -- the attacks ---------------------------------------------------------------------------

Story = tuple[Path, dict[str, Any]]


@dataclass
class Hit:
    """An attack on the story's copy at ``path``: ``seq`` is the entry the reads are checked at
    (the attack may move it, to a row it appends)."""

    path: Path
    ids: dict[str, Any]
    seq: int


@contextlib.contextmanager
def attack(
    story: Story,
    seq: int,
    *,
    step: int,
    secret: str | None = None,
    paths: tuple[str, ...] = ("log", "show", "why", "query", "export"),
    forensic_seq: int | None = None,
) -> Iterator[Hit]:
    """Every test's protocol around its tampering (the body of the ``with``).

    Before: every read path works on the untouched copy (so a reader that always fails cannot
    pass). After: every read path refuses and verify reports ``step``
    (``assert_every_read_refuses``), and ``--no-strict`` still reads the entry
    ``forensic_seq`` (default: the hit's).
    """
    path, ids = story
    hit = Hit(path, ids, seq)
    assert_untouched_reads_work(path, ids, seq)
    yield hit
    assert_every_read_refuses(path, ids, hit.seq, step=step, secret=secret, paths=paths)
    assert_forensics_reads(path, hit.seq if forensic_seq is None else forensic_seq)


def test_content_edit(story: Story, raw: Any) -> None:
    """The evidence event's content rewritten (content address fixed): step 4 everywhere."""
    seq = story[1]["event"]["seq"]
    with attack(story, seq, step=4, secret="FIVE") as hit, raw.db(hit.path) as db:
        forged = b"I take my tea with FIVE sugars"
        db.execute(
            "UPDATE entries SET content = ?, digest = ? WHERE k = ?",
            (forged, content_digest(forged), raw.k(seq)),
        )


def test_middle_deletion(story: Story, raw: Any) -> None:
    """The ASSERT row deleted: a gap in the signed tree (step 2) on every read."""
    seq = story[1]["tea"]["seq"]
    with attack(story, seq, step=2, forensic_seq=seq + 1) as hit, raw.db(hit.path) as db:
        db.execute("DELETE FROM entries WHERE k = ?", (raw.k(seq),))


def test_reorder(story: Story, raw: Any) -> None:
    """The ASSERT and the REINFORCE swapped (every column): step 2 on every read."""
    a, b = story[1]["tea"]["seq"], story[1]["reinforce"]["seq"]
    with attack(story, a, step=2) as hit, raw.db(hit.path) as db:
        raw.swap(db, a, b)


def test_forged_insertion(story: Story, raw: Any) -> None:
    """A well-formed entry inserted after the ASSERT, later rows shifted, caches rebuilt.

    verify: the shifted entry records another position (step 2); the reads refuse at open,
    since the stored tree no longer has the signed size and root.
    """
    at = story[1]["tea"]["seq"] + 1
    with attack(story, at, step=2) as hit, raw.db(hit.path) as db:
        raw.shift_up(db, at)
        before = Entry.from_bytes(bytes(raw.row(db, at - 1)["data"]))
        raw.plant(db, forged_entity(before, "01900000-0000-7000-8000-0000000000ff"))


def test_cross_context_replay(story: Story, tmp_path: Path, raw: Any) -> None:
    """A genuine event of another ledger (same story, same seq) swapped in, caches rebuilt."""
    seq = story[1]["event"]["seq"]
    with attack(story, seq, step=3) as hit:
        other = tmp_path / "other" / "agent.ledger"
        other.parent.mkdir()
        build(other, fillers=0)
        with raw.db(other) as db:
            donor = raw.row(db, seq)
        with raw.db(hit.path) as db:
            sets = ", ".join(f"{c} = ?" for c in ("data", "digest", "salt", "content"))
            db.execute(
                f"UPDATE entries SET {sets} WHERE k = ?",
                (*(donor[c] for c in ("data", "digest", "salt", "content")), raw.k(seq)),
            )
            raw.rebuild_caches(db)


def test_metadata_edit(story: Story, raw: Any) -> None:
    """The ASSERT's actor rewritten (valid CBOR, leaf hash cache fixed): step 5 on reads."""
    seq = story[1]["tea"]["seq"]
    with attack(story, seq, step=3, secret="mallory") as hit, raw.db(hit.path) as db:
        forged = raw.reencode(bytes(raw.row(db, seq)["data"]), actor_id="mallory")
        raw.put_data(db, seq, forged, fix_hash=True)


def _older_copy(path: Path, ids: dict[str, Any]) -> tuple[Path, int]:
    """Save a complete copy now, append more, verify (the newer state becomes trusted)."""
    old = path.parent / "old"
    old.mkdir()
    shutil.copy2(path, old / path.name)
    for i in range(5):
        append(path, event(f"newer message {i}"))
    assert memroot(path, "verify", "--json").exit_code == 0  # remembers the newest checkpoint
    return old / path.name, ids["reinforce"]["seq"]


def test_restored_older_copy(story: Story) -> None:
    """An older genuine copy of the file put back after verified appends: step 10 on reads."""
    with attack(story, story[1]["tea"]["seq"], step=10) as hit:
        old, _ = _older_copy(hit.path, hit.ids)
        for suffix in ("-wal", "-shm"):
            Path(f"{hit.path}{suffix}").unlink(missing_ok=True)
        shutil.copy2(old, hit.path)


def test_rollback_replay(story: Story, raw: Any) -> None:
    """History rolled back to an older kept checkpoint (newer rows and checkpoints deleted)."""
    with attack(story, story[1]["tea"]["seq"], step=10) as hit:
        kept = ok(memroot(hit.path, "checkpoint", "--json"))["size"]  # asked for: kept for good
        _older_copy(hit.path, hit.ids)
        with raw.db(hit.path) as db:
            raw.truncate(db, kept, drop_checkpoints=True)


def test_unsigned_append(story: Story, tmp_path: Path, raw: Any) -> None:
    """Without the key an append is refused; a row added behind memroot's back is unsigned."""
    with attack(story, story[1]["tea"]["seq"], step=6, secret="mallory") as hit:
        path = hit.path
        Path(f"{path}.key").rename(tmp_path / "elsewhere.key")
        refused = memroot(path, "append", json.dumps(event("appended without the key")))
        assert refused.exit_code == 5 and "needs its signing key" in refused.stderr
        size = raw.size_of(path)  # nothing was written: every stored entry is still signed
        assert size == len(ok(memroot(path, "log", "--json", "--limit", "1000")))
        with raw.db(path) as db:  # the attacker writes the row the library refused to write
            last = Entry.from_bytes(bytes(raw.row(db, size - 1)["data"]))
            raw.plant(db, forged_entity(last, "01900000-0000-7000-8000-0000000000fe"))
        hit.seq = size  # the reads are checked at the planted row


def test_tail_truncation(story: Story, raw: Any) -> None:
    """The last rows deleted with their head checkpoint, caches tidied: an unsigned tail."""
    with attack(story, story[1]["tea"]["seq"], step=6) as hit:
        cut = raw.size_of(hit.path) - 3
        with raw.db(hit.path) as db:
            raw.truncate(db, cut, drop_checkpoints=True)


def test_tail_truncation_checkpoint_kept(story: Story, raw: Any) -> None:
    """The last rows deleted but the head checkpoint left: shorter than signed (step 5)."""
    with attack(story, story[1]["tea"]["seq"], step=5) as hit:
        size = raw.size_of(hit.path)
        with raw.db(hit.path) as db:
            db.execute(
                "DELETE FROM entries WHERE k >= ? AND k >> 40 = ?", (raw.k(size - 2), MAIN_NO)
            )
            raw.rebuild_caches(db)


def test_derived_row_edit(story: Story, raw: Any) -> None:
    """The object's value and confidence edited in the derived table: query and why refuse.

    log, show and export serve no derived rows (export carries the entries, from which an
    auditor derives everything), so they have nothing to refuse; verify reports step 9.
    """
    path, ids = story
    seq = ids["reinforce"]["seq"]
    with (
        attack(story, seq, step=9, secret="FIVE", paths=("why", "query")),
        raw.db(path) as db,
    ):
        db.execute(
            "UPDATE mem_objects SET value = ?, confidence = ? WHERE id = ?",
            ("Alice takes FIVE sugars", 0.99, ids["tea"]["id"]),
        )
    from memroot.projections.query import Query, query
    from memroot.projections.strict_rows import check_objects

    with Ledger.open(path) as ledger, ledger.store.read() as db:
        served = [r.object for r in query(db, Query())]
        with pytest.raises(IntegrityError) as refused:
            check_objects(ledger, served)
    assert (refused.value.step, refused.value.seq) == (9, seq)
    forensic = memroot(path, "query", "--no-strict", "--json")
    assert forensic.exit_code == 0 and "FIVE" in forensic.stdout
