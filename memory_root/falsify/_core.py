"""The falsification rules, applied to one entry at a time, and their tables (internal).

``FalsifyCore.apply`` is the one implementation of SPEC 7 states that the append hook, the
rebuild and verify share: it folds the entry into the dependency index, then validates a
``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` / ``CASCADE`` against the state the branch's view
had before it and records the changes. ``strict`` (the append hook) raises on a request the
rules refuse, so nothing is written; otherwise (replay) the entry is skipped and recorded in
``fz_skipped``, exactly as the stored state skipped it.

A ``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` of a memory object with ``evidence_ids`` is
validated in its own view (invalidation gated by provenance, docs/FORMAT.md §12.3): against
the object's falsification state at the events of its evidence and their ancestors, as the
memory model's gated bookkeeping (``memroot.projections.gated``) gives it. The global state
(``fz_states``) then records the change only when it allows it too; otherwise the entry is
accepted and listed in ``fz_unapplied`` (the ``applied`` = 0 of ``mem_gated``).

``install`` creates every falsification table; ``ledger_core`` builds the core over a
ledger's file (its entries, summaries and fold-state cache). The four operations' formats are
in docs/FORMAT.md §8.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import apsw

from memroot.ledger import encoding
from memroot.ledger.entries import Entry, Kind, check_uuid
from memroot.ledger.errors import IntegrityError, NotFoundError, RefusedError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType
from memroot.memory_root import records
from memroot.memory_root.falsify import _fold_cache, deps, states
from memroot.memory_root.falsify.cascade import (
    CascadeRequest,
    EntrySource,
    FoldCheckpoint,
    Plan,
    RestorePlan,
    StateReplay,
    check_restore_depth,
    excluded_entry,
    plan,
    resnapshot,
    restore_plan,
)
from memroot.memory_root.falsify.deps import (
    KINDS,
    OBJECT,
    ROOT,
    SELFMODEL,
    STATE_OPS,
    SUMMARY,
    Graph,
    ItemRef,
    RootRow,
)
from memroot.memory_root.falsify.states import FALSIFIED, LIVE, STALE
from memroot.memory_root.root import ProjectionDigest, RootPreimage
from memroot.projections.gated import own_view_state
from memroot.projections.projection import Projection, RuleDigest, SummaryDigest
from memroot.projections.registry import Registry
from memroot.projections.rules import RuleError
from memroot.projections.states import FALSIFICATION, check_state_change, unseen_evidence

__all__ = [
    "EVENTS_MAX",
    "EventFinder",
    "FalsifyCore",
    "Validated",
    "check_item_id",
    "entry_source",
    "has_cascade_part",
    "has_table",
    "install",
    "ledger_core",
    "set_head",
    "state_replay_of",
    "stored_lists",
    "summary_keys_of",
    "summary_of",
]

_CASCADE: Final = OpType.CASCADE.value
_RESTORE: Final = OpType.RESTORE.value
EVENTS_MAX: Final = 1000
_MAX_TEXT: Final = 4096
_HEX64: Final = re.compile(r"[0-9a-f]{64}\Z")
_STATE_KEYS: Final = frozenset({"reason", "evidence_ids"})
_UNAPPLIED: Final = """
CREATE TABLE IF NOT EXISTS fz_unapplied(
    branch TEXT NOT NULL, seq INTEGER NOT NULL, op_type TEXT NOT NULL, kind TEXT NOT NULL,
    id TEXT NOT NULL, reason TEXT NOT NULL,
    PRIMARY KEY(branch, seq)) STRICT, WITHOUT ROWID;
