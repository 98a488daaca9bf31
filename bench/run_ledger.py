"""Run the ledger benchmark at the issue's full sizes (10^4, 10^5 and 10^6 entries).

A thin wrapper over ``memroot bench --full``; further arguments are passed on, e.g.

    python bench/run_ledger.py --json --out bench-ledger.json
"""

from __future__ import annotations

import sys

from memroot.cli.main import cli


def main() -> None:
    """Run ``memroot bench --full`` with this script's arguments."""
    cli(["bench", "--full", *sys.argv[1:]], prog_name="memroot")


if __name__ == "__main__":
    main()
