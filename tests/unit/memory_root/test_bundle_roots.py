"""Memory-root records travel in bundles and are checked against their SNAPSHOT entries."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.bundle.audit import audit_bundle
from memroot.ledger.bundle.export import BundleReader, export_bundle
from memroot.ledger.entries import EventInput
from memroot.ledger.ledger import Ledger
from memroot.memory_root import Roots
from memroot.memory_root.bundle_section import SECTION, RootsSection, RootsSectionCheck
from memroot.memory_root.stack import default_hooks


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    path = tmp_path / "r.ledger"
    Ledger.init(
        path, origin="example.org/roots-bundle", snapshot_every=5, hooks=default_hooks()
    ).close()
    with Ledger.open(path, hooks=default_hooks()) as ledger:
        ledger.append_batch(
            EventInput(
                stream="s",
                actor_id="a",
                actor_type="AI_AGENT",
                role="USER",
                content=f"e{i}",
                namespace_id="ns",
            )
            for i in range(12)
        )
        Roots(ledger).snapshot()
    return path


def _audit(path: Path, out: Path, sections: list[Any]) -> Any:
    with Ledger.open(path, hooks=default_hooks()) as ledger:
        export_bundle(ledger, out, sections=sections)
        vkey = ledger.vkey()
    reader = BundleReader(out)
    return audit_bundle(
        reader, vkeys=[vkey], checks=[RootsSectionCheck(reader)], update_trusted=False
    )


def test_every_root_travels_and_checks_out(ledger_path: Path, tmp_path: Path):
    """One record per SNAPSHOT entry, each matching its entry and its summary digests."""
    report = _audit(ledger_path, tmp_path / "b", [RootsSection()])
    assert report.ok, [str(f) for f in report.findings]
    records = list(BundleReader(tmp_path / "b").section(SECTION))
    with Ledger.open(ledger_path) as ledger:
        snapshots = [e.seq for e in ledger.entries() if e.type == "SNAPSHOT"]
    assert [r["seq"] for r in records] == snapshots and len(snapshots) >= 3
    assert all(r["summaries"] for r in records)


class _Forged(RootsSection):
    def __init__(self, change: str) -> None:
        self.change = change

    def records(self, ledger: Ledger) -> Iterable[Any]:
        out = list(super().records(ledger))
        if self.change == "summary":
            out[0]["summaries"][0]["data"] += b"\x00"
        elif self.change == "root":
            out[0]["payload"] = {**out[0]["payload"], "memory_root": bytes(32)}
        elif self.change == "dropped":
            out = out[1:]
        return out


@pytest.mark.parametrize("change", ["summary", "root", "dropped"])
def test_forged_root_records_are_caught(ledger_path: Path, tmp_path: Path, change: str):
    """An altered summary, a record naming another root, or a missing record is step 8."""
    report = _audit(ledger_path, tmp_path / "b", [_Forged(change)])
    step8 = [f for f in report.findings if f.step == 8]
    assert step8 and step8[0].branch == "main" and step8[0].seq is not None


def test_bundle_without_records_is_noted(ledger_path: Path, tmp_path: Path):
    """A bundle exported without the section still audits, with a note saying so."""
    report = _audit(ledger_path, tmp_path / "b", [])
    assert report.ok
    assert any(n.step == 8 and "no memory-root records" in n.message for n in report.notes)
