"""Writer key commands: ``memroot key add|list|revoke`` (docs/FORMAT.md 7.5).

The root key (the genesis key, or the newest ``rotate-key``'s) authorizes one writer key per
host; each host then signs its checkpoints with its own key (``--key``). ``add`` and
``revoke`` need the root key; ``list`` reads the ledger only (no key at all).
"""

from __future__ import annotations

from pathlib import Path

import click

from memroot.cli._keys_view import human_rows, key_rows
from memroot.cli.commands import open_ledger, open_reader
from memroot.cli.main import Context, cli, emit, pass_ctx
from memroot.ledger.keys import add_key, revoke_key

__all__ = ["key"]


@cli.group()
def key() -> None:
    """Writer keys: one per host, authorized and revoked by the root key.

    Example: memroot -l agent.ledger key add --name host-b
    Example: memroot -l agent.ledger key list --json
    """


def _default_out(ctx: Context, name: str) -> Path:
    target = ctx.path()
    if isinstance(target, str):  # PostgreSQL: the key goes to the working directory
        return Path(f"{name}.key")
    return Path(f"{target}.{name}.key")


@key.command("add")
@click.option("--name", required=True, help="The writer key's label, e.g. the host name.")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Where to write the new key file (default: LEDGER.NAME.key, or NAME.key for a "
    "PostgreSQL ledger; mode 0600, never overwritten).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def add_cmd(ctx: Context, name: str, out: Path | None, as_json: bool) -> None:
    """Authorize a new writer key (needs the root key); write its key file for the host.

    Appends a KEY_ADD entry on main signed by the root key. Hand the key file to the host
    (it signs with `memroot --key FILE ...`); auditors need nothing new: the log says which
    keys the root key authorized.

    Example: memroot -l agent.ledger key add --name host-b --out host-b.key
    """
    path = out or _default_out(ctx, name)
    with open_ledger(ctx) as ledger:
        added = add_key(ledger, name, path)
    data = {"name": added.name, "vkey": added.vkey, "seq": added.seq, "key_file": str(path)}
    emit(
        data,
        as_json,
        f"writer key {added.name!r} authorized at entry {added.seq}\n"
        f"key file: {path} (mode 0600; give it to the host, keep it secret)\n"
        f"vkey: {added.vkey}",
    )


@key.command("revoke")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def revoke_cmd(ctx: Context, name: str, as_json: bool) -> None:
    """Revoke a writer key (needs the root key): it signs nothing from the next entry on.

    Appends a KEY_REVOKE entry on main signed by the root key; what the key signed before
    keeps verifying. The host holding it is refused at its next append (exit 5).

    Example: memroot -l agent.ledger key revoke host-b
    """
    with open_ledger(ctx) as ledger:
        r = revoke_key(ledger, name)
    data = {"name": r.name, "vkey": r.vkey, "seq": r.seq}
    emit(data, as_json, f"writer key {r.name!r} ({r.vkey}) revoked at entry {r.seq}")


@key.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def list_cmd(ctx: Context, as_json: bool) -> None:
    """List the root keys and writer keys, with the main sizes each may sign.

    Read from the ledger's entries (strictly): no key file is needed.

    Example: memroot -l agent.ledger key list --json
    """
    with open_reader(ctx, no_strict=False) as ledger:
        ledger.head_checkpoint()  # the strict head check: the key entries are proven
        rows = key_rows(ledger)
    emit(rows, as_json, human_rows(rows))
