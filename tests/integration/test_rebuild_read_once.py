"""``memroot rebuild`` reads the log strictly once: the memory roots are replayed in the memory
model's pass (``RootsRebuild`` fed the entries it proves), not in a strict read of their own
first. On random histories with automatic and on-demand snapshots, falsified objects and
roots, cascades that re-snapshot roots, SelfModel snapshots and a fork with roots of its own,
the one pass writes, row for row, what the two passes write (``memory_cmds._ONE_PASS`` off)
and what the append hooks stored; an entry that fails its strict read fails both the same
way and changes nothing; a root that does not replay takes the two passes."""

from __future__ import annotations

import itertools
import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.bench.hooked import mixed_history
from memroot.cli import memory_cmds
from memroot.cli.main import cli
from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.errors import MemrootError
from memroot.ledger.ledger import Ledger
from memroot.memory_root import Roots, RootsHook, stack
from memroot.memory_root.branches import create_branch
from memroot.memory_root.falsify.api import Falsifier
from memroot.memory_root.falsify.deps import ROOT, ItemRef
from memroot.memory_root.replay import RootsRebuild
from memroot.memory_root.selfmodel import SelfModel
from memroot.projections.builtins import MemoryStateDigest
from memroot.projections.registry import default_registry
from tests._derived import derived_tables
from tests.unit.native.test_event_rows_differential import append_each
from tests.unit.projections.test_fold_kept_rows import _history

_SETTINGS = settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_PREFIXES = ("mem_", "fz_", "conv_", "git_", "memory_", "selfmodel_", "lg_")


def memroot(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def _derived(path: Path) -> dict[str, list[Any]]:
    """Every derived table of the file, row for row (the full-text index by its shadow rows)."""
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        tables = derived_tables(db, _PREFIXES)
    finally:
        db.close()
    # The map's rows are numbered in write order (a node the hooks met again unread may
    # be stored twice): compared as the nodes they hold and the roots walks start from.
    if "memory_map_nodes" in tables:
        tables["memory_map_nodes"] = sorted({tuple(r[1:4]) for r in tables["memory_map_nodes"]})
    if "memory_map_roots" in tables:
        tables["memory_map_roots"] = sorted({r[0] for r in tables["memory_map_roots"]})
    return tables


def _objects(led: Ledger, branch: str) -> list[str]:
    return [
        str(r[0])
        for r in led.derived.db.execute(
            "SELECT DISTINCT id FROM mem_objects WHERE branch = ? AND vto IS NULL ORDER BY id",
            (branch,),
        )
    ]


def _appended(led: Ledger, rng: random.Random, n: int, branch: str) -> None:
    """Append a random history to ``branch`` in pieces, with snapshots and state changes."""
    roots, fz = Roots(led), Falsifier(led)
    items = iter(_history(rng, n))
    while chunk := list(itertools.islice(items, rng.randrange(5, 40))):
        append_each(led, chunk, None if branch == CANONICAL_BRANCH else branch)
        roots.sign_pending(branch)
        r = rng.random()
        try:
            if r < 0.3:
                roots.snapshot(branch)
            elif r < 0.45:
                roots.record_selfmodel(SelfModel("agent-7"), branch)
            elif r < 0.7 and (objects := _objects(led, branch)):
                target = rng.choice(objects)
                fz.falsify(target, "wrong", branch=branch)
                fz.cascade(target, 3, 50, branch=branch)
            elif r < 0.8 and (latest := roots.latest(branch)) is not None:
                root = ItemRef(ROOT, latest.root.hex())
                fz.falsify(root, "bad root", branch=branch)
                fz.cascade(root, 3, 50, branch=branch)
        except MemrootError:
            pass  # a target already falsified, nothing to cascade: the history goes on


def _ledger(path: Path, seed: int) -> None:
    """A random history appended through the default hooks on ``main`` and on a fork."""
    rng = random.Random(seed)
    Ledger.init(path, hooks=(), snapshot_every=rng.randrange(6, 30)).close()
    with Ledger.open(path, hooks=stack.default_hooks()) as led:
        _appended(led, rng, rng.randrange(60, 200), CANONICAL_BRANCH)
        _, genesis = create_branch(led, branch_type="SIMULATION", purpose="p", actor_id="u1")
        _appended(led, rng, rng.randrange(20, 80), genesis.branch)
        _appended(led, rng, rng.randrange(5, 30), CANONICAL_BRANCH)


def _copy(path: Path, to: Path) -> Path:
    shutil.copyfile(path, to)
    key = path.with_name(path.name + ".key")
    if key.exists():
        shutil.copyfile(key, to.with_name(to.name + ".key"))
    return to


def _rebuild(path: Path, monkeypatch: pytest.MonkeyPatch, *, once: bool) -> tuple[Result, Any]:
    with monkeypatch.context() as m:
        m.setattr(memory_cmds, "_ONE_PASS", once)
        result = memroot(path, "rebuild", "--json")
    out = json.loads(result.stdout) if result.stdout.strip() else None
    if isinstance(out, dict):
        out.pop("seconds")
    return result, out


def _both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> dict[str, Any]:
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))  # one folder per example
    path = tmp_path / "h.ledger"
    _ledger(path, seed)
    stored = _derived(path)
    two = _copy(path, tmp_path / "two.ledger")
    got, report = _rebuild(path, monkeypatch, once=True)
    want, ref = _rebuild(two, monkeypatch, once=False)
    assert got.exit_code == want.exit_code == 0, got.output + want.output
    assert report == ref
    assert report["identical"] is True
    rebuilt = _derived(path)
    assert rebuilt.keys() == _derived(two).keys() == stored.keys()
    for name, rows in rebuilt.items():
        assert rows == _derived(two)[name], name
        # The roots' and the falsification layer's rows are what the hooks wrote (the memory
        # model's row ids follow the replay's order, branch by branch: its digests say
        # ``identical``); ``fz_folds`` is the cascades' fold-state cache, a rebuild empties.
        if name.startswith(("fz_", "memory_", "selfmodel_")) and name != "fz_folds":
            assert rows == stored[name], name
    return rebuilt


