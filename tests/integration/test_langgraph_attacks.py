"""Attacks on an open LangGraph saver and store: an editor of the file, in its own process.

Each test keeps a saver (or store) open as a long-running graph process would, runs the
attacker (tests/integration/_langgraph_attacker.py) as a separate process on the same file,
and asserts the refusal (``IntegrityError``), that nothing tampered was served, that nothing
was signed or written, and that the honest ledger is untouched (after ``memroot rebuild``,
where the attack touched only derived tables, the honest newest checkpoint is served again).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest

pytest.importorskip("langgraph", reason="langgraph is not installed (extra memroot[langgraph])")

from click.testing import CliRunner
from langgraph.graph import END, START, StateGraph

import memroot
from memroot.cli.main import cli
from memroot.integrations.langgraph import MemrootSaver, MemrootStore
from memroot.ledger.errors import IntegrityError

ATTACKER = Path(__file__).with_name("_langgraph_attacker.py")
FORGED_ID = "ffffffff-ffff-6fff-8fff-ffffffffffff"
CFG: Any = {"configurable": {"thread_id": "t1"}}


def _attack(action: str, path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(ATTACKER), action, str(path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return dict(json.loads(done.stdout))


def _graph(saver: MemrootSaver) -> Any:
    from typing import TypedDict

    class State(TypedDict):
        count: int

    def step(state: State) -> dict[str, Any]:
        return {"count": state["count"] + 1}

    b = StateGraph(State)
    b.add_node("step", step)
    b.add_edge(START, "step")
    b.add_edge("step", END)
    return b.compile(checkpointer=saver)


def _signed(path: Path) -> list[tuple[int, int]]:
    """Every stored signed checkpoint (branch no, size)."""
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [(int(b), int(s)) for b, s in db.execute("SELECT branch, size FROM checkpoints")]
    finally:
        db.close()


def _entries(path: Path) -> dict[int, bytes]:
    """Every stored entry's bytes, by key."""
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {int(k): bytes(d) for k, d in db.execute("SELECT k, data FROM entries")}
    finally:
        db.close()


