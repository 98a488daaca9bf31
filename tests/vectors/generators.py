"""Load a vector generator of tests/vectors by its path, and what its ``main`` prints.

Every vector file has a generator beside it; a test that the generator still reproduces the
file byte for byte, or that reuses the generator's helpers, loads it from its path (the
generators are scripts, not an importable package).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path
from types import ModuleType


def generator(path: Path) -> ModuleType:
    """Import the generator script at ``path`` as a module (a new module object each call)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def printed(path: Path) -> str:
    """What the generator script at ``path`` prints from its ``main()``: its vector file."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        generator(path).main()
    return out.getvalue()
