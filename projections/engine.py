"""The memory model's rules: fold one ledger entry into the derived state, or refuse it.

``Engine.apply(entry)`` validates an event or an RFC-0002 operation against the current state
(payload schema, referenced ids exist and are in the right state, lifecycle and epistemic
rules, namespace policy) and then writes the new versions through a ``StateStore``. Every
handler checks everything before it writes anything, so a refused entry leaves the state as it
was, whichever store is underneath. Operations this layer does not own (SNAPSHOT, FALSIFY,
BRANCH_*, ...) pass through untouched; ``HANDLERS`` is the table later layers extend (a
handler changes an object through ``Engine._mutate``, which keeps branch writes on the
branch).

Identities the engine derives are functions of the ledger alone (C1, C3): a new object or
entity takes the operation's ``target_id`` when given, else the operation's own id; edges take
``derived_id(op_id, n)``, a UUIDv8 hashed from the operation id and a counter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from operator import is_
from typing import Any, Final, NamedTuple

from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind, check_uuid
from memroot.ledger.errors import RefusedError, ValidationError
from memroot.ledger.hashing import sha256
from memroot.ledger.vocab import (
    EdgeType,
    EpistemicType,
    LifecycleState,
    MemoryType,
    OpType,
    Permission,
    SourceType,
)
from memroot.projections import gated, rules
from memroot.projections.backends import StateStore
from memroot.projections.epistemic import check_transition, starting_confidence
from memroot.projections.handlers import Op
from memroot.projections.lifecycle import check_lifecycle
from memroot.projections.model import Edge, Entity, EventRef, Grant, MemoryObject, Namespace, evolve
from memroot.projections.rules import PermissionRefused, RuleError
from memroot.projections.states import STATE_HANDLERS
from memroot.projections.views import fork_from_genesis

__all__ = ["HANDLERS", "Engine", "EventRows", "Op", "derived_id", "event_rows"]

_ACTIVE: Final = LifecycleState.ACTIVE.value
_OBJECT: Final = "MEMORY_OBJECT"
_EPS: Final = 1e-9
_P = Permission
_POLICY_OPS: Final = frozenset({OpType.NAMESPACE_CREATE, OpType.GRANT, OpType.REVOKE})


_VARIANT: Final = {f"{i:x}": f"{(i & 3) | 8:x}" for i in range(16)}
_ID_PREFIX: Final = b"memroot/derived-id/v1\x00"


def derived_id(op_id: str, n: int) -> str:
    """Return the UUIDv8 of the ``n``-th thing operation ``op_id`` creates besides itself.

    The first 16 bytes of ``SHA-256("memroot/derived-id/v1" || 0x00 || "<op_id>/<n>")`` with
    the RFC 9562 version (8) and variant bits set.
    """
    if _N is not None and type(op_id) is str and type(n) is int:
        try:
            return _N.derived_id(op_id, n)
        except (_N.Reject, OverflowError):
            pass  # the reference's encoding raises (or formats a count beyond 64 bits)
    # domain_hash(_ID_TAG, ...) spelled out, with the tag's bytes prepared once.
    h = sha256(_ID_PREFIX + f"{op_id}/{n}".encode()).hex()
    return f"{h[:8]}-{h[8:12]}-8{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


Handler = Callable[["Engine", Op], None]


class EventRows(NamedTuple):
    """The rows a run of events of one branch folds into, built in one pass (``event_rows``)."""

    events: list[tuple[str, str, int, int, str, str, None]]
    """``mem_events`` rows, as ``EventRef.row()`` of each event."""
    conv: list[tuple[str, str | None, str, int]]
    """``mem_conv`` rows (``gated.on_events``)."""
    parents: list[tuple[str, str | None]]
    """``conv_parents`` rows (``anchors.ConversationTree.rows``)."""
    keys: list[tuple[str, str]]
    """The distinct ``(actor_id, namespace_id)`` pairs, in the order they first appear."""
    contexts: list[int]
    """Positions of the events whose body has a ``context``."""


def event_rows(entries: Sequence[Entry]) -> EventRows | None:
    """Return every layer's rows of a run of events of one branch, from the native core.

    None without the native core, or when it refuses the run (an entry that is not an event
    or of another branch, a body field missing or of an unexpected type): each layer then
    builds its rows with its own reference loop, which raises (or keeps) what it always did.
    The rows are exactly the ones those loops build.
    """
    if _N is None or not entries:
        return None
    last = _LAST_RUN[0]
    if last is not None and len(last[0]) == len(entries) and all(map(is_, last[0], entries)):
        return last[1]
    try:
        rows: EventRows | None = EventRows(
            *_N.event_rows(entries if type(entries) is list else list(entries), Kind.EVENT)
        )
    except _N.Reject:
        rows = None
    _LAST_RUN[0] = (tuple(entries), rows)
    return rows


_LAST_RUN: list[tuple[tuple[Entry, ...], EventRows | None] | None] = [None]
"""The last run ``event_rows`` was asked about (its entries, their rows): a replay folds each
run through the memory model and then the layers' feeds (``LayerTablesRebuild``), which ask
about the same run. The rows are a function of the entries alone (an ``Entry`` and its body
are never changed once read), so the same entry objects, in order, get the same rows; any
other run is computed. The rows' lists are only read by their users, never changed."""


