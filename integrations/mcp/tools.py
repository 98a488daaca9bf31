"""The MCP server's tools: their argument and result schemas, hints and bodies.

Each tool is a ``ToolSpec``: a strict pydantic model of its arguments (unknown arguments
refused, ``additionalProperties: false``; numeric bounds, id patterns and lengths are the
library's own limits, published in the schema and enforced here before the library sees the
call; text with control characters refused), a model of its result (published as the tool's
``outputSchema``; every result is built through it), MCP tool annotations, and a body that
runs one call inside a ``Scope`` (the client's namespace; ``memroot.integrations.mcp.scope``).

The bodies are thin calls into the facade (``Memory``) and the library's read API; they never
read derived tables themselves.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from mcp.types import ToolAnnotations
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from memroot.ledger.errors import ValidationError
from memroot.memory_root.branches import MAX_EXPIRY_DAYS
from memroot.memory_root.falsify.cascade import MAX_DEPTH, MAX_ITEMS
from memroot.projections.ops import MAX_IDS, MAX_TEXT, MAX_VALUE
from memroot.projections.query import MAX_LIMIT

from .scope import Scope

__all__ = ["TOOLS", "Call", "ToolSpec", "check_text"]

# -- argument types ---------------------------------------------------------------------------

_CONTROL: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_TEXT_PATTERN: Final = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$"
_HEX4: Final = "[0-9a-fA-F]{4}"
_UUID: Final = re.compile(f"[0-9a-fA-F]{{8}}-{_HEX4}-{_HEX4}-{_HEX4}-[0-9a-fA-F]{{12}}")
_UUID_PATTERN: Final = f"^{_UUID.pattern}$"
_RUN_ID_PATTERN: Final = "^[\\x21-\\x7e]{1,200}$"


def check_text(value: str) -> str:
    """Refuse a text argument holding a control character (tab, LF and CR are allowed).

    Raises:
        ValueError: naming the character and where it is (pydantic reports it per field).
    """
    found = _CONTROL.search(value)
    if found is not None:
        raise ValueError(
            f"control character U+{ord(found.group()):04X} at position {found.start()} is not "
            "allowed in text"
        )
    return value


def _check_uuid(value: str) -> str:
    if _UUID.fullmatch(value) is None:
        raise ValueError(f"{value[:80]!r} is not a UUID (8-4-4-4-12 hex digits)")
    return value


_IS_TEXT: Final = AfterValidator(check_text)
_IS_UUID: Final = AfterValidator(_check_uuid)


def _text(max_length: int, description: str) -> Any:
    """Return the field of a text argument: 1 to ``max_length`` characters, none a control."""
    return Field(
        min_length=1,
        max_length=max_length,
        description=description,
        json_schema_extra={"pattern": _TEXT_PATTERN},
    )


def _uuid(description: str) -> Any:
    """Return the field of an id argument: a UUID (the validator says what is wrong)."""
    return Field(description=description, json_schema_extra={"pattern": _UUID_PATTERN})


Value = Annotated[str, _text(MAX_VALUE, "The memory's text."), _IS_TEXT]
SourceText = Annotated[
    str, _text(MAX_VALUE, "What was said or seen; recorded as the evidence event."), _IS_TEXT
]
QueryText = Annotated[str, _text(1000, "Words that must all occur in the value."), _IS_TEXT]
Reason = Annotated[str, _text(MAX_TEXT, "Why, in words (kept in the ledger)."), _IS_TEXT]
Purpose = Annotated[str, _text(MAX_TEXT, "What the branch is for."), _IS_TEXT]
BranchName = Annotated[
    str, _text(200, "A branch id (default main): main or a branch of this namespace."), _IS_TEXT
]
ObjectId = Annotated[
    str, _uuid("A memory object's id (UUID) in this server's namespace."), _IS_UUID
]
EventId = Annotated[str, _uuid("An event's id (UUID) in this server's namespace."), _IS_UUID]
AnchorId = Annotated[
    str,
    _uuid("A conversation event of this namespace: only memories derived from its path."),
    _IS_UUID,
]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]

ObjectType = Literal["FACT", "PREFERENCE", "DECISION", "TASK", "INTENT"]
Epistemic = Literal["OBSERVED", "ASSERTED", "INFERRED", "HYPOTHETICAL", "UNVERIFIED"]
Source = Literal[
    "USER_STATED", "USER_DEMONSTRATED", "SYSTEM_INFERRED", "EXTERNAL_DOCUMENT", "TOOL_OUTPUT"
]
Mode = Literal["DEFAULT", "EXPLICIT", "AUDIT"]
BranchType = Literal["SIMULATION", "COUNTERFACTUAL", "PLANNING", "SANDBOX", "TEST"]
Strategy = Literal["PRESERVE_BOTH", "PREFER_CANONICAL", "PREFER_BRANCH"]


class _Args(BaseModel):
    """Tool arguments: nothing unknown, no coercion from other JSON types."""

    model_config = ConfigDict(extra="forbid", strict=True)


class _Result(BaseModel):
    """A tool result: every field the tool returns is named in the schema."""

    model_config = ConfigDict(extra="forbid")


Json = dict[str, Any]

# -- arguments --------------------------------------------------------------------------------


class RememberArgs(_Args):
    """Arguments of the remember tool."""

    value: Value
    source: SourceText | None = None
    evidence: (
        Annotated[
            list[EventId],
            Field(min_length=1, max_length=MAX_IDS, description="Ids of events already recorded."),
        ]
        | None
    ) = None
    object_type: ObjectType = "FACT"
    epistemic_type: Epistemic = "ASSERTED"
    source_type: Source = "USER_STATED"
    confidence: Annotated[Unit | None, Field(description="0..1; default by epistemic type.")] = None
    salience: Annotated[Unit, Field(description="0..1: how much it matters.")] = 0.5
    branch: BranchName | None = None


class RecallArgs(_Args):
    """Arguments of the recall tool."""

    text: QueryText | None = None
    anchor: AnchorId | None = None
    branch: BranchName | None = None
    as_of: Annotated[int | None, Field(ge=0, description="Memory as it was after this seq.")] = None
    types: Annotated[list[ObjectType] | None, Field(max_length=5)] = None
    mode: Mode = "DEFAULT"
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = 20
    run_id: (
        Annotated[
            str,
            Field(
                description="The run the receipt names (default: this session's).",
                json_schema_extra={"pattern": _RUN_ID_PATTERN},
                min_length=1,
                max_length=200,
            ),
        ]
        | None
    ) = None
    receipt: Annotated[bool, Field(description="Write a READ_RECEIPT (default true).")] = True


class ItemArgs(_Args):
    """Arguments of the why tool."""

    item_id: ObjectId
    branch: BranchName | None = None


class BranchArgs(_Args):
    """Arguments of the snapshot tool."""

    branch: BranchName | None = None


class FalsifyArgs(_Args):
    """Arguments of the falsify tool."""

    item_id: ObjectId
    reason: Reason
    evidence: Annotated[list[EventId] | None, Field(max_length=MAX_IDS)] = None
    branch: BranchName | None = None


class CascadeArgs(_Args):
    """Arguments of the cascade tool."""

    item_id: ObjectId
    max_depth: Annotated[int, Field(ge=1, le=MAX_DEPTH)] = 3
    max_items: Annotated[int, Field(ge=1, le=MAX_ITEMS)] = 1000
    reason: Reason | None = None
    apply: Annotated[bool, Field(description="Write the CASCADE (default: a dry run).")] = False
    branch: BranchName | None = None


class NoArgs(_Args):
    """A tool without arguments."""


class BranchCreateArgs(_Args):
    """Arguments of the branch_create tool."""

    purpose: Purpose
    branch_type: BranchType = "SIMULATION"
    expiry_days: Annotated[int | None, Field(ge=1, le=MAX_EXPIRY_DAYS)] = None


class BranchMergeArgs(_Args):
    """Arguments of the branch_merge tool."""

    branch: BranchName
    objects: Annotated[list[ObjectId], Field(min_length=1, max_length=MAX_IDS)]
    strategy: Strategy = "PRESERVE_BOTH"
    reason: Reason | None = None


# -- results ----------------------------------------------------------------------------------


class RememberResult(_Result):
    """What remember wrote."""

    object_id: str
    branch: str
    seq: int
    entry_hash: str
    evidence_ids: list[str]
    recorded_event: str | None


class RecallResult(_Result):
    """What recall found."""

    results: list[Json]
    run_id: str | None


class WhyResult(_Result):
    """An object's history and evidence, each entry with its inclusion proof."""

    object: Json
    versions: list[Json]
    operations: list[Json]
    operations_outside_namespace: int
    evidence: list[Json]
    evidence_outside_namespace: int
    checkpoint: Json | None
    checkpoints: dict[str, Json | None]
    read_by: list[Json]


