"""Selective merge of a branch into its parent (RFC-0012 section 8).

``merge_branch(ledger, branch, object_ids, strategy=..., actor_id=...)`` brings the named
objects of a branch into its parent as new entries of the parent, in one transaction:

1. Refusals (nothing is written): no object list (a full-branch merge is not permitted); a
   COUNTERFACTUAL, SANDBOX or TEST branch (they never merge: not into canonical, and not into
   a parent that could carry them there); a discarded or archived branch; an object that is
   not the branch's own (absent, or inherited and unchanged); one that is not ACTIVE, or whose
   epistemic type is DEPRECATED; one falsified or stale in the branch (an import starts live:
   it would revive what the branch knows to be wrong or to re-check; restore it there
   first); one already imported by an earlier merge; HYPOTHETICAL
   objects (named: the merging actor reclassifies them with EPISTEMIC_TRANSITION in the
   branch first), and objects reclassified out of HYPOTHETICAL by someone other than the
   merging actor; PREFER_BRANCH without an ADMIN grant (RFC-0004) on every namespace involved.
2. Divergence is measured (``memroot.memory_root.divergence``); above 0.70 the result warns.
3. Conflicts (``conflict_key``): for each object, the parent's ACTIVE objects created after
   the fork with the same key, in the same namespace:

   - FACT: the entities it is about (its ABOUT_ENTITY edges, merged entities resolved to
     their primary, as each side sees them) and ``structured_value["attribute"]``;
   - TASK: ``structured_value["task_id"]``; INTENT: ``structured_value["intent_id"]``.

   An object without its key (or of another type) never conflicts.
4. Entries, in the parent: ``ENTITY_CREATE`` for entities the branch created that imported
   objects are about (same id); for each object an ``ASSERT`` with ``source_type`` IMPORTED,
   its ``asserted_by``, ``epistemic_type``, ``evidence_ids``, value, scores and validity kept
   (``payload.imported`` names the branch object), unless rejected; then per strategy for
   conflicting ones: PRESERVE_BOTH a ``CONTRADICTION_NOTED`` (CONTRADICTS edge) to each
   conflicting object, nothing resolved; PREFER_CANONICAL no import, the rejection logged;
   PREFER_BRANCH a ``DEPRECATE`` of each conflicting object and one ``MERGE_OVERRIDE`` alert
   (by memroot) listing the overrides. Last, one ``BRANCH_MERGE`` entry (RFC-0012 payload
   plus what was imported, rejected, deprecated and created, and the divergence).

Conflicts are checked against the parent as it was before the merge (two objects imported
together do not conflict with each other). Every entry goes through the layers' hooks, so the
memory model validates each (namespace permissions included) and a refusal rolls back all.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import apsw

from memroot.ledger.entries import OpInput, _library_op, check_uuid, new_uuid
from memroot.ledger.errors import NotFoundError, RefusedError, ValidationError
from memroot.ledger.ledger import Appended, Ledger
from memroot.ledger.vocab import (
    ActorType,
    EdgeType,
    EpistemicType,
    LifecycleState,
    MemoryType,
    OpType,
    Permission,
    SourceType,
    canonical,
)
from memroot.memory_root.branches import MERGEABLE_TYPES, BranchRegistry, get_branch
from memroot.memory_root.divergence import Divergence, fork_point, measure
from memroot.projections.backends import SqlState
from memroot.projections.hook import MemoryHook, sync
from memroot.projections.model import Entity, MemoryObject
from memroot.projections.query import LIVE, edges_of, object_history
from memroot.projections.rules import NAMESPACE_POLICY, PermissionRefused, RuleError
from memroot.projections.views import view_of

__all__ = [
    "POLICY_VERSION",
    "STRATEGIES",
    "MergeItem",
    "MergeResult",
    "conflict_key",
    "merge_branch",
    "merged_objects",
]

STRATEGIES: Final = ("PRESERVE_BOTH", "PREFER_CANONICAL", "PREFER_BRANCH")
POLICY_VERSION: Final = "memroot-merge/1"
_IDENTITY_KEY: Final = {MemoryType.TASK.value: "task_id", MemoryType.INTENT.value: "intent_id"}
_ACTIVE: Final = LifecycleState.ACTIVE.value


class _NoPolicy(PermissionRefused):
    """PREFER_BRANCH on a namespace without a policy: nobody holds ADMIN there (RFC-0004).

    A ``PermissionRefused`` (same attributes) whose message says only that: the
    namespace has no policy, so no grant can be explicit.
    """

    def __init__(self, actor_id: str, namespace_id: str) -> None:
        RuleError.__init__(
            self,
            NAMESPACE_POLICY,
            f"actor {actor_id!r} cannot merge with PREFER_BRANCH into namespace "
            f"{namespace_id!r}: it needs an explicit ADMIN grant (RFC-0012), and the namespace "
            "has no policy, so nobody holds one (create it with NAMESPACE_CREATE and GRANT "
            "ADMIN, or use another strategy)",
        )
        self.actor_id = actor_id
        self.namespace_id = namespace_id
        self.permission = Permission.ADMIN.value


@dataclass(frozen=True, slots=True)
class MergeItem:
    """What the merge did with one branch object."""

    object_id: str
    outcome: str  # IMPORTED or REJECTED
    new_object_id: str | None
    conflicts_with: tuple[str, ...] = ()
    deprecated: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "object_id": self.object_id,
            "outcome": self.outcome,
            "new_object_id": self.new_object_id,
            "conflicts_with": list(self.conflicts_with),
            "deprecated": list(self.deprecated),
        }


@dataclass(frozen=True, slots=True)
class MergeResult:
    """A merge that landed: its items, the entries written and the divergence measured."""

    branch_id: str
    target: str
    strategy: str
    items: tuple[MergeItem, ...]
    divergence: Divergence
    entities_created: tuple[str, ...]
    merge_seq: int
    override_seq: int | None
    entries: tuple[Appended, ...] = field(default=())

    @property
    def warning(self) -> str | None:
        """The divergence warning (RFC-0012 section 9), or None."""
        if not self.divergence.warning:
            return None
        return (
            f"divergence {self.divergence.divergence_score:.2f} is above 0.70: branch "
            f"{self.branch_id} and {self.target} differ a lot; the merge went ahead"
        )

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "branch_id": self.branch_id,
            "target_branch_id": self.target,
            "strategy": self.strategy,
            "items": [i.to_json() for i in self.items],
            "imported": [i.object_id for i in self.items if i.outcome == "IMPORTED"],
            "rejected": [i.object_id for i in self.items if i.outcome == "REJECTED"],
            "entities_created": list(self.entities_created),
            "merge_seq": self.merge_seq,
            "override_seq": self.override_seq,
            "divergence": self.divergence.to_json(),
            "warning": self.warning,
        }


def _about(db: apsw.Connection, obj_id: str, branch: str) -> list[Entity]:
    """Return the entities an object is about, as ``branch`` sees them (merges resolved)."""
    state = SqlState(db)
    out: dict[str, Entity] = {}
    for e in edges_of(db, obj_id, types=(EdgeType.ABOUT_ENTITY.value,), branch=branch):
        if e.source_id != obj_id:
            continue
        ent = state.entity(branch, e.target_id)
        seen: set[str] = set()
        while ent is not None and ent.merged_into is not None and ent.id not in seen:
            seen.add(ent.id)
            ent = state.entity(branch, ent.merged_into)
        if ent is not None:
            out.setdefault(ent.id, ent)
    return list(out.values())


def conflict_key(db: apsw.Connection, obj: MemoryObject, branch: str) -> tuple[Any, ...] | None:
    """Return what identifies the belief ``obj`` holds, for merge conflicts (None: nothing).

    FACT: ``(FACT, namespace, sorted entity ids, structured_value["attribute"])``; TASK and
    INTENT: ``(type, namespace, structured_value["task_id" | "intent_id"])``. Entities are
    read as ``branch`` sees them, merged ones resolved to their primary.
    """
    sv = obj.structured_value if isinstance(obj.structured_value, dict) else {}
    if obj.type == MemoryType.FACT:
        attribute = sv.get("attribute")
        if not isinstance(attribute, str):
            return None
        entities = tuple(sorted(e.id for e in _about(db, obj.id, branch)))
        return (obj.type, obj.namespace_id, entities, attribute)
    name = _IDENTITY_KEY.get(obj.type)
    if name is None or not isinstance(sv.get(name), str):
        return None
    return (obj.type, obj.namespace_id, sv[name])


def _conflicts(
    db: apsw.Connection, obj: MemoryObject, key: tuple[Any, ...], branch: str, target: str, f: int
) -> list[str]:
    """Return the target's ACTIVE objects created after the fork ``f`` with the same key."""
    path = "$.attribute" if obj.type == MemoryType.FACT else f"$.{_IDENTITY_KEY[obj.type]}"
    cond, params = view_of(db, target).versions("o", "mem_objects")
    rows: list[Any] = db.execute(
        f"SELECT o.id FROM mem_objects o WHERE {cond} AND o.branch = ? AND o.type = ? AND "
        "o.namespace_id = ? AND o.lifecycle_state = ? AND json_valid(o.structured_value) AND "
        "json_extract(o.structured_value, ?) = ? AND NOT EXISTS(SELECT 1 FROM mem_objects p "
        "WHERE p.id = o.id AND p.branch = o.branch AND p.vfrom <= ?) ORDER BY o.rid",
        (*params, target, obj.type, obj.namespace_id, _ACTIVE, path, key[-1], f),
    ).fetchall()
    state = SqlState(db)
    out: list[str] = []
    for (object_id,) in rows:
        other = state.obj(target, object_id)
        if other is not None and conflict_key(db, other, target) == key:
            out.append(object_id)
    return out


