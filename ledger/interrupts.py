"""A Ctrl-C that nothing on its way can swallow: the CLI's SIGINT latch, checked before COMMIT.

Python's own SIGINT handler raises ``KeyboardInterrupt`` in whatever Python frame runs
next, and some native code lets that exception go: cbor2's encoder (PyO3) asks whether a
list is a ``collections.abc.Mapping``, the answer runs a frame of ``ABCMeta.__instancecheck__``,
and an exception raised there is reported as "Exception ignored" and dropped (PyO3's type
checks return False instead). A long import hit by Ctrl-C at that instant carried on and
committed, exit 0.

So the CLI installs ``install()``'s handler: it raises ``KeyboardInterrupt`` as Python's does
and also latches the signal, and ``check()``, which every outermost write runs right before its
``COMMIT`` (``backends.store.commit_counted``, for both backends), raises it again if a
SIGINT was received in this process: a write that any Ctrl-C reached rolls back, however the
first ``KeyboardInterrupt`` fared. The library installs nothing by itself (a program using it
keeps its own SIGINT handling); ``check()`` then never raises.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any

__all__ = ["check", "install", "received"]

_received = False
_previous_hook: Any = None


def received() -> bool:
    """Return True once the installed handler has received a SIGINT in this process."""
    return _received


def check() -> None:
    """Raise ``KeyboardInterrupt`` if a SIGINT was received (the latch of ``install``).

    Called right before a write's ``COMMIT``: a raised exception rolls the write back.
    """
    if _received:
        raise KeyboardInterrupt


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = True
    raise KeyboardInterrupt


def _unraisable(info: Any) -> None:
    """Drop the report of a ``KeyboardInterrupt`` the latch holds; pass others on."""
    if _received and isinstance(info.exc_value, KeyboardInterrupt):
        return
    hook = _previous_hook or sys.__unraisablehook__
    hook(info)


def install() -> None:
    """Latch SIGINT for this process (the CLI calls it once, from the main thread).

    Only where Python's default handler is in place: a process that ignores SIGINT (started
    in the background by a shell) or has its own handler keeps it. A dropped report of the
    latched ``KeyboardInterrupt`` ("Exception ignored ...") is not printed: the latch acts
    on it.
    """
    global _previous_hook
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    signal.signal(signal.SIGINT, _on_sigint)
    if _previous_hook is None:
        _previous_hook = sys.unraisablehook
        sys.unraisablehook = _unraisable
