"""Which core computes the per-entry work: the native one (Rust) or the Python reference.

The one place the choice is made. ``memroot._native`` is an optional extension built from
native/ by ``pip install .`` when a Rust toolchain is present. It is used when it imports,
unless ``MEMROOT_BACKEND=python`` forces the pure-Python reference (``MEMROOT_BACKEND=native``
insists on the native core and fails loudly without it). The modules that have a native
counterpart (encoding, hashing, entries, merkle, verify, ledger, signing, map_tree) read
``NATIVE`` once, at import.

Native functions never decide an error: where the reference raises, they raise
``native.Reject`` and the caller re-runs the reference, which raises its own ``MemrootError``
(or ``TypeError``/``ValueError``) with its own message.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from typing import Final, Literal

__all__ = ["BACKEND", "NATIVE", "collector_paused", "describe", "reference"]

_USERS: Final = (
    "encoding",
    "hashing",
    "entries",
    "merkle",
    "verify.auditor",
    "verify.steps_1_4_entries",
    "verify.store_source",
    "_reading",
    "_appending",
    "signing",
    "strict",
    "map_tree",
)
"""The modules of memroot.ledger that call the native core (each as ``_N``)."""

_CHOICE: Final = os.environ.get("MEMROOT_BACKEND", "").strip().lower()
if _CHOICE not in ("", "native", "python"):
    raise ImportError(f"MEMROOT_BACKEND must be 'native' or 'python', not {_CHOICE!r}")

try:
    if _CHOICE == "python":
        raise ImportError("MEMROOT_BACKEND=python")
    from memroot import _native as NATIVE
except ImportError:
    if _CHOICE == "native":
        raise ImportError(
            "MEMROOT_BACKEND=native but memroot._native is not built (install memroot with a "
            "Rust toolchain on PATH)"
        ) from None
    # Typed as the module (facade/_native.pyi) so that every native call is checked; the
    # callers test ``NATIVE is not None`` first.
    NATIVE = None  # type: ignore[assignment]

BACKEND: Final[Literal["native", "python"]] = "native" if NATIVE is not None else "python"
"""The backend in use, as ``memroot --version`` and ``memroot bench`` report it."""


def describe() -> str:
    """Return a one-line description of the backend, for ``--version``."""
    if NATIVE is not None:
        return "native core (Rust)"
    if _CHOICE == "python":
        return "pure Python (MEMROOT_BACKEND=python)"
    return "pure Python (native core not built)"


@contextlib.contextmanager
def reference() -> Iterator[None]:
    """Run the pure-Python reference inside the block, whatever ``BACKEND`` says.

    For the differential tests (both backends in one process) and for checking a suspect
    result by hand. Not thread-safe: it switches the whole process.
    """
    import importlib

    modules = [importlib.import_module(f"memroot.ledger.{name}") for name in _USERS]
    saved = [m._N for m in modules]
    for m in modules:
        m._N = None  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for m, n in zip(modules, saved, strict=True):
            m._N = n  # type: ignore[attr-defined]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic collector around a native call that makes many objects, no cycle.

    The collector would traverse every young object again at every few hundred of them, for
    nothing (it tripled the time of 1,000 map walks in bench_prove.py; a batched append makes
    an ``Appended`` per event); it is restored as it was.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
