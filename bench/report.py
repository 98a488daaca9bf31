"""The human form of a ``memroot bench`` run: the machine, a table with targets, the notes."""

from __future__ import annotations

from collections.abc import Callable

from memroot.bench.results import HookedBench, HookedRun, LedgerBench
from memroot.bench.targets import (
    BATCHED,
    CORE,
    DURABLE,
    GROWTH,
    IMPORT,
    IMPORT_BUNDLE,
    MIXED,
    PROOFS,
    RATIO_APPEND,
    RATIO_MIXED,
    RATIO_REBUILD,
    RATIO_VERIFY,
    RATIO_VERIFY_MIXED,
    REBUILD,
    VERIFY,
    VERIFY_MIXED,
    VERIFY_MIXED_RSS,
    VERIFY_RSS,
)

__all__ = ["render_human"]

Row = tuple[str, str, str, str, str]
Status = Callable[[str, "int | None"], tuple[str, str]]


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "ratio":
        return f"{value:.2f}"
    if unit == "MB":
        return f"{value:.1f} MB"
    return f"{value:,.0f}/s"


def _rows(r: LedgerBench) -> list[Row]:
    """Return the table rows: (measurement, at, value, target, status)."""
    targets = {(t["name"], t["at"]): t for t in r["targets"]}

    def status(name: str, at: int | None) -> tuple[str, str]:
        t = targets[(name, at)]
        met = "-" if t["met"] is None else ("met" if t["met"] else "UNMET")
        return t["target"], met

    rows: list[Row] = []
    for b in r["batched_append"]:
        n = b["size"]
        at = f"{n:,}"
        rows.append((BATCHED, at, _num(b["memroot"]["entries_per_s"]), *status(BATCHED, n)))
        rows.extend(
            [
                ("  memroot incl. input construction", at,
                 _num(b["memroot"]["entries_per_s_incl_construction"]), "", ""),
                ("  raw apsw executemany, same bytes", at,
                 _num(b["raw_apsw"]["entries_per_s"]), "", ""),
                ("  pymerkle SqliteTree.append_entries", at,
                 _num(b["pymerkle"]["entries_per_s"]) if b["pymerkle"] else "skipped", "", ""),
                ("  ratio memroot / raw apsw", at, _num(b["ratio_memroot_raw"], "ratio"), "", ""),
                ("  ratio memroot / pymerkle", at,
                 _num(b["ratio_memroot_pymerkle"], "ratio"), "", ""),
            ]
        )  # fmt: skip
    d = r["durable_append"]
    at = f"{d['count']:,}"
    rows.append(("durable append (fsync each), memroot", at, _num(d["memroot_per_s"]), "", ""))
    rows.append(("  raw apsw single-row txns, same bytes", at, _num(d["raw_apsw_per_s"]), "", ""))
    extra = f"{d['memroot_extra_us_per_append']:,.0f} µs"
    rows.append(("  memroot extra time per append", at, extra, "", ""))
    rows.append(("  ratio memroot / raw apsw", at, _num(d["ratio_memroot_raw"], "ratio"),
                 *status(DURABLE, d["count"])))  # fmt: skip
    p = r["inclusion_proofs"]["memroot"]
    at = f"{p['size']:,}"
    rows.append((PROOFS, at, _num(p["proofs_per_s"]), *status(PROOFS, p["size"])))
    rows.append(("  generate only", at, _num(p["generate_per_s"]), "", ""))
    rows.append(("  verify only", at, _num(p["verify_per_s"]), "", ""))
    pm = r["inclusion_proofs"]["pymerkle"]
    rows.append(
        ("  pymerkle prove + verify_inclusion", f"{pm['size']:,}" if pm else "-",
         _num(pm["proofs_per_s"]) if pm else "skipped", "", "")
    )  # fmt: skip
    v = r["verify"]
    at = f"{v['entries']:,}"
    rows.append((VERIFY, at, _num(v["entries_per_s"]), *status(VERIFY, v["entries"])))
    rows.append(("  peak RSS (verify child, VmHWM)", at, _num(v["peak_rss_mb"], "MB"),
                 *status(VERIFY_RSS, v["entries"])))  # fmt: skip
    g = r["append_growth"]
    at = f"{g['size']:,}"
    w = f"{g['window']:,}" if g["window"] else "batches"
    rows.append((f"append rate, first {w} (empty ledger)", at, _num(g["first_per_s"]), "", ""))
    rows.append((f"  last {w}", at, _num(g["last_per_s"]), "", ""))
    rows.append(("  ratio last / first", at, _num(g["ratio_last_first"], "ratio"),
                 *status(GROWTH, g["size"])))  # fmt: skip
    ref = r.get("reference_backend")
    if ref is not None:
        n = ref["size"]
        at = f"{n:,}"
        rows.append(("pure-Python reference, batched append", at,
                     _num(ref["batched_append_per_s"]), "", ""))  # fmt: skip
        rows.append(("  native / reference", at,
                     _num(ref["ratio_append_native_reference"], "ratio"),
                     *status(RATIO_APPEND, n)))  # fmt: skip
        rows.append(("pure-Python reference, full verify", at, _num(ref["verify_per_s"]), "", ""))
        rows.append(("  native / reference", at,
                     _num(ref["ratio_verify_native_reference"], "ratio"),
                     *status(RATIO_VERIFY, n)))  # fmt: skip
    h = r.get("hooked")
    if h is not None:
        rows.extend(_hooked_rows(h, r, status))
    for t in r["targets"]:
        if t["name"] in CORE:
            shown_at = "-" if t["at"] is None else f"{t['at']:,}"
            rows.append(
                (t["name"], shown_at, _num(t["value"], t["unit"]), *status(t["name"], t["at"]))
            )
    return rows


