"""LangGraph on memroot: the checkpoint conformance suite, a real graph, strict reads."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import apsw
import pytest

pytest.importorskip("langgraph", reason="langgraph is not installed (extra memroot[langgraph])")
conformance = pytest.importorskip(
    "langgraph.checkpoint.conformance",
    reason="langgraph-checkpoint-conformance is not installed (part of the test extra)",
)

from click.testing import CliRunner  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402

import memroot  # noqa: E402
from memroot.cli.main import cli  # noqa: E402
from memroot.integrations.langgraph import MemrootSaver, MemrootStore  # noqa: E402
from memroot.ledger.errors import IntegrityError, ValidationError  # noqa: E402

_count = itertools.count()


def _report(tmp_path: Path) -> Any:
    """Run the conformance suite over fresh ledgers; return its report."""
    name = f"MemrootSaver-{next(_count)}"

    @conformance.checkpointer_test(name=name)
    async def factory() -> AsyncIterator[MemrootSaver]:
        path = tmp_path / f"cp-{next(_count)}.ledger"
        with MemrootSaver.from_conn_string(path) as saver:
            yield saver

    return asyncio.run(conformance.validate(factory))


def test_conformance_every_capability(tmp_path: Path) -> None:
    """The saver implements every capability of the suite and passes every test of each."""
    report = _report(tmp_path)
    failures = {
        cap: (r.failures, r.detected)
        for cap, r in report.results.items()
        if not r.detected or not r.passed
    }
    assert not failures, failures
    assert set(report.results) == {c.value for c in ALL_CAPABILITIES}
    assert all(r.tests_passed > 0 and r.tests_failed == 0 for r in report.results.values())


def _graph(saver: MemrootSaver) -> Any:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        count: int
        log: list[str]

    def step(state: State) -> dict[str, Any]:
        return {"count": state["count"] + 1, "log": [*state["log"], f"step {state['count']}"]}

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def _verify(path: Path) -> Any:
    return CliRunner().invoke(cli, ["-l", str(path), "verify"], catch_exceptions=False)


def test_graph_runs_resumes_and_verifies(tmp_path: Path) -> None:
    """A graph's checkpoints land in the ledger, a reopened saver resumes them, verify passes."""
    path = tmp_path / "graph.ledger"
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    with MemrootSaver.from_conn_string(path) as saver:
        out = _graph(saver).invoke({"count": 0, "log": []}, cfg)
        assert out["count"] == 1
    with MemrootSaver.from_conn_string(path) as saver:
        graph = _graph(saver)
        state = graph.get_state(cfg)
        assert state.values["count"] == 1
        out = graph.invoke({"count": state.values["count"], "log": state.values["log"]}, cfg)
        assert out["log"] == ["step 0", "step 1"]
        assert len(list(saver.list(cfg))) >= 4
    result = _verify(path)
    assert result.exit_code == 0, result.output
    assert "OK: every step holds" in result.output


def _tamper(path: Path, sql: str, *args: Any) -> None:
    db = apsw.Connection(str(path))
    db.execute(sql, args)
    assert db.changes() >= 1
    db.close()


def _checkpoint_key(path: Path) -> int:
    db = apsw.Connection(str(path))
    seq = db.execute("SELECT seq FROM lg_checkpoints ORDER BY id DESC LIMIT 1").fetchone()[0]
    no = db.execute("SELECT no FROM branches WHERE name = 'main'").fetchone()[0]
    db.close()
    return int(no) << 40 | int(seq)  # the entries.k of that entry (ledger/backends/store.py)


def _saved_once(tmp_path: Path, count: int) -> tuple[Path, Any, int]:
    """One graph run from ``count`` on thread t1 of a new ledger, closed: its path, the
    thread's config and the entries.k of the newest checkpoint's entry."""
    path = tmp_path / "g.ledger"
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    with MemrootSaver.from_conn_string(path) as saver:
        _graph(saver).invoke({"count": count, "log": []}, cfg)
    return path, cfg, _checkpoint_key(path)


