"""Ledger commands: init, append, import, log, show, checkpoint, vkey."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import itertools
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Final

import click

from memroot.cli.main import Context, branch_option, cli, emit, pass_ctx, progress_bar
from memroot.ledger.backends.pg import redact
from memroot.ledger.entries import (
    MAX_SEQ,
    MAX_SNAPSHOT_EVERY,
    Entry,
    EventInput,
    OpInput,
    check_uuid,
    new_uuid,
    parse_event_lines,
    parse_input,
    parse_json,
)
from memroot.ledger.errors import (
    DecodeError,
    NotFoundError,
    RefusedError,
    StorageError,
    ValidationError,
)
from memroot.ledger.ledger import Appended, Ledger
from memroot.ledger.trust import TrustedState, default_trusted_path

__all__ = ["jsonable", "open_ledger", "open_reader", "strict_option", "witness_options"]

IMPORT_BATCH = 1000
_PARSE_CHUNK: Final = 1000
"""Lines ``import`` parses per call of the native line parser."""
MAX_JSON_LINE = 32 * 1024 * 1024
MAX_LOG_LIMIT = 100_000


def open_ledger(ctx: Context) -> Ledger:
    """Open the ledger named by -l/--ledger (with the memory model's hooks when present)."""
    from memroot.memory_root import stack

    target = ctx.path()
    # A writer checks the head against the trusted state too, when there is one: appending
    # onto a restored older copy or a forked history would extend it (refused, exit 1).
    trusted_path = default_trusted_path()
    trusted = TrustedState(trusted_path) if trusted_path.exists() else None
    # On a PostgreSQL ledger the hooks keep their state in this host's cache file
    # ($MEMROOT_CACHE, else beside the key; docs/postgresql.md).
    return Ledger.open(target, key_path=ctx.key_path, hooks=stack.default_hooks(), trusted=trusted)


strict_option = click.option(
    "--no-strict",
    "no_strict",
    is_flag=True,
    help="Forensics: print entries and content without checking them against the signed "
    "checkpoints first (a warning says so on stderr).",
)
"""``--no-strict`` on every command that prints ledger data (strict reads are the default)."""


def open_reader(ctx: Context, no_strict: bool) -> Ledger:
    """Open the ledger for a read command: strict unless ``--no-strict``, never writing.

    Strict reads check the stored head against the newest signed checkpoint and against the
    trusted state (``$MEMROOT_TRUSTED``, when that file exists; it is never updated here),
    then every entry and content before it is printed. The file is opened read-only when
    the command cannot need to write (so it works on read-only media too); a ledger whose
    derived memory state must catch up is opened read-write for that alone.

    Raises:
        IntegrityError: the head does not agree with its signed checkpoint (exit 1).
        StorageError: not a ledger (an empty or foreign file is left untouched).
    """
    if no_strict:
        click.echo(
            "warning: --no-strict: entries and content are NOT checked against the signed "
            "checkpoints (forensics only)",
            err=True,
        )
    path = ctx.path()
    trusted_path = default_trusted_path()
    trusted = TrustedState(trusted_path) if not no_strict and trusted_path.exists() else None
    if isinstance(path, str):  # PostgreSQL: the server decides who may write
        return Ledger.open(path, key_path=ctx.key_path, strict=not no_strict, trusted=trusted)
    writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    return Ledger.open(
        path, key_path=ctx.key_path, readonly=not writable, strict=not no_strict, trusted=trusted
    )


def _sign_pending(ledger: Ledger, branch: str) -> None:
    """Sign the checkpoint owed by an automatic snapshot, now that the append committed.

    SPEC 5 signs only what is durable, so it cannot happen inside the append transaction.
    """
    from memroot.memory_root import Roots

    Roots(ledger).sign_pending(branch)


def witness_options(f: Any) -> Any:
    """Add ``--witness-vkey``, ``--quorum`` and ``--witness`` (shared by verify and audit)."""
    f = click.option(
        "--witness",
        "witnesses",
        multiple=True,
        metavar="URL",
        help="Ask this witness for its newest cosigned checkpoint (repeatable): an older "
        "copy is caught with no local state (step 10). Needs --witness-vkey.",
    )(f)
    f = click.option(
        "--quorum",
        type=click.IntRange(min=1),
        help="Cosignatures required on the newest checkpoint (default 1).",
    )(f)
    return click.option(
        "--witness-vkey",
        "witness_vkeys",
        multiple=True,
        help="Require cosignatures by this witness key (repeatable; step 6).",
    )(f)


def jsonable(value: Any) -> Any:
    """Return ``value`` with bytes as hex, recursively, for JSON output."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def _ts_text(ts: int) -> str:
    try:
        return dt.datetime.fromtimestamp(ts / 1e6, dt.UTC).isoformat(timespec="microseconds")
    except (OverflowError, ValueError, OSError):
        # An entry written before ts had bounds (docs/FORMAT.md "Time") still lists.
        return f"{ts} us (outside the calendar)"


def _appended_json(a: Appended) -> dict[str, Any]:
    return {
        "branch": a.branch,
        "seq": a.seq,
        "entry_hash": a.entry_hash.hex(),
        "id": a.id,
        "kind": a.kind.value,
        "type": a.type,
    }


def _print_appended(rows: list[Appended], as_json: bool) -> None:
    lines = "\n".join(f"{a.seq}\t{a.entry_hash.hex()}\t{a.type}\t{a.id}" for a in rows)
    emit([_appended_json(a) for a in rows], as_json, lines)


anchor_option = click.option(
    "--anchor",
    help="Conversation anchor: events without parent_event_id get this event as parent.",
)


def _at_anchor(item: EventInput | OpInput, anchor: str | None) -> EventInput | OpInput:
    """Give an event that names no parent the anchor as its parent (seed 001 trees)."""
    if anchor is None or not isinstance(item, EventInput) or item.parent_event_id is not None:
        return item
    return dataclasses.replace(item, parent_event_id=check_uuid(anchor, "--anchor"))


def _parse_json_line(text: str, where: str) -> EventInput | OpInput:
    try:
        obj = parse_json(text)
    except DecodeError as e:
        raise DecodeError(f"{where}: {e}") from e
    try:
        return parse_input(obj)
    except ValidationError as e:
        raise ValidationError(f"{where}: {e}", field=e.field) from e


@cli.command()
@click.option(
    "--origin", help="The log's origin (checkpoint first line); default memroot.local/<id>."
)
@click.option(
    "--snapshot-every",
    type=click.IntRange(1, MAX_SNAPSHOT_EVERY),
    default=1000,
    show_default=True,
    help="Take a memory_root snapshot every N entries (recorded in genesis).",
)
@click.option(
    "--key",
    "key_path",
    type=click.Path(path_type=Path),
    help="Where to write the signing key (default: LEDGER.key, mode 0600).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def init(
    ctx: Context, origin: str | None, snapshot_every: int, key_path: Path | None, as_json: bool
) -> None:
    """Create a ledger, its Ed25519 signing key and a first signed checkpoint.

    Prints the verifier key (vkey) to give to auditors. The private key is never printed.

    Example: memroot -l agent.ledger init --origin example.org/agent-7
    """
    from memroot.memory_root import stack

    target = ctx.path()
    with Ledger.init(
        target,
        origin=origin,
        snapshot_every=snapshot_every,
        key_path=key_path or ctx.key_path,
        hooks=stack.default_hooks(),
    ) as ledger:
        data = {
            "ledger": redact(target) if isinstance(target, str) else str(ledger.path),
            "ledger_id": ledger.ledger_id,
            "origin": ledger.origin,
            "vkey": ledger.vkey(),
            "key_file": str(ledger.key_path),
        }
    emit(
        data,
        as_json,
        f"created {data['ledger']} (origin {data['origin']})\n"
        f"signing key: {data['key_file']} (mode 0600; keep it secret)\n"
        f"vkey: {data['vkey']}",
    )


@cli.command()
@click.argument("entry", required=False)
@branch_option
@anchor_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def append(ctx: Context, entry: str | None, branch: str, anchor: str | None, as_json: bool) -> None:
    """Append one event or operation given as JSON (argument, or stdin when omitted).

    With --anchor, an event that names no parent continues the conversation at that event.

    Example: memroot -l L append '{"kind": "event", "stream": "s1", "actor_id": "u1",
    "actor_type": "HUMAN_USER", "role": "USER", "content": "hi", "namespace_id": "ns"}'
    """
    text = entry if entry is not None else sys.stdin.read()
    item = _at_anchor(_parse_json_line(text, "entry"), anchor)
    with open_ledger(ctx) as ledger:
        rows = ledger.append(item, branch=branch)
        _sign_pending(ledger, branch)
    _print_appended([rows], as_json)


def _read_lines(f: BinaryIO, read: list[int] | None = None) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` of each non-blank line; ``read[0]`` counts bytes read."""
    # Bytes decoded line by line: a text-mode file raises UnicodeDecodeError (a traceback,
    # and for a whole buffered chunk, so with no usable line number) on bytes that are not
    # UTF-8.
    for number, raw in enumerate(f, 1):
        if read is not None:
            read[0] += len(raw)
        if len(raw) > MAX_JSON_LINE:
            raise DecodeError(f"line {number}: longer than {MAX_JSON_LINE} bytes")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"line {number}: not UTF-8 text ({e.reason})") from e
        if line.strip():
            yield number, line


