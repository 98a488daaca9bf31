"""`memroot report` for auditors (issues 25.4, 23.9): never destroys a file, reads read-only
media without a key, and shows what an auditor looks for, checked as text and in Chromium.

The attacks (an edited content, a forged receipt) run in their own process on the closed
file, as someone with disk access and no key would.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memroot

ROOT = Path(__file__).resolve().parents[2]
MEMROOT = str(Path(sys.executable).with_name("memroot"))


def _example(out: Path) -> Path:
    """Build docs/report_example.py's ledger (and report) in ``out``; return the ledger."""
    spec = importlib.util.spec_from_file_location("report_example", ROOT / "docs/report_example.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build(out)
    return out / "agent.ledger"


def _report(ledger: Path, out: Path, *extra: str) -> tuple[int, str]:
    r = subprocess.run(
        [MEMROOT, "-l", str(ledger), "report", str(out), *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "MEMROOT_TRUSTED": str(out.parent / "trusted.json")},
    )
    return r.returncode, r.stdout + r.stderr


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _edit_content(ledger: Path) -> None:
    """Attack, in its own process: replace every stored event content with 'forged'."""
    code = (
        "import apsw, sys\n"
        "db = apsw.Connection(sys.argv[1])\n"
        "db.execute(\"UPDATE entries SET content = CAST('forged' AS BLOB) "
        'WHERE content IS NOT NULL")\n'
        "db.close()\n"
    )
    subprocess.run([sys.executable, "-c", code, str(ledger)], check=True)


# -- never destroy a file ------------------------------------------------------------------------


def test_report_never_overwrites_the_ledger_or_its_key_even_with_force(tmp_path: Path) -> None:
    """report onto the ledger, its key, its WAL or the trusted state: exit 3, each left as it
    was, even with --force (a symlink to the ledger too)."""
    ledger = _example(tmp_path)
    (tmp_path / "report.html").unlink()
    with memroot.open(ledger, create=False):  # an open writer keeps a -wal beside the file
        pass
    targets = [ledger, Path(f"{ledger}.key")]
    before = {t: _digest(t) for t in targets}
    for target in targets:
        for extra in ((), ("--force",)):
            code, output = _report(ledger, target, *extra)
            assert code == 3, output
            assert "never replaces it" in output and "Traceback" not in output
    assert {t: _digest(t) for t in targets} == before
    code, output = _report(ledger, Path(f"{ledger}-wal"), "--force")
    assert code == 3 and "never replaces it" in output
    trusted = tmp_path / "trusted.json"  # the trusted state _report points verify at
    trusted.write_text("{}")
    code, output = _report(ledger, trusted, "--force")
    assert code == 3 and "never replaces it" in output and trusted.read_text() == "{}"
    link = tmp_path / "innocent.html"
    link.symlink_to(ledger)
    code, output = _report(ledger, link, "--force")
    assert code == 3 and _digest(ledger) == before[ledger]


def test_report_refuses_a_foreign_file_unless_forced(tmp_path: Path) -> None:
    """An existing file report did not write (a document, another ledger) needs --force."""
    ledger = _example(tmp_path)
    other = tmp_path / "other.ledger"
    with memroot.open(other) as mem:
        mem.record(content="another ledger")
    doc = tmp_path / "notes.html"
    doc.write_text("<!DOCTYPE html><p>my notes</p>")
    for target in (doc, other):
        before = _digest(target)
        code, output = _report(ledger, target)
        assert code == 3 and "is not a page memroot report wrote" in output, output
        assert _digest(target) == before
    code, output = _report(ledger, doc, "--force")
    assert code == 0, output
    assert "memroot report" in doc.read_text()


def test_report_replaces_its_own_page(tmp_path: Path) -> None:
    """A page report wrote (its marker) is replaced without --force; no temporary is left."""
    ledger = _example(tmp_path)
    page = tmp_path / "report.html"
    assert page.exists()
    code, output = _report(ledger, page)
    assert code == 0, output
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".report")) == []


@contextlib.contextmanager
def _read_only(directory: Path) -> Iterator[None]:
    """Make ``directory`` read-only: a read-only bind mount (root), else chmod."""
    if os.geteuid() == 0:
        done = subprocess.run(
            ["mount", "--bind", "-o", "ro", str(directory), str(directory)], capture_output=True
        )
        if done.returncode != 0:
            pytest.skip("root without mount: cannot make a directory read-only")
        try:
            yield
        finally:
            subprocess.run(["umount", str(directory)], check=True)
        return
    directory.chmod(0o555)
    try:
        yield
    finally:
        directory.chmod(0o755)