def merged_objects(db: apsw.Connection, branch: str) -> dict[str, tuple[str, int]]:
    """Return branch object id -> (imported object id, BRANCH_MERGE seq) of earlier merges."""
    found = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'branch_merges'"
    ).fetchone()
    if found is None:
        return {}
    return {
        r[0]: (r[1], r[2])
        for r in db.execute(
            "SELECT object_id, new_object_id, seq FROM branch_merges WHERE branch_id = ?",
            (branch,),
        )
    }


def _reclassified_by(ledger: Ledger, db: apsw.Connection, obj_id: str, branch: str) -> set[str]:
    """Actors who moved the object out of HYPOTHETICAL in the branch (its own versions)."""
    history = object_history(db, obj_id, branch=branch)
    out: set[str] = set()
    for prev, cur in itertools.pairwise(history):
        if (
            cur.branch == branch
            and prev.epistemic_type == EpistemicType.HYPOTHETICAL
            and cur.epistemic_type != EpistemicType.HYPOTHETICAL
        ):
            out.add(str(ledger.entry(cur.seq, branch).body["actor_id"]))
    return out


def _require_hooks(ledger: Ledger) -> None:
    hooks = ledger.hooks
    if not any(isinstance(h, MemoryHook) for h in hooks) or not any(
        isinstance(h, BranchRegistry) for h in hooks
    ):
        raise ValueError(
            "merge_branch needs a ledger opened with the MemoryHook and BranchRegistry hooks "
            "(cli.hooks.default_hooks), so every merged entry is validated"
        )