class Engine:
    """The rules of the memory model over one ``StateStore``."""

    def __init__(self, state: StateStore) -> None:
        """Fold entries into ``state``."""
        self.state = state

    # -- entry points --------------------------------------------------------------------------

    def apply(self, entry: Entry) -> None:
        """Validate one entry and fold it into the state.

        Every branch is folded. A branch reads its own rows over its parent's as of the fork
        (``memroot.projections.views``; the fork is learned from the branch's genesis entry) and
        writes only rows of its own: mutating an inherited object or entity opens the
        branch's first version of it (``_mutate``), and the parent's state is untouched.
        Namespace policy is inherited from the parent at the fork and is changed in the
        canonical branch only.

        Raises:
            ValidationError: a payload field is missing or malformed.
            RuleError: the entry breaks a rule of the memory model (the rule is named).
        """
        if entry.kind is Kind.EVENT:
            self._event(entry)
            gated.on_event(self, entry)
        elif entry.kind is Kind.OP:
            handler = HANDLERS.get(entry.type)
            if handler is not None:
                if entry.branch != CANONICAL_BRANCH and entry.type in _POLICY_OPS:
                    raise RuleError(
                        rules.NAMESPACE_POLICY,
                        f"{entry.type} in branch {entry.branch!r}: a branch inherits namespace "
                        "policy from its parent at the fork; change policy in main",
                    )
                op = Op.from_entry(entry)
                if entry.type in gated.GATED_OPS:
                    # Lifecycle changes are gated by their provenance (projections.gated).
                    gated.run(self, handler, op)
                else:
                    handler(self, op)
        elif entry.kind is Kind.GENESIS and entry.branch != CANONICAL_BRANCH:
            fork = fork_from_genesis(entry.branch, entry.body)
            if fork is None:
                raise RuleError(
                    rules.REFERENCE,
                    f"the genesis of branch {entry.branch!r} names no parent anchor",
                )
            self.state.add_fork(fork)

    def apply_events(self, entries: Iterable[Entry]) -> None:
        """Validate and fold a run of events, as ``apply`` on each in turn.

        Raises:
            RuleError: an event breaks a rule (namespace policy: ``PermissionRefused``).
        """
        entries = list(entries)
        native = event_rows(entries)
        if native is not None:
            branch = entries[0].branch
            # The pairs in the order they first appear: the first refused is the reference's.
            for actor, namespace in native.keys:
                self.require(branch, actor, namespace, _P.WRITE, "append an event")
            self._add_event_rows(native.events)
            gated.on_conv_rows(self, native.conv)
            return
        # Events change no policy: an actor's permission is the same for the whole run.
        allowed: set[tuple[str, str, str]] = set()
        # ``EventRef.row()`` of each event, built as tuples (no EventRef per event).
        rows: list[tuple[str, str, int, int, str, str, None]] = []
        for entry in entries:
            b = entry.body
            actor, namespace = b["actor_id"], b["namespace_id"]
            if (entry.branch, actor, namespace) not in allowed:
                self.require(entry.branch, actor, namespace, _P.WRITE, "append an event")
                allowed.add((entry.branch, actor, namespace))
            rows.append((b["id"], entry.branch, entry.seq, entry.ts, namespace, actor, None))
        self._add_event_rows(rows)
        gated.on_events(self, entries)

    def fold(self, entry: Entry) -> None:
        """Apply an entry already in the ledger; record it as skipped if the rules refuse it.

        Used by replay and catch-up: an entry appended without the memory hook may break the
        rules, and replay must then skip it exactly as the stored state did. With an
        ``SqlState`` the caller wraps this in a savepoint; handlers write only after every
        check, so a refusal leaves a ``MemState`` untouched as well.
        """
        try:
            self.apply(entry)
        except RefusedError as e:
            self.state.skip(entry.branch, entry.seq, entry.type, str(e))
        self.state.set_head(entry.branch, entry.seq + 1)

    def fold_events(self, entries: Sequence[Entry]) -> None:
        """``fold`` each of a run of events of one branch, in one go (replay's chunk path).

        The same rows as ``fold`` on each in turn: an event the namespace policy refuses is
        recorded as skipped (in order) and leaves no row; the others are added, their
        ``mem_conv`` rows written with one statement (``gated.on_events``), and the head
        moves past the last. Events change no policy, so an actor's permission is read once
        per run; nothing reads the state between two events of the run.
        """
        if not entries:
            return
        state = self.state
        native = event_rows(entries)
        if native is not None and self._may_write(entries[0].branch, native.keys):
            # Every event is kept (the usual run): the rows as the loop below builds them.
            self._add_event_rows(native.events)
            gated.on_conv_rows(self, native.conv)
            last = entries[-1]
            state.set_head(last.branch, last.seq + 1)
            return
        # ``EventRef.row()`` of each event kept, built as tuples (``add_event_rows``)
        rows: list[tuple[str, str, int, int, str, str, None]] = []
        # (branch, actor, namespace) -> the refusal, or None when the actor may write
        refused: dict[tuple[str, str, str], PermissionRefused | None] = {}
        kept: list[Entry] = []
        for entry in entries:
            b = entry.body
            actor, namespace = b["actor_id"], b["namespace_id"]
            key = (entry.branch, actor, namespace)
            try:
                why = refused[key]
            except KeyError:
                try:
                    self.require(entry.branch, actor, namespace, _P.WRITE, "append an event")
                    why = None
                except PermissionRefused as e:
                    why = e
                refused[key] = why
            if why is not None:
                state.skip(entry.branch, entry.seq, entry.type, str(why))
                continue
            rows.append((b["id"], entry.branch, entry.seq, entry.ts, namespace, actor, None))
            kept.append(entry)
        self._add_event_rows(rows)
        gated.on_events(self, kept)
        last = entries[-1]
        state.set_head(last.branch, last.seq + 1)

    def _add_event_rows(self, rows: list[tuple[str, str, int, int, str, str, None]]) -> None:
        add_event_rows = getattr(self.state, "add_event_rows", None)
        if add_event_rows is not None:
            add_event_rows(rows)
        else:
            for row in rows:
                self.state.add_event(EventRef(*row))

    def _may_write(self, branch: str, keys: Iterable[tuple[str, str]]) -> bool:
        """Return True when every ``(actor, namespace)`` pair may append an event."""
        try:
            for actor, namespace in keys:
                self.require(branch, actor, namespace, _P.WRITE, "append an event")
        except PermissionRefused:
            return False
        return True

    # -- shared checks -------------------------------------------------------------------------

    def require(
        self, branch: str, actor_id: str, namespace_id: str, permission: str, what: str
    ) -> None:
        """Refuse unless the namespace has no policy or grants the actor ``permission``.

        Raises:
            PermissionRefused: naming actor, namespace and permission.
        """
        perms = self.state.permissions(branch, namespace_id, actor_id)
        if perms is not None and permission not in perms:
            raise PermissionRefused(actor_id, namespace_id, permission, what)

    def _target_type(self, op: Op, expected: str) -> None:
        if op.target_type is not None and op.target_type != expected:
            raise ValidationError(
                f"{op.op_type} acts on a {expected}; target_type is {op.target_type!r}",
                field="target_type",
            )

    def _target_object(self, op: Op) -> MemoryObject:
        self._target_type(op, _OBJECT)
        if op.target_id is None:
            raise ValidationError(
                f"{op.op_type} needs target_id: the memory object it changes", field="target_id"
            )
        return self._object(op, check_uuid(op.target_id, "target_id"), "target")

    def _object(self, op: Op, object_id: str, what: str) -> MemoryObject:
        obj = self.state.obj(op.branch, object_id)
        if obj is None:
            raise RuleError(
                rules.REFERENCE, f"{op.op_type} {what} object {object_id} does not exist"
            )
        return obj

    def _active(self, op: Op, obj: MemoryObject, what: str) -> None:
        if obj.lifecycle_state != _ACTIVE:
            raise RuleError(
                rules.LIFECYCLE,
                f"{op.op_type} needs an ACTIVE {what}; object {obj.id} is {obj.lifecycle_state}",
            )

    def _same_target(self, op: Op, expected: str, what: str) -> None:
        if op.target_id is not None and op.target_id != expected:
            raise ValidationError(
                f"{op.op_type} target_id must be {what} ({expected})", field="target_id"
            )

    def _evidence(self, op: Op, event_ids: Iterable[str]) -> None:
        for event_id in event_ids:
            ev = self.state.event(op.branch, event_id)
            if ev is None:
                raise RuleError(
                    rules.EVIDENCE,
                    f"evidence event {event_id} does not exist on branch {op.branch}",
                )
            if ev.erased_by is not None:
                raise RuleError(
                    rules.EVIDENCE, f"evidence event {event_id} was erased by entry {ev.erased_by}"
                )
            if ev.namespace_id != op.namespace_id:
                self.require(
                    op.branch,
                    op.actor_id,
                    ev.namespace_id,
                    _P.READ,
                    f"cite event {event_id} as evidence",
                )

    def _resolve_entity(self, op: Op, entity_id: str) -> Entity:
        """Return the entity, or the primary it was merged into (references resolve)."""
        ent = self.state.entity(op.branch, entity_id)
        if ent is None:
            raise RuleError(
                rules.REFERENCE, f"{op.op_type} names entity {entity_id}, which does not exist"
            )
        seen = {ent.id}
        while ent.merged_into is not None:
            nxt = self.state.entity(op.branch, ent.merged_into)
            if nxt is None or nxt.id in seen:  # pragma: no cover - merges never make cycles
                raise RuleError(rules.ENTITY, f"entity {entity_id} has a broken merge chain")
            seen.add(nxt.id)
            ent = nxt
        return ent

    def _node(self, op: Op, node_id: str, kinds: tuple[str, ...]) -> tuple[str, str, bool]:
        """Return ``(id, namespace, is_entity)`` of an edge endpoint (entities resolved)."""
        if "object" in kinds:
            obj = self.state.obj(op.branch, node_id)
            if obj is not None:
                return obj.id, obj.namespace_id, False
        if "entity" in kinds and self.state.entity(op.branch, node_id) is not None:
            ent = self._resolve_entity(op, node_id)
            return ent.id, ent.namespace_id, True
        raise RuleError(
            rules.REFERENCE,
            f"{op.op_type} endpoint {node_id} is not an existing {' or '.join(kinds)}",
        )

    def _fresh_id(self, op: Op, new_id: str) -> None:
        if self.state.used(op.branch, new_id):
            raise RuleError(rules.IDENTITY, f"id {new_id} is already used; ids are never reused")

    # -- writes ---------------------------------------------------------------------------------

    def _edge(
        self,
        op: Op,
        n: int,
        edge_type: str,
        source: str,
        target: str,
        *,
        confidence: float = 1.0,
        valid_from: int | None = None,
        valid_to: int | None = None,
        label: str | None = None,
    ) -> None:
        self.state.add_edge(
            Edge(
                derived_id(op.id, n),
                edge_type,
                source,
                target,
                op.ts,
                op.actor_id,
                confidence,
                op.ts if valid_from is None else valid_from,
                valid_to,
                label,
                op.branch,
                op.seq,
            )
        )

    def _touch_entity(self, op: Op, entity_id: str) -> None:
        """Move an entity's last_seen_at to this operation's time (a new version)."""
        ent = self.state.entity(op.branch, entity_id)
        if ent is not None and op.ts > ent.last_seen_at:
            self.state.put_entity(
                evolve(ent, last_seen_at=op.ts, seq=op.seq, branch=op.branch), new=False
            )

    def _mutate(self, op: Op, obj: MemoryObject, **changes: Any) -> None:
        """Open the next version of ``obj`` on the operation's branch.

        Handlers change objects through here: on a branch, the new version belongs to the
        branch even when ``obj`` is the parent's (copy on write; the parent is untouched).
        """
        self.state.put_object(
            evolve(
                obj,
                version=obj.version + 1,
                last_modified_at=max(obj.last_modified_at, op.ts),
                seq=op.seq,
                branch=op.branch,
                **changes,
            ),
            new=False,
        )

    # -- events ---------------------------------------------------------------------------------

    def _event(self, entry: Entry) -> None:
        b = entry.body
        self.require(entry.branch, b["actor_id"], b["namespace_id"], _P.WRITE, "append an event")
        self.state.add_event(
            EventRef(b["id"], entry.branch, entry.seq, entry.ts, b["namespace_id"], b["actor_id"])
        )


