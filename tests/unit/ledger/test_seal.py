"""Every append is sealed by a signed head checkpoint in its own transaction; strict reads."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger import keys
from memroot.ledger.backends.store import Store
from memroot.ledger.errors import IntegrityError, KeyFileError, RefusedError
from memroot.ledger.ledger import CHECKPOINT_KEEP_EVERY, Ledger
from memroot.ledger.signing import Ed25519Signer
from memroot.ledger.strict import relaxed
from memroot.ledger.verify import audit

ORIGIN = "example.org/memroot-test"


def sizes(ledger: Ledger, branch: str = "main") -> list[int]:
    return [s for s, _, _ in ledger.store.checkpoints(ledger.store.branch(branch).no)]


def head_size(ledger: Ledger, branch: str = "main") -> int:
    last = ledger.store.latest_checkpoint(ledger.store.branch(branch).no)
    assert last is not None
    return last[0]


@pytest.fixture
def ledger(tmp_path: Path) -> Any:
    with Ledger.init(tmp_path / "l.db", origin=ORIGIN) as led:
        yield led


def test_every_append_is_covered_by_a_signed_head(ledger: Ledger, inputs: Any) -> None:
    """Single, batch and bulk appends each leave a head checkpoint at the branch's size."""
    assert head_size(ledger) == ledger.size() == 1
    ledger.append(inputs.event(random.Random(1), 0))
    assert head_size(ledger) == ledger.size() == 2
    ledger.append_batch(inputs.mixed(7, seed=2))
    assert head_size(ledger) == ledger.size() == 9
    with ledger.bulk():
        ledger.append_batch(inputs.mixed(3, seed=3))
        ledger.append_batch(inputs.mixed(3, seed=4))
        assert head_size(ledger) == 9  # sealed once, when the transaction commits
    assert head_size(ledger) == ledger.size() == 15
    report = audit(ledger.store, origin=ORIGIN, update_trusted=False)
    assert report.ok, [str(f) for f in report.findings]


def test_superseded_heads_are_dropped_and_retention_keeps_the_rest(
    ledger: Ledger, inputs: Any
) -> None:
    """Kept: init, on request, every CHECKPOINT_KEEP_EVERY entries, and the head; not others."""
    for i in range(5):
        ledger.append(inputs.event(random.Random(i), i))
    assert sizes(ledger) == [1, 6]  # size 2..5 heads were superseded and dropped
    asked = ledger.checkpoint().checkpoint.size  # on request: kept for good
    ledger.append(inputs.event(random.Random(9), 9))
    assert sizes(ledger) == [1, asked, asked + 1]
    items = inputs.mixed(CHECKPOINT_KEEP_EVERY + 50, seed=5)
    for start in range(0, len(items), 100):
        ledger.append_batch(items[start : start + 100])
    kept = sizes(ledger)
    crossing = [s for s in kept if s >= CHECKPOINT_KEEP_EVERY and s != ledger.size()]
    assert len(crossing) == 1 and crossing[0] // CHECKPOINT_KEEP_EVERY == 1
    assert kept == [1, asked, crossing[0], ledger.size()]
    assert audit(ledger.store, origin=ORIGIN, update_trusted=False).ok


def test_a_key_rotation_seal_is_kept(ledger: Ledger, inputs: Any) -> None:
    """The seal of a KEY_ROTATE is the old key's sign-off: it survives later appends."""
    old = ledger.vkey()
    r = keys.rotate_key(ledger)
    ledger.append_batch(inputs.mixed(3, seed=1))
    assert r.checkpoint_size in sizes(ledger)
    report = audit(ledger.store, origin=ORIGIN, vkeys=[old], update_trusted=False)
    assert report.ok, [str(f) for f in report.findings]
    with Ledger.open(ledger.path, vkeys=[old]) as again:  # strict open learns the rotation
        assert again.entry(again.size() - 1).seq == again.size() - 1


