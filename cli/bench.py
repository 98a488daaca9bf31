"""``memroot bench``: parse the options, run ``memroot.bench.ledger.run``, print the report.

The measurements live in ``memroot.bench`` (bench/ in the repository); this module is only the
command line over them.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from memroot.bench import ledger as bench_ledger
from memroot.bench.report import render_human
from memroot.cli.main import cli

__all__ = ["SizeList", "bench_cmd"]


class SizeList(click.ParamType):  # type: ignore[type-arg]
    """A comma-separated list of positive entry counts (``10000,100000`` or ``1e5``)."""

    name = "N[,N...]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[int, ...]:
        """Parse the list into positive integers."""
        if isinstance(value, tuple):
            return value
        out: list[int] = []
        for part in str(value).split(","):
            text = part.strip().replace("_", "")
            try:
                n = int(float(text)) if "e" in text.lower() else int(text)
            except ValueError:
                self.fail(f"{part!r} is not a whole number of entries", param, ctx)
            if n < 1:
                self.fail(f"sizes must be at least 1, got {n}", param, ctx)
            out.append(n)
        return tuple(out)


def _equivalent_command(
    sizes: Sequence[int], durable: int, proofs: int, hooked_size: int | None, as_json: bool
) -> str:
    """Return the ``memroot bench`` command line that repeats this run's parameters."""
    args = ["memroot", "bench", "--sizes", ",".join(str(n) for n in sizes)]
    args += ["--durable", str(durable), "--proofs", str(proofs)]
    if hooked_size is None:
        args.append("--no-hooked")
    elif hooked_size != max(sizes):
        args += ["--hooked-size", str(hooked_size)]
    if as_json:
        args.append("--json")
    return shlex.join(args)


@cli.command("bench")
@click.option(
    "--sizes",
    type=SizeList(),
    default=",".join(str(n) for n in bench_ledger.DEFAULT_SIZES),
    show_default=True,
    help="Ledger sizes for the batched-append phase; the largest is used for the others.",
)
@click.option(
    "--full", is_flag=True, help=f"Add {bench_ledger.FULL_SIZE:,} entries (the issue's top size)."
)
@click.option(
    "--durable",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Single fsync'd appends to time on each side.",
)
@click.option(
    "--proofs",
    type=click.IntRange(min=1),
    default=20_000,
    show_default=True,
    help="Inclusion proofs to generate and verify (at most ~5 s of them).",
)
@click.option(
    "--hooked-size",
    type=click.IntRange(min=1),
    help="Entries for the hooked phases 6-9 (import, mixed history, verify, rebuild, "
    "import-bundle; default: the largest size).",
)
@click.option(
    "--no-hooked", is_flag=True, help="Leave out phases 6-9 (the ledger core only, faster)."
)
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Also write the JSON figures to this file.",
)
def bench_cmd(
    sizes: tuple[int, ...],
    full: bool,
    durable: int,
    proofs: int,
    hooked_size: int | None,
    no_hooked: bool,
    as_json: bool,
    out: Path | None,
) -> None:
    """Measure the ledger core beside raw apsw and pymerkle, and the CLI's hooked paths.

    Phases 1-5: the ledger core (issue 2's targets). Phases 6-9: memroot import, a mixed
    history (90% events, 10% memory operations), verify with all ten steps, rebuild and
    import-bundle of its bundle, through every CLI hook (issue 12's targets, issue 27's for
    import-bundle). On the native core each is measured on the
    pure-Python reference too, in the same run. Runs in fresh temp dirs (nothing is kept);
    progress lines go to stderr. Default sizes take two to three minutes on 2 cores
    (--no-hooked: under one); --full adds 10^6 entries (15-20 minutes). The ledger option is
    not used: every ledger is new.

    Example: memroot bench --sizes 10000,100000 --json --out bench.json
    """
    result = bench_ledger.run(
        sizes,
        full=full,
        durable=durable,
        proofs=proofs,
        hooked=not no_hooked,
        hooked_size=hooked_size,
        progress=lambda msg: click.echo(f"bench {msg}", err=True),
    )
    result["command"] = shlex.join(sys.argv)
    result["equivalent_command"] = _equivalent_command(
        result["params"]["sizes"], durable, proofs, result["params"]["hooked_size"], as_json
    )
    if out is not None:
        out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        click.echo(render_human(result))
