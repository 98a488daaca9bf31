"""``_native.event_rows``: a run of events' rows for every layer, against the reference loops.

Replays fold runs of events; the memory model (``mem_events``), the gated bookkeeping
(``mem_conv``) and the conversation tree (``conv_parents``) each built their rows in a Python
loop, and still do without the native core. The native call must build exactly those rows,
or refuse (``Reject``) so that the loops run and raise or keep what they always did; and a
rebuild or a step 9 replay of a random history (refused events, duplicate ids, parent
links, git contexts, erasures, a fork) must give identical tables and digests both ways.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger import _backend
from memroot.ledger.backends.store import Store
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, EventInput, Kind, OpInput
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import audit
from memroot.memory_root.branches import BranchRegistry, create_branch
from memroot.memory_root.falsify.replay import StatesRebuild
from memroot.memory_root.tables_check import LayerTablesCheck, LayerTablesRebuild
from memroot.projections import engine, gated, ops
from memroot.projections import requests as rq
from memroot.projections.anchors import ConversationTree
from memroot.projections.digest import state_digest
from memroot.projections.replay import MemoryReplayCheck, rebuild

native = pytest.importorskip("memroot._native", reason="the native core is not built")

if _backend.NATIVE is None:  # MEMROOT_BACKEND=python: nothing native to compare
    pytestmark = pytest.mark.skip(reason="MEMROOT_BACKEND=python: nothing native to compare")

_SETTINGS = settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


# -- the rows of one run ------------------------------------------------------------------------


def _entry(
    seq: int, body: Any, *, branch: str = CANONICAL_BRANCH, kind: Kind = Kind.EVENT
) -> Entry:
    return Entry(
        1, b"\x00" * 32, seq, branch, 1_700_000_000_000_000 + seq, kind, "EVENT", body, b"", b""
    )


def _reference(entries: list[Entry]) -> tuple[Any, ...]:
    """The rows the reference loops build (``fold_events``, ``gated``, ``ConversationTree``)."""
    events = [
        (e.body["id"], e.branch, e.seq, e.ts, e.body["namespace_id"], e.body["actor_id"], None)
        for e in entries
    ]
    conv = [gated._conv_row(e) for e in entries]
    parents = ConversationTree.rows(entries)
    keys = list(dict.fromkeys((e.body["actor_id"], e.body["namespace_id"]) for e in entries))
    contexts = [i for i, e in enumerate(entries) if "context" in e.body]
    return events, conv, parents, keys, contexts


_TEXT = st.text(min_size=1, max_size=8)
_ODD = st.one_of(
    st.integers(), st.none(), st.binary(max_size=3), st.lists(st.integers(), max_size=2)
)


@st.composite
def _bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": draw(_TEXT),
        "actor_id": draw(st.sampled_from(["alice", "bob", "agent"])),
        "namespace_id": draw(st.sampled_from(["ns-a", "ns-b"])),
    }
    if draw(st.booleans()):
        body["parent_event_id"] = draw(st.one_of(st.none(), _TEXT))
    if draw(st.integers(0, 4)) == 0:
        body["context"] = {"git_branch": "x"}
    if draw(st.integers(0, 12)) == 0:  # something the reference loops would trip on or keep
        field = draw(st.sampled_from(["id", "actor_id", "namespace_id", "parent_event_id"]))
        if draw(st.booleans()):
            body.pop(field, None)
        else:
            body[field] = draw(_ODD)
    return body


def _plain(body: dict[str, Any]) -> bool:
    """Whether the native call must take the body (and not leave it to the reference)."""
    return all(type(body.get(k)) is str for k in ("id", "actor_id", "namespace_id")) and type(
        body.get("parent_event_id", "")
    ) in (str, type(None))


@settings(max_examples=400, deadline=None)
@given(bodies=st.lists(_bodies(), min_size=1, max_size=40), other=st.integers(-1, 39))
def test_event_rows_equal_the_reference_loops_or_refuse(
    bodies: list[dict[str, Any]], other: int
) -> None:
    """The five lists equal the reference's; a run it cannot take whole is ``Reject``."""
    entries = [_entry(i, b) for i, b in enumerate(bodies)]
    if 0 < other < len(entries):  # an entry of another branch, or an operation, in the run
        e = entries[other]
        entries[other] = e._replace(branch="side") if other % 2 else e._replace(kind=Kind.OP)
    takes = all(_plain(b) for b in bodies) and not 0 < other < len(entries)
    if not takes:
        with pytest.raises(native.Reject):
            native.event_rows(entries, Kind.EVENT)
        assert engine.event_rows(entries) is None
        return
    got = native.event_rows(entries, Kind.EVENT)
    assert got == _reference(entries)
    assert engine.event_rows(entries) == engine.EventRows(*got)