def test_report_reads_read_only_media_without_a_key(tmp_path: Path) -> None:
    """A ledger on a read-only directory, its key taken away: report works, nothing is made."""
    media = tmp_path / "media"
    _example(media)
    (media / "report.html").unlink()
    ledger = media / "agent.ledger"
    Path(f"{ledger}.key").rename(tmp_path / "key-kept-elsewhere")
    with memroot.open(ledger, create=False):
        pass
    for side in ("-wal", "-shm"):
        Path(f"{ledger}{side}").unlink(missing_ok=True)
    before = _digest(ledger)
    out = tmp_path / "out" / "r.html"
    out.parent.mkdir()
    with _read_only(media):
        with pytest.raises(OSError):
            (media / "probe").write_text("x")
        code, output = _report(ledger, out)
        assert code == 0, output
        assert "Traceback" not in output
    assert _digest(ledger) == before
    assert sorted(p.name for p in media.iterdir()) == ["agent.ledger"]
    assert 'data-ok="true"' in out.read_text()


# -- what the page shows -------------------------------------------------------------------------


def test_tampered_content_is_never_labelled_erased(tmp_path: Path) -> None:
    """Edited content: the strict page withholds it; --no-strict says it does not match."""
    ledger = _example(tmp_path)
    _edit_content(ledger)
    code, output = _report(ledger, tmp_path / "strict.html")
    assert code == 1, output
    strict = (tmp_path / "strict.html").read_text()
    assert "(erased" not in strict and "forged" not in strict.split('id="verify"')[0]
    assert 'id="withheld"' in strict
    code, _ = _report(ledger, tmp_path / "forensic.html", "--no-strict")
    forensic = (tmp_path / "forensic.html").read_text()
    assert code == 1 and "(erased" not in forensic
    assert forensic.count("content does NOT match its commitment") == 4


def test_an_erased_event_is_labelled_with_its_tombstone(tmp_path: Path) -> None:
    """An honest erasure shows as erased, naming the TOMBSTONE entry."""
    path = tmp_path / "e.ledger"
    with memroot.open(path) as mem:
        said = mem.record(content="my card is 4111")
        tomb = mem.forget(said.id, "asked to", policy_ref="gdpr-art-17")
    code, output = _report(path, tmp_path / "r.html")
    assert code == 0, output
    assert f"(erased by entry {tomb.seq})" in (tmp_path / "r.html").read_text()


def test_failure_banner_and_title(tmp_path: Path) -> None:
    """A failing ledger's page opens with a banner and says FAILED in its title; an honest
    one has no banner and says verified."""
    ledger = _example(tmp_path)
    honest = (tmp_path / "report.html").read_text()
    assert 'id="banner"' not in honest
    assert re.search(r"<title>memroot report: example.org/agent-7 \(verified\)</title>", honest)
    _edit_content(ledger)
    code, _ = _report(ledger, tmp_path / "bad.html")
    bad = (tmp_path / "bad.html").read_text()
    assert code == 1
    assert re.search(r"<title>memroot report: [^<]*agent.ledger \(FAILED\)</title>", bad)
    banner = bad.index('id="banner"')
    assert banner < bad.index('id="verify"')
    assert "Verification FAILED" in bad[banner:] and "step (4)" in bad[banner:]


def test_roots_in_recorded_order_with_what_each_replaces(tmp_path: Path) -> None:
    """Roots are listed newest first by entry; each re-snapshot names the root it replaces."""
    _example(tmp_path)
    page = (tmp_path / "report.html").read_text()
    section = page[page.index('id="roots"') : page.index('id="branches"')]
    main = section[: section.index("</table>")]
    rows = re.findall(
        r'<tr class="root" data-root="([0-9a-f]{64})" data-seq="(\d+)">(.*?)</tr>', main
    )
    seqs = [int(seq) for _, seq, _ in rows]
    assert len(rows) == 4 and seqs == sorted(seqs, reverse=True)
    replaced = {
        m.group(1)
        for _, _, cells in rows
        for m in re.finditer(r'class="replaces"><code title="([0-9a-f]{64})"', cells)
    }
    stale = {root for root, _, cells in rows if "badge stale" in cells}
    assert len(replaced) == 2 and replaced == stale
    assert "(4 roots, newest first" in section


def test_values_beside_ids_and_plurals(tmp_path: Path) -> None:
    """Falsified objects and receipts show their values; counts use the right number."""
    _example(tmp_path)
    page = (tmp_path / "report.html").read_text()
    states = page[page.index('id="falsifications"') : page.index('id="receipts"')]
    assert "“Alice takes tea without sugar”" in states
    receipts = page[page.index('id="receipts"') : page.index('id="entries"')]
    assert re.search(
        r"v1 <span class=\"badge live\">live</span> <span class=\"value\">“Alice", receipts
    )
    assert "1 object<ul>" in receipts
    assert "· 1 entry</text>" in page and "1 entries" not in page
    assert "(s)" not in page and "(es)" not in page


# -- in headless Chromium ------------------------------------------------------------------------


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


