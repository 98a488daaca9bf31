"""The whole facade (issue 25.3): state changes, erasure, branches, closing, defaults, names.

Every refusal is checked to leave the ledger as it was: same size on every branch, same head.
"""

from __future__ import annotations

import pydoc
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import memroot
from memroot.ledger.errors import (
    ClosedError,
    MemrootError,
    NotFoundError,
    RefusedError,
    ValidationError,
)
from memroot.projections.rules import RuleError


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[memroot.Memory]:
    with memroot.open(tmp_path / "a.ledger", actor="agent-7", namespace="alice") as m:
        yield m


def _said_and_fact(mem: memroot.Memory) -> tuple[str, str]:
    said = mem.record(content="I take tea", actor="alice", actor_type="HUMAN_USER", role="USER")
    fact = mem.remember("Alice takes tea", evidence=[said.id])
    return said.id, fact.id


def _heads(mem: memroot.Memory) -> dict[str, tuple[int, bytes]]:
    return {b.name: (b.size, bytes(b.head)) for b in mem.ledger.store.branches()}


def _refused(mem: memroot.Memory, error: type[Exception], call: Callable[[], Any]) -> str:
    """Run ``call``, expect ``error``, and check that nothing was written."""
    before = _heads(mem)
    with pytest.raises(error) as e:
        call()
    assert _heads(mem) == before
    return str(e.value)


def test_mark_stale_then_restore(mem: memroot.Memory) -> None:
    """mark_stale makes a live object stale and restore makes it live, each one entry."""
    _, fact = _said_and_fact(mem)
    stale = mem.mark_stale(fact, "re-check the source")
    assert stale.type == "MARK_STALE" and mem.state(fact) == "stale"
    assert mem.ledger.entry(stale.seq).body["actor_id"] == "agent-7"
    back = mem.restore(fact, "source confirmed")
    assert back.type == "RESTORE" and back.seq == stale.seq + 1 and mem.state(fact) == "live"


def test_restore_of_live_item_is_refused(mem: memroot.Memory) -> None:
    """Restoring a live object is refused and writes nothing."""
    _, fact = _said_and_fact(mem)
    _refused(mem, RefusedError, lambda: mem.restore(fact, "nothing to undo"))


def test_restore_with_cascade_undoes_the_cascade(mem: memroot.Memory) -> None:
    """restore(cascade=True) writes one RESTORE that makes the cascade's stale items live."""
    _, fact = _said_and_fact(mem)
    root = mem.snapshot().record.root.hex()
    mem.falsify(fact, "wrong")
    mem.cascade(fact, reason="propagate")
    assert mem.state(root) == "stale"
    done = mem.restore(fact, "it was right", cascade=True, max_depth=3)
    assert done.type == "RESTORE"
    assert mem.state(fact) == "live" and mem.state(root) == "live"


def test_forget_needs_a_dependents_policy(mem: memroot.Memory) -> None:
    """forget of cited evidence is refused without on_dependents; with it, content is erased."""
    said, _ = _said_and_fact(mem)
    message = _refused(
        mem, RuleError, lambda: mem.forget(said, "asked to", policy_ref="gdpr-art-17")
    )
    assert "on_dependents" in message
    _refused(
        mem,
        ValidationError,
        lambda: mem.forget(said, "asked to", policy_ref="gdpr-art-17", on_dependents="DROP"),
    )
    seq = next(e.seq for e in mem.ledger.entries(0, None) if e.body.get("id") == said)
    tomb = mem.forget(said, "asked to", policy_ref="gdpr-art-17", on_dependents="deprecate")
    assert tomb.type == "TOMBSTONE"
    assert mem.ledger.entry(tomb.seq).body["payload"]["on_dependents"] == "DEPRECATE"
    assert mem.ledger.content(seq) is None
    assert [r.object.id for r in mem.recall(text="tea")] == []
    assert mem.verify(update_trusted=False).ok


def test_forget_of_an_unknown_event_is_refused(mem: memroot.Memory) -> None:
    """forget of an event the ledger does not hold is refused and writes nothing."""
    _said_and_fact(mem)
    unknown = "0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6b"
    _refused(mem, RefusedError, lambda: mem.forget(unknown, "x", policy_ref="p"))


def test_branches_close_and_discard(mem: memroot.Memory) -> None:
    """branches lists forks by state; close_branch and discard_branch end them."""
    _said_and_fact(mem)
    a = mem.fork("plan A", branch_type="planning", expiry_days=3)
    b = mem.fork("what if", branch_type="Simulation", expiry_days=3)
    assert [i.branch_id for i in mem.branches()] == [a, b]
    assert {i.branch_id: i.type for i in mem.branches()} == {a: "PLANNING", b: "SIMULATION"}
    assert mem.close_branch(a, "done").type == "BRANCH_CLOSE"
    assert mem.discard_branch(b, "dead end").type == "BRANCH_CLOSE"
    assert [i.branch_id for i in mem.branches(state="closed")] == [a]
    assert [i.branch_id for i in mem.branches(state="DISCARDED")] == [b]
    assert mem.branches(state="open") == []
    _refused(mem, RefusedError, lambda: mem.close_branch(a, "again"))
    _refused(mem, NotFoundError, lambda: mem.discard_branch("no-such-branch", "x"))
    _refused(mem, ValidationError, lambda: mem.branches(state="gone"))


