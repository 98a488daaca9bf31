"""Branch commands (RFC-0012): ``memroot branch ...`` and ``memroot gc``.

``branch create|list|show|close|discard|archive|merge|divergence|diff``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any, Final

import click

from memroot.cli.commands import open_ledger, open_reader, strict_option
from memroot.cli.main import Context, cli, emit, pass_ctx
from memroot.ledger.errors import NotFoundError
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import ActorType, BranchType
from memroot.memory_root.branches import (
    DEFAULT_EXPIRY_DAYS,
    MAX_EXPIRY_DAYS,
    MAX_EXPIRY_EVENTS,
    BranchInfo,
    Expiry,
    check_branches,
    close_branch,
    create_branch,
    gc,
    get_branch,
    list_branches,
)
from memroot.memory_root.divergence import diff_branch, divergence
from memroot.memory_root.merge import STRATEGIES, merge_branch
from memroot.projections.hook import sync
from memroot.projections.strict_rows import check_objects

__all__ = ["branch"]

_TYPES = [t.value for t in BranchType if t is not BranchType.CANONICAL]
_ACTOR_TYPES = [t.value for t in ActorType]


_MAX_NOW: Final = 253_402_300_799_999_999
"""The last microsecond of year 9999, the latest time ``--now`` accepts."""


def _when(us: int | None) -> str:
    if us is None:
        return "-"
    try:
        return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):
        return f"{us} us (outside the calendar)"  # a record from before the bounds


@contextlib.contextmanager
def _reading(ctx: Context, no_strict: bool, *, catch_up: bool = False) -> Iterator[Ledger]:
    """Open the ledger for a branch read command: one read transaction, every head checked.

    Strict unless ``--no-strict`` (``open_reader``): every branch's stored head is checked
    against its newest signed checkpoint before anything is printed. ``catch_up`` first
    brings the derived memory state up to date (the only write; before the read begins).
    """
    with open_reader(ctx, no_strict) as ledger:
        if catch_up:
            sync(ledger)
        with ledger.reading():
            if ledger.strict:
                ledger.check_heads()
            yield ledger


def _info_json(ctx_ledger: Any, info: BranchInfo) -> dict[str, Any]:
    data = info.to_json()
    try:
        data["size"] = ctx_ledger.size(info.branch_id)
    except NotFoundError:  # a registry row of no branch, shown by --no-strict (forensics)
        data["size"] = None
    data["expires"] = _when(info.expires_at)
    return data


@cli.group()
def branch() -> None:
    """Hash-anchored forks of memory for simulation and planning (RFC-0012).

    Example: memroot -l agent.ledger branch create --type SIMULATION --purpose "what if X"
    """


@branch.command("create")
@click.option(
    "--type",
    "branch_type",
    type=click.Choice(_TYPES, case_sensitive=False),
    required=True,
    help="Branch type.",
)
@click.option("--purpose", required=True, help="Why the branch exists.")
@click.option("--parent", default="main", show_default=True, help="Branch to fork from.")
@click.option(
    "--expiry-days",
    type=click.IntRange(1, MAX_EXPIRY_DAYS),
    help=f"Max age in days (defaults per type: {DEFAULT_EXPIRY_DAYS}).",
)
@click.option(
    "--on-expiry",
    type=click.Choice(["ARCHIVE_BRANCH", "DISCARD_BRANCH"], case_sensitive=False),
    default="ARCHIVE_BRANCH",
    show_default=True,
)
@click.option(
    "--max-events",
    type=click.IntRange(1, MAX_EXPIRY_EVENTS),
    help="Refuse appends past N entries after the branch genesis (gc closes one over it).",
)
@click.option("--actor", default="cli", show_default=True, help="Who creates it.")
@click.option(
    "--actor-type",
    type=click.Choice(_ACTOR_TYPES, case_sensitive=False),
    default="HUMAN_USER",
    show_default=True,
)
@click.option(
    "--namespace",
    default="default",
    show_default=True,
    help="Namespace whose branch policy applies.",
)
@click.option("--id", "branch_id", help="Branch id (default: generated).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def create(
    ctx: Context,
    branch_type: str,
    purpose: str,
    parent: str,
    expiry_days: int | None,
    on_expiry: str,
    max_events: int | None,
    actor: str,
    actor_type: str,
    namespace: str,
    branch_id: str | None,
    as_json: bool,
) -> None:
    """Fork a branch: a BRANCH_CREATE entry in the parent anchors the branch's own chain.

    Prints the new branch id.

    Example: memroot -l L branch create --type PLANNING --purpose "Q3 plan" --expiry-days 14
    """
    with open_ledger(ctx) as ledger:
        expiry = None
        if expiry_days is not None or max_events is not None or on_expiry != "ARCHIVE_BRANCH":
            from memroot.memory_root.branches import default_expiry_days

            days = expiry_days or default_expiry_days(ledger.derived.db, namespace, branch_type)
            if days is not None:
                expiry = Expiry(days, on_expiry, max_events)
        made, genesis = create_branch(
            ledger,
            branch_type=branch_type,
            purpose=purpose,
            actor_id=actor,
            actor_type=actor_type,
            namespace_id=namespace,
            parent=parent,
            expiry=expiry,
            branch_id=branch_id,
        )
        data = _info_json(ledger, get_branch(ledger, genesis.branch))
        data["branch_create"] = {
            "branch": made.branch,
            "seq": made.seq,
            "entry_hash": made.entry_hash.hex(),
        }
    emit(data, as_json, data["branch_id"])


@branch.command("list")
@click.option(
    "--state",
    type=click.Choice(["OPEN", "CLOSED", "DISCARDED", "ARCHIVED"], case_sensitive=False),
    help="Only branches in this state.",
)
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def list_(ctx: Context, state: str | None, no_strict: bool, as_json: bool) -> None:
    """List branches with type, state, size and expiry.

    Example: memroot -l agent.ledger branch list --state OPEN
    """
    with _reading(ctx, no_strict) as ledger:
        infos = list_branches(ledger, state=state)
        check_branches(ledger, infos)  # strict: each row is what its BRANCH_CREATE made
        rows = [_info_json(ledger, b) for b in infos]
    emit(
        rows,
        as_json,
        "\n".join(
            f"{r['branch_id']}\t{r['type']}\t{r['state']}\t{r['size']} entries\t"
            f"expires {r['expires']}\t{r['purpose']}"
            for r in rows
        )
        or "no branches",
    )


@branch.command("show")
@click.argument("branch_id")
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def show(ctx: Context, branch_id: str, no_strict: bool, as_json: bool) -> None:
    """Show a branch: its policy, state, fork point, head and latest checkpoint.

    Example: memroot -l agent.ledger branch show sim-0123abcd --json
    """
    with _reading(ctx, no_strict) as ledger:
        info = get_branch(ledger, branch_id)
        check_branches(ledger, [info])
        data = _info_json(ledger, info)
        row = ledger.branch_row(branch_id)
        data["head"] = bytes(row.head).hex()
        data["root"] = ledger.root(branch=branch_id).hex()
        data["latest_checkpoint"] = ledger.latest_checkpoint(branch_id)
    emit(data, as_json, "\n".join(_show_lines(data)))


def _show_lines(data: dict[str, Any], indent: str = "") -> list[str]:
    """Return ``key: value`` lines for people: nested maps indented, lists joined, no reprs."""
    out: list[str] = []
    for k, v in data.items():
        if isinstance(v, dict):
            out.append(f"{indent}{k}:")
            out.extend(_show_lines(v, indent + "  "))
        elif isinstance(v, list):
            out.append(f"{indent}{k}: {', '.join(str(x) for x in v) or '-'}")
        elif isinstance(v, str) and "\n" in v:
            out.append(f"{indent}{k}:")
            out.extend(f"{indent}  {line}" for line in v.rstrip("\n").split("\n"))
        else:
            out.append(f"{indent}{k}: {'-' if v is None else v}")
    return out


def _closer(action: str, verb: str) -> Any:
    @branch.command(
        verb,
        help=f"{action.title()} an open branch (a BRANCH_CLOSE entry in its "
        f"parent); nothing more can be appended to it.\n\nExample: memroot -l "
        f'agent.ledger branch {verb} BRANCH --reason "done"',
    )
    @click.argument("branch_id")
    @click.option("--reason", required=True, help="Why.")
    @click.option("--actor", default="cli", show_default=True)
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    @pass_ctx
    def command(ctx: Context, branch_id: str, reason: str, actor: str, as_json: bool) -> None:
        with open_ledger(ctx) as ledger:
            made = close_branch(ledger, branch_id, action=action, reason=reason, actor_id=actor)
            state = get_branch(ledger, branch_id).state
        emit(
            {
                "branch_id": branch_id,
                "state": state,
                "seq": made.seq,
                "entry_hash": made.entry_hash.hex(),
            },
            as_json,
            f"{branch_id}: {state}",
        )

    return command


_closer("CLOSE", "close")
_closer("DISCARD", "discard")
_closer("ARCHIVE", "archive")


class _Ids(click.ParamType):  # type: ignore[type-arg]
    """A comma-separated list of object ids (repeatable options are joined)."""

    name = "ID[,ID...]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> list[str]:
        """Split on commas, dropping blanks."""
        if isinstance(value, list):
            return value
        return [v.strip() for v in str(value).split(",") if v.strip()]


@branch.command("merge")
@click.argument("branch_id")
@click.option(
    "--objects",
    "objects",
    type=_Ids(),
    multiple=True,
    help="Objects of the branch to bring in (required: a merge is always selective).",
)
@click.option(
    "--strategy",
    type=click.Choice(list(STRATEGIES), case_sensitive=False),
    default="PRESERVE_BOTH",
    show_default=True,
    help="What to do when the parent holds a conflicting belief created since the fork.",
)
@click.option("--actor", default="cli", show_default=True, help="Who merges (the entries' actor).")
@click.option(
    "--actor-type",
    type=click.Choice(_ACTOR_TYPES, case_sensitive=False),
    default="HUMAN_USER",
    show_default=True,
)
@click.option("--reason", help="Why (recorded in the BRANCH_MERGE entry).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def merge(
    ctx: Context,
    branch_id: str,
    objects: tuple[list[str], ...],
    strategy: str,
    actor: str,
    actor_type: str,
    reason: str | None,
    as_json: bool,
) -> None:
    """Merge the named objects of a branch into its parent (RFC-0012 selective merge).

    Imported objects get source_type IMPORTED and keep asserted_by, epistemic type and
    evidence. A conflict is a parent object created since the fork with the same
    entity+attribute (FACT) or task/intent id: PRESERVE_BOTH imports and links both with
    CONTRADICTS, PREFER_CANONICAL rejects the import (logged), PREFER_BRANCH (needs ADMIN)
    imports, deprecates the parent's object and raises a MERGE_OVERRIDE alert. Divergence is
    measured first; above 0.70 a warning is printed and the merge goes ahead.

    Example: memroot -l L branch merge simu-0123 --objects ID1,ID2 --strategy PREFER_CANONICAL
    """
    ids = [i for group in objects for i in group]
    with open_ledger(ctx) as ledger:
        result = merge_branch(
            ledger,
            branch_id,
            ids,
            strategy=strategy,
            actor_id=actor,
            actor_type=actor_type,
            reason=reason,
        )
    data = result.to_json()

    def human() -> None:
        if result.warning:
            click.echo(f"warning: {result.warning}", err=True)
        for item in result.items:
            extra = ""
            if item.conflicts_with:
                extra = f" (conflicts with {', '.join(item.conflicts_with)})"
            if item.deprecated:
                extra += f"; deprecated {', '.join(item.deprecated)}"
            target = f" as {item.new_object_id}" if item.new_object_id else ""
            click.echo(f"{item.object_id}: {item.outcome}{target}{extra}")
        click.echo(
            f"BRANCH_MERGE entry {result.merge_seq} on {result.target}; divergence "
            f"{result.divergence.divergence_score:.2f}"
            + (
                ""
                if result.override_seq is None
                else f"; MERGE_OVERRIDE entry {result.override_seq}"
            )
        )

    emit(data, as_json, human)


@branch.command("divergence")
@click.argument("branch_id")
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def divergence_cmd(ctx: Context, branch_id: str, no_strict: bool, as_json: bool) -> None:
    """Measure how far a branch and its parent have moved apart since the fork (RFC-0012 s9).

    divergence_score = 1 - same / (|branch| + |parent| - same) over the objects each side
    holds (same = objects neither side changed since the fork); above 0.70 merging is risky.

    Example: memroot -l agent.ledger branch divergence simu-0123 --json
    """
    with _reading(ctx, no_strict, catch_up=True) as ledger:
        d = divergence(ledger, branch_id)
    data = d.to_json()

    def human() -> None:
        for k, v in data.items():
            click.echo(f"{k}: {v}")
        if d.warning:
            click.echo("warning: divergence above 0.70: a merge is risky", err=True)

    emit(data, as_json, human)


@branch.command("diff")
@click.argument("branch_id")
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def diff_cmd(ctx: Context, branch_id: str, no_strict: bool, as_json: bool) -> None:
    """List the objects a branch created or modified, against its parent at the fork.

    Example: memroot -l agent.ledger branch diff simu-0123 --json
    """
    with _reading(ctx, no_strict, catch_up=True) as ledger:
        d = diff_branch(ledger, branch_id)
        # Each object served re-derived from its own operations (strict read of derived rows).
        check_objects(ledger, [c.after for c in (*d.created, *d.modified)], branch_id)

    def human() -> None:
        click.echo(f"{d.branch_id} forked from {d.parent} after entry {d.fork_seq}")
        for c in d.created:
            click.echo(f"+ {c.id}  {c.after.type:<10} {c.after.epistemic_type:<12} {c.after.value}")
        for c in d.modified:
            click.echo(f"~ {c.id}  {c.after.type:<10} changed: {', '.join(c.changed)}")
        if not d.created and not d.modified:
            click.echo("no objects created or modified")

    emit(d.to_json(), as_json, human)


def _parse_now(value: str | None) -> int | None:
    if value is None:
        return None
    if value.isascii() and value.isdigit():
        us = int(value)
    else:
        try:
            when = dt.datetime.fromisoformat(value)
            if when.tzinfo is None:
                when = when.replace(tzinfo=dt.UTC)
            us = int(when.timestamp() * 1_000_000)
        except (ValueError, OverflowError) as e:
            raise click.BadParameter(
                f"{value!r} is neither microseconds nor an ISO 8601 time", param_hint="--now"
            ) from e
    if not 0 <= us <= _MAX_NOW:
        raise click.BadParameter(
            f"{value!r} is outside 1970-01-01 .. 9999-12-31", param_hint="--now"
        )
    return us


@cli.command("gc")
@click.option("--now", "now_text", help="Pretend it is this time (ISO 8601 or microseconds).")
@click.option("--dry-run", is_flag=True, help="Print what would be done; append nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def gc_cmd(ctx: Context, now_text: str | None, dry_run: bool, as_json: bool) -> None:
    """Handle expired branches (archive/discard per policy, force-close stale ones).

    Idempotent; meant to run daily (e.g. from cron). Each branch is handled on its own: one
    that cannot be closed (say, it still has open child branches) is reported on stderr and
    the others are still handled; the exit code is then 3.

    Example: memroot -l agent.ledger gc --dry-run --json
    """
    now = _parse_now(now_text)
    # A dry run only reads (read-only media, no key needed).
    with open_reader(ctx, no_strict=False) if dry_run else open_ledger(ctx) as ledger:
        done = gc(ledger, now=now, dry_run=dry_run)
    rows = [d.to_json() for d in done]
    failed = [d for d in done if d.error is not None]

    def human() -> None:
        for d in done:
            if d.error is None:
                verb = "would " + d.action if d.dry_run else d.action
                click.echo(f"{d.branch_id}: {verb} ({d.reason})")
        if not done:
            click.echo("nothing to do")
        for d in failed:
            click.echo(f"error: {d.branch_id}: could not {d.action}: {d.error}", err=True)

    emit(rows, as_json, human)
    if failed:
        raise click.exceptions.Exit(3)
