"""One hooked measurement of ``memroot bench`` phases 6-9, run as a child process.

    python -m memroot.bench._hooked_child import LEDGER EVENTS.jsonl
    python -m memroot.bench._hooked_child mixed LEDGER N
    python -m memroot.bench._hooked_child verify LEDGER TRUSTED.json
    python -m memroot.bench._hooked_child rebuild LEDGER
    python -m memroot.bench._hooked_child bundle LEDGER OUT

``import``, ``verify``, ``rebuild`` and ``bundle`` run the ``memroot`` command itself in this
process (``memroot -l LEDGER import FILE``; ``verify --no-update --trusted T --json``;
``rebuild --json``; ``memroot -l OUT import-bundle B --vkey K --json``, after an untimed
``export`` of LEDGER into a bundle ``B`` beside ``OUT``), timed around the command, so the
figures leave out the interpreter's start-up and imports. ``import`` and ``mixed`` first
create the ledger with ``memroot init`` (untimed). ``mixed`` appends
``memroot.bench.hooked.mixed_history`` through the CLI's default hooks in batches, one
transaction each, signing what an automatic snapshot owes after each batch as the CLI does;
each batch's inputs are built before its timing.

Prints one JSON line on stdout: ``entries``, ``seconds`` (wall), ``cpu_s`` (this process's
CPU time), ``vm_hwm_kb`` (its peak RSS) and what the command reported. Progress lines
(``progress ...``) go to stderr. Exits 1 with the reason on stderr if the command fails.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

from memroot.bench.machine import vm_hwm_kib

PROGRESS_EVERY_S = 5.0


def _cli(args: list[str]) -> str:
    """Run ``memroot ARGS`` in this process; return its stdout.

    Raises:
        SystemExit: with the command's stderr, if it exits non-zero.
    """
    from memroot.cli.main import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(args, prog_name="memroot", standalone_mode=False)
    if rc not in (None, 0):
        raise SystemExit(f"memroot {' '.join(args)} exited {rc}")
    return out.getvalue()


def _timed(fn: Any) -> tuple[Any, float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def _import(ledger: str, events: str) -> dict[str, Any]:
    _cli(["-l", ledger, "init"])
    with open(events, "rb") as f:
        lines = sum(1 for _ in f)
    _, wall, cpu = _timed(lambda: _cli(["-l", ledger, "import", events]))
    return {"entries": lines, "seconds": wall, "cpu_s": cpu}


def _mixed(ledger: str, n: int) -> dict[str, Any]:
    from memroot.bench.hooked import BATCH, mixed_history
    from memroot.ledger.ledger import Ledger
    from memroot.memory_root import Roots, stack

    _cli(["-l", ledger, "init"])
    items = mixed_history(n)
    seconds = cpu = 0.0
    reported = time.perf_counter()
    with Ledger.open(Path(ledger), hooks=stack.default_hooks()) as led:
        roots = Roots(led)
        start_size = led.size()
        for start in range(0, n, BATCH):
            # Each batch's inputs are built just before it, untimed (not all at once: the
            # peak RSS is then the ledger's and the hooks', not a list of n inputs).
            chunk = list(itertools.islice(items, BATCH))
            w0, c0 = time.perf_counter(), time.process_time()
            led.append_batch(chunk)
            roots.sign_pending()
            seconds += time.perf_counter() - w0
            cpu += time.process_time() - c0
            if time.perf_counter() - reported >= PROGRESS_EVERY_S:
                done = start + len(chunk)
                print(f"progress {done:,}/{n:,} entries, {done / seconds:,.0f}/s", file=sys.stderr,
                      flush=True)  # fmt: skip
                reported = time.perf_counter()
        written = led.size() - start_size
    # ``entries`` counts the requested entries; the automatic SNAPSHOTs come on top.
    return {"entries": n, "ledger_entries": written, "seconds": seconds, "cpu_s": cpu}


def _verify(ledger: str, trusted: str) -> dict[str, Any]:
    args = ["-l", ledger, "verify", "--no-update", "--trusted", trusted, "--json"]
    from memroot.cli.main import cli

    out = io.StringIO()
    w0, c0 = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(out):
        rc = cli.main(args, prog_name="memroot", standalone_mode=False)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    report = json.loads(out.getvalue())
    return {
        "entries": report["entries"],
        "seconds": wall,
        "cpu_s": cpu,
        "ok": bool(report["ok"]) and rc in (None, 0),
        "steps_checked": sorted(int(k) for k, v in report["steps"].items() if v["checked"]),
        "findings": [str(f) for f in report["findings"][:5]],
    }


def _rebuild(ledger: str) -> dict[str, Any]:
    out, wall, cpu = _timed(lambda: _cli(["-l", ledger, "rebuild", "--json"]))
    data = json.loads(out)
    return {
        "entries": data["entries"],
        "seconds": wall,
        "cpu_s": cpu,
        "identical": data["identical"] is not False,
    }


def _bundle(ledger: str, out: str) -> dict[str, Any]:
    bundle = f"{out}.bundle"
    _cli(["-l", ledger, "export", bundle])
    vkey = json.loads(_cli(["-l", ledger, "vkey", "--json"]))["vkey"]
    args = ["-l", out, "import-bundle", bundle, "--vkey", vkey, "--json"]
    got, wall, cpu = _timed(lambda: _cli(args))
    return {"entries": json.loads(got)["entries"], "seconds": wall, "cpu_s": cpu}


def main(argv: list[str]) -> None:
    """Run the measurement named by ``argv[0]`` and print its JSON line."""
    task, args = argv[0], argv[1:]
    if task == "import":
        line = _import(args[0], args[1])
    elif task == "mixed":
        line = _mixed(args[0], int(args[1]))
    elif task == "verify":
        line = _verify(args[0], args[1])
    elif task == "rebuild":
        line = _rebuild(args[0])
    elif task == "bundle":
        line = _bundle(args[0], args[1])
    else:
        raise SystemExit(f"unknown task {task!r}")
    line["vm_hwm_kb"] = vm_hwm_kib()
    print(json.dumps(line))


if __name__ == "__main__":
    main(sys.argv[1:])
