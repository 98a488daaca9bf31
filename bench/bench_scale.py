"""Append and verify at 10^5, 10^6 and 10^7 entries in one run (issue 12; not run in CI).

    python bench/bench_scale.py                                  # 10^5, 10^6, 10^7
    python bench/bench_scale.py --sizes 100000,1000000 --json --out scale.json
    python bench/bench_scale.py --dir /big/disk                  # where the ledgers go

Issue 12's target: at 10^7 entries the append rate and the verify rate stay within 15% of
their rate at 10^5, and memory stays flat. For each size, smallest first, in a fresh ledger
that is deleted before the next size (10^7 entries take several GB of disk):

1. append: a child process (``memroot.bench._scale_child``) creates a ledger without hooks
   (the core alone, like ``memroot bench`` phase 1) and appends the bench events in batches
   of 1,000; the rate *at* the size is that of the last ``--window`` appends, and the
   average over the whole build is beside it;
2. verify: another child (``memroot.bench._verify_child``, ``memroot bench`` phase 4) runs
   the full verify (steps 1-7 and 10).

Each child reports its wall and CPU time and its own peak RSS (VmHWM), so the sizes do not
pollute each other's memory figures. Every size is then compared with the first: append
rate, verify rate (wall clock and CPU time; met when no more than ``--tolerance`` slower)
and peak RSS (flat: no more than ``--tolerance`` higher). On a shared machine the CPU-time
ratios are the ones to read; the load average after each size is recorded.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from memroot.bench.hooked import run_child
from memroot.bench.ledger import BATCH, CONTENT_BYTES
from memroot.bench.machine import machine_info
from memroot.bench.results import ScaleBench, ScaleParams, ScaleSize, TargetJSON
from memroot.ledger.errors import IntegrityError, MemrootError

__all__ = ["DEFAULT_SIZES", "checks", "main", "measure_size", "render", "run", "with_ratios"]

DEFAULT_SIZES: Final = (100_000, 1_000_000, 10_000_000)
DEFAULT_WINDOW: Final = 50_000
TOLERANCE: Final = 0.15


def _log(msg: str) -> None:
    print(f"bench_scale {msg}", file=sys.stderr, flush=True)


def _rate(count: int, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _mb(kb: int | None) -> float | None:
    return kb / 1024 if kb is not None else None


def measure_size(work: Path, n: int, window: int, *, keep: bool = False) -> ScaleSize:
    """Build a core ledger of ``n`` events and verify it, each in a child; return the figures.

    The ratios to the first size are left ``None`` (``with_ratios`` fills them in).

    Raises:
        IntegrityError: if the ledger does not verify.
        MemrootError: if a child fails.
    """
    path = work / f"scale-{n}.ledger"
    label = f"{n:,}: append"
    _log(label)
    app = run_child(
        [str(path), str(n), str(window)], backend=None, label=label, progress=_log,
        module="memroot.bench._scale_child",
    )  # fmt: skip
    label = f"{n:,}: full verify"
    _log(label)
    ver = run_child(
        [str(path)], backend=None, label=label, progress=_log,
        module="memroot.bench._verify_child",
    )  # fmt: skip
    if not ver["ok"]:
        raise IntegrityError(f"the {n:,}-entry ledger did not verify: {ver['findings']}")
    if not keep:
        for suffix in ("", "-wal", "-shm", ".key"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    return {
        "size": n,
        "append_s": app["seconds"],
        "append_cpu_s": app["cpu_s"],
        "append_per_s": _rate(n, app["seconds"]),
        "append_per_cpu_s": _rate(n, app["cpu_s"]),
        "window": app["window"],
        "window_per_s": _rate(app["window"], app["window_s"]),
        "window_per_cpu_s": _rate(app["window"], app["window_cpu_s"]),
        "append_peak_rss_mb": _mb(app["vm_hwm_kb"]),
        "db_mb": app["db_bytes"] / 2**20,
        "verify_entries": ver["entries"],
        "verify_s": ver["seconds"],
        "verify_cpu_s": ver["cpu_s"],
        "verify_per_s": _rate(ver["entries"], ver["seconds"]),
        "verify_per_cpu_s": _rate(ver["entries"], ver["cpu_s"]),
        "verify_peak_rss_mb": _mb(ver["vm_hwm_kb"]),
        "ratio_append_to_first": None,
        "ratio_append_cpu_to_first": None,
        "ratio_verify_to_first": None,
        "ratio_verify_cpu_to_first": None,
        "ratio_append_rss_to_first": None,
        "ratio_verify_rss_to_first": None,
        "loadavg_after": list(os.getloadavg()),
    }


def with_ratios(sizes: Sequence[ScaleSize]) -> list[ScaleSize]:
    """Return ``sizes`` with every ratio to the first size filled in."""
    if not sizes:
        return []
    first = sizes[0]
    out: list[ScaleSize] = []
    for s in sizes:
        s = ScaleSize(**s)  # a copy
        s["ratio_append_to_first"] = _ratio(s["window_per_s"], first["window_per_s"])
        s["ratio_append_cpu_to_first"] = _ratio(s["window_per_cpu_s"], first["window_per_cpu_s"])
        s["ratio_verify_to_first"] = _ratio(s["verify_per_s"], first["verify_per_s"])
        s["ratio_verify_cpu_to_first"] = _ratio(s["verify_per_cpu_s"], first["verify_per_cpu_s"])
        s["ratio_append_rss_to_first"] = _ratio(
            s["append_peak_rss_mb"], first["append_peak_rss_mb"]
        )
        s["ratio_verify_rss_to_first"] = _ratio(
            s["verify_peak_rss_mb"], first["verify_peak_rss_mb"]
        )
        out.append(s)
    return out


def _check(name: str, at: int, value: float | None, bound: float, *, most: bool) -> TargetJSON:
    met = None if value is None else (value <= bound if most else value >= bound)
    return {
        "name": name,
        "at": at,
        "value": value,
        "unit": "ratio",
        "target": f"{'<=' if most else '>='} {bound:.2f}",
        "met": met,
    }


def checks(sizes: Sequence[ScaleSize], tolerance: float = TOLERANCE) -> list[TargetJSON]:
    """Return, for every size after the first, the rate and memory checks against the first."""
    if not sizes:
        return []
    first = f"{sizes[0]['size']:,}"
    slow, high = 1 - tolerance, 1 + tolerance
    out: list[TargetJSON] = []
    for s in sizes[1:]:
        n = s["size"]
        out += [
            _check(f"append rate / at {first}", n, s["ratio_append_to_first"], slow, most=False),
            _check(f"append rate / at {first}, CPU time", n, s["ratio_append_cpu_to_first"],
                   slow, most=False),
            _check(f"verify rate / at {first}", n, s["ratio_verify_to_first"], slow, most=False),
            _check(f"verify rate / at {first}, CPU time", n, s["ratio_verify_cpu_to_first"],
                   slow, most=False),
            _check(f"append peak RSS / at {first}", n, s["ratio_append_rss_to_first"], high,
                   most=True),
            _check(f"verify peak RSS / at {first}", n, s["ratio_verify_rss_to_first"], high,
                   most=True),
        ]  # fmt: skip
    return out


def run(
    sizes: Sequence[int],
    *,
    window: int = DEFAULT_WINDOW,
    tolerance: float = TOLERANCE,
    directory: Path | None = None,
    keep: bool = False,
) -> ScaleBench:
    """Measure every size, smallest first, and return the whole document.

    Raises:
        ValueError: if a size is not positive or the window is larger than half the smallest.
        IntegrityError, MemrootError: as ``measure_size``.
    """
    ordered = sorted(set(sizes))
    if not ordered or ordered[0] < 1:
        raise ValueError(f"sizes must be positive integers, got {list(sizes)!r}")
    if not 1 <= window <= ordered[0] // 2:
        raise ValueError(
            f"--window must be from 1 to half the smallest size ({ordered[0] // 2:,}), "
            f"got {window:,}"
        )
    started = time.perf_counter()
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="memroot-scale-", dir=directory) as tmp:
        work = Path(tmp)
        if keep:
            work = Path(directory or tempfile.gettempdir()) / "memroot-scale-kept"
            work.mkdir(exist_ok=True)
        machine = machine_info(Path(tmp))
        measured = [measure_size(work, n, window, keep=keep) for n in ordered]
    machine["loadavg_end"] = list(os.getloadavg())
    params: ScaleParams = {
        "sizes": ordered,
        "window": window,
        "batch": BATCH,
        "content_bytes": CONTENT_BYTES,
        "tolerance": tolerance,
    }
    rows = with_ratios(measured)
    return {
        "machine": machine,
        "params": params,
        "started": started_at,
        "sizes": rows,
        "checks": checks(rows, tolerance),
        "notes": [
            "the ledger core alone (no memory-model hooks), like memroot bench phases 1 and 4",
            f"append rate at a size: its last {window:,} appends (batches of {BATCH:,}, inputs "
            "built outside the timing); append_per_s averages the whole build",
            "each append and each verify runs in its own child process; peak RSS is that "
            "child's VmHWM (interpreter and imports included)",
            "on a shared machine read the CPU-time ratios: wall-clock rates follow the load",
        ],
        "elapsed_s": time.perf_counter() - started,
        "command": shlex.join([sys.executable, *sys.argv]),
    }


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(doc: ScaleBench) -> str:
    """Return the human table of a run: one row per size, then the checks."""
    m = doc["machine"]
    lines = [
        f"bench_scale: {doc['command']}",
        f"machine: {m['nproc']} CPUs, {m['cpu_model']}; backend {m['backend']}; load "
        f"{m['loadavg_start'][0]:.2f} -> {m.get('loadavg_end', m['loadavg_start'])[0]:.2f}",
        "",
    ]
    head = ("size", "append at size", "per CPU s", "average", "append RSS", "verify",
            "per CPU s", "verify RSS", "ledger", "load")  # fmt: skip
    rows = [head]
    for s in doc["sizes"]:
        rows.append(
            (
                f"{s['size']:,}",
                _num(s["window_per_s"], ",.0f") + "/s",
                _num(s["window_per_cpu_s"], ",.0f") + "/s",
                _num(s["append_per_s"], ",.0f") + "/s",
                _num(s["append_peak_rss_mb"], ".1f") + " MB",
                _num(s["verify_per_s"], ",.0f") + "/s",
                _num(s["verify_per_cpu_s"], ",.0f") + "/s",
                _num(s["verify_peak_rss_mb"], ".1f") + " MB",
                f"{s['db_mb']:,.0f} MB",
                f"{s['loadavg_after'][0]:.2f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines += ["", "checks (against the first size):"]
    for c in doc["checks"]:
        status = "-" if c["met"] is None else ("met" if c["met"] else "UNMET")
        lines.append(
            f"  at {c['at']:,}: {c['name']}: {_num(c['value'], '.3f')} ({c['target']}) {status}"
        )
    lines += ["", f"elapsed {doc['elapsed_s']:.1f} s", "notes:", *(f"- {n}" for n in doc["notes"])]
    return "\n".join(lines)


def _sizes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        t = part.strip().replace("_", "")
        try:
            out.append(int(float(t)) if "e" in t.lower() else int(t))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a whole number of entries") from None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, run, print the table (or JSON); return the exit status."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sizes",
        type=_sizes,
        default=list(DEFAULT_SIZES),
        help="comma-separated sizes (default 100000,1000000,10000000; 1e7 works)",
    )
    ap.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW,
        help="appends whose rate is the rate at a size (default 50,000)",
    )
    ap.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        help="allowed slow-down and memory growth against the first size (0.15)",
    )
    ap.add_argument("--dir", type=Path, default=None, help="where the ledgers go (default: tmp)")
    ap.add_argument(
        "--keep", action="store_true", help="keep the ledgers (in DIR/memroot-scale-kept)"
    )
    ap.add_argument("--json", action="store_true", help="print the JSON document")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)  # fmt: skip
    try:
        doc = run(args.sizes, window=args.window, tolerance=args.tolerance,
                  directory=args.dir, keep=args.keep)  # fmt: skip
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except MemrootError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    text = json.dumps(doc, indent=2, sort_keys=True)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text if args.json else render(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
