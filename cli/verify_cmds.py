"""Proof and verification commands: prove, verify (all ten steps, and a conversation path)."""

from __future__ import annotations

import base64
import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from memroot.cli.commands import open_reader, strict_option, witness_options
from memroot.cli.main import Context, branch_option, cli, emit, pass_ctx, progress_bar
from memroot.ledger import merkle
from memroot.ledger.backends.pg import is_url, open_store
from memroot.ledger.bundle.audit import WitnessPolicy
from memroot.ledger.entries import (
    MAX_SEQ,
    check_uuid,
)
from memroot.ledger.errors import (
    IntegrityError,
    NotFoundError,
)
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import Verifier, open_checkpoint, parse_tlog_proof
from memroot.ledger.strict import relaxed
from memroot.ledger.trust import TrustedState, default_trusted_path
from memroot.ledger.verify import STEPS, AuditReport, Finding, audit, bound_cache

__all__ = ["print_report", "snapshot_of", "verify_ledger"]


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
@click.option("--object", "object_id", help="Prove this memory object's state at a root.")
@click.option("--state", "state_id", help="Prove this item's falsification state (with --kind).")
@click.option("--kind", "target_type", help="The item type of --state (e.g. memory_object).")
@click.option(
    "--namespace",
    help="Prove every item of this namespace at a root; with --object/--state, the namespace "
    "to prove the item in (needed to prove an unknown id absent).",
)
@click.option("--root", "root_id", help="The memory root (hex, 4+ digits; default: the newest).")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write the proof file here.")
@click.option(
    "--at-snapshot",
    is_flag=True,
    help="Prove against the root's own kept checkpoint (shorter path), not the newest.",
)
@click.option(
    "--format",
    "file_format",
    type=click.Choice(["1", "2", "3"]),
    default="3",
    show_default=True,
    help="Proof file version: 3 compact binary, 2 binary (canonical CBOR), 1 JSON (base64).",
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
    object_id: str | None,
    state_id: str | None,
    target_type: str | None,
    namespace: str | None,
    root_id: str | None,
    output: Path | None,
    at_snapshot: bool,
    file_format: str,
    branch: str,
    no_strict: bool,
    as_json: bool,
) -> None:
    """Print an inclusion or consistency proof, or write a proof file of memory at a root.

    --index / --consistency: a C2SP tlog-proof@v1 of an entry, or a consistency proof. A
    tlog-proof carries the signed checkpoint it proves against, so --size must be the size
    of a kept checkpoint (the error lists them; `memroot checkpoint` keeps one of the current
    tree).

    --object ID, --state ID --kind K, --namespace N: a memroot-proof file (docs/FORMAT.md
    6.15) of what the memory map held at a v2 root (--root, default the branch's newest):
    one item with its state (or a proof that it is ABSENT: exit 0, labelled), or every item
    of a namespace and nothing else. It carries the root's SNAPSHOT entry, its inclusion
    proof in the newest signed checkpoint and the map paths; anyone checks it offline with
    `memroot audit --proof FILE --vkey K`. Each proof is checked before it is written.
    The file is version 3 (compact binary: one canonical CBOR value without the bytes the
    checker derives; written to -o FILE or to a pipe, never to a terminal) unless --format
    2 asks for version 2 (binary, every field carried) or --format 1 for version 1 (JSON).
    --at-snapshot proves against the checkpoint that sealed the root's SNAPSHOT (kept for
    good): a shorter inclusion path, a smaller file, signed by the key of that time.

    The branch's stored tree is first checked against its newest signed checkpoint (strict
    read, one read transaction); a tampered ledger prints nothing and exits 1.

    Example: memroot -l agent.ledger prove --index 5 > entry5.proof
    Example: memroot -l agent.ledger prove --consistency 10 20 --json
    Example: memroot -l agent.ledger prove --object 0190... -o tea.proof.json
    Example: memroot -l agent.ledger prove --namespace alice --root 3f2a -o alice.proof.json
    """
    map_mode = object_id is not None or state_id is not None or namespace is not None
    if sum((index is not None, bool(consistency), map_mode)) != 1:
        raise click.UsageError(
            "give exactly one of --index I, --consistency N1 N2, --object ID, --state ID "
            "--kind K or --namespace N"
        )
    if map_mode:
        _prove_map(ctx, no_strict, branch, object_id, state_id, target_type, namespace,
                   root_id, output, size, as_json, at_snapshot, int(file_format))  # fmt: skip
        return
    if at_snapshot:
        raise click.UsageError("--at-snapshot goes with --object, --state or --namespace")
    if file_format != "3":
        raise click.UsageError("--format goes with --object, --state or --namespace")
    if root_id is not None or output is not None or target_type is not None:
        raise click.UsageError("--root, --kind and -o go with --object, --state or --namespace")
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