def test_a_run_asked_about_twice_is_built_once() -> None:
    """The memory model and the layers' feed ask about the same run: one native call.

    The same entry objects in order (the list itself or a copy) get the rows already built;
    a run differing in one entry object, even an equal-looking one, is built again, and its
    rows are its own.
    """
    body = {"id": "e", "actor_id": "a", "namespace_id": "ns", "parent_event_id": None}
    entries = [_entry(i, {**body, "id": f"e{i}"}) for i in range(5)]
    first = engine.event_rows(entries)
    assert first is not None
    assert engine.event_rows(entries) is first
    assert engine.event_rows(list(entries)) is first
    changed = [*entries[:2], _entry(2, {**body, "id": "other"}), *entries[3:]]
    second = engine.event_rows(changed)
    assert second is not first and second == engine.EventRows(*_reference(changed))
    assert second.events[2][0] == "other"
    shorter = engine.event_rows(changed[:4])
    assert shorter is not second and shorter == engine.EventRows(*_reference(changed[:4]))


# -- whole replays, native and reference ---------------------------------------------------------


def _event(rng: random.Random, ids: list[str], i: int, branch_ns: str = "ns") -> EventInput:
    parent = rng.choice(ids) if ids and rng.random() < 0.4 else None
    fields: dict[str, Any] = {"id": _uuid(rng)}
    if rng.random() < 0.1:
        git = {"branch": rng.choice(["main", "feature/x"]), "commit": "3f2a9c1"}
        fields["context"] = {"git": {**git, "branch_scope": "current_branch"}}
    if ids and rng.random() < 0.03:
        fields["id"] = rng.choice(ids)  # a repeated id (appended without the hooks)
    return EventInput(
        stream=f"s{rng.randrange(3)}",
        actor_id=rng.choice(["alice", "bob"]),
        actor_type="HUMAN_USER",
        role="USER",
        content=f"message {i}",
        namespace_id="locked" if rng.random() < 0.1 else branch_ns,
        parent_event_id=parent,
        **fields,
    )


def _uuid(rng: random.Random) -> str:
    return f"00000000-0000-4000-8000-{rng.randrange(16**12):012x}"


_AGENT = rq.Actor("alice", "HUMAN_USER", "ns")
_OWNER = rq.Actor("owner", "HUMAN_USER", "locked")


def _history(rng: random.Random, n: int) -> list[EventInput | OpInput]:
    items: list[EventInput | OpInput] = []
    ids: list[str] = []
    objects: list[str] = []
    for i in range(n):
        r = rng.random()
        if r < 0.75 or not ids:
            ev = _event(rng, ids, i)
            items.append(ev)
            ids.append(str(ev.id))
        elif r < 0.87:
            oid = _uuid(rng)
            objects.append(oid)
            cited = [rng.choice(ids)] if ids else []
            items.append(
                rq.assert_object(
                    _AGENT, "FACT", "OBSERVED", "USER_STATED", cited, f"v{i}", object_id=oid
                )
            )
        elif r < 0.89:
            # A payload the schema refuses (or only the reference checks): replay skips the
            # first and folds the second, through the native plan or the reference alike.
            op = rq.assert_object(
                _AGENT, "FACT", "OBSERVED", "USER_STATED", [rng.choice(ids)], f"v{i}"
            )
            odd = rng.choice(
                [{"salience": 1.5}, {"confidence": 0.3}, {"extra": 1}, {"valid_to": -1},
                 {"structured_value": {"k": [1, 2.5, None]}}, {"entity_ids": []},
                 {"condition": {"text": "if"}, "epistemic_type": "CONDITIONAL"}]
            )  # fmt: skip
            items.append(dataclasses.replace(op, payload={**op.payload, **odd}))
        elif r < 0.92 and objects:
            items.append(rq.deprecate(_AGENT, rng.choice(objects), "stale"))
        elif r < 0.95:
            items.append(rq.namespace_create(_OWNER, "TEAM"))  # later events in "locked" refused
        else:
            items.append(rq.tombstone(_AGENT, rng.choice(ids), "gdpr", "p/1", None))
    return items


def _ledger(path: Path, seed: int) -> None:
    """A history appended without the hooks (so some entries are refused by every replay)."""
    rng = random.Random(seed)
    with Ledger.init(path, hooks=()) as led:
        append_each(led, _history(rng, rng.randrange(40, 160)))
    append_fork(path, _history(rng, rng.randrange(5, 40)))


def append_each(led: Ledger, items: list[EventInput | OpInput], branch: str | None = None) -> None:
    """Append the items one at a time; an item the ledger's hooks refuse is left out."""
    for item in items:
        try:
            if branch is None:
                led.append_batch([item])
            else:
                led.append_batch([item], branch=branch)
        except RefusedError:
            continue


def append_fork(path: Path, items: list[EventInput | OpInput]) -> None:
    """Fork ``main`` of the ledger at ``path`` and append ``items`` there without the hooks."""
    with Ledger.open(path, hooks=[BranchRegistry()]) as led:
        _, genesis = create_branch(led, branch_type="SIMULATION", purpose="p", actor_id="u1")
    with Ledger.open(path, hooks=()) as led:
        append_each(led, items, genesis.branch)


