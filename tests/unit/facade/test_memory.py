"""memroot.open / Memory: the facade an agent runtime calls, on real ledger files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

import memroot
from memroot.ledger.errors import NotFoundError, RefusedError, ValidationError

ROOT = Path(__file__).resolve().parents[3]


def _open(tmp_path: Path) -> memroot.Memory:
    return memroot.open(tmp_path / "a.ledger", actor="agent-7", namespace="alice")


def test_import_memroot_is_cheap() -> None:
    """`import memroot` and the offline auditor import work with apsw, click and blake3 blocked."""
    code = (
        "import sys\n"
        "for m in ('apsw', 'click', 'blake3'): sys.modules[m] = None\n"
        "import memroot\n"
        "assert memroot.__version__\n"
        "import memroot.ledger.bundle.audit\n"
        "assert 'memroot.memory' not in sys.modules\n"
        "try:\n"
        "    memroot.open\n"
        "except ImportError:\n"
        "    print('lazy')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "lazy"


def test_unknown_attribute_is_an_attribute_error() -> None:
    """A misspelt name on the package fails as AttributeError, not ImportError."""
    with pytest.raises(AttributeError, match="opne"):
        memroot.opne  # noqa: B018


def test_record_dict_and_keywords(tmp_path: Path) -> None:
    """record takes a dict or keywords, fills the defaults, and links a parent event."""
    with _open(tmp_path) as mem:
        a = mem.record(content="hello", actor="alice", actor_type="HUMAN_USER", role="USER")
        b = mem.record({"content": "hi", "parent": a.id})
        e = mem.ledger.entry(b.seq)
        assert e.body["actor_id"] == "agent-7" and e.body["namespace_id"] == "alice"
        assert e.body["parent_event_id"] == a.id and e.body["role"] == "ASSISTANT"
        assert mem.ledger.content(a.seq) == "hello"


def test_record_refuses_bad_fields_and_writes_nothing(tmp_path: Path) -> None:
    """Unknown, duplicated or missing fields are refused by name; the ledger does not grow."""
    with _open(tmp_path) as mem:
        size = mem.ledger.size()
        with pytest.raises(ValidationError, match="colour"):
            mem.record(content="x", colour="red")
        with pytest.raises(ValidationError, match="content"):
            mem.record(role="USER")
        with pytest.raises(ValidationError, match="both"):
            mem.record({"content": "x"}, content="y")
        with pytest.raises(ValidationError, match="role"):
            mem.record(content="x", role="WIZARD")
        assert mem.ledger.size() == size


def test_remember_recall_as_of_and_why(tmp_path: Path) -> None:
    """An ASSERT cites its evidence; recall finds it now but not as of before it; why proves it."""
    with _open(tmp_path) as mem:
        said = mem.record(content="I take tea without sugar", role="USER")
        tea = mem.remember("Alice takes tea", evidence=[said.id], object_type="PREFERENCE")
        hits = mem.recall(text="tea")
        assert [r.object.id for r in hits] == [tea.id]
        assert mem.recall(text="tea", as_of=said.seq) == []
        assert mem.recall(text="coffee") == []
        w = mem.why(tea.id)
        assert [ev.event_id for ev in w.evidence] == [said.id]  # type: ignore[union-attr]
        with pytest.raises(RefusedError):
            mem.remember("no evidence", evidence=["01900000-0000-7000-8000-000000000009"])
        with pytest.raises(ValidationError, match="as_of"):
            mem.recall(as_of=10_000)
        with pytest.raises(ValidationError, match="mode"):
            mem.recall(mode="EVERYTHING")


def test_falsify_cascade_snapshot(tmp_path: Path) -> None:
    """falsify flips one item; a dry-run cascade writes nothing; an applied one appends CASCADE."""
    with _open(tmp_path) as mem:
        said = mem.record(content="the sky is green")
        obj = mem.remember("sky is green", evidence=[said.id])
        root = mem.snapshot()
        assert root.created and mem.snapshot().created is False
        mem.falsify(obj.id, "wrong colour")
        assert mem.state(obj.id) == "falsified"
        assert mem.state(root.record.root.hex()) == "live"
        size = mem.ledger.size()
        plan = mem.cascade(obj.id, dry_run=True)
        assert mem.ledger.size() == size
        assert root.record.root.hex() in {s.item.id for s in plan.touched}  # type: ignore[union-attr]
        mem.cascade(obj.id, reason="propagate")
        assert mem.ledger.entry(size).type == "CASCADE"
        assert mem.state(root.record.root.hex()) == "stale"


def test_fork_and_merge(tmp_path: Path) -> None:
    """A branch sees main at the fork; a merged object lands in main."""
    with _open(tmp_path) as mem:
        said = mem.record(content="plan A")
        sim = mem.fork("try plan B", branch_type="PLANNING", expiry_days=3)
        ev = mem.record(content="plan B works", branch=sim)
        obj = mem.remember("plan B works", evidence=[ev.id], branch=sim)
        assert mem.recall(text="plan", branch="main") == []
        assert [r.object.id for r in mem.recall(text="plan", branch=sim)] == [obj.id]
        result = mem.merge(sim, [obj.id])
        assert result.items[0].outcome == "IMPORTED"
        assert len(mem.recall(text="plan")) == 1
        assert said.branch == "main"


def test_verify_passes_then_catches_tampering(tmp_path: Path) -> None:
    """verify() runs every step: clean on a fresh ledger, a violation after content is edited."""
    with _open(tmp_path) as mem:
        said = mem.record(content="original")
        mem.remember("x", evidence=[said.id])
        assert mem.verify(trusted=tmp_path / "t.json").ok
    db = apsw.Connection(str(tmp_path / "a.ledger"))
    db.execute("UPDATE entries SET content = ? WHERE content = ?", (b"forged!!", b"original"))
    db.close()
    with _open(tmp_path) as mem:
        report = mem.verify(trusted=tmp_path / "t.json")
        assert not report.ok and any(f.step == 4 for f in report.findings)


def test_open_without_create(tmp_path: Path) -> None:
    """create=False on a missing file is refused and creates nothing."""
    with pytest.raises(NotFoundError):
        memroot.open(tmp_path / "none.ledger", create=False)
    assert not (tmp_path / "none.ledger").exists()


def test_readme_example_runs(tmp_path: Path) -> None:
    """The README's `memroot.open` example runs as written."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- example: facade -->\n```python\n(.*?)```", text, re.S)
    assert m is not None
    env = {**os.environ, "MEMROOT_TRUSTED": str(tmp_path / "trusted.json")}
    subprocess.run(
        [sys.executable, "-c", m.group(1)], cwd=tmp_path, env=env, check=True, timeout=120
    )
    assert (tmp_path / "alice.ledger").exists()