@_SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_one_read_rebuilds_what_two_reads_and_the_hooks_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Random histories with roots on two branches: one pass = two passes = the hooks' rows."""
    _both(tmp_path, monkeypatch, seed)


def test_the_histories_reach_what_the_roots_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The histories hold roots on both branches, SelfModels, re-snapshots and root states.

    Without this the comparison above could pass on histories where the roots' layer has
    nothing to write.
    """
    seen: dict[str, int] = {}
    for seed in range(4):
        tables = _both(tmp_path, monkeypatch, seed)
        branches = {r[1] for r in tables["memory_roots"]}
        seen["forks"] = seen.get("forks", 0) + (len(branches) > 1)
        for name in ("memory_map_nodes", "selfmodel_snapshots", "memory_root_resnapshots"):
            seen[name] = seen.get(name, 0) + len(tables[name])
        states = {r[9] for r in tables["memory_roots"]}
        seen["not live"] = seen.get("not live", 0) + len(states - {"live"})
    assert all(seen.values()), seen


def _tamper_entry(path: Path, seq: int) -> None:
    """Flip one byte inside the stored bytes of entry ``seq`` of ``main``."""
    with Ledger.open(path, hooks=()) as led:
        k = (led.store.branch(CANONICAL_BRANCH).no << 40) | seq
    db = apsw.Connection(str(path))
    try:
        (data,) = db.execute("SELECT data FROM entries WHERE k = ?", (k,)).fetchone()
        raw = bytearray(data)
        raw[len(raw) // 2] ^= 0x01
        db.execute("UPDATE entries SET data = ? WHERE k = ?", (bytes(raw), k))
    finally:
        db.close()


def _mixed(path: Path, n: int) -> None:
    """``memroot bench``'s mixed history of ``n`` entries through the default hooks."""
    Ledger.init(path, hooks=(), snapshot_every=100).close()
    items = mixed_history(n, batch=500)
    with Ledger.open(path, hooks=stack.default_hooks()) as led:
        roots = Roots(led)
        while chunk := list(itertools.islice(items, 500)):
            led.append_batch(chunk)
            roots.sign_pending()


@pytest.mark.parametrize(
    ("history", "where"),
    [("random", "event"), ("random", "SNAPSHOT"), ("mixed", "event"), ("mixed", "SNAPSHOT")],
)
def test_an_entry_that_fails_its_strict_read_fails_both_ways_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, history: str, where: str
) -> None:
    """A tampered entry (an event, or a SNAPSHOT the roots replay): the same error, no change.

    In the mixed history of 3,000 entries the entry is in the third chunk the reader proves,
    after the roots' layer wrote the records of the SNAPSHOTs before it.
    """
    path = tmp_path / "h.ledger"
    if history == "random":
        _ledger(path, 7)
    else:
        _mixed(path, 3000)
    with Ledger.open(path, hooks=()) as led:
        kinds = [(e.seq, e.type) for e in led.entries()]
    after = 20 if history == "random" else 2500
    seq = next(s for s, t in kinds[after:] if (t == "SNAPSHOT") == (where == "SNAPSHOT"))
    _tamper_entry(path, seq)
    two = _copy(path, tmp_path / "two.ledger")
    before = _derived(path)
    got, _ = _rebuild(path, monkeypatch, once=True)
    want, _ = _rebuild(two, monkeypatch, once=False)
    assert got.exit_code == want.exit_code != 0
    assert got.stderr == want.stderr and "strict read refused" in got.stderr
    assert _derived(path) == _derived(two) == before


def test_a_root_that_does_not_replay_takes_the_two_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SNAPSHOT repeated later does not replay: both ways keep the roots and say why."""
    from memroot.ledger.entries import _library_op
    from memroot.ledger.vocab import OpType

    path = tmp_path / "h.ledger"
    _ledger(path, 3)
    with Ledger.open(path, hooks=[]) as raw:
        old = next(e for e in raw.entries() if e.type == "SNAPSHOT")
        raw.append(_library_op(Ledger.system_op(OpType.SNAPSHOT, old.body["payload"])))
    two = _copy(path, tmp_path / "two.ledger")
    before = _derived(path)
    got, report = _rebuild(path, monkeypatch, once=True)
    want, ref = _rebuild(two, monkeypatch, once=False)
    assert got.exit_code == want.exit_code == 1
    assert got.stderr == want.stderr and "the memory roots were not rebuilt" in got.stderr
    assert report == ref and "does not replay" in report["roots"]["error"]
    after = _derived(path)
    assert after == _derived(two)
    for name in ("memory_roots", "memory_root_summaries", "memory_map_nodes"):
        assert after[name] == before[name], name  # the roots as they were


def test_a_state_projection_keeps_the_roots_own_read(tmp_path: Path) -> None:
    """A registry with a state projection (it reads the stored memory model): no shared pass."""
    registry = default_registry()
    registry.register(MemoryStateDigest())
    path = tmp_path / "h.ledger"
    Ledger.init(path, hooks=()).close()
    with Ledger.open(path, hooks=[RootsHook(registry)]) as led:
        assert Roots(led).rebuild_layer() is None
        with pytest.raises(ValueError, match="state projection"):
            RootsRebuild(led, registry)
    with Ledger.open(path, hooks=[RootsHook()]) as led:
        assert isinstance(Roots(led).rebuild_layer(), RootsRebuild)
