"""The layers above the ledger on PostgreSQL: the derived state lives in a local cache file.

The same commands give the same output on a PostgreSQL ledger as on a ledger file; two hosts
(two cache files) appending to one ledger each see what the other appended before
validating; a deleted cache is rebuilt, a foreign or stale one is detected and rebuilt, and a
cache commit lost after PostgreSQL's commit is replayed.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner

from memroot.cli.main import cli
from memroot.ledger import _appending as appending_module
from memroot.ledger import entries as entries_module
from memroot.ledger import ledger as ledger_module
from memroot.ledger.backends.pg import DerivedCache
from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.errors import RefusedError, StorageError
from memroot.ledger.ledger import Ledger
from memroot.ledger.signing import Ed25519Signer
from memroot.memory_root import branches as branches_module
from memroot.memory_root import divergence as divergence_module
from memroot.memory_root import merge as merge_module

ORIGIN = "example.org/pg-derived"
NS = "team"

Run = Callable[..., Any]


@pytest.fixture
def deterministic(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Make ids, timestamps, salts and keys a function of call order (reset by calling it)."""

    def reset() -> None:
        clock = itertools.count(1_780_000_000_000_000, 1000)
        ids = itertools.count(1)
        seeds = itertools.count(1)
        salt = itertools.count(1)

        def new_uuid() -> str:
            return str(uuid.UUID(int=(0x0190 << 112) | (7 << 76) | (2 << 62) | next(ids)))

        monkeypatch.setattr(appending_module, "now_us", lambda: next(clock))
        monkeypatch.setattr(entries_module, "now_us", lambda: next(clock))
        monkeypatch.setattr(divergence_module, "now_us", lambda: next(clock))
        monkeypatch.setattr(appending_module.os, "urandom", lambda n: bytes([next(salt) % 251]) * n)
        monkeypatch.setattr(ledger_module, "new_uuid", new_uuid)
        for module in (appending_module, entries_module):
            monkeypatch.setattr(module, "new_uuids", lambda n: [new_uuid() for _ in range(n)])
        monkeypatch.setattr(entries_module, "new_uuid", new_uuid)
        # Modules that bind ``new_uuid`` by name (imported here, not only when a CLI command
        # first needs them: the result must not depend on which tests ran before).
        for module in (branches_module, merge_module):
            monkeypatch.setattr(module, "new_uuid", new_uuid)
        monkeypatch.setattr(
            Ed25519Signer,
            "generate",
            classmethod(lambda cls, name: cls.from_seed(name, bytes([next(seeds)]) * 32)),
        )

    return reset


def _runner(target: Path | str, key: Path) -> Run:
    base = ["-l", str(target), "--key", str(key)]

    def run(*args: str, code: int = 0) -> Any:
        result = CliRunner().invoke(cli, [*base, *args], catch_exceptions=True)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            args,
            result.output,
            result.exception,
        )
        assert result.exit_code == code, (args, result.output)
        return json.loads(result.stdout) if "--json" in args and code == 0 else result.output

    return run


def _op(op_type: str, payload: dict[str, Any], actor: str = "agent", **extra: Any) -> str:
    return json.dumps(
        {
            "kind": "op",
            "op_type": op_type,
            "actor_id": actor,
            "actor_type": "AI_AGENT",
            "namespace_id": NS,
            "policy_version": "p/1",
            "payload": payload,
            **extra,
        }
    )


def _event(content: str) -> str:
    return json.dumps(
        {
            "kind": "event",
            "stream": "s",
            "actor_id": "agent",
            "actor_type": "AI_AGENT",
            "role": "USER",
            "content": content,
            "namespace_id": NS,
        }
    )


def _fact(evidence: list[str], value: str = "v", city: str | None = None) -> str:
    payload: dict[str, Any] = {
        "object_type": "FACT",
        "epistemic_type": "ASSERTED",
        "source_type": "USER_STATED",
        "evidence_ids": evidence,
        "value": value,
        "confidence": None,
        "salience": 0.5,
    }
    if city is not None:
        payload["structured_value"] = {"attribute": "city", "value": city}
    return _op("ASSERT", payload)


def _id(out: Any) -> str:
    return str(out[0]["id"])


