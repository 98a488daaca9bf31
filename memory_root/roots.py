"""``Roots``: the Python API of memory roots over an open ledger.

    from memroot.ledger.ledger import Ledger
    from memroot.memory_root import Roots, RootsHook

    with Ledger.open(path, hooks=[RootsHook()]) as ledger:
        roots = Roots(ledger)
        roots.append(event)                 # like ledger.append, plus a checkpoint after any
                                            # automatic snapshot the append produced
        result = roots.snapshot()           # on demand; idempotent when nothing changed
        for record in roots.chain():        # newest first, following parent links
            print(record.root.hex(), record.state)

Checkpoints. SPEC 5 signs a checkpoint only after what it covers is committed, so no
checkpoint can be signed inside the append transaction that carries an automatic snapshot.
``Roots.append`` / ``append_batch`` / ``bulk`` sign one right after the commit when the
append produced a snapshot; a ledger appended through ``Ledger`` directly gets its checkpoint
at the next ``Roots.snapshot`` or ``Roots.sign_pending`` (``memroot snapshot``), or any
``memroot checkpoint``. One checkpoint covers every snapshot committed before it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from memroot.ledger import encoding
from memroot.ledger.entries import CANONICAL_BRANCH, EventInput, OpInput, _library_op
from memroot.ledger.errors import NotFoundError
from memroot.ledger.ledger import Appended, Ledger
from memroot.ledger.note import SignedCheckpoint
from memroot.ledger.vocab import OpType
from memroot.memory_root import records
from memroot.memory_root._fold import Folder, relink
from memroot.memory_root.hook import RootsHook
from memroot.memory_root.records import RootRecord, SelfModelRecord
from memroot.memory_root.replay import RootsRebuild, rebuild
from memroot.memory_root.root import HighWater, MemoryRoot, RootPreimage, compute_root
from memroot.memory_root.root_v2 import map_from_scratch
from memroot.memory_root.selfmodel import SelfModel, selfmodel_payload
from memroot.projections.projection import is_state_projection, read_state

__all__ = [
    "ProjectionDiff",
    "RootDiff",
    "RootView",
    "Roots",
    "SelfModelView",
    "SnapshotResult",
    "SummaryView",
]


@dataclass(frozen=True, slots=True)
class SnapshotResult:
    """What ``snapshot`` did: the (new or existing) root, and the checkpoint signed after."""

    record: RootRecord
    created: bool
    checkpoint: SignedCheckpoint | None


@dataclass(frozen=True, slots=True)
class SummaryView:
    """One projection's part of a root, decoded: rule (id, version, params) and summary."""

    id: str
    version: int
    params: dict[str, Any]
    rule: bytes
    digest: bytes
    count: int
    value: Any


@dataclass(frozen=True, slots=True)
class RootView:
    """A stored root with its summaries decoded."""

    record: RootRecord
    summaries: tuple[SummaryView, ...]


@dataclass(frozen=True, slots=True)
class ProjectionDiff:
    """How one projection's summary differs between two roots.

    ``status`` is ``added`` / ``removed`` (the projection is in one root only), ``changed``
    or ``same``. For map summaries, ``added`` / ``removed`` / ``changed`` list item keys
    (``changed`` with both values); other summaries differ as a whole under key ``""``.
    """

    id: str
    status: str
    rule_changed: bool
    count: tuple[int | None, int | None]
    added: dict[str, Any]
    removed: dict[str, Any]
    changed: dict[str, tuple[Any, Any]]


@dataclass(frozen=True, slots=True)
class RootDiff:
    """Two roots compared projection by projection; ``ancestor``: a is on b's parent chain."""

    a: RootRecord
    b: RootRecord
    ancestor: bool
    projections: tuple[ProjectionDiff, ...]


@dataclass(frozen=True, slots=True)
class SelfModelView:
    """A stored SelfModel snapshot, decoded, with the state of the root it cites."""

    record: SelfModelRecord
    body: dict[str, Any]
    memory_root_state: str | None


def _views(db: Any, record: RootRecord) -> tuple[SummaryView, ...]:
    out = []
    for s in records.summaries(db, record.root):
        rule = encoding.decode(s.rule_cbor)
        out.append(
            SummaryView(
                s.projection,
                int(rule["version"]),
                dict(rule["params"]),
                s.rule,
                s.digest,
                s.count,
                encoding.decode(s.data),
            )
        )
    return tuple(out)


