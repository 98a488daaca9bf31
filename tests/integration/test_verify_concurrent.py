"""verify reads one state of the file: writers importing meanwhile never cause a finding.

Two writer processes run ``memroot import`` in a loop (events and memory operations, with
every layer's hooks, automatic snapshots included) while this process runs ``memroot verify``
hundreds of times, and ``log`` and ``query`` in between. Every run must be clean: a reader
that mixed two states of the file would report a chain head, an event index, a root or the
derived state that disagree with the entries it read.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner, Result

from memroot.cli.main import cli

ORIGIN = "example.org/verify-concurrent"
RUNS = 200

WRITER = """
import json, sys
from click.testing import CliRunner
from memroot.cli.main import cli

import time
from pathlib import Path

path, name, stop = sys.argv[1], sys.argv[2], sys.argv[3]
n = 0
while not Path(stop).exists() and n < 40:  # bounded: the ledger stays small, verify fast
    time.sleep(0.05)
    lines = [
        json.dumps({"kind": "event", "stream": name, "actor_id": name, "actor_type": "HUMAN_USER",
                    "role": "USER", "content": f"{name} message {n}-{i}", "namespace_id": "ns"})
        for i in range(7)
    ]
    src = Path(path).parent / f"{name}.jsonl"
    src.write_text("\\n".join(lines) + "\\n")
    r = CliRunner().invoke(cli, ["-l", path, "import", str(src)])
    if r.exit_code != 0:
        print(r.output, file=sys.stderr)
        sys.exit(1)
    n += 1
print(n)
"""


def memroot(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def test_verify_in_a_loop_while_writers_import(tmp_path: Path) -> None:
    """Hundreds of verify runs against two importing writers: zero findings."""
    path = tmp_path / "busy.ledger"
    assert memroot(path, "init", "--origin", ORIGIN, "--snapshot-every", "20").exit_code == 0
    stop = tmp_path / "stop"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), f"w{i}", str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    sizes = []
    try:
        while memroot(path, "log", "--json", "--limit", "1").exit_code == 0 and not any(
            w.poll() is not None for w in writers
        ):
            with_entries = json.loads(memroot(path, "verify", "--json", "--no-update").stdout)
            if with_entries["entries"] > 1:
                break
            time.sleep(0.01)
        for run in range(RUNS):
            result = memroot(path, "verify", "--json", "--no-update")
            report = json.loads(result.stdout)
            assert result.exit_code == 0 and report["ok"], (run, report["findings"])
            sizes.append(report["entries"])
            if run % 25 == 0:
                assert memroot(path, "log", "--json", "--limit", "5").exit_code == 0
                assert memroot(path, "query", "--json").exit_code == 0
    finally:
        stop.write_text("stop")
        outputs = [w.communicate(timeout=60) for w in writers]
    for w, (out, err) in zip(writers, outputs, strict=True):
        assert w.returncode == 0, err
        assert int(out.strip()) > 0
    assert sizes[-1] > sizes[0], "the writers appended while verify ran"
    final = json.loads(memroot(path, "verify", "--json", "--no-update").stdout)
    assert final["ok"] and final["steps"]["8"]["checked"]
