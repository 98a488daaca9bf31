"""Witness commands (run a witness, use witnesses from a ledger) and ``publish`` (tiles).

``witness init|follow|serve`` run a witness; ``witness add|remove|list|submit|log-vkey`` use
witnesses from a ledger; ``publish`` writes a C2SP tlog-tiles directory.

A down witness never fails the command that signed the checkpoint: the checkpoint is
committed and kept, the witness is queued for retry (every later checkpoint retries it, and
``memroot witness submit`` does on demand), and a warning naming the witness goes to stderr.
``memroot witness submit`` itself exits non-zero while any witness still has checkpoints
pending: 4 if one is unreachable, 3 if one refuses (not configured for this log), 1 if one
reports a conflict (it cosigned another or a larger history: a rollback or a fork).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import click

from memroot.cli.commands import ledger_vkey, open_ledger, open_reader, strict_option
from memroot.cli.main import Context, cli, emit, pass_ctx
from memroot.ledger.errors import IntegrityError, RefusedError, StorageError
from memroot.ledger.note import Verifier
from memroot.ledger.transparency.tiles import (
    branch_directory,
    publish_setting,
    set_publish,
    write_tiles,
)
from memroot.ledger.transparency.witness import (
    Submission,
    add_witness,
    remove_witness,
    submit,
    witness_status,
)
from memroot.ledger.transparency.witness_server import Witness, init_witness, serve

__all__ = ["publish_cmd", "witness"]


@cli.group()
def witness() -> None:
    """Witnesses (C2SP tlog-witness): cosign checkpoints so rollbacks and forks show.

    Example: memroot witness init wdir --name witness.example.org/w1
    Example: memroot -l agent.ledger witness add http://127.0.0.1:8123 "$(cat w1.vkey)"
    """


# --------------------------------------------------------------------------- witness side


@witness.command("init")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--name", required=True, help="The witness's name (its key name), e.g. a URL.")
@click.option("--log", "logs", multiple=True, help="Follow the log of this vkey (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def init_cmd(directory: Path, name: str, logs: tuple[str, ...], as_json: bool) -> None:
    """Create a witness: its Ed25519 key and state in DIRECTORY; print its vkey.

    Example: memroot witness init wdir --name witness.example.org/w1 --log "$(cat agent.vkey)"
    """
    try:
        vkey = init_witness(directory, name)
    except ValueError as e:
        raise RefusedError(str(e)) from e
    w = Witness(directory)
    followed = [w.add_log(v) for v in logs]
    emit(
        {"directory": str(directory), "vkey": vkey, "logs": followed},
        as_json,
        vkey,
    )


@witness.command("follow")
@click.argument("directory", type=click.Path(path_type=Path))
@click.argument("vkey")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def follow_cmd(directory: Path, vkey: str, as_json: bool) -> None:
    """Cosign the log whose checkpoints VKEY signs (its origin is the key's name).

    For a branch of a ledger, pass that branch's vkey (`memroot witness log-vkey -b B`).

    Example: memroot witness follow wdir "$(memroot -l agent.ledger vkey)"
    """
    origin = Witness(directory).add_log(vkey)
    emit({"origin": origin}, as_json, f"following {origin}")


@witness.command("serve")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option(
    "--listen",
    default="127.0.0.1:0",
    show_default=True,
    help="HOST:PORT to listen on (port 0: any free port, printed).",
)
@click.option("--log", "logs", multiple=True, help="Also follow this log vkey (repeatable).")
@click.option("--quiet", is_flag=True, help="Do not log requests to stderr.")
def serve_cmd(directory: Path, listen: str, logs: tuple[str, ...], quiet: bool) -> None:
    """Serve the witness over HTTP until interrupted (POST /add-checkpoint, GET /checkpoint).

    Prints `listening on http://HOST:PORT` once ready.

    Example: memroot witness serve wdir --listen 127.0.0.1:8123
    """
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise click.BadParameter("expected HOST:PORT, e.g. 127.0.0.1:8123", param_hint="--listen")
    for v in logs:
        Witness(directory).add_log(v)
    server = serve(directory, host.strip("[]"), int(port_text), log=None if quiet else sys.stderr)
    bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
    click.echo(f"listening on http://{bound_host}:{bound_port}", nl=True)
    sys.stdout.flush()

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


# --------------------------------------------------------------------------- ledger side


def _print_submissions(done: list[Submission], as_json: bool) -> None:
    def human() -> None:
        for s in done:
            size = "-" if s.size is None else s.size
            click.echo(f"{s.witness} [{s.branch}]: {s.status}, cosigned size {size}; {s.message}")

    emit([s.to_json() for s in done], as_json, human)


@witness.command("add")
@click.argument("url")
@click.argument("vkey")
@click.option(
    "--branch",
    "-b",
    "branches",
    multiple=True,
    help="Submit this branch's checkpoints (repeatable; default main).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def add_cmd(ctx: Context, url: str, vkey: str, branches: tuple[str, ...], as_json: bool) -> None:
    """Submit every checkpoint of the ledger to the witness at URL (VKEY: its witness vkey).

    The retained checkpoints are submitted at once; a down witness is reported and retried
    with every later checkpoint (or `memroot witness submit`).

    Example: memroot -l agent.ledger witness add http://127.0.0.1:8123 "$(cat w1.vkey)"
    """
    with open_ledger(ctx) as ledger:
        w = add_witness(ledger, url, vkey, branches or ("main",))
        done = submit(ledger, names=[w.name])
    for s in done:
        if not s.ok:
            click.echo(f"warning: {s.message} (queued for retry)", err=True)
    _print_submissions(done, as_json)


@witness.command("remove")
@click.argument("name")
@pass_ctx
def remove_cmd(ctx: Context, name: str) -> None:
    """Stop submitting to witness NAME (cosignatures already kept stay).

    Example: memroot -l agent.ledger witness remove witness.example.org/w1
    """
    with open_ledger(ctx) as ledger:
        remove_witness(ledger, name)
    click.echo(f"removed witness {name}")


@witness.command("list")
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def list_cmd(ctx: Context, no_strict: bool, as_json: bool) -> None:
    """List the ledger's witnesses: cosigned size, pending checkpoints, last error.

    Read strictly (the head checked against its signed checkpoint) unless --no-strict.

    Example: memroot -l agent.ledger witness list --json
    """
    with open_reader(ctx, no_strict) as ledger:
        rows = witness_status(ledger)

    def human() -> None:
        if not rows:
            click.echo("no witnesses (add one with `memroot witness add URL VKEY`)")
        for r in rows:
            click.echo(
                f"{r['witness']} [{r['branch']}] {r['url']}: cosigned size {r['cosigned_size']}, "
                f"{r['pending']} pending"
                + (f"; last error: {r['last_error']}" if r["last_error"] else "")
            )

    emit(rows, as_json, human)


@witness.command("submit")
@click.option("--name", "names", multiple=True, help="Only this witness (repeatable).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def submit_cmd(ctx: Context, names: tuple[str, ...], timeout: float, as_json: bool) -> None:
    """Retry every pending checkpoint now; exit non-zero while any stays pending.

    Example: memroot -l agent.ledger witness submit
    """
    with open_ledger(ctx) as ledger:
        done = submit(ledger, names=names, timeout=timeout)
    _print_submissions(done, as_json)
    bad = [s for s in done if not s.ok]
    if any(s.status == "conflict" for s in bad):
        raise IntegrityError(next(s.message for s in bad if s.status == "conflict"))
    if any(s.status == "refused" for s in bad):
        raise RefusedError(next(s.message for s in bad if s.status == "refused"))
    if bad:
        raise StorageError(f"{bad[0].message} ({bad[0].pending} checkpoint(s) still pending)")


@witness.command("log-vkey")
@click.option("--branch", "-b", default="main", show_default=True, help="The branch.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def log_vkey_cmd(ctx: Context, branch: str, as_json: bool) -> None:
    """Print the vkey a witness follows for a branch (key name = the branch's origin).

    Example: memroot -l agent.ledger witness log-vkey -b sim-1
    """
    with open_reader(ctx, no_strict=False) as ledger:
        ledger.store.branch(branch)
        origin = ledger.origin if branch == "main" else f"{ledger.origin}/branch/{branch}"
        key = Verifier.from_vkey(ledger_vkey(ledger)).for_origin(origin).vkey()
    emit({"origin": origin, "vkey": key}, as_json, key)


# --------------------------------------------------------------------------- publish


@cli.command("publish")
@click.argument("directory", type=click.Path(path_type=Path), required=False)
@click.option(
    "--branch",
    "-b",
    "branches",
    multiple=True,
    help="Publish this branch (repeatable; default main); a branch B goes to DIR/branch/B.",
)
@click.option(
    "--every-checkpoint",
    is_flag=True,
    help="Also make every checkpoint the ledger signs from now on publish to DIRECTORY.",
)
@click.option("--stop", is_flag=True, help="Stop publishing every checkpoint.")
@click.option("--no-sign", is_flag=True, help="Publish what is signed; sign no new checkpoint.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def publish_cmd(
    ctx: Context,
    directory: Path | None,
    branches: tuple[str, ...],
    every_checkpoint: bool,
    stop: bool,
    no_sign: bool,
    as_json: bool,
) -> None:
    """Publish tiles, entry bundles and checkpoints (C2SP tlog-tiles) to DIRECTORY.

    Only what is new is written, with partial tiles for every retained checkpoint.

    Example: memroot -l agent.ledger publish /srv/www/log --every-checkpoint
    """
    with open_ledger(ctx) as ledger:
        if stop:
            set_publish(ledger, None)
            emit({"publishing": None}, as_json, "stopped publishing every checkpoint")
            return
        if directory is None:
            setting = publish_setting(ledger)
            if setting is None:
                raise click.UsageError("give DIRECTORY (no publication is configured)")
            directory, configured = setting
            branches = branches or configured
        chosen = branches or ("main",)
        done = [
            write_tiles(ledger, branch_directory(directory, b), branch=b, sign=not no_sign)
            for b in chosen
        ]
        if every_checkpoint:
            set_publish(ledger, directory, chosen)
    data = [
        {
            "directory": str(t.directory),
            "origin": t.origin,
            "size": t.size,
            "previous_size": t.previous_size,
            "root": t.root.hex(),
            "checkpoints": t.checkpoints,
            "files_written": t.tiles_written,
        }
        for t in done
    ]
    emit(
        {"published": data, "every_checkpoint": every_checkpoint},
        as_json,
        "\n".join(
            f"published {t.origin} at size {t.size} (was {t.previous_size}) to {t.directory}: "
            f"{t.tiles_written} new file(s), {t.checkpoints} checkpoint(s)"
            for t in done
        )
        + ("\nevery checkpoint now publishes here" if every_checkpoint else ""),
    )
