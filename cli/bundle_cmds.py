"""Auditor's bundle commands: export, audit, import-bundle, tiles, and rotate-key."""

from __future__ import annotations

from pathlib import Path

import click

from memroot.cli.commands import (
    open_ledger,
    open_reader,
    strict_option,
    witness_options,
)
from memroot.cli.main import Context, cli, emit, pass_ctx, progress_bar
from memroot.cli.verify_cmds import print_report
from memroot.ledger.backends.pg import redact
from memroot.ledger.bundle.audit import (
    TilesSource,
    WitnessPolicy,
    audit_bundle,
    audit_tiles,
    open_bundle,
)
from memroot.ledger.bundle.export import export_bundle
from memroot.ledger.bundle.importing import import_bundle
from memroot.ledger.errors import DecodeError, IntegrityError, NotFoundError, ProofError
from memroot.ledger.keys import rotate_key
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import Verifier, open_checkpoint
from memroot.ledger.transparency.tiles import write_tiles
from memroot.ledger.trust import TrustedState, default_trusted_path

__all__: list[str] = []

_BUNDLE = 256  # entries per tlog-tiles entry bundle (C2SP tlog-tiles)

_TRUSTED_HELP = (
    "Trusted-state file (default $MEMROOT_TRUSTED or ~/.local/state/memroot/trusted.json)."
)


@cli.command("export")
@click.argument("out", type=click.Path(path_type=Path))
@click.option(
    "--no-sign",
    is_flag=True,
    help="Do not sign a fresh checkpoint first (entries after the newest one stay unsigned).",
)
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def export_cmd(ctx: Context, out: Path, no_sign: bool, no_strict: bool, as_json: bool) -> None:
    """Write an auditor's bundle: entries, content, checkpoints, keys and a manifest.

    OUT is a new directory; it appears only once complete. Hand it to an auditor with the
    verifier key (`memroot vkey`); they check it with `memroot audit OUT --vkey KEY`. Every
    entry and content is checked against the signed checkpoints before anything is written
    (strict read), all from one read transaction.

    Example: memroot -l agent.ledger export audit-2026-05 --json
    """
    from memroot.memory_root import stack

    with open_reader(ctx, no_strict) as ledger:
        if not no_sign:
            for b in ledger.store.branches():
                head = ledger.head_checkpoint(b.name)
                if head is None or head.checkpoint.size != b.size:
                    ledger.checkpoint(b.name)  # a ledger written before every append was sealed
        with ledger.reading():
            if ledger.strict:
                ledger.check_all()
            manifest = export_bundle(
                ledger, out, sections=stack.bundle_sections(ledger), sign=False
            )
    data = {
        "bundle": str(out),
        "origin": manifest.origin,
        "ledger_id": manifest.ledger_id,
        "branches": {
            b.name: {"size": b.size, "root": b.root.hex(), "checkpoints": b.checkpoints}
            for b in manifest.branches
        },
        "sections": list(manifest.sections),
        "bytes": sum(f.bytes for f in manifest.files.values()),
    }
    lines = [f"exported {out} (origin {manifest.origin})"]
    lines += [
        f"  branch {b.name}: {b.size} entries, {b.checkpoints} checkpoint(s), root {b.root.hex()}"
        for b in manifest.branches
    ]
    emit(data, as_json, "\n".join(lines))


