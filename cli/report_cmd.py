"""``memroot report OUT.html``: one self-contained static page for people who would rather look.

The page (``memroot.cli._report_html``) shows the ledger's identity and checkpoints, the
result of every verification step, the chain of memory roots per branch, the branch tree as
inline SVG, falsifications and cascades, and the latest entries. It has no script and loads
nothing: open it from disk, mail it, attach it to a ticket.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import click

from memroot.cli.commands import strict_option
from memroot.cli.main import Context, cli, emit, pass_ctx
from memroot.cli.verify_cmds import snapshot_of
from memroot.ledger.backends.pg import redact
from memroot.ledger.entries import now_us
from memroot.ledger.errors import IntegrityError, StorageError
from memroot.ledger.ledger import Ledger
from memroot.ledger.strict import relaxed
from memroot.ledger.trust import TrustedState, default_trusted_path
from memroot.ledger.verify import AuditReport, verify_path

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
@click.option("--json", "as_json", is_flag=True, help="Print JSON (where the page went, ok).")
@pass_ctx
def report_cmd(
    ctx: Context,
    out: Path,
    trusted_path: Path | None,
    vkeys: tuple[str, ...],
    no_strict: bool,
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

    Example: memroot -l agent.ledger report agent-report.html
    """
    target = ctx.path()
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
    try:
        out.write_text(html, encoding="utf-8")
    except OSError as e:
        raise StorageError(f"cannot write {out}: {e}") from e
    emit(
        {
            "report": str(out),
            "ok": audit.ok and refused is None,
            "bytes": len(html.encode()),
            "strict_read_refused": refused,
        },
        as_json,
        f"wrote {out} ({len(html.encode())} bytes); verification "
        + ("ok" if audit.ok else f"FAILED ({len(audit.findings)} violation(s))")
        + ("" if refused is None else f"; ledger data withheld: {refused}"),
    )
    if not audit.ok or refused is not None:
        raise click.exceptions.Exit(1)


def _page(
    path: Path, shown: str, trusted_path: Path | None, vkeys: tuple[str, ...], no_strict: bool
) -> tuple[str, str | None, AuditReport]:
    """Verify the ledger file at ``path`` and render its page (``shown`` names the ledger)."""
    from memroot.cli._report_html import gather, refusal, render
    from memroot.memory_root import stack

    if no_strict:
        click.echo(
            "warning: --no-strict: the page shows entries and content NOT checked against the "
            "signed checkpoints (forensics only)",
            err=True,
        )
    # Verification reads the file as it is, to report on it (as `memroot verify`).
    with relaxed():
        with Ledger.open(path, readonly=True) as ledger:
            checks = stack.replay_checks(ledger)
        audit = verify_path(
            path,
            trusted=TrustedState(trusted_path or default_trusted_path()),
            vkeys=vkeys,
            checks=checks,
            update_trusted=False,
        )
    refused: str | None = None
    try:
        with Ledger.open(path, readonly=True, strict=not no_strict) as ledger:
            data = gather(ledger, audit, now_us(), unchecked=no_strict)
            page = render(dataclasses.replace(data, path=shown))
    except IntegrityError as e:
        refused = str(e)
        page = render(refusal(shown, audit, refused, now_us()))
    return page, refused, audit
