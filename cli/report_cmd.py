"""``memroot report OUT.html``: one self-contained static page for people who would rather look.

The page (``memroot.cli._report_html``) shows the ledger's identity and checkpoints, the
result of every verification step, the chain of memory roots per branch, the branch tree as
inline SVG, falsifications and cascades, and the latest entries. It has no script and loads
nothing: open it from disk, mail it, attach it to a ticket.
"""

from __future__ import annotations

from pathlib import Path

import click

from memroot.cli.main import Context, cli, emit, pass_ctx
from memroot.ledger.entries import now_us
from memroot.ledger.errors import StorageError
from memroot.ledger.ledger import Ledger
from memroot.ledger.trust import TrustedState, default_trusted_path
from memroot.ledger.verify import verify_path

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
@click.option("--json", "as_json", is_flag=True, help="Print JSON (where the page went, ok).")
@pass_ctx
def report_cmd(
    ctx: Context, out: Path, trusted_path: Path | None, vkeys: tuple[str, ...], as_json: bool
) -> None:
    """Write a self-contained HTML report of the ledger (no server, no external assets).

    It verifies the ledger first (every step; the trusted state is read, never updated)
    and shows the result per step, identity and checkpoints, memory roots, the branch tree,
    falsifications and cascades, and the latest entries. Exit 1 when verification fails
    (the page is written anyway, showing why).

    Example: memroot -l agent.ledger report agent-report.html
    """
    from memroot.cli import hooks
    from memroot.cli._report_html import gather, render

    path = ctx.file("report")
    with Ledger.open(path, readonly=True) as ledger:
        checks = hooks.replay_checks(ledger)
    audit = verify_path(
        path,
        trusted=TrustedState(trusted_path or default_trusted_path()),
        vkeys=vkeys,
        checks=checks,
        update_trusted=False,
    )
    with Ledger.open(path, readonly=True) as ledger:
        page = render(gather(ledger, audit, now_us()))
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as e:
        raise StorageError(f"cannot write {out}: {e}") from e
    emit(
        {"report": str(out), "ok": audit.ok, "bytes": len(page.encode())},
        as_json,
        f"wrote {out} ({len(page.encode())} bytes); verification "
        + ("ok" if audit.ok else f"FAILED ({len(audit.findings)} violation(s))"),
    )
    if not audit.ok:
        raise click.exceptions.Exit(1)