def _story(run: Run) -> list[Any]:
    """One history through the CLI, and what every derived command prints about it."""
    out: list[Any] = []
    run("init", "--origin", ORIGIN, "--snapshot-every", "6")
    run("append", _op("NAMESPACE_CREATE", {"namespace_type": "PROJECT"}, actor="admin"))
    for who, perms in (
        ("admin", "WRITE ASSERT DEPRECATE READ"),
        ("agent", "WRITE ASSERT DEPRECATE"),
    ):
        for perm in perms.split():
            run("append", _op("GRANT", {"actor_id": who, "permission": perm}, actor="admin"))
    e1 = _id(run("append", "--json", _event("tea without sugar")))
    f1 = _id(run("append", "--json", _fact([e1], "no sugar")))
    e2 = _id(run("append", "--json", _event("two sugars")))
    f2 = _id(run("append", "--json", _fact([e2], "two sugars", city="Paris")))
    out.append(run("snapshot", "--json"))
    b = run("branch", "create", "--type", "SIMULATION", "--purpose", "p", "--parent", "main")
    b = b.strip()
    eb = _id(run("append", "-b", b, "--json", _event("on the branch")))
    mine = _id(run("append", "-b", b, "--json", _fact([eb], "b", city="Rome")))
    out.append(run("branch", "list", "--json"))
    out.append(
        run(
            "branch", "merge", b, "--objects", mine, "--strategy", "PRESERVE_BOTH",
            "--actor", "admin", "--json",
        )
    )  # fmt: skip
    out.append(run("falsify", f1, "--reason", "wrong", "--evidence", e2, "--json"))
    out.append(run("cascade", f1, "--max-depth", "1", "--dry-run", "--json"))
    out.append(run("snapshot", "--json"))
    # Gated state: two replies to one turn, an edit on one path only.
    hi = _id(run("append", "--json", _event("hi")))
    a = _id(run("append", "--json", _event("Chengdu"), "--anchor", hi))
    h = _id(run("append", "--json", _event("Hangzhou"), "--anchor", hi))
    g1 = _id(run("append", "--json", _fact([a], "moving to Chengdu")))
    g2 = _id(run("append", "--json", _fact([h], "moving to Hangzhou")))
    run("append", _op("SUPERSEDE", {"new_object_id": g2, "reason": "edited"}, target_id=g1))
    out.append(run("query", "--anchor", a, "--json"))
    out.append(run("why", g1, "--anchor", a, "--json"))
    out.append(run("query", "--mode", "AUDIT", "--json"))
    out.append(run("query", "--text", "sugar", "--json"))
    out.append(run("why", f2, "--json"))
    out.append(run("why", f1, "--json"))
    out.append(run("roots", "--json"))
    out.append(run("rebuild", "--json"))
    report = run("verify", "--json")
    assert report["ok"], report
    out.append({k: v for k, v in report.items() if k not in ("ledger", "path")})
    out.append(run("log", "--json"))
    return out


_CLOCK_FIELDS = ("seconds", "elapsed")


def _plain(value: Any) -> Any:
    """``value`` without wall-clock readings (when a command ran, how long it took)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in _CLOCK_FIELDS}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"in \d+\.\d+s", "in Ns", value)
    return value


def test_derived_commands_match_a_ledger_file(
    tmp_path: Path,
    pg_url: str,
    pg_key: Path,
    deterministic: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """query, why, roots, snapshot, branch create/list/merge, falsify, cascade, rebuild and
    verify print the same on PostgreSQL (derived state in the cache) as on a ledger file."""
    deterministic()
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "t1.json"))
    on_file = _story(_runner(tmp_path / "a.ledger", tmp_path / "a.key"))
    deterministic()
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "t2.json"))
    on_pg = _story(_runner(pg_url, pg_key))
    assert len(on_pg) == len(on_file)
    for i, (a, b) in enumerate(zip(on_file, on_pg, strict=True)):
        if _plain(a) != _plain(b):
            print("DIFF", i, json.dumps(_plain(a), sort_keys=True))
            print("PGPG", json.dumps(_plain(b), sort_keys=True))
        assert _plain(a) == _plain(b), i
    assert Path(f"{pg_key}.cache").exists()  # the default place: beside the key


# -- the Python API: two hosts, lost and foreign caches ---------------------------------------


def _ev(content: str) -> EventInput:
    return EventInput(
        stream="s",
        actor_id="agent",
        actor_type="AI_AGENT",
        role="USER",
        content=content,
        namespace_id=NS,
    )


def _assert(evidence: str, value: str) -> OpInput:
    return OpInput(
        op_type="ASSERT",
        actor_id="agent",
        actor_type="AI_AGENT",
        namespace_id=NS,
        policy_version="p/1",
        payload={
            "object_type": "FACT",
            "epistemic_type": "ASSERTED",
            "source_type": "USER_STATED",
            "evidence_ids": [evidence],
            "value": value,
            "confidence": None,
            "salience": 0.5,
        },
    )


def _supersede(target: str, new_object: str) -> OpInput:
    return OpInput(
        op_type="SUPERSEDE",
        actor_id="agent",
        actor_type="AI_AGENT",
        namespace_id=NS,
        policy_version="p/1",
        target_id=target,
        payload={"new_object_id": new_object, "reason": "corrected"},
    )


def _objects(ledger: Ledger) -> dict[str, str]:
    """Object id -> lifecycle state, read from the ledger's derived tables."""
    with ledger.reading() as db:
        return {
            str(i): str(s)
            for i, s in db.execute(
                "SELECT id, lifecycle_state FROM mem_objects WHERE branch = 'main' AND vto IS NULL"
            )
        }