def test_checkpoint_content_tampered_is_refused(tmp_path: Path) -> None:
    """Content changed in the file: get_tuple raises IntegrityError (step 4) instead of serving."""
    path, cfg, k = _saved_once(tmp_path, 41)
    _tamper(
        path,
        "UPDATE entries SET content = CAST(REPLACE(CAST(content AS TEXT), 'checkpoint_ns', "
        "'checkpoint_nz') AS BLOB) WHERE k = ?",
        k,
    )
    # Refused where the saver folds its private index (on open), never served.
    with (
        pytest.raises(IntegrityError, match="commitment") as e,
        MemrootSaver.from_conn_string(path) as saver,
    ):
        saver.get_tuple(cfg)
    assert e.value.step == 4


def test_checkpoint_entry_bytes_tampered_is_refused(tmp_path: Path) -> None:
    """Entry bytes rewritten (hash column too): the proof against the signed tree fails."""
    path, cfg, k = _saved_once(tmp_path, 1)
    db = apsw.Connection(str(path))
    data = bytes(db.execute("SELECT data FROM entries WHERE k = ?", (k,)).fetchone()[0])
    db.close()
    forged = data.replace(b"SYSTEM", b"SYSTEX")
    assert forged != data
    from memroot.ledger.hashing import leaf_hash

    _tamper(path, "UPDATE entries SET data = ?, hash = ? WHERE k = ?", forged, leaf_hash(forged), k)
    # The ledger's strict reads may refuse it while the saver opens (folding its index), or
    # the saver's own check at get_tuple: never is the forged checkpoint served.
    with pytest.raises(IntegrityError) as e, MemrootSaver.from_conn_string(path) as saver:
        saver.get_tuple(cfg)
    assert e.value.step in (1, 5)


def test_delete_thread_erases_and_still_verifies(tmp_path: Path) -> None:
    """delete_thread appends TOMBSTONEs: the thread is gone, its content erased, verify passes."""
    path = tmp_path / "g.ledger"
    cfg: Any = {"configurable": {"thread_id": "gone"}}
    keep: Any = {"configurable": {"thread_id": "kept"}}
    with MemrootSaver.from_conn_string(path) as saver:
        _graph(saver).invoke({"count": 0, "log": []}, cfg)
        _graph(saver).invoke({"count": 5, "log": []}, keep)
        saver.delete_thread("gone")
        assert saver.get_tuple(cfg) is None
        assert saver.get_tuple(keep) is not None
        types = [e.type for e in saver.ledger.entries()]
        assert "TOMBSTONE" in types
    result = _verify(path)
    assert result.exit_code == 0, result.output


def test_index_refolds_from_the_ledger(tmp_path: Path) -> None:
    """The lookup tables are a cache: dropped, they are rebuilt from the entries."""
    path = tmp_path / "g.ledger"
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    with MemrootSaver.from_conn_string(path) as saver:
        _graph(saver).invoke({"count": 7, "log": []}, cfg)
        before = saver.get_tuple(cfg)
    db = apsw.Connection(str(path))
    for t in ("lg_checkpoints", "lg_writes", "lg_heads"):
        db.execute(f"DROP TABLE {t}")
    db.close()
    with MemrootSaver.from_conn_string(path) as saver:
        after = saver.get_tuple(cfg)
    assert before is not None and after is not None
    assert after.checkpoint == before.checkpoint and after.config == before.config


def test_facade_and_saver_share_a_ledger(tmp_path: Path) -> None:
    """A Memory and a saver on one file: both kinds of entries, one chain."""
    path = tmp_path / "shared.ledger"
    with memroot.open(path) as mem:
        saver = MemrootSaver(mem)
        _graph(saver).invoke({"count": 0, "log": []}, {"configurable": {"thread_id": "x"}})
        said = mem.record(content="hello")
        assert mem.ledger.entry(said.seq).type == "EVENT"
        assert mem.verify(trusted=tmp_path / "t.json").ok


# -- the store -------------------------------------------------------------------------------


def _store(tmp_path: Path) -> tuple[memroot.Memory, MemrootStore]:
    mem = memroot.open(tmp_path / "store.ledger")
    return mem, MemrootStore(mem)