# -- operation handlers --------------------------------------------------------------------------


def _assert(eng: Engine, op: Op) -> None:
    p = op.p
    eng._target_type(op, _OBJECT)
    object_id = op.id if op.target_id is None else check_uuid(op.target_id, "target_id")
    eng._fresh_id(op, object_id)
    eng.require(op.branch, op.actor_id, op.namespace_id, _P.ASSERT, "ASSERT a memory object")
    epistemic, source = p["epistemic_type"], p["source_type"]
    imported = p["imported"]
    if imported is not None:
        _check_import(op, epistemic, source)
    start = starting_confidence(epistemic, source)
    confidence = p["confidence"]
    if start is None:
        if confidence is None:
            raise RuleError(
                rules.STARTING_CONFIDENCE,
                f"{epistemic} from a {source} source has no default; give payload.confidence",
            )
    elif confidence is not None and abs(confidence - start) > _EPS:
        raise RuleError(
            rules.STARTING_CONFIDENCE,
            f"{epistemic} from a {source} source starts "
            f"at {start}, not {confidence} (give the "
            "default or null)",
        )
    else:
        confidence = start
    condition = p["condition"]
    if (epistemic == EpistemicType.CONDITIONAL) != (condition is not None):
        raise ValidationError(
            "a CONDITIONAL object needs payload.condition, and only a CONDITIONAL object takes one",
            field="payload.condition",
        )
    valid_from = op.ts if p["valid_from"] is None else p["valid_from"]
    if p["valid_to"] is not None and p["valid_to"] < valid_from:
        raise ValidationError(
            "ASSERT payload.valid_to is before valid_from", field="payload.valid_to"
        )
    evidence = p["evidence_ids"]
    if imported is None:
        eng._evidence(op, evidence)
    else:
        # An imported object keeps the evidence it had in the branch it comes from. Events
        # this branch sees are checked as usual; the others lie in the source branch, where
        # the merge checked them when it was appended (replay folds a branch after its
        # parent, so the parent's state cannot check them here, deterministically).
        eng._evidence(op, [e for e in evidence if eng.state.event(op.branch, e) is not None])
    entities = list(
        {e.id: e for e in (eng._resolve_entity(op, x) for x in (p["entity_ids"] or ()))}.values()
    )
    obj = MemoryObject(
        object_id,
        p["object_type"],
        1,
        epistemic,
        source,
        evidence,
        op.actor_id if imported is None else imported[2],
        valid_from,
        p["valid_to"],
        op.ts,
        op.ts,
        _ACTIVE,
        None,
        confidence,
        p["salience"],
        op.namespace_id,
        p["value"],
        p["structured_value"],
        None if condition is None else condition[0],
        None if condition is None else condition[1],
        "live",
        op.branch,
        op.seq,
    )
    eng.state.put_object(obj, new=True)
    n = 0
    for event_id in evidence:
        eng._edge(op, n, EdgeType.DERIVED_FROM, object_id, event_id)
        n += 1
    for ent in entities:
        eng._edge(op, n, EdgeType.ABOUT_ENTITY, object_id, ent.id)
        eng._touch_entity(op, ent.id)
        n += 1


