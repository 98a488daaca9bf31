"""The HTML of ``memroot report``: one self-contained static page (no script, no assets).

``gather`` reads what the page shows from an open ledger; ``render`` turns it into HTML.
Every value that comes from the ledger is escaped; the branch tree is inline SVG, sized to
its longest label so nothing is clipped. A failed verification (or a refused read) puts a
banner at the top and "FAILED" in the title. The page carries ``MARKER`` in its head, so
``memroot report`` recognises a page it wrote (the only file it overwrites without --force).
"""

from __future__ import annotations

import datetime as dt
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import StorageError
from memroot.ledger.hashing import content_commitment
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import STEPS, AuditReport
from memroot.memory_root.records import RootRecord

__all__ = ["MARKER", "ReportData", "gather", "is_report", "plural", "refusal", "render"]

STATE_OPS: Final = ("FALSIFY", "MARK_STALE", "RESTORE", "CASCADE")
LATEST: Final = 40
MARKER: Final = '<meta name="generator" content="memroot report">'
"""In the head of every page ``render`` writes: how ``report`` knows its own output."""
_HEAD: Final = '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'


def is_report(path: Path) -> bool:
    """Return True when the file at ``path`` is a page ``render`` wrote (its head has MARKER).

    Raises:
        OSError: the file cannot be read.
    """
    with path.open("rb") as f:
        head = f.read(len(_HEAD) + len(MARKER))
    return head == (_HEAD + MARKER).encode()


def plural(n: int, word: str, many: str | None = None) -> str:
    """Return ``"1 entry"``, ``"2 entries"``: the count and the word in the right number."""
    if n == 1:
        return f"1 {word}"
    if many is None:
        if word.endswith("y") and word[-2:-1] not in "aeiou":
            many = word[:-1] + "ies"
        elif word.endswith(("s", "x", "ch", "sh")):
            many = word + "es"
        else:
            many = word + "s"
    return f"{n} {many}"


@dataclass
class BranchLane:
    """One branch of the tree: its record and where it forked and merged."""

    name: str
    size: int
    parent: str | None
    fork_seq: int | None
    type: str
    state: str
    purpose: str
    merges: list[tuple[str, int]] = field(default_factory=list)  # (target branch, seq)


@dataclass
class ReportData:
    """Everything the page shows."""

    path: str
    ledger_id: str
    origin: str
    vkeys: list[str]
    checkpoints: dict[str, str | None]
    audit: AuditReport
    lanes: list[BranchLane]
    roots: dict[str, list[RootRecord]]
    state_ops: list[dict[str, Any]]
    latest: list[tuple[Entry, str]]
    generated: int
    receipts: list[dict[str, Any]] = field(default_factory=list)
    unchecked: bool = False  # read with --no-strict: a banner says so
    withheld: str | None = None  # the strict read was refused: only the verification shows
    values: dict[str, str] = field(default_factory=dict)  # object id -> current value


def _when(us: int) -> str:
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _said(ledger: Ledger, e: Entry) -> str:
    """Return what an event said, as the page shows it (never "erased" unless it was).

    Strict: the content is read through the checked read (a tampered one raises
    ``IntegrityError`` and the page withholds the ledger data). Unchecked (--no-strict): a
    content that is not what the entry commits to is shown as such, never as erased.
    """
    if ledger.strict:
        row = ledger.read(e.seq, e.branch)
        erased_by, text = row.erased_by, row.content
        if erased_by is not None:
            return f"(erased by entry {erased_by})"
        return "(no content stored)" if text is None else text
    raw = ledger.store.entry_row(ledger.store.branch(e.branch).no, e.seq)
    if raw.erased_by is not None:
        return f"(erased by entry {raw.erased_by})"
    if raw.content is None or raw.salt is None:
        return "(content missing: see the verification)"
    data = bytes(raw.content)
    text = data.decode("utf-8", "replace")
    if content_commitment(bytes(raw.salt), data) != e.body.get("content_commitment"):
        return f"(content does NOT match its commitment: see the verification) {text}"
    return text


