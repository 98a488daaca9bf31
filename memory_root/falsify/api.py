"""``Falsifier`` (SPEC 7): flip one item's state, record why, undo it, cascade on request.

    from memroot.memory_root.falsify import Falsifier, FalsifyHook

    with Ledger.open(path, hooks=[MemoryHook(), FalsifyHook(), RootsHook()]) as ledger:
        f = Falsifier(ledger)
        f.falsify("0190f3c2-...", reason="the source was retracted", evidence=[event_id])
        plan = f.plan("0190f3c2-...", max_depth=2, max_items=100)      # writes nothing
        result = f.cascade("0190f3c2-...", max_depth=2, max_items=100)  # one CASCADE entry
        f.restore("0190f3c2-...", reason="the retraction was itself wrong")

Items are memory objects, memory roots, summary items of a root and SelfModel snapshots
(``deps``). ``FALSIFY`` makes an item ``falsified`` and changes nothing else: what depends
on it keeps its state until a ``CASCADE`` is asked for. ``MARK_STALE`` and ``RESTORE`` set
``stale`` and ``live``. Every change is an entry, so states are derived by replay
(``rebuild``, verify step 9) and their whole history stays readable (``history``, ``why``,
``memroot why ID``). Writing needs the ledger's ``FalsifyHook`` (``hook``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from memroot.ledger.entries import CANONICAL_BRANCH, OpInput, _library_op, check_uuid
from memroot.ledger.errors import NotFoundError, ValidationError
from memroot.ledger.ledger import Appended, Ledger
from memroot.ledger.vocab import ActorType, OpType
from memroot.memory_root.falsify import deps, states
from memroot.memory_root.falsify._core import FalsifyCore, check_item_id, has_table, summary_of
from memroot.memory_root.falsify.cascade import CascadeRequest, Plan, RestorePlan
from memroot.memory_root.falsify.checked import check_item_read
from memroot.memory_root.falsify.checked_deps import check_index
from memroot.memory_root.falsify.deps import KINDS, OBJECT, ROOT, SELFMODEL, SUMMARY, ItemRef
from memroot.memory_root.falsify.hook import FalsifyHook
from memroot.memory_root.falsify.states import LIVE, StateChange

__all__ = [
    "DEFAULT_ACTOR",
    "KIND_ALIASES",
    "POLICY_VERSION",
    "CascadeResult",
    "Falsifier",
    "ItemWhy",
    "RestoreResult",
    "parse_kinds",
]

POLICY_VERSION: Final = "memroot-falsify/1"
DEFAULT_ACTOR: Final = "operator"
KIND_ALIASES: Final = {"object": OBJECT, "root": ROOT, "summary": SUMMARY, "selfmodel": SELFMODEL}
"""Short names of the kinds (``--kinds object,root``); the full names are accepted too."""
_UUID: Final = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"
)
_HEX: Final = re.compile(r"[0-9a-fA-F]{4,64}\Z")


def parse_kinds(text: str | Sequence[str]) -> tuple[str, ...]:
    """Return the kinds named by ``object,root`` (or a list), full names, sorted.

    Raises:
        ValidationError: for an unknown or repeated kind, or none.
    """
    names = [k.strip() for k in text.split(",")] if isinstance(text, str) else list(text)
    out = []
    for k in names:
        # Any case, as every enumeration a caller names (README "Names and case").
        full = KIND_ALIASES.get(k.lower(), k.lower()) if isinstance(k, str) else k
        if full not in KINDS:
            raise ValidationError(
                f"unknown kind {k!r}: use object, root, summary, selfmodel", field="kinds"
            )
        out.append(full)
    if not out or len(set(out)) != len(out):
        raise ValidationError(
            "kinds must name each kind at most once, and one at least", field="kinds"
        )
    return tuple(sorted(out))


@dataclass(frozen=True, slots=True)
class CascadeResult:
    """What ``Falsifier.cascade`` appended: the plan (with its re-snapshots) and the entries."""

    plan: Plan
    appended: tuple[Appended, ...]


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What ``Falsifier.restore_cascade`` appended: the plan it listed and the entries."""

    plan: RestorePlan
    appended: tuple[Appended, ...]