def test_append_without_the_key_is_refused_and_writes_nothing(
    tmp_path: Path, ledger: Ledger, inputs: Any
) -> None:
    """No key file: KeyFileError naming the rule; nothing written, not even a checkpoint."""
    ledger.append(inputs.event(random.Random(1), 0))
    size, cps = ledger.size(), sizes(ledger)
    ledger.key_path.rename(tmp_path / "elsewhere.key")
    with Ledger.open(ledger.path) as again:
        with pytest.raises(KeyFileError, match="needs its signing key") as e:
            again.append(inputs.event(random.Random(2), 1))
        assert "nothing was written" in str(e.value)
        with pytest.raises(KeyFileError):
            again.append_batch(inputs.mixed(3))
        assert again.size() == size and sizes(again) == cps
        assert again.entry(size - 1).seq == size - 1  # reading needs no key


def test_append_with_another_ledgers_key_is_refused(
    tmp_path: Path, ledger: Ledger, inputs: Any
) -> None:
    """A key that is not this ledger's would sign checkpoints no auditor trusts: refused."""
    stray = tmp_path / "stray.key"
    Ed25519Signer.generate(ORIGIN).save(stray)
    with Ledger.open(ledger.path, key_path=stray) as again:
        with pytest.raises(KeyFileError, match="not a key of this ledger"):
            again.append(inputs.event(random.Random(2), 1))
        assert again.size() == 1


def test_a_refused_seal_rolls_the_append_back(ledger: Ledger, inputs: Any) -> None:
    """The seal checks the previous head against the tree: a rewritten tree is not extended."""
    ledger.append_batch(inputs.mixed(4, seed=1))
    size = ledger.size()
    with ledger.store.write():
        ledger.store.db.execute(
            "UPDATE checkpoints SET root = zeroblob(32) WHERE size = ?", (size,)
        )
    with pytest.raises(RefusedError, match="history was rewritten"):
        ledger.append(inputs.event(random.Random(3), 0))
    assert ledger.size() == size and head_size(ledger) == size


def test_hooks_read_their_own_unsealed_entries(ledger: Ledger, inputs: Any) -> None:
    """Inside an open write, entries this ledger appended are readable before the seal."""
    with ledger.bulk():
        a = ledger.append(inputs.event(random.Random(1), 0))
        assert ledger.entry(a.seq).hash == a.entry_hash
        assert [e.seq for e in ledger.entries(0)] == list(range(a.seq + 1))
    assert ledger.entry(a.seq).hash == a.entry_hash


def test_strict_reads_see_another_writers_appends(ledger: Ledger, inputs: Any) -> None:
    """A second Ledger on the file appends; the first re-checks the newer head and reads on."""
    reader = Ledger.open(ledger.path)
    try:
        assert reader.size() == 1 and reader.entry(0).seq == 0
        a = ledger.append(inputs.event(random.Random(1), 0, content="seen by the reader"))
        ledger.append_batch(inputs.mixed(4, seed=1))
        assert [e.seq for e in reader.entries()] == list(range(6))
        assert reader.content(a.seq) == "seen by the reader"
    finally:
        reader.close()


def test_strict_open_refuses_an_unsigned_tail_and_relaxed_reads_it(
    ledger: Ledger, inputs: Any
) -> None:
    """The head checkpoint removed: strict open names step 6; strict=False still reads."""
    ledger.append_batch(inputs.mixed(4, seed=1))
    size = ledger.size()
    with ledger.store.write():
        ledger.store.db.execute("DELETE FROM checkpoints WHERE size = ?", (size,))
    with pytest.raises(IntegrityError) as e:
        Ledger.open(ledger.path)
    assert (e.value.step, e.value.branch, e.value.seq) == (6, "main", 1)
    assert "unsigned tail" in str(e.value)
    with Ledger.open(ledger.path, strict=False) as forensic:
        assert len(list(forensic.entries())) == size
    with relaxed(), Ledger.open(ledger.path) as forensic:
        assert not forensic.strict