def test_store_put_get_search_list(tmp_path: Path) -> None:
    """Items round-trip; search filters by prefix, value fields and words; namespaces list."""
    mem, store = _store(tmp_path)
    with mem:
        store.put(("users", "alice"), "tea", {"drink": "tea", "sugar": 0, "note": "No sugar"})
        store.put(("users", "alice"), "walk", {"drink": None, "km": 5})
        store.put(("users", "bob"), "tea", {"drink": "coffee", "sugar": 2})
        first = store.get(("users", "alice"), "tea")
        assert first is not None and first.value["note"] == "No sugar"
        store.put(("users", "alice"), "tea", {"drink": "tea", "sugar": 1})
        again = store.get(("users", "alice"), "tea")
        assert again is not None and again.value["sugar"] == 1
        assert again.created_at == first.created_at and again.updated_at >= first.updated_at
        assert store.get(("users", "carol"), "tea") is None
        keys = {(i.namespace, i.key) for i in store.search(("users",))}
        assert len(keys) == 3
        assert [i.key for i in store.search(("users", "alice"), filter={"km": {"$gte": 5}})] == [
            "walk"
        ]
        assert [i.namespace for i in store.search(("users",), query="COFFEE")] == [("users", "bob")]
        assert len(store.search(("users",), limit=1, offset=1)) == 1
        assert store.list_namespaces() == [("users", "alice"), ("users", "bob")]
        assert store.list_namespaces(suffix=("bob",)) == [("users", "bob")]
        assert store.list_namespaces(max_depth=1) == [("users",)]


def test_store_delete_tombstones_every_version(tmp_path: Path) -> None:
    """delete erases the content of every version with TOMBSTONEs; verify still passes."""
    mem, store = _store(tmp_path)
    with mem:
        store.put(("u",), "k", {"v": 1})
        store.put(("u",), "k", {"v": 2})
        store.delete(("u",), "k")
        assert store.get(("u",), "k") is None
        erased = [e for e in mem.ledger.entries() if e.type == "TOMBSTONE"]
        assert len(erased) == 2
        puts = [e for e in mem.ledger.entries() if e.type == "EVENT"]
        assert all(mem.ledger.content(e.seq) is None for e in puts)
        assert mem.verify(trusted=tmp_path / "t.json").ok


def test_store_tampered_item_is_refused(tmp_path: Path) -> None:
    """A stored item whose content was edited in the file is refused, not returned."""
    mem, store = _store(tmp_path)
    with mem:
        store.put(("u",), "k", {"v": "honest"})
    _tamper(
        tmp_path / "store.ledger",
        "UPDATE entries SET content = CAST(REPLACE(CAST(content AS TEXT), 'honest', 'forged') "
        "AS BLOB) WHERE content IS NOT NULL",
    )
    # Refused where the store folds its private index (on open), never returned.
    with (
        memroot.open(tmp_path / "store.ledger") as mem,
        pytest.raises(IntegrityError, match="commitment"),
    ):
        MemrootStore(mem).get(("u",), "k")


def test_store_async_and_bad_value(tmp_path: Path) -> None:
    """The async API works; a value that is not a JSON object is refused and nothing lands."""
    mem, store = _store(tmp_path)
    with mem:

        async def run() -> Any:
            await store.aput(("a",), "x", {"n": 1})
            return await store.aget(("a",), "x")

        got = asyncio.run(run())
        assert got is not None and got.value == {"n": 1}
        size = mem.ledger.size()
        with pytest.raises(ValidationError):
            store.put(("a",), "y", {"when": object()})
        assert mem.ledger.size() == size


@pytest.mark.parametrize(
    ("marker", "ledger"),
    [
        ("langgraph", "graph.ledger"),
        ("langgraph-store", "agent.ledger"),
        ("langgraph-async", "async.ledger"),
    ],
)
def test_readme_example_runs_and_verifies(tmp_path: Path, marker: str, ledger: str) -> None:
    """Each README LangGraph example runs as written; `memroot verify` passes on its ledger."""
    import os
    import re
    import subprocess
    import sys

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    m = re.search(rf"<!-- example: {marker} -->\n```python\n(.*?)```", text, re.S)
    assert m is not None
    env = {**os.environ, "MEMROOT_TRUSTED": str(tmp_path / "trusted.json")}
    subprocess.run([sys.executable, "-c", m.group(1)], cwd=tmp_path, env=env, check=True)
    result = _verify(tmp_path / ledger)
    assert result.exit_code == 0, result.output


def _channel_types(saver: MemrootSaver, thread: str) -> list[str]:
    """The stored type of every channel value of a thread's newest checkpoint entry."""
    row = saver._rows(
        "SELECT seq FROM lg_checkpoints WHERE thread = ? ORDER BY id DESC, seq DESC LIMIT 1",
        (thread,),
    )
    return [typ for _ch, _v, typ, _d in saver._content(int(row[0][0]))["channels"]]


