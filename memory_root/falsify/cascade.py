"""``CASCADE``: an explicit, bounded walk over what depends on a falsified item (SPEC 7).

A cascade runs only when someone asks for it, from an item that is not live (falsified, or
stale from an earlier cascade), under a stated bound: ``max_depth``, ``max_items`` and the
``kinds`` of item it may touch. ``plan`` computes, writing nothing:

- **touched**: the live items it marks ``stale``, each with its depth;
- **passed**: items on the way that are already stale or falsified: walked through (their
  dependents are reached) but not touched and not counted against ``max_items``;
- **beyond**: the frontier the bound cut off: every dependent of the origin or of a walked
  item that the walk did not enter, with its depth and the bound that stopped it
  (``depth``, ``items`` or ``kinds``);
- the **roots to re-snapshot**: every touched root, the roots of touched summary items, and
  the origin's root.

The walk is breadth-first: depth 1 is what depends on the origin, depth ``d + 1`` what
depends on items of depth ``d``; within a depth items are taken in ``(id, kind)`` order, so
the same ledger and request always give the same plan. An item is entered at the first
depth it is found. ``max_items`` stops the walk at the item that fills it: the rest of that
depth, and the dependents of what was walked at it, lie beyond.

**Re-snapshots** (``resnapshot``): each affected root ``R`` is recomputed *without the
falsified inputs*: the same projections (rule digests) over the same entries (its branch,
from its genesis up to its high-water), skipping every operation that names an object that
is falsified in the cascade's view (the entries that created, changed or referred to it;
see ``deps.named_objects``). A state projection (``memory-state``) is recomputed from a
replay of the memory model over the same filtered entries, so the digest leaves those
objects out. A projection this memroot does not know is carried over unchanged. The new
root's parent is the re-snapshot of ``R``'s parent when that was re-snapshotted by the same
cascade, else ``R``'s parent; its high-water is ``R``'s. A recomputed root equal to ``R``
(nothing falsified in its inputs, parent unchanged) is not listed. Nothing is rewritten: the
re-snapshots are listed in the ``CASCADE`` entry (``resnapshots``), each naming the root it
replaces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from memroot.ledger import encoding
from memroot.ledger.entries import Entry, Kind
from memroot.ledger.errors import IntegrityError, NotFoundError, ValidationError
from memroot.ledger.hashing import domain_hash
from memroot.memory_root._fold import Folder
from memroot.memory_root.falsify.deps import (
    KINDS,
    ROOT,
    Graph,
    ItemRef,
    RootRow,
    listed_rules,
    named_objects,
)
from memroot.memory_root.falsify.states import FALSIFIED, LIVE, STALE
from memroot.memory_root.root import MemoryRoot, ProjectionDigest, RootPreimage
from memroot.projections.projection import (
    Projection,
    RuleDigest,
    Summary,
    SummaryDigest,
    decode_state,
    is_state_projection,
    read_state,
    rule_digest,
)
from memroot.projections.rules import RuleError
from memroot.projections.states import FALSIFICATION

__all__ = [
    "BEYOND_LISTED",
    "BEYOND_TAG",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "CascadeRequest",
    "Cut",
    "EntrySource",
    "FoldCheckpoint",
    "Plan",
    "Resnapshot",
    "RestorePlan",
    "StateReplay",
    "Step",
    "beyond_digest",
    "check_restore_depth",
    "excluded_entry",
    "plan",
    "resnapshot",
    "restore_plan",
]

MAX_DEPTH: Final = 10_000
MAX_ITEMS: Final = 100_000
"""Upper limits of the bounds (a ``CASCADE`` entry must also fit in 1 MiB)."""
BEYOND_LISTED: Final = 1000
"""How many beyond items the entry lists; the digest commits to all of them."""
BEYOND_TAG: Final = "memroot/cascade-beyond/v1"

EntrySource = Callable[[str, int, int], Iterator[tuple[bool, bytes, bytes]]]
"""``rows(branch, start, stop)``: each entry as (is an event, its bytes, its entry hash)."""

StateReplay = Callable[[str, int, frozenset[str]], Any]
"""``replay(branch, hw, excluded)``: a memory-model database replayed without ``excluded``."""

FoldCheckpoint = Callable[[str, int, Sequence[bytes]], tuple[int, dict[bytes, bytes]] | None]
"""``checkpoint(branch, before, rules)``: the newest stored fold states of those projection
rules at a root of ``branch`` whose high-water is below ``before``, as
``(high_water, {rule: encoded state})``; None when there is none (fold from the genesis)."""


@dataclass(frozen=True, slots=True)
class CascadeRequest:
    """What a cascade is asked to do: from where, how far, how much, and what it may touch.

    Raises:
        ValidationError: for a bound below 1 or above its limit, or an empty or unknown kind.
    """

    origin: ItemRef
    max_depth: int
    max_items: int
    kinds: tuple[str, ...] = KINDS
    reason: str | None = None

    def __post_init__(self) -> None:
        for name, limit in (("max_depth", MAX_DEPTH), ("max_items", MAX_ITEMS)):
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= limit:
                raise ValidationError(
                    f"{name} must be an integer from 1 to {limit} (a cascade is bounded), "
                    f"got {value!r}",
                    field=f"payload.{name}",
                )
        kinds = self.kinds
        if not kinds or len(set(kinds)) != len(kinds) or not set(kinds) <= set(KINDS):
            raise ValidationError(
                f"kinds must be a non-empty list of distinct kinds among {', '.join(KINDS)}, "
                f"got {list(kinds)!r}",
                field="payload.kinds",
            )
        if list(kinds) != sorted(kinds):
            object.__setattr__(self, "kinds", tuple(sorted(kinds)))


@dataclass(frozen=True, slots=True)
class Step:
    """An item the walk entered, at its depth."""

    item: ItemRef
    depth: int

    def to_cbor(self) -> dict[str, Any]:
        """Return ``{"type", "id", "depth"}``."""
        return {**self.item.to_cbor(), "depth": self.depth}


@dataclass(frozen=True, slots=True)
class Cut:
    """An item beyond the bound: its depth and which bound stopped it."""

    item: ItemRef
    depth: int
    bound: str

    def to_cbor(self) -> dict[str, Any]:
        """Return ``{"type", "id", "depth", "bound"}``."""
        return {**self.item.to_cbor(), "depth": self.depth, "bound": self.bound}


@dataclass(frozen=True, slots=True)
class Resnapshot:
    """A root recomputed without the falsified inputs, and the root it replaces."""

    replaces: str
    root: str
    preimage: RootPreimage
    branch: str
    summaries: Mapping[str, bytes] = field(default_factory=dict, compare=False)
    """Projection id -> summary bytes, for the projections recomputed (the others keep the
    replaced root's summary)."""

    def to_cbor(self) -> dict[str, Any]:
        """Return ``{"replaces", "memory_root", "parent"}`` (hex), as the entry lists it."""
        parent = self.preimage.parent
        return {
            "replaces": self.replaces,
            "memory_root": self.root,
            "parent": None if parent is None else parent.hex(),
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """What a cascade would do; ``payload`` is its ``CASCADE`` entry's payload."""

    request: CascadeRequest
    branch: str
    origin_state: str
    touched: tuple[Step, ...]
    passed: tuple[Step, ...]
    beyond: tuple[Cut, ...]
    roots: tuple[str, ...]
    resnapshots: tuple[Resnapshot, ...] = field(default=())
    computed: bool = False
    """True once ``resnapshot`` ran: ``roots`` is then exactly the roots ``resnapshots``
    replaces (a candidate that came out unchanged is dropped), so a dry run lists what the
    applied cascade writes."""

    def payload(self) -> dict[str, Any]:
        """Return the ``CASCADE`` payload (docs/FORMAT.md §8)."""
        r = self.request
        out: dict[str, Any] = {
            "max_depth": r.max_depth,
            "max_items": r.max_items,
            "kinds": list(r.kinds),
            "touched": [s.to_cbor() for s in self.touched],
            "beyond": {
                "count": len(self.beyond),
                "digest": beyond_digest(self.beyond).hex(),
                "items": [c.to_cbor() for c in self.beyond[:BEYOND_LISTED]],
            },
            "resnapshots": [x.to_cbor() for x in self.resnapshots],
        }
        if r.reason is not None:
            out["reason"] = r.reason
        return out


def beyond_digest(beyond: Sequence[Cut]) -> bytes:
    """Return ``SHA-256("memroot/cascade-beyond/v1" || 0x00 || cbor([cut, ...]))``."""
    return domain_hash(BEYOND_TAG, encoding.encode([c.to_cbor() for c in beyond]))


# -- the walk ----------------------------------------------------------------------------------


def plan(graph: Graph, not_live: Mapping[ItemRef, str], request: CascadeRequest) -> Plan:
    """Walk what depends on ``request.origin`` within the bound; write nothing.

    ``not_live`` maps every stale or falsified item of the view to its state (others are
    live). The origin must exist in the view and must not be live.

    Raises:
        NotFoundError: if the view does not see the origin.
        RuleError: if the origin is live (there is nothing to cascade from).
    """
    origin = request.origin
    if not graph.exists(origin):
        raise NotFoundError(f"no {origin.kind} {origin.id} on branch {graph.view[0][0]!r}")
    origin_state = not_live.get(origin, LIVE)
    if origin_state == LIVE:
        raise RuleError(
            FALSIFICATION,
            f"{origin.kind} {origin.id} is live: a cascade starts from a falsified or stale "
            "item (falsify it first)",
        )
    kinds = set(request.kinds)
    seen = {origin}
    touched: list[Step] = []
    passed: list[Step] = []
    beyond: list[Cut] = []
    walked = [origin]
    depth = 0
    full = False
    while walked:
        depth += 1
        found = _next_depth(graph, walked, seen)
        if depth > request.max_depth:
            beyond.extend(Cut(i, depth, "depth") for i in found)
            break
        walked = []
        for i in found:
            if i.kind not in kinds:
                beyond.append(Cut(i, depth, "kinds"))
            elif full:
                beyond.append(Cut(i, depth, "items"))
            elif not_live.get(i, LIVE) != LIVE:
                passed.append(Step(i, depth))
                walked.append(i)
            else:
                touched.append(Step(i, depth))
                walked.append(i)
                full = len(touched) >= request.max_items
        if full:
            bound = "depth" if depth + 1 > request.max_depth else "items"
            beyond.extend(Cut(i, depth + 1, bound) for i in _next_depth(graph, walked, seen))
            break
    # A falsified root is an input to leave out, not a root to recompute: its children
    # re-snapshot over its parent instead (``resnapshot``), so it is not listed.
    roots: dict[str, None] = {}
    for i in [origin, *(s.item for s in touched)]:
        if i.kind == ROOT:
            roots[i.id] = None
        elif (row := graph.summary_root(i)) is not None:
            roots[row.root] = None
    for r in list(roots):
        if not_live.get(ItemRef(ROOT, r)) == FALSIFIED:
            del roots[r]
    return Plan(
        request,
        graph.view[0][0],
        origin_state,
        tuple(touched),
        tuple(passed),
        tuple(beyond),
        tuple(roots),
    )


def _next_depth(graph: Graph, walked: Iterable[ItemRef], seen: set[ItemRef]) -> list[ItemRef]:
    """Return the unseen dependents of ``walked``, sorted, and mark them seen."""
    found: dict[ItemRef, None] = {}
    for item in walked:
        for d in graph.dependents(item):
            if d not in seen:
                found[d] = None
    seen.update(found)
    return sorted(found, key=ItemRef.key)


# -- re-snapshots ------------------------------------------------------------------------------


def _preimage(row: RootRow) -> RootPreimage | None:
    """Return a root's preimage with its projection list (a v3 root's from the index).

    Raises:
        IntegrityError: a v3 root whose list is not known, or whose list in the index does
            not hash to its ``projections`` (an edited ``fz_roots`` row).
    """
    if row.preimage is None:
        return None
    payload = {**encoding.decode(row.preimage), "memory_root": bytes.fromhex(row.root)}
    pre = RootPreimage.from_payload(payload)[0]
    if pre.list_known:
        return pre
    items = [
        ProjectionDigest(i, RuleDigest(r), SummaryDigest(d), n) for i, r, d, n in listed_rules(row)
    ]
    try:
        return pre.with_projections(items)
    except ValueError as e:
        raise IntegrityError(
            f"step 9: the dependency index's projection list of memory root {row.root} does "
            "not hash to the list its SNAPSHOT commits to (derived state edited): run "
            "`memroot verify`, or `memroot rebuild`",
            branch=row.branch,
            seq=row.seq,
            step=9,
        ) from e


def excluded_entry(entry: Entry, excluded: frozenset[str]) -> bool:
    """Return True for an operation that names an excluded object (a falsified input)."""
    return entry.kind is Kind.OP and any(i in excluded for i in named_objects(entry))


_PREFIX: Final = 200
"""Bytes of an entry that hold everything before its body (v, prev, seq, branch, ts, kind,
type; docs/FORMAT.md §3), with room to spare."""


def _refold(
    source: EntrySource,
    branch: str,
    projections: Sequence[Projection],
    his: Sequence[int],
    excluded: frozenset[str],
    start: tuple[int, dict[bytes, bytes]] | None = None,
) -> dict[int, dict[bytes, Summary]]:
    """Fold ``projections`` over ``branch`` without the excluded entries; summaries at ``his``.

    ``start`` is ``(high_water, {rule: state})``: fold states at an entry before every
    excluded one, to continue from instead of the genesis.

    Entries of a type no projection reads change nothing, so they are not decoded: an entry
    whose first bytes do not contain the encoding of any type read cannot be of such a type
    (a match elsewhere, e.g. in ``prev``, only costs a decode).
    """
    first = 0
    if start is None:
        folder = Folder(projections)
    else:
        first = start[0] + 1
        folder = Folder(
            projections, [decode_state(p, start[1][rule_digest(p)]) for p in projections]
        )
    reads = [getattr(p, "types", None) for p in projections]
    skip_events = all(t is not None and "EVENT" not in t for t in reads)
    needles: list[bytes] | None = None
    if all(t is not None for t in reads):
        needles = sorted({encoding.encode(t) for ts in reads if ts is not None for t in ts})
    wanted = sorted(set(his))
    out: dict[int, dict[bytes, Summary]] = {}
    k = 0
    rows = source(branch, first, wanted[-1] + 1)
    for seq, (is_event, data, entry_hash) in enumerate(rows, start=first):
        if is_event and skip_events:
            pass
        elif needles is None or any(data.find(n, 0, _PREFIX) >= 0 for n in needles):
            e = Entry.from_bytes(data, entry_hash)
            if not excluded_entry(e, excluded):
                folder.fold(e)
        while k < len(wanted) and wanted[k] == seq:
            out[seq] = {rule_digest(p): s for p, s, _ in folder.outputs(writer=False)}
            k += 1
    return out


def _reads_any(projection: Projection, types: set[str]) -> bool:
    reads = getattr(projection, "types", None)
    return reads is None or bool(types & set(reads))


def resnapshot(
    graph: Graph,
    plan_: Plan,
    excluded: frozenset[str],
    projections: Sequence[Projection],
    source: EntrySource,
    state_replay: StateReplay | None,
    checkpoint: FoldCheckpoint | None = None,
    not_live: Mapping[ItemRef, str] | None = None,
) -> Plan:
    """Return ``plan_`` with its re-snapshots: each affected root without ``excluded``.

    ``excluded`` holds the ids of the objects falsified in the cascade's view;
    ``projections`` every projection this memroot knows (``Registry.known``); ``source``
    reads entries; ``state_replay`` replays the memory model for state projections (None:
    their summaries are carried over unchanged); ``checkpoint`` finds stored fold states
    to start from (a cache: the result is the same as folding from the genesis);
    ``not_live`` the states of the view (``plan``'s), from which a new root's parent is
    resolved (``_link``): a falsified parent is passed over for its own parent, and a stale
    one an earlier cascade re-snapshotted for its newest re-snapshot, so replacement roots
    chain to each other and never to a falsified root.

    Raises:
        DecodeError: if a stored entry does not decode.
    """
    by_rule: dict[bytes, Projection] = {rule_digest(p): p for p in projections}
    names = [b for b, _ in graph.view]
    rows = [r for r in (graph.root(x) for x in plan_.roots) if r is not None]
    rows.sort(key=lambda r: (-names.index(r.hbranch) if r.hbranch in names else 0, r.hi, r.seq))
    computed: dict[tuple[str, int], dict[bytes, Summary]] = {}
    if excluded:
        for hbranch in dict.fromkeys(r.hbranch for r in rows):
            first, types = graph.inputs_of(excluded, hbranch)
            # Roots before the first excluded entry, and projections that read none of the
            # excluded entries' types, come out the same: they are carried over, not folded.
            mine = [r for r in rows if r.hbranch == hbranch and first is not None and r.hi >= first]
            if not mine:
                continue
            rules = {rule for r in mine for _, rule, _, _ in listed_rules(r) if rule in by_rule}
            folds = [
                by_rule[x]
                for x in sorted(rules)
                if not is_state_projection(by_rule[x]) and _reads_any(by_rule[x], types)
            ]
            states = [by_rule[x] for x in sorted(rules) if is_state_projection(by_rule[x])]
            his = sorted({r.hi for r in mine})
            if folds:
                assert first is not None
                start = (
                    None
                    if checkpoint is None
                    else checkpoint(hbranch, first, [rule_digest(p) for p in folds])
                )
                for hi, sums in _refold(source, hbranch, folds, his, excluded, start).items():
                    computed.setdefault((hbranch, hi), {}).update(sums)
            if states and state_replay is not None:
                db = state_replay(hbranch, his[-1], excluded)
                for hi in his:
                    for p in states:
                        computed.setdefault((hbranch, hi), {})[rule_digest(p)] = read_state(
                            p, db, hbranch, hi
                        )
    replaced: dict[str, str] = {}
    out: list[Resnapshot] = []
    for r in rows:
        pre = _preimage(r)
        if pre is None:
            continue
        sums = computed.get((r.hbranch, r.hi), {})
        items = []
        for d in pre.projections:
            s = sums.get(d.rule)
            items.append(d if s is None else ProjectionDigest(d.id, d.rule, s.digest, s.count))
        link = _link(graph, pre.parent, replaced, not_live or {})
        parent = None if link is None else MemoryRoot(bytes.fromhex(link))
        # A v2 re-snapshot carries the map of the root it replaces (FORMAT §6.13, "Cascades").
        new = RootPreimage(pre.branch, parent, pre.high_water, tuple(items), pre.v, pre.map_root)
        if new == pre:
            continue
        root = new.root().hex()
        replaced[r.root] = root
        data = {d.id: sums[d.rule].data for d in pre.projections if d.rule in sums}
        out.append(Resnapshot(r.root, root, new, r.hbranch, data))
    return Plan(
        plan_.request,
        plan_.branch,
        plan_.origin_state,
        plan_.touched,
        plan_.passed,
        plan_.beyond,
        tuple(x.replaces for x in out),
        tuple(out),
        True,
    )


def _link(
    graph: Graph,
    parent: bytes | None,
    replaced: Mapping[str, str],
    not_live: Mapping[ItemRef, str],
) -> str | None:
    """Return the root a re-snapshot links to in place of its original ``parent``.

    The re-snapshot this cascade made of it; else, for a falsified parent, the link of that
    root's own parent (a falsified root is left out of the chain); else, for a stale parent
    an earlier cascade re-snapshotted, the link of its newest re-snapshot the view sees;
    else the parent itself.
    """
    at = None if parent is None else parent.hex()
    seen: set[str] = set()
    while at is not None and at not in seen:
        seen.add(at)
        if at in replaced:
            return replaced[at]
        state = not_live.get(ItemRef(ROOT, at))
        if state == FALSIFIED:
            row = graph.root(at)
            if row is None:
                return at
            at = row.parent
        elif state == STALE and (newer := graph.newest_replacement(at)) is not None:
            at = newer
        else:
            return at
    return at


# -- undoing a cascade: RESTORE with a cascade part ----------------------------------------------


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """What ``RESTORE ID --cascade`` undoes; ``payload`` is the entry's ``cascade`` part.

    ``restored``: the items the cascades from the origin marked stale, still stale from
    them, at depth ``<= max_depth`` (they become live); ``beyond``: those deeper (they stay
    stale); ``withdrawn``: ``(re-snapshot, root it replaces)`` for each re-snapshot those
    cascades listed of a root this entry restores (or of the origin): they become stale,
    and the branch's next snapshot links to the restored root again.
    """

    origin: ItemRef
    max_depth: int
    restored: tuple[Step, ...]
    beyond: tuple[Step, ...]
    withdrawn: tuple[tuple[str, str], ...]

    def payload(self) -> dict[str, Any]:
        """Return the ``cascade`` part of the RESTORE payload (docs/FORMAT.md §8.2)."""
        return {
            "max_depth": self.max_depth,
            "restored": [s.to_cbor() for s in self.restored],
            "beyond": {
                "count": len(self.beyond),
                "items": [s.to_cbor() for s in self.beyond[:BEYOND_LISTED]],
            },
            "withdrawn": [{"memory_root": new, "replaces": old} for new, old in self.withdrawn],
        }


def check_restore_depth(value: Any) -> int:
    """Return a restore's ``max_depth`` (1 to ``MAX_DEPTH``).

    Raises:
        ValidationError: naming ``payload.cascade.max_depth``.
    """
    if type(value) is not int or not 1 <= value <= MAX_DEPTH:
        raise ValidationError(
            f"max_depth must be an integer from 1 to {MAX_DEPTH} (a restore of a cascade is "
            f"bounded), got {value!r}",
            field="payload.cascade.max_depth",
        )
    return value


def restore_plan(
    origin: ItemRef,
    max_depth: int,
    marked: Sequence[tuple[ItemRef, int]],
    replacements: Sequence[tuple[str, str]],
    live_roots: Callable[[str], bool],
) -> RestorePlan:
    """Plan the undo of the cascades from ``origin``; write nothing.

    ``marked`` lists ``(item, depth)`` for every item whose current state in the view is
    the staleness a cascade from ``origin`` set; ``replacements`` ``(re-snapshot, replaced
    root)`` for every re-snapshot those cascades listed, in the order listed;
    ``live_roots(root)`` says whether a re-snapshot is still live (only those are withdrawn).
    """
    check_restore_depth(max_depth)
    depth: dict[ItemRef, int] = {}
    for item, d in marked:
        if item != origin:
            depth[item] = min(d, depth.get(item, d))
    order = sorted(depth, key=lambda i: (depth[i], *i.key()))
    restored = tuple(Step(i, depth[i]) for i in order if depth[i] <= max_depth)
    beyond = tuple(Step(i, depth[i]) for i in order if depth[i] > max_depth)
    back = {s.item.id for s in restored if s.item.kind == ROOT}
    if origin.kind == ROOT:
        back.add(origin.id)
    withdrawn = tuple(
        dict.fromkeys((new, old) for new, old in replacements if old in back and live_roots(new))
    )
    return RestorePlan(origin, max_depth, restored, beyond, withdrawn)