@dataclass(slots=True)
class _Plan:
    items: list[MergeItem] = field(default_factory=list)
    ops: list[Callable[[_By], OpInput]] = field(default_factory=list)
    entities: dict[str, Entity] = field(default_factory=dict)
    overridden: list[dict[str, str]] = field(default_factory=list)


def merge_branch(
    ledger: Ledger,
    branch: str,
    object_ids: Sequence[str],
    *,
    strategy: str = "PRESERVE_BOTH",
    actor_id: str,
    actor_type: str = ActorType.HUMAN_USER.value,
    reason: str | None = None,
    now: int | None = None,
) -> MergeResult:
    """Merge the named objects of ``branch`` into its parent (see the module docstring).

    Raises:
        ValidationError: no objects named, a malformed id, or an unknown strategy.
        NotFoundError: no such branch, or an object the branch does not hold.
        RefusedError: the branch type never merges, the branch is discarded or archived, an
            object is not the branch's own, not ACTIVE, falsified or stale, already imported,
            HYPOTHETICAL or
            reclassified by another actor (the message names every such object).
        PermissionRefused: PREFER_BRANCH without ADMIN, or a namespace policy refusing an
            entry of the merge (nothing is written).
        ValueError: if the ledger lacks the MemoryHook or BranchRegistry hook.
    """
    if not object_ids:
        raise ValidationError(
            "a merge names the objects it brings in (objects); merging a whole "
            "branch is not permitted (RFC-0012 section 8)",
            field="objects",
        )
    ids = list(dict.fromkeys(check_uuid(i, "objects") for i in object_ids))
    strategy = canonical(strategy, STRATEGIES, "strategy")
    _require_hooks(ledger)
    info = get_branch(ledger, branch)
    if info.type not in MERGEABLE_TYPES:
        raise RefusedError(
            f"branch {branch!r} is a {info.type} branch: {info.type} branches never merge into "
            "canonical (RFC-0012), nor into a parent that could carry them there; record what "
            "you concluded as new assertions in main"
        )
    if info.state in ("DISCARDED", "ARCHIVED"):
        raise RefusedError(f"branch {branch!r} is {info.state}: it no longer merges")
    sync(ledger)
    with ledger.bulk():
        db = ledger.derived.db
        fork = fork_point(db, branch)
        target = fork.parent
        div = measure(db, ledger, branch, now=now)
        plan = _plan(ledger, db, branch, target, fork.fork_seq, ids, strategy, actor_id)
        when = div.measured_at
        by = _By(actor_id, actor_type)
        ops = [_entity_op(by, e) for e in plan.entities.values()]
        ops += [make(by) for make in plan.ops]
        override = None
        if plan.overridden:
            override = Ledger.system_op(
                OpType.MERGE_OVERRIDE,
                {
                    "alert": "MERGE_OVERRIDE",
                    "branch_id": branch,
                    "target_branch_id": target,
                    "merged_by": actor_id,
                    "overridden": plan.overridden,
                },
                target_id=branch,
                target_type="BRANCH",
            )
            ops.append(_library_op(override))  # memroot's own (RESERVED_OPS)
        ops.append(
            OpInput(
                op_type=OpType.BRANCH_MERGE.value,
                actor_id=actor_id,
                actor_type=actor_type,
                namespace_id=info.namespace_id,
                payload={
                    "branch_id": branch,
                    "target_branch_id": target,
                    "merge_type": "SELECTIVE",
                    "included_object_ids": ids,
                    "conflict_resolution_policy": strategy,
                    "merged_by": actor_id,
                    "merged_at": dt.datetime.fromtimestamp(when / 1e6, dt.UTC).isoformat(),
                    "fork_seq": fork.fork_seq,
                    "reason": reason or f"selective merge of {len(ids)} object(s)",
                    "items": [i.to_json() for i in plan.items],
                    "entities_created": list(plan.entities),
                    "divergence": div.to_json(),
                },
                policy_version=POLICY_VERSION,
                target_id=branch,
                target_type="BRANCH",
            )
        )
        _library_op(ops[-1])  # the BRANCH_MERGE: memroot's own (RESERVED_OPS)
        made = ledger.append_batch(ops, branch=target)
    override_seq = None
    if override is not None:
        override_seq = next(a.seq for a in made if a.type == OpType.MERGE_OVERRIDE)
    merge_seq = next(a.seq for a in reversed(made) if a.type == OpType.BRANCH_MERGE)
    return MergeResult(
        branch,
        target,
        strategy,
        tuple(plan.items),
        div,
        tuple(plan.entities),
        merge_seq,
        override_seq,
        tuple(made),
    )