@dataclass(frozen=True, slots=True)
class ItemWhy:
    """An item's state and how it got there, what it cites and what was built on it."""

    item: ItemRef
    located: deps.Located | None
    state: str
    history: tuple[tuple[StateChange, bytes], ...]
    dependencies: tuple[ItemRef, ...]
    dependents: tuple[ItemRef, ...]
    replaces: str | None
    replaced_by: tuple[tuple[str, str, int], ...]
    value: Any

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (entry hashes in hex)."""
        return {
            "type": self.item.kind,
            "id": self.item.id,
            "branch": None if self.located is None else self.located.branch,
            "seq": None if self.located is None else self.located.seq,
            "state": self.state,
            "history": [{**c.to_dict(), "entry_hash": h.hex()} for c, h in self.history],
            "dependencies": [d.to_cbor() for d in self.dependencies],
            "dependents": [d.to_cbor() for d in self.dependents],
            "replaces": self.replaces,
            "replaced_by": [
                {"memory_root": r, "branch": b, "seq": s} for r, b, s in self.replaced_by
            ],
            "value": self.value,
        }


class Falsifier:
    """Falsification on one open ledger (opened with a ``FalsifyHook`` to write)."""

    def __init__(self, ledger: Ledger) -> None:
        """Wrap ``ledger``; writing needs a ``FalsifyHook`` among its hooks."""
        self.ledger = ledger
        found = [h for h in ledger.hooks if isinstance(h, FalsifyHook)]
        self._hook = found[0] if found else None
        self._reader = self._hook if self._hook is not None else FalsifyHook()
        if not has_table(ledger.derived.db, "fz_states"):
            if ledger.derived.db.readonly("main"):
                raise NotFoundError("this ledger holds no falsification state")
            with ledger.write() as db:
                self._reader.install(db)

    @property
    def hook(self) -> FalsifyHook:
        """The ledger's ``FalsifyHook``.

        Raises:
            ValueError: if the ledger was opened without one.
        """
        if self._hook is None:
            raise ValueError("open the ledger with hooks=[..., FalsifyHook(), ...] to falsify")
        return self._hook

    @property
    def core(self) -> FalsifyCore:
        """The core reading this ledger's tables."""
        return self._reader.core(self.ledger)

    def sync(self, branch: str = CANONICAL_BRANCH) -> int:
        """Fold entries appended without the hook, so reads are current; return how many."""
        if self.ledger.derived.db.readonly("main") or self.core.head(branch) == self.ledger.size(
            branch
        ):
            return 0
        with self.ledger.write():
            return self._reader.catch_up(self.ledger, branch)

    # -- naming items ------------------------------------------------------------------------

    def resolve(self, text: str | ItemRef, branch: str = CANONICAL_BRANCH) -> ItemRef:
        """Return the item ``text`` names on ``branch``.

        ``text`` is an object UUID; a root's or SelfModel's hex (a unique prefix of 4+ digits
        will do); or ``ROOT:projection:key`` for a summary item (ROOT may be a prefix).

        Raises:
            ValidationError: if the text is none of these.
            NotFoundError: if nothing (or more than one item) matches on the branch.
        """
        if isinstance(text, ItemRef):
            return ItemRef(text.kind, check_item_id(text.kind, text.id))
        if _UUID.match(text):
            return ItemRef(OBJECT, check_uuid(text.lower(), "id"))
        head, sep, rest = text.partition(":")
        if sep:
            root = self._by_prefix(head, (ROOT,), branch)
            return ItemRef(SUMMARY, f"{root.id}:{rest}")
        return self._by_prefix(text, (ROOT, SELFMODEL), branch)

    def _by_prefix(self, text: str, kinds: tuple[str, ...], branch: str) -> ItemRef:
        if not _HEX.match(text):
            raise ValidationError(
                f"{text!r} is not an item id: an object UUID, a root or SelfModel in hex "
                "(4-64 digits), or ROOT:projection:key",
                field="id",
            )
        prefix = text.lower()
        view = deps.view_of(self.ledger.derived.db, branch)
        found = []
        for kind in kinds:
            for (item_id,) in self.ledger.derived.db.execute(
                "SELECT DISTINCT id FROM fz_items WHERE kind = ? AND id >= ? AND id <= ? LIMIT 3",
                (kind, prefix, prefix + "g"),
            ):
                if deps.locate(self.ledger.derived.db, view, kind, str(item_id)) is not None:
                    found.append(ItemRef(kind, str(item_id)))
        if not found:
            raise NotFoundError(
                f"no {' or '.join(kinds)} starts with {prefix} on branch {branch!r}"
            )
        if len(found) > 1:
            raise NotFoundError(f"several items start with {prefix}; give more digits")
        return found[0]

    # -- reading -------------------------------------------------------------------------------

    def state(self, item: str | ItemRef, branch: str = CANONICAL_BRANCH) -> str:
        """Return the item's state on ``branch`` (``live`` when nothing changed it).

        Raises:
            ValidationError, NotFoundError: as ``resolve``.
        """
        self.sync(branch)  # entries appended without the hook: folded (or skipped) first
        ref = self.resolve(item, branch)
        with self.ledger.reading() as db:
            check_item_read(self.ledger, db, branch, ref)
            change = states.current(db, deps.view_of(db, branch), ref)
        return LIVE if change is None else change.state

    def history(self, item: str | ItemRef, branch: str = CANONICAL_BRANCH) -> list[StateChange]:
        """Return every state change of the item ``branch`` sees, oldest first.

        Raises:
            ValidationError, NotFoundError: as ``resolve``.
        """
        self.sync(branch)  # entries appended without the hook: folded (or skipped) first
        ref = self.resolve(item, branch)
        with self.ledger.reading() as db:
            check_item_read(self.ledger, db, branch, ref)
            return states.history(db, deps.view_of(db, branch), ref)

    def dependents(self, item: str | ItemRef, branch: str = CANONICAL_BRANCH) -> list[ItemRef]:
        """Return what was built on the item (one step), sorted by ``(id, kind)``.

        Raises:
            ValidationError, NotFoundError: as ``resolve``.
        """
        return self.core.graph(branch).dependents(self.resolve(item, branch))

    def dependencies(self, item: str | ItemRef, branch: str = CANONICAL_BRANCH) -> list[ItemRef]:
        """Return what the item cites (one step), sorted by ``(id, kind)``.

        Raises:
            ValidationError, NotFoundError: as ``resolve``.
        """
        return self.core.graph(branch).dependencies(self.resolve(item, branch))

    def why(self, item: str | ItemRef, branch: str = CANONICAL_BRANCH) -> ItemWhy:
        """Return how the item got its state, what it cites and what was built on it.

        The state history comes with each change's entry hash; a root also says what it
        replaces or was replaced by, a summary item gives its value.

        Raises:
            ValidationError: as ``resolve``.
            NotFoundError: if the branch does not see the item.
        """
        self.sync(branch)
        ref = self.resolve(item, branch)
        graph = self.core.graph(branch)
        if not graph.exists(ref):
            raise NotFoundError(f"no {ref.kind} {ref.id} on branch {branch!r}")
        db = self.ledger.derived.db
        check_item_read(self.ledger, db, branch, ref)  # strict: the rows are the log's
        changes = states.history(db, graph.view, ref)
        hist = tuple((c, bytes(self.ledger.entry(c.seq, c.branch).hash)) for c in changes)
        located = None if ref.kind == SUMMARY else deps.locate(db, graph.view, ref.kind, ref.id)
        replaces: str | None = None
        replaced_by: tuple[tuple[str, str, int], ...] = ()
        value: Any = None
        if ref.kind == ROOT:
            row = graph.root(ref.id)
            replaces = None if row is None else row.replaces
            replaced_by = tuple(
                (str(r), str(b), int(s))
                for r, b, s in db.execute(
                    "SELECT root, branch, seq FROM fz_roots WHERE replaces = ? ORDER BY seq",
                    (ref.id,),
                )
                if deps.locate(db, graph.view, ROOT, str(r)) is not None
            )
        if ref.kind == SUMMARY:
            row, pid, key = deps.split_summary_id(ref.id, graph)
            if row is not None:
                found = summary_of(db, bytes.fromhex(row.root), pid)
                if found is not None:
                    value = found.get(key)
        return ItemWhy(
            ref,
            located,
            hist[-1][0].state if hist else LIVE,
            hist,
            tuple(graph.dependencies(ref)),
            tuple(graph.dependents(ref)),
            replaces,
            replaced_by,
            value,
        )

    # -- writing -------------------------------------------------------------------------------

    def _op(
        self,
        op_type: OpType,
        item: ItemRef,
        payload: dict[str, Any],
        actor: str,
        actor_type: str,
        namespace: str | None,
        branch: str,
    ) -> OpInput:
        if namespace is None:
            at = deps.locate(
                self.ledger.derived.db,
                deps.view_of(self.ledger.derived.db, branch),
                item.kind,
                item.id,
            )
            namespace = at.namespace if at is not None and item.kind == OBJECT else "system"
        return OpInput(
            op_type=op_type.value,
            actor_id=actor,
            actor_type=actor_type,
            namespace_id=namespace,
            payload=payload,
            policy_version=POLICY_VERSION,
            target_id=item.id,
            target_type=item.kind,
        )

    def _state(
        self,
        op_type: OpType,
        item: str | ItemRef,
        reason: str,
        evidence: Sequence[str],
        actor: str,
        actor_type: str,
        branch: str,
        namespace: str | None,
    ) -> Appended:
        payload: dict[str, Any] = {"reason": reason}
        if evidence:
            payload["evidence_ids"] = list(evidence)
        self.hook  # noqa: B018 - raises without a hook, before anything is written
        with self.ledger.write():
            ref = self.resolve(item, branch)
            op = self._op(op_type, ref, payload, actor, actor_type, namespace, branch)
            appended = self.ledger.append_batch([op], branch=branch)
        self._sign_if_snapshot(appended, branch)
        return appended[0]

    def _sign_if_snapshot(self, appended: Sequence[Appended], branch: str) -> None:
        # An append may bring an automatic SNAPSHOT (RootsHook); SPEC 5 signs after it.
        if any(a.type == OpType.SNAPSHOT for a in appended):
            self.ledger.checkpoint(branch)

    def falsify(
        self,
        item: str | ItemRef,
        reason: str,
        evidence: Sequence[str] = (),
        *,
        actor: str = DEFAULT_ACTOR,
        actor_type: str = ActorType.HUMAN_USER.value,
        branch: str = CANONICAL_BRANCH,
        namespace: str | None = None,
    ) -> Appended:
        """Append a ``FALSIFY``: the item becomes ``falsified``; nothing else changes.

        ``evidence`` lists event ids that show it is false; ``namespace`` defaults to the
        object's namespace (``system`` for other items).

        Raises:
            ValidationError: a malformed id, reason or evidence id.
            NotFoundError: the item or an evidence event is not on the branch.
            RuleError: the item is already falsified.
            ValueError: the ledger has no ``FalsifyHook``.
        """
        return self._state(
            OpType.FALSIFY, item, reason, evidence, actor, actor_type, branch, namespace
        )

    def mark_stale(
        self,
        item: str | ItemRef,
        reason: str,
        evidence: Sequence[str] = (),
        *,
        actor: str = DEFAULT_ACTOR,
        actor_type: str = ActorType.HUMAN_USER.value,
        branch: str = CANONICAL_BRANCH,
        namespace: str | None = None,
    ) -> Appended:
        """Append a ``MARK_STALE``: a live item becomes ``stale`` (to be re-checked).

        Raises:
            ValidationError, NotFoundError, ValueError: as ``falsify``.
            RuleError: the item is not live.
        """
        return self._state(
            OpType.MARK_STALE, item, reason, evidence, actor, actor_type, branch, namespace
        )

    def restore(
        self,
        item: str | ItemRef,
        reason: str,
        evidence: Sequence[str] = (),
        *,
        actor: str = DEFAULT_ACTOR,
        actor_type: str = ActorType.HUMAN_USER.value,
        branch: str = CANONICAL_BRANCH,
        namespace: str | None = None,
    ) -> Appended:
        """Append a ``RESTORE``: a stale or falsified item becomes ``live`` again.

        Dependents a cascade marked stale stay stale: restore them one by one.

        Raises:
            ValidationError, NotFoundError, ValueError: as ``falsify``.
            RuleError: the item is live.
        """
        return self._state(
            OpType.RESTORE, item, reason, evidence, actor, actor_type, branch, namespace
        )

    def plan_restore(
        self, item: str | ItemRef, max_depth: int, *, branch: str = CANONICAL_BRANCH
    ) -> RestorePlan:
        """Plan ``restore --cascade`` (a dry run); write nothing.

        What undoing the cascades from ``item`` within ``max_depth`` makes live again,
        leaves stale, and withdraws.

        Raises:
            ValidationError, NotFoundError: as ``resolve``, or a bound out of range.
        """
        self.sync(branch)
        ref = self.resolve(item, branch)
        if not self.core.graph(branch).exists(ref):
            raise NotFoundError(f"no {ref.kind} {ref.id} on branch {branch!r}")
        return self.core.restore_plan(branch, ref, max_depth)

    def restore_cascade(
        self,
        item: str | ItemRef,
        reason: str,
        max_depth: int,
        evidence: Sequence[str] = (),
        *,
        actor: str = DEFAULT_ACTOR,
        actor_type: str = ActorType.HUMAN_USER.value,
        branch: str = CANONICAL_BRANCH,
        namespace: str | None = None,
    ) -> RestoreResult:
        """Append one ``RESTORE`` that restores ``item`` and undoes its cascades' staleness.

        The items the cascades from ``item`` marked stale (and that nothing changed since)
        become live up to ``max_depth``; deeper ones stay stale and are listed; the
        re-snapshots those cascades made of roots now restored are withdrawn (stale), so
        the branch's next snapshot chains from the restored root. Everything is listed in
        the entry's ``cascade`` part (docs/FORMAT.md §8.2).

        Raises:
            ValidationError, NotFoundError, ValueError: as ``falsify``; ValidationError for a
                bound out of range or an entry over the size limit.
            RuleError: the item is live.
        """
        self.hook  # noqa: B018 - raises without a hook, before anything is written
        with self.ledger.write():
            plan = self.plan_restore(item, max_depth, branch=branch)
            payload: dict[str, Any] = {"reason": reason, "cascade": plan.payload()}
            if evidence:
                payload["evidence_ids"] = list(evidence)
            op = self._op(
                OpType.RESTORE, plan.origin, payload, actor, actor_type, namespace, branch
            )
            appended = self.ledger.append_batch([op], branch=branch)
        self._sign_if_snapshot(appended, branch)
        return RestoreResult(plan, tuple(appended))

    def request(
        self,
        item: str | ItemRef,
        max_depth: int,
        max_items: int,
        kinds: str | Sequence[str] = KINDS,
        reason: str | None = None,
        branch: str = CANONICAL_BRANCH,
    ) -> CascadeRequest:
        """Return a cascade request from ``item`` under the bound.

        Raises:
            ValidationError: a bound below 1 or over its limit, an unknown kind, a bad id.
            NotFoundError: as ``resolve``.
        """
        return CascadeRequest(
            self.resolve(item, branch), max_depth, max_items, parse_kinds(kinds), reason
        )

    def plan(
        self,
        item: str | ItemRef,
        max_depth: int,
        max_items: int,
        kinds: str | Sequence[str] = KINDS,
        *,
        branch: str = CANONICAL_BRANCH,
        resnapshots: bool = False,
    ) -> Plan:
        """Plan a cascade (a dry run): what it would touch and what lies beyond; write nothing.

        With ``resnapshots`` the re-snapshotted roots are computed too (a fold of the
        affected branch up to the last affected root), and ``roots`` is then exactly the
        roots they replace, as the applied cascade lists them (``memroot cascade
        --dry-run`` asks for this); without, ``roots`` holds the candidates.

        Raises:
            ValidationError, NotFoundError: as ``request``; NotFoundError also for an origin
                the branch does not see.
            RuleError: the origin is live.
        """
        self.sync(branch)
        request = self.request(item, max_depth, max_items, kinds, None, branch)
        with self.ledger.reading() as db:
            # The dry run walks the index the cascade would: checked first, as the append is.
            check_index(self.ledger, db, branch, self.core.rules)
        return self.core.plan(branch, request, resnapshots=resnapshots)

    def cascade(
        self,
        item: str | ItemRef,
        max_depth: int,
        max_items: int,
        kinds: str | Sequence[str] = KINDS,
        *,
        reason: str | None = None,
        actor: str = DEFAULT_ACTOR,
        actor_type: str = ActorType.HUMAN_USER.value,
        branch: str = CANONICAL_BRANCH,
    ) -> CascadeResult:
        """Apply a cascade: append one ``CASCADE`` entry, which marks the touched items stale.

        The entry lists what the cascade touched, what lay beyond the bound and the
        re-snapshotted roots. A checkpoint is signed after it if the append brought an
        automatic snapshot.

        Raises:
            ValidationError: as ``request``, or the entry would be over the size limit
                (lower ``max_items``).
            NotFoundError, RuleError: as ``plan``.
            ValueError: the ledger has no ``FalsifyHook``.
        """
        hook = self.hook
        ledger = self.ledger
        with ledger.write():
            self.sync(branch)
            request = self.request(item, max_depth, max_items, kinds, reason, branch)
            plan = self.core.plan(branch, request, resnapshots=True)
            # A reserved type: only this writer may append it (RESERVED_OPS).
            op = _library_op(
                self._op(
                    OpType.CASCADE,
                    request.origin,
                    plan.payload(),
                    actor,
                    actor_type,
                    None,
                    branch,
                )
            )
            hook.expect(branch, bytes(ledger.store.branch(branch).head), plan)
            try:
                appended = ledger.append_batch([op], branch=branch)
            except ValidationError as e:
                if e.field == "body":
                    raise ValidationError(
                        f"the CASCADE entry would touch {len(plan.touched)} items and is over "
                        f"the entry size limit ({e}); lower max_items",
                        field="max_items",
                    ) from e
                raise
            finally:
                hook._memo = None
        self._sign_if_snapshot(appended, branch)
        return CascadeResult(plan, tuple(appended))