def test_unchanged_channels_are_stored_once_and_erasing_keeps_what_stays(tmp_path: Path) -> None:
    """A checkpoint refers to its parent's entry for unchanged values; prune, delete_for_runs
    and deleting a copied thread's source leave every remaining checkpoint whole."""
    path = tmp_path / "d.ledger"
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    with MemrootSaver.from_conn_string(path) as saver:
        graph = _graph(saver)
        runs = [uuid.uuid4() for _ in range(3)]
        for i, run in enumerate(runs):
            graph.invoke(
                {"count": i, "log": ["x" * 200]}, {**cfg, "metadata": {"run_id": str(run)}}
            )
        assert "ref" in _channel_types(saver, "t1")  # the end checkpoint repeats no value
        want = saver.get_tuple(cfg)
        assert want is not None
        saver.copy_thread("t1", "t2")
        assert "ref" not in _channel_types(saver, "t2")
        assert str(runs[0]) in {str(t.metadata.get("run_id")) for t in saver.list(cfg)}
        saver.delete_for_runs([str(runs[0])])
        saver.prune(["t1"], strategy="keep_latest")
        got = saver.get_tuple(cfg)
        assert got is not None
        assert got.checkpoint["channel_values"] == want.checkpoint["channel_values"]
        assert [t.checkpoint["id"] for t in saver.list(cfg)] == [want.checkpoint["id"]]
        saver.delete_thread("t1")
        copied = saver.get_tuple({"configurable": {"thread_id": "t2"}})
        assert copied is not None
        assert copied.checkpoint["channel_values"] == want.checkpoint["channel_values"]
    result = _verify(path)
    assert result.exit_code == 0, result.output


def test_malformed_checkpoint_event_is_an_integrity_error(tmp_path: Path) -> None:
    """A signed langgraph.checkpoint event without its fields: IntegrityError, no traceback."""
    from memroot.integrations.langgraph import _index
    from memroot.memory_root import Roots

    path = tmp_path / "m.ledger"
    with memroot.open(path) as mem:
        bad = _index.event(
            "langgraph.checkpoint",
            {"thread_id": "t1"},
            actor="someone",
            actor_type="AI_AGENT",
            namespace="langgraph",
        )
        with mem.ledger.write():
            Roots(mem.ledger).append_batch([bad])
    with pytest.raises(IntegrityError, match="well-formed"), MemrootSaver.from_conn_string(path):
        pass
    result = CliRunner().invoke(cli, ["-l", str(path), "verify"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    rebuilt = CliRunner().invoke(cli, ["-l", str(path), "rebuild", "--json"])
    assert rebuilt.exit_code == 0, rebuilt.output


def _saver_statements(saver: MemrootSaver, run: Any) -> list[str]:
    """Run ``run()`` and return the SQL statements the saver's ledger connection ran."""
    seen: list[str] = []

    def trace(_cursor: apsw.Cursor, sql: str, _bindings: Any) -> bool:
        seen.append(" ".join(sql.split()))
        return True

    db = saver.ledger.store.db
    db.exec_trace = trace
    try:
        run()
    finally:
        db.exec_trace = None
    return seen


def test_a_write_reads_the_head_from_memory_and_data_version_once(tmp_path: Path) -> None:
    """After the first invoke, each put/put_writes reads no branch row and data_version once."""
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    with MemrootSaver.from_conn_string(tmp_path / "w.ledger") as saver:
        graph = _graph(saver)
        graph.invoke({"count": 0, "log": []}, cfg, durability="sync")
        seen = _saver_statements(
            saver, lambda: graph.invoke({"count": 1, "log": []}, cfg, durability="sync")
        )
        writes = seen.count("BEGIN IMMEDIATE")
        assert writes == 5 and seen.count("COMMIT") == writes  # 3 puts, 2 put_writes
        # One read of data_version per write (inside it) and one for the get_tuple that
        # starts the invoke; the head, the key set and the seal states come from memory.
        assert seen.count("PRAGMA data_version") == writes + 1
        assert not [s for s in seen if s.startswith("SELECT") and "FROM branches" in s]
        assert not [s for s in seen if s.startswith("SELECT") and "FROM entries" in s]
        assert not [s for s in seen if "sqlite_master" in s]
        assert saver.get_tuple(cfg).checkpoint["channel_values"]["count"] == 2
