"""LangGraph on memroot from graph threads and asyncio: a saver and a store on one ledger."""

from __future__ import annotations

import asyncio
import itertools
import operator
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph", reason="langgraph is not installed (extra memroot[langgraph])")
conformance = pytest.importorskip(
    "langgraph.checkpoint.conformance",
    reason="langgraph-checkpoint-conformance is not installed (part of the test extra)",
)

from click.testing import CliRunner  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402

import memroot  # noqa: E402
from memroot.cli.main import cli  # noqa: E402
from memroot.integrations.langgraph import (  # noqa: E402
    AsyncMemrootSaver,
    AsyncMemrootStore,
    MemrootSaver,
    MemrootStore,
    ledger_lock,
)
from memroot.ledger.errors import MemrootError  # noqa: E402

_count = itertools.count()


class State(TypedDict):
    n: int
    seen: Annotated[list[int], operator.add]


def _remembering_graph(saver: Any, store: Any) -> Any:
    """A graph whose node writes to the store and searches it (sync node)."""

    def node(state: State, *, store: BaseStore) -> dict[str, Any]:
        store.put(("runs",), f"k{state['n']}", {"n": state["n"]})
        found = store.search(("runs",), limit=1000)
        return {"n": state["n"] + 1, "seen": [len(found)]}

    b = StateGraph(State)
    b.add_node("node", node)
    b.add_edge(START, "node")
    b.add_edge("node", END)
    return b.compile(checkpointer=saver, store=store)


def _async_graph(saver: Any, store: Any) -> Any:
    """The same graph with an async node (``aput``/``asearch``), for ``ainvoke``."""

    async def node(state: State, *, store: BaseStore) -> dict[str, Any]:
        await store.aput(("runs",), f"k{state['n']}", {"n": state["n"]})
        found = await store.asearch(("runs",), limit=1000)
        return {"n": state["n"] + 1, "seen": [len(found)]}

    b = StateGraph(State)
    b.add_node("node", node)
    b.add_edge(START, "node")
    b.add_edge("node", END)
    return b.compile(checkpointer=saver, store=store)


def _verify(path: Path) -> Any:
    return CliRunner().invoke(cli, ["-l", str(path), "verify"], catch_exceptions=False)


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_store_in_nodes_shares_one_memory_under_every_durability(
    tmp_path: Path, durability: Any
) -> None:
    """Saver and store on one Memory, the store used in a node: every invoke succeeds."""
    path = tmp_path / "shared.ledger"
    mem = memroot.open(path)
    saver, store = MemrootSaver(mem), MemrootStore(mem)
    graph = _remembering_graph(saver, store)
    for i in range(12):
        cfg: Any = {"configurable": {"thread_id": f"t{i % 3}"}}
        out = graph.invoke({"n": i, "seen": []}, cfg, durability=durability)
        assert out["n"] == i + 1
        assert out["seen"][-1] == i + 1  # every earlier put is found
    for t in range(3):
        got = saver.get_tuple({"configurable": {"thread_id": f"t{t}"}})
        assert got is not None and got.checkpoint["channel_values"]["n"] == 10 + t
    saver.close()
    store.close()
    store.close()  # twice: no error
    mem.close()
    result = _verify(path)
    assert result.exit_code == 0, result.output


def test_concurrent_ainvoke_on_one_ledger(tmp_path: Path) -> None:
    """Twenty ainvoke calls at once, an async store in every node: all land, verify passes."""
    path = tmp_path / "async.ledger"

    async def main() -> list[Any]:
        mem = await asyncio.to_thread(memroot.open, path)
        saver, store = AsyncMemrootSaver(mem), AsyncMemrootStore(mem)
        graph = _async_graph(saver, store)
        outs = await asyncio.gather(
            *(
                graph.ainvoke({"n": i, "seen": []}, {"configurable": {"thread_id": f"a{i}"}})
                for i in range(20)
            )
        )
        again = await graph.ainvoke({"n": 100, "seen": []}, {"configurable": {"thread_id": "a3"}})
        # The thread's own first run (which saw 1 to 20 puts, by the interleaving), then all.
        assert len(again["seen"]) == 2 and 1 <= again["seen"][0] <= 20 and again["seen"][1] == 21
        keys = {i.key for i in await store.asearch(("runs",), limit=1000)}
        assert keys == {f"k{i}" for i in [*range(20), 100]}
        await asyncio.to_thread(mem.close)
        return outs

    outs = asyncio.run(main())
    assert sorted(o["n"] for o in outs) == list(range(1, 21))
    result = _verify(path)
    assert result.exit_code == 0, result.output