def _diff_values(
    a: Any, b: Any
) -> tuple[dict[str, Any], dict[str, Any], dict[str, tuple[Any, Any]]]:
    if type(a) is dict and type(b) is dict:
        added = {k: b[k] for k in sorted(set(b) - set(a))}
        removed = {k: a[k] for k in sorted(set(a) - set(b))}
        changed = {k: (a[k], b[k]) for k in sorted(set(a) & set(b)) if a[k] != b[k]}
        return added, removed, changed
    return {}, {}, ({} if a == b else {"": (a, b)})


class Roots:
    """Memory roots of one open ledger (opened with a ``RootsHook`` to write)."""

    def __init__(self, ledger: Ledger) -> None:
        """Wrap ``ledger``; snapshots need a ``RootsHook`` among its hooks."""
        self.ledger = ledger
        found = [h for h in ledger.hooks if isinstance(h, RootsHook)]
        self._hook = found[0] if found else None
        if (
            self._hook is None
            and not ledger.derived.db.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'memory_roots'"
            ).fetchall()
        ):
            with ledger.write() as db:
                records.install(db)

    @property
    def hook(self) -> RootsHook:
        """The ledger's ``RootsHook``.

        Raises:
            ValueError: if the ledger was opened without one (snapshots need it).
        """
        if self._hook is None:
            raise ValueError("open the ledger with hooks=[RootsHook(), ...] to take snapshots")
        return self._hook

    # -- writing -------------------------------------------------------------------------------

    def snapshot(self, branch: str = CANONICAL_BRANCH) -> SnapshotResult:
        """Take a snapshot of ``branch`` at its head and sign a checkpoint right after.

        Idempotent: when nothing but SelfModel snapshots was appended since the last
        snapshot, return that root and append nothing (signing only a checkpoint it still
        lacks).

        Raises:
            NotFoundError: if the branch does not exist.
            RefusedError, StorageError: if the append is refused or cannot be written.
            ValueError: if the ledger has no ``RootsHook``.
        """
        hook = self.hook
        ledger = self.ledger
        try:
            with ledger.write():
                prepared = hook.prepare_head(ledger, branch)
                if prepared is not None:
                    ledger.append(
                        _library_op(Ledger.system_op(OpType.SNAPSHOT, prepared.preimage.payload())),
                        branch=branch,
                    )
        except BaseException:
            hook.forget(ledger, branch)
            raise
        record = self.latest(branch)
        assert record is not None  # a snapshot was just taken, or nothing changed since one
        if prepared is not None:
            return SnapshotResult(record, True, ledger.checkpoint(branch))
        return SnapshotResult(record, False, self.sign_pending(branch))

    def append(self, item: EventInput | OpInput, *, branch: str = CANONICAL_BRANCH) -> Appended:
        """``Ledger.append``, then a checkpoint if the append produced a snapshot.

        Raises:
            RefusedError, StorageError: as ``Ledger.append``.
        """
        return self.append_batch([item], branch=branch)[0]

    def append_batch(
        self, items: Iterable[EventInput | OpInput], *, branch: str = CANONICAL_BRANCH
    ) -> Sequence[Appended]:
        """``Ledger.append_batch``, then a checkpoint if the batch produced a snapshot.

        Raises:
            RefusedError, StorageError: as ``Ledger.append_batch``.
        """
        out = self.ledger.append_batch(items, branch=branch)
        if (
            any(a.type == OpType.SNAPSHOT for a in out)
            and not self.ledger.derived.db.in_transaction
        ):
            self.ledger.checkpoint(branch)
        return out

    @contextlib.contextmanager
    def bulk(self, branch: str = CANONICAL_BRANCH) -> Iterator[None]:
        """``Ledger.bulk`` (one transaction), then sign any checkpoint a snapshot needs.

        Raises:
            StorageError: if the transaction cannot be committed.
        """
        with self.ledger.bulk():
            yield
        self.sign_pending(branch)

    def sign_pending(self, branch: str = CANONICAL_BRANCH) -> SignedCheckpoint | None:
        """Sign a checkpoint if the branch's newest SNAPSHOT is not covered by one yet.

        Returns the new checkpoint, or None when none was owed.

        Raises:
            KeyFileError: if the signing key cannot be loaded.
        """
        latest = self.latest(branch)
        if latest is None:
            return None
        cp = self.ledger.store.latest_checkpoint(self.ledger.store.branch(branch).no)
        if cp is not None and cp[0] > latest.seq:
            return None
        return self.ledger.checkpoint(branch)

    def record_selfmodel(self, model: SelfModel, branch: str = CANONICAL_BRANCH) -> SelfModelRecord:
        """Append a ``SELFMODEL_SNAPSHOT`` of ``model`` citing the latest live root.

        Raises:
            RefusedError, StorageError: if the append is refused or cannot be written.
        """
        with self.ledger.write() as db:
            live = records.latest_root(db, branch, live_only=True)
            payload = selfmodel_payload(model, None if live is None else live.root, branch)
            op = _library_op(Ledger.system_op(OpType.SELFMODEL_SNAPSHOT, payload))
            self.ledger.append(op, branch=branch)
        record = records.latest_selfmodel(self.ledger.derived.db, branch)
        assert record is not None
        return record

    def rebuild(self) -> int:
        """Drop the stored roots and SelfModel records and replay them from the log.

        Returns the number of roots written.

        Raises:
            IntegrityError: if a SNAPSHOT does not replay (nothing is changed).
            ValueError: if the ledger has no ``RootsHook`` (it names the projections).
        """
        n = rebuild(self.ledger, self.hook.registry)
        self.rebuilt()
        return n

    def rebuild_layer(self) -> RootsRebuild | None:
        """Return the roots' rebuild as a layer of the memory model's pass, or None.

        The layer (a ``memroot.projections.replay.Refold``) is fed the entries the memory
        model's ``rebuild`` reads, so the log is read strictly once for both; call
        ``rebuilt`` once it finished. None when the hook's registry knows a state
        projection: its summaries read the memory model as stored, so the roots must be
        replayed first, by ``rebuild``, with a read of their own.
        """
        registry = self.hook.registry
        if any(is_state_projection(p) for p in registry.known()):
            return None
        return RootsRebuild(self.ledger, registry)

    def rebuilt(self) -> None:
        """Drop the hook's in-memory folds: the next append reloads them from the records."""
        for b in self.ledger.store.branches():
            self.hook.forget(self.ledger, b.name)

    # -- reading -------------------------------------------------------------------------------

    def latest(
        self, branch: str = CANONICAL_BRANCH, *, live_only: bool = False
    ) -> RootRecord | None:
        """Return the newest root of ``branch`` (newest live one with ``live_only``)."""
        return records.latest_root(self.ledger.derived.db, branch, live_only=live_only)

    def get(self, root: bytes | str) -> RootRecord:
        """Return a root by its bytes or its hex (a unique prefix of 4+ digits will do).

        Raises:
            NotFoundError: if no (or more than one) stored root matches.
            ValidationError: if the text is not hex.
        """
        db = self.ledger.derived.db
        if isinstance(root, bytes):
            found = records.get_resnapshot(db, root)
            return records.get_root(db, root) if found is None else found
        return records.find_any(db, root)

    def _lookup(self, root: bytes) -> RootRecord | None:
        try:
            return self.get(root)
        except NotFoundError:
            return None

    def chain(
        self, root: bytes | str | None = None, branch: str = CANONICAL_BRANCH
    ) -> list[RootRecord]:
        """Return ``root`` (default: the branch's newest) and its ancestors, newest first.

        Re-snapshots a cascade wrote are roots too: each is followed by the root it
        replaces (stale), and the chain goes on from the re-snapshot's parent, as the
        branch's next snapshot links to the re-snapshot (docs/falsify.md). Without
        ``root`` the chain starts at the newest root recorded on the branch (a SNAPSHOT or
        a CASCADE's re-snapshot), and the branch's roots the chain does not pass through
        (e.g. a falsified root its children were re-snapshotted over) follow, newest first.

        Raises:
            NotFoundError: if ``root`` is not stored.
        """
        db = self.ledger.derived.db
        own: list[RootRecord] = []
        if root is None:
            latest = self.latest(branch)
            own = [*([] if latest is None else [latest]), *records.resnapshots_of(db, branch)]
            # Newest entry first; within one CASCADE the last listed (its re-snapshots are
            # listed ancestors first, so the last is the head of their chain).
            order = {r.root: i for i, r in enumerate(own)}
            own.sort(key=lambda r: (r.seq, order[r.root]), reverse=True)
            start = own[0] if own else None
        else:
            start = self.get(root)
        out: list[RootRecord] = []
        seen: set[bytes] = set()
        record = start
        while record is not None and record.root not in seen:
            out.append(record)
            seen.add(record.root)
            replaced = record.replaces
            while replaced is not None and replaced not in seen:
                original = self._lookup(replaced)
                if original is None:
                    break
                out.append(original)
                seen.add(original.root)
                replaced = original.replaces
            record = None if record.parent is None else self._lookup(record.parent)
        if root is None:
            rest = {r.root: r for r in own}
            rest.update(
                (r.root, r)
                for r in (
                    records.get_root(db, bytes(x))
                    for (x,) in db.execute(
                        "SELECT root FROM memory_roots WHERE branch = ? ORDER BY seq DESC",
                        (branch,),
                    )
                )
            )
            out.extend(
                sorted((r for r in rest.values() if r.root not in seen), key=lambda r: -r.seq)
            )
        return out

    def show(self, root: bytes | str) -> RootView:
        """Return a root with every summary decoded.

        Raises:
            NotFoundError, ValidationError: as ``get``.
        """
        record = self.get(root)
        return RootView(record, _views(self.ledger.derived.db, record))

    def diff(self, a: bytes | str, b: bytes | str) -> RootDiff:
        """Compare two roots projection by projection, item by item.

        Raises:
            NotFoundError, ValidationError: as ``get``.
        """
        va, vb = self.show(a), self.show(b)
        sa = {s.id: s for s in va.summaries}
        sb = {s.id: s for s in vb.summaries}
        out = []
        for pid in sorted(set(sa) | set(sb)):
            x, y = sa.get(pid), sb.get(pid)
            if x is None or y is None:
                status = "added" if x is None else "removed"
                out.append(
                    ProjectionDiff(
                        pid,
                        status,
                        True,
                        (None if x is None else x.count, None if y is None else y.count),
                        {},
                        {},
                        {},
                    )
                )
                continue
            added, removed, changed = _diff_values(x.value, y.value)
            status = "same" if x.digest == y.digest and x.rule == y.rule else "changed"
            out.append(
                ProjectionDiff(
                    pid, status, x.rule != y.rule, (x.count, y.count), added, removed, changed
                )
            )
        ancestor = False
        seen: set[bytes] = set()
        at: RootRecord | None = vb.record
        while at is not None and at.root not in seen and not ancestor:
            seen.add(at.root)
            ancestor = at.root == va.record.root
            at = None if at.parent is None else self._lookup(at.parent)
        return RootDiff(va.record, vb.record, ancestor, tuple(out))

    def selfmodel(self, branch: str = CANONICAL_BRANCH) -> SelfModelView | None:
        """Return the newest SelfModel snapshot of ``branch``, decoded, or None."""
        db = self.ledger.derived.db
        record = records.latest_selfmodel(db, branch)
        if record is None:
            return None
        state = None
        if record.memory_root is not None:
            with contextlib.suppress(NotFoundError):
                state = records.get_root(db, record.memory_root).state
        return SelfModelView(record, encoding.decode(record.body), state)

    def compute(self, branch: str = CANONICAL_BRANCH, hw_seq: int | None = None) -> RootPreimage:
        """Recompute from scratch, writing nothing, the root a snapshot at ``hw_seq`` gives.

        The parent is the newest root whose SNAPSHOT entry precedes ``hw_seq + 1`` (or
        its re-snapshot, when a cascade relinked it); the projections are the hook's
        registry. ``hw_seq`` defaults to the branch's head.

        Raises:
            RefusedError: if ``hw_seq`` is outside the branch.
            ValueError: if the ledger has no ``RootsHook``.
        """
        ledger = self.ledger
        size = ledger.size(branch)
        hw_seq = size - 1 if hw_seq is None else hw_seq
        if not 0 <= hw_seq < size:
            raise NotFoundError(f"entry {hw_seq} is not on branch {branch!r} ({size} entries)")
        folder = Folder(self.hook.registry.projections())
        parent = None
        if branch != CANONICAL_BRANCH:
            parent = RootsHook.fork_root(ledger.derived.db, ledger.entry(0, branch), ledger)
        for e in ledger.entries(0, hw_seq + 1, branch):
            folder.fold(e)
            claimed = e.body.get("payload", {}).get("memory_root") if e.type == "SNAPSHOT" else None
            parent = MemoryRoot(claimed) if type(claimed) is bytes else relink(parent, e)
        hw = HighWater(
            hw_seq, ledger.entry(hw_seq, branch).hash, hw_seq + 1, ledger.root(hw_seq + 1, branch)
        )
        db = ledger.derived.db
        outputs = folder.outputs(
            writer=False, read_state=lambda p: read_state(p, db, branch, hw_seq)
        )
        return compute_root(
            branch,
            parent,
            hw,
            [(p, s) for p, s, _ in outputs],
            map_from_scratch(ledger, branch, hw_seq + 1),
        )