@cli.command("audit")
@click.argument("bundle", type=click.Path(path_type=Path), required=False)
@click.option(
    "--vkey",
    "vkeys",
    multiple=True,
    help="Trust this verifier key (repeatable); without one, the trusted state or the "
    "bundle's own genesis key (trust on first use) is used.",
)
@click.option("--trusted", "trusted_path", type=click.Path(path_type=Path), help=_TRUSTED_HELP)
@click.option("--no-update", is_flag=True, help="Do not record the newest checkpoint as trusted.")
@click.option(
    "--tiles",
    "tiles_dir",
    type=click.Path(path_type=Path),
    help="Audit a C2SP tlog-tiles directory (`memroot publish`) instead of a bundle.",
)
@click.option(
    "--proof",
    "proof_file",
    type=click.Path(path_type=Path),
    help="Check a proof file (`memroot prove --object/--namespace -o FILE`) with --vkey.",
)
@witness_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def audit_cmd(
    bundle: Path | None,
    vkeys: tuple[str, ...],
    trusted_path: Path | None,
    no_update: bool,
    tiles_dir: Path | None,
    proof_file: Path | None,
    witness_vkeys: tuple[str, ...],
    quorum: int | None,
    witnesses: tuple[str, ...],
    as_json: bool,
) -> None:
    """Verify an auditor's bundle offline (every step, no ledger file); exit 1 on a violation.

    Needs no ledger (-l is ignored). The report lists what was checked and every violation
    with its branch, entry and step. With --tiles DIR it audits a published tiles directory
    read back from its files alone (entries, roots, signatures; no content). With --proof
    FILE it checks a proof file (docs/FORMAT.md 6.15) against the --vkey you trust and says
    in plain words what it proves (a proof of absence passes, labelled ABSENT); a refusal
    names the check that failed and exits 1.

    Example: memroot audit audit-2026-05 --vkey "$(cat agent.vkey)"
    Example: memroot audit --tiles /srv/www/log --vkey "$(cat agent.vkey)" --witness-vkey W
    Example: memroot audit --proof tea.proof.json --vkey "$(cat agent.vkey)"
    """
    if proof_file is not None:
        if bundle is not None or tiles_dir is not None:
            raise click.UsageError("give a BUNDLE, --tiles DIR or --proof FILE (one of them)")
        if witness_vkeys or witnesses or quorum is not None or trusted_path or no_update:
            raise click.UsageError("--proof takes --vkey and --json only")
        _audit_proof(proof_file, vkeys, as_json)
        return
    from memroot.memory_root import stack

    trusted: TrustedState | None = TrustedState(trusted_path or default_trusted_path())
    policy = WitnessPolicy.from_options(witness_vkeys, quorum, witnesses)
    wnotes: list[str] = []
    if (bundle is None) == (tiles_dir is None):
        raise click.UsageError("give a BUNDLE directory or --tiles DIR (one of them)")
    if tiles_dir is not None:
        source = TilesSource(tiles_dir)
        origin = str(source.meta("origin"))
        if policy is not None:
            trusted = policy.trusted(trusted, source, origin, vkeys, wnotes)
        report = audit_tiles(
            source,
            vkeys=vkeys,
            trusted=trusted,
            checks=[policy.as_check(source, origin, wnotes)] if policy is not None else [],
            update_trusted=not no_update,
        )
        print_report(report, as_json)
        if not report.ok:
            raise click.exceptions.Exit(1)
        return
    assert bundle is not None
    if not bundle.is_dir():
        raise NotFoundError(f"no bundle directory at {bundle}")
    try:
        reader = open_bundle(bundle)
    except DecodeError:
        # A bundle whose manifest is unreadable fails step 1: report it like any violation.
        report = audit_bundle(bundle, vkeys=vkeys, trusted=trusted, update_trusted=False)
    else:
        if policy is not None:
            trusted = policy.trusted(trusted, reader, reader.manifest.origin, vkeys, wnotes)
        total = sum(b.size for b in reader.manifest.branches)
        for update in progress_bar(total, "auditing"):
            witness = (
                [policy.as_check(reader, reader.manifest.origin, wnotes)]
                if policy is not None
                else []
            )
            report = audit_bundle(
                reader,
                vkeys=vkeys,
                trusted=trusted,
                checks=[*stack.bundle_checks(reader), *witness],
                progress=update,
                update_trusted=not no_update,
            )
    facts = report.trusted.get("bundle")
    if facts and not as_json:
        click.echo(f"bundle {facts['path']}: log {facts['origin']} (ledger {facts['ledger_id']})")
        for name, b in facts["branches"].items():
            click.echo(f"  branch {name}: {b['size']} entries, tree root {b['root']}")
        if facts["sections"]:
            click.echo(f"  sections: {', '.join(facts['sections'])}")
    print_report(report, as_json)
    if not report.ok:
        raise click.exceptions.Exit(1)


def _audit_proof(path: Path, vkeys: tuple[str, ...], as_json: bool) -> None:
    """``audit --proof FILE``: check one proof file offline; exit 1 when it is refused."""
    from memroot.ledger.bundle.proof_file import MAX_PROOF_FILE, check_proof

    if not vkeys:
        raise click.UsageError(
            "--proof needs --vkey K: a proof file is checked against a key you trust, and "
            "carries none of its own (`memroot vkey` on the ledger prints it)"
        )
    for k in vkeys:
        try:
            Verifier.from_vkey(k)
        except DecodeError as e:
            raise click.BadParameter(str(e), param_hint="--vkey") from e
    if not path.is_file():
        raise NotFoundError(f"no proof file at {path}")
    if path.stat().st_size > MAX_PROOF_FILE:
        raise DecodeError(f"proof file {path} is larger than {MAX_PROOF_FILE} bytes")
    try:
        proven = check_proof(path.read_bytes(), list(vkeys))
    except IntegrityError as e:
        refusal = f"REFUSED: {path}: {e}"
        emit({"ok": False, "file": str(path), "error": str(e)}, as_json,
             lambda: click.echo(refusal, err=True))  # fmt: skip
        raise click.exceptions.Exit(1) from e
    data = {"file": str(path), **proven.to_json()}

    def human() -> None:
        click.echo(f"proof file {path} checked offline; it proves:")
        for line in proven.words():
            click.echo(f"  {line}")
        click.echo("OK: ABSENT (proof of absence holds)" if not proven.present else "OK")

    emit(data, as_json, human)


