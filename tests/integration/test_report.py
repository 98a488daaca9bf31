"""`memroot report`: one self-contained HTML page, checked as text and in headless Chromium."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner

from memroot.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


def _example(out: Path) -> Path:
    """Build docs/report_example.py's ledger (and report) in ``out``; return the ledger."""
    spec = importlib.util.spec_from_file_location("report_example", ROOT / "docs/report_example.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build(out)
    return out / "agent.ledger"


def _report(ledger: Path, out: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli, ["-l", str(ledger), "report", str(out), *extra], catch_exceptions=False
    )
    return result.exit_code, result.output


def test_report_is_self_contained(tmp_path: Path) -> None:
    """No script, no external asset: the only URL is the SVG namespace."""
    ledger = _example(tmp_path)
    code, output = _report(ledger, tmp_path / "r.html")
    assert code == 0, output
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<script" not in page and "<link" not in page and " src=" not in page
    assert set(re.findall(r"https?://[^\s\"')]+", page)) == {"http://www.w3.org/2000/svg"}
    assert page.count('class="step"') == 10 and 'data-ok="true"' in page
    assert "Alice switched to coffee" in page  # the falsification's reason
    assert "<svg" in page and page.count('class="lane"') == 3


def test_report_escapes_ledger_text(tmp_path: Path) -> None:
    """Text from entries is escaped: an event cannot inject markup into the page."""
    import memroot

    path = tmp_path / "x.ledger"
    with memroot.open(path) as mem:
        mem.record(content="<script>alert(1)</script>", stream="<b>s</b>")
    code, _ = _report(path, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert code == 0 and "<script" not in page and "&lt;script&gt;" in page


def test_report_of_a_tampered_ledger_shows_the_failure(tmp_path: Path) -> None:
    """A ledger whose content was edited: exit 1, and the page says which step failed."""
    ledger = _example(tmp_path)
    db = apsw.Connection(str(ledger))
    db.execute("UPDATE entries SET content = CAST('forged' AS BLOB) WHERE content IS NOT NULL")
    db.close()
    code, output = _report(ledger, tmp_path / "r.html")
    assert code == 1 and "FAILED" in output
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'data-ok="false"' in page
    assert re.search(r'data-step="4"><td>4</td><td>[^<]*</td><td><span class="badge fail">', page)


def test_report_of_a_rewritten_entry_withholds_the_ledger_data(tmp_path: Path, raw: Any) -> None:
    """The strict read is refused: the page shows the verification and why, no entry."""
    ledger = _example(tmp_path)
    raw.rewrite(ledger)
    code, output = _report(ledger, tmp_path / "r.html")
    assert code == 1 and "ledger data withheld: strict read refused" in output
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'data-ok="false"' in page and 'id="withheld"' in page
    # (verify's own findings may quote the forged field; the served sections are absent)
    assert 'id="entries"' not in page and 'id="roots"' not in page and 'class="lane"' not in page
    assert re.search(r'data-step="5"><td>5</td><td>[^<]*</td><td><span class="badge fail">', page)
    # forensics: --no-strict shows the data, unchecked, under a banner
    code, output = _report(ledger, tmp_path / "f.html", "--no-strict")
    assert code == 1 and "--no-strict" in output
    page = (tmp_path / "f.html").read_text(encoding="utf-8")
    assert 'id="unchecked"' in page and 'id="entries"' in page and 'class="lane"' in page


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.skipif(_browser() is None, reason="no Chromium on this machine (.ci/run installs it)")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    """Chromium loads the page from disk; the rendered DOM has every section and the SVG tree."""
    _example(tmp_path)
    page = tmp_path / "report.html"
    browser = _browser()
    assert browser is not None
    dom = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    sections = ("verify", "identity", "roots", "branches", "falsifications", "receipts", "entries")
    for section in sections:
        assert f'id="{section}"' in dom
    assert 'id="verdict" data-ok="true"' in dom
    assert len(re.findall(r'<tr class="step"', dom)) == 10
    assert len(re.findall(r'<line class="lane"', dom)) == 3
    assert len(re.findall(r'<path class="merge"', dom)) == 1
    # two SNAPSHOT roots and the two re-snapshots the cascade wrote without the falsified input
    assert len(re.findall(r'<tr class="root"', dom)) == 4
    assert len(re.findall(r'<tr class="state-op"', dom)) == 2
    assert len(re.findall(r'<tr class="receipt"', dom)) == 1