"""
_CASCADE_KEYS: Final = frozenset(
    {"max_depth", "max_items", "kinds", "reason", "touched", "beyond", "resnapshots"}
)

EventFinder = Callable[[str], tuple[str, int] | None]
"""``find(event_id) -> (branch, seq)`` of an event in the ledger, or None."""


def install(db: apsw.Connection) -> None:
    """Create every falsification table if missing: the index, the states, the fold cache."""
    deps.install(db)
    states.install(db)
    db.execute(_UNAPPLIED)
    _fold_cache.install(db)


def has_table(db: apsw.Connection, name: str) -> bool:
    """Return True when ``db`` holds a table (or index) called ``name``."""
    return bool(db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchall())


def check_item_id(kind: str, item_id: Any) -> str:
    """Check that ``item_id`` is well formed for ``kind`` and return it.

    Objects are UUIDs; roots and SelfModels 64 lowercase hex digits; summary items
    ``ROOT:projection:key`` with a 64-digit root.

    Raises:
        ValidationError: naming ``target_type`` or ``target_id``.
    """
    if kind not in KINDS:
        raise ValidationError(
            f"target_type must be one of {', '.join(KINDS)}, got {kind!r}", field="target_type"
        )
    if type(item_id) is not str or not item_id:
        raise ValidationError(f"a {kind} needs its id in target_id", field="target_id")
    if kind == OBJECT:
        return check_uuid(item_id, "target_id")
    if kind in (ROOT, SELFMODEL):
        if not _HEX64.match(item_id):
            raise ValidationError(
                f"a {kind} id is 64 lowercase hex digits, got {item_id!r}", field="target_id"
            )
        return item_id
    root, _, rest = item_id.partition(":")
    if not _HEX64.match(root) or ":" not in rest or len(item_id) > 64 + 1 + 100 + 1 + _MAX_TEXT:
        raise ValidationError(
            f"a summary item id is ROOT:projection:key (ROOT in 64 hex digits), got {item_id!r}",
            field="target_id",
        )
    return item_id


def _text(value: Any, name: str, *, required: bool) -> str | None:
    if value is None and not required:
        return None
    if type(value) is not str or not value or len(value) > _MAX_TEXT:
        raise ValidationError(
            f"payload.{name} must be text of 1 to {_MAX_TEXT} characters", field=f"payload.{name}"
        )
    return value


def _payload(entry: Entry, allowed: frozenset[str]) -> Mapping[str, Any]:
    p = entry.body.get("payload")
    if type(p) is not dict:
        raise ValidationError(f"{entry.type} payload must be a map", field="payload")
    extra = sorted(set(p) - allowed)
    if extra:
        raise ValidationError(
            f"{entry.type} payload has unknown field {extra[0]!r} "
            f"(it takes {', '.join(sorted(allowed))})",
            field=f"payload.{extra[0]}",
        )
    return p


@dataclass(frozen=True, slots=True)
class Validated:
    """A state operation that passed: the item, its new state, reason and evidence.

    ``unapplied`` says why the global state cannot take a change its own view allows
    (None: the global state applies it).
    """

    item: ItemRef
    state: str
    reason: str | None
    evidence: tuple[str, ...]
    unapplied: str | None = None


class FalsifyCore:
    """SPEC 7 over one database (the ledger file's, or a replay's in memory)."""

    def __init__(
        self,
        db: apsw.Connection,
        registry: Registry,
        *,
        summary_keys: deps.SummaryKeys | None,
        source: EntrySource | None,
        state_replay: StateReplay | None,
        find_event: EventFinder | None,
        root_states: bool,
        checkpoint: FoldCheckpoint | None = None,
        gated_db: apsw.Connection | None = None,
        lists: deps.ListSource | None = None,
    ) -> None:
        """Apply entries to ``db``.

        ``summary_keys`` lists a root's summary keys, ``source`` reads entries (to recompute
        re-snapshots), ``state_replay`` replays the memory model for state projections,
        ``find_event`` locates evidence events; each may be None when the data is not at hand
        (an auditor's bundle), and what needs it is then not checked. ``root_states`` also
        sets the ``state`` column of the stored memory_root records. ``gated_db`` holds the
        memory model's state folded at least up to each entry applied (its gated
        bookkeeping, ``mem_gated`` and ``mem_conv``): with it, a memory object's state
        operation with evidence is validated in its own view; without it (None, or a
        database without those tables) against the global state. ``lists`` gives the stored
        projection list of a v3 root (``deps.ListSource``, used when it hashes to the root's
        ``projections``; None: no list is known, a cascade through such a root is refused).
        """
        self.db = db
        self.registry = registry
        self.projections: tuple[Projection, ...] = registry.known()
        self.rules = deps.rule_info(registry)
        self.summary_keys = summary_keys
        self.source = source
        self.state_replay = state_replay
        self.find_event = find_event
        self.root_states = root_states
        self.checkpoint = checkpoint
        self.gated_db = gated_db
        self.lists = lists
        # v3 roots folded before their stored records were written (the roots' hook runs
        # after this layer's on the same SNAPSHOT): their lists are attached by ``settle``.
        self._unlisted: list[str] = []
        self._gated = False
        # Heads ``apply`` moved, written by ``flush_heads`` (once per batch or replay): an
        # event adds nothing else to the index or the states (``deps.fold`` ignores it).
        self._heads: dict[str, int] = {}

    def settle(self) -> None:
        """Attach to the v3 roots folded without their projection list the list now stored.

        Run once the layers after this one folded the ``SNAPSHOT`` (before the next entry,
        at the batch's end, before a walk). A root whose stored list is still missing or
        does not hash right stays without it (``deps.listed_rules`` refuses it).
        """
        if self._unlisted:
            pending, self._unlisted = self._unlisted, []
            if self.lists is not None:
                for root in pending:
                    deps.attach_list(self.db, root, self.rules, self.lists)

    def rolled_back(self) -> None:
        """Drop what ``apply`` buffered for a transaction that did not land."""
        self._heads.clear()
        self._unlisted.clear()

    def flush_heads(self) -> None:
        """Write the heads ``apply`` moved (``head`` does first); attach pending lists."""
        self.settle()
        if self._heads:
            for branch, size in self._heads.items():
                set_head(self.db, branch, size)
            self._heads.clear()

    def discard_heads(self) -> None:
        """Drop the heads ``apply`` moved (their batch did not land)."""
        self._heads.clear()

    def head(self, branch: str) -> int:
        """Return how many entries of ``branch`` the tables have folded."""
        self.flush_heads()
        row = self.db.execute("SELECT size FROM fz_heads WHERE branch = ?", (branch,)).fetchone()
        return 0 if row is None else int(row[0])

    def graph(self, branch: str) -> Graph:
        """Return the dependency graph ``branch``'s view sees now."""
        self.settle()
        return Graph(self.db, deps.view_of(self.db, branch), self.rules, self.summary_keys)

    # -- applying ------------------------------------------------------------------------------

    def apply(self, entry: Entry, *, strict: bool, memo: Plan | None = None) -> str | None:
        """Fold one entry; return why a state operation was skipped (None: applied or other).

        ``memo`` is a cascade plan computed for exactly this entry (same branch, position and
        payload): it is used instead of recomputing it.

        Raises:
            RefusedError: (``strict`` only) the state operation breaks a rule; nothing of it
                is written (the caller's transaction rolls back).
            IntegrityError: a cascade's walk needs the projection list of a v3 root that is
                not known (``deps.listed_rules``); nothing of the entry is written.
        """
        # The head is written by ``flush_heads`` (``head``, the batch end, a replay's end).
        self._heads[entry.branch] = entry.seq + 1
        if entry.kind is Kind.EVENT:
            return None
        self.settle()
        unlisted = deps.fold(self.db, entry, self.rules, self.lists)
        if unlisted is not None:
            self._unlisted.append(unlisted)
        skipped = None
        if entry.kind is Kind.OP and entry.type in STATE_OPS:
            self.db.execute("SAVEPOINT fz_op")
            try:
                if entry.type == _CASCADE:
                    self._cascade(entry, memo)
                elif entry.type == _RESTORE and has_cascade_part(entry):
                    self._restore_cascade(entry)
                else:
                    v = self.validate(entry, own_view=True)
                    if v.unapplied is None:
                        states.record(self.db, entry, v.item, v.state, v.reason, v.evidence)
                        self._root_state(entry, [v.item], v.state)
                    else:
                        self._unapplied(entry, v)
            except RefusedError as e:
                self.db.execute("ROLLBACK TO fz_op")
                self.db.execute("RELEASE fz_op")
                if strict:
                    raise
                skipped = str(e)
                states.skip(self.db, entry, skipped)
            except IntegrityError:
                self.db.execute("ROLLBACK TO fz_op")
                self.db.execute("RELEASE fz_op")
                raise
            else:
                self.db.execute("RELEASE fz_op")
        return skipped

    def _unapplied(self, entry: Entry, v: Validated) -> None:
        """List an operation its own view accepted and the global state did not apply."""
        self.db.execute(
            "INSERT OR REPLACE INTO fz_unapplied VALUES(?,?,?,?,?,?)",
            (entry.branch, entry.seq, entry.type, v.item.kind, v.item.id, v.unapplied),
        )

    def _root_state(self, entry: Entry, items: list[ItemRef], state: str) -> None:
        if not self.root_states:
            return
        for item in items:
            if item.kind != ROOT:
                continue
            row = deps.root_row(self.db, item.id)
            if row is None or row.branch != entry.branch:
                continue  # a root's record shows its state in its own branch
            if row.replaces is not None:
                records.set_resnapshot_state(self.db, bytes.fromhex(item.id), state)
                continue
            self.db.execute(
                "UPDATE memory_roots SET state = ? WHERE root = ?", (state, bytes.fromhex(item.id))
            )

    # -- FALSIFY, MARK_STALE, RESTORE ------------------------------------------------------------

    def _target(self, entry: Entry) -> tuple[ItemRef, Graph]:
        kind = entry.body.get("target_type")
        item = ItemRef(str(kind), check_item_id(str(kind), entry.body.get("target_id")))
        if kind not in KINDS:  # pragma: no cover - check_item_id refused it
            raise ValidationError("bad target_type", field="target_type")
        graph = self.graph(entry.branch)
        if item.kind == SUMMARY and self.summary_keys is None:
            found = deps.split_summary_id(item.id, graph)[0] is not None
        else:
            found = graph.exists(item)
        if not found:
            raise NotFoundError(f"no {item.kind} {item.id} on branch {entry.branch!r}")
        return item, graph

    def validate(self, entry: Entry, *, own_view: bool = False) -> Validated:
        """Check a FALSIFY / MARK_STALE / RESTORE against the state before it.

        With ``own_view``, a memory object's operation with evidence is checked in its own
        view (see the module docstring) when the gated bookkeeping gives one; the global
        state's verdict is then ``Validated.unapplied``.

        Raises:
            ValidationError: a malformed payload or target (naming the field).
            NotFoundError: the item or an evidence event does not exist on the branch.
            RuleError: the item's state does not allow the operation (in its own view).
        """
        p = _payload(entry, _STATE_KEYS | ({"cascade"} if entry.type == _RESTORE else set()))
        reason = _text(p.get("reason"), "reason", required=True)
        evidence = self._evidence(entry, p.get("evidence_ids"))
        item, graph = self._target(entry)
        now = states.current(self.db, graph.view, item)
        what = f"{item.kind} {item.id}"
        globally = LIVE if now is None else now.state
        own = self._own_view_state(entry, item, evidence) if own_view else None
        if own is None:
            return Validated(item, check_state_change(entry.type, what, globally), reason, evidence)
        try:
            state = check_state_change(entry.type, what, own)
        except RuleError as e:
            raise RuleError(
                FALSIFICATION, f"{str(e).partition(': ')[2]} in the view of its evidence_ids"
            ) from None
        try:
            check_state_change(entry.type, what, globally)
        except RuleError as e:
            return Validated(item, state, reason, evidence, str(e))
        return Validated(item, state, reason, evidence)

    def _own_view_state(self, entry: Entry, item: ItemRef, evidence: tuple[str, ...]) -> str | None:
        """Return a memory object's state in the op's own view (None: check it globally)."""
        db = self.gated_db
        if item.kind != OBJECT or not evidence or db is None:
            return None
        if not self._gated:
            if not has_table(db, "mem_gated"):
                return None
            self._gated = True
        return own_view_state(db, entry.branch, entry.seq, item.id, evidence)

    def _evidence(self, entry: Entry, value: Any) -> tuple[str, ...]:
        if value is None:
            return ()
        where = "payload.evidence_ids"
        if type(value) is not list or len(value) > EVENTS_MAX:
            raise ValidationError(
                f"{where} must be a list of at most {EVENTS_MAX} event ids", field=where
            )
        ids = tuple(check_uuid(v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(set(ids)) != len(ids):
            raise ValidationError(f"{where} lists an event twice", field=where)
        if self.find_event is not None:
            view = deps.view_of(self.db, entry.branch)
            for ev in ids:
                at = self.find_event(ev)
                ok = at is not None and any(
                    b == at[0] and (at[1] < entry.seq if bound is None else at[1] <= bound)
                    for b, bound in view
                )
                if not ok:
                    raise unseen_evidence(ev, entry.branch)
        return ids

    # -- CASCADE -------------------------------------------------------------------------------

    def request(self, entry: Entry) -> CascadeRequest:
        """Parse a CASCADE's request (origin and bound) from its entry.

        Raises:
            ValidationError: naming the malformed field.
        """
        p = _payload(entry, _CASCADE_KEYS)
        for name in ("max_depth", "max_items", "kinds", "touched", "beyond", "resnapshots"):
            if name not in p:
                raise ValidationError(f"CASCADE payload needs {name!r}", field=f"payload.{name}")
        kind = str(entry.body.get("target_type"))
        origin = ItemRef(kind, check_item_id(kind, entry.body.get("target_id")))
        kinds = p["kinds"]
        if type(kinds) is not list or not all(type(k) is str for k in kinds):
            raise ValidationError("payload.kinds must be a list of kinds", field="payload.kinds")
        request = CascadeRequest(
            origin,
            p["max_depth"],
            p["max_items"],
            tuple(kinds),
            _text(p.get("reason"), "reason", required=False),
        )
        if list(request.kinds) != kinds:
            raise ValidationError("payload.kinds must be sorted", field="payload.kinds")
        return request

    def plan(self, branch: str, request: CascadeRequest, *, resnapshots: bool) -> Plan:
        """Plan a cascade on ``branch`` now; with ``resnapshots`` compute them too.

        Raises:
            NotFoundError: the origin is not on the branch.
            RuleError: the origin is live.
        """
        graph = self.graph(branch)
        not_live = states.not_live(self.db, graph.view)
        p = plan(graph, not_live, request)
        if not resnapshots or self.source is None:
            return p
        excluded = frozenset(
            i.id for i, s in not_live.items() if i.kind == OBJECT and s == FALSIFIED
        )
        return resnapshot(
            graph,
            p,
            excluded,
            self.projections,
            self.source,
            self.state_replay,
            self.checkpoint,
            not_live,
        )

    @property
    def replays_plans(self) -> bool:
        """True when cascade plans can be recomputed (summaries and entries at hand)."""
        return self.summary_keys is not None and self.source is not None

    def _cascade(self, entry: Entry, memo: Plan | None) -> None:
        request = self.request(entry)
        payload = entry.body["payload"]
        if not self.replays_plans:
            self._cascade_as_listed(entry, request, payload)
            return
        if memo is not None and memo.branch == entry.branch and memo.payload() == payload:
            p = memo
        else:
            p = self.plan(entry.branch, request, resnapshots=True)
            want = p.payload()
            if want != payload:
                field = next(
                    k for k in sorted(set(want) | set(payload)) if want.get(k) != payload.get(k)
                )
                raise ValidationError(
                    f"CASCADE payload.{field} is not what the cascade gives on this ledger "
                    "(plan it first with a dry run of the cascade)",
                    field=f"payload.{field}",
                )
        touched = [s.item for s in p.touched]
        self._record_cascade(entry, request.origin, [(s.item, s.depth) for s in p.touched])
        states.record_many(self.db, entry, touched, STALE, _reason(request))
        self._root_state(entry, touched, STALE)
        for x in p.resnapshots:
            old = deps.root_row(self.db, x.replaces)
            assert old is not None  # resnapshot() only replaces roots the index holds
            self._replacement(
                entry,
                old,
                x.root,
                None if x.preimage.parent is None else x.preimage.parent.hex(),
                tuple(
                    (d.id, bytes(d.rule), bytes(d.digest), d.count) for d in x.preimage.projections
                ),
                x.preimage.preimage(),
            )
            if self.root_states:
                self._store_resnapshot(entry, x.replaces, x.preimage, x.summaries)

    def _store_resnapshot(
        self, entry: Entry, replaces: str, pre: RootPreimage, data: Mapping[str, bytes]
    ) -> None:
        """Store a re-snapshot as a root record (``roots``, ``root show``, ``root diff``).

        Its recomputed summaries are stored, the others carried over from the root it
        replaces.
        """
        old = {s.projection: s for s in records.summaries(self.db, bytes.fromhex(replaces))}
        stored = []
        for d in pre.projections:
            was = old.get(d.id)
            if was is None:
                continue
            stored.append(
                records.StoredSummary(
                    d.id, d.rule, was.rule_cbor, d.digest, d.count, data.get(d.id, was.data), None
                )
            )
        records.insert_resnapshot(
            self.db, entry.seq, entry.branch, pre, bytes.fromhex(replaces), stored
        )

    def _cascade_as_listed(
        self, entry: Entry, request: CascadeRequest, payload: Mapping[str, Any]
    ) -> None:
        """Apply a CASCADE as its entry lists it (an auditor's bundle has no summaries).

        The origin and the bound are still checked; the touched items are marked stale if
        the view sees them, and the re-snapshots are recorded as listed.
        """
        graph = self.graph(entry.branch)
        if deps.split_summary_id(request.origin.id, graph)[0] is None and not graph.exists(
            request.origin
        ):
            raise NotFoundError(f"no {request.origin.kind} {request.origin.id} on this branch")
        now = states.current(self.db, graph.view, request.origin)
        if now is None or now.state == LIVE:
            raise RuleError(FALSIFICATION, "a cascade starts from a falsified or stale item")
        touched = []
        listed = payload.get("touched")
        for t in listed if type(listed) is list else []:
            if type(t) is dict and t.get("type") in KINDS and type(t.get("id")) is str:
                touched.append(ItemRef(str(t["type"]), str(t["id"])))
        marked = list(dict.fromkeys(touched))
        depths = {
            ItemRef(str(t["type"]), str(t["id"])): t.get("depth")
            for t in (listed if type(listed) is list else [])
            if type(t) is dict and t.get("type") in KINDS and type(t.get("id")) is str
        }
        self._record_cascade(
            entry,
            request.origin,
            [(i, d if type(d := depths.get(i)) is int else 1) for i in marked],
        )
        states.record_many(self.db, entry, marked, STALE, _reason(request))
        self._replacements_from_payload(entry, payload.get("resnapshots"))

    def _record_cascade(
        self, entry: Entry, origin: ItemRef, touched: list[tuple[ItemRef, int]]
    ) -> None:
        """Index what a CASCADE marked stale, with depths (its origin at depth 0)."""
        self.db.executemany(
            "INSERT OR IGNORE INTO fz_cascades VALUES(?,?,?,?,?,?,?)",
            [
                (entry.branch, entry.seq, origin.kind, origin.id, i.kind, i.id, d)
                for i, d in [(origin, 0), *touched]
            ],
        )

    # -- RESTORE with a cascade part -------------------------------------------------------------

    def restore_plan(self, branch: str, origin: ItemRef, max_depth: int) -> RestorePlan:
        """Plan ``RESTORE origin --cascade --max-depth N`` on ``branch`` now; write nothing.

        Raises:
            ValidationError: for a bound out of range.
        """
        check_restore_depth(max_depth)
        view = deps.view_of(self.db, branch)
        cond, params = deps.visible_condition(view)
        rows: list[Any] = self.db.execute(
            f"SELECT branch, seq, kind, id, depth FROM fz_cascades WHERE origin_kind = ? "
            f"AND origin_id = ? AND {cond} ORDER BY seq, branch, depth, id, kind",
            (origin.kind, origin.id, *params),
        ).fetchall()
        entries = sorted({(str(b), int(q)) for b, q, _, _, _ in rows}, key=lambda x: (x[1], x[0]))
        marked = []
        for b, q, kind, item_id, depth in rows:
            item = ItemRef(str(kind), str(item_id))
            now = states.current(self.db, view, item)
            if (
                now is not None
                and now.state == STALE
                and now.op == _CASCADE
                and (now.branch, now.seq) == (str(b), int(q))
            ):
                marked.append((item, int(depth)))
        replacements = [
            (str(r), str(old))
            for b, q in entries
            for r, old in self.db.execute(
                "SELECT root, replaces FROM fz_roots WHERE branch = ? AND seq = ? "
                "AND replaces IS NOT NULL ORDER BY rowid",
                (b, q),
            )
        ]

        def live(root: str) -> bool:
            now = states.current(self.db, view, ItemRef(ROOT, root))
            return now is None or now.state == LIVE

        return restore_plan(origin, max_depth, marked, replacements, live)

    def _restore_cascade(self, entry: Entry) -> None:
        # Checked in its own view like any RESTORE (docs/FORMAT.md §8.2, §12.3); the cascade
        # part is always the plan of the global state, which applies all of it or nothing.
        v = self.validate(entry, own_view=True)
        part = entry.body["payload"]["cascade"]
        if type(part) is not dict:
            raise ValidationError("payload.cascade must be a map", field="payload.cascade")
        extra = sorted(set(part) - {"max_depth", "restored", "beyond", "withdrawn"})
        if extra:
            raise ValidationError(
                f"RESTORE payload.cascade has unknown field {extra[0]!r} "
                "(it takes beyond, max_depth, restored, withdrawn)",
                field=f"payload.cascade.{extra[0]}",
            )
        p = self.restore_plan(entry.branch, v.item, check_restore_depth(part.get("max_depth")))
        want = p.payload()
        if want != part:
            field = next(k for k in sorted(set(want) | set(part)) if want.get(k) != part.get(k))
            raise ValidationError(
                f"RESTORE payload.cascade.{field} is not what undoing the cascades from "
                f"{v.item.kind} {v.item.id} gives on this ledger (plan it first with a dry run "
                "of the restore with its cascade)",
                field=f"payload.cascade.{field}",
            )
        if v.unapplied is not None:
            self._unapplied(entry, v)  # the origin and its cascade part stay as they are
            return
        states.record(self.db, entry, v.item, v.state, v.reason, v.evidence)
        self._root_state(entry, [v.item], v.state)
        back = [s.item for s in p.restored]
        states.record_many(self.db, entry, back, LIVE, v.reason, v.evidence)
        self._root_state(entry, back, LIVE)
        gone = [ItemRef(ROOT, new) for new, _ in p.withdrawn]
        states.record_many(self.db, entry, gone, STALE, v.reason, v.evidence)
        self._root_state(entry, gone, STALE)

    def _replacements_from_payload(self, entry: Entry, listed: Any) -> None:
        """Record re-snapshots as listed (an auditor without the entries cannot recompute)."""
        deps.add_listed_replacements(self.db, entry, listed)

    def _replacement(
        self,
        entry: Entry,
        old: RootRow,
        root: str,
        parent: str | None,
        rules: tuple[tuple[str, bytes, bytes, int], ...],
        preimage: bytes | None,
    ) -> None:
        """Record ``root``, which ``entry`` made to replace ``old`` over the same range."""
        deps.add_replacement(
            self.db, entry, deps.replaced_row(entry, old, root, parent, rules, preimage)
        )


def has_cascade_part(entry: Entry) -> bool:
    """Whether a ``RESTORE`` entry carries a cascade part (it walks the dependency index)."""
    p = entry.body.get("payload")
    return type(p) is dict and "cascade" in p


def _reason(request: CascadeRequest) -> str:
    """Return the reason a CASCADE records for its touched items (the request's, or a default)."""
    return request.reason or f"cascade from {request.origin.kind} {request.origin.id}"


def set_head(db: apsw.Connection, branch: str, size: int) -> None:
    """Record that the tables have folded ``size`` entries of ``branch``."""
    db.execute("UPDATE fz_heads SET size = ? WHERE branch = ?", (size, branch))
    if db.changes() == 0:
        db.execute("INSERT INTO fz_heads VALUES(?, ?)", (branch, size))


# -- the ledger-backed core ----------------------------------------------------------------------


def summary_of(db: apsw.Connection, root: bytes, projection: str) -> Any:
    """Return ``projection``'s stored summary in ``root``, decoded (None: none stored)."""
    try:
        row = db.execute(
            "SELECT data FROM memory_root_summaries WHERE root = ? AND projection = ?",
            (root, projection),
        ).fetchone()
    except apsw.SQLError:
        return None  # no memory_root layer in this file
    return None if row is None else encoding.decode(bytes(row[0]))


def stored_lists(db: apsw.Connection) -> deps.ListSource:
    """Return the reader of a root's projection list from the records stored in ``db``.

    The list of ``memory_root_summaries`` (id, rule, digest, count, sorted by id): derived
    rows, a hint the index uses only when it hashes to the root's ``projections``.
    """

    def lists(root: bytes) -> list[ProjectionDigest] | None:
        try:
            rows: list[Any] = db.execute(
                "SELECT projection, rule, digest, count FROM memory_root_summaries "
                "WHERE root = ? ORDER BY projection",
                (root,),
            ).fetchall()
        except apsw.SQLError:
            return None  # no memory_root layer in this file
        if not rows:
            return None
        try:
            return [
                ProjectionDigest(str(i), RuleDigest(bytes(r)), SummaryDigest(bytes(d)), int(n))
                for i, r, d, n in rows
            ]
        except (TypeError, ValueError):
            return None

    return lists


def summary_keys_of(db: apsw.Connection) -> deps.SummaryKeys:
    """Return the lister of a root's summary keys over the summaries stored in ``db``."""

    def keys(root: bytes, projection: str) -> list[str]:
        value = summary_of(db, root, projection)
        return sorted(k for k in value if type(k) is str) if type(value) is dict else []

    return keys


def entry_source(ledger: Ledger) -> EntrySource:
    """Return the reader of ``ledger``'s stored entries, as re-snapshots read them."""
    store = ledger.store

    def rows(branch: str, start: int, stop: int) -> Iterator[tuple[bool, bytes, bytes]]:
        for r in store.iter_entry_rows(store.branch(branch).no, start, stop):
            yield (r.digest is not None or r.erased_by is not None), bytes(r.data), bytes(r.hash)

    return rows


def state_replay_of(index: apsw.Connection, source: EntrySource) -> StateReplay:
    """Replay the memory model over a branch's view without the excluded objects' entries."""

    def run(branch: str, hw: int, excluded: frozenset[str]) -> apsw.Connection:
        from memroot.projections.replay import replay

        view = deps.view_of(index, branch)

        def entries() -> Iterator[Entry]:
            for b, bound in reversed(view):
                stop = hw if b == branch else bound
                assert stop is not None
                for _, data, entry_hash in source(b, 0, stop + 1):
                    e = Entry.from_bytes(data, entry_hash)
                    if not excluded_entry(e, excluded):
                        yield e

        return replay(entries())

    return run


def ledger_core(
    ledger: Ledger,
    registry: Registry,
    *,
    db: apsw.Connection | None = None,
    gated_db: apsw.Connection | None = None,
) -> FalsifyCore:
    """Return the falsification core over a ledger's file (reading its entries and summaries).

    ``db`` holds the tables (default: the ledger's own connection, whose memory model state
    then gives operations their own views); with ``db``, ``gated_db`` holds the memory
    model's state (None: every operation is checked against the global state).
    """
    index = ledger.derived.db if db is None else db
    source = entry_source(ledger)
    has_roots = has_table(ledger.derived.db, "memory_roots")
    return FalsifyCore(
        index,
        registry,
        summary_keys=summary_keys_of(ledger.derived.db),
        source=source,
        state_replay=state_replay_of(index, source),
        find_event=ledger.find_event,
        root_states=has_roots and db is None,
        checkpoint=_fold_cache.fold_checkpoint_of(ledger.derived.db) if db is None else None,
        gated_db=ledger.derived.db if db is None else gated_db,
        lists=stored_lists(ledger.derived.db),
    )
