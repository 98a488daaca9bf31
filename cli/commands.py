"""Ledger commands: init, append, import, log, show, checkpoint, vkey, prove, verify."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import itertools
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final

import click

from memroot.cli.main import Context, branch_option, cli, emit, pass_ctx, progress_bar
from memroot.ledger import merkle
from memroot.ledger.backends.pg import is_url, open_store, redact
from memroot.ledger.bundle.audit import WitnessPolicy
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
    IntegrityError,
    NotFoundError,
    RefusedError,
    StorageError,
    ValidationError,
)
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.ledger import Appended, Ledger
from memroot.ledger.note import Verifier, open_checkpoint, parse_tlog_proof
from memroot.ledger.strict import relaxed
from memroot.ledger.trust import TrustedState, default_trusted_path
from memroot.ledger.verify import STEPS, AuditReport, Finding, audit, bound_cache

__all__ = ["jsonable", "open_ledger", "open_reader", "strict_option", "witness_options"]

IMPORT_BATCH = 1000
_PARSE_CHUNK: Final = 1000
"""Lines ``import`` parses per call of the native line parser."""
MAX_JSON_LINE = 32 * 1024 * 1024
MAX_LOG_LIMIT = 100_000


def open_ledger(ctx: Context) -> Ledger:
    """Open the ledger named by -l/--ledger (with the memory model's hooks when present)."""
    from memroot.cli import hooks

    target = ctx.path()
    # A writer checks the head against the trusted state too, when there is one: appending
    # onto a restored older copy or a forked history would extend it (refused, exit 1).
    trusted_path = default_trusted_path()
    trusted = TrustedState(trusted_path) if trusted_path.exists() else None
    # On a PostgreSQL ledger the hooks keep their state in this host's cache file
    # ($MEMROOT_CACHE, else beside the key; docs/postgresql.md).
    return Ledger.open(target, key_path=ctx.key_path, hooks=hooks.default_hooks(), trusted=trusted)


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
    from memroot.cli import hooks

    target = ctx.path()
    with Ledger.init(
        target,
        origin=origin,
        snapshot_every=snapshot_every,
        key_path=key_path or ctx.key_path,
        hooks=hooks.default_hooks(),
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

    def add(self, rows: list[Appended], lines: int) -> None:
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
    """Show one entry in full: header, body, hash, exact CBOR bytes and content.

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
    emit(data, as_json, lambda: click.echo(json.dumps(data, indent=2, sort_keys=True)))


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
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def vkey(ctx: Context, as_json: bool) -> None:
    """Print the verifier key (note vkey format) to hand to auditors.

    Example: memroot -l agent.ledger vkey > agent.vkey
    """
    with open_ledger(ctx) as ledger:
        key = ledger.vkey()
    emit({"vkey": key}, as_json, key)


@cli.command()
@click.option("--index", type=click.IntRange(0, MAX_SEQ), help="Prove inclusion of this entry.")
@click.option(
    "--size",
    type=click.IntRange(0, MAX_SEQ + 1),
    help="Tree size of a signed checkpoint (default: the current tree).",
)
@click.option(
    "--consistency",
    nargs=2,
    type=click.IntRange(0, MAX_SEQ + 1),
    help="Prove that tree SIZE1 is a prefix of tree SIZE2.",
)
@branch_option
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def prove(
    ctx: Context,
    index: int | None,
    size: int | None,
    consistency: tuple[int, int] | None,
    branch: str,
    no_strict: bool,
    as_json: bool,
) -> None:
    """Print an inclusion proof (C2SP tlog-proof@v1) or a consistency proof.

    A tlog-proof carries the signed checkpoint it proves against, so --size must be the size
    of a kept checkpoint (the error lists them; `memroot checkpoint` keeps one of the current
    tree). The branch's stored tree is first checked against its newest signed checkpoint
    (strict read, one read transaction); a tampered ledger prints nothing and exits 1.

    Example: memroot -l agent.ledger prove --index 5 > entry5.proof
    Example: memroot -l agent.ledger prove --consistency 10 20 --json
    """
    if (index is None) == (not consistency):
        raise click.UsageError("give exactly one of --index I or --consistency N1 N2")
    with open_reader(ctx, no_strict) as ledger, ledger.reading():
        if ledger.strict:
            ledger.check_heads()
        if index is not None and size is not None:
            _check_kept_size(ledger, size, branch)
        if consistency:
            n1, n2 = consistency
            proof = ledger.consistency_proof(n1, n2, branch)
            if ledger.strict:
                for n in (n1, n2):
                    _check_prefix_root(ledger, n, branch)
            data = {
                "size1": n1,
                "size2": n2,
                "root1": base64.b64encode(ledger.root(n1, branch)).decode(),
                "root2": base64.b64encode(ledger.root(n2, branch)).decode(),
                "proof": [base64.b64encode(h).decode() for h in proof],
            }
            emit(data, as_json, lambda: click.echo(json.dumps(data, indent=2)))
            return
        assert index is not None
        text = ledger.tlog_proof(index, size, branch)
        if ledger.strict:
            _check_tlog_proof(ledger, text, branch)
    emit({"index": index, "tlog_proof": text}, as_json, lambda: click.echo(text, nl=False))


MAX_LISTED_SIZES = 20


def _proof_refused(branch: str, seq: int | None, what: str) -> IntegrityError:
    return IntegrityError(
        f"strict read refused: branch {branch}"
        + (f" entry {seq}" if seq is not None else "")
        + f": step 5: {what} (run `memroot verify` for the full report; --no-strict prints it "
        "anyway)",
        branch=branch,
        seq=seq,
        step=5,
    )


def _check_prefix_root(ledger: Ledger, size: int, branch: str) -> bytes:
    """Return the stored tree's root at ``size``, proven a prefix of the signed head.

    Raises:
        IntegrityError: step 5, if the stored nodes do not give a prefix of the signed tree.
    """
    head = ledger.head_checkpoint(branch)
    if head is None:  # pragma: no cover - a strict ledger's branches all have a head
        raise _proof_refused(branch, None, "no signed checkpoint covers this branch")
    signed = head.checkpoint
    root = bytes(ledger.root(size, branch))
    try:
        if size == signed.size:
            ok = root == signed.root
        else:
            link = ledger.consistency_proof(size, signed.size, branch) if size else []
            if size:
                merkle.verify_consistency(size, signed.size, link, root, signed.root)
            ok = True
    except IntegrityError:
        ok = False
    if not ok:
        raise _proof_refused(
            branch, None, f"the stored tree at size {size} is not a prefix of the signed one"
        )
    return root


def _check_tlog_proof(ledger: Ledger, text: str, branch: str) -> None:
    """Check a tlog-proof before it is printed: the entry read strictly, its path verified.

    The entry's leaf (its bytes proven by the strict read) must reach, along the printed
    path, the root of the printed checkpoint, itself a prefix of the signed head.

    Raises:
        IntegrityError: step 5, naming the entry.
    """
    tp = parse_tlog_proof(text)
    cp = open_checkpoint(
        tp.checkpoint_note, [Verifier.from_vkey(k) for k in ledger.genesis_vkeys()]
    )
    size = cp.checkpoint.size
    root = _check_prefix_root(ledger, size, branch)
    leaf = leaf_hash(ledger.entry(tp.index, branch).raw)
    try:
        merkle.verify_inclusion(leaf, tp.index, size, list(tp.proof), root)
        ok = bytes(cp.checkpoint.root) == root
    except IntegrityError:
        ok = False
    if not ok:
        raise _proof_refused(branch, tp.index, "the stored tree cannot prove this entry")


def _check_kept_size(ledger: Ledger, size: int, branch: str) -> None:
    """Refuse ``prove --size`` for a size no kept checkpoint has, naming the kept sizes.

    Raises:
        NotFoundError: naming the kept sizes (the newest ones when there are many).
    """
    kept = [s for s, _, _ in ledger.store.checkpoints(ledger.store.branch(branch).no)]
    if size in kept:
        return
    shown = ", ".join(str(s) for s in kept[-MAX_LISTED_SIZES:])
    more = (
        f" (the newest {MAX_LISTED_SIZES} of {len(kept)})" if len(kept) > MAX_LISTED_SIZES else ""
    )
    raise NotFoundError(
        f"no checkpoint of size {size} is kept on branch {branch!r}; kept sizes{more}: "
        f"{shown or 'none'}. A tlog-proof needs a signed checkpoint of its size: prove "
        "against the newest one (omit --size), and `memroot prove --consistency "
        f"{size} N` links size {size} to it"
    )


def print_report(report: AuditReport, as_json: bool) -> None:
    """Print an audit report for a person or as JSON."""

    def human() -> None:
        click.echo(
            f"checked {report.entries} entries on {report.branches} branch(es), "
            f"{report.checkpoints} checkpoint(s); keys: {report.trusted.get('keys')}"
        )
        for step, what in STEPS.items():
            bad = sum(1 for f in report.findings if f.step == step)
            state = (
                (f"FAIL ({bad})" if bad else "ok")
                if step in report.steps_checked
                else ("not checked (nothing of this kind in the ledger's layers yet)")
            )
            click.echo(f"  step {step:>2} {what}: {state}")
        for note in report.notes:
            click.echo(f"note: {note}")
        for f in report.findings:
            click.echo(f"VIOLATION {f}", err=True)
        if report.truncated_findings:
            click.echo(f"(more findings than the {len(report.findings)} shown)", err=True)
        click.echo(
            "OK: every step holds" if report.ok else f"FAILED: {len(report.findings)} violation(s)"
        )

    emit(report.to_json(), as_json, human)


@cli.command("verify")
@click.option(
    "--trusted",
    "trusted_path",
    type=click.Path(path_type=Path),
    help="Trusted-state file (default $MEMROOT_TRUSTED or ~/.local/state/memroot/trusted.json).",
)
@click.option("--vkey", "vkeys", multiple=True, help="Trust this verifier key (repeatable).")
@click.option("--no-update", is_flag=True, help="Do not record the newest checkpoint as trusted.")
@click.option(
    "--origin",
    help="The log origin you expect (default: the one the ledger records); checkpoints of "
    "another origin then fail step 6.",
)
@click.option(
    "--branch",
    "-b",
    help="Verify only this branch and its ancestors (default: every branch).",
)
@click.option(
    "--anchor",
    help="Also prove the conversation path (every ancestor event) of this event.",
)
@witness_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def verify_cmd(
    ctx: Context,
    trusted_path: Path | None,
    vkeys: tuple[str, ...],
    no_update: bool,
    origin: str | None,
    branch: str | None,
    anchor: str | None,
    witness_vkeys: tuple[str, ...],
    quorum: int | None,
    witnesses: tuple[str, ...],
    as_json: bool,
) -> None:
    """Run every auditor step on the ledger; exit 1 on any violation.

    With --anchor E it also proves the conversation the agent read at event E: every event
    on E's ancestor path, found through the entries themselves, with an inclusion proof in
    its branch's newest signed checkpoint.

    Example: memroot -l agent.ledger verify --trusted ~/.memroot-trusted.json
    """
    trusted = TrustedState(trusted_path or default_trusted_path())
    policy = WitnessPolicy.from_options(witness_vkeys, quorum, witnesses)
    # One state of the file for the whole run: every step and every layer's check reads
    # through one connection inside one read transaction, so appends committed meanwhile
    # never show up as findings. Read-only: verifying never writes to the audited file.
    with relaxed(), _audited(ctx.path(), ctx.key_path) as ledger, ledger.store.read():
        report = _verify_ledger(ledger, trusted, vkeys, no_update, origin, branch, policy)
        path_ok = True
        if anchor is not None:
            path_ok = _verify_anchor(ledger, anchor, vkeys, report)
    print_report(report, as_json)
    if not report.ok or not path_ok:
        raise click.exceptions.Exit(1)


@contextlib.contextmanager
def _audited(path: Path | str, key_path: Path | None = None) -> Iterator[Ledger]:
    """Open the ledger at ``path`` read-only for ``verify`` (a PostgreSQL one as a copy).

    A SQLite file is read in place: the caller holds one read transaction of the returned
    ledger's connection for the whole audit (no copy of the file is made). A PostgreSQL
    ledger is first copied into a private SQLite file with this host's derived-state cache
    (``snapshot_of``; ``key_path`` locates the key and, by default, the cache).

    Raises:
        StorageError: if the ledger cannot be opened or copied; IntegrityError if corrupt.
    """
    if not is_url(path):
        with Ledger.open(Path(path), readonly=True, strict=False) as ledger:
            bound_cache(ledger.store)
            yield ledger
        return
    with (
        snapshot_of(path, key_path) as copy,
        Ledger.open(copy, readonly=True, strict=False) as ledger,
    ):
        yield ledger


@contextlib.contextmanager
def snapshot_of(path: Path | str, key_path: Path | None = None) -> Iterator[Path]:
    """Yield a private copy of the ledger at ``path`` as one read transaction saw it.

    A PostgreSQL ledger is copied, as one REPEATABLE READ transaction sees it, into a
    SQLite file (``Ledger.copy_snapshot``): the same rows, verified like any ledger file,
    with this host's derived-state cache (``key_path`` locates it by default) caught up to
    that snapshot, so steps 8-9 check it.

    Raises:
        StorageError: if the ledger cannot be opened or copied; IntegrityError if corrupt.
    """
    from memroot.cli import hooks

    with tempfile.TemporaryDirectory(prefix="memroot-verify-") as tmp:
        copy = Path(tmp) / "ledger.db"
        if isinstance(path, str):
            with Ledger.open(
                path, key_path=key_path, readonly=True, strict=False, hooks=hooks.default_hooks()
            ) as ledger:
                ledger.copy_snapshot(copy)
        else:
            store = open_store(path, readonly=True)
            try:
                store.copy_snapshot(copy)
            finally:
                store.close()
        yield copy


def _verify_ledger(
    ledger: Ledger,
    trusted: TrustedState,
    vkeys: tuple[str, ...],
    no_update: bool,
    origin: str | None,
    branch: str | None,
    policy: WitnessPolicy | None,
) -> AuditReport:
    """Audit ``ledger`` with every layer's check, inside the caller's read transaction."""
    from memroot.cli import hooks

    wnotes: list[str] = []
    trusted_state: TrustedState | None = trusted
    if branch is not None:
        ledger.store.branch(branch)  # NotFoundError names a branch that does not exist
    total = sum(b.size for b in ledger.store.branches())
    checks = hooks.replay_checks(ledger, restricted=branch is not None, share=True)
    if policy is not None:
        trusted_state = policy.trusted(
            trusted, ledger.store, origin or ledger.origin, vkeys, wnotes
        )
    # An auditor who knows which log to expect says so (``--origin``): a ledger rewritten
    # under another origin then fails its checkpoints (step 6).
    audited_origin = origin or str(ledger.store.meta("origin"))
    for update in progress_bar(total, "verifying"):
        report = audit(
            ledger.store,
            origin=audited_origin,
            trusted=trusted_state,
            vkeys=vkeys,
            checks=checks,
            progress=update,
            update_trusted=not no_update,
            branch=branch,
        )
    if policy is not None:
        policy.check(report, ledger.store, origin or ledger.origin, wnotes)
    return report


def _verify_anchor(
    ledger: Ledger, anchor: str, vkeys: tuple[str, ...], report: AuditReport
) -> bool:
    """Prove the anchor's conversation path; add its findings to ``report``; True when sound.

    A missing ancestor (not arrived yet) or one newer than the last checkpoint is a note; a
    proof or signature that fails, or an anchor that is not in the ledger, is a violation.
    """
    from memroot.projections.anchors import prove_path

    check_uuid(anchor, "--anchor")
    steps = prove_path(ledger, anchor, vkeys)
    report.trusted["anchor_path"] = [s.to_json() for s in steps]
    sound = True
    for i, s in enumerate(steps):
        if s.problem is None:
            continue
        benign = (i > 0 and s.problem == "not in the ledger") or s.problem.startswith(
            "not covered yet"
        )
        report.add(
            Finding(
                5,
                f"conversation path of {anchor}: event {s.event_id}: {s.problem}",
                s.branch,
                s.seq,
                severity="note" if benign else "error",
            )
        )
        sound = sound and benign
    proven = sum(1 for s in steps if s.proven_in is not None)
    report.add(
        Finding(
            5,
            f"conversation path of {anchor}: {len(steps)} event(s), {proven} "
            "proven in signed checkpoints",
            severity="note",
        )
    )
    return sound