@contextlib.contextmanager
def _rereadable(file: BinaryIO) -> Iterator[BinaryIO]:
    """Yield ``file``, or a temporary copy on disk when it cannot be read twice (a pipe).

    The import streams the file (its lines are never all in memory); naming the line a
    refusal came from reads it a second time.
    """
    try:
        seekable = file.seekable()
    except (OSError, ValueError):
        seekable = False
    if seekable:
        yield file
        return
    with tempfile.TemporaryFile() as spool:
        try:
            shutil.copyfileobj(file, spool, 1 << 20)
        except OSError as e:
            raise StorageError(f"cannot copy the import to a temporary file: {e}") from e
        spool.seek(0)
        yield spool


def _size_of(file: BinaryIO) -> int:
    try:
        return max(0, os.fstat(file.fileno()).st_size - file.tell())
    except (OSError, ValueError, AttributeError):
        return 0


@cli.command("import")
@click.argument("file", type=click.File("rb"))
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100_000),
    default=IMPORT_BATCH,
    show_default=True,
    help="Entries per batch.",
)
@branch_option
@anchor_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def import_(
    ctx: Context,
    file: BinaryIO,
    batch_size: int,
    branch: str,
    anchor: str | None,
    as_json: bool,
) -> None:
    """Append every line of a JSON Lines file, all or nothing.

    The whole file lands in one transaction: a bad line (named by its number) leaves the
    ledger exactly as it was. Use - to read stdin. With --anchor, the file's events that name
    no parent continue the conversation from that event, each the child of the one before.
    The file is read a batch at a time (memory stays flat however long it is); input from a
    pipe is first copied to a temporary file.

    Example: memroot -l agent.ledger import events.jsonl --json
    """
    with _rereadable(file) as source:
        origin = source.tell()
        done = _Imported(keep=as_json)
        with open_ledger(ctx) as ledger:
            try:
                _import_lines(ledger, source, batch_size, branch, anchor, done)
            except RefusedError as e:
                if str(e).startswith("line "):
                    raise  # a malformed line, already named
                source.seek(origin)
                found = _refused_line(ledger, source, branch, anchor)
                if found is None:
                    raise
                # The line's own refusal: a batch breaking two rules may report either.
                n, why = found
                if isinstance(why, ValidationError):
                    raise ValidationError(f"line {n}: {why}", field=why.field) from e
                raise RefusedError(f"line {n}: {why}") from e
            _sign_pending(ledger, branch)  # after the commit: only durable entries are signed
    if as_json:
        _print_appended(done.rows, True)
    else:
        click.echo(
            f"imported {done.lines} entries"
            + (f" ({done.first.seq}..{done.last.seq})" if done.first and done.last else "")
        )
        if done.last is not None:
            click.echo(f"last: {done.last.seq}\t{done.last.entry_hash.hex()}")