def test_trusted_state_catches_a_rollback_at_open(
    tmp_path: Path, ledger: Ledger, inputs: Any
) -> None:
    """With the trusted state, a genuine but older copy is refused at open (step 10)."""
    import shutil

    from memroot.ledger.trust import TrustedState
    from memroot.ledger.verify import verify_path

    ledger.append_batch(inputs.mixed(4, seed=1))
    ledger.close()
    old = tmp_path / "old.db"
    shutil.copy2(ledger.path, old)
    with Ledger.open(ledger.path) as again:
        again.append_batch(inputs.mixed(4, seed=2))
    state = tmp_path / "trusted-here.json"
    assert verify_path(ledger.path, trusted=TrustedState(state)).ok  # remembers size 9
    shutil.copy2(old, ledger.path)
    with pytest.raises(IntegrityError) as e:
        Ledger.open(ledger.path, trusted=TrustedState(state))
    assert e.value.step == 10
    Ledger.open(ledger.path).close()  # without the trusted state the old copy is consistent


def test_a_refused_append_inside_bulk_seals_only_what_landed(ledger: Ledger, inputs: Any) -> None:
    """A caller that catches a refused append inside bulk() still commits a sealed ledger."""
    from memroot.ledger.entries import OpInput

    bad = OpInput(
        op_type="TOMBSTONE",
        actor_id="dpo",
        actor_type="HUMAN_USER",
        namespace_id="ns-a",
        payload={"target_event_id": "01900000-0000-7000-8000-000000000001"},
        policy_version="p/1",
    )
    with ledger.bulk(), pytest.raises(RefusedError):
        ledger.append(bad)
    assert head_size(ledger) == ledger.size() == 1
    with ledger.bulk():
        ledger.append(inputs.event(random.Random(1), 0))
        with pytest.raises(RefusedError):
            ledger.append(bad)
    assert head_size(ledger) == ledger.size() == 2
    assert audit(ledger.store, origin=ORIGIN, update_trusted=False).ok


def test_another_connections_rewrite_is_caught_by_the_next_seal(
    ledger: Ledger, inputs: Any
) -> None:
    """The seal remembers its own head checkpoint only while nothing else wrote the file."""
    ledger.append(inputs.event(random.Random(1), 0))
    size = ledger.size()
    other = Store(ledger.path)
    try:
        with other.write():
            other.db.execute("UPDATE checkpoints SET root = zeroblob(32) WHERE size = ?", (size,))
    finally:
        other.close()
    with pytest.raises(RefusedError, match="history was rewritten"):
        ledger.append(inputs.event(random.Random(2), 1))
    assert ledger.size() == size and head_size(ledger) == size


def test_another_writers_checkpoint_on_request_is_kept(ledger: Ledger, inputs: Any) -> None:
    """A head another process asked for (no new size: only the marker goes) is kept."""
    ledger.append(inputs.event(random.Random(1), 0))
    ledger.append(inputs.event(random.Random(2), 1))
    asked = ledger.size()
    with Ledger.open(ledger.path, hooks=()) as second:
        assert second.checkpoint().checkpoint.size == asked
    ledger.append(inputs.event(random.Random(3), 2))
    ledger.append(inputs.event(random.Random(4), 3))
    assert sizes(ledger) == [1, asked, ledger.size()]


def test_a_checkpoint_on_request_inside_bulk_then_more_appends(ledger: Ledger, inputs: Any) -> None:
    """checkpoint() writes a head outside the seal: the seal after it reads the file again."""
    ledger.append(inputs.event(random.Random(1), 0))
    with ledger.bulk():
        ledger.append(inputs.event(random.Random(2), 1))
        ledger.append(inputs.event(random.Random(3), 2))
    with ledger.bulk():
        ledger.append(inputs.event(random.Random(4), 3))
        asked = ledger.checkpoint().checkpoint.size
        ledger.append(inputs.event(random.Random(5), 4))
    ledger.append(inputs.event(random.Random(6), 5))
    # The head of the first bulk (size 4) stays too: checkpoint() took its marker away.
    assert sizes(ledger) == [1, 4, asked, ledger.size()]
    assert audit(ledger.store, origin=ORIGIN, update_trusted=False).ok