def _host(pg_url: str, key: Path, cache: Path) -> Ledger:
    return Ledger.open(pg_url, key_path=key, cache_path=cache)


def test_two_hosts_see_each_others_entries_before_validating(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    """Host B supersedes an object host A asserted; A then sees it superseded, and a second
    SUPERSEDE of the same object is refused on either host (each cache caught up first)."""
    Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key, cache_path=tmp_path / "a.cache").close()
    a = _host(pg_url, pg_key, tmp_path / "a.cache")
    b = _host(pg_url, pg_key, tmp_path / "b.cache")
    try:
        ev = a.append(_ev("it is blue")).id
        obj = a.append(_assert(ev, "blue")).id
        assert _objects(b)[obj] == "ACTIVE"  # B's cache caught up with A's entries
        ev2 = b.append(_ev("no, it is green")).id
        green = b.append(_assert(ev2, "green")).id
        new = b.append(_supersede(obj, green))
        red = a.append(_assert(ev2, "red")).id  # A's cache has B's entries: no id clash
        with pytest.raises(RefusedError):
            a.append(_supersede(obj, red))  # A validates against B's SUPERSEDE
        states = _objects(a)
        assert states[obj] == "SUPERSEDED" and states[green] == states[red] == "ACTIVE"
        assert _objects(b) == states
        assert a.size() == b.size() == new.seq + 2
    finally:
        a.close()
        b.close()
    # Both caches hold what a ledger file rebuilt from the same entries holds.
    with Ledger.open(pg_url, key_path=pg_key, cache_path=tmp_path / "fresh.cache") as c:
        assert _objects(c) == states


def _memory_digest(ledger: Ledger) -> str:
    from memroot.projections.digest import state_digest

    with ledger.reading() as db:
        return state_digest(db).hex()


def test_deleted_cache_is_rebuilt_and_foreign_cache_is_replaced(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    cache = tmp_path / "host.cache"
    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key, cache_path=cache) as ledger:
        ev = ledger.append(_ev("x")).id
        ledger.append(_assert(ev, "x"))
        digest = _memory_digest(ledger)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{cache}{suffix}").unlink(missing_ok=True)
    with Ledger.open(pg_url, key_path=pg_key, cache_path=cache) as ledger:
        assert _memory_digest(ledger) == digest
    # Another ledger's cache at that path: replaced, never trusted.
    other = tmp_path / "other.ledger"
    Ledger.init(other, origin="example.org/other").close()
    foreign = tmp_path / "foreign.cache"
    DerivedCache(foreign, "some-other-ledger-id").close()
    with Ledger.open(pg_url, key_path=pg_key, cache_path=foreign) as ledger:
        assert _memory_digest(ledger) == digest
        assert DerivedCache.stored_id(ledger.derived) == ledger.ledger_id  # type: ignore[arg-type]