def _check_import(op: Op, epistemic: str, source: str) -> None:
    """RFC-0012 section 8: an import is IMPORTED, never HYPOTHETICAL, from another branch."""
    if source != SourceType.IMPORTED:
        raise ValidationError(
            f"an ASSERT with payload.imported has source_type IMPORTED, not {source}",
            field="payload.source_type",
        )
    if epistemic == EpistemicType.HYPOTHETICAL:
        raise RuleError(
            rules.MERGE,
            "a HYPOTHETICAL object is not merged: the merging actor reclassifies it with "
            "EPISTEMIC_TRANSITION in the branch first",
        )
    if op.p["imported"][0] == op.branch:
        raise RuleError(rules.MERGE, f"an object is imported from another branch, not {op.branch}")


def _lifecycle(target: str) -> Handler:
    def handle(eng: Engine, op: Op) -> None:
        obj = eng._target_object(op)
        check_lifecycle(obj.id, obj.lifecycle_state, target)
        eng.require(
            op.branch, op.actor_id, obj.namespace_id, _P.DEPRECATE, f"{op.op_type} object {obj.id}"
        )
        eng._mutate(op, obj, lifecycle_state=target)

    return handle


def _superseded(eng: Engine, op: Op, old: MemoryObject, new: MemoryObject) -> None:
    """Check that ``new`` may supersede ``old`` (both ACTIVE, same type, distinct)."""
    if new.id == old.id:
        raise RuleError(rules.LIFECYCLE, f"object {old.id} cannot supersede itself")
    eng._active(op, new, "superseding object")
    if new.type != old.type:
        raise RuleError(
            rules.LIFECYCLE,
            f"object {old.id} is a {old.type}; it can only be "
            f"superseded by a newer version of the same fact, not "
            f"a {new.type}",
        )
    check_lifecycle(old.id, old.lifecycle_state, LifecycleState.SUPERSEDED)
    eng.require(
        op.branch, op.actor_id, old.namespace_id, _P.DEPRECATE, f"{op.op_type} object {old.id}"
    )


