"""Writes validate against checked state: an edited cache never decides what an append may do.

The attacker (no key) edits the derived tables from its own process; ``memroot append`` then
asks for an operation the edit would allow. Each test asserts exit 1 naming the integrity
failure, that nothing was written (entries and checkpoints before and after), and that the
honest copy still takes the same kind of append where it is valid.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from memroot.cli.main import cli
from tests.integration._attack import attacker, counts, event, op


def memroot(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def append(path: Path, obj: dict[str, Any]) -> dict[str, Any]:
    r = memroot(path, "append", "--json", json.dumps(obj))
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout)[0])


def assert_tea(path: Path, ev: str) -> str:
    made = append(
        path,
        op(
            "ASSERT",
            {
                "object_type": "PREFERENCE",
                "epistemic_type": "OBSERVED",
                "source_type": "USER_STATED",
                "evidence_ids": [ev],
                "value": "Alice takes tea without sugar",
                "confidence": None,
                "salience": 0.7,
            },
        ),
    )
    return str(made["id"])


def deprecate(ev: str) -> dict[str, Any]:
    return {"reason": "she changed her mind", "deprecated_by": "alice", "evidence_ids": [ev]}


def test_append_deprecate_of_deprecated_object_set_active_in_cache(tmp_path: Path) -> None:
    """A deprecated object set back to ACTIVE in the cache: a second DEPRECATE is refused."""
    path = tmp_path / "m.ledger"
    assert memroot(path, "init").exit_code == 0
    ev = str(append(path, event("I take my tea without sugar"))["id"])
    tea = assert_tea(path, ev)
    append(path, op("DEPRECATE", deprecate(ev), tea))
    honest = tmp_path / "honest.ledger"
    shutil.copy(path, honest)
    shutil.copy(path.with_name("m.ledger.key"), honest.with_name("honest.ledger.key"))
    attacker(
        path,
        f"UPDATE mem_objects SET lifecycle_state = 'ACTIVE' WHERE id = '{tea}' AND vto IS NULL;",
    )
    before = counts(path)
    r = memroot(path, "append", "--json", json.dumps(op("DEPRECATE", deprecate(ev), tea)))
    assert r.exit_code == 1, r.output
    assert "derived state edited" in r.output and r.stdout == ""
    assert counts(path) == before  # nothing written, nothing signed
    # The honest ledger refuses the same DEPRECATE by its rule (already deprecated)...
    h = memroot(honest, "append", "--json", json.dumps(op("DEPRECATE", deprecate(ev), tea)))
    assert h.exit_code != 0 and "derived state edited" not in h.output
    # ...and still takes a valid one.
    other = assert_tea(honest, ev)
    append(honest, op("DEPRECATE", deprecate(ev), other))


def test_append_citing_evidence_whose_content_was_edited(tmp_path: Path) -> None:
    """An ASSERT citing an event whose stored content was edited is refused, nothing written."""
    path = tmp_path / "m.ledger"
    assert memroot(path, "init").exit_code == 0
    said = append(path, event("I take my tea without sugar"))
    attacker(
        path,
        "UPDATE entries SET content = CAST('I take my tea with MALLORY sugar' AS BLOB) "
        f"WHERE k = {(1 << 40) | int(said['seq'])};",
    )
    before = counts(path)
    r = memroot(
        path,
        "append",
        "--json",
        json.dumps(
            op(
                "ASSERT",
                {
                    "object_type": "PREFERENCE",
                    "epistemic_type": "OBSERVED",
                    "source_type": "USER_STATED",
                    "evidence_ids": [said["id"]],
                    "value": "Alice takes tea",
                    "confidence": None,
                    "salience": 0.7,
                },
            )
        ),
    )
    assert r.exit_code == 1 and "step 4" in r.output, r.output
    assert "MALLORY" not in r.output
    assert counts(path) == before


def test_append_onto_restored_older_copy_is_refused(tmp_path: Path) -> None:
    """With a trusted state, `memroot append` onto a restored older copy exits 1, writes none."""
    path = tmp_path / "m.ledger"
    assert memroot(path, "init").exit_code == 0
    append(path, event("first"))
    old = tmp_path / "old.ledger"
    shutil.copy(path, old)
    append(path, event("second"))
    assert memroot(path, "verify").exit_code == 0  # records the trusted state (MEMROOT_TRUSTED)
    shutil.copy(old, path)  # the restored older copy
    before = counts(path)
    r = memroot(path, "append", "--json", json.dumps(event("third")))
    assert r.exit_code == 1 and "rollback" in r.output, r.output
    assert counts(path) == before


def test_facade_keeps_a_trusted_state_and_refuses_a_rollback(tmp_path: Path) -> None:
    """memroot.open records the heads it read; a restored older copy is then refused."""
    import pytest

    import memroot as mr
    from memroot.ledger.errors import IntegrityError

    trusted = tmp_path / "lib-trusted.json"
    path = tmp_path / "m.ledger"
    with mr.open(path, trusted=trusted) as mem:
        mem.record(content="first")
    old = tmp_path / "old.ledger"
    shutil.copy(path, old)
    with mr.open(path, trusted=trusted) as mem:
        mem.record(content="second")
    assert trusted.exists()
    shutil.copy(old, path)
    before = counts(path)
    with pytest.raises(IntegrityError) as e:
        mr.open(path, trusted=trusted)
    assert e.value.step == 10
    assert counts(path) == before
    with mr.open(path, trusted=False) as mem:  # opted out: forensics on the old copy
        assert mem.ledger.size() == before[0]