def test_stale_cache_is_detected_and_rebuilt(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """A cache ahead of the ledger, or whose head hash differs, is rebuilt at open; inside a
    transaction it is refused (nothing written)."""
    cache = tmp_path / "host.cache"
    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key, cache_path=cache) as ledger:
        ev = ledger.append(_ev("x")).id
        ledger.append(_assert(ev, "x"))
        digest = _memory_digest(ledger)
        size = ledger.size()
    db = apsw.Connection(str(cache))
    db.execute("UPDATE cache_heads SET head = zeroblob(32) WHERE branch = 'main'")
    db.close()
    with Ledger.open(pg_url, key_path=pg_key, cache_path=cache) as ledger:
        assert _memory_digest(ledger) == digest
        # Ahead of the ledger while open (a rollback of the database, say): refused.
        ledger.derived.db.execute("UPDATE cache_heads SET size = size + 5 WHERE branch = 'main'")
        ledger._applied = None
        with pytest.raises(StorageError, match="does not match branch 'main'"):
            ledger.append(_ev("y"))
        assert ledger.size() == size
    with Ledger.open(pg_url, key_path=pg_key, cache_path=cache) as ledger:
        assert _memory_digest(ledger) == digest
        ledger.append(_ev("y"))


def test_lost_cache_commit_is_replayed(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """PostgreSQL committed, the cache's commit did not happen (a crash between the two):
    the next catch-up applies the entries to the cache."""
    cache = tmp_path / "host.cache"
    with Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key, cache_path=cache) as ledger:
        ev = ledger.append(_ev("x")).id
    with Ledger.open(pg_url, key_path=pg_key, cache_path=cache) as ledger:
        assert isinstance(ledger.derived, DerivedCache)

        def crash() -> None:
            raise KeyboardInterrupt("killed between the two commits")

        # Runs after PostgreSQL's COMMIT, before the cache's: the cache rolls back.
        ledger.store.on_commit(lambda: None, lambda: None, crash)
        with pytest.raises(KeyboardInterrupt):
            ledger.append(_assert(ev, "x"))
        ledger.store._after_commit.clear()
        assert ledger.size() == 3
        assert DerivedCache.heads(ledger.derived)["main"][0] == 2  # type: ignore[arg-type]
    with Ledger.open(pg_url, key_path=pg_key, cache_path=cache) as ledger:
        assert list(_objects(ledger).values()) == ["ACTIVE"]
        assert ledger.derived.db.execute("SELECT size FROM cache_heads").fetchall() == [(3,)]


# -- report, import-bundle and the Memory facade (MCP's) on PostgreSQL ------------------------


def test_report_and_import_bundle_on_postgres(
    tmp_path: Path, pg_url: str, pg_key: Path, pg_server: str
) -> None:
    """``report`` reads a caught-up snapshot and names the URL; a bundle exported from a file
    imports into an empty database, whose derived state then answers as the file's."""
    src = _runner(tmp_path / "src.ledger", tmp_path / "src.ledger.key")
    src("init", "--origin", ORIGIN)
    ev = _id(src("append", "--json", _event("tea without sugar")))
    fact = _id(src("append", "--json", _fact([ev], "no sugar")))
    src("snapshot")
    src("export", str(tmp_path / "bundle"))
    vkey = src("vkey").strip()
    pg = _runner(pg_url, pg_key)
    done = pg("import-bundle", str(tmp_path / "bundle"), "--vkey", vkey, "--json")
    assert done["entries"] == 4 and "postgresql://" in done["ledger"]
    for args in (
        ["query", "--mode", "AUDIT", "--json"],
        ["roots", "--json"],
        ["why", fact, "--json"],
    ):
        assert _plain(pg(*args)) == _plain(src(*args)), args
    assert pg("verify", "--json")["steps"]["9"]["violations"] == 0
    page = tmp_path / "r.html"
    assert pg("report", str(page), "--json")["ok"]
    html = page.read_text()
    assert pg_url.split("?")[0] in html and "memroot-verify-" not in html
    # Into a database that already holds a ledger: refused, nothing changed.
    again = pg("import-bundle", str(tmp_path / "bundle"), "--vkey", vkey, code=4)
    assert "already holds memroot tables" in again