def _supersede_write(eng: Engine, op: Op, old: MemoryObject, new_id: str, n: int) -> None:
    valid_to = old.valid_to if old.valid_to is not None else max(op.ts, old.valid_from)
    eng._mutate(
        op,
        old,
        lifecycle_state=LifecycleState.SUPERSEDED.value,
        superseded_by=new_id,
        valid_to=valid_to,
    )
    eng._edge(op, n, EdgeType.SUPERSEDES, new_id, old.id)


def _supersede(eng: Engine, op: Op) -> None:
    old = eng._target_object(op)
    new = eng._object(op, op.p["new_object_id"], "new")
    _superseded(eng, op, old, new)
    _supersede_write(eng, op, old, new.id, 0)


def _tombstone(eng: Engine, op: Op) -> None:
    p = op.p
    event_id = p["target_event_id"]
    eng._target_type(op, "EVENT")
    eng._same_target(op, event_id, "the event erased")
    ev = eng.state.event(op.branch, event_id)
    if ev is None:
        raise RuleError(rules.REFERENCE, f"TOMBSTONE target event {event_id} does not exist")
    if ev.branch != op.branch:
        # The ledger erases content on the entry's own branch only; a parent's event seen
        # through the fork is not the branch's to erase.
        raise RuleError(
            rules.REFERENCE,
            f"TOMBSTONE target event {event_id} is on branch {ev.branch}, not {op.branch}",
        )
    if ev.erased_by is not None:
        raise RuleError(
            rules.EVIDENCE, f"event {event_id} was already erased by entry {ev.erased_by}"
        )
    eng.require(op.branch, op.actor_id, ev.namespace_id, _P.ADMIN, f"erase event {event_id}")
    dependents = [
        o
        for o in (
            eng.state.obj(op.branch, i)
            for i in dict.fromkeys(eng.state.citing(op.branch, event_id))
        )
        if o is not None and o.lifecycle_state == _ACTIVE
    ]
    mode = p["on_dependents"]
    if dependents and mode is None:
        shown = ", ".join(o.id for o in dependents[:3]) + (" ..." if len(dependents) > 3 else "")
        raise RuleError(
            rules.TOMBSTONE_DEPENDENTS,
            f"event {event_id} is evidence of "
            f"{len(dependents)} ACTIVE object(s) "
            f"({shown}); say what happens to them with "
            "payload.on_dependents: DEPRECATE, ARCHIVE "
            "or KEEP",
        )
    target = {
        "DEPRECATE": LifecycleState.DEPRECATED.value,
        "ARCHIVE": LifecycleState.ARCHIVED.value,
    }.get(mode or "")
    for o in dependents:
        if target is None:
            left = [
                e
                for e in o.evidence_ids
                if e != event_id
                and ((x := eng.state.event(op.branch, e)) is not None and x.erased_by is None)
            ]
            if not left:
                raise RuleError(
                    rules.TOMBSTONE_DEPENDENTS,
                    f"on_dependents KEEP would leave ACTIVE object {o.id} without evidence",
                )
        else:
            check_lifecycle(o.id, o.lifecycle_state, target)
            eng.require(
                op.branch,
                op.actor_id,
                o.namespace_id,
                _P.DEPRECATE,
                f"{mode} object {o.id} whose evidence is erased",
            )
    eng.state.erase_event(event_id, op.seq)
    if target is not None:
        for o in dependents:
            eng._mutate(op, o, lifecycle_state=target)