class HighWater(_Result):
    """The entry a root was taken after."""

    seq: int
    entry_hash: str
    tree_size: int
    tree_root: str


class ProjectionDigest(_Result):
    """One projection's commitment in a root (its content is not served)."""

    id: str
    rule: str
    digest: str


class RootResult(_Result):
    """A memory root's commitment: hash, place, state and high-water mark."""

    memory_root: str
    branch: str
    seq: int
    parent: str | None
    state: str
    replaces: str | None
    entry: str
    entry_branch: str
    v: int
    map: str | None = None  # the memory map's root a v2 root commits to (None for v1)
    high_water: HighWater
    projections: list[ProjectionDigest]


class SnapshotResult(RootResult):
    """A root and whether this call made it."""

    created: bool


class FalsifyResult(_Result):
    """The FALSIFY entry written."""

    item_id: str
    state: str
    branch: str
    seq: int
    entry_hash: str


class CascadeResult(_Result):
    """A cascade plan, and its entry when applied."""

    origin: Json
    branch: str
    max_depth: int
    max_items: int
    kinds: list[str]
    touched: list[Json]
    passed: list[Json]
    beyond: list[Json]
    roots_to_resnapshot: list[str]
    resnapshots: list[Json]
    dry_run: bool
    entry: Json | None