def _cli(path: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def _run_three(saver: MemrootSaver) -> str:
    """Three invokes on thread t1; return the newest checkpoint id."""
    graph = _graph(saver)
    for i in range(3):
        graph.invoke({"count": i * 10}, CFG)
    got = saver.get_tuple(CFG)
    assert got is not None
    return str(got.checkpoint["id"])


@pytest.mark.parametrize("action", ["delete-newest-checkpoint-row", "point-newest-at-older-entry"])
def test_saver_lookup_row_edited_while_open_is_refused(tmp_path: Path, action: str) -> None:
    """The newest checkpoint's lookup row deleted or moved under an open saver: refused."""
    path = tmp_path / "g.ledger"
    with MemrootSaver.from_conn_string(path) as saver:
        newest = _run_three(saver)
        before, signed = _entries(path), _signed(path)
        _attack(action, path)
        with pytest.raises(IntegrityError, match="lg_checkpoints") as e:
            saver.get_tuple(CFG)
        assert e.value.step == 9
        with pytest.raises(IntegrityError):
            list(saver.list(CFG))
        with pytest.raises(IntegrityError):  # nor written over an edited index
            _graph(saver).invoke({"count": 99}, CFG)
        assert _entries(path) == before and _signed(path) == signed
    verify = _cli(path, "verify")
    assert verify.exit_code == 1 and "lg_checkpoints" in verify.output, verify.output
    assert _cli(path, "rebuild").exit_code == 0
    assert _cli(path, "verify").exit_code == 0
    with MemrootSaver.from_conn_string(path) as saver:
        got = saver.get_tuple(CFG)
        assert got is not None and got.checkpoint["id"] == newest


def test_saver_newest_content_removed_while_open_is_refused(tmp_path: Path) -> None:
    """The newest checkpoint's content removed (no TOMBSTONE) under an open saver: refused."""
    path = tmp_path / "g.ledger"
    with MemrootSaver.from_conn_string(path) as saver:
        _run_three(saver)
        signed = _signed(path)
        _attack("remove-newest-checkpoint-content", path)
        with pytest.raises(IntegrityError, match="TOMBSTONE") as e:
            saver.get_tuple(CFG)
        assert e.value.step == 4
        with pytest.raises(IntegrityError):
            list(saver.list(CFG))
        assert _signed(path) == signed
    assert _cli(path, "verify").exit_code == 1


def test_saver_lookup_row_deleted_fresh_saver_is_refused(tmp_path: Path) -> None:
    """The newest row deleted while no saver runs: the next saver refuses, never rolls back."""
    path = tmp_path / "g.ledger"
    with MemrootSaver.from_conn_string(path) as saver:
        newest = _run_three(saver)
    before = _entries(path)
    _attack("delete-newest-checkpoint-row", path)
    with (
        pytest.raises(IntegrityError, match="lg_checkpoints"),
        MemrootSaver.from_conn_string(path) as saver,
    ):
        saver.get_tuple(CFG)
    assert _entries(path) == before
    assert _cli(path, "rebuild").exit_code == 0
    with MemrootSaver.from_conn_string(path) as saver:
        got = saver.get_tuple(CFG)
        assert got is not None and got.checkpoint["id"] == newest


def test_saver_forged_checkpoint_and_moved_head_is_refused_unsigned(tmp_path: Path) -> None:
    """A forged checkpoint entry appended and the head moved on it: refused, never signed."""
    path = tmp_path / "g.ledger"
    with MemrootSaver.from_conn_string(path) as saver:
        newest = _run_three(saver)
        honest, signed = _entries(path), _signed(path)
        forged = _attack("forge-checkpoint", path)
        with pytest.raises(IntegrityError) as e:
            saver.get_tuple(CFG)
        assert e.value.step == 6  # entries no signed checkpoint covers
        with pytest.raises(IntegrityError):
            _graph(saver).invoke({"count": 5}, CFG)
        with pytest.raises(IntegrityError):
            list(saver.list(None))
        assert _signed(path) == signed  # the saver signed nothing over the forgery
        now = _entries(path)
        assert {k: v for k, v in now.items() if k in honest} == honest
        assert len(now) == len(honest) + 1  # only the attacker's entry was added
    assert _cli(path, "verify").exit_code == 1
    _cli(path, "rebuild")
    assert _signed(path) == signed
    with pytest.raises(IntegrityError), MemrootSaver.from_conn_string(path) as saver:
        got = saver.get_tuple(CFG)
        assert got is None or got.checkpoint["id"] != FORGED_ID
    assert forged["forged_seq"] > 0 and newest != FORGED_ID


def test_store_newest_version_row_deleted_while_open_is_refused(tmp_path: Path) -> None:
    """The store's row of an item's newest version deleted under an open store: refused."""
    path = tmp_path / "s.ledger"
    with memroot.open(path) as mem:
        store = MemrootStore(mem)
        store.put(("u",), "k", {"v": "old"})
        store.put(("u",), "k", {"v": "new"})
        before, signed = _entries(path), _signed(path)
        _attack("delete-newest-store-row", path)
        with pytest.raises(IntegrityError, match="lg_store"):
            store.get(("u",), "k")
        with pytest.raises(IntegrityError):
            store.search(("u",))
        with pytest.raises(IntegrityError):
            store.put(("u",), "other", {"v": 1})
        assert _entries(path) == before and _signed(path) == signed
    assert _cli(path, "verify").exit_code == 1
    assert _cli(path, "rebuild").exit_code == 0
    with MemrootStore.from_conn_string(path) as store:
        item = store.get(("u",), "k")
        assert item is not None and item.value == {"v": "new"}


def test_store_forged_item_and_moved_head_is_refused_unsigned(tmp_path: Path) -> None:
    """A forged store version appended and the head moved on it: refused, never signed."""
    path = tmp_path / "s.ledger"
    with MemrootStore.from_conn_string(path) as store:
        store.put(("u",), "k", {"v": "honest"})
        honest, signed = _entries(path), _signed(path)
        _attack("forge-store-item", path)
        with pytest.raises(IntegrityError) as e:
            store.get(("u",), "k")
        assert e.value.step == 6
        with pytest.raises(IntegrityError):
            store.put(("u",), "k2", {"v": 2})
        assert _signed(path) == signed
        now = _entries(path)
        assert {k: v for k, v in now.items() if k in honest} == honest
        assert len(now) == len(honest) + 1
    assert _cli(path, "verify").exit_code == 1
