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
    """List read receipts: run, query, memory root in force, and the values each run was handed.

    A receipt is appended by a recall with a run id (the Python API's
    recall(..., receipt=RUN), the MCP recall tool). Each object it names is shown with its
    version, state and value, read back from the ledger as of the read and checked: the
    version's row against its own operations, and (receipts of format 2) the value against
    the digest the receipt holds. `memroot verify` checks every receipt (step 9). Every entry
    read is proven in its branch's newest signed checkpoint first (strict read); a tampered
    ledger prints nothing and exits 1.

    Example: memroot -l agent.ledger receipts --run run-2026-12-01-a --json
    """
    from memroot.memory_root.receipts import handed, receipts

    with open_reader(ctx, no_strict) as ledger, ledger.reading():
        found = receipts(ledger, run=run_id)
        values = [handed(ledger, r) for r in found]

    def human() -> None:
        for r, objects in zip(found, values, strict=True):
            when = dt.datetime.fromtimestamp(r.ts / 1e6, dt.UTC).isoformat(timespec="seconds")
            root = "none" if r.memory_root is None else r.memory_root.hex()[:16]
            asked = ", ".join(f"{k}={v}" for k, v in r.query.items())
            click.echo(
                f"{r.branch}:{r.seq}  run {r.run_id}  by {r.actor_id} at {when}  "
                f"memory root {root}  query {asked}"
            )
            for h in objects:
                click.echo(f"    {h.id}  v{h.version}  {h.state:<9}  {h.value}")
        n = len(found)
        click.echo(f"({n} receipt{'' if n == 1 else 's'})", err=True)

    emit(
        [
            {**r.to_dict(), "handed": [h.to_dict() for h in objects]}
            for r, objects in zip(found, values, strict=True)
        ],
        as_json,
        human,
    )