def _plan(
    ledger: Ledger,
    db: apsw.Connection,
    branch: str,
    target: str,
    fork_seq: int,
    ids: list[str],
    strategy: str,
    actor_id: str,
) -> _Plan:
    state = SqlState(db)
    objects: list[MemoryObject] = []
    problems: dict[str, list[str]] = {}
    done = merged_objects(db, branch)
    for object_id in ids:
        obj = state.obj(branch, object_id)
        if obj is None:
            raise NotFoundError(f"branch {branch!r} holds no memory object {object_id}")
        if obj.branch != branch:
            problems.setdefault("inherited from the parent and unchanged", []).append(obj.id)
        elif obj.id in done:
            new_id, seq = done[obj.id]
            problems.setdefault("already imported", []).append(
                f"{obj.id} (as {new_id}, entry {seq})"
            )
        elif obj.lifecycle_state != _ACTIVE:
            problems.setdefault("not ACTIVE", []).append(f"{obj.id} ({obj.lifecycle_state})")
        elif obj.epistemic_type == EpistemicType.HYPOTHETICAL:
            problems.setdefault(
                "HYPOTHETICAL: reclassify them with EPISTEMIC_TRANSITION (by the merging "
                "actor) in the branch first",
                [],
            ).append(obj.id)
        elif obj.epistemic_type == EpistemicType.DEPRECATED:
            problems.setdefault("epistemically DEPRECATED", []).append(obj.id)
        elif obj.state != LIVE:
            # SPEC 7: a falsified object is known to be wrong and a stale one is to be
            # re-checked; an import starts live, so merging either would revive it.
            problems.setdefault(
                "falsified or stale in the branch (an import would be live): re-check it "
                "and `memroot restore` it there first",
                [],
            ).append(f"{obj.id} ({obj.state})")
        else:
            others = _reclassified_by(ledger, db, obj.id, branch) - {actor_id}
            if others:
                problems.setdefault(
                    f"reclassified out of HYPOTHETICAL by someone other than {actor_id}", []
                ).append(f"{obj.id} (by {', '.join(sorted(others))})")
            for e in obj.evidence_ids:
                ev = state.event(branch, e)
                if ev is None or ev.erased_by is not None:
                    problems.setdefault("citing missing or erased evidence", []).append(obj.id)
                    break
        objects.append(obj)
    if problems:
        raise RefusedError(
            f"merge of branch {branch!r} refused; nothing was written: "
            + "; ".join(f"{why}: {', '.join(which)}" for why, which in problems.items())
        )
    if strategy == "PREFER_BRANCH":
        for ns in dict.fromkeys(o.namespace_id for o in objects):
            perms = state.permissions(target, ns, actor_id)
            if perms is None:
                raise _NoPolicy(actor_id, ns)
            if Permission.ADMIN.value not in perms:
                raise PermissionRefused(
                    actor_id,
                    ns,
                    Permission.ADMIN.value,
                    "merge with PREFER_BRANCH (RFC-0012: an explicit ADMIN grant)",
                )
    plan = _Plan()
    deprecated: set[str] = set()
    for obj in objects:
        key = conflict_key(db, obj, branch)
        conflicts = [] if key is None else _conflicts(db, obj, key, branch, target, fork_seq)
        if conflicts and strategy == "PREFER_CANONICAL":
            plan.items.append(MergeItem(obj.id, "REJECTED", None, tuple(conflicts)))
            continue
        new_id = new_uuid()
        about = _about(db, obj.id, branch)
        for ent in about:
            if state.entity(target, ent.id) is None:
                plan.entities.setdefault(ent.id, ent)
        plan.ops.append(
            partial(
                _import_op, obj=obj, new_id=new_id, branch=branch, entity_ids=[e.id for e in about]
            )
        )
        gone: list[str] = []
        for other in conflicts:
            if strategy == "PRESERVE_BOTH":
                plan.ops.append(
                    partial(_contradiction_op, obj=obj, new_id=new_id, other=other, branch=branch)
                )
            elif other not in deprecated:
                deprecated.add(other)
                gone.append(other)
                canonical = state.obj(target, other)
                assert canonical is not None  # _conflicts read it from this state
                plan.ops.append(
                    partial(_deprecate_op, obj=obj, new_id=new_id, other=canonical, branch=branch)
                )
                plan.overridden.append(
                    {
                        "canonical_object_id": other,
                        "imported_object_id": new_id,
                        "branch_object_id": obj.id,
                    }
                )
        plan.items.append(MergeItem(obj.id, "IMPORTED", new_id, tuple(conflicts), tuple(gone)))
    return plan


