"""Attacks on the full-text index (``mem_fts``): verify reports them; rebuild repairs them.

The index is derived: a text query (``recall(text=...)``, ``memroot query --text``) finds
objects through it. An attacker with write access to the file, in a process of its own with
plain ``sqlite3``, takes an object out of the words of its value (it drops out of every text
query for them), or answers another object for a word it does not hold. ``memroot verify``
(step 9) reports each; ``memroot rebuild`` writes the index anew. That a strict text query
does not refuse them yet is a known gap (docs/FORMAT.md §6.14, "It does not prove").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli
from tests.integration._attack import attacker, counts, opened, two_facts

FINDING = "the full-text index (mem_fts) is not the index of the values it covers"


def _run(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args])


def _first_rid(path: Path, value: str) -> int:
    db = apsw.Connection(str(path))
    try:
        row = db.execute(
            "SELECT rid FROM mem_objects WHERE value = ? AND rid = oid", (value,)
        ).fetchone()
        return int(row[0])
    finally:
        db.close()


def _tea(path: Path) -> list[str]:
    with opened(path) as mem:
        return sorted(r.object.value for r in mem.recall(text="tea"))


TEA = "Alice takes tea without sugar"
LYON = "Alice lives in Lyon"


def _unindexed(rid: int) -> str:
    """Take object ``rid`` out of the words of its value (a text query for them drops it)."""
    return (
        f"INSERT INTO mem_fts(mem_fts, rowid, value) VALUES('delete', {rid}, '{TEA}');"
        f"INSERT INTO mem_fts(rowid, value) VALUES({rid}, 'Alice takes without sugar');"
    )


def _answered(rid: int) -> str:
    """Answer object ``rid`` (Lyon) for the word 'tea' its value does not hold."""
    return (
        f"INSERT INTO mem_fts(mem_fts, rowid, value) VALUES('delete', {rid}, '{LYON}');"
        f"INSERT INTO mem_fts(rowid, value) VALUES({rid}, '{LYON} tea');"
    )


@pytest.mark.parametrize(
    ("attack", "target"),
    [
        pytest.param(_unindexed, TEA, id="object_taken_out_of_its_words"),
        pytest.param(_answered, LYON, id="object_answered_for_a_word_it_lacks"),
    ],
)
def test_edited_text_index_is_reported_by_verify_and_rebuilt(
    tmp_path: Path, attack: Callable[[int], str], target: str
) -> None:
    """The edit changes what a text query answers; verify says so; rebuild restores it."""
    path = two_facts(tmp_path / "l.ledger")
    assert _tea(path) == [TEA]  # the index is built (the mark covers both objects)
    honest = _run(path, "verify", "--json")
    assert honest.exit_code == 0, honest.output
    before = counts(path)
    attacker(path, attack(_first_rid(path, target)))
    assert _tea(path) != [TEA]  # what the attack does to a text query
    found = _run(path, "verify", "--json")
    assert found.exit_code == 1
    report = json.loads(found.stdout)
    assert any(f["step"] == 9 and FINDING in f["message"] for f in report["findings"]), report
    assert counts(path) == before  # the log itself untouched
    assert _run(path, "rebuild").exit_code == 0
    assert _tea(path) == [TEA]
    assert _run(path, "verify").exit_code == 0


def test_index_behind_its_values_is_no_finding(tmp_path: Path) -> None:
    """Objects remembered after the last text query (not indexed yet) are no false alarm."""
    path = two_facts(tmp_path / "l.ledger")
    assert _tea(path) == [TEA]
    with opened(path) as mem:
        said = mem.record(content="I like green tea")
        mem.remember("Alice likes green tea", evidence=[said.id])
    ok = _run(path, "verify")
    assert ok.exit_code == 0, ok.output
    assert _tea(path) == ["Alice likes green tea", TEA]
    assert _run(path, "verify").exit_code == 0