def _transition(eng: Engine, op: Op) -> None:
    p = op.p
    obj = eng._target_object(op)
    eng._active(op, obj, "object")
    if p["from_type"] != obj.epistemic_type:
        raise RuleError(
            rules.EPISTEMIC_TRANSITION,
            f"from_type {p['from_type']} does not match "
            f"object {obj.id}'s current type "
            f"{obj.epistemic_type}",
        )
    check_transition(obj.id, obj.epistemic_type, p["to_type"])
    permission = _P.DEPRECATE if p["to_type"] == EpistemicType.DEPRECATED else _P.WRITE
    eng.require(
        op.branch,
        op.actor_id,
        obj.namespace_id,
        permission,
        f"EPISTEMIC_TRANSITION of object {obj.id}",
    )
    added = tuple(e for e in p["evidence_ids"] if e not in obj.evidence_ids)
    eng._evidence(op, added)
    eng._mutate(op, obj, epistemic_type=p["to_type"], evidence_ids=obj.evidence_ids + added)
    for n, event_id in enumerate(added):
        eng._edge(op, n, EdgeType.DERIVED_FROM, obj.id, event_id)


def _contradiction(eng: Engine, op: Op) -> None:
    p = op.p
    a, b = p["object_id_a"], p["object_id_b"]
    eng._target_type(op, _OBJECT)
    eng._same_target(op, a, "object_id_a")
    if a == b:
        raise RuleError(rules.GRAPH, f"object {a} cannot contradict itself")
    oa, ob = eng._object(op, a, "object_id_a"), eng._object(op, b, "object_id_b")
    for o in (oa, ob):
        eng.require(
            op.branch,
            op.actor_id,
            o.namespace_id,
            _P.WRITE,
            f"note a contradiction on object {o.id}",
        )
    # RFC-0003: noting a contradiction links the two and resolves nothing.
    confidence = 1.0 if p["confidence"] is None else p["confidence"]
    eng._edge(op, 0, EdgeType.CONTRADICTS, a, b, confidence=confidence)


def _check_scores(
    op: Op,
    obj: MemoryObject,
    delta: float,
    new_confidence: float,
    new_salience: float,
    direction: int,
) -> None:
    """Scores stay in [0, 1] (the schema), move one way, and by no more than ``delta``."""
    for name, old, new in (
        ("confidence", obj.confidence, new_confidence),
        ("salience", obj.salience, new_salience),
    ):
        moved = (new - old) * direction
        if moved < -_EPS:
            way = "raise" if direction > 0 else "lower"
            raise RuleError(
                rules.SCORING,
                f"{op.op_type} may only {way} {name}: object "
                f"{obj.id} has {old}, payload says {new}",
            )
        if moved > delta + _EPS:
            raise RuleError(
                rules.SCORING,
                f"{op.op_type} moves {name} of object {obj.id} from "
                f"{old} to {new}, more than its delta {delta}",
            )


def _scores(eng: Engine, op: Op) -> None:
    p = op.p
    obj = eng._target_object(op)
    eng._active(op, obj, "object")
    if op.op_type == OpType.DECAY_APPLIED:
        conf, sal, delta, direction = p["new_confidence"], p["new_salience"], p["decay_delta"], -1
    elif op.op_type == OpType.REINFORCE:
        conf, sal, delta, direction = p["new_confidence"], p["new_salience"], p["delta"], 1
    else:
        conf, sal, delta, direction = p["new_confidence"], obj.salience, p["delta"], -1
    _check_scores(op, obj, delta, conf, sal, direction)
    eng.require(op.branch, op.actor_id, obj.namespace_id, _P.WRITE, f"{op.op_type} object {obj.id}")
    eng._mutate(op, obj, confidence=conf, salience=sal)


