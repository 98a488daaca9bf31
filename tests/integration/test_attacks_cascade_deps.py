"""A cascade walks a checked dependency index: an edited, deleted or forged edge is refused.

The attacker (no key, plain ``sqlite3`` in its own process) edits the falsification layer's
dependency index so that a cascade stops short (an edge or a touch deleted: what was built
on the falsified item is left live) or reaches too far (a forged edge). ``memroot cascade``
(applied and ``--dry-run``) and the facade's ``Memory.cascade`` must exit 1 / raise
``IntegrityError`` naming the index, write nothing (entries and checkpoints unchanged), and the
honest copy must cascade as the log says.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import memroot
from memroot.cli.main import cli
from memroot.ledger.errors import IntegrityError
from tests.integration._attack import attacker, counts


def run(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def keep_honest(path: Path) -> Path:
    honest = path.with_name("honest.ledger")
    shutil.copy(path, honest)
    shutil.copy(path.with_name(path.name + ".key"), honest.with_name("honest.ledger.key"))
    return honest


@pytest.fixture
def chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, str, str]:
    """A fact, a root on it, a second root over the first; the fact falsified."""
    monkeypatch.setenv("MEMROOT_TRUSTED", str(tmp_path / "trusted.json"))
    path = tmp_path / "m.ledger"
    with memroot.open(path, actor="agent-7", namespace="alice") as mem:
        ev = mem.record(content="I take my tea without sugar")
        fact = mem.remember("Alice takes tea without sugar", evidence=[ev.id]).id
        first = mem.snapshot().record.root.hex()
        ev2 = mem.record(content="I live in Lyon")
        mem.remember("Alice lives in Lyon", evidence=[ev2.id])
        second = mem.snapshot().record.root.hex()
        mem.falsify(first, "the snapshot was taken from a bad import")
        mem.falsify(fact, "she takes sugar")
    return path, fact, first, second


def refused(path: Path, origin: str) -> None:
    """The cascade from ``origin`` is refused by the CLI and the facade; nothing written."""
    before = counts(path)
    for args in (("--dry-run",), ("--reason", "recheck")):
        r = run(path, "cascade", origin, "--max-depth", "3", *args)
        assert r.exit_code == 1, r.output
        assert "dependency index" in r.output and "derived state edited" in r.output
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        for dry in (True, False):
            with pytest.raises(IntegrityError) as e:
                mem.cascade(origin, max_depth=3, dry_run=dry)
            assert e.value.step == 9 and "dependency index" in str(e.value)
    assert counts(path) == before


def touched(path: Path, origin: str) -> set[str]:
    r = run(path, "cascade", origin, "--max-depth", "3", "--reason", "recheck", "--json")
    assert r.exit_code == 0, r.output
    return {t["id"] for t in json.loads(r.stdout)["touched"]}


def test_cascade_edge_deleted(chain: tuple[Path, str, str, str]) -> None:
    """The edge 'the second root was built on the first' deleted: the cascade is refused."""
    path, _, first, second = chain
    honest = keep_honest(path)
    attacker(path, f"DELETE FROM fz_edges WHERE dep_id = '{first}' AND id = '{second}';")
    refused(path, first)
    assert second in touched(honest, first)
    assert run(honest, "verify").exit_code == 0


def test_cascade_touch_deleted(chain: tuple[Path, str, str, str]) -> None:
    """The fact's input rows deleted (no root reads as built on it): the cascade is refused."""
    path, fact, first, _ = chain
    honest = keep_honest(path)
    attacker(path, f"DELETE FROM fz_touches WHERE id = '{fact}';")
    refused(path, fact)
    assert any(t.startswith(first) for t in touched(honest, fact))  # its summary items


def test_cascade_edge_forged(chain: tuple[Path, str, str, str], tmp_path: Path) -> None:
    """A forged edge (the first root 'built on' the second, a cycle): the cascade is refused."""
    path, fact, first, second = chain
    attacker(
        path,
        "INSERT INTO fz_edges VALUES('memory_root', "
        f"'{second}', 'memory_root', '{first}', 'main', 1);",
    )
    refused(path, fact)


def test_cascade_edge_deleted_after_a_checked_cascade(
    chain: tuple[Path, str, str, str],
) -> None:
    """An open handle that checked the index once still sees an edge deleted afterwards."""
    path, fact, first, second = chain
    with memroot.open(path, actor="agent-7", namespace="alice", create=False) as mem:
        mem.cascade(fact, max_depth=1, dry_run=True)  # checks (and remembers) the index
        attacker(path, f"DELETE FROM fz_edges WHERE dep_id = '{first}' AND id = '{second}';")
        before = counts(path)
        with pytest.raises(IntegrityError):
            mem.cascade(first, max_depth=3)
        assert counts(path) == before
