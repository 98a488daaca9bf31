"""Memory commands: query, why, rebuild (the memory model derived from the ledger)."""

from __future__ import annotations

import datetime as dt

import click

from memroot.cli.commands import open_ledger, open_reader, strict_option
from memroot.cli.main import EXIT_INTEGRITY, Context, branch_option, cli, emit, pass_ctx
from memroot.ledger.entries import MAX_SEQ, check_uuid
from memroot.ledger.errors import IntegrityError, ValidationError
from memroot.ledger.vocab import EpistemicType, LifecycleState, MemoryType
from memroot.projections import query as memq
from memroot.projections.checked import checked_query, unchecked_query
from memroot.projections.epistemic import RetrievalMode
from memroot.projections.hook import sync
from memroot.projections.replay import rebuild as rebuild_state
from memroot.projections.why import why as why_object

__all__ = ["query_cmd", "rebuild_cmd", "why_cmd"]


def _choice(
    enum: type[MemoryType] | type[LifecycleState] | type[EpistemicType] | type[RetrievalMode],
) -> click.Choice[str]:
    return click.Choice([m.value for m in enum], case_sensitive=False)


def _when(ts: int) -> str:
    return dt.datetime.fromtimestamp(ts / 1e6, dt.UTC).isoformat(timespec="seconds")


def _short(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@cli.command("query")
@click.option(
    "--type", "types", multiple=True, type=_choice(MemoryType), help="Object type (repeatable)."
)
@click.option("--entity", help="Objects about this entity (merged entities resolve).")
@click.option("--namespace", "namespaces", multiple=True, help="Namespace id (repeatable).")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=_choice(LifecycleState),
    help="Lifecycle state (repeatable; not ACTIVE needs --mode EXPLICIT or AUDIT).",
)
@click.option(
    "--epistemic", multiple=True, type=_choice(EpistemicType), help="Epistemic type (repeatable)."
)
@click.option("--text", help="Words to find in values (FTS5; word* matches a prefix).")
@click.option(
    "--mode",
    type=_choice(RetrievalMode),
    default="DEFAULT",
    show_default=True,
    help="RFC-0003 retrieval mode.",
)
@click.option(
    "--as-of",
    "as_of",
    type=click.IntRange(0, MAX_SEQ),
    help="Memory as it was right after entry SEQ.",
)
@click.option("--actor", help="Only namespaces this actor may READ.")
@click.option("--limit", type=click.IntRange(1, memq.MAX_LIMIT), default=50, show_default=True)
@branch_option
@click.option(
    "--anchor",
    metavar="EVENT_ID",
    help="Read at this conversation event: only objects whose every evidence event is on its "
    "ancestor path (without it, no conversation filter).",
)
@click.option(
    "--git-branch",
    metavar="NAME",
    help="Rank for this git branch (seed 003 score, base confidence x salience).",
)
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def query_cmd(
    ctx: Context,
    types: tuple[str, ...],
    entity: str | None,
    namespaces: tuple[str, ...],
    states: tuple[str, ...],
    epistemic: tuple[str, ...],
    text: str | None,
    mode: str,
    as_of: int | None,
    actor: str | None,
    limit: int,
    branch: str,
    anchor: str | None,
    git_branch: str | None,
    no_strict: bool,
    as_json: bool,
) -> None:
    """Retrieve memory objects, most recently changed first, with RFC-0003 flags and conflicts.

    DEFAULT mode returns what an agent should see (ACTIVE; OBSERVED, ASSERTED, INFERRED
    flagged; UNVERIFIED above 0.30; CONDITIONAL when TRUE). EXPLICIT drops the epistemic
    filter, AUDIT also shows every lifecycle state.

    --branch reads the branch's own objects over its parent as of the fork (in a SIMULATION
    branch DEFAULT also returns ACTIVE HYPOTHETICAL objects, flagged). --anchor keeps only
    objects derived entirely from the anchor's conversation path. --git-branch orders by
    the branch-aware score (printed as score=...) instead of recency.

    Example: memroot -l agent.ledger query --type PREFERENCE --text tea --as-of 120 --json
    """
    q = memq.Query(
        types=tuple(t.upper() for t in types),
        entity=entity,
        namespaces=namespaces,
        states=tuple(s.upper() for s in states),
        epistemic=tuple(e.upper() for e in epistemic),
        text=text,
        mode=RetrievalMode(mode.upper()),
        as_of=as_of,
        actor=actor,
        limit=limit,
        branch=branch,
        anchor=anchor,
        git_branch=git_branch,
    )
    from memroot.memory_root.falsify import Falsifier

    with open_reader(ctx, no_strict) as ledger:
        size = ledger.size(branch)
        if as_of is not None and as_of >= size:
            raise ValidationError(
                f"--as-of {as_of} is past the last entry of {branch} ({size - 1})", field="as_of"
            )
        sync(ledger)
        # The falsification layer too, before the read transaction: the completeness check
        # explains the map's state leaves by its rows (entries appended without its hook).
        Falsifier(ledger).sync(branch)
        with ledger.reading() as db:
            # --no-strict is forensics: what the tables say, said to be unchecked.
            results = checked_query(ledger, q) if ledger.strict else unchecked_query(db, q)

    def human() -> None:
        for r in results:
            o = r.object
            flags = f" [{','.join(r.flags)}]" if r.flags else ""
            score = "" if r.score is None else f" score={r.score:.3f}"
            click.echo(
                f"{o.id}  {o.type:<10} {o.epistemic_type:<12} {o.lifecycle_state:<10} "
                f"c={o.confidence:.2f} s={o.salience:.2f} v{o.version}{score}{flags}  "
                f"{_short(o.value)}"
            )
            if r.conflicts_with:
                click.echo(f"    conflicts with: {', '.join(r.conflicts_with)}")
        n = len(results)
        click.echo(f"({n} object{'' if n == 1 else 's'})", err=True)

    emit([r.to_dict() for r in results], as_json, human)