_MEASURE = """<script>
(function () {
  var svg = document.getElementById("branch-tree");
  var box = svg.viewBox.baseVal;
  var clipped = [];
  svg.querySelectorAll("text").forEach(function (t) {
    var b = t.getBBox();
    if (b.x < 0 || b.x + b.width > box.width || b.y < 0 || b.y + b.height > box.height) {
      clipped.push(t.textContent);
    }
  });
  var wide = [];
  document.querySelectorAll("section, #banner, header").forEach(function (s) {
    if (s.getBoundingClientRect().right > window.innerWidth) { wide.push(s.id || s.tagName); }
  });
  var banner = document.getElementById("banner");
  var r = banner ? banner.getBoundingClientRect() : null;
  document.body.setAttribute("data-measure", JSON.stringify({
    clipped: clipped,
    wide: wide,
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
    texts: svg.querySelectorAll("text").length,
    banner: r ? [r.left, r.top, r.width, r.height] : null
  }));
})();
</script></body>"""


def _chromium(browser: str, *args: str) -> str:
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout


def _png(path: Path) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB or RGBA PNG (what Chromium writes): width, height, pixel rows."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    assert depth == 8 and colour in (2, 6)
    channels = 3 if colour == 2 else 4
    chunks, at = [], 8
    while at < len(data):
        (n,) = struct.unpack(">I", data[at : at + 4])
        if data[at + 4 : at + 8] == b"IDAT":
            chunks.append(data[at + 8 : at + 8 + n])
        at += 12 + n
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 255
        rows.append(
            bytes(line) if channels == 3 else bytes(line[j] for j in range(stride) if j % 4 != 3)
        )
        prev = line
    return width, height, rows


def _long_names_ledger(tmp_path: Path) -> Path:
    """A ledger whose branch labels are long (ids and purposes): the SVG must fit them."""
    path = tmp_path / "long.ledger"
    with memroot.open(path, origin="example.org/a-long-origin-name", actor="agent-7") as mem:
        said = mem.record(content="I take tea without sugar", actor_type="HUMAN_USER", role="USER")
        fact = mem.remember("Alice takes tea without sugar", evidence=[said.id])
        mem.snapshot()
        mem.fork(
            "what if Alice moved to the platform team and stopped drinking tea altogether?",
            branch_type="SIMULATION",
            expiry_days=3,
            branch_id="simulation-of-a-team-move-with-a-very-long-branch-identifier",
        )
        mem.recall(text="tea", receipt="run-1")
        mem.falsify(fact.id, "Alice switched to coffee")
    return path


@pytest.mark.skipif(
    _browser() is None, reason="no Chromium on this machine (apt-get install chromium)"
)
def test_report_layout_in_headless_chromium(tmp_path: Path) -> None:
    """In Chromium no SVG label is clipped, nothing overflows the window, and the screenshot
    shows the red failure banner where the page's own layout puts it."""
    browser = _browser()
    assert browser is not None
    path = _long_names_ledger(tmp_path)
    _edit_content(path)
    code, output = _report(path, tmp_path / "r.html", "--no-strict")
    assert code == 1, output
    page = (tmp_path / "r.html").read_text()
    measured = tmp_path / "measured.html"
    measured.write_text(page.replace("</body>", _MEASURE))
    dom = _chromium(browser, "--window-size=1400,1600", "--dump-dom", measured.as_uri())
    found = re.search(r'data-measure="([^"]*)"', dom)
    assert found is not None, dom[:500]
    m: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    assert m["texts"] >= 4 and m["clipped"] == [], m
    assert m["wide"] == [] and m["scrollWidth"] <= m["innerWidth"], m
    # the screenshot: the window's size, and the banner's middle is the banner's red
    shot = tmp_path / "shot.png"
    _chromium(
        browser, "--window-size=1400,1600", f"--screenshot={shot}", (tmp_path / "r.html").as_uri()
    )
    width, height, rows = _png(shot)
    assert (width, height) == (1400, 1600)
    left, top, _, h = m["banner"]
    x, y = int(left + 8), int(top + h / 2)
    pixel = rows[y][3 * x : 3 * x + 3]
    assert abs(pixel[0] - 0xA1) < 24 and pixel[1] < 64 and pixel[2] < 64, pixel
    header = rows[5][3 * 5 : 3 * 5 + 3]
    assert header[0] < 64 and header[2] < 80  # the dark page header


@pytest.mark.skipif(
    _browser() is None, reason="no Chromium on this machine (apt-get install chromium)"
)
def test_report_dom_in_headless_chromium(tmp_path: Path) -> None:
    """Chromium's DOM of the example page has the roots in order, values and receipts."""
    browser = _browser()
    assert browser is not None
    _example(tmp_path)
    dom = _chromium(browser, "--dump-dom", (tmp_path / "report.html").as_uri())
    assert 'id="banner"' not in dom and "(verified)</title>" in dom
    seqs = [
        int(s) for s in re.findall(r'<tr class="root" data-root="[0-9a-f]+" data-seq="(\d+)"', dom)
    ]
    assert seqs[:4] == sorted(seqs[:4], reverse=True)
    assert "“Alice takes tea without sugar”" in dom
    assert "· 1 entry</text>" in dom
