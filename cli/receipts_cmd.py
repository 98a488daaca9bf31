"""``memroot receipts``: which memories each run was handed (``READ_RECEIPT`` entries)."""

from __future__ import annotations

import datetime as dt

import click

from memroot.cli.commands import open_reader, strict_option
from memroot.cli.main import Context, cli, emit, pass_ctx

__all__ = ["receipts_cmd"]


@cli.command("receipts")
@click.option("--run", "run_id", help="Only the receipts of this run id.")
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def receipts_cmd(ctx: Context, run_id: str | None, no_strict: bool, as_json: bool) -> None:
    """List read receipts: run, query, memory root in force, every object and version returned.

    A receipt is appended by a recall with a run id (the Python API's
    recall(..., receipt=RUN), the MCP recall tool). `memroot verify` checks that each named
    version was current, with the state named, when the receipt was written. Every entry
    read is proven in its branch's newest signed checkpoint first (strict read); a tampered
    ledger prints nothing and exits 1.

    Example: memroot -l agent.ledger receipts --run run-2026-12-01-a --json
    """
    from memroot.memory_root.receipts import receipts

    with open_reader(ctx, no_strict) as ledger, ledger.reading():
        found = receipts(ledger, run=run_id)

    def human() -> None:
        for r in found:
            when = dt.datetime.fromtimestamp(r.ts / 1e6, dt.UTC).isoformat(timespec="seconds")
            root = "-" if r.memory_root is None else r.memory_root.hex()[:16]
            click.echo(
                f"{r.branch}:{r.seq}  run {r.run_id}  by {r.actor_id} at {when}  root {root}  "
                f"query {r.query}"
            )
            for o in r.objects:
                click.echo(f"    {o['id']}  v{o['version']}  {o['state']}")
        click.echo(f"({len(found)} receipt(s))", err=True)

    emit([r.to_dict() for r in found], as_json, human)