def _summary(ledger: Ledger, e: Entry, values: dict[str, str]) -> str:
    b = e.body
    if e.kind is Kind.GENESIS:
        return f"genesis of {b.get('origin', e.branch)}"
    if e.kind is Kind.EVENT:
        meta = b.get("metadata")
        kind = meta.get("type") if isinstance(meta, dict) else None
        head = f"{b.get('stream')} · {b.get('role')} · {b.get('actor_id')}"
        if isinstance(kind, str):
            return f"{head} · {kind}"
        return f"{head} · {' '.join(_said(ledger, e).split())}"
    raw = b.get("payload")
    payload: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if e.type == "SNAPSHOT" and isinstance(payload.get("memory_root"), bytes):
        return f"memory_root {payload['memory_root'].hex()[:16]}"
    if e.type == "READ_RECEIPT":
        n = len(payload["objects"]) if isinstance(payload.get("objects"), list) else 0
        return f"{b.get('actor_id')} · run {payload.get('run_id')} · {plural(n, 'object')} read"
    target = b.get("target_id")
    shown = payload.get("value") or payload.get("branch_id") or target or ""
    if isinstance(target, str) and target in values and not payload.get("value"):
        shown = f"{target} ({values[target]})"
    return f"{b.get('actor_id')} · {shown}"


def refusal(path: str, audit: AuditReport, reason: str, now: int) -> ReportData:
    """Return the page of a ledger whose strict read was refused: its verification, ``reason``."""
    return ReportData(
        path=path,
        ledger_id="",
        origin=path,
        vkeys=[],
        checkpoints={},
        audit=audit,
        lanes=[],
        roots={},
        state_ops=[],
        latest=[],
        generated=now,
        withheld=reason,
    )


def gather(ledger: Ledger, audit: AuditReport, now: int, *, unchecked: bool = False) -> ReportData:
    """Read what the report shows from ``ledger``; ``audit`` is the verify result.

    ``unchecked``: ``ledger`` was opened with ``strict=False`` (the page says so).
    """
    from memroot.memory_root import Roots
    from memroot.memory_root.branches import list_branches

    infos = {}
    try:
        infos = {i.branch_id: i for i in list_branches(ledger)}
    except Exception:  # a ledger without the branch tables: lanes from the store only
        infos = {}
    lanes: dict[str, BranchLane] = {}
    for row in ledger.store.branches():
        info = infos.get(row.name)
        parent_row = ledger.store.db.execute(
            "SELECT parent, anchor FROM branches WHERE name = ?", (row.name,)
        ).fetchone()
        lanes[row.name] = BranchLane(
            name=row.name,
            size=row.size,
            parent=None if parent_row is None or parent_row[0] is None else str(parent_row[0]),
            fork_seq=None if parent_row is None or parent_row[1] is None else int(parent_row[1]),
            type="CANONICAL" if info is None else info.type,
            state="OPEN" if info is None else info.state,
            purpose="" if info is None else info.purpose,
        )
    from memroot.memory_root.receipts import Receipt, handed

    state_ops: list[dict[str, Any]] = []
    receipts: list[dict[str, Any]] = []
    latest: list[tuple[Entry, str]] = []
    values = _object_values(ledger)
    for lane in lanes.values():
        for e in ledger.entries(0, None, lane.name):
            if e.kind is Kind.OP and e.type in STATE_OPS:
                p = e.body.get("payload") or {}
                state_ops.append(
                    {
                        "branch": e.branch,
                        "seq": e.seq,
                        "type": e.type,
                        "ts": e.ts,
                        "target_type": e.body.get("target_type"),
                        "target_id": e.body.get("target_id"),
                        "actor": e.body.get("actor_id"),
                        "reason": p.get("reason"),
                        "touched": len(p.get("touched", [])) if e.type == "CASCADE" else None,
                        "beyond": (p.get("beyond") or {}).get("count")
                        if e.type == "CASCADE"
                        else None,
                        "resnapshots": len(p.get("resnapshots", []))
                        if e.type == "CASCADE"
                        else None,
                    }
                )
            elif e.kind is Kind.OP and e.type == "READ_RECEIPT":
                r = Receipt.of(e)
                # The values the run was handed, read back as of the read (and, strict,
                # checked against their operations and the receipt's digests).
                given = handed(ledger, r) if ledger.strict else []
                receipts.append(
                    {
                        "branch": e.branch,
                        "seq": e.seq,
                        "ts": e.ts,
                        "run_id": r.run_id,
                        "actor": r.actor_id,
                        "objects": [(h.id, h.version, h.state, h.value) for h in given]
                        or [
                            (o["id"], o["version"], o["state"], values.get(o["id"]))
                            for o in r.objects
                        ],
                        "root": r.memory_root,
                        "text": r.query.get("text"),
                    }
                )
            elif e.kind is Kind.OP and e.type == "BRANCH_MERGE":
                src = (e.body.get("payload") or {}).get("branch_id")
                if isinstance(src, str) and src in lanes:
                    lanes[src].merges.append((e.branch, e.seq))
        start = max(0, lane.size - (LATEST if lane.name == "main" else 10))
        latest += [(e, _summary(ledger, e, values)) for e in ledger.entries(start, None, lane.name)]
    roots = Roots(ledger)
    return ReportData(
        path=str(ledger.path),
        ledger_id=ledger.ledger_id,
        origin=ledger.origin,
        vkeys=ledger.genesis_vkeys(),
        checkpoints={b: ledger.latest_checkpoint(b) for b in lanes},
        audit=audit,
        lanes=list(lanes.values()),
        roots={b: _in_order(roots.chain(branch=b), b) for b in lanes},
        state_ops=state_ops,
        latest=sorted(latest, key=lambda x: (x[0].ts, x[0].branch, x[0].seq), reverse=True),
        generated=now,
        receipts=receipts,
        unchecked=unchecked,
        values=values,
    )


