"""The distribution installs one top-level import name, ``memroot``, and runs from a fresh venv."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_PIP = (sys.executable, "-m", "pip")


def _source_copy(dest: Path) -> Path:
    """The repository's tracked files (or, outside git, its tree) copied to ``dest``.

    Building from a copy keeps a stale ``build/`` folder of the working tree out of the wheel.
    """
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=False
    )
    if listed.returncode == 0 and listed.stdout:
        for name in listed.stdout.decode().split("\0"):
            if name and (REPO / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, dest / name)
    else:
        skip = shutil.ignore_patterns(".venv", "build", "*.egg-info", "target", "__pycache__")
        shutil.copytree(REPO, dest, ignore=skip, dirs_exist_ok=True)
    return dest


def _build_wheel(tmp_path: Path) -> Path:
    src = _source_copy(tmp_path / "src")
    out = tmp_path / "wheel"
    env = dict(os.environ)
    native_target = REPO / "native" / "target"
    if native_target.is_dir():  # reuse the compiled crate of the install this test runs under
        env["CARGO_TARGET_DIR"] = str(native_target)
    built = subprocess.run(
        [*_PIP, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    if built.returncode != 0 and "No module named" in built.stderr:
        pytest.skip(f"the build backend is not installed here: {built.stderr.strip()[-200:]}")
    assert built.returncode == 0, built.stderr
    (wheel,) = out.glob("memroot-*.whl")
    return wheel


def _top_level(names: list[str]) -> set[str]:
    return {n.split("/", 1)[0] for n in names}


def test_wheel_installs_only_memroot_and_the_demo_runs_from_a_fresh_venv(tmp_path: Path):
    """The wheel holds only ``memroot`` and its dist-info; installed alone, the demo runs."""
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        top = _top_level(zf.namelist())
    dist_info = {t for t in top if t.endswith(".dist-info")}
    assert top - dist_info == {"memroot"}, sorted(top)
    assert len(dist_info) == 1 and next(iter(dist_info)).startswith("memroot-")

    fresh = tmp_path / "fresh"
    venv.create(fresh, with_pip=False)
    py = fresh / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    before = set(os.listdir(purelib))
    installed = subprocess.run(
        [*_PIP, "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    added = {n for n in set(os.listdir(purelib)) - before if n != "__pycache__"}
    assert {n for n in added if not n.endswith(".dist-info")} == {"memroot"}, sorted(added)

    # The dependencies (apsw, cbor2, ...) come from this test's environment, appended after the
    # fresh site-packages, so the fresh venv's memroot is the one that is imported.
    deps = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    deps += site.getsitepackages()
    (Path(purelib) / "_test_deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    where = subprocess.run(
        [str(py), "-c", "import memroot.cli.main, memroot; print(memroot.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert Path(where).is_relative_to(purelib), where

    demo = subprocess.run(
        [str(fresh / "bin" / "memroot"), "demo"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    assert "0 violations" in demo.stdout