_RELATE_VIA: Final = {
    EdgeType.DERIVED_FROM.value: "evidence_ids of ASSERT or EPISTEMIC_TRANSITION",
    EdgeType.SUPERSEDES.value: "SUPERSEDE or DEDUP_RESOLVED",
    EdgeType.CONTRADICTS.value: "CONTRADICTION_NOTED",
}
_ENDPOINTS: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    EdgeType.SUPPORTS.value: (("object",), ("object",)),
    EdgeType.ABOUT_ENTITY.value: (("object",), ("entity",)),
    EdgeType.RELATES_TO.value: (("object", "entity"), ("object", "entity")),
}


def _relate(eng: Engine, op: Op) -> None:
    p = op.p
    edge_type, source, target = p["edge_type"], p["source_id"], p["target_id"]
    eng._target_type(op, "EDGE")
    if edge_type in _RELATE_VIA:
        raise RuleError(
            rules.GRAPH, f"{edge_type} edges come from {_RELATE_VIA[edge_type]}, not RELATE"
        )
    if (edge_type == EdgeType.RELATES_TO) != (p["relation_label"] is not None):
        raise ValidationError(
            "RELATE payload.relation_label is required for RELATES_TO and only taken by it",
            field="payload.relation_label",
        )
    valid_from = op.ts if p["valid_from"] is None else p["valid_from"]
    if p["valid_to"] is not None and p["valid_to"] < valid_from:
        raise ValidationError(
            "RELATE payload.valid_to is before valid_from", field="payload.valid_to"
        )
    src_kinds, dst_kinds = _ENDPOINTS[edge_type]
    source, src_ns, src_entity = eng._node(op, source, src_kinds)
    target, _, dst_entity = eng._node(op, target, dst_kinds)
    if source == target:
        raise RuleError(rules.GRAPH, f"an edge cannot loop on {source}")
    eng.require(op.branch, op.actor_id, src_ns, _P.WRITE, f"RELATE {source}")
    eng._edge(
        op,
        0,
        edge_type,
        source,
        target,
        confidence=p["confidence"],
        valid_from=valid_from,
        valid_to=p["valid_to"],
        label=p["relation_label"],
    )
    for node, is_entity in ((source, src_entity), (target, dst_entity)):
        if is_entity:
            eng._touch_entity(op, node)


def _names(canonical: str, *groups: Iterable[str]) -> tuple[str, ...]:
    """Aliases in first-seen order, without duplicates or the canonical name."""
    return tuple(n for n in dict.fromkeys(a for g in groups for a in g) if n != canonical)


def _entity_create(eng: Engine, op: Op) -> None:
    p = op.p
    eng._target_type(op, "ENTITY")
    entity_id = op.id if op.target_id is None else check_uuid(op.target_id, "target_id")
    eng._fresh_id(op, entity_id)
    eng.require(op.branch, op.actor_id, op.namespace_id, _P.WRITE, "ENTITY_CREATE")
    name = p["canonical_name"]
    eng.state.put_entity(
        Entity(
            entity_id,
            p["entity_type"],
            name,
            _names(name, p["aliases"]),
            op.namespace_id,
            op.ts,
            op.ts,
            None,
            op.branch,
            op.seq,
        ),
        new=True,
    )


def _entity_merge(eng: Engine, op: Op) -> None:
    p = op.p
    eng._target_type(op, "ENTITY")
    pid, mid = p["primary_entity_id"], p["merged_entity_id"]
    eng._same_target(op, pid, "primary_entity_id")
    if pid == mid:
        raise RuleError(rules.ENTITY, f"entity {pid} cannot be merged into itself")
    found = {}
    for role, eid in (("primary", pid), ("merged", mid)):
        ent = eng.state.entity(op.branch, eid)
        if ent is None:
            raise RuleError(rules.REFERENCE, f"ENTITY_MERGE {role} entity {eid} does not exist")
        if ent.merged_into is not None:
            raise RuleError(
                rules.ENTITY, f"{role} entity {eid} was already merged into {ent.merged_into}"
            )
        eng.require(op.branch, op.actor_id, ent.namespace_id, _P.WRITE, f"ENTITY_MERGE {eid}")
        found[role] = ent
    primary, merged = found["primary"], found["merged"]
    aliases = _names(
        primary.canonical_name,
        primary.aliases,
        [merged.canonical_name],
        merged.aliases,
        p["alias_list"],
    )
    eng.state.put_entity(
        evolve(
            primary,
            aliases=aliases,
            last_seen_at=max(primary.last_seen_at, op.ts),
            seq=op.seq,
            branch=op.branch,
        ),
        new=False,
    )
    eng.state.put_entity(evolve(merged, merged_into=pid, seq=op.seq, branch=op.branch), new=False)