@dataclasses.dataclass
class _Imported:
    """What an import appended: every row only when they are all printed (``--json``)."""

    keep: bool
    lines: int = 0
    first: Appended | None = None
    last: Appended | None = None
    rows: list[Appended] = dataclasses.field(default_factory=list)

    def add(self, rows: Sequence[Appended], lines: int) -> None:
        self.lines += lines
        if rows:
            self.first = self.first or rows[0]
            self.last = rows[-1]
        if self.keep:
            self.rows.extend(rows)


def _import_items(
    lines: Iterator[tuple[int, str]], anchor: str | None
) -> Iterator[tuple[int, EventInput | OpInput]]:
    """Yield each line's request (events chained from ``anchor`` when given).

    Lines are parsed ``_PARSE_CHUNK`` at a time: the common event line in one native call
    (``parse_event_lines``), every other line by ``_parse_json_line``, in line order, so the
    first bad line is the one named, with the reference's message.
    """
    while True:
        chunk: list[tuple[int, str]] = []
        unreadable: DecodeError | None = None
        try:
            for pair in lines:
                chunk.append(pair)
                if len(chunk) == _PARSE_CHUNK:
                    break
        except DecodeError as e:  # a line that is not text: after the lines before it
            unreadable = e
        fast = parse_event_lines([text for _, text in chunk])
        for (n, text), parsed in zip(chunk, fast, strict=True):
            item = parsed if parsed is not None else _parse_json_line(text, f"line {n}")
            item = _at_anchor(item, anchor)
            if anchor is not None and isinstance(item, EventInput):
                if item.id is None:
                    item = dataclasses.replace(item, id=new_uuid())
                anchor = item.id
            yield n, item
        if unreadable is not None:
            raise unreadable
        if len(chunk) < _PARSE_CHUNK:
            return