@cli.command("import-bundle")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--vkey", "vkeys", multiple=True, help="Trust this verifier key (repeatable).")
@click.option("--trusted", "trusted_path", type=click.Path(path_type=Path), help=_TRUSTED_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def import_bundle_cmd(
    ctx: Context,
    bundle: Path,
    vkeys: tuple[str, ...],
    trusted_path: Path | None,
    as_json: bool,
) -> None:
    """Rebuild a ledger (-l, a new file) from a bundle, after verifying every step.

    -l may also name a PostgreSQL database that holds no memroot tables. The new ledger has
    the same entries, roots and checkpoints, and every imported entry is folded through the
    layers' hooks as the live appends were, so their derived state (memory objects, roots,
    falsification, the branch registry, conversation tree, git index) is the exporter's. It
    has no signing key.

    Example: memroot -l restored.ledger import-bundle audit-2026-05 --vkey "$(cat agent.vkey)"
    """
    trusted = TrustedState(trusted_path or default_trusted_path())
    target = ctx.path()
    done = import_bundle(bundle, target, vkeys=vkeys, trusted=trusted)
    with open_ledger(ctx) as ledger:  # installs the layers' tables
        # and folds every imported entry through the hooks, as the live appends did
        for update in progress_bar(done.entries, "replaying"):
            ledger.replay_hooks(update)
    data = {
        "ledger": redact(target) if isinstance(target, str) else str(done.path),
        "origin": done.origin,
        "ledger_id": done.ledger_id,
        "entries": done.entries,
        "branches": done.branches,
        "checkpoints": done.checkpoints,
        "keys": done.report.trusted.get("keys"),
    }
    emit(
        data,
        as_json,
        f"imported {done.entries} entries on {done.branches} branch(es) and "
        f"{done.checkpoints} checkpoint(s) into {data['ledger']} (bundle verified; keys: "
        f"{data['keys']})\nthe new ledger has no signing key: it reads, proves and verifies",
    )


def _published_size(out: Path, ledger: Ledger) -> int:
    """Return where ``tiles`` starts writing entry bundles into ``out`` (0 if unsure).

    The size of the checkpoint ``out`` publishes, rounded down to a whole entry bundle; 0 when
    there is none or it does not open (``write_tiles`` then refuses or starts afresh).
    """
    try:
        keys = [Verifier.from_vkey(k) for k in ledger.genesis_vkeys()]
        size = open_checkpoint((out / "checkpoint").read_bytes(), keys).checkpoint.size
    except (OSError, DecodeError, ProofError):
        return 0
    return (size // _BUNDLE) * _BUNDLE


@cli.command("tiles")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--branch", default="main", show_default=True, help="The branch to publish.")
@click.option("--no-sign", is_flag=True, help="Publish the newest checkpoint without signing.")
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def tiles_cmd(
    ctx: Context, out: Path, branch: str, no_sign: bool, no_strict: bool, as_json: bool
) -> None:
    """Write or extend a C2SP tlog-tiles directory (checkpoint, tiles, entry bundles).

    Serve OUT from any static host; re-run after new checkpoints to publish the growth.
    Every entry published is first proven in the branch's newest signed checkpoint (strict
    read, one read transaction); a tampered ledger writes nothing and exits 1.

    Example: memroot -l agent.ledger tiles /srv/www/log
    """
    with open_reader(ctx, no_strict) as ledger:
        if not no_sign:
            ledger.checkpoint(branch)  # the only write (none when the sealed head is current)
        with ledger.reading():
            if ledger.strict:
                # The head checked, and every entry published proven in it first.
                ledger.check_heads()
                for _ in ledger.entries(_published_size(out, ledger), None, branch):
                    pass
            t = write_tiles(ledger, out, branch=branch, sign=False)
    data = {
        "directory": str(t.directory),
        "origin": t.origin,
        "size": t.size,
        "root": t.root.hex(),
        "tiles_written": t.tiles_written,
        "tiles_kept": t.tiles_kept,
    }
    emit(
        data,
        as_json,
        f"published {t.origin} at size {t.size} to {t.directory} "
        f"({t.tiles_written} new file(s), {t.tiles_kept} already there)",
    )


@cli.command("rotate-key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def rotate_key_cmd(ctx: Context, as_json: bool) -> None:
    """Replace the signing key: the old key signs off a KEY_ROTATE entry naming the new one.

    Later checkpoints are signed by the new key; old checkpoints still verify with the old
    one. Give auditors the new vkey (printed); verifiers that trust the old key learn the new
    one from the ledger itself.

    Example: memroot -l agent.ledger rotate-key --json
    """
    with open_ledger(ctx) as ledger:
        r = rotate_key(ledger)
    data = {
        "old_vkey": r.old_vkey,
        "new_vkey": r.new_vkey,
        "seq": r.seq,
        "checkpoint_size": r.checkpoint_size,
        "key_file": str(r.key_path),
        "retired_key_file": str(r.retired_path),
    }
    emit(
        data,
        as_json,
        f"rotated the signing key at entry {r.seq} (signed off by the old key at size "
        f"{r.checkpoint_size})\nnew vkey: {r.new_vkey}\nold key kept at {r.retired_path}",
    )
