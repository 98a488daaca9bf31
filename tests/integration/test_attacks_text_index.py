"""Attacks on the full-text index (``mem_fts``): reads refuse them, verify reports them,
rebuild repairs them.

The index is derived: a text query (``recall(text=...)``, ``memroot query --text``) finds
objects through it. An attacker with write access to the file, in a process of its own with
plain ``sqlite3``, takes an object out of the words of its value (it would drop out of every
text query for them), or answers another object for a word it does not hold. A strict text
query refuses both (the log's own values say which objects the words select,
``projections.assert_index``); ``memroot verify`` (step 9) reports each; ``memroot rebuild``
writes the index anew.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli
from memroot.ledger.errors import IntegrityError
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
    """A text query refuses the edit (facade and CLI); verify says so; rebuild restores it."""
    path = two_facts(tmp_path / "l.ledger")
    assert _tea(path) == [TEA]  # the index is built (the mark covers both objects)
    honest = _run(path, "verify", "--json")
    assert honest.exit_code == 0, honest.output
    before = counts(path)
    attacker(path, attack(_first_rid(path, target)))
    with pytest.raises(IntegrityError, match="by the full-text index for the words 'tea'"):
        _tea(path)  # the facade's recall refuses, naming the object
    refused = _run(path, "query", "--text", "tea", "--json")
    assert refused.exit_code == 1 and "full-text index" in refused.output, refused.output
    assert TEA not in refused.stdout and LYON not in refused.stdout
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


def test_value_edited_out_of_its_words_before_indexing_is_refused(tmp_path: Path) -> None:
    """A value edited before the first text query indexes it: the index is built from the
    edited value, so mem_fts and the stored value agree, and only the log's value shows the
    object dropped. The text query refuses; verify reports the row; rebuild restores it."""
    path = two_facts(tmp_path / "l.ledger")
    before = counts(path)
    attacker(path, f"UPDATE mem_objects SET value = 'Alice takes coffee' WHERE value = '{TEA}';")
    with pytest.raises(IntegrityError, match="left out by the full-text index"):
        _tea(path)
    assert _run(path, "query", "--text", "tea").exit_code == 1
    assert _run(path, "verify").exit_code == 1
    assert counts(path) == before
    assert _run(path, "rebuild").exit_code == 0
    assert _tea(path) == [TEA]
    assert _run(path, "verify").exit_code == 0


def _facts(path: Path) -> list[str]:
    with opened(path) as mem:
        return sorted(r.object.value for r in mem.recall(types=["FACT"]))


def test_type_edited_out_of_a_type_query_is_refused(tmp_path: Path) -> None:
    """An object's stored type edited (FACT to PREFERENCE): a query for FACTs would drop it.
    Its ASSERT says FACT, so the query refuses (facade and CLI); verify reports the row;
    rebuild restores it."""
    path = two_facts(tmp_path / "l.ledger")
    assert _facts(path) == [LYON, TEA]
    before = counts(path)
    attacker(path, f"UPDATE mem_objects SET type = 'PREFERENCE' WHERE value = '{TEA}';")
    with pytest.raises(IntegrityError, match="left out by the stored types for"):
        _facts(path)
    refused = _run(path, "query", "--type", "FACT", "--json")
    assert refused.exit_code == 1 and TEA not in refused.stdout, refused.output
    assert _run(path, "verify").exit_code == 1
    assert counts(path) == before
    assert _run(path, "rebuild").exit_code == 0
    assert _facts(path) == [LYON, TEA]
    assert _run(path, "verify").exit_code == 0
