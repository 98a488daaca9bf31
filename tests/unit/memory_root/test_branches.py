"""RFC-0012 branch policy: types, expiry, limits, close/discard/archive and GC."""

from __future__ import annotations

from pathlib import Path

import pytest

from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.errors import NotFoundError, RefusedError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.trust import TrustedState
from memroot.ledger.verify import verify_path
from memroot.memory_root.branches import (
    DAY_US,
    BranchLimits,
    BranchRegistry,
    Expiry,
    close_branch,
    create_branch,
    gc,
    get_branch,
    list_branches,
    set_branch_policy,
)


def _event(i: int, actor: str = "agent") -> EventInput:
    return EventInput(
        stream="s",
        actor_id=actor,
        actor_type="AI_AGENT",
        role="USER",
        content=f"event {i}",
        namespace_id="ns",
    )


def _open(path: Path, limits: BranchLimits | None = None) -> Ledger:
    return Ledger.open(path, hooks=[BranchRegistry(limits)])


@pytest.fixture
def ledger(tmp_path: Path):
    path = tmp_path / "b.ledger"
    Ledger.init(path, origin="example.org/branches", hooks=[BranchRegistry()]).close()
    with _open(path) as led:
        led.append_batch([_event(i) for i in range(5)])
        yield led


@pytest.mark.parametrize(
    "btype,days",
    [("SIMULATION", 7), ("PLANNING", 30), ("COUNTERFACTUAL", 7), ("SANDBOX", 14), ("TEST", 1)],
)
def test_every_branch_type_gets_its_default_expiry(ledger: Ledger, btype: str, days: int):
    """Each of the five branch types is created with its default max age."""
    create, genesis = create_branch(ledger, branch_type=btype, purpose="p", actor_id="u1")
    info = get_branch(ledger, genesis.branch)
    assert info.create_seq == create.seq
    assert info.type == btype and info.expiry.max_age_days == days and info.state == "OPEN"
    assert info.expires_at == info.created_at + days * DAY_US


def test_canonical_is_not_a_branch_type(ledger: Ledger):
    """CANONICAL always exists and cannot be created; an unknown type is refused."""
    for bad in ("CANONICAL", "DREAM"):
        with pytest.raises(ValidationError, match="branch_type"):
            create_branch(ledger, branch_type=bad, purpose="p", actor_id="u1", expiry_days=3)
    assert list_branches(ledger) == []


def test_branch_without_expiry_is_refused(ledger: Ledger):
    """With the namespace default removed, a branch with no expiry policy is refused."""
    set_branch_policy(ledger, "ns", {"SIMULATION": None}, actor_id="admin")
    size = ledger.size()
    with pytest.raises(ValidationError, match="no expiry policy"):
        create_branch(
            ledger, branch_type="SIMULATION", purpose="p", actor_id="u1", namespace_id="ns"
        )
    assert ledger.size() == size
    create_branch(
        ledger,
        branch_type="SIMULATION",
        purpose="p",
        actor_id="u1",
        namespace_id="ns",
        expiry_days=2,
    )
    assert list_branches(ledger)[0].expiry.max_age_days == 2
    with pytest.raises(ValidationError, match="max_age_days"):
        Expiry(0)


def test_namespace_policy_changes_the_default(ledger: Ledger):
    """A BRANCH_POLICY for a namespace sets that namespace's default max age per type."""
    set_branch_policy(ledger, "team", {"PLANNING": 90}, actor_id="admin")
    create_branch(ledger, branch_type="PLANNING", purpose="p", actor_id="u1", namespace_id="team")
    create_branch(ledger, branch_type="PLANNING", purpose="p", actor_id="u1", namespace_id="ns")
    assert [b.expiry.max_age_days for b in list_branches(ledger)] == [90, 30]


def test_per_user_limit_names_limit_and_branches(tmp_path: Path):
    """The 11th open branch of one user is refused, naming the limit and branches to close."""
    path = tmp_path / "l.ledger"
    Ledger.init(path, hooks=[BranchRegistry()]).close()
    with _open(path) as led:
        for i in range(10):
            create_branch(led, branch_type="SIMULATION", purpose=f"idea {i}", actor_id="u1")
        size = led.size()
        with pytest.raises(RefusedError) as err:
            create_branch(led, branch_type="SIMULATION", purpose="one more", actor_id="u1")
        assert "max_concurrent_branches_per_user = 10" in str(err.value)
        assert "idea 0" in str(err.value) and "close or discard" in str(err.value)
        assert led.size() == size
        create_branch(led, branch_type="SIMULATION", purpose="another user", actor_id="u2")


