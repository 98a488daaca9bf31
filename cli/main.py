"""The ``memroot`` command line: thin click commands over the library.

Each command parses its arguments, calls the library and prints the result for a person or,
with ``--json``, for a machine. Errors go to stderr; the exit code says whose fault it was
(mapped in one place, ``_exit_code``):

    0 success · 1 integrity violation found (verify/audit) · 2 usage error ·
    3 request refused (validation, limits, lifecycle) · 4 storage failure · 5 key file problem ·
    130 interrupted (Ctrl-C): nothing was written

The library's errors name the parameters of the Python API (``expiry_days``); the same
handler shows them as the running command's options (``--expiry-days``): ``cli_wording``.

The ledger is given once for the whole tree: ``-l/--ledger`` (or ``MEMROOT_LEDGER``) is
accepted before the subcommand and after it, at every level (``memroot -l L log``,
``memroot log -l L``, ``memroot branch create -l L x``). Given at several levels, the one
nearest the command wins; the environment variable applies only when no level gives one.
The option is added to every command and group by the classes ``_Group`` hands out
(``LedgerCommand``, ``LedgerGroup``), so a new command gets it without asking.
"""

from __future__ import annotations

import base64
import importlib
import json
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import apsw
import click
from click.core import ParameterSource

from memroot.ledger import _backend, interrupts
from memroot.ledger.backends import store as store_module
from memroot.ledger.backends.pg import is_url
from memroot.ledger.errors import (
    DecodeError,
    IntegrityError,
    KeyFileError,
    MemrootError,
    RefusedError,
    StorageError,
)

__all__ = [
    "Context",
    "LedgerCommand",
    "LedgerGroup",
    "branch_option",
    "cli",
    "emit",
    "main",
    "pass_ctx",
]

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_INTEGRITY = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_STORAGE = 4
EXIT_KEY = 5
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C


def _exit_code(error: MemrootError) -> int:
    """Map the error hierarchy to exit codes (the one place this happens)."""
    if isinstance(error, KeyFileError):
        return EXIT_KEY
    if isinstance(error, StorageError):
        return EXIT_STORAGE
    if isinstance(error, RefusedError):
        return EXIT_REFUSED
    if isinstance(error, DecodeError) and getattr(error, "step", None) is None:
        return EXIT_REFUSED  # a malformed input file or argument, not a tampered ledger
    if isinstance(error, IntegrityError):
        return EXIT_INTEGRITY
    return EXIT_INTEGRITY


def cli_wording(message: str, params: list[click.Parameter], field: str | None) -> str:
    """Return ``message`` with the library's parameter names shown as the command's options.

    A library error names a parameter as the Python API spells it (``expiry_days``,
    ``strict=False``); on the command line the same thing is an option (``--expiry-days``,
    ``--no-strict``). Replaced: the error's own ``field``, every name with an underscore,
    and ``NAME=False`` for a ``--no-NAME`` flag; prose words are left alone.
    """
    for p in params:
        if not isinstance(p, click.Option) or p.name is None:
            continue
        flag = max(p.opts, key=len)
        if p.name.startswith("no_"):
            message = message.replace(f"{p.name[3:]}=False", flag)
        if p.name == field or "_" in p.name:
            message = re.sub(rf"(?<![\w.-]){re.escape(p.name)}(?![\w=-])", flag, message)
    return message


class Context:
    """What every command gets: the ledger (a file path or a PostgreSQL URL) and its key."""

    def __init__(self, ledger: Path | str | None, key_path: Path | None = None) -> None:
        self.ledger_path = ledger
        self.key_path = key_path

    def path(self) -> Path | str:
        """Return the ledger path (or ``postgresql://`` URL), or fail naming the option."""
        if self.ledger_path is None:
            raise click.UsageError("no ledger given: use -l/--ledger PATH or set MEMROOT_LEDGER")
        return self.ledger_path