class VerifyResult(_Result):
    """The audit's verdict and counts (the findings themselves: `memroot verify`)."""

    ok: bool
    entries: int
    branches: int
    checkpoints: int
    findings: int
    notes: int
    truncated_findings: bool
    steps: dict[str, Json]


class BranchCreateResult(_Result):
    """The new branch."""

    branch_id: str


class BranchMergeResult(_Result):
    """What a selective merge did."""

    branch_id: str
    target_branch_id: str
    strategy: str
    items: list[Json]
    imported: list[str]
    rejected: list[str]
    merge_seq: int | None
    override_seq: int | None
    warning: str | None


# -- bodies -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call: the client's scope, its session's run id, the verify trusted state."""

    scope: Scope
    run_id: str
    trusted: Path | None


def _remember(c: Call, a: RememberArgs) -> Json:
    mem, branch = c.scope.mem, c.scope.branch(a.branch)
    recorded = None
    # One transaction: an assertion the rules refuse leaves no orphan evidence event behind.
    with mem.ledger.write():
        if a.evidence:
            ids = c.scope.events(a.evidence, branch)
        else:
            recorded = mem.record(content=a.source or a.value, role="USER", branch=branch)
            ids = [recorded.id]
        made = mem.remember(
            a.value,
            evidence=ids,
            object_type=a.object_type,
            epistemic_type=a.epistemic_type,
            source_type=a.source_type,
            confidence=a.confidence,
            salience=a.salience,
            branch=branch,
        )
    return {
        "object_id": made.id,
        "branch": made.branch,
        "seq": made.seq,
        "entry_hash": made.entry_hash.hex(),
        "evidence_ids": ids,
        "recorded_event": None if recorded is None else recorded.id,
    }


def _recall(c: Call, a: RecallArgs) -> Json:
    branch = c.scope.branch(a.branch)
    if a.anchor is not None:
        c.scope.event(a.anchor, branch)
    run = (a.run_id or c.run_id) if a.receipt else None
    results = c.scope.mem.recall(
        a.text,
        anchor=a.anchor,
        branch=branch,
        as_of=a.as_of,
        types=a.types or (),
        namespaces=(c.scope.namespace,),
        mode=a.mode,
        limit=a.limit,
        receipt=run,
    )
    out = []
    for r in results:
        d = r.to_dict()
        d["conflicts_with"] = c.scope.mine(d["conflicts_with"], branch)
        out.append(d)
    return {"results": out, "run_id": run}