def _prove_map(
    ctx: Context,
    no_strict: bool,
    branch: str,
    object_id: str | None,
    state_id: str | None,
    target_type: str | None,
    namespace: str | None,
    root_id: str | None,
    output: Path | None,
    size: int | None,
    as_json: bool,
    at_snapshot: bool = False,
    version: int = 3,
) -> None:
    """``prove --object/--state/--namespace``: build, check and write one proof file.

    ``version`` 3 writes the compact binary file (``ProofFile.encode_v3``, which the prover
    checked), 2 the binary file and 1 the JSON text (each checked again as written before
    it is written: fail closed).
    """
    import sys

    from memroot.ledger.bundle.proof_file import check_proof
    from memroot.memory_root.proofs import open_root

    if object_id is not None and state_id is not None:
        raise click.UsageError("give --object ID or --state ID, not both")
    if (state_id is None) != (target_type is None):
        raise click.UsageError(
            "--state ID needs --kind K (the item type), and --kind needs --state"
        )
    if size is not None:
        raise click.UsageError("--size goes with --index (a proof file uses the newest checkpoint)")
    if no_strict:
        raise click.UsageError("a proof file is built from strict reads only (drop --no-strict)")
    if version != 1 and output is None and not as_json and sys.stdout.isatty():
        raise click.UsageError(
            f"a version {version} proof file is binary: give -o FILE or a pipe (or --format 1 "
            "for JSON)"
        )
    with open_reader(ctx, no_strict) as ledger, ledger.reading():
        ledger.check_heads()
        source = open_root(ledger, root_id, branch, at_snapshot=at_snapshot)
        if object_id is not None:
            proof, proven = source.prove_item("object", object_id, namespace)
        elif state_id is not None:
            assert target_type is not None
            proof, proven = source.prove_item(f"state/{target_type}", state_id, namespace)
        else:
            assert namespace is not None
            proof, proven = source.prove_namespace(namespace)
    data_bytes = proof.serialize(version)
    if version != 3:
        check_proof(data_bytes, list(source.vkeys))  # the bytes written, checked as written
    note = (
        None
        if source.root_state == "live"
        else f"note: root {proof.root.hex()[:16]} is {source.root_state} (its own state, which "
        "no proof file carries); the proof shows what it committed to"
    )
    if note is not None and (output is None or as_json):
        click.echo(note, err=True)
    if output is None:
        shown: Any = (
            json.loads(data_bytes) if version == 1 else base64.b64encode(data_bytes).decode("ascii")
        )
        emit({"proof": shown, "version": version, "proven": proven.to_json()}, as_json,
             lambda: click.echo(data_bytes, nl=False))  # fmt: skip
        return
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_bytes(data_bytes)
    tmp.replace(output)
    data = {
        "file": str(output),
        "version": version,
        "bytes": len(data_bytes),
        "proven": proven.to_json(),
    }

    data["root_state"] = source.root_state

    def human() -> None:
        click.echo(f"wrote {output} ({data['bytes']} bytes), checked; it proves:")
        for line in proven.words():
            click.echo(f"  {line}")
        if note is not None:
            click.echo(note)

    emit(data, as_json, human)


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
            bad = report.violations(step)
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
        if report.dropped_findings:
            click.echo(
                f"({report.dropped_findings} more violation(s) past the first "
                f"{len(report.findings)} were found and not listed)",
                err=True,
            )
        if report.dropped_notes:
            click.echo(f"({report.dropped_notes} more note(s) not listed)")
        total = len(report.findings) + report.dropped_findings
        click.echo("OK: every step holds" if report.ok else f"FAILED: {total} violation(s)")

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
        report = verify_ledger(ledger, trusted, vkeys, no_update, origin, branch, policy)
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
    from memroot.memory_root import stack

    with tempfile.TemporaryDirectory(prefix="memroot-verify-") as tmp:
        copy = Path(tmp) / "ledger.db"
        if isinstance(path, str):
            try:
                hooks = stack.default_hooks()
                with Ledger.open(
                    path, key_path=key_path, readonly=True, strict=False, hooks=hooks
                ) as ledger:
                    ledger.copy_snapshot(copy)
            except IntegrityError as e:
                if e.step != 8:
                    raise
                # The cache's catch-up refused an entry of the log itself (a root its entries
                # do not give): the entries alone, which step 8 replays, show it as a finding.
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{copy}{suffix}").unlink(missing_ok=True)
                store = open_store(path, readonly=True)
                try:
                    store.copy_snapshot(copy)
                finally:
                    store.close()
        else:
            store = open_store(path, readonly=True)
            try:
                store.copy_snapshot(copy)
            finally:
                store.close()
        yield copy


def verify_ledger(
    ledger: Ledger,
    trusted: TrustedState,
    vkeys: tuple[str, ...],
    no_update: bool,
    origin: str | None,
    branch: str | None,
    policy: WitnessPolicy | None,
) -> AuditReport:
    """Audit ``ledger`` with every layer's check, inside the caller's read transaction."""
    from memroot.memory_root import stack

    wnotes: list[str] = []
    trusted_state: TrustedState | None = trusted
    if branch is not None:
        ledger.store.branch(branch)  # NotFoundError names a branch that does not exist
    total = sum(b.size for b in ledger.store.branches())
    checks = stack.replay_checks(ledger, restricted=branch is not None, share=True)
    if policy is not None:
        trusted_state = policy.trusted(
            trusted, ledger.store, origin or ledger.origin, vkeys, wnotes
        )
    # An auditor who knows which log to expect says so (``--origin``): a ledger rewritten
    # under another origin then fails its checkpoints (step 6).
    audited_origin = origin or str(ledger.store.meta("origin"))
    if policy is not None:
        # As a check, so its findings land before a passing audit moves the trusted state.
        checks = [*checks, policy.as_check(ledger.store, origin or ledger.origin, wnotes)]
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
