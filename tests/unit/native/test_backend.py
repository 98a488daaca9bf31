"""The backend switch: one place picks native or Python; --version names it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from memroot.cli.main import cli
from memroot.ledger import _backend


def run(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_version_names_the_backend() -> None:
    out = CliRunner().invoke(cli, ["--version"], prog_name="memroot").output
    assert out.startswith("memroot ")
    assert ("native core (Rust)" in out) == (_backend.BACKEND == "native")
    assert ("pure Python" in out) == (_backend.BACKEND == "python")


def test_memroot_backend_python_forces_the_reference() -> None:
    code = (
        "from memroot.ledger import _backend, encoding;"
        "from memroot.ledger.verify import auditor;"
        "print(_backend.BACKEND, encoding._N is None, auditor._N is None)"
    )
    proc = run({"MEMROOT_BACKEND": "python"}, code)
    assert proc.stdout.split() == ["python", "True", "True"], proc.stderr
    version = run(
        {"MEMROOT_BACKEND": "python"},
        "import sys; sys.argv = ['memroot', '--version'];from memroot.cli.main import main; main()",
    )
    assert "pure Python (MEMROOT_BACKEND=python)" in version.stdout, version.stderr


def test_a_wrong_backend_name_is_refused_by_name() -> None:
    proc = run({"MEMROOT_BACKEND": "fortran"}, "import memroot.ledger.encoding")
    assert proc.returncode != 0
    assert "MEMROOT_BACKEND must be 'native' or 'python', not 'fortran'" in proc.stderr


def test_native_is_used_when_built() -> None:
    try:
        from memroot import _native  # noqa: F401
    except ImportError:
        proc = run({"MEMROOT_BACKEND": "native"}, "import memroot.ledger.encoding")
        assert "memroot._native is not built" in proc.stderr
        return
    proc = run(
        {"MEMROOT_BACKEND": ""}, "from memroot.ledger import _backend; print(_backend.BACKEND)"
    )
    assert proc.stdout.strip() == "native", proc.stderr


def test_the_reference_switch_names_every_module_that_calls_the_native_core() -> None:
    """``_backend.reference`` switches each ledger module that binds the native core as _N."""
    root = Path(__file__).resolve().parents[3] / "ledger"
    binding = {
        str(p.relative_to(root).with_suffix("")).replace("/", ".")
        for p in root.rglob("*.py")
        if "NATIVE as _N" in p.read_text()
    }
    assert binding == set(_backend._USERS)