class LedgerTarget(click.ParamType):  # type: ignore[type-arg]
    """A ledger file path, or a ``postgresql://`` URL kept as written (a str)."""

    name = "ledger"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Return a ``str`` URL for a PostgreSQL ledger, else a ``Path``."""
        if isinstance(value, Path | str) and is_url(str(value)):
            return str(value)
        return Path(value)


pass_ctx = click.make_pass_decorator(Context)

branch_option = click.option(
    "--branch",
    "-b",
    default="main",
    show_default=True,
    help="The branch to work on (see `memroot branch list`).",
)
"""The ``--branch`` option shared by every command that reads or writes one branch."""


def emit(data: Any, as_json: bool, human: Callable[[], None] | str | None = None) -> None:
    """Print ``data`` as JSON (``as_json``) or print the human form."""
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=_json_default))
    elif callable(human):
        human()
    elif human is not None:
        click.echo(human)
    else:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def progress_bar(total: int, label: str) -> Iterator[Callable[[int, int], None]]:
    """Yield a progress callback that draws a bar on a terminal (stderr) and nothing else."""
    if not sys.stderr.isatty() or total < 10_000:
        yield lambda done, total: None
        return
    with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
        state = {"done": 0}

        def update(done: int, total: int) -> None:
            bar.update(done - state["done"])
            state["done"] = done

        yield update


LEDGER_ENVVAR = "MEMROOT_LEDGER"
KEY_ENVVAR = "MEMROOT_KEY"
_LEDGER_HELP = "The ledger file, or a postgresql:// URL (env MEMROOT_LEDGER)."


def _take_ledger(ctx: click.Context, param: click.Parameter, value: Path | str | None) -> None:
    """Record ``-l`` given after a (sub)command in the shared ``Context``.

    The value on the command line wins over the one of an enclosing group, because this
    callback runs after the group's; a value from the environment only fills in where no
    level gave one (it must not override an explicit ``memroot -l L ...``).
    """
    if value is None:
        return
    obj = ctx.find_object(Context)
    if obj is None:  # a subcommand invoked on its own, without the root group
        obj = ctx.obj = Context(None)
    given_here = ctx.get_parameter_source(param.name or "") is ParameterSource.COMMANDLINE
    if given_here or obj.ledger_path is None:
        obj.ledger_path = value


def _add_ledger_option(command: click.Command) -> None:
    """Give ``command`` the ``-l/--ledger`` option (once), feeding ``_take_ledger``."""
    if any(p.name == "ledger" for p in command.params):
        return
    command.params.append(
        click.Option(
            ["-l", "--ledger"],
            type=LedgerTarget(),
            metavar="PATH",
            envvar=LEDGER_ENVVAR,
            expose_value=False,
            callback=_take_ledger,
            help=f"{_LEDGER_HELP[:-1]}; wins over one given before the subcommand.",
        )
    )


class LedgerCommand(click.Command):
    """A command that also accepts ``-l/--ledger`` after its name (``memroot log -l L``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _add_ledger_option(self)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a library error leaves with the options of this command path."""
        try:
            return super().invoke(ctx)
        except MemrootError as e:
            params: list[click.Parameter] = []
            at: click.Context | None = ctx
            while at is not None:
                params += at.command.params
                at = at.parent
            e.cli_params = params  # type: ignore[attr-defined]
            raise


class LedgerGroup(click.Group):
    """A subcommand group with ``-l/--ledger``, whose commands and groups get it too."""

    command_class = LedgerCommand
    group_class = type  # subgroups are LedgerGroups as well

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _add_ledger_option(self)


COMMAND_MODULES: dict[str, str] = {
    "append": "commands",
    "audit": "bundle_cmds",
    "bench": "bench",
    "branch": "branch_cmds",
    "cascade": "falsify_cmds",
    "checkpoint": "commands",
    "demo": "demo",
    "export": "bundle_cmds",
    "falsify": "falsify_cmds",
    "gc": "branch_cmds",
    "import": "commands",
    "import-bundle": "bundle_cmds",
    "init": "commands",
    "key": "key_cmds",
    "log": "commands",
    "mark-stale": "falsify_cmds",
    "mcp": "mcp_cmd",
    "prove": "verify_cmds",
    "publish": "witness_cmds",
    "query": "memory_cmds",
    "rebuild": "memory_cmds",
    "receipts": "receipts_cmd",
    "report": "report_cmd",
    "restore": "falsify_cmds",
    "root": "root_cmds",
    "roots": "root_cmds",
    "rotate-key": "bundle_cmds",
    "selfmodel": "root_cmds",
    "show": "commands",
    "snapshot": "root_cmds",
    "tiles": "bundle_cmds",
    "verify": "verify_cmds",
    "vkey": "commands",
    "why": "memory_cmds",
    "witness": "witness_cmds",
}
"""Each subcommand's module in ``memroot.cli``: imported when the command runs (or for help).

A CLI call imports only its own command's module (and what that module needs), not every
layer's: ``memroot append`` does not pay for the benchmark harness or the report renderer.
"""


class _Group(click.Group):
    """The root group: maps library errors to exit codes; its commands take ``-l`` too.

    Subcommands are loaded on first use from ``COMMAND_MODULES``.
    """

    command_class = LedgerCommand
    group_class = LedgerGroup

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Return every subcommand's name (without importing their modules)."""
        return sorted(set(COMMAND_MODULES) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Return the subcommand, importing the module that registers it the first time."""
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"memroot.cli.{module}")
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; map ``MemrootError`` through ``_exit_code``.

        Witness and publication problems after a committed checkpoint are warnings (the
        command succeeded; the checkpoint is queued for retry): printed on stderr.
        """
        from memroot.ledger.transparency.witness import WitnessWarning

        commits_before = store_module.commits
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as recorded:
                caught = recorded  # filled in place while the command runs
                warnings.simplefilter("always", WitnessWarning)
                return self._invoke_caught(ctx, commits_before)
        finally:
            # Shown once the recording is over: inside it, showing a warning records it
            # again (the list would grow while read: a loop that never ends).
            for w in list(caught):
                if issubclass(w.category, WitnessWarning):
                    click.echo(f"warning: {w.message}", err=True)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)

    def _invoke_caught(self, ctx: click.Context, commits_before: int) -> Any:
        """Run the command, turning memroot's errors and a Ctrl-C into messages and exit codes."""
        try:
            return super().invoke(ctx)
        except MemrootError as e:
            params = getattr(e, "cli_params", [])
            text = cli_wording(str(e), params, getattr(e, "field", None))
            click.echo(f"error: {text}", err=True)
            ctx.exit(_exit_code(e))
        except KeyboardInterrupt:
            # A write commits whole or not at all, so what a Ctrl-C stops is rolled
            # back; only a transaction this command already committed stays.
            done = store_module.commits - commits_before
            click.echo(
                "interrupted: nothing was written (the ledger is as it was before this command)"
                if done == 0
                else f"interrupted: the transaction in progress was rolled back; the "
                f"{done} this command committed before it stay",
                err=True,
            )
            ctx.exit(EXIT_INTERRUPTED)
        except (apsw.CorruptError, apsw.NotADBError) as e:
            # Pages that do not read back: the file's fault, an integrity finding (exit 1).
            click.echo(f"error: the ledger file is a corrupt SQLite file: {e}", err=True)
            ctx.exit(EXIT_INTEGRITY)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-l",
    "--ledger",
    type=LedgerTarget(),
    metavar="PATH",
    envvar=LEDGER_ENVVAR,
    help=f"{_LEDGER_HELP[:-1]}; also accepted after the subcommand.",
)
@click.option(
    "--key",
    "key_path",
    type=click.Path(path_type=Path),
    envvar=KEY_ENVVAR,
    help="The signing key file (env MEMROOT_KEY); needed for a PostgreSQL ledger, whose "
    "key is not kept beside a file (default for a ledger file: LEDGER.key).",
)
@click.version_option(
    package_name="memroot", message=f"%(prog)s %(version)s, backend: {_backend.describe()}"
)
@click.pass_context
def cli(ctx: click.Context, ledger: Path | str | None, key_path: Path | None) -> None:
    """memroot: a hash-chained, Merkle-committed audit ledger for AI-agent memory.

    Example: memroot -l agent.ledger init && memroot -l agent.ledger verify
    """
    ctx.obj = Context(ledger, key_path)
    store_module.lock_wait_notice = _lock_wait_notice


def _lock_wait_notice(path: Path) -> None:
    click.echo(f"waiting for the write lock on {path}: another process is writing to it", err=True)


def main() -> None:
    """Console entry point: latch Ctrl-C (``ledger.interrupts``), then run the command."""
    interrupts.install()
    cli(prog_name="memroot")


def load_all_commands() -> None:
    """Import every subcommand's module (``cli.commands`` then holds them all)."""
    for module in sorted(set(COMMAND_MODULES.values())):
        importlib.import_module(f"memroot.cli.{module}")