class _Undo(Exception):
    """Raised to roll back the rehearsal of ``_refused_line``."""


def _refused_line(
    ledger: Ledger, source: BinaryIO, branch: str, anchor: str | None
) -> tuple[int, RefusedError] | None:
    """Return the number of the first line the ledger refuses and its error, one by one.

    Runs after a refused import, in a transaction that is always rolled back, so the error
    can name the line; returns None if no single line is refused (nothing is kept).
    """
    found: tuple[int, RefusedError] | None = None
    try:
        with ledger.write():
            for n, item in _import_items(_read_lines(source), anchor):
                try:
                    ledger.append(item, branch=branch)
                except RefusedError as e:
                    found = (n, e)
                    break
            raise _Undo
    except _Undo:
        pass
    return found


def _import_lines(
    ledger: Ledger,
    source: BinaryIO,
    batch_size: int,
    branch: str,
    anchor: str | None,
    done: _Imported,
) -> None:
    """Append every line in one transaction (all or nothing), a batch at a time."""
    total = _size_of(source)
    read = [0]
    items = _import_items(_read_lines(source, read), anchor)
    with ledger.bulk():
        for update in progress_bar(total, "importing"):
            while chunk := [item for _, item in itertools.islice(items, batch_size)]:
                done.add(ledger.append_batch(chunk, branch=branch), len(chunk))
                update(min(read[0], total), total)


def _entry_summary(e: Entry) -> dict[str, Any]:
    body = e.body
    return {
        "seq": e.seq,
        "entry_hash": e.hash.hex(),
        "ts": e.ts,
        "time": _ts_text(e.ts),
        "kind": e.kind.value,
        "type": e.type,
        "id": body.get("id"),
        "actor_id": body.get("actor_id"),
        "branch": e.branch,
    }