def _why(c: Call, a: ItemArgs) -> Json:
    from memroot.memory_root.receipts import receipts

    scope = c.scope
    branch = scope.branch(a.branch)
    found = scope.object(a.item_id, branch)
    out = found.to_dict()
    # Another namespace's operations on this object (a RELATE, say) and events it cites are
    # counted, never shown.
    ns = scope.namespace
    ops = [o for o in found.operations if scope.event_namespace(o.seq, o.branch) == ns]
    out["operations"] = [o.to_dict() for o in ops]
    out["operations_outside_namespace"] = len(found.operations) - len(ops)
    mine = [e for e in found.evidence if scope.event_namespace(e.seq, e.branch) == ns]
    out["evidence"] = [e.to_dict() for e in mine]
    out["evidence_outside_namespace"] = len(found.evidence) - len(mine)
    oid = found.object.id
    out["read_by"] = [
        {"run_id": r.run_id, "branch": r.branch, "seq": r.seq, "actor_id": r.actor_id,
         "version": o["version"]}
        for r in receipts(scope.mem.ledger)
        if scope.event_namespace(r.seq, r.branch) == scope.namespace
        for o in r.objects
        if o["id"] == oid
    ]  # fmt: skip
    out.pop("at_anchor", None)
    return out


def root_json(record: Any) -> Json:
    """Return a root record's commitment as a tool result (no per-namespace content).

    The projections' item counts fold every namespace, so only their digests are served.
    """
    return dict(record.to_dict(counts=False))


def _snapshot(c: Call, a: BranchArgs) -> Json:
    result = c.scope.mem.snapshot(branch=c.scope.branch(a.branch))
    return {**root_json(result.record), "created": result.created}


def _falsify(c: Call, a: FalsifyArgs) -> Json:
    scope = c.scope
    branch = scope.branch(a.branch)
    scope.object(a.item_id, branch)
    evidence = scope.events(a.evidence or (), branch)
    done = scope.mem.falsify(a.item_id, a.reason, evidence=evidence, branch=branch)
    return {
        "item_id": a.item_id,
        "state": scope.mem.state(a.item_id, branch=branch),
        "branch": done.branch,
        "seq": done.seq,
        "entry_hash": done.entry_hash.hex(),
    }


def _cascade(c: Call, a: CascadeArgs) -> Json:
    from memroot.memory_root.falsify import CascadeResult as Applied
    from memroot.memory_root.falsify import Plan

    scope = c.scope
    branch = scope.branch(a.branch)
    scope.object(a.item_id, branch)
    applied = None
    # One write transaction when applying: the plan checked is the plan written (no other
    # writer can add a dependent between the check and the CASCADE).
    with scope.mem.ledger.write() if a.apply else contextlib.nullcontext():
        plan = scope.mem.cascade(
            a.item_id, max_depth=a.max_depth, max_items=a.max_items, dry_run=True, branch=branch
        )
        assert isinstance(plan, Plan)
        scope.check_plan(plan)
        if a.apply:
            out = scope.mem.cascade(
                a.item_id,
                max_depth=a.max_depth,
                max_items=a.max_items,
                reason=a.reason,
                branch=branch,
            )
            assert isinstance(out, Applied)
            plan, applied = out.plan, out
    r = plan.request
    entry = None
    if applied is not None:
        e = applied.appended[0]
        entry = {"branch": e.branch, "seq": e.seq, "entry_hash": e.entry_hash.hex()}
    return {
        "origin": {**r.origin.to_cbor(), "state": plan.origin_state},
        "branch": plan.branch,
        "max_depth": r.max_depth,
        "max_items": r.max_items,
        "kinds": list(r.kinds),
        "touched": [s.to_cbor() for s in plan.touched],
        "passed": [s.to_cbor() for s in plan.passed],
        "beyond": [s.to_cbor() for s in plan.beyond],
        "roots_to_resnapshot": list(plan.roots),
        "resnapshots": [
            {**x.to_cbor(), "branch": x.branch, "high_water": x.preimage.high_water.seq}
            for x in plan.resnapshots
        ],
        "dry_run": applied is None,
        "entry": entry,
    }


def _verify(c: Call, a: NoArgs) -> Json:
    report = c.scope.mem.verify(trusted=c.trusted)
    full = report.to_json()
    return {
        "ok": report.ok,
        "entries": report.entries,
        "branches": report.branches,
        "checkpoints": report.checkpoints,
        "findings": len(report.findings),
        "notes": len(report.notes),
        "truncated_findings": report.truncated_findings,
        "steps": full.get("steps", {}),
    }


def _branch_create(c: Call, a: BranchCreateArgs) -> Json:
    made = c.scope.mem.fork(a.purpose, branch_type=a.branch_type, expiry_days=a.expiry_days)
    return {"branch_id": made}