def test_memory_facade_on_postgres(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """``open_memory(url)`` (what ``memroot mcp`` serves): record, remember, recall, verify."""
    from memroot.memory import open_memory

    Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key).close()
    with open_memory(pg_url, key_path=pg_key, namespace=NS) as mem:
        ev = mem.record(content="the sky is blue").id
        obj = mem.remember("sky: blue", evidence=[ev]).id
        assert [r.object.id for r in mem.recall("blue")] == [obj]
        report = mem.verify()
        assert report.ok and report.entries == 3
    with open_memory(pg_url, key_path=pg_key, namespace=NS) as mem:  # from the cache
        assert [r.object.id for r in mem.recall("blue")] == [obj]


def test_langgraph_saver_on_postgres(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """A LangGraph graph checkpoints into a PostgreSQL ledger, resumes, and verify passes."""
    pytest.importorskip("langgraph", reason="langgraph is not installed (memroot[langgraph])")
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    from memroot.integrations.langgraph import MemrootSaver
    from memroot.memory import open_memory

    class State(TypedDict):
        count: int
        log: list[str]

    def step(state: State) -> dict[str, Any]:
        return {"count": state["count"] + 1, "log": [*state["log"], f"step {state['count']}"]}

    def graph(saver: MemrootSaver) -> Any:
        builder = StateGraph(State)
        builder.add_node("step", step)
        builder.add_edge(START, "step")
        builder.add_edge("step", END)
        return builder.compile(checkpointer=saver)

    Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key).close()
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    with MemrootSaver.from_conn_string(pg_url, key_path=pg_key) as saver:
        assert graph(saver).invoke({"count": 0, "log": []}, cfg)["count"] == 1
    with open_memory(pg_url, key_path=pg_key, actor="langgraph") as mem:
        saver = MemrootSaver(mem)
        state = graph(saver).get_state(cfg)
        assert state.values["count"] == 1
        out = graph(saver).invoke(dict(state.values), cfg)
        assert out["log"] == ["step 0", "step 1"]
    assert _runner(pg_url, pg_key)("verify", "--json")["ok"]


def _conv_parents(ledger: Ledger) -> int:
    with ledger.reading() as db:
        return int(db.execute("SELECT count(*) FROM conv_parents").fetchone()[0])


def test_a_layer_folded_ahead_of_the_cache_is_not_fed_twice(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    """The memory model folds entries on its own when it reads a newer ledger size than the
    cache applied (another host appended in between): the catch-up then gives those entries
    to the other hooks only, and the state is what a fresh cache rebuilds."""
    from memroot.projections.hook import catch_up

    Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key, cache_path=tmp_path / "a.cache").close()
    a = _host(pg_url, pg_key, tmp_path / "a.cache")
    b = _host(pg_url, pg_key, tmp_path / "b.cache")
    try:
        ev = b.append(_ev("from B")).id
        b.append(_assert(ev, "B's fact"))
        with a.derived.write() as db:  # only the memory model sees B's entries
            catch_up(db, a, "main", a.store.branch("main").size)
        a.append(_ev("from A"))
        digest, parents = _memory_digest(a), _conv_parents(a)
    finally:
        a.close()
        b.close()
    with Ledger.open(pg_url, key_path=pg_key, cache_path=tmp_path / "fresh.cache") as c:
        assert (_memory_digest(c), _conv_parents(c)) == (digest, parents) and parents == 2


def _fork(ledger: Ledger, name: str, parent: str = "main") -> None:
    """Fork SIMULATION branch ``name`` from ``parent`` (created by agent, 7 days)."""
    from memroot.memory_root.branches import create_branch

    create_branch(
        ledger,
        branch_type="SIMULATION",
        purpose="p",
        actor_id="agent",
        namespace_id=NS,
        expiry_days=7,
        branch_id=name,
        parent=parent,
    )


def test_two_hosts_and_a_fork(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """Host A forks a branch; host B appends to it (B's cache replays the fork first)."""

    Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key, cache_path=tmp_path / "a.cache").close()
    a = _host(pg_url, pg_key, tmp_path / "a.cache")
    b = _host(pg_url, pg_key, tmp_path / "b.cache")
    try:
        ev = a.append(_ev("on main")).id
        name = "sim-1"
        _fork(a, name)
        evb = b.append(_ev("on the fork"), branch=name).id
        obj = b.append(_assert(evb, "forked fact"), branch=name).id
        a.append(_assert(ev, "main fact"))
        with a.reading() as db:
            on_fork = db.execute(
                "SELECT id FROM mem_objects WHERE branch = ? AND vto IS NULL", (name,)
            ).fetchall()
        assert on_fork == [(obj,)]
    finally:
        a.close()
        b.close()