def _summary(eng: Engine, op: Op) -> None:
    p = op.p
    summary = eng._target_object(op)
    if summary.type != MemoryType.SUMMARY:
        raise RuleError(
            rules.REFERENCE,
            f"SUMMARY_CREATED target {summary.id} is a {summary.type}, not a SUMMARY",
        )
    eng._active(op, summary, "SUMMARY")
    for object_id in p["object_ids_summarised"]:
        if object_id == summary.id:
            raise RuleError(rules.GRAPH, f"summary {summary.id} cannot summarise itself")
        eng._object(op, object_id, "summarised")
    eng.require(
        op.branch, op.actor_id, summary.namespace_id, _P.WRITE, f"SUMMARY_CREATED on {summary.id}"
    )
    for n, object_id in enumerate(p["object_ids_summarised"]):
        eng._edge(op, n, EdgeType.RELATES_TO, summary.id, object_id, label="SUMMARISES")


def _dedup(eng: Engine, op: Op) -> None:
    p = op.p
    eng._target_type(op, _OBJECT)
    eng._same_target(op, p["primary_id"], "primary_id")
    primary = eng._object(op, p["primary_id"], "primary")
    eng._active(op, primary, "primary object")
    merged = [eng._object(op, m, "merged") for m in p["merged_ids"]]
    for m in merged:
        _superseded(eng, op, m, primary)
    for n, m in enumerate(merged):
        _supersede_write(eng, op, m, primary.id, n)


def _namespace_create(eng: Engine, op: Op) -> None:
    ns = op.namespace_id
    eng._target_type(op, "NAMESPACE")
    eng._same_target(op, ns, "the namespace created (namespace_id)")
    if eng.state.namespace(op.branch, ns) is not None:
        raise RuleError(rules.NAMESPACE_POLICY, f"namespace {ns!r} already has a policy")
    eng.state.add_namespace(
        Namespace(ns, op.p["namespace_type"], op.actor_id, op.ts, op.branch, op.seq)
    )
    eng.state.add_grant(Grant(ns, op.actor_id, _P.ADMIN, op.actor_id, op.branch, op.seq))


def _grant(eng: Engine, op: Op) -> None:
    ns, grantee, permission = op.namespace_id, op.p["actor_id"], op.p["permission"]
    eng._target_type(op, "NAMESPACE")
    eng._same_target(op, ns, "the namespace (namespace_id)")
    if eng.state.namespace(op.branch, ns) is None:
        raise RuleError(
            rules.NAMESPACE_POLICY, f"namespace {ns!r} has no policy; NAMESPACE_CREATE it first"
        )
    eng.require(op.branch, op.actor_id, ns, _P.ADMIN, f"{op.op_type} {permission}")
    held = eng.state.permissions(op.branch, ns, grantee) or frozenset()
    if op.op_type == OpType.GRANT:
        if permission in held:
            raise RuleError(
                rules.NAMESPACE_POLICY,
                f"actor {grantee!r} already holds {permission} on namespace {ns!r}",
            )
        eng.state.add_grant(Grant(ns, grantee, permission, op.actor_id, op.branch, op.seq))
        return
    if permission not in held:
        raise RuleError(
            rules.NAMESPACE_POLICY,
            f"actor {grantee!r} does not hold {permission} on namespace {ns!r}",
        )
    if permission == _P.ADMIN and eng.state.admins(op.branch, ns) <= 1:
        raise RuleError(
            rules.NAMESPACE_POLICY, f"the last ADMIN of namespace {ns!r} cannot be revoked"
        )
    eng.state.close_grant(op.branch, ns, grantee, permission, op.seq)


HANDLERS: dict[str, Handler] = {
    OpType.ASSERT: _assert,
    OpType.DEPRECATE: _lifecycle(LifecycleState.DEPRECATED.value),
    OpType.ARCHIVE: _lifecycle(LifecycleState.ARCHIVED.value),
    OpType.SUPERSEDE: _supersede,
    OpType.TOMBSTONE: _tombstone,
    OpType.EPISTEMIC_TRANSITION: _transition,
    OpType.CONTRADICTION_NOTED: _contradiction,
    OpType.DECAY_APPLIED: _scores,
    OpType.REINFORCE: _scores,
    OpType.PENALTY: _scores,
    OpType.RELATE: _relate,
    OpType.ENTITY_CREATE: _entity_create,
    OpType.ENTITY_MERGE: _entity_merge,
    OpType.SUMMARY_CREATED: _summary,
    OpType.DEDUP_RESOLVED: _dedup,
    OpType.NAMESPACE_CREATE: _namespace_create,
    OpType.GRANT: _grant,
    OpType.REVOKE: _grant,
}
"""Operation type -> handler. Types without one (SNAPSHOT, FALSIFY, BRANCH_*, INTEGRITY_CHECK,
...) pass through; the layers that own them register theirs here."""

# The state operations (SPEC 7): their handlers live with the rules of their states.
HANDLERS.update(STATE_HANDLERS)
