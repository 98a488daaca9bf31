"""Falsification commands: ``falsify``, ``mark-stale``, ``restore``, ``cascade`` (SPEC 7).

Items are named by id: a memory object's UUID; a memory root's or a SelfModel snapshot's
hex (a unique prefix of 4+ digits will do); ``ROOT:projection:key`` for one item of a
root's summary (e.g. ``3be83139:failure-motifs:TITLE_MISMATCH``). ``memroot why ID`` shows
an item's state history (``item_why`` here, for ids that are not UUIDs).
"""

from __future__ import annotations

from typing import Any

import click

from memroot.cli.commands import jsonable, open_ledger, open_reader
from memroot.cli.main import Context, branch_option, cli, emit, pass_ctx
from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Appended, Ledger
from memroot.memory_root.falsify import (
    CascadeResult,
    Falsifier,
    ItemWhy,
    Plan,
    StateChange,
    parse_kinds,
)
from memroot.memory_root.falsify import deps as _deps
from memroot.memory_root.falsify._core import has_table

__all__ = [
    "cascade_cmd",
    "falsify_cmd",
    "item_why",
    "mark_stale_cmd",
    "object_states",
    "restore_cmd",
    "state_lines",
    "unapplied",
    "unapplied_lines",
]


def unapplied(
    ledger: Ledger,
    object_id: str | None,
    branch: str = "main",
    *,
    at: tuple[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Return the state operations accepted in their own view that the global state left out.

    These are the rows of ``fz_unapplied`` (docs/FORMAT.md §8.2, §12.3) that ``branch``'s view
    sees: of the memory object ``object_id`` (None: any item), or only the entry ``at``
    (branch, seq). Each has ``branch``, ``seq``, ``op_type``, ``type``, ``id``,
    ``entry_hash`` and ``reason`` (why the global state could not take it). Empty on a
    ledger without falsification state.
    """
    db = ledger.derived.db
    if not has_table(db, "fz_unapplied"):
        return []
    view = _deps.view_of(db, branch)
    where = "1"
    params: list[Any] = []
    if object_id is not None:
        where, params = "kind = 'memory_object' AND id = ?", [object_id]
    if at is not None:
        where, params = f"{where} AND branch = ? AND seq = ?", [*params, *at]
    out = []
    for b, seq, op_type, kind, item_id, reason in db.execute(
        f"SELECT branch, seq, op_type, kind, id, reason FROM fz_unapplied WHERE {where} "
        "ORDER BY seq, branch",
        params,
    ):
        if not any(b == lb and (bound is None or seq <= bound) for lb, bound in view):
            continue
        out.append(
            {
                "branch": b,
                "seq": seq,
                "op_type": op_type,
                "type": kind,
                "id": item_id,
                "entry_hash": ledger.entry(seq, b).hash.hex(),
                "reason": reason,
            }
        )
    return out


def _why_unapplied(ledger: Ledger, a: Appended) -> str | None:
    """Return why the global state left out the operation just appended (None: it applied)."""
    left_out = unapplied(ledger, None, a.branch, at=(a.branch, a.seq))
    return str(left_out[0]["reason"]) if left_out else None


def unapplied_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Return ``unapplied`` rows as lines to print (nothing when there are none)."""
    if not rows:
        return []
    out = ["accepted in their own view, not applied globally (fz_unapplied):"]
    for r in rows:
        out.append(
            f"  seq {r['seq']:<6} {r['entry_hash'][:16]}  {r['op_type']:<10} on {r['branch']}: "
            f"{r['reason']}"
        )
    return out


def _state_options(f: Any) -> Any:
    """Add the options FALSIFY, MARK_STALE and RESTORE share."""
    for option in reversed(
        [
            click.argument("item_id", metavar="ID"),
            click.option("--reason", required=True, help="Why (recorded in the entry)."),
            click.option(
                "--evidence",
                "evidence",
                multiple=True,
                metavar="EVENT_ID",
                help="An event id that supports this (repeat for several).",
            ),
            click.option("--actor", default="operator", show_default=True, help="Who asks."),
            click.option(
                "--actor-type",
                default="HUMAN_USER",
                show_default=True,
                type=click.Choice(
                    ["HUMAN_USER", "SYSTEM_PROCESS", "AI_AGENT", "EXTERNAL_CONNECTOR"],
                    case_sensitive=False,
                ),
                help="The actor's type.",
            ),
            click.option(
                "--namespace",
                default=None,
                help="Namespace of the entry (default: the object's, else 'system').",
            ),
            branch_option,
            click.option("--json", "as_json", is_flag=True, help="Print JSON."),
        ]
    ):
        f = option(f)
    return f


def _state_cmd(
    ctx: Context,
    op: str,
    item_id: str,
    reason: str,
    evidence: tuple[str, ...],
    actor: str,
    actor_type: str,
    namespace: str | None,
    branch: str,
    as_json: bool,
) -> None:
    with open_ledger(ctx) as ledger:
        f = Falsifier(ledger)
        call = {"falsify": f.falsify, "mark-stale": f.mark_stale, "restore": f.restore}[op]
        ref = f.resolve(item_id, branch)
        a = call(
            ref,
            reason,
            evidence,
            actor=actor,
            actor_type=actor_type,
            branch=branch,
            namespace=namespace,
        )
        state = f.state(ref, branch)
        why_not = _why_unapplied(ledger, a)
    data = {
        "type": ref.kind,
        "id": ref.id,
        "state": state,
        "branch": a.branch,
        "seq": a.seq,
        "entry_hash": a.entry_hash.hex(),
        "op_id": a.id,
        "applied": why_not is None,
        "unapplied": why_not,
    }
    where = f"{a.type} entry {a.seq} on {a.branch}, {a.entry_hash.hex()[:16]}"
    emit(
        data,
        as_json,
        f"{ref.kind} {ref.id} is now {state} ({where})"
        if why_not is None
        else f"{ref.kind} {ref.id} stays {state} globally ({where}): accepted in the view of its "
        f"evidence_ids, not applied globally: {why_not}",
    )


@cli.command("falsify")
@_state_options
@pass_ctx
def falsify_cmd(
    ctx: Context,
    item_id: str,
    reason: str,
    evidence: tuple[str, ...],
    actor: str,
    actor_type: str,
    namespace: str | None,
    branch: str,
    as_json: bool,
) -> None:
    """Falsify one item: its state becomes falsified, and nothing else changes.

    What depends on it keeps its state until you ask for a cascade (`memroot cascade`).
    Refused (nothing written) for an unknown id or an item already falsified.
    ID: an object UUID, a root or SelfModel hex (prefix ok), or ROOT:projection:key.

    Example: memroot -l L falsify 0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6b --reason "retracted"
    """
    _state_cmd(
        ctx, "falsify", item_id, reason, evidence, actor, actor_type, namespace, branch, as_json
    )


@cli.command("mark-stale")
@_state_options
@pass_ctx
def mark_stale_cmd(
    ctx: Context,
    item_id: str,
    reason: str,
    evidence: tuple[str, ...],
    actor: str,
    actor_type: str,
    namespace: str | None,
    branch: str,
    as_json: bool,
) -> None:
    """Mark one live item stale (to be re-checked); nothing else changes.

    ID: an object UUID, a root or SelfModel hex (prefix ok), or ROOT:projection:key.

    Example: memroot -l agent.ledger mark-stale 3be83139 --reason "built before the fix"
    """
    _state_cmd(
        ctx, "mark-stale", item_id, reason, evidence, actor, actor_type, namespace, branch, as_json
    )


@cli.command("restore")
@_state_options
@click.option(
    "--cascade",
    "undo_cascade",
    is_flag=True,
    help="Also undo the staleness the cascades from ID set, within --max-depth.",
)
@click.option(
    "--max-depth",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="With --cascade: deepest level made live again (>= 1); deeper items stay stale.",
)
@click.option("--dry-run", is_flag=True, help="With --cascade: print the plan, write nothing.")
@pass_ctx
def restore_cmd(
    ctx: Context,
    item_id: str,
    reason: str,
    evidence: tuple[str, ...],
    actor: str,
    actor_type: str,
    namespace: str | None,
    branch: str,
    as_json: bool,
    undo_cascade: bool,
    max_depth: int,
    dry_run: bool,
) -> None:
    """Restore a falsified or stale item to live (undo); refused for a live item.

    Items a cascade marked stale stay stale, unless you add --cascade: then the items the
    cascades from ID marked stale (and nothing changed since) become live again up to
    --max-depth, deeper ones stay stale, and the re-snapshots those cascades made of the
    restored roots are withdrawn (stale), all listed in the one RESTORE entry.
    ID: an object UUID, a root or SelfModel hex (prefix ok), or ROOT:projection:key.

    Example: memroot -l L restore 0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6b --reason "withdrawn"
    --cascade --max-depth 2
    """
    if not undo_cascade:
        if dry_run:
            raise click.UsageError("--dry-run goes with --cascade")
        _state_cmd(
            ctx, "restore", item_id, reason, evidence, actor, actor_type, namespace, branch, as_json
        )
        return
    with open_reader(ctx, no_strict=False) if dry_run else open_ledger(ctx) as ledger:
        f = Falsifier(ledger)
        if dry_run:
            p = f.plan_restore(item_id, max_depth, branch=branch)
            a = None
        else:
            done = f.restore_cascade(
                item_id,
                reason,
                max_depth,
                evidence,
                actor=actor,
                actor_type=actor_type,
                branch=branch,
                namespace=namespace,
            )
            p, a = done.plan, done.appended[0]
        state = f.state(p.origin, branch)
        why_not = None if a is None else _why_unapplied(ledger, a)
    data: dict[str, Any] = {
        "type": p.origin.kind,
        "id": p.origin.id,
        "state": state,
        "dry_run": a is None,
        **p.payload(),
        "beyond": [s.to_cbor() for s in p.beyond],
    }
    if a is not None:
        data["entry"] = {"branch": a.branch, "seq": a.seq, "entry_hash": a.entry_hash.hex()}
        data["applied"], data["unapplied"] = why_not is None, why_not

    def human() -> None:
        verb = "would restore" if a is None else "restored"
        click.echo(
            f"{p.origin.kind} {p.origin.id} is {'still ' if a is None else 'now '}{state}; "
            f"undo of its cascades within depth {p.max_depth} {verb} {len(p.restored)} item(s):"
        )
        for s in p.restored:
            click.echo(f"  {s.depth:>3}  {s.item.kind:<14} {s.item.id}")
        click.echo(f"left stale beyond the bound: {len(p.beyond)} item(s)")
        for s in p.beyond:
            click.echo(f"  {s.depth:>3}  {s.item.kind:<14} {s.item.id}")
        click.echo(f"re-snapshots withdrawn (stale): {len(p.withdrawn)}")
        for new, old in p.withdrawn:
            click.echo(f"  {new[:16]} (replaced {old[:16]}, live again)")
        if a is None:
            click.echo("dry run: nothing was written")
        else:
            click.echo(f"RESTORE entry {a.seq} on {a.branch} ({a.entry_hash.hex()[:16]})")
        if why_not is not None:
            click.echo(
                "accepted in the view of its evidence_ids, not applied globally (none of the "
                f"above took effect there): {why_not}"
            )

    emit(data, as_json, human)


# -- cascade -------------------------------------------------------------------------------------


def _plan_json(p: Plan, applied: CascadeResult | None) -> dict[str, Any]:
    r = p.request
    out: dict[str, Any] = {
        "origin": {**r.origin.to_cbor(), "state": p.origin_state},
        "branch": p.branch,
        "max_depth": r.max_depth,
        "max_items": r.max_items,
        "kinds": list(r.kinds),
        "touched": [s.to_cbor() for s in p.touched],
        "passed": [s.to_cbor() for s in p.passed],
        "beyond": [c.to_cbor() for c in p.beyond],
        "roots_to_resnapshot": list(p.roots),
        "dry_run": applied is None,
    }
    out["resnapshots"] = [
        {**x.to_cbor(), "branch": x.branch, "high_water": x.preimage.high_water.seq}
        for x in p.resnapshots
    ]
    if applied is not None:
        a = applied.appended[0]
        out["entry"] = {"branch": a.branch, "seq": a.seq, "entry_hash": a.entry_hash.hex()}
    return out


def _print_plan(p: Plan, applied: CascadeResult | None) -> None:
    r = p.request
    click.echo(
        f"cascade from {r.origin.kind} {r.origin.id} ({p.origin_state}) on {p.branch}: "
        f"max depth {r.max_depth}, max items {r.max_items}, kinds {','.join(r.kinds)}"
    )
    verb = "would touch" if applied is None else "touched"
    click.echo(f"{verb} {len(p.touched)} item(s) (marked stale):")
    for s in p.touched:
        click.echo(f"  {s.depth:>3}  {s.item.kind:<14} {s.item.id}")
    if p.passed:
        click.echo(f"walked through {len(p.passed)} item(s) already stale or falsified:")
        for s in p.passed:
            click.echo(f"  {s.depth:>3}  {s.item.kind:<14} {s.item.id}")
    click.echo(f"beyond the bound: {len(p.beyond)} item(s)")
    for c in p.beyond:
        click.echo(f"  {c.depth:>3}  {c.item.kind:<14} {c.item.id}  (cut by {c.bound})")
    click.echo(f"roots to re-snapshot without falsified inputs: {len(p.roots)}")
    for x in p.resnapshots:
        parent = x.preimage.parent.hex()[:16] if x.preimage.parent else "-"
        click.echo(f"  {x.replaces[:16]} -> {x.root}  (parent {parent})")
    if applied is None:
        click.echo("dry run: nothing was written")
        return
    a = applied.appended[0]
    click.echo(f"CASCADE entry {a.seq} on {a.branch} ({a.entry_hash.hex()[:16]})")


@cli.command("cascade")
@click.argument("item_id", metavar="ID")
@click.option(
    "--max-depth",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Deepest dependency level touched (>= 1).",
)
@click.option(
    "--max-items",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="Most items marked stale (>= 1).",
)
@click.option(
    "--kinds",
    default=",".join(k for k in ("object", "root", "summary", "selfmodel")),
    show_default=True,
    help="Kinds of item it may touch: object, root, summary, selfmodel (comma-separated).",
)
@click.option("--reason", default=None, help="Why (recorded in the entry).")
@click.option("--actor", default="operator", show_default=True, help="Who asks.")
@click.option("--dry-run", is_flag=True, help="Print the plan and write nothing.")
@branch_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def cascade_cmd(
    ctx: Context,
    item_id: str,
    max_depth: int,
    max_items: int,
    kinds: str,
    reason: str | None,
    actor: str,
    dry_run: bool,
    branch: str,
    as_json: bool,
) -> None:
    """Walk what depends on a falsified (or stale) item, within an explicit bound.

    Depth 1 is what was built on the item, depth 2 what was built on those, and so on, in
    a fixed order. Applying it appends one CASCADE entry that marks the touched items
    stale, lists what lay beyond the bound, and lists the affected roots re-snapshotted
    without the falsified inputs. --dry-run prints the plan and writes nothing.
    ID: an object UUID, a root or SelfModel hex (prefix ok), or ROOT:projection:key.

    Example: memroot -l L cascade 3be83139 --max-depth 2 --max-items 100 --dry-run
    """
    chosen = parse_kinds(kinds)
    with open_reader(ctx, no_strict=False) if dry_run else open_ledger(ctx) as ledger:
        f = Falsifier(ledger)
        if dry_run:
            p = f.plan(item_id, max_depth, max_items, chosen, branch=branch, resnapshots=True)
            applied = None
        else:
            applied = f.cascade(
                item_id, max_depth, max_items, chosen, reason=reason, actor=actor, branch=branch
            )
            p = applied.plan
    emit(_plan_json(p, applied), as_json, lambda: _print_plan(p, applied))


# -- why for items that are not objects ----------------------------------------------------------


def state_lines(
    history: tuple[tuple[StateChange, bytes], ...] | list[tuple[StateChange, bytes]],
) -> list[str]:
    """Return one line per state change: seq, entry hash, operation, state, actor, reason."""
    out = []
    for c, h in history:
        ev = f" evidence {','.join(c.evidence)}" if c.evidence else ""
        out.append(
            f"  seq {c.seq:<6} {h.hex()[:16]}  {c.op:<10} -> {c.state:<9} by {c.actor_id} "
            f"({c.actor_type}) on {c.branch}: {c.reason or '-'}{ev}"
        )
    return out


def _print_why(w: ItemWhy) -> None:
    where = "" if w.located is None else f" (entry {w.located.seq} on {w.located.branch})"
    click.echo(f"{w.item.kind} {w.item.id}{where}: {w.state}")
    if w.value is not None:
        click.echo(f"  value: {jsonable(w.value)}")
    if w.replaces:
        click.echo(f"  re-snapshot of {w.replaces} without its falsified inputs")
    for root, branch, seq in w.replaced_by:
        click.echo(f"  replaced by {root} (CASCADE entry {seq} on {branch})")
    click.echo("states:" if w.history else "states: live since it was recorded")
    for line in state_lines(w.history):
        click.echo(line)
    click.echo(f"cites ({len(w.dependencies)}):")
    for d in w.dependencies:
        click.echo(f"  {d.kind:<14} {d.id}")
    click.echo(f"built on it ({len(w.dependents)}):")
    for d in w.dependents:
        click.echo(f"  {d.kind:<14} {d.id}")


def object_states(
    ledger: Ledger, object_id: str, branch: str = CANONICAL_BRANCH
) -> tuple[list[dict[str, Any]], list[str]]:
    """Return an object's falsification states in ``branch``'s view: JSON, and lines to print.

    The view is the branch's own operations after those of its ancestors up to each fork
    point. The lines end with the state operations on it that were accepted in their own
    view and that the global state left out (``unapplied``). It only reads (it may run
    inside a read transaction): the caller brings the falsification layer up to date first
    (``Falsifier(ledger).sync()``, outside any transaction).
    """
    f = Falsifier(ledger)
    history = [(c, bytes(ledger.entry(c.seq, c.branch).hash)) for c in f.history(object_id, branch)]
    lines = ["states:" if history else "states: live (never falsified, staled or restored)"]
    lines.extend(state_lines(history))
    lines.extend(unapplied_lines(unapplied(ledger, object_id, branch)))
    return [{**c.to_dict(), "entry_hash": h.hex()} for c, h in history], lines


def _check_item_entry(ledger: Ledger, w: ItemWhy) -> None:
    """Read the entry that recorded an item strictly; a root or SelfModel must be in it.

    A cascade's re-snapshot root is recomputed, not recorded (left to verify step 9).

    Raises:
        IntegrityError: the entry fails its strict read, or does not record the item.
    """
    assert w.located is not None
    at = w.located
    entry = ledger.read_many([at.seq], at.branch)[at.seq].entry
    recorded = w.item.kind in ("memory_root", "selfmodel") and w.replaces is None
    if recorded and bytes.fromhex(w.item.id) not in entry.raw:
        raise IntegrityError(
            f"strict read refused: branch {at.branch} entry {at.seq}: step 9: {w.item.kind} "
            f"{w.item.id} is not the one this entry records (derived state edited); run "
            "`memroot verify`",
            branch=at.branch,
            seq=at.seq,
            step=9,
        )


def item_why(ctx: Context, item_id: str, branch: str, as_json: bool, no_strict: bool) -> None:
    """Print ``memroot why`` for a root, summary item or SelfModel snapshot.

    Strict unless ``no_strict`` (``open_reader``), in one read transaction.

    Raises:
        ValidationError, NotFoundError: for an id that names no item on the branch.
    """
    with open_reader(ctx, no_strict) as ledger, ledger.reading():
        if ledger.strict:
            ledger.check_heads()
        w = Falsifier(ledger).why(item_id, branch)
        if ledger.strict and w.located is not None:
            _check_item_entry(ledger, w)
    emit(jsonable(w.to_dict()), as_json, lambda: _print_why(w))
