"""Every ``sh`` and ``python`` block of README.md and docs/*.md runs as written (issue 25.5).

The blocks of one file run in document order in one fresh directory, sharing it and the shell
environment as a reader following along would: a variable an ``sh`` block sets (``E=$(...)``,
``export MEMROOT_LEDGER=...``) is there in the file's later blocks, ``sh`` and ``python``
alike. Each ``python`` block is a whole script (a reader pastes it into a fresh interpreter).
The directory holds a copy of the repository's ``examples/`` and ``docs/schemas/`` (the docs
are read from the repository root); ``HOME`` is a directory of its own, so ``~/...`` paths
stay inside.

A block that cannot run here carries a visible marker on the line above its fence (other
``<!-- ... -->`` lines may sit between), with its reason::

    <!-- not run: needs a PostgreSQL server of your own -->

Fences other than ``sh`` and ``python`` that look like a shell or Python block (``bash``,
``console``, ``py``...) are refused, so that a block added later cannot escape the test by its
tag. A block is killed with its whole process group when it ends, so a server a block left
running does not outlive it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"sh", "python"}
# Tags that name a shell or Python block under another name: refused (use sh or python).
MISTAGGED = {"bash", "shell", "console", "zsh", "py", "python3", "pycon", "ipython"}
FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)\s*$")
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.*?) -->$")
COMMENT = re.compile(r"^<!--.*-->$")
BLOCK_TIMEOUT_S = 120
# Repository folders the docs use, as a reader at the repository root has them.
REPOSITORY_FILES = ("examples", "docs/schemas")
# Variables of the test's own environment a reader's shell would not have.
DROPPED = ("MEMROOT_LEDGER", "MEMROOT_KEY", "MEMROOT_CACHE", "MEMROOT_TRUSTED")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block: its file, the line of its opening fence, its tag and its text."""

    path: Path
    line: int
    lang: str
    code: str
    not_run: str | None  # the marker's reason, or None when the block runs

    def where(self) -> str:
        """``README.md:129 (sh)``: where a failure points the reader."""
        name = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{name}:{self.line} ({self.lang})"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` in document order, with its not-run marker if any."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None or not m.group(1):
            i += 1
            continue
        start, lang = i, m.group(1)
        end = start + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        assert end < len(lines), f"{path.name}:{start + 1}: a block with no closing fence"
        reason: str | None = None
        above = start - 1
        while above >= 0 and COMMENT.match(lines[above].strip()):
            marker = NOT_RUN.match(lines[above].strip())
            if marker is not None:
                reason = marker.group("reason").strip()
            above -= 1
        code = "\n".join(lines[start + 1 : end]) + "\n"
        found.append(Block(path, start + 1, lang, code, reason))
        i = end + 1
    return found


def _base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(home)
    return env


def _read_env(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in path.read_bytes().split(b"\0"):
        name, sep, value = item.decode().partition("=")
        if sep and name.isidentifier():
            env[name] = value
    return env


def _run(block: Block, work: Path, env: dict[str, str], scripts: Path) -> dict[str, str]:
    """Run one block in ``work``; return the environment the next block starts with."""
    env_out = scripts / f"env-{block.line}"
    if block.lang == "sh":
        # set -a: every variable the block sets is exported, so the next block sees it; the
        # trap writes the environment out however the block ends.
        script = scripts / f"block-{block.line}.sh"
        script.write_text(
            f"trap 'env -0 > {str(env_out)!r}' EXIT\nset -a -e -o pipefail\n{block.code}"
        )
        argv = ["bash", str(script)]
    else:
        script = scripts / f"block-{block.line}.py"
        script.write_text(block.code)
        argv = [sys.executable, str(script)]
    proc = subprocess.Popen(
        argv,
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{block.where()}: still running after {BLOCK_TIMEOUT_S} s\n{err[-3000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # a server the block left behind
    assert proc.returncode == 0, (
        f"{block.where()} exited {proc.returncode}\n"
        f"--- stdout (end)\n{out[-3000:]}\n--- stderr (end)\n{err[-3000:]}"
    )
    return _read_env(env_out) if block.lang == "sh" else env


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_blocks_run_as_written(doc: Path, tmp_path: Path) -> None:
    """Each sh and python block of the file runs in order in a fresh directory and exits 0."""
    work, home, scripts = tmp_path / "work", tmp_path / "home", tmp_path / "scripts"
    for d in (home, scripts):
        d.mkdir()
    for shared in REPOSITORY_FILES:
        shutil.copytree(ROOT / shared, work / shared)
    env = _base_env(home)
    for block in blocks(doc):
        if block.lang in RUN and block.not_run is None:
            env = _run(block, work, env, scripts)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_not_run_says_why(doc: Path) -> None:
    """A not-run marker gives a reason; no shell or Python block hides under another tag."""
    for block in blocks(doc):
        assert block.lang not in MISTAGGED, f"{block.where()}: tag it sh or python"
        if block.not_run is not None:
            assert block.lang in RUN, f"{block.where()}: only sh and python blocks run"
            assert len(block.not_run) >= 10, f"{block.where()}: say why it is not run"


def test_the_parser_finds_blocks_markers_and_lines(tmp_path: Path) -> None:
    """The block parser: tags, opening lines, markers above the fence, untagged blocks kept."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "text\n```sh\necho one\n```\n\n<!-- not run: needs a network -->\n<!-- example: x -->\n"
        "```python\nprint(2)\n```\n```\noutput\n```\n"
    )
    found = blocks(doc)
    assert [(b.line, b.lang, b.code, b.not_run) for b in found] == [
        (2, "sh", "echo one\n", None),
        (8, "python", "print(2)\n", "needs a network"),
    ]


def test_at_most_a_few_blocks_are_not_run() -> None:
    """Blocks that do not run stay few: each is a gap in what the docs prove."""
    skipped = [b.where() for doc in DOCS for b in blocks(doc) if b.not_run is not None]
    assert len(skipped) <= 8, skipped