def test_per_system_and_storage_limits(tmp_path: Path):
    """The system-wide count and the per-user storage quota are enforced (configurable)."""
    path = tmp_path / "l.ledger"
    Ledger.init(path, hooks=[BranchRegistry()]).close()
    with _open(path, BranchLimits(per_user=10, per_system=3, storage_mb_per_user=1)) as led:
        create_branch(led, branch_type="SANDBOX", purpose="big", actor_id="u1", branch_id="big")
        led.append(
            EventInput(
                stream="s",
                actor_id="u1",
                actor_type="HUMAN_USER",
                role="USER",
                content="x" * (1024 * 1024 + 10),
                namespace_id="ns",
            ),
            branch="big",
        )
        with pytest.raises(RefusedError, match="branch_storage_quota_per_user_mb = 1"):
            create_branch(led, branch_type="SANDBOX", purpose="p", actor_id="u1")
        create_branch(led, branch_type="SANDBOX", purpose="p", actor_id="u2")
        create_branch(led, branch_type="SANDBOX", purpose="p", actor_id="u3")
        with pytest.raises(RefusedError, match="max_concurrent_branches_per_system = 3"):
            create_branch(led, branch_type="SANDBOX", purpose="p", actor_id="u4")


def test_closed_branch_refuses_appends(ledger: Ledger):
    """After close, discard or archive nothing more lands on the branch; closing twice fails."""
    for action, state in (("CLOSE", "CLOSED"), ("DISCARD", "DISCARDED"), ("ARCHIVE", "ARCHIVED")):
        create_branch(
            ledger,
            branch_type="SIMULATION",
            purpose=action,
            actor_id="u1",
            branch_id=f"b-{action.lower()}",
        )
        name = f"b-{action.lower()}"
        ledger.append(_event(1), branch=name)
        close_branch(ledger, name, action=action, reason="done", actor_id="u1")
        assert get_branch(ledger, name).state == state
        size = ledger.size(name)
        with pytest.raises(RefusedError, match=state):
            ledger.append(_event(2), branch=name)
        assert ledger.size(name) == size
        with pytest.raises(RefusedError, match="already"):
            close_branch(ledger, name, reason="again", actor_id="u1")
    with pytest.raises(NotFoundError):
        close_branch(ledger, "nope", reason="x", actor_id="u1")


def test_branch_create_only_through_fork(ledger: Ledger):
    """A BRANCH_CREATE appended directly (without its chain) is refused."""
    with pytest.raises(RefusedError, match="fork"):
        ledger.append(
            OpInput(
                op_type="BRANCH_CREATE",
                actor_id="u",
                actor_type="AI_AGENT",
                namespace_id="ns",
                payload={"branch_id": "x"},
                policy_version="p",
            )
        )


def test_gc_handles_expiry_force_close_and_is_idempotent(ledger: Ledger):
    """GC archives/discards expired branches, force-closes stale ones, and repeats harmlessly."""
    create_branch(
        ledger,
        branch_type="SIMULATION",
        purpose="a",
        actor_id="u1",
        branch_id="a",
        expiry=Expiry(7, "ARCHIVE_BRANCH"),
    )
    create_branch(
        ledger,
        branch_type="SIMULATION",
        purpose="d",
        actor_id="u1",
        branch_id="d",
        expiry=Expiry(7, "DISCARD_BRANCH"),
    )
    create_branch(ledger, branch_type="PLANNING", purpose="p", actor_id="u1", branch_id="p")
    t0 = max(get_branch(ledger, b).created_at for b in "adp")
    assert gc(ledger, now=t0 + 6 * DAY_US) == []
    done = gc(ledger, now=t0 + 7 * DAY_US + 1)
    assert {(d.branch_id, d.action) for d in done} == {
        ("a", "ARCHIVE_BRANCH"),
        ("d", "DISCARD_BRANCH"),
    }
    assert get_branch(ledger, "a").state == "ARCHIVED"
    assert get_branch(ledger, "d").state == "DISCARDED"
    assert gc(ledger, now=t0 + 7 * DAY_US + 2) == []
    forced = gc(ledger, now=t0 + 37 * DAY_US + 1)
    assert [(d.branch_id, d.action) for d in forced] == [("p", "CLOSE")]
    assert "forced close" in get_branch(ledger, "p").closed_reason


def test_expired_branches_cleaned_within_24_hours(ledger: Ledger):
    """RFC-0012 section 12: with GC run daily, every expired branch is handled within a day."""
    starts = []
    for i in range(5):
        create_branch(
            ledger,
            branch_type="SIMULATION",
            purpose=f"s{i}",
            actor_id=f"u{i}",
            branch_id=f"s{i}",
            expiry_days=i + 1,
        )
        starts.append(get_branch(ledger, f"s{i}").created_at)
    handled: dict[str, int] = {}
    day = min(starts)
    for _ in range(10):
        day += DAY_US
        for action in gc(ledger, now=day):
            handled[action.branch_id] = day
    for i in range(5):
        expires = get_branch(ledger, f"s{i}").expires_at
        assert 0 <= handled[f"s{i}"] - expires < DAY_US


