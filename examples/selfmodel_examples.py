"""Write the SelfModel example files of examples/ from a real run of memroot.

    python examples/selfmodel_examples.py [OUT_DIR]     (default: examples/)

On a new ledger in a temporary directory it appends a violation, takes a memory root, records
examples/selfmodel.json as a SelfModel citing it (`memroot selfmodel record`), and writes what
memroot prints as JSON: `selfmodel show --json` to selfmodel-snapshot.json and the newest item
of `roots --json` to root-record.json. Their schemas are in docs/schemas/;
tests/unit/memory_root/test_selfmodel_schema.py validates these files and a fresh run against
them. Hashes and times differ from run to run (entries carry their time); the shape does not.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from memroot.cli.main import cli

HERE = Path(__file__).resolve().parent
VIOLATION = {
    "kind": "op",
    "op_type": "VIOLATION_RECORDED",
    "actor_id": "verifier-1",
    "actor_type": "SYSTEM_PROCESS",
    "namespace_id": "agent-7",
    "policy_version": "policy/1",
    "payload": {"motif": "TITLE_MISMATCH", "source": "Quantum chromodynamics"},
}


def _json(ledger: Path, *args: str) -> Any:
    done = CliRunner().invoke(cli, ["-l", str(ledger), *args, "--json"], catch_exceptions=False)
    if done.exit_code != 0:
        raise SystemExit(f"memroot {' '.join(args)} exited {done.exit_code}: {done.output}")
    return json.loads(done.stdout)


def make(out: Path) -> tuple[Path, Path]:
    """Run memroot on a fresh ledger; write the two example files into ``out``; return them."""
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Path(tmp) / "agent.ledger"
        os.environ.setdefault("MEMROOT_TRUSTED", str(Path(tmp) / "trusted.json"))
        _json(ledger, "init")
        _json(ledger, "append", json.dumps(VIOLATION))
        _json(ledger, "snapshot")
        _json(ledger, "selfmodel", "record", str(HERE / "selfmodel.json"))
        snapshot = _json(ledger, "selfmodel", "show")
        root = _json(ledger, "roots")[0]
    out.mkdir(parents=True, exist_ok=True)
    files = (out / "selfmodel-snapshot.json", out / "root-record.json")
    for path, data in zip(files, (snapshot, root), strict=True):
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return files


if __name__ == "__main__":
    for written in make(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(written)
