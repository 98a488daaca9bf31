"""``memroot report OUT.html``: one self-contained static page for people who would rather look.

The page (``memroot.cli._report_html``) shows the ledger's identity and checkpoints, the
result of every verification step, the chain of memory roots per branch, the branch tree as
inline SVG, falsifications and cascades, and the latest entries. It has no script and loads
nothing: open it from disk, mail it, attach it to a ticket.

``report`` never destroys a file: it writes only over a page it wrote itself (recognised by
its ``generator`` marker, ``_report_html.MARKER``) unless ``--force``, and never over the
ledger it reports on, its side files or its key, even with ``--force``. It reads the ledger
read-only and needs no key, so it works on read-only media.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from pathlib import Path

import click

from memroot.cli._report_html import plural
from memroot.cli.commands import strict_option
from memroot.cli.main import Context, cli, emit, pass_ctx
from memroot.cli.verify_cmds import snapshot_of, verify_ledger
from memroot.ledger.backends.pg import redact
from memroot.ledger.entries import now_us
from memroot.ledger.errors import IntegrityError, RefusedError, StorageError
from memroot.ledger.ledger import Ledger, default_key_path
from memroot.ledger.strict import relaxed
from memroot.ledger.trust import TrustedState, default_trusted_path
from memroot.ledger.verify import AuditReport, bound_cache

__all__ = ["report_cmd"]


@cli.command("report")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--trusted",
    "trusted_path",
    type=click.Path(path_type=Path),
    help="Trusted-state file verification compares with (read only; default as `verify`).",
)
@click.option("--vkey", "vkeys", multiple=True, help="Trust this verifier key (repeatable).")
@strict_option
@click.option(
    "--force",
    is_flag=True,
    help="Overwrite OUT even if it is not a memroot report (never the ledger or its key).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (where the page went, ok).")
@pass_ctx
def report_cmd(
    ctx: Context,
    out: Path,
    trusted_path: Path | None,
    vkeys: tuple[str, ...],
    no_strict: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Write a self-contained HTML report of the ledger (no server, no external assets).

    It verifies the ledger first (every step; the trusted state is read, never updated)
    and shows the result per step, identity and checkpoints, memory roots, the branch tree,
    falsifications and cascades, and the latest entries. Exit 1 when verification fails
    (the page is written anyway, showing why).

    The ledger data on the page is read strictly: when that read is refused (a tampered
    entry, a head that disagrees with its checkpoint) the page shows the verification and
    the refusal, and no entry, root or branch; ``--no-strict`` shows them unchecked, under a
    banner that says so.

    OUT is written only if it is new or a page memroot report wrote; anything else (a
    ledger, a key, a document) is refused, exit 3, unless --force. The ledger itself, its
    -wal/-shm/-journal files, its key and the trusted-state file are refused even with
    --force. The ledger is only read (no key needed; read-only media are fine).

    Example: memroot -l agent.ledger report agent-report.html
    """
    target = ctx.path()
    _check_target(out, target, ctx.key_path, trusted_path, force)
    with contextlib.ExitStack() as stack:
        # A PostgreSQL ledger: one snapshot of it, with this host's caught-up derived state,
        # copied to a file (as `verify` reads it); the page names the URL, not the copy.
        path = (
            stack.enter_context(snapshot_of(target, ctx.key_path))
            if isinstance(target, str)
            else target
        )
        shown = redact(target) if isinstance(target, str) else str(target)
        html, refused, audit = _page(path, shown, trusted_path, vkeys, no_strict)
    _write(out, html)
    emit(
        {
            "report": str(out),
            "ok": audit.ok and refused is None,
            "bytes": len(html.encode()),
            "strict_read_refused": refused,
        },
        as_json,
        f"wrote {out} ({len(html.encode())} bytes); verification "
        + (
            "ok"
            if audit.ok
            else f"FAILED ({plural(len(audit.findings) + audit.dropped_findings, 'violation')})"
        )
        + ("" if refused is None else f"; ledger data withheld: {refused}"),
    )
    if not audit.ok or refused is not None:
        raise click.exceptions.Exit(1)


def _protected(target: Path | str, key_path: Path | None, trusted_path: Path | None) -> set[Path]:
    """Return the files a report must never replace: the ledger's own, its key, the trust."""
    keep = {(trusted_path or default_trusted_path()).resolve()}
    if key_path is not None:
        keep.add(key_path.resolve())
    if isinstance(target, Path):
        ledger = target.resolve()
        keep |= {ledger, default_key_path(ledger)}
        keep |= {Path(f"{ledger}{side}") for side in ("-wal", "-shm", "-journal")}
    return keep


def _check_target(
    out: Path, target: Path | str, key_path: Path | None, trusted_path: Path | None, force: bool
) -> None:
    """Refuse an OUT that would destroy a file report did not write (module docstring).

    Raises:
        RefusedError: OUT is the ledger, one of its files, its key or the trusted state
            (always), or an existing file that is not a memroot report (without ``force``).
    """
    from memroot.cli._report_html import is_report

    resolved = out.resolve()
    if resolved in _protected(target, key_path, trusted_path):
        raise RefusedError(
            f"{out} is the ledger, one of its files, its key or the trusted state: a report "
            "never replaces it (not even with --force); nothing was written"
        )
    if not (out.exists() or out.is_symlink()) or force:
        return
    if not out.is_file() or not is_report(out):
        raise RefusedError(
            f"{out} exists and is not a page memroot report wrote: it is left as it is "
            "(choose another file, or --force to replace it); nothing was written"
        )


def _write(out: Path, page: str) -> None:
    """Write the page beside OUT and move it into place: OUT is whole or as it was.

    Raises:
        StorageError: the directory cannot be written.
    """
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    except OSError as e:
        raise StorageError(f"cannot write {out}: {e}") from e
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StorageError(f"cannot write {out}: {e}") from e


def _page(
    path: Path, shown: str, trusted_path: Path | None, vkeys: tuple[str, ...], no_strict: bool
) -> tuple[str, str | None, AuditReport]:
    """Verify the ledger file at ``path`` and render its page (``shown`` names the ledger).

    Both reads open the file read-only, as ``verify`` does: no write, no key.
    """
    from memroot.cli._report_html import gather, refusal, render

    if no_strict:
        click.echo(
            "warning: --no-strict: the page shows entries and content NOT checked against the "
            "signed checkpoints (forensics only)",
            err=True,
        )
    # Verification reads the file as it is, to report on it (as `memroot verify`), in one
    # read transaction; the trusted state is read, never updated.
    trusted = TrustedState(trusted_path or default_trusted_path())
    with (
        relaxed(),
        Ledger.open(path, readonly=True, strict=False) as ledger,
        ledger.store.read(),
    ):
        bound_cache(ledger.store)
        audit = verify_ledger(ledger, trusted, vkeys, True, None, None, None)
    refused: str | None = None
    try:
        with Ledger.open(path, readonly=True, strict=not no_strict) as ledger:
            data = gather(ledger, audit, now_us(), unchecked=no_strict)
            page = render(dataclasses.replace(data, path=shown))
    except IntegrityError as e:
        refused = str(e)
        page = render(refusal(shown, audit, refused, now_us()))
    return page, refused, audit