def test_a_new_host_catches_up_past_a_closed_branch(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    """A cache folds each branch whole, main first: it meets main's BRANCH_CLOSE of a fork
    (and the fork's of its own child) before the entries they came after, and still
    catches up (it refused the fork's first entry, "is CLOSED", before)."""
    from memroot.memory_root.branches import close_branch, list_branches

    Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key, cache_path=tmp_path / "a.cache").close()
    with _host(pg_url, pg_key, tmp_path / "a.cache") as a:
        a.append(_ev("on main"))
        for name, parent in (("sim-1", "main"), ("sim-2", "sim-1")):
            _fork(a, name, parent)
            a.append(_ev(f"on {name}"), branch=name)
        for name in ("sim-2", "sim-1"):
            close_branch(a, name, reason="done", actor_id="agent")
        a.append(_ev("after"))
        before = [(b.branch_id, b.state) for b in list_branches(a)]
    with _host(pg_url, pg_key, tmp_path / "fresh.cache") as b:
        assert [(i.branch_id, i.state) for i in list_branches(b)] == before
    assert before == [("sim-1", "CLOSED"), ("sim-2", "CLOSED")]


def test_an_erasure_reaches_a_branch_object_another_host_asserted(
    tmp_path: Path, pg_url: str, pg_key: Path
) -> None:
    """Host A erases an event that a fact host B asserted on a branch cites: A's cache has
    B's fact before it validates the TOMBSTONE, so the erasure is refused without
    ``on_dependents`` and with ARCHIVE lands an ARCHIVE on the branch; both hosts agree."""

    def host(cache: str) -> Run:
        base = ["-l", pg_url, "--key", str(pg_key)]
        env = {"MEMROOT_CACHE": str(tmp_path / cache)}

        def run(*args: str, code: int = 0) -> Any:
            result = CliRunner().invoke(cli, [*base, *args], env=env, catch_exceptions=True)
            assert result.exit_code == code, (args, result.output)
            return json.loads(result.stdout) if "--json" in args and code == 0 else result.output

        return run

    a, b = host("a.cache"), host("b.cache")
    a("init", "--origin", ORIGIN)
    ev = _id(a("append", "--json", _event("my address is 1 Main St")))
    branch = a("branch", "create", "--type", "SIMULATION", "--purpose", "what if").strip()
    fact = _id(b("append", "-b", branch, "--json", _fact([ev], "lives at 1 Main St")))
    tomb = {
        "kind": "op",
        "op_type": "TOMBSTONE",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "namespace_id": NS,
        "policy_version": "p/1",
        "target_id": ev,
        "payload": {"target_event_id": ev, "reason": "erasure", "policy_ref": "gdpr-17"},
    }
    refused = a("append", json.dumps(tomb), code=3)
    assert repr(branch) in refused and fact in refused
    tomb["payload"]["on_dependents"] = "ARCHIVE"  # type: ignore[index]
    a("append", json.dumps(tomb))
    for run in (a, b):
        rows = {r["id"]: r for r in run("query", "-b", branch, "--mode", "AUDIT", "--json")}
        assert rows[fact]["lifecycle_state"] == "ARCHIVED"
        assert run("verify", "--json")["ok"]


_KILLED_BETWEEN_COMMITS = """
import os, signal, sys
from pathlib import Path
from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.ledger import Ledger
ledger = Ledger.open(sys.argv[1], key_path=Path(sys.argv[2]), cache_path=Path(sys.argv[3]))
ev = ledger.append(EventInput(stream="s", actor_id="agent", actor_type="AI_AGENT", role="USER",
                              content="before the kill", namespace_id="team")).id
# After PostgreSQL's COMMIT, before the cache's: the process dies there.
ledger.store.on_commit(lambda: None, lambda: None, lambda: os.kill(os.getpid(), signal.SIGKILL))
ledger.append(OpInput(op_type="ASSERT", actor_id="agent", actor_type="AI_AGENT",
    namespace_id="team", policy_version="p/1", payload={"object_type": "FACT",
    "epistemic_type": "ASSERTED", "source_type": "USER_STATED", "evidence_ids": [ev],
    "value": "lost in the cache", "confidence": None, "salience": 0.5}))
print("not killed", flush=True)
"""


