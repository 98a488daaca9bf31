"""Memory-root commands: ``snapshot``, ``roots``, ``root show|diff``, ``selfmodel show|record``."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from memroot.cli.commands import jsonable, open_ledger, open_reader, strict_option
from memroot.cli.main import Context, branch_option, cli, emit, pass_ctx
from memroot.ledger.entries import check_uuid
from memroot.ledger.errors import DecodeError, IntegrityError, NotFoundError
from memroot.ledger.ledger import Ledger
from memroot.memory_root import (
    RootDiff,
    RootRecord,
    Roots,
    RootView,
    SelfModel,
    SelfModelRecord,
    SelfModelView,
)

__all__ = ["root", "roots_cmd", "selfmodel", "snapshot"]


def _anchor_event(ledger: Ledger, anchor: str) -> tuple[str, int]:
    """Return ``(branch, seq)`` of the ``--anchor`` event.

    Raises:
        ValidationError: if it is not a UUID; NotFoundError: if no such event exists.
    """
    found = ledger.find_event(check_uuid(anchor, "--anchor"))
    if found is None:
        raise NotFoundError(f"no event {anchor} in the ledger")
    return found


def _check_served(
    ledger: Ledger,
    roots: Sequence[RootRecord] = (),
    selfmodels: Sequence[SelfModelRecord] = (),
) -> None:
    """On a strict ledger, check every root or SelfModel about to be printed against its entry.

    The records come from derived tables (a cache anyone with write access can edit); each
    names the entry that wrote it (its SNAPSHOT, CASCADE or SELFMODEL_SNAPSHOT) and a root's
    high-water names an entry too. Those entries are read strictly (proven in the signed
    tree, one multi-leaf proof per branch) and must carry what is served: a SNAPSHOT root's
    (or the SelfModel's) 32 bytes and body, the high-water entry's hash. The decoded
    summaries of ``root show``, the states and a cascade's re-snapshot roots (which its
    CASCADE entry does not record) are left to ``memroot verify`` (step 9 re-derives them).

    Raises:
        IntegrityError: naming the entry, branch and step of the first one that disagrees.
    """
    if not ledger.strict:
        return
    ledger.check_heads()
    want: dict[str, set[int]] = {}
    for r in roots:
        want.setdefault(r.cascade_branch or r.branch, set()).add(r.seq)
        want.setdefault(r.branch, set()).add(r.high_water.seq)
    for m in selfmodels:
        want.setdefault(m.branch, set()).add(m.seq)
    read = {
        (b, seq): row.entry
        for b, seqs in want.items()
        for seq, row in ledger.read_many(sorted(seqs), b).items()
    }

    def refuse(branch: str, seq: int, what: str) -> IntegrityError:
        return IntegrityError(
            f"strict read refused: branch {branch} entry {seq}: step 9: {what} (derived state "
            "edited); run `memroot verify`, or `memroot rebuild` to re-derive it",
            branch=branch,
            seq=seq,
            step=9,
        )

    for r in roots:
        at = r.cascade_branch or r.branch
        # A re-snapshot's root is recomputed, not recorded, by its CASCADE (verify step 9).
        if r.replaces is None and bytes(r.root) not in read[(at, r.seq)].raw:
            raise refuse(at, r.seq, f"memory root {r.root.hex()} is not the one this entry records")
        if read[(r.branch, r.high_water.seq)].hash != r.high_water.entry_hash:
            raise refuse(r.branch, r.high_water.seq, "a root's high-water names another entry")
    for m in selfmodels:
        e = read[(m.branch, m.seq)]
        if m.selfmodel_root not in e.raw or m.body not in e.raw:
            raise refuse(m.branch, m.seq, "the SelfModel served is not the one this entry records")


def _record_json(r: RootRecord) -> dict[str, Any]:
    return r.to_dict()


def _view_json(v: RootView) -> dict[str, Any]:
    return {
        **_record_json(v.record),
        "summaries": [
            {
                "id": s.id,
                "version": s.version,
                "params": jsonable(s.params),
                "rule": s.rule.hex(),
                "digest": s.digest.hex(),
                "count": s.count,
                "summary": jsonable(s.value),
            }
            for s in v.summaries
        ],
    }


def _diff_json(d: RootDiff) -> dict[str, Any]:
    return {
        "a": d.a.root.hex(),
        "b": d.b.root.hex(),
        "a_is_ancestor_of_b": d.ancestor,
        "projections": [
            {
                "id": p.id,
                "status": p.status,
                "rule_changed": p.rule_changed,
                "count": list(p.count),
                "added": jsonable(p.added),
                "removed": jsonable(p.removed),
                "changed": {
                    k: {"a": jsonable(a), "b": jsonable(b)} for k, (a, b) in p.changed.items()
                },
            }
            for p in d.projections
        ],
    }


def _selfmodel_json(v: SelfModelView) -> dict[str, Any]:
    return {
        "branch": v.record.branch,
        "seq": v.record.seq,
        "selfmodel_root": v.record.selfmodel_root.hex(),
        "memory_root": None if v.record.memory_root is None else v.record.memory_root.hex(),
        "memory_root_state": v.memory_root_state,
        "body": jsonable(v.body),
    }


def _line(r: RootRecord) -> str:
    parent = r.parent.hex()[:16] if r.parent else "-"
    line = f"{r.seq}\t{r.root.hex()}\t{r.state}\thigh-water {r.high_water.seq}\tparent {parent}"
    if r.replaces is not None:
        line += f"\treplaces {r.replaces.hex()[:16]} (CASCADE entry {r.seq} on {r.cascade_branch})"
    return line


@cli.command()
@branch_option
@click.option(
    "--anchor",
    help="Snapshot the branch this event lives on, so the new root commits to it.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def snapshot(ctx: Context, branch: str, anchor: str | None, as_json: bool) -> None:
    """Take a memory_root snapshot now and sign a checkpoint after it.

    Folds every registered projection up to the branch's head, appends a SNAPSHOT entry that
    carries the root and its preimage, and signs a checkpoint. When nothing changed since
    the last snapshot it prints that root and writes nothing. With --anchor E the branch is
    E's, and the root (whose high-water is at or after E) commits to the conversation at E.

    Example: memroot -l agent.ledger snapshot --json
    """
    with open_ledger(ctx) as ledger:
        if anchor is not None:
            branch, _ = _anchor_event(ledger, anchor)
        result = Roots(ledger).snapshot(branch)
    record = result.record
    cp = None if result.checkpoint is None else result.checkpoint.checkpoint.size
    data = {**_record_json(record), "created": result.created, "checkpoint_size": cp}

    def human() -> None:
        click.echo(("new root " if result.created else "unchanged since root ") + record.root.hex())
        click.echo(
            f"SNAPSHOT entry {record.seq}, high-water entry {record.high_water.seq}, "
            f"state {record.state}"
        )
        if cp is not None:
            click.echo(f"checkpoint signed at size {cp}")

    emit(data, as_json, human)


@cli.command("roots")
@branch_option
@click.option(
    "--anchor",
    help="Only roots that commit to this event (on its branch, high-water at or after it).",
)
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def roots_cmd(
    ctx: Context, branch: str, anchor: str | None, no_strict: bool, as_json: bool
) -> None:
    """List the branch's memory roots along the parent chain, newest first, with states.

    Columns: SNAPSHOT seq, memory_root, state, high-water seq, parent (prefix). A root a
    cascade re-snapshotted is listed with its CASCADE seq and the root it replaces, which
    follows it; the branch's next snapshot chains from the re-snapshot. With
    --anchor E: the roots of E's branch whose high-water covers E, the ones an agent reading
    at E can cite.

    Example: memroot -l agent.ledger roots --json
    """
    with open_reader(ctx, no_strict) as ledger, ledger.reading():
        if anchor is not None:
            branch, at = _anchor_event(ledger, anchor)
            chain = [
                r
                for r in Roots(ledger).chain(branch=branch)
                if r.branch == branch and r.high_water.seq >= at
            ]
        else:
            chain = Roots(ledger).chain(branch=branch)
        _check_served(ledger, chain)

    def human() -> None:
        if not chain:
            click.echo("no memory roots yet")
        for r in chain:
            click.echo(_line(r))

    emit([_record_json(r) for r in chain], as_json, human)


@cli.group()
def root() -> None:
    """Inspect memory roots: decoded summaries, differences between two roots.

    Example: memroot -l agent.ledger root show 3fa2c1d0
    """


@root.command("show")
@click.argument("root_id", metavar="ROOT")
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def root_show(ctx: Context, root_id: str, no_strict: bool, as_json: bool) -> None:
    """Show one memory_root: high-water mark, parent, state and every summary decoded.

    ROOT is a memory_root in hex (a unique prefix of 4 or more digits will do).

    Example: memroot -l agent.ledger root show 3fa2c1d0 --json
    """
    with open_reader(ctx, no_strict) as ledger, ledger.reading():
        view = Roots(ledger).show(root_id)
        _check_served(ledger, [view.record])
    data = _view_json(view)

    def human() -> None:
        click.echo(_line(view.record).replace("\t", "  "))
        hw = view.record.high_water
        click.echo(
            f"high-water: entry {hw.seq} {hw.entry_hash.hex()}, tree size "
            f"{hw.tree_size} root {hw.tree_root.hex()}"
        )
        for s in data["summaries"]:
            click.echo(
                f"\n{s['id']} v{s['version']} params {json.dumps(s['params'])} items {s['count']}"
            )
            click.echo(json.dumps(s["summary"], indent=2, sort_keys=True))

    emit(data, as_json, human)


@root.command("diff")
@click.argument("root1", metavar="ROOT1")
@click.argument("root2", metavar="ROOT2")
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def root_diff(ctx: Context, root1: str, root2: str, no_strict: bool, as_json: bool) -> None:
    """Compare two memory roots projection by projection and item by item.

    Lines: "=" same summary, "~" changed (then "+" added, "-" removed, "~" changed items),
    "+"/"-" a projection only in ROOT2/ROOT1.

    Example: memroot -l agent.ledger root diff 3fa2c1d0 9be01f44
    """
    with open_reader(ctx, no_strict) as ledger, ledger.reading():
        diff = Roots(ledger).diff(root1, root2)
        _check_served(ledger, [diff.a, diff.b])
    data = _diff_json(diff)

    def human() -> None:
        rel = "an ancestor of" if diff.ancestor else "not an ancestor of"
        click.echo(
            f"{diff.a.root.hex()[:16]} (entry {diff.a.seq}) is {rel} "
            f"{diff.b.root.hex()[:16]} (entry {diff.b.seq})"
        )
        for p in data["projections"]:
            mark = {"same": "=", "changed": "~", "added": "+", "removed": "-"}[p["status"]]
            extra = " (rule changed: version or params)" if p["rule_changed"] else ""
            click.echo(f"{mark} {p['id']} items {p['count'][0]} -> {p['count'][1]}{extra}")
            for k, v in p["added"].items():
                click.echo(f"    + {k}: {json.dumps(v, sort_keys=True)}")
            for k, v in p["removed"].items():
                click.echo(f"    - {k}: {json.dumps(v, sort_keys=True)}")
            for k, v in p["changed"].items():
                click.echo(
                    f"    ~ {k}: {json.dumps(v['a'], sort_keys=True)} -> "
                    f"{json.dumps(v['b'], sort_keys=True)}"
                )

    emit(data, as_json, human)


@cli.group()
def selfmodel() -> None:
    """SelfModel snapshots: the agent's identity and claims, tied to its memory_root.

    Example: memroot -l agent.ledger selfmodel show --json
    """


@selfmodel.command("show")
@branch_option
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def selfmodel_show(ctx: Context, branch: str, no_strict: bool, as_json: bool) -> None:
    """Show the newest SelfModel snapshot and the memory_root it cites (with its state).

    Example: memroot -l agent.ledger selfmodel show
    """
    with open_reader(ctx, no_strict) as ledger, ledger.reading():
        view = Roots(ledger).selfmodel(branch)
        if view is not None:
            _check_served(ledger, selfmodels=[view.record])
    if view is None:
        emit(None, as_json, "no SelfModel snapshot yet")
        return
    data = _selfmodel_json(view)

    def human() -> None:
        body = data["body"]
        click.echo(f"agent {body['agent_id']} (SELFMODEL_SNAPSHOT entry {data['seq']})")
        click.echo(f"selfmodel_root {data['selfmodel_root']}")
        click.echo(
            f"cites memory_root {data['memory_root'] or '-'} "
            f"({data['memory_root_state'] or 'no root'})"
        )
        for k, v in sorted(body["identity"].items()):
            click.echo(f"  {k}: {v}")
        for c in body["capabilities"]:
            ev = f" [{', '.join(c['evidence'])}]" if c["evidence"] else ""
            click.echo(f"  claims {c['name']}: {c['claim']}{ev}")

    emit(data, as_json, human)


@selfmodel.command("record")
@click.argument(
    "file", type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path)
)
@branch_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
def selfmodel_record(ctx: Context, file: Path, branch: str, as_json: bool) -> None:
    """Record a SelfModel (JSON: agent_id, identity, capabilities) citing the latest live root.

    FILE may be - to read the JSON from stdin.

    Example: memroot -l agent.ledger selfmodel record selfmodel.json
    """
    try:
        if str(file) == "-":
            obj = json.loads(sys.stdin.buffer.read().decode("utf-8"))
        else:
            obj = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DecodeError(f"{file}: not valid JSON: {e}") from e
    model = SelfModel.from_json(obj)
    with open_ledger(ctx) as ledger:
        roots = Roots(ledger)
        roots.record_selfmodel(model, branch)
        view = roots.selfmodel(branch)
    assert view is not None
    data = _selfmodel_json(view)
    emit(
        data,
        as_json,
        f"recorded SelfModel at entry {data['seq']}: selfmodel_root "
        f"{data['selfmodel_root']} cites {data['memory_root'] or 'no root'}",
    )