def test_own_code_takes_the_ledger_lock_beside_a_graph(tmp_path: Path) -> None:
    """A node that uses the Memory itself under ledger_lock runs beside background writes."""
    mem = memroot.open(tmp_path / "m.ledger")
    saver = MemrootSaver(mem)

    def node(state: State) -> dict[str, Any]:
        with ledger_lock(mem):
            mem.record(content=f"step {state['n']}")
        return {"n": state["n"] + 1, "seen": []}

    b = StateGraph(State)
    b.add_node("node", node)
    b.add_edge(START, "node")
    b.add_edge("node", END)
    graph = b.compile(checkpointer=saver)
    for i in range(8):
        graph.invoke({"n": i, "seen": []}, {"configurable": {"thread_id": "x"}}, durability="async")
    assert ledger_lock(mem) is ledger_lock(mem.ledger)
    with mem:
        assert mem.verify(trusted=tmp_path / "t.json").ok


def test_async_from_conn_string_and_setup(tmp_path: Path) -> None:
    """AsyncMemrootSaver/AsyncMemrootStore open as async context managers; setup() accepted."""
    path = tmp_path / "a.ledger"

    async def main() -> None:
        async with AsyncMemrootSaver.from_conn_string(path) as saver:
            await saver.setup()
            async with AsyncMemrootStore.from_conn_string(path) as store:
                await store.setup()
                graph = _async_graph(saver, store)
                out = await graph.ainvoke(
                    {"n": 1, "seen": []}, {"configurable": {"thread_id": "t"}}
                )
                assert out == {"n": 2, "seen": [1]}
                got = await saver.aget_tuple({"configurable": {"thread_id": "t"}})
                assert got is not None and got.checkpoint["channel_values"]["n"] == 2

    asyncio.run(main())
    with MemrootStore.from_conn_string(path) as store:
        store.setup()
        item = store.get(("runs",), "k1")
        assert item is not None and item.value == {"n": 1}
    with MemrootSaver.from_conn_string(path) as saver:
        saver.setup()
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is not None


def test_store_ttl_and_index_are_refused_and_nothing_written(tmp_path: Path) -> None:
    """A TTL or an embedding index is NotImplementedError (LangGraph's convention); no entry."""
    path = tmp_path / "s.ledger"
    with MemrootStore.from_conn_string(path) as store:
        size = store.ledger.size()
        with pytest.raises(NotImplementedError, match="TTL"):
            store.put(("a",), "k", {"v": 1}, ttl=5)
        with pytest.raises(NotImplementedError, match="index"):
            store.put(("a",), "k", {"v": 1}, index=["v"])
        assert store.ledger.size() == size
        assert store.supports_ttl is False
    with (
        pytest.raises(NotImplementedError, match="TTL"),
        MemrootStore.from_conn_string(path, ttl={"default_ttl": 5}),
    ):
        pass


def test_use_after_close_is_a_memroot_error(tmp_path: Path) -> None:
    """close() twice is fine; a saver used after close raises a MemrootError, not apsw's."""
    with MemrootSaver.from_conn_string(tmp_path / "c.ledger") as saver:
        pass
    saver.close()
    with pytest.raises(MemrootError, match="closed"):
        saver.get_tuple({"configurable": {"thread_id": "t"}})


def test_async_saver_passes_the_conformance_suite(tmp_path: Path) -> None:
    """AsyncMemrootSaver from from_conn_string passes every capability of the suite."""
    name = f"AsyncMemrootSaver-{next(_count)}"

    @conformance.checkpointer_test(name=name)
    async def factory() -> AsyncIterator[AsyncMemrootSaver]:
        async with AsyncMemrootSaver.from_conn_string(tmp_path / f"a{next(_count)}.ledger") as s:
            yield s

    report = asyncio.run(conformance.validate(factory))
    failures = {c: r.failures for c, r in report.results.items() if not r.detected or not r.passed}
    assert not failures, failures
    assert set(report.results) == {c.value for c in ALL_CAPABILITIES}


def test_close_while_another_thread_reads_is_safe(tmp_path: Path) -> None:
    """close() from one thread while another reads: the reader gets a MemrootError, not apsw's."""
    import threading

    errors: list[BaseException] = []
    done = threading.Event()
    with MemrootSaver.from_conn_string(tmp_path / "c.ledger") as saver:
        cfg: Any = {"configurable": {"thread_id": "t"}}

        def reader() -> None:
            try:
                while not done.is_set():
                    saver.get_tuple(cfg)
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=reader)
        t.start()
        saver.close()
        t.join(timeout=30)
        done.set()
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], MemrootError), errors
