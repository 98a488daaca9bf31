"""Build hooks for the optional native core; pyproject.toml has everything else.

The Rust extension ``memroot._native`` (native/) is declared optional in pyproject.toml
(``[[tool.setuptools-rust.ext-modules]]``): without a Rust toolchain the build skips it and
memroot runs on its pure-Python reference path. This file only adds two things:

- a one-line note when no ``cargo`` is on PATH;
- for strict editable installs, the path of the module setuptools-rust built in place, so
  that the editable link tree links it (setuptools-rust does not report it).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

if shutil.which("cargo") is None:
    print(
        "memroot: no Rust toolchain (cargo) found: memroot._native is not built, "
        "memroot runs in pure Python"
    )


class BuildExt(build_ext):
    """``build_ext`` that maps the in-place native module into a strict editable tree."""

    def get_output_mapping(self) -> dict[str, str]:
        """Add ``build_lib/memroot/_native*.so -> facade/_native*.so`` when built in place."""
        mapping = dict(super().get_output_mapping())
        if not self.inplace:
            return mapping
        for ext in getattr(self.distribution, "rust_extensions", None) or []:
            built = Path(self.get_ext_fullpath(ext.name))
            if built.exists():
                self.inplace = False
                try:
                    mapping[self.get_ext_fullpath(ext.name)] = str(built)
                finally:
                    self.inplace = True
        return mapping


setup(cmdclass={"build_ext": BuildExt})