@dataclass(frozen=True, slots=True)
class _By:
    """The merging actor, who records every entry of the merge but the alert."""

    actor_id: str
    actor_type: str

    def op(
        self,
        op_type: OpType,
        namespace_id: str,
        payload: dict[str, Any],
        target_id: str,
        target_type: str,
    ) -> OpInput:
        return OpInput(
            op_type=op_type.value,
            actor_id=self.actor_id,
            actor_type=self.actor_type,
            namespace_id=namespace_id,
            payload=payload,
            policy_version=POLICY_VERSION,
            target_id=target_id,
            target_type=target_type,
        )


def _entity_op(by: _By, ent: Entity) -> OpInput:
    return by.op(
        OpType.ENTITY_CREATE,
        ent.namespace_id,
        {
            "entity_type": ent.type,
            "canonical_name": ent.canonical_name,
            "aliases": list(ent.aliases),
        },
        ent.id,
        "ENTITY",
    )


def _import_op(
    by: _By, obj: MemoryObject, new_id: str, branch: str, entity_ids: list[str]
) -> OpInput:
    payload: dict[str, Any] = {
        "object_type": obj.type,
        "epistemic_type": obj.epistemic_type,
        "source_type": SourceType.IMPORTED.value,
        "evidence_ids": list(obj.evidence_ids),
        "value": obj.value,
        "confidence": obj.confidence,
        "salience": obj.salience,
        "valid_from": obj.valid_from,
        "imported": {"branch": branch, "object_id": obj.id, "asserted_by": obj.asserted_by},
    }
    if obj.structured_value is not None:
        payload["structured_value"] = obj.structured_value
    if obj.valid_to is not None:
        payload["valid_to"] = obj.valid_to
    if entity_ids:
        payload["entity_ids"] = entity_ids
    if obj.condition is not None:
        payload["condition"] = {"text": obj.condition, "state": obj.condition_state or "UNKNOWN"}
    return by.op(OpType.ASSERT, obj.namespace_id, payload, new_id, "MEMORY_OBJECT")


def _contradiction_op(by: _By, obj: MemoryObject, new_id: str, other: str, branch: str) -> OpInput:
    return by.op(
        OpType.CONTRADICTION_NOTED,
        obj.namespace_id,
        {
            "object_id_a": new_id,
            "object_id_b": other,
            "conflict_description": (
                f"merge of branch {branch}: object {obj.id} (imported as {new_id}) and "
                f"canonical object {other} hold the same belief differently (PRESERVE_BOTH)"
            ),
        },
        new_id,
        "MEMORY_OBJECT",
    )


def _deprecate_op(
    by: _By, obj: MemoryObject, new_id: str, other: MemoryObject, branch: str
) -> OpInput:
    return by.op(
        OpType.DEPRECATE,
        other.namespace_id,
        {
            "reason": (
                f"MERGE_OVERRIDE: branch {branch} object {obj.id} (imported as {new_id}) "
                "preferred over this object (PREFER_BRANCH)"
            ),
            "deprecated_by": new_id,
        },
        other.id,
        "MEMORY_OBJECT",
    )