@cli.command("why")
@click.argument("object_id")
@branch_option
@click.option(
    "--anchor",
    metavar="EVENT_ID",
    help="Also say how the object is at this conversation event: visible or not, its state, "
    "and which operations apply there and which do not, and why.",
)
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON (hashes and proofs in hex).")
@pass_ctx
def why_cmd(
    ctx: Context, object_id: str, branch: str, anchor: str | None, no_strict: bool, as_json: bool
) -> None:
    """Show why memory holds an object: every operation and evidence event, each proven.

    Each entry comes with its seq, entry hash and an RFC 9162 inclusion proof against the
    latest signed checkpoint (printed too), so an auditor can check it offline. The
    object's falsification states follow. For a memory root, a SelfModel (hex) or a
    summary item (ROOT:projection:key): its state history, what it cites, what was built
    on it.

    --anchor EVENT_ID adds the object as it is at that conversation event (invalidation
    gated by provenance): whether it is visible there, its state, and for each operation
    whether it applies there and, if not, why.

    Example: memroot -l agent.ledger why 0190f3c2-7c1d-7d4e-8a9b-1c2d3e4f5a6b --json
    """
    from memroot.cli.falsify_cmds import item_why, object_states, unapplied

    if len(object_id) != 36 or object_id.count("-") != 4:
        if anchor is not None:
            raise click.UsageError("--anchor explains memory objects only")
        item_why(ctx, object_id, branch, as_json, no_strict)
        return
    if anchor is not None:
        check_uuid(anchor, "--anchor")
    from memroot.memory_root.falsify import Falsifier
    from memroot.memory_root.receipts import readers

    with open_reader(ctx, no_strict) as ledger:
        sync(ledger, branch)
        # Entries appended without the falsification hook are folded now, before the read
        # transaction (a write inside it fails: "cannot start a transaction within a
        # transaction").
        Falsifier(ledger).sync()
        with ledger.reading():
            w = why_object(ledger, object_id, branch=branch, anchor=anchor)
            states = object_states(ledger, object_id, branch)
            left_out = unapplied(ledger, object_id, branch)
            read_by = readers(ledger, object_id)
    data = {**w.to_dict(), "states": states[0], "unapplied": left_out, "read_by": read_by}
    if w.at_anchor is not None:
        # A falsification op accepted in its own view that the global state left out.
        why_not = {(u["branch"], u["seq"]): u["reason"] for u in left_out}
        for st in w.at_anchor.steps:
            st["unapplied"] = why_not.get((st["branch"], st["seq"]))

    def human() -> None:
        o = w.object
        click.echo(
            f"object {o.id}: {o.type} {o.epistemic_type} {o.lifecycle_state} "
            f"v{o.version} confidence {o.confidence:.2f}"
        )
        click.echo(f"  value: {_short(o.value, 100)}")
        cp = data["checkpoint"]
        if cp is not None:
            click.echo(f"checkpoint: {cp['origin']} size {cp['size']} root {cp['root']}")
        click.echo("operations:")
        for s in w.operations:
            v = f" -> v{s.version}" if s.version is not None else ""
            proof = (
                "no proof (newer than the checkpoint)"
                if s.proof is None
                else (f"proof {len(s.proof)} hashes")
            )
            where = "" if s.branch == branch else f"{s.branch} "
            click.echo(
                f"  {where}seq {s.seq:<6} {s.entry_hash.hex()[:16]}  {s.op_type:<20} by "
                f"{s.actor_id} ({s.actor_type}) at {_when(s.ts)}{v}; {proof}"
            )
        click.echo("evidence:")
        for ev in w.evidence:
            said = (
                f"erased by entry {ev.erased_by} on {ev.branch}"
                if ev.content is None
                else repr(_short(ev.content, 80))
            )
            proof = "no proof" if ev.proof is None else f"proof {len(ev.proof)} hashes"
            click.echo(
                f"  seq {ev.seq:<6} {ev.entry_hash.hex()[:16]}  event {ev.event_id} by "
                f"{ev.actor_id}: {said}; {proof}"
            )
        for line in states[1]:
            click.echo(line)
        click.echo(f"read by ({len(read_by)} receipt{'' if len(read_by) == 1 else 's'}):")
        for r in read_by:
            click.echo(
                f"  run {r['run_id']} ({r['actor_id']}) v{r['version']} at {r['branch']}:{r['seq']}"
            )
        a = w.at_anchor
        if a is not None:
            if a.object is None:
                click.echo(f"at anchor {a.anchor}: not visible (evidence off its path)")
            else:
                o = a.object
                click.echo(
                    f"at anchor {a.anchor}: {o.epistemic_type} {o.lifecycle_state} "
                    f"v{o.version} confidence {o.confidence:.2f} state {o.state}"
                )
            for st in a.steps:
                verdict = "applies" if st["applies"] else "does not apply"
                left = (
                    ""
                    if st.get("unapplied") is None
                    else f" (globally not applied: {st['unapplied']})"
                )
                click.echo(
                    f"  seq {st['seq']:<6} {st['op_type']:<20} {verdict}: "
                    f"{st['reason'] or 'ok'}{left}"
                )

    emit(data, as_json, human)