def _branch_merge(c: Call, a: BranchMergeArgs) -> Json:
    scope = c.scope
    branch = scope.branch(a.branch)
    if branch == "main":
        raise ValidationError("main has no parent to merge into", field="branch")
    objects = scope.objects(a.objects, branch)
    done = scope.mem.merge(branch, objects, strategy=a.strategy, reason=a.reason).to_json()
    return {k: done[k] for k in BranchMergeResult.model_fields}


# -- the table --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool: name, words, schemas, hints and body."""

    name: str
    title: str
    description: str
    args: type[_Args]
    result: type[_Result]
    annotations: ToolAnnotations
    body: Callable[[Call, Any], Json]


def _hints(
    title: str, *, read_only: bool, destructive: bool = False, idempotent: bool = False
) -> ToolAnnotations:
    return ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


def _spec(
    name: str,
    title: str,
    description: str,
    args: type[_Args],
    result: type[_Result],
    body: Callable[[Call, Any], Json],
    **hints: bool,
) -> ToolSpec:
    return ToolSpec(name, title, description, args, result, _hints(title, **hints), body)


TOOLS: Final[dict[str, ToolSpec]] = {
    t.name: t
    for t in (
        _spec(
            "remember",
            "Remember",
            "Remember a memory object, citing the events it was learned from. evidence: ids "
            "of events of this namespace already recorded; without it, source (or the value "
            "itself) is first recorded as an event, and the memory cites that event. branch: "
            "main or a branch of this namespace.",
            RememberArgs,
            RememberResult,
            _remember,
            read_only=False,
        ),
        _spec(
            "recall",
            "Recall",
            "Recall memory objects of this server's namespace, most recently changed first. "
            "Not read-only: unless receipt is false, it appends a READ_RECEIPT entry naming "
            "what was returned, under run_id (default: this session's run id). text: words "
            "to find; anchor: a conversation event (only memories derived from its path); "
            "as_of: memory as it was right after that entry seq; branch: main or a branch of "
            "this namespace.",
            RecallArgs,
            RecallResult,
            _recall,
            read_only=False,
        ),
        _spec(
            "why",
            "Why",
            "Explain a memory object of this namespace: its versions, the operations that "
            "made them and its evidence events, each with an inclusion proof against the "
            "signed checkpoint. read_by lists the runs of this namespace whose read receipts "
            "name it.",
            ItemArgs,
            WhyResult,
            _why,
            read_only=True,
            idempotent=True,
        ),
        _spec(
            "snapshot",
            "Snapshot",
            "Take a memory_root snapshot of the branch now and sign a checkpoint; when "
            "nothing changed since the last root, return it (created false) and write "
            "nothing. Roots fold every namespace, so only their commitment is returned.",
            BranchArgs,
            SnapshotResult,
            _snapshot,
            read_only=False,
            idempotent=True,
        ),
        _spec(
            "falsify",
            "Falsify",
            "Mark one memory object of this namespace falsified (a FALSIFY entry); what "
            "depends on it keeps its state until a cascade. Refused when it is already "
            "falsified.",
            FalsifyArgs,
            FalsifyResult,
            _falsify,
            read_only=False,
            destructive=True,
        ),
        _spec(
            "cascade",
            "Cascade",
            "Walk what depends on a falsified (or stale) memory object of this namespace, "
            "within max_depth and max_items; a dry run unless apply is true, which appends "
            "one CASCADE entry marking them stale. Refused when the walk reaches another "
            "namespace's objects.",
            CascadeArgs,
            CascadeResult,
            _cascade,
            read_only=False,
            destructive=True,
        ),
        _spec(
            "verify",
            "Verify",
            "Run every auditor step over the ledger; ok is false on any violation (counts "
            "per step; `memroot verify` prints the findings). Records the checked head in "
            "the server's trusted-state file, so a later rollback is found.",
            NoArgs,
            VerifyResult,
            _verify,
            read_only=False,
            idempotent=True,
        ),
        _spec(
            "branch_create",
            "Create a branch",
            "Fork a branch of main for simulation or planning, owned by this namespace; "
            "returns its id.",
            BranchCreateArgs,
            BranchCreateResult,
            _branch_create,
            read_only=False,
        ),
        _spec(
            "branch_merge",
            "Merge a branch",
            "Merge the named objects of a branch of this namespace into its parent "
            "(selective merge); PREFER_BRANCH may replace the parent's versions.",
            BranchMergeArgs,
            BranchMergeResult,
            _branch_merge,
            read_only=False,
            destructive=True,
        ),
    )
}