def test_max_events_closes_branch(ledger: Ledger):
    """A branch past its max_events (written by a program without the branch hook, which
    would have refused it) is closed by GC."""
    create_branch(
        ledger,
        branch_type="TEST",
        purpose="t",
        actor_id="u1",
        branch_id="t",
        expiry=Expiry(5, max_events=3),
    )
    ledger.append_batch([_event(i) for i in range(3)], branch="t")
    with Ledger.open(ledger.path, hooks=[]) as raw:
        raw.append(_event(3), branch="t")
    done = gc(ledger, now=get_branch(ledger, "t").created_at + 1)
    assert [(d.branch_id, d.action) for d in done] == [("t", "CLOSE")]


def test_max_events_holds_at_append_not_only_at_gc(ledger: Ledger):
    """Issue 16.2 scenario: a branch created with max_events 2 takes 2 appends; the third
    (single or in a batch) is refused naming the limit and the branch, nothing is written,
    and the branch stays usable for reads and close."""
    create_branch(
        ledger,
        branch_type="SIMULATION",
        purpose="p",
        actor_id="u1",
        branch_id="lim",
        expiry=Expiry(5, max_events=2),
    )
    ledger.append(_event(0), branch="lim")
    with pytest.raises(RefusedError, match=r"max_events = 2.*") as e:
        ledger.append_batch([_event(1), _event(2)], branch="lim")
    assert "'lim'" in str(e.value)
    assert ledger.size("lim") == 2  # genesis + one: the whole batch was refused
    ledger.append(_event(1), branch="lim")
    for i in range(2, 5):
        with pytest.raises(RefusedError, match="limit reached: branch 'lim'"):
            ledger.append(_event(i), branch="lim")
    assert ledger.size("lim") == 3
    close_branch(ledger, "lim", action="CLOSE", reason="full", actor_id="u1")
    assert get_branch(ledger, "lim").state == "CLOSED"


def test_max_storage_mb_holds_at_append(ledger: Ledger):
    """Issue 16.2: an append that would take a branch past max_storage_mb is refused naming
    the limit and the branch; smaller appends before it land."""
    create_branch(
        ledger,
        branch_type="SIMULATION",
        purpose="p",
        actor_id="u1",
        branch_id="mb",
        expiry=Expiry(5, max_storage_mb=1),
    )
    big = "x" * 300_000
    for _ in range(3):
        ledger.append(
            EventInput(
                stream="s",
                actor_id="u1",
                actor_type="AI_AGENT",
                role="USER",
                content=big,
                namespace_id="ns",
            ),
            branch="mb",
        )
    size = ledger.size("mb")
    with pytest.raises(RefusedError, match=r"branch 'mb'.*max_storage_mb = 1"):
        ledger.append(
            EventInput(
                stream="s",
                actor_id="u1",
                actor_type="AI_AGENT",
                role="USER",
                content=big,
                namespace_id="ns",
            ),
            branch="mb",
        )
    assert ledger.size("mb") == size
    ledger.append(_event(9), branch="mb")  # a small one still fits
    # A new process recounts the bytes from the store.
    with _open(ledger.path) as fresh, pytest.raises(RefusedError, match="max_storage_mb"):
        fresh.append(
            EventInput(
                stream="s",
                actor_id="u1",
                actor_type="AI_AGENT",
                role="USER",
                content=big,
                namespace_id="ns",
            ),
            branch="mb",
        )


def test_canonical_unchanged_by_1000_events_on_10_simulation_branches(
    ledger: Ledger, tmp_path: Path
):
    """RFC-0012 section 12 isolation: canonical root, checkpoint and size are byte-identical."""
    names = [f"sim{i}" for i in range(10)]
    for name in names:
        create_branch(ledger, branch_type="SIMULATION", purpose=name, actor_id=name, branch_id=name)
    before = (ledger.size(), ledger.root(), ledger.checkpoint().note)
    for i in range(1000):
        ledger.append(_event(i, names[i % 10]), branch=names[i % 10])
    after = (ledger.size(), ledger.root(), ledger.checkpoint().note)
    assert after == before
    assert sum(ledger.size(n) for n in names) == 1010
    for name in names:
        ledger.checkpoint(name)
    assert verify_path(ledger.path, trusted=TrustedState(tmp_path / "t.json")).ok