def test_close_twice_and_use_after_close(tmp_path: Path) -> None:
    """close() twice is fine; any use after it raises ClosedError, a MemrootError."""
    m = memroot.open(tmp_path / "a.ledger")
    m.record(content="hello")
    m.close()
    m.close()
    assert m.closed
    for call in (
        lambda: m.recall(text="hello"),
        lambda: m.record(content="again"),
        lambda: m.verify(),
        lambda: m.branches(),
        lambda: m.path,
        lambda: m.ledger,
    ):
        with pytest.raises(ClosedError) as e:
            call()
        assert isinstance(e.value, MemrootError) and "closed" in str(e.value)
    with memroot.open(tmp_path / "a.ledger") as again:
        assert again.ledger.size() == 2


def test_record_op_takes_the_memory_defaults(mem: memroot.Memory) -> None:
    """record({"kind": "op"}) fills actor, actor type, namespace and policy from the memory."""
    _, fact = _said_and_fact(mem)
    r = mem.record(
        {"kind": "op", "op_type": "DEPRECATE", "target_id": fact},
        payload={"reason": "old", "deprecated_by": "agent-7"},
    )
    body = mem.ledger.entry(r.seq).body
    assert body["actor_id"] == "agent-7" and body["namespace_id"] == "alice"
    assert body["actor_type"] == "AI_AGENT" and body["policy_version"] == mem.policy_version
    _, other = _said_and_fact(mem)
    op = mem.record(
        {"kind": "op", "op_type": "DEPRECATE", "actor": "bob", "target_id": other},
        payload={"reason": "outdated", "deprecated_by": "bob"},
    )
    assert mem.ledger.entry(op.seq).body["actor_id"] == "bob"
    _refused(
        mem,
        ValidationError,
        lambda: mem.record({"kind": "op", "op_type": "DEPRECATE", "actor": "a", "actor_id": "b"}),
    )


def test_dir_and_help_show_the_api() -> None:
    """dir(memroot) and help(memroot) list open, Memory and the errors, no typing names."""
    names = dir(memroot)
    for wanted in ("open", "Memory", "MemrootError", "IntegrityError", "ClosedError"):
        assert wanted in names
    for leaked in ("Any", "TYPE_CHECKING", "annotations"):
        assert leaked not in names
    text = pydoc.render_doc(memroot, renderer=pydoc.plaintext)
    assert "open_memory(" in text and "class Memory" in text and "class ClosedError" in text
    assert "TYPE_CHECKING" not in text


def test_help_in_a_fresh_process_lists_the_api() -> None:
    """help(memroot) in a new interpreter shows the API (the lazy names load for it)."""
    out = subprocess.run(
        [sys.executable, "-c", "import memroot; help(memroot)"],
        capture_output=True,
        text=True,
        check=True,
        env={"PAGER": "cat", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert "class Memory" in out and "forget(self" in out and "Any = typing.Any" not in out


def test_errors_name_parameters_not_options(mem: memroot.Memory) -> None:
    """A fork with no expiry policy names expiry_days, not the CLI's --expiry-days."""
    _said_and_fact(mem)
    from memroot.memory_root.branches import set_branch_policy

    set_branch_policy(mem.ledger, "alice", {"PLANNING": None}, actor_id="agent-7")
    message = _refused(mem, ValidationError, lambda: mem.fork("plan", branch_type="PLANNING"))
    assert "expiry_days" in message and "--" not in message


def test_enum_values_any_case(mem: memroot.Memory) -> None:
    """Every enum parameter of the facade takes any case and writes the canonical form."""
    said = mem.record(content="tea please", actor_type="human_user", role="USER")
    fact = mem.remember(
        "tea",
        evidence=[said.id],
        object_type="preference",
        epistemic_type="Observed",
        source_type="user_stated",
    )
    body = mem.ledger.entry(fact.seq).body["payload"]
    assert (body["object_type"], body["epistemic_type"], body["source_type"]) == (
        "PREFERENCE",
        "OBSERVED",
        "USER_STATED",
    )
    assert [r.object.id for r in mem.recall(types=["Preference"], mode="audit")] == [fact.id]
    message = _refused(mem, ValidationError, lambda: mem.recall(mode="loud"))
    assert "DEFAULT" in message and "mode" in message
    _refused(mem, ValidationError, lambda: mem.fork("x", branch_type="holiday"))


def test_library_calls_take_any_case_too(mem: memroot.Memory) -> None:
    """The layers under the facade apply the same rule: branch type, state, kinds, strategy."""
    from memroot.memory_root.branches import create_branch, list_branches
    from memroot.memory_root.falsify import parse_kinds
    from memroot.memory_root.merge import merge_branch

    _, genesis = create_branch(
        mem.ledger, branch_type="planning", purpose="p", actor_id="a", expiry_days=2
    )
    assert [b.type for b in list_branches(mem.ledger, state="Open")] == ["PLANNING"]
    assert parse_kinds("OBJECT,Root") == parse_kinds("object,root")
    said = mem.record(content="on the branch", branch=genesis.branch)
    fact = mem.remember("a plan", evidence=[said.id], branch=genesis.branch)
    merged = merge_branch(
        mem.ledger, genesis.branch, [fact.id], strategy="preserve_both", actor_id="a"
    )
    assert merged is not None
    message = _refused(mem, ValidationError, lambda: list_branches(mem.ledger, state="shut"))
    assert "OPEN" in message