def _hooked_rows(h: HookedBench, r: LedgerBench, status: Status) -> list[Row]:
    """Return the rows of phases 6-9: each figure, its CPU-time rate, the reference beside it."""
    n = h["size"]
    at = f"{n:,}"
    ref = r.get("reference_backend")
    rh = ref["hooked"] if ref is not None else None
    backend = r["machine"]["backend"]
    measures: list[tuple[str, HookedRun, HookedRun | None, float | None, str | None,
                         str | None]] = [
        ("memroot import of events, every CLI hook", h["import_events"],
         rh["import_events"] if rh else None,
         ref["ratio_import_native_reference"] if ref else None, IMPORT, None),
        ("memroot verify (all ten steps), imported ledger", h["verify_import"],
         rh["verify_import"] if rh else None,
         ref["ratio_verify_import_native_reference"] if ref else None, None, None),
        (MIXED, h["mixed_append"], rh["mixed_append"] if rh else None,
         ref["ratio_mixed_append_native_reference"] if ref else None, MIXED, RATIO_MIXED),
        (VERIFY_MIXED, h["verify_mixed"], rh["verify_mixed"] if rh else None,
         ref["ratio_verify_mixed_native_reference"] if ref else None, VERIFY_MIXED,
         RATIO_VERIFY_MIXED),
        (REBUILD, h["rebuild"], rh["rebuild"] if rh else None,
         ref["ratio_rebuild_native_reference"] if ref else None, REBUILD, RATIO_REBUILD),
        (IMPORT_BUNDLE, h["import_bundle"], rh["import_bundle"] if rh else None,
         ref["ratio_import_bundle_native_reference"] if ref else None, IMPORT_BUNDLE, None),
    ]  # fmt: skip
    rows: list[Row] = []
    for label, run, ref_run, ratio, target, ratio_target in measures:
        target_cells = status(target, n) if target else ("", "")
        rows.append((f"{label} ({backend})", at, _num(run["entries_per_s"]), *target_cells))
        rows.append(("  per CPU second", at, _num(run["entries_per_cpu_s"]), "", ""))
        rss_cells = status(VERIFY_MIXED_RSS, n) if target == VERIFY_MIXED else ("", "")
        rows.append(("  peak RSS (child, VmHWM)", at, _num(run["peak_rss_mb"], "MB"), *rss_cells))
        if ref_run is not None:
            rows.append(("  pure-Python reference", at, _num(ref_run["entries_per_s"]), "", ""))
            ratio_cells = status(ratio_target, n) if ratio_target else ("", "")
            rows.append(("  native / reference", at, _num(ratio, "ratio"), *ratio_cells))
    return rows


def render_human(r: LedgerBench) -> str:
    """Return the human report: the machine, a table with targets, and the notes."""
    m = r["machine"]
    loadavg_end = m.get("loadavg_end", m["loadavg_start"])
    head = [
        f"memroot bench: {r.get('equivalent_command', '')}",
        f"machine: {m['nproc']} CPUs, {m['cpu_model']}; Python {m['python']}, "
        f"SQLite {m['sqlite_apsw']} (apsw {m['apsw']}), pymerkle {m['pymerkle'] or 'missing'}; "
        f"load {m['loadavg_start'][0]:.2f} -> {loadavg_end[0]:.2f}",
        "",
    ]
    cols: Row = ("measurement", "at", "value", "target", "status")
    rows = [cols, *_rows(r)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    lines = []
    for row in rows:
        cells = [
            row[0].ljust(widths[0]),
            row[1].rjust(widths[1]),
            row[2].rjust(widths[2]),
            row[3].ljust(widths[3]),
            row[4],
        ]
        lines.append("  ".join(cells).rstrip())
    tail = ["", f"elapsed {r['elapsed_s']:.1f} s", "notes:", *(f"- {n}" for n in r["notes"])]
    return "\n".join(head + lines + tail)