_ONE_PASS = True
"""``rebuild`` replays the memory roots in the memory model's pass when it can (off: in a
pass of their own first, as a root that does not replay makes it do; the differential
tests compare the two)."""


@cli.command("rebuild")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def rebuild_cmd(ctx: Context, as_json: bool) -> None:
    """Drop the derived memory state and replay the ledger into it (one transaction).

    Prints the state digest before and after: a healthy ledger rebuilds to the same digest.
    The memory roots' records and the memory map, the falsification states (and each root's
    state), the branch registry, the conversation tree and the git index are replayed in the
    same pass, over one strict read of the log.

    Example: memroot -l agent.ledger rebuild --json
    """
    from memroot.integrations.langgraph._check import LangGraphTablesRebuild
    from memroot.ledger.backends.pg import PgStore
    from memroot.ledger.verify import bound_cache
    from memroot.memory_root.falsify.replay import StatesRebuild
    from memroot.memory_root.hook import RootsHook
    from memroot.memory_root.roots import Roots
    from memroot.memory_root.tables_check import LayerTablesRebuild

    with open_ledger(ctx) as ledger:
        if not isinstance(ledger.derived, PgStore):
            # Each page of the derived state (the ledger file, or a PostgreSQL ledger's
            # cache file) is rewritten about once: the store's 64 MiB cache only grew the
            # process (239 MB at 10^6 entries; 110 MB with 8 MiB, in the same CPU time).
            bound_cache(ledger.derived)
        roots = Roots(ledger) if any(isinstance(h, RootsHook) for h in ledger.hooks) else None
        n_roots: int | None = None
        roots_error: IntegrityError | None = None

        def layers() -> tuple[StatesRebuild, LayerTablesRebuild, LangGraphTablesRebuild]:
            # The falsification states (and each root's state), the branch registry, the
            # conversation tree, the git index and the LangGraph saver's and store's lookup
            # tables, replayed in the memory model's pass.
            return StatesRebuild(ledger), LayerTablesRebuild(ledger), LangGraphTablesRebuild(ledger)

        with ledger.write() as db:  # one transaction
            once = None if roots is None or not _ONE_PASS else roots.rebuild_layer()
            report = None
            if once is not None:
                # The memory roots' records and the map's nodes in the same pass too, so the
                # log is read strictly once: each entry goes to the roots first (the
                # falsification layer reads their records and re-snapshots them).
                replayed, branch_tables, langgraph = layers()
                db.execute("SAVEPOINT rebuild_once")
                try:
                    report = rebuild_state(ledger, also=[once, replayed, branch_tables, langgraph])
                except IntegrityError:
                    if once.failed is None:
                        raise  # an entry failed its strict read: nothing is rebuilt
                    # A root does not replay: undo the whole pass, and take the two passes
                    # below, which keep the roots as they were and rebuild the rest.
                    db.execute("ROLLBACK TO rebuild_once")
                db.execute("RELEASE rebuild_once")
                if report is not None:
                    assert roots is not None
                    n_roots = once.n
                    roots.rebuilt()
            if report is None:
                replayed, branch_tables, langgraph = layers()
                if roots is not None:
                    # The memory roots' records and the memory map's nodes, from the log's
                    # SNAPSHOTs. First: the falsification replay below resets every root's
                    # state and re-snapshot records and applies them again. The roots' state
                    # projections read the memory model as stored, so when it is damaged too
                    # a root may not replay yet: the rebuild goes on without the roots, says
                    # so, and a second rebuild (on the rebuilt memory model) takes them.
                    db.execute("SAVEPOINT roots_rebuild")
                    try:
                        n_roots = roots.rebuild()
                    except IntegrityError as e:
                        db.execute("ROLLBACK TO roots_rebuild")
                        roots_error = e
                    db.execute("RELEASE roots_rebuild")
                report = rebuild_state(ledger, also=[replayed, branch_tables, langgraph])
        states = replayed.result
        assert states is not None
    data = {
        **report.to_dict(),
        "roots": n_roots if roots_error is None else {"error": str(roots_error)},
        "falsification": {"state_changes": states.changes, "skipped": states.skipped},
        "branches_conversation_git": {
            "entries": branch_tables.entries,
            "skipped": branch_tables.skipped,
        },
        "langgraph": {"entries": langgraph.entries, "skipped": langgraph.skipped},
    }

    def human() -> None:
        click.echo(
            f"replayed {report.entries} entries in {report.seconds:.2f}s: "
            f"{report.objects} objects ({report.versions} versions), {report.edges} "
            f"edges, {report.entities} entities, {report.skipped} skipped"
        )
        click.echo(f"digest before: {data['digest_before'] or '(no derived state)'}")
        click.echo(f"digest after:  {data['digest_after']}")
        if report.identical is not None:
            click.echo(
                "identical"
                if report.identical
                else "DIFFERENT: the stored state did not match the ledger; it does now"
            )
        click.echo(
            f"falsification: {states.changes} state changes replayed, {states.skipped} skipped"
        )
        click.echo(
            f"branch registry, conversation tree, git index: {branch_tables.entries} entries "
            f"replayed, {branch_tables.skipped} skipped"
        )
        if n_roots is not None:
            click.echo(f"memory roots and the memory map: {n_roots} roots replayed")

    emit(data, as_json, human)
    if roots_error is not None:
        click.echo(
            f"error: the memory roots were not rebuilt (the rest was): {roots_error}; if the "
            "memory model was damaged too, run `memroot rebuild` again",
            err=True,
        )
        raise click.exceptions.Exit(EXIT_INTEGRITY)
