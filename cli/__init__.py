"""The ``memroot`` command line: thin click commands over the library.

The console script is ``memroot.cli:run``, which imports ``memroot.cli.main`` and runs it.
"""

from __future__ import annotations

import sys

__all__ = ["run"]


def run() -> None:
    """Console entry point: run the CLI; a bad ``MEMROOT_BACKEND`` is a usage error (exit 2).

    The backend is chosen when the ledger layer is first imported (``memroot.ledger._backend``),
    before any click command can map the error, so the refusal is caught here instead of
    surfacing as a traceback.
    """
    try:
        from memroot.cli.main import main
    except ImportError as e:
        if not str(e).startswith("MEMROOT_BACKEND"):
            raise
        sys.stderr.write(f"error: {e}\n")
        raise SystemExit(2) from None
    main()
