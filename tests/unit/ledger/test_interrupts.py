"""The SIGINT latch (``ledger.interrupts``): a write that a Ctrl-C reached never commits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_CHILD = """
import signal, sys
from pathlib import Path
from memroot.ledger import interrupts
from memroot.ledger.backends.store import Store
mode = sys.argv[1]
# As a terminal's shell starts a command (a test run in the background inherits SIG_IGN).
signal.signal(signal.SIGINT, signal.SIG_IGN if mode == "ignored" else signal.default_int_handler)
interrupts.install()
print("latched" if signal.getsignal(signal.SIGINT) is interrupts._on_sigint else "kept")
store = Store(Path(sys.argv[2]), create=True)
store.db.execute("CREATE TABLE IF NOT EXISTS t(x)")
try:
    with store.write() as db:
        db.execute("INSERT INTO t VALUES (1)")
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # swallowed on its way, as a native library may
    print("committed")
except KeyboardInterrupt:
    print("rolled back")
print(store.db.execute("SELECT count(*) FROM t").fetchall()[0][0])
"""


def _run(tmp_path: Path, mode: str) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(tmp_path / f"{mode}.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_a_swallowed_ctrl_c_rolls_the_write_back(tmp_path: Path) -> None:
    """Once the latch received SIGINT, the write's COMMIT raises KeyboardInterrupt: no row."""
    assert _run(tmp_path, "default") == ["latched", "rolled", "back", "0"]


def test_a_process_that_ignores_sigint_keeps_ignoring_it(tmp_path: Path) -> None:
    """Started with SIGINT ignored (a background job), the latch installs nothing."""
    assert _run(tmp_path, "ignored") == ["kept", "committed", "1"]