@cli.command()
@click.option("--start", type=click.IntRange(0, MAX_SEQ), default=0, help="First seq.")
@click.option("--limit", type=click.IntRange(1, MAX_LOG_LIMIT), default=50, show_default=True)
@click.option(
    "--tail",
    type=click.IntRange(1, MAX_LOG_LIMIT),
    help="The last N entries (instead of --start/--limit).",
)
@click.option(
    "--type",
    "types",
    multiple=True,
    help="Only entries of this type (EVENT, ASSERT, ...; repeatable).",
)
@branch_option
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def log(
    ctx: Context,
    start: int,
    limit: int,
    tail: int | None,
    types: tuple[str, ...],
    branch: str,
    no_strict: bool,
    as_json: bool,
) -> None:
    """List entries: seq, entry hash, time, type, id.

    --type keeps entries of the given types (up to --limit of them from --start, or the
    last --tail of them). Every entry read is first proven in the newest signed checkpoint
    (strict read); a tampered ledger prints nothing and exits 1.

    Example: memroot -l agent.ledger log --tail 20 --type ASSERT --type FALSIFY
    """
    wanted = {t.upper() for t in types}
    with open_reader(ctx, no_strict) as ledger, ledger.reading():
        # Each entry read is checked in full, its content too, before anything is printed.
        size = ledger.size(branch)
        if tail is not None and not wanted:
            found = [r.entry for r in ledger.read_range(max(0, size - tail), size, branch)]
        elif tail is not None:
            kept = [r.entry for r in ledger.read_range(0, size, branch) if r.entry.type in wanted]
            found = kept[-tail:]
        elif wanted:
            found = []
            for r in ledger.read_range(start, size, branch):
                if r.entry.type in wanted:
                    found.append(r.entry)
                    if len(found) >= limit:
                        break
        else:
            found = [r.entry for r in ledger.read_range(start, start + limit, branch)]
        rows = [_entry_summary(e) for e in found]
    emit(
        rows,
        as_json,
        "\n".join(
            f"{r['seq']}\t{r['entry_hash'][:16]}\t{r['time']}\t{r['type']}\t{r['id'] or ''}"
            for r in rows
        ),
    )


def _find_entry(ledger: Ledger, ref: str, branch: str) -> tuple[str, int]:
    """Return ``(branch, seq)`` of ``ref``: a seq on ``branch``, or an event's or op's id.

    Raises:
        ValidationError: neither a seq nor a UUID; NotFoundError: no entry has that id.
    """
    if ref.isdigit():
        seq = int(ref)
        if seq > MAX_SEQ:  # a usage error (exit 2), like every out-of-range integer option
            raise click.BadParameter(f"seq must be at most {MAX_SEQ}, got {seq}", param_hint="SEQ")
        return branch, seq
    entry_id = check_uuid(ref.lower(), "entry")
    found = ledger.find_event(entry_id)
    if found is not None:
        return found
    # Operations have no id index: look for it, the given branch first.
    names = [branch] + [b.name for b in ledger.store.branches() if b.name != branch]
    for name in names:
        for e in ledger.entries(0, None, name):
            if e.body.get("id") == entry_id:
                return name, e.seq
    raise NotFoundError(f"no entry with id {entry_id} on any branch")


@cli.command()
@click.argument("entry", metavar="SEQ|ID")
@branch_option
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def show(ctx: Context, entry: str, branch: str, no_strict: bool, as_json: bool) -> None:
    """Show one entry in full: header, body, hash and content (--json: the exact CBOR too).

    Printed for people: a header, then the body's fields one a line; --json for machines.
    The entry is a seq on --branch, or the id of an event or operation (any branch). It is
    proven in the newest signed checkpoint and its content checked against its commitment
    first (strict read); a tampered entry prints nothing and exits 1.

    Example: memroot -l agent.ledger show 3 --json
    """
    with open_reader(ctx, no_strict) as ledger, ledger.reading():
        branch, seq = _find_entry(ledger, entry, branch)
        row = ledger.read(seq, branch)
        e = row.entry
        data: dict[str, Any] = {
            **_entry_summary(e),
            "v": e.v,
            "prev": e.prev.hex(),
            "body": jsonable(e.body),
            "entry_cbor": base64.b64encode(e.raw).decode(),
        }
        if e.kind.value == "event":
            data["content"] = row.content
            data["erased_by"] = row.erased_by
    emit(data, as_json, lambda: click.echo("\n".join(_entry_lines(data, len(e.raw)))))