def test_process_killed_between_the_two_commits(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """SIGKILL after PostgreSQL committed an append and before the cache did: the entry is
    in the ledger, the cache lacks it, and the next open replays it (the cache then equals
    a fresh one)."""
    import subprocess
    import sys

    cache = tmp_path / "host.cache"
    Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key, cache_path=cache).close()
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_BETWEEN_COMMITS)
    done = subprocess.run(
        [sys.executable, str(script), pg_url, str(pg_key), str(cache)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -9 and "not killed" not in done.stdout, done.stderr
    db = apsw.Connection(str(cache))
    assert db.execute("SELECT size FROM cache_heads").fetchall() == [(2,)]  # the event only
    db.close()
    with Ledger.open(pg_url, key_path=pg_key, cache_path=cache) as ledger:
        assert ledger.size() == 3
        assert list(_objects(ledger).values()) == ["ACTIVE"]
        digest = _memory_digest(ledger)
    with Ledger.open(pg_url, key_path=pg_key, cache_path=tmp_path / "fresh.cache") as fresh:
        assert _memory_digest(fresh) == digest


def test_default_cache_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$MEMROOT_CACHE, else beside the key, else the XDG cache directory by ledger id."""
    from memroot.ledger.backends.pg import default_cache_path

    key = tmp_path / "k.key"
    assert default_cache_path("id-1", key) == Path(f"{key}.cache")
    assert default_cache_path("id-1", None) == tmp_path / "xdg-cache" / "memroot" / "id-1.cache"
    monkeypatch.setenv("MEMROOT_CACHE", str(tmp_path / "named.cache"))
    assert default_cache_path("id-1", key) == tmp_path / "named.cache"


def test_mcp_server_on_postgres(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """``memroot -l postgresql://... mcp``: a whole tool session over stdio, then verify."""
    pytest.importorskip("mcp", reason="the mcp SDK is not installed (memroot[mcp])")
    import asyncio

    from mcp import Client

    from tests._mcp import server_params

    Ledger.init(pg_url, origin=ORIGIN, key_path=pg_key).close()
    params = server_params(pg_url, "--key", str(pg_key), trusted=tmp_path / "trusted.json")

    async def session() -> dict[str, Any]:
        async with Client(params) as c:
            out: dict[str, Any] = {}
            made = await c.call_tool("remember", {"value": "Alice takes tea", "source": "tea"})
            oid = made.structured_content["object_id"]
            out["recall"] = (await c.call_tool("recall", {"text": "tea"})).structured_content
            out["why"] = (await c.call_tool("why", {"item_id": oid})).structured_content
            out["snapshot"] = (await c.call_tool("snapshot", {})).structured_content
            await c.call_tool("falsify", {"item_id": oid, "reason": "she switched"})
            await c.call_tool("cascade", {"item_id": oid, "apply": True})
            out["verify"] = (await c.call_tool("verify", {})).structured_content
            return out

    out = asyncio.run(session())
    assert [r["value"] for r in out["recall"]["results"]] == ["Alice takes tea"]
    assert out["why"]["evidence"][0]["content"] == "tea"
    assert out["verify"]["ok"] is True, out["verify"]
    assert _runner(pg_url, pg_key)("verify", "--json")["ok"]


def test_verify_checks_this_hosts_cache(tmp_path: Path, pg_url: str, pg_key: Path) -> None:
    """Steps 8-9 of ``memroot verify`` replay the snapshot and compare the host's cache: a
    cache whose derived rows were changed (its heads intact) is reported."""
    run = _runner(pg_url, pg_key)
    run("init", "--origin", ORIGIN)
    ev = _id(run("append", "--json", _event("tea")))
    run("append", _fact([ev], "no sugar"))
    run("snapshot")
    assert run("verify", "--json")["ok"]
    db = apsw.Connection(str(Path(f"{pg_key}.cache")))
    db.execute("UPDATE mem_objects SET value = 'two sugars'")
    db.close()
    report = json.loads(run("verify", "--json", code=1))
    assert not report["ok"] and report["steps"]["9"]["violations"] >= 1, report["steps"]
    assert all(f["step"] == 9 for f in report["findings"])