def _object_values(ledger: Ledger) -> dict[str, str]:
    """Return memory objects' current values on main, by id (shown beside ids).

    Read through the read gate (``projections.checked``): every row is checked against its
    own operations, and so are the rows its filters hid. The newest ``MAX_LIMIT`` objects
    only: an id past them is shown without its value, never with an unchecked one.
    """
    from memroot.projections.checked import checked_query
    from memroot.projections.epistemic import RetrievalMode
    from memroot.projections.query import MAX_LIMIT, Query

    try:
        results = checked_query(ledger, Query(mode=RetrievalMode.AUDIT, limit=MAX_LIMIT))
    except StorageError:  # a ledger without the memory model's tables: no values to show
        return {}
    return {r.object.id: r.object.value for r in results}


def _in_order(chain: list[RootRecord], branch: str) -> list[RootRecord]:
    """Return a branch's roots newest first, in the order the ledger recorded them.

    A SNAPSHOT root is recorded at its entry, a re-snapshot at its CASCADE entry (several in
    one CASCADE: the one listed first in the chain is the newest); ``Roots.chain`` instead
    walks the links, so a replaced root follows the re-snapshot that replaced it out of
    entry order. Roots of an ancestor branch (before the fork) follow, in chain order.
    """
    listed = {r.root: i for i, r in enumerate(chain)}
    own = [r for r in chain if (r.cascade_branch or r.branch) == branch]
    own.sort(key=lambda r: (r.seq, -listed[r.root]), reverse=True)
    return own + [r for r in chain if r not in own]


# -- rendering -----------------------------------------------------------------------------------