_TABLES = (
    "SELECT * FROM mem_events ORDER BY id, branch",
    "SELECT * FROM mem_conv ORDER BY id",
    "SELECT * FROM conv_parents ORDER BY id",
    "SELECT * FROM mem_skipped ORDER BY branch, seq",
    "SELECT * FROM mem_heads ORDER BY branch",
    "SELECT * FROM git_context ORDER BY 1, 2",
    "SELECT * FROM mem_gated ORDER BY 1, 2, 3",
    "SELECT * FROM mem_objects ORDER BY 1, 2, 3",
    "SELECT * FROM mem_edges ORDER BY 1, 2, 3",
)


def _rebuilt(path: Path) -> tuple[Any, ...]:
    with Ledger.open(path) as led:
        report = rebuild(led, also=[StatesRebuild(led), LayerTablesRebuild(led)])
        db = led.store.db
        tables = tuple(db.execute(q).fetchall() for q in _TABLES)
        gated_digests = {b.name: gated.gated_digest(db, b.name) for b in led.store.branches()}
        return report.after, dict(report.branches_after), gated_digests, tables


def _step9(path: Path) -> list[str]:
    store = Store(path)
    try:
        checks = [MemoryReplayCheck(path), LayerTablesCheck(path)]
        report = audit(store, origin=str(store.meta("origin")), checks=checks)
    finally:
        store.close()
    return sorted(str(f) for f in report.findings)


@_SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_rebuild_and_step9_are_the_same_with_and_without_native_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """A random history rebuilds to identical tables and digests, and step 9 says the same.

    Native off means the event rows, the payload plans and the derived ids all from the
    reference (``engine._N``, ``ops._NATIVE_PLAN``).
    """
    path = tmp_path / f"h{seed}.db"
    path.unlink(missing_ok=True)
    _ledger(path, seed)
    reference = tmp_path / f"r{seed}.db"
    shutil.copyfile(path, reference)
    fast = _rebuilt(path)
    fast_findings = _step9(path)
    with monkeypatch.context() as m:
        m.setattr(engine, "_N", None)
        m.setattr(ops, "_NATIVE_PLAN", {})  # payloads checked by the reference only
        slow = _rebuilt(reference)
        slow_findings = _step9(reference)
    assert fast == slow
    assert fast_findings == slow_findings
    assert not [f for f in fast_findings if "differs" in f]
    with Ledger.open(path) as led:
        assert state_digest(led.store.db) == fast[0]


# -- the fold of main that knows which objects have gated rows ------------------------------------


def test_rebuild_of_a_hooked_mixed_history_is_identical(tmp_path: Path) -> None:
    """A history appended through the default hooks (FALSIFY with evidence) rebuilds identically.

    The rebuild's fold of main answers "no gated rows" without a query for objects it never
    wrote a row of (``gated.Pending(complete=True)``); the append path always queries. Equal
    digests and falsification tables before and after say both answer alike.
    """
    from memroot.bench.hooked import mixed_history
    from memroot.memory_root import stack

    path = tmp_path / "mixed.db"
    Ledger.init(path).close()
    with Ledger.open(path, hooks=stack.default_hooks()) as led:
        items = list(mixed_history(3000, batch=250))
        for start in range(0, len(items), 250):
            led.append_batch(items[start : start + 250])
    with Ledger.open(path) as led:
        before = led.store.db.execute("SELECT * FROM fz_states ORDER BY 1, 2, 3").fetchall()
        assert before  # the FALSIFY operations landed
        report = rebuild(led, also=[StatesRebuild(led), LayerTablesRebuild(led)])
        assert report.identical
        after = led.store.db.execute("SELECT * FROM fz_states ORDER BY 1, 2, 3").fetchall()
        assert after == before
        assert gated._COMPLETE.get(led.store.db) is None  # the holder let go at the end


class _Boom:
    """A layer that fails at its 50th entry (a rebuild that rolls back)."""

    def __init__(self) -> None:
        self.n = 0

    def start(self, db: Any) -> None:
        """Nothing to install."""

    def feed(self, entries: Any) -> None:
        """Count the entries; fail at the 50th."""
        self.n += len(entries)
        if self.n >= 50:
            raise RuntimeError("boom")

    def finish(self) -> None:
        """Nothing held."""


def test_a_failed_rebuild_leaves_no_holder_answering_for_the_table(tmp_path: Path) -> None:
    """After a rebuild that raises (rolled back), reads of mem_gated query the table again."""
    path = tmp_path / "fail.db"
    _ledger(path, 5)
    with Ledger.open(path) as led:
        with pytest.raises(RuntimeError, match="boom"):
            rebuild(led, also=[_Boom()])
        assert gated._COMPLETE.get(led.store.db) is None