def _entry_lines(data: dict[str, Any], size: int) -> list[str]:
    """Return ``memroot show``'s page for people: header, then the body as indented fields."""
    out = [
        f"entry {data['seq']} on {data['branch']}: {data['kind']} {data['type']}, {data['time']}",
        f"  id          {data['id'] or '-'}",
        f"  actor       {data['actor_id'] or '-'}",
        f"  entry hash  {data['entry_hash']}",
        f"  prev        {data['prev']}",
        f"  format      v{data['v']}, {size} bytes of CBOR (--json shows them in base64)",
        "body:",
        *_field_lines(data["body"], "  "),
    ]
    if data["kind"] == "event":
        if data["erased_by"] is not None:
            out.append(f"content: erased by entry {data['erased_by']} (its commitment stays)")
        else:
            out.append("content:")
            out += [f"  {line}" for line in str(data["content"]).split("\n")]
    return out


def _field_lines(value: Any, indent: str) -> list[str]:
    """Return nested maps as ``key: value`` lines, indented per level; lists one item a line."""
    out: list[str] = []
    for k, v in sorted(value.items()):
        if isinstance(v, dict) and v:
            out += [f"{indent}{k}:", *_field_lines(v, indent + "  ")]
        elif isinstance(v, list) and v:
            out.append(f"{indent}{k}:")
            for item in v:
                if isinstance(item, dict):
                    out += [f"{indent}  -", *_field_lines(item, indent + "    ")]
                else:
                    out.append(f"{indent}  - {item}")
        else:
            shown = "-" if v is None else "[]" if v == [] else "{}" if v == {} else v
            out.append(f"{indent}{k}: {shown}")
    return out


@cli.command()
@branch_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def checkpoint(ctx: Context, branch: str, as_json: bool) -> None:
    """Print the branch's head checkpoint as a C2SP signed note, kept for good.

    Every append already signed it; entries no signed checkpoint covers (written without
    the key) are refused, never signed (exit 1).

    Example: memroot -l agent.ledger checkpoint > checkpoint.txt
    """
    with open_ledger(ctx) as ledger:
        sc = ledger.checkpoint(branch)
    emit(
        {
            "origin": sc.checkpoint.origin,
            "size": sc.checkpoint.size,
            "root": sc.checkpoint.root.hex(),
            "note": sc.note,
        },
        as_json,
        lambda: click.echo(sc.note, nl=False),
    )


@cli.command()
@click.option(
    "--all",
    "all_keys",
    is_flag=True,
    help="Also list every root key and writer key with the main sizes it may sign.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def vkey(ctx: Context, all_keys: bool, as_json: bool) -> None:
    """Print the root verifier key (note vkey format) to hand to auditors and witnesses.

    Read from the ledger (its genesis and rotations, checked strictly): no key file is
    needed, so it works read-only and on a ledger restored by import-bundle. The root vkey
    is all an auditor needs; writer keys and their ranges come from the log (--all).

    Example: memroot -l agent.ledger vkey > agent.vkey
    Example: memroot -l agent.ledger vkey --all --json
    """
    from memroot.cli._keys_view import human_rows, key_rows

    with open_reader(ctx, no_strict=False) as ledger:
        ledger.head_checkpoint()  # the strict head check: the key entries are proven
        key = ledger_vkey(ledger)
        current = ledger.current_vkey()
        rows = key_rows(ledger) if all_keys else None
    data: dict[str, Any] = {"vkey": key, "root_in_force": current}
    if rows is not None:
        data["keys"] = rows
    emit(data, as_json, key if rows is None else f"{key}\n{human_rows(rows)}")


def ledger_vkey(ledger: Ledger) -> str:
    """Return the ledger's root vkey, its genesis key, read from the ledger: never a key file.

    The root of trust an auditor or a witness is handed: every rotation and writer key is
    learned from the log from it (a newer root key alone cannot verify what came before).
    A ledger restored from a bundle, with no key file, answers the same.

    Raises:
        IntegrityError: if the head does not agree with its signed checkpoint.
    """
    return ledger.key_set().roots[0].vkey