_CSS: Final = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;
background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:18px 28px}
header h1{margin:0 0 4px;font-size:20px}
header .sub{color:#aab3c5;font-size:13px}
main{padding:8px 28px 40px;max-width:1200px}
section{background:#fff;border:1px solid #dde1e8;border-radius:8px;margin:18px 0;
padding:14px 18px}
h2{font-size:16px;margin:0 0 10px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eef0f4;vertical-align:top}
td.n{white-space:nowrap}
th{color:#5b6476;font-weight:600}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
pre{background:#f5f6f8;padding:10px;border-radius:6px;overflow-x:auto;font-size:12px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600}
.ok,.live,.OPEN{background:#dff3e4;color:#17692f}
.fail,.falsified,.DISCARDED{background:#fbe0e0;color:#a11c1c}
.stale,.CLOSED,.ARCHIVED{background:#fdf0d5;color:#8a5a00}
.skip{background:#eceef2;color:#5b6476}
.verdict{font-size:15px;font-weight:700;margin:0 0 8px}
.muted{color:#7a8396}
td{overflow-wrap:break-word}
.badge{white-space:nowrap}
pre{white-space:pre-wrap;overflow-wrap:anywhere}
.scroll{overflow-x:auto}
#banner{margin:18px 0;padding:14px 18px;border-radius:8px;font-size:15px;font-weight:700;
background:#a11c1c;color:#fff}
#banner p{margin:4px 0 0;font-weight:400;font-size:13px}
.value{color:#1d2330}
"""

_STATE_COLOURS: Final = {"live": "#2f9e4f", "stale": "#d48b00", "falsified": "#c62828"}
_LANE_COLOURS: Final = {
    "CANONICAL": "#1d4ed8",
    "SIMULATION": "#7c3aed",
    "PLANNING": "#0891b2",
    "COUNTERFACTUAL": "#be185d",
    "SANDBOX": "#65a30d",
    "TEST": "#6b7280",
}


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _badge(text: str, cls: str | None = None) -> str:
    return f'<span class="badge {_e(cls or text)}">{_e(text)}</span>'


def _hexshort(b: bytes | None, n: int = 12) -> str:
    if b is None:
        return '<span class="muted">—</span>'
    return f'<code title="{b.hex()}">{b.hex()[:n]}</code>'


def _identity(d: ReportData) -> str:
    rows = [
        ("ledger file", _e(d.path)),
        ("ledger id", f"<code>{_e(d.ledger_id)}</code>"),
        ("origin", f"<code>{_e(d.origin)}</code>"),
        ("verifier keys", "<br>".join(f"<code>{_e(k)}</code>" for k in d.vkeys)),
    ]
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    notes = "".join(
        f"<h3>checkpoint of <code>{_e(b)}</code></h3><pre>{_e(n or '(none signed)')}</pre>"
        for b, n in d.checkpoints.items()
    )
    return (
        f'<section id="identity"><h2>Identity and checkpoint</h2><table>{body}</table>'
        f"{notes}</section>"
    )


def _verify(d: ReportData) -> str:
    a = d.audit
    bad_total = len(a.findings) + a.dropped_findings
    verdict = (
        '<p class="verdict" id="verdict" data-ok="true">✔ every step holds</p>'
        if a.ok
        else f'<p class="verdict" id="verdict" data-ok="false">✘ '
        f"{plural(bad_total, 'violation')}</p>"
    )
    rows = []
    for step, what in STEPS.items():
        bad = a.violations(step)
        if step not in a.steps_checked:
            status = _badge("not checked", "skip")
        elif bad:
            status = _badge(f"FAIL ({bad})", "fail")
        else:
            status = _badge("ok", "ok")
        rows.append(
            f'<tr class="step" data-step="{step}"><td>{step}</td><td>{_e(what)}</td>'
            f"<td>{status}</td></tr>"
        )
    findings = "".join(f"<li>{_e(f)}</li>" for f in a.findings)
    notes = "".join(f"<li>{_e(n)}</li>" for n in a.notes)
    return (
        f'<section id="verify"><h2>Verification</h2>{verdict}'
        f'<p class="muted">{plural(a.entries, "entry")} on {plural(a.branches, "branch")}, '
        f"{plural(a.checkpoints, 'checkpoint')}, "
        f"{plural(a.erased, 'erased content', 'erased contents')}</p>"
        f"<table><tr><th>step</th><th>what</th><th>result</th></tr>{''.join(rows)}</table>"
        + (f"<h3>violations</h3><ul id='findings'>{findings}</ul>" if findings else "")
        + (f"<h3>notes</h3><ul>{notes}</ul>" if notes else "")
        + "</section>"
    )


def _roots(d: ReportData) -> str:
    parts = []
    for branch, chain in d.roots.items():
        if not chain:
            continue
        rows = []
        for r in chain:
            projections = ", ".join(f"{_e(p.id)}&nbsp;({p.count})" for p in r.projections)
            made = "re-snapshot (CASCADE)" if r.replaces is not None else "SNAPSHOT"
            where = r.cascade_branch or r.branch
            at = f"{r.seq}" if where == branch else f"{_e(where)}:{r.seq}"
            rows.append(
                f'<tr class="root" data-root="{r.root.hex()}" data-seq="{r.seq}"><td>{at}</td>'
                f"<td>{_e(made)}</td><td>{_hexshort(r.root, 16)}</td><td>{_badge(r.state)}</td>"
                f'<td class="replaces">{_hexshort(r.replaces, 16)}</td>'
                f"<td>{_hexshort(r.parent)}</td><td>{r.high_water.seq}</td>"
                f"<td>{projections}</td></tr>"
            )
        parts.append(
            f"<h3>branch <code>{_e(branch)}</code> ({plural(len(chain), 'root')}, newest "
            "first, in the order the ledger recorded them)</h3>"
            "<table><tr><th>entry</th><th>made by</th><th>memory_root</th><th>state</th>"
            "<th>replaces</th><th>parent</th><th>high-water</th><th>projections (items)</th>"
            f"</tr>{''.join(rows)}</table>"
        )
    body = "".join(parts) or '<p class="muted">no memory roots yet</p>'
    return f'<section id="roots"><h2>Memory roots</h2>{body}</section>'


_CHAR_W: Final = 7.2
"""A generous average advance of a 12px system-ui glyph, to size the SVG to its labels."""


def branch_svg(d: ReportData) -> str:
    """Return the branch tree as inline SVG: one lane per branch, forks, merges and roots."""
    width, left, row_h, lanes_w = 1100, 24, 64, 740
    by_name = {lane.name: lane for lane in d.lanes}

    def label_of(lane: BranchLane) -> str:
        return f"{lane.name} · {lane.type} · {lane.state} · {plural(lane.size, 'entry')}"

    # The labels column is as wide as the longest label (nothing is cut at the edge).
    label_w = 20 + int(
        max(
            [len(label_of(lane)) * _CHAR_W for lane in d.lanes]
            + [len(lane.purpose) * _CHAR_W * 11 / 12 for lane in d.lanes]
            + [200.0]
        )
    )
    width = left + lanes_w + 20 + label_w
    legend = (
        "entries → (a lane starts at its fork point; dots are memory roots: green live, "
        "amber stale, red falsified; dashed arrows are merges)"
    )
    width = max(width, int(24 + len(legend) * _CHAR_W * 11 / 12) + 20)
    order: list[BranchLane] = []

    def visit(name: str | None) -> None:
        for lane in d.lanes:
            if lane.parent == name and lane not in order:
                order.append(lane)
                visit(lane.name)

    visit(None)
    order += [lane for lane in d.lanes if lane not in order]
    offset: dict[str, int] = {}
    for lane in order:
        parent = by_name.get(lane.parent or "")
        offset[lane.name] = (
            0 if parent is None else offset.get(parent.name, 0) + (lane.fork_seq or 0)
        )
    span = max([offset[lane.name] + lane.size for lane in order] + [1])
    scale = (width - left - label_w - 20) / span
    y_of = {lane.name: 34 + i * row_h for i, lane in enumerate(order)}

    def x(branch: str, seq: int) -> float:
        return left + (offset[branch] + seq) * scale

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="branch-tree" role="img" '
        f'aria-label="branch tree" width="{width}" '
        f'viewBox="0 0 {width} {34 + row_h * len(order)}" font-family="system-ui,sans-serif">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" '
        'fill="#555"/></marker></defs>',
    ]
    for lane in order:
        y = y_of[lane.name]
        x0, x1 = x(lane.name, 0), max(x(lane.name, lane.size), x(lane.name, 0) + 6)
        colour = _LANE_COLOURS.get(lane.type, "#374151")
        dash = ' stroke-dasharray="6 4"' if lane.state in ("DISCARDED", "ARCHIVED") else ""
        if lane.parent in y_of:
            px = x(lane.parent or "", lane.fork_seq or 0)
            py = y_of[lane.parent or ""]
            out.append(
                f'<path class="fork" d="M{px:.1f} {py} C{px:.1f} {py + 30} {x0:.1f} {y - 30} '
                f'{x0:.1f} {y}" fill="none" stroke="{colour}" stroke-width="2" opacity="0.7"/>'
            )
            out.append(f'<circle cx="{px:.1f}" cy="{py}" r="4" fill="#fff" stroke="{colour}"/>')
        out.append(
            f'<line class="lane" data-branch="{_e(lane.name)}" x1="{x0:.1f}" y1="{y}" '
            f'x2="{x1:.1f}" y2="{y}" stroke="{colour}" stroke-width="6" '
            f'stroke-linecap="round"{dash}/>'
        )
        label = label_of(lane)
        out.append(
            f'<text x="{width - label_w}" y="{y + 4}" font-size="12" fill="#1d2330">'
            f"{_e(label)}</text>"
        )
        if lane.purpose:
            out.append(
                f'<text x="{width - label_w}" y="{y + 19}" font-size="11" fill="#7a8396">'
                f"{_e(lane.purpose)}</text>"
            )
        for r in d.roots.get(lane.name, []):
            if r.branch != lane.name:
                continue
            out.append(
                f'<circle class="root-dot" cx="{x(lane.name, r.seq):.1f}" cy="{y}" r="5" '
                f'fill="{_STATE_COLOURS.get(r.state, "#555")}" stroke="#fff" stroke-width="1.5">'
                f"<title>root {r.root.hex()[:16]} ({r.state}) at seq {r.seq}</title></circle>"
            )
        for target, seq in lane.merges:
            if target in y_of:
                tx, ty = x(target, seq), y_of[target]
                out.append(
                    f'<path class="merge" d="M{x1:.1f} {y} C{x1:.1f} {y - 30} {tx:.1f} '
                    f'{ty + 30} {tx:.1f} {ty + 6}" fill="none" stroke="#555" stroke-width="1.5" '
                    'stroke-dasharray="4 3" marker-end="url(#arrow)"/>'
                )
    out.append(f'<text x="24" y="16" font-size="11" fill="#7a8396">{_e(legend)}</text>')
    out.append("</svg>")
    return "".join(out)


def _branches(d: ReportData) -> str:
    # The tree keeps its size (labels stay legible); a narrow window scrolls it, not the page.
    return (
        '<section id="branches"><h2>Branches</h2><div class="scroll">'
        f"{branch_svg(d)}</div></section>"
    )


def _states(d: ReportData) -> str:
    if not d.state_ops:
        return (
            '<section id="falsifications"><h2>Falsifications and cascades</h2>'
            '<p class="muted">none</p></section>'
        )
    rows = []
    for s in d.state_ops:
        extra = ""
        if s["type"] == "CASCADE":
            extra = (
                f"touched {plural(s['touched'], 'item')}, beyond the bound {s['beyond']}, "
                f"{plural(s['resnapshots'], 're-snapshot')}"
            )
        rows.append(
            f'<tr class="state-op" data-type="{_e(s["type"])}"><td>{_e(s["branch"])}</td>'
            f"<td>{s['seq']}</td><td>{_e(s['type'])}</td><td>{_e(s['target_type'])}</td>"
            f"<td>{_id_and_value(d, s['target_id'])}</td>"
            f'<td class="n">{_e(s["actor"])}</td>'
            f"<td>{_e(s['reason'] or '')}</td><td>{_e(extra)}</td></tr>"
        )
    return (
        '<section id="falsifications"><h2>Falsifications and cascades</h2><table><tr>'
        "<th>branch</th><th>seq</th><th>operation</th><th>item</th><th>id</th><th>actor</th>"
        f"<th>reason</th><th>cascade</th></tr>{''.join(rows)}</table></section>"
    )


def _id_and_value(d: ReportData, item: Any) -> str:
    """Return an id with, for a memory object, its current value beside it."""
    value = d.values.get(str(item))
    shown = f"<code>{_e(item)}</code>"
    return shown if value is None else f'{shown} <span class="value">“{_e(value)}”</span>'


def _receipts(d: ReportData) -> str:
    if not d.receipts:
        return ""
    rows = []
    for r in reversed(d.receipts[-100:]):
        handed = "".join(
            f'<li><code>{_e(oid)}</code> v{version} {_badge(state)} <span class="value">'
            f"“{_e(value if value is not None else '(value not read)')}”</span></li>"
            for oid, version, state, value in r["objects"]
        )
        rows.append(
            f'<tr class="receipt"><td>{_e(r["run_id"])}</td><td>{_e(r["branch"])}</td>'
            f"<td>{r['seq']}</td><td>{_e(_when(r['ts']))}</td><td>{_e(r['actor'])}</td>"
            f"<td>{_e(r['text'] or '')}</td>"
            f"<td>{plural(len(r['objects']), 'object')}<ul>{handed}</ul></td>"
            f"<td>{_hexshort(r['root'])}</td></tr>"
        )
    shown = min(len(d.receipts), 100)
    more = (
        ""
        if shown == len(d.receipts)
        else f'<p class="muted">the newest {shown} of {len(d.receipts)} receipts</p>'
    )
    return (
        '<section id="receipts"><h2>Read receipts</h2>'
        f"{more}<table><tr><th>run</th><th>branch</th>"
        "<th>seq</th><th>time</th><th>reader</th><th>query text</th><th>objects handed "
        f"(version, state, value)</th><th>memory root in force</th></tr>{''.join(rows)}"
        "</table></section>"
    )


def _latest(d: ReportData) -> str:
    rows = "".join(
        f'<tr class="entry"><td>{_e(e.branch)}</td><td>{e.seq}</td><td>{_e(_when(e.ts))}</td>'
        f"<td>{_e(e.type)}</td><td>{_hexshort(bytes(e.hash), 10)}</td><td>{_e(text)}</td></tr>"
        for e, text in d.latest
    )
    return (
        '<section id="entries"><h2>Latest entries</h2><table><tr><th>branch</th><th>seq</th>'
        f"<th>time</th><th>type</th><th>entry hash</th><th>summary</th></tr>{rows}</table>"
        "</section>"
    )


def render(d: ReportData) -> str:
    """Return the whole page (UTF-8 text, self-contained), starting with ``MARKER``."""
    failed = not d.audit.ok or d.withheld is not None
    verdict = "FAILED" if failed else "verified"
    return (
        _HEAD + MARKER + '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>memroot report: {_e(d.origin)} ({verdict})</title><style>{_CSS}</style>"
        "</head><body>"
        f"<header><h1>memroot report: {_e(d.origin)}</h1><div class='sub'>ledger "
        f"{_e(d.path)} · {verdict} · generated {_e(_when(d.generated))}</div></header><main>"
        + _banner(d)
        + _verify(d)
        + _read(d)
        + ("" if d.withheld is not None else _body(d))
        + "</main></body></html>\n"
    )


def _banner(d: ReportData) -> str:
    """Return the failure banner at the top of the page (nothing when all holds)."""
    if d.audit.ok and d.withheld is None:
        return ""
    why = []
    if not d.audit.ok:
        failed = sorted({f.step for f in d.audit.findings})
        steps = ", ".join(str(n) for n in failed)
        why.append(
            f"{plural(len(d.audit.findings), 'violation')} in "
            f"{plural(len(failed), 'step')} ({steps}): see Verification below."
        )
    if d.withheld is not None:
        why.append("The ledger data is withheld: it did not check against its signatures.")
    return (
        '<div id="banner" role="alert">✘ Verification FAILED: do not rely on this ledger'
        f"{''.join(f'<p>{_e(w)}</p>' for w in why)}</div>"
    )


def _read(d: ReportData) -> str:
    """Return the banner of a refused or unchecked read (nothing when the read was strict)."""
    if d.withheld is not None:
        return (
            '<section id="withheld"><h2>Ledger data withheld</h2>'
            f"<p>{_badge('strict read refused', 'fail')} {_e(d.withheld)}</p>"
            '<p class="muted">No entry, root or branch of this ledger is shown: they did not '
            "check against its signed checkpoints. <code>memroot report --no-strict</code> "
            "shows them unchecked (forensics).</p></section>"
        )
    if d.unchecked:
        return (
            '<section id="unchecked"><p>'
            f"{_badge('UNCHECKED', 'fail')} read with <code>--no-strict</code>: what follows "
            "was NOT checked against the signed checkpoints (forensics only).</p></section>"
        )
    return ""


def _body(d: ReportData) -> str:
    return _identity(d) + _roots(d) + _branches(d) + _states(d) + _receipts(d) + _latest(d)
