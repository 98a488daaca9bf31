"""Appending to a ledger: entries built, folded through the hooks and written in one transaction.

``append``/``append_batch``/``fork``/``append_system`` build each entry (the native core
builds runs of plain events at once), hand it to the hooks, queue what they return and
write the rows, the Merkle nodes and the new head; the seal (``_sealing``) signs the result
before the transaction commits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import apsw

from memroot.ledger import merkle
from memroot.ledger._backend import NATIVE as _N
from memroot.ledger._backend import collector_paused
from memroot.ledger._sealing import _Sealing
from memroot.ledger._state import (
    _BRANCH_NAME_RE,
    _KEEP_TYPES,
    _MAX_ENTRY_BYTES,
    _N_RAND,
    POLICY_VERSION,
    SYSTEM_ACTOR,
    SYSTEM_NAMESPACE,
    Appended,
    AppendedRun,
    PackedEvents,
    _copy,
    _Head,
    _Seal,
    _uuid_bytes,
    branch_origin,
)
from memroot.ledger.backends.store import (
    BranchRow,
    entry_key,
    unpack_entry_row,
    unpack_keyed,
)
from memroot.ledger.entries import (
    CANONICAL_BRANCH,
    FORMAT_VERSION,
    Entry,
    EventInput,
    Kind,
    OpInput,
    _library_op,
    build_entry,
    check_ts,
    check_uuid,
    new_uuids,
    now_us,
    refuse_reserved,
)
from memroot.ledger.errors import (
    NotFoundError,
    RefusedError,
    StorageError,
    ValidationError,
)
from memroot.ledger.hashing import SALT_SIZE, EntryHash, content_commitment, content_digest
from memroot.ledger.keyset import KEY_ENTRIES_META, KEY_ENTRY_TYPES
from memroot.ledger.vocab import ActorType, OpType


@dataclass(frozen=True, slots=True)
class _Genesis:
    """The genesis entry of a branch, appended through the same path as everything else."""

    body: dict[str, Any]
    id: str
    ts: int | None = None


_Row = tuple[int, bytes, bytes, bytes | None, bytes | None, bytes | None]
"""An ``entries`` row ``(k, hash, data, digest, salt, content)``."""
_Rows = list[_Row | bytes]
"""A batch's ``entries`` rows in seq order: tuples, or event rows packed into one byte string
(``store.pack_entry_row``) where the native core built them without hooks."""
_Events = list[tuple[bytes, int]] | tuple[bytes, bytes]
"""Event index rows ``(id bytes, k)``, or packed (``native.build_events(pack=True)``: the ids end
to end, the keys as native int64s)."""

_NativeRun = tuple[
    int,
    Sequence[_Row | bytes],
    _Events,
    list[bytes] | bytes,
    list[Any] | bytes,
    int | None,
    list[Any] | None,
    list[str] | None,
    bool,
]
"""What ``native.build_events`` returns, packed or not (see ``Ledger._build_run``): packed,
the leaf hashes and the ids' texts come end to end (``PackedEvents``)."""


_ONLY_EVENTS: Final = {EventInput}
_PACKED: Final = {bytes}


def _own_ids(items: Sequence[EventInput | OpInput | _Genesis]) -> list[bytes]:
    """Return the 16 bytes of each event request's own (canonical) id."""
    texts = [it.id for it in items if type(it) is EventInput and it.id is not None]
    if _N is not None:
        return [raw for raw in _N.uuid_bytes(texts) if raw is not None]
    return [_uuid_bytes(t) for t in texts]


def _pairs(events: _Events) -> list[tuple[bytes, int]]:
    """Return event index rows ``(id bytes, k)``, unpacked if they are packed."""
    if isinstance(events, tuple):
        return unpack_keyed(events[0], events[1], 16)
    return events


def _row(k: int, row: _Row | bytes) -> _Row:
    """Return an ``entries`` row as a tuple, unpacked (keyed ``k``) if it is packed."""
    return unpack_entry_row(k, row) if isinstance(row, bytes) else row


def _all_new(
    events: list[tuple[bytes, int]], batch_events: Mapping[bytes, int], stored: set[bytes]
) -> bool:
    """Whether no id of a run's events (``(id bytes, k)``) is stored, in the batch or twice."""
    raws = [raw for raw, _ in events]
    if len(set(raws)) != len(raws):
        return False
    return not any(raw in batch_events or raw in stored for raw in raws)


def _first_taken(
    run: Sequence[EventInput | OpInput | _Genesis],
    batch_events: Mapping[bytes, int],
    stored: set[bytes],
) -> int | None:
    """Return the position of the first event of ``run`` whose own id is taken, or None.

    Taken: by an event stored (``stored``: those of the batch's own ids the index held when
    it began), of the batch (``batch_events``) or earlier in ``run``.
    """
    seen: set[bytes] = set()
    for i, item in enumerate(run):
        if item.id is not None:
            raw = _uuid_bytes(item.id)
            if raw in seen or raw in batch_events or raw in stored:
                return i
            seen.add(raw)
    return None


def _fresh_ids() -> Iterator[str]:
    """Yield new UUIDv7s, a few at first and more as they are taken (a clock read a chunk).

    A batch's reference loop assigns ids to only some entries (its operations, the automatic
    snapshots): making one per item up front cost more than the ids it used.
    """
    n = 16
    while True:
        yield from new_uuids(n)
        n = min(4 * n, 1024)


class _Appending(_Sealing):
    """Appends: building, folding through the hooks and writing entries."""

    # -- appends -------------------------------------------------------------------------------

    def append(self, item: EventInput | OpInput, *, branch: str = CANONICAL_BRANCH) -> Appended:
        """Append one event or operation durably and return where it landed.

        Raises:
            ValidationError / RefusedError: the entry is refused; nothing was written.
            StorageError: the file could not be written; nothing was written.
        """
        return self.append_batch([item], branch=branch)[0]

    def append_batch(
        self, items: Iterable[EventInput | OpInput], *, branch: str = CANONICAL_BRANCH
    ) -> Sequence[Appended]:
        """Append many entries in one transaction: all of them land, or none.

        Follow-up operations returned by hooks (e.g. automatic snapshots) land in the same
        transaction and are included in the result, an ``AppendedRun``.

        Raises:
            ValidationError / RefusedError: an entry is refused; nothing was written.
            StorageError: the file could not be written; nothing was written.
        """
        items = list(items)
        if not items or self._replaying:
            # Replaying committed entries into the cache: what a hook appends is in the log.
            return AppendedRun(())
        # A first check on the key set as last read (no read here: the seal checks again, on
        # the locked state, before anything commits).
        self._require_key(cached=True)
        with self.write() as db:
            # A rolled-back transaction leaves the cached right edge untouched (it is only
            # replaced in _write_rows), and _head() re-validates it against the stored head.
            return self._append_locked(db, self._head(branch), items)

    def fork(
        self, create: OpInput, *, parent: str = CANONICAL_BRANCH, genesis: dict[str, Any]
    ) -> tuple[Appended, Appended]:
        """Create a branch: a ``BRANCH_CREATE`` entry in ``parent`` and the branch's genesis.

        The ledger adds the fork anchor to the operation's payload (``parent_branch_id`` and
        ``fork: {seq, entry_hash, tree_size, tree_root}``: the parent's head just before the
        BRANCH_CREATE entry) and starts the branch's own chain with a genesis whose ``prev`` is
        the BRANCH_CREATE entry's hash (SPEC 8). ``create.payload["branch_id"]`` names the
        branch; ``genesis`` holds the layer above's fields (type, expiry, ...). One
        transaction: both entries land, or neither.

        Raises:
            ValidationError: if the op is not a BRANCH_CREATE or the branch id is invalid.
            RefusedError: if the branch exists or a hook refuses.
        """
        if create.op_type != OpType.BRANCH_CREATE:
            raise ValidationError("fork() takes a BRANCH_CREATE operation", field="op_type")
        self._require_key()
        name = create.payload.get("branch_id")
        if not isinstance(name, str) or not _BRANCH_NAME_RE.match(name):
            raise ValidationError(
                f"branch_id {name!r} must be 1-64 letters, digits and ._- (starting with a "
                "letter or digit)",
                field="payload.branch_id",
            )
        with self.write() as db:
            if any(b.name == name for b in self.store.branches()):
                raise RefusedError(f"a branch named {name!r} already exists")
            head = self._head(parent)
            fork = {
                "entry_hash": bytes(head.row.head),
                "seq": head.row.size - 1,
                "tree_root": head.compact.root(),
                "tree_size": head.row.size,
            }
            payload = {**create.payload, "fork": fork, "parent_branch_id": parent}
            self._forking = True
            try:
                anchored = _library_op(dataclasses.replace(create, payload=payload))
                made = self._append_locked(db, head, [anchored])
            finally:
                self._forking = False
            anchor = made[0]
            self.store.add_branch(name, anchor.entry_hash, parent=parent, anchor=anchor.seq)
            body = {
                **genesis,
                "anchor": {"branch": parent, "entry_hash": anchor.entry_hash, "seq": anchor.seq},
                "format": FORMAT_VERSION,
                "ledger_id": self.ledger_id,
                "origin": branch_origin(self.origin, name),
            }
            started = self._append_locked(db, self._head(name), [_Genesis(body, name)])
        return anchor, started[0]

    @contextlib.contextmanager
    def bulk(self) -> Iterator[None]:
        """Group several ``append_batch`` calls into one transaction: all land, or none.

        Raises:
            StorageError: if the transaction cannot be opened or committed.
        """
        with self.write():
            yield

    def _append_locked(
        self, db: apsw.Connection, head: _Head, items: Sequence[EventInput | OpInput | _Genesis]
    ) -> AppendedRun:
        # The batch's own events, by id (entry keys): ``find_event`` sees them while the
        # hooks judge a later entry of the same batch, before the event index is written.
        outer = self._batch_events
        self._batch_events = {}
        try:
            return self._append_run(db, head, items, self._batch_events)
        finally:
            self._batch_events = outer

    def _append_run(
        self,
        db: apsw.Connection,
        head: _Head,
        items: Sequence[EventInput | OpInput | _Genesis],
        batch_events: dict[bytes, int],
    ) -> AppendedRun:
        branch = head.row.name
        start = head.row.size
        prev = head.row.head
        if branch not in self._txn:
            self._txn[branch] = _Seal(start, bytes(head.compact.root()))
        seal = self._txn[branch]
        no = head.row.no
        seq = start
        # What _write_rows inserts: the entries rows (k, hash, data, digest, salt, content),
        # their leaf hashes (in parts, each of one or more hashes end to end), the event index
        # rows and the erasures (entry key, erasing seq).
        rows: _Rows = []
        leaves: list[bytes] = []
        event_rows: list[_Events] = []
        key_seqs: list[int] = []  # key entries of main this batch appends (FORMAT.md 7.5)
        erasures: dict[int, int] = {}  # entry key -> erasing seq, this call's only
        unindexed: list[_Events] = []  # native events not yet in batch_events
        out: list[Appended] = []  # the last part of what the call returns, ``parts``
        parts: list[list[Appended] | PackedEvents] = [out]
        salts = b""  # read at the first event the reference loop builds
        ids = _fresh_ids()  # UUIDv7s for the reference loop, made as it takes them
        queue: list[EventInput | OpInput | _Genesis] = list(reversed(items))
        n = 0
        now = now_us()
        last_ts = self._last_ts(head)
        # The native core builds the plain events on top of the queue in one call; with hooks,
        # a run the hooks fold in one ``apply_events`` each (``_event_run``), or one event at
        # a time when a hook has no ``apply_events``. Anything else takes the reference loop.
        hooks = self.hooks
        runs = all(hasattr(h, "apply_events") for h in hooks)
        stored: set[bytes] | None = None  # of the requests' own event ids, those stored
        only_events = set(map(type, queue)) == _ONLY_EVENTS  # until a hook queues a follow-up
        while queue:
            if _N is not None and type(queue[-1]) is EventInput:
                # The run: the events on top of the queue, as many as the hooks take at once.
                most = len(queue)
                if hooks:
                    most = min(most, self._event_run(branch, seq, prev) if runs else 1)
                if not only_events or most < len(queue):
                    # Bounded by the first item of another type (a batch of events only, with
                    # no follow-up queued yet, is told once, before the loop).
                    top = len(queue) - 1
                    while top >= len(queue) - most and type(queue[top]) is EventInput:
                        top -= 1
                    most = len(queue) - 1 - top
                built = self._build_run(queue, most, branch, no, seq, prev, last_ts, now)
                k = 0 if built is None else built[0]
                if k and built is not None and built[8]:
                    # Ids of the requests' own: the run ends before the first one taken, which
                    # the reference loop then refuses (after the events before it).
                    if unindexed:
                        for part in unindexed:
                            batch_events.update(_pairs(part))
                        unindexed = []
                    assert built is not None
                    if stored is None:  # the batch's own event ids the index holds: one lookup
                        stored = self._stored_ids(_own_ids(items))
                    taken = None
                    # Any id taken? Then find the first one.
                    if not _all_new(_pairs(built[2]), batch_events, stored):
                        run = [queue[-1 - i] for i in range(k)]
                        taken = _first_taken(run, batch_events, stored)
                    if taken is not None:
                        built = None
                        if taken:
                            built = self._build_run(
                                queue, taken, branch, no, seq, prev, last_ts, now
                            )
                        k = 0 if built is None else built[0]
                if k:
                    assert built is not None
                    _, n_rows, n_events, n_leaves, n_out, n_ts, n_entries, n_contents, _ = built
                    del queue[len(queue) - k :]
                    rows += n_rows
                    event_rows.append(n_events)
                    if isinstance(n_leaves, bytes):  # packed: no object an event
                        assert isinstance(n_out, bytes)
                        leaves.append(n_leaves)
                        parts.append(PackedEvents(branch, seq, n_leaves, n_out))
                        out = []
                        parts.append(out)
                        prev = EntryHash(n_leaves[-32:])
                    else:
                        assert isinstance(n_out, list)
                        leaves.append(b"".join(n_leaves))
                        out += n_out
                        prev = EntryHash(n_leaves[-1])
                    seq += k
                    n += k
                    last_ts = n_ts
                    if not hooks:
                        unindexed.append(n_events)
                        continue
                    # The hooks may look the batch's events up (``find_event``).
                    batch_events.update(_pairs(n_events))
                    assert n_entries is not None and n_contents is not None
                    follow: list[OpInput] = []
                    for hook in hooks:
                        if runs:
                            follow.extend(hook.apply_events(db, self, n_entries, n_contents))  # type: ignore[attr-defined]
                        else:
                            follow.extend(hook.apply(db, self, n_entries[0], n_contents[0]))
                    if follow:
                        only_events = False
                        queue.extend(reversed(follow))
                    continue
            item = queue.pop()
            if unindexed:  # the reference checks ids, parents and targets against the batch
                for part in unindexed:
                    batch_events.update(_pairs(part))
                unindexed = []
            ts = item.ts if item.ts is not None else now_us()
            check_ts(ts, last_ts, now)
            last_ts = ts
            content: str | None = None
            extra: tuple[bytes | None, bytes | None, bytes | None] = (None, None, None)
            if isinstance(item, _Genesis):
                if seq != 0:
                    raise RefusedError(f"branch {branch!r} already has a genesis entry")
                item_id = item.id
                entry = build_entry(prev, seq, branch, ts, Kind.GENESIS, "GENESIS", item.body)
            elif isinstance(item, EventInput):
                if item.id is None:
                    # UUIDv7: 74 random bits, no lookup needed
                    item_id = next(ids)
                    raw_id = _uuid_bytes(item_id)
                else:
                    item_id = item.id
                    raw_id = _uuid_bytes(item_id)
                    if raw_id in batch_events or self.store.event_key(raw_id) is not None:
                        raise RefusedError(f"an event with id {item_id} already exists")
                parent_id = item.parent_event_id
                if parent_id is not None:
                    raw_parent = _uuid_bytes(parent_id)
                    if raw_parent not in batch_events and self.store.event_key(raw_parent) is None:
                        raise NotFoundError(
                            f"parent_event_id {parent_id} names no event in this ledger"
                        )
                if not salts:
                    salts = os.urandom(SALT_SIZE * len(items))
                if n < len(items):
                    salt = salts[n * SALT_SIZE : (n + 1) * SALT_SIZE]
                else:
                    salt = os.urandom(SALT_SIZE)
                content = item.content
                data = content.encode("utf-8")
                body = item.body(item_id, content_commitment(salt, data))
                entry = build_entry(
                    prev, seq, branch, ts, Kind.EVENT, "EVENT", body, plain=item.plain
                )
                extra = (content_digest(data), salt, data)
                batch_events[raw_id] = entry_key(no, seq)
                event_rows.append([(raw_id, entry_key(no, seq))])
            else:
                if seq == 0:
                    raise RefusedError(f"branch {branch!r} has no genesis entry")
                if item.op_type == OpType.BRANCH_CREATE and not self._forking:
                    raise RefusedError(
                        "BRANCH_CREATE is appended only by fork() (`memroot branch create`), "
                        "which also starts the branch's chain"
                    )
                refuse_reserved(item)
                item_id = item.id or next(ids)
                body = item.body(item_id)
                entry = build_entry(
                    prev, seq, branch, ts, Kind.OP, item.op_type, body, plain=item.plain
                )
                if item.op_type == OpType.TOMBSTONE:
                    target = self._tombstone(no, entry, batch_events, rows, start, erasures)
                    erasures[target] = entry.seq
            n += 1
            if entry.type in _KEEP_TYPES:
                seal.keep = True
            if entry.kind is Kind.OP and entry.type in KEY_ENTRY_TYPES:
                if branch != CANONICAL_BRANCH:
                    raise RefusedError(
                        f"key entries belong on {CANONICAL_BRANCH!r}, not on {branch!r}"
                    )
                key_seqs.append(seq)
            rows.append((entry_key(no, seq), entry.hash, entry.raw, *extra))
            leaves.append(entry.hash)
            follow = []
            for hook in self.hooks:
                follow.extend(hook.apply(db, self, entry, content))
            if follow:
                only_events = False
                queue.extend(reversed(follow))
            out.append(Appended(branch, seq, entry.hash, item_id, entry.kind, entry.type))
            prev = entry.hash
            seq += 1
        for hook in self.hooks:
            # Hooks that buffer their writes for the batch (``end_batch``) write them now.
            end_batch = getattr(hook, "end_batch", None)
            if end_batch is not None:
                end_batch(db)
        self._write_rows(head, rows, b"".join(leaves), event_rows, erasures, last_ts)
        if key_seqs:
            self._note_key_entries(key_seqs)
        return AppendedRun(parts)

    def _build_run(
        self,
        queue: list[Any],
        most: int,
        branch: str,
        no: int,
        seq: int,
        prev: bytes,
        last_ts: int | None,
        now: int,
    ) -> _NativeRun | None:
        """Build up to ``most`` plain events from the top of ``queue`` natively (None: none).

        With hooks installed, each event's ``Entry`` and content come too; without, the rows,
        leaf hashes and ids come packed (``Store.takes_packs``).
        """
        assert _N is not None
        # Without hooks nothing reads the rows before they are written: they come packed.
        pack = not self.hooks and self.store.takes_packs
        try:
            with collector_paused():
                return _N.build_events(
                    queue,
                    EventInput,
                    Appended,
                    Kind.EVENT,
                    branch,
                    no,
                    seq,
                    prev,
                    last_ts,
                    now,
                    _MAX_ENTRY_BYTES,
                    os.urandom(_N_RAND * most),  # one event per 42 bytes: at most ``most``
                    Entry if self.hooks else None,
                    pack,
                )
        except _N.Reject:
            return None

    def _stored_ids(self, raws: list[bytes]) -> set[bytes]:
        """Return those of the event ids ``raws`` (16 bytes each) the event index holds."""
        return {bytes(raw) for raw in self.store.lookup("event_ids", "id", "k", raws)}

    def _event_run(self, branch: str, seq: int, prev: bytes) -> int:
        """How many plain events from ``seq`` every hook folds as one run (at least 1).

        A hook's ``event_run(ledger, branch, seq, prev)`` bounds it (no bound without one):
        its follow-ups (e.g. an automatic snapshot) may only come after a run's last event.
        """
        most = 1 << 62
        for hook in self.hooks:
            bound = getattr(hook, "event_run", None)
            if bound is not None:
                most = min(most, bound(self, branch, seq, prev))
        return max(1, most)

    def _note_key_entries(self, seqs: list[int]) -> None:
        """Record key entries of ``main`` in the key cache, in their own transaction.

        After their rows are written, so a read of the key set inside the transaction finds
        every entry it lists (docs/FORMAT.md 7.5).
        """
        known = [s for s in self.key_entry_seqs() if s not in seqs]
        self.store.set_meta(KEY_ENTRIES_META, json.dumps([*known, *seqs]))
        self.forget_key_set()

    def append_system(
        self,
        op_type: OpType,
        payload: dict[str, Any],
        *,
        branch: str = CANONICAL_BRANCH,
        target_id: str | None = None,
        target_type: str | None = None,
    ) -> Appended:
        """Append an operation recorded by memroot itself (actor ``memroot``, SYSTEM_PROCESS).

        A type in ``RESERVED_OPS`` is still refused: the attribution is no permission.

        Raises:
            RefusedError, StorageError: as ``append``.
        """
        return self.append(
            self.system_op(op_type, payload, target_id=target_id, target_type=target_type),
            branch=branch,
        )

    @staticmethod
    def system_op(
        op_type: OpType,
        payload: dict[str, Any],
        *,
        target_id: str | None = None,
        target_type: str | None = None,
    ) -> OpInput:
        """Return an operation request attributed to memroot itself.

        It is not marked as memroot's own: a type in ``RESERVED_OPS`` is still refused at
        append unless memroot's writer marks it (``memroot.ledger.entries._library_op``).
        """
        return OpInput(
            op_type=op_type.value,
            actor_id=SYSTEM_ACTOR,
            actor_type=ActorType.SYSTEM_PROCESS.value,
            namespace_id=SYSTEM_NAMESPACE,
            payload=payload,
            policy_version=POLICY_VERSION,
            target_id=target_id,
            target_type=target_type,
        )

    def _tombstone(
        self,
        branch_no: int,
        entry: Entry,
        batch_events: dict[bytes, int],
        rows: _Rows,
        start: int,
        erasures: Mapping[int, int],
    ) -> int:
        """Validate a TOMBSTONE; return the entry key of the event whose content it erases.

        A target appended earlier in the same batch has its content dropped from its ``rows``
        row here; either way the returned key gets ``erased_by`` when the rows are written.
        ``erasures`` are the batch's earlier ones (entry key -> erasing seq): a second TOMBSTONE
        of one event is refused alike whether the first is in this batch or stored.
        """
        payload = entry.body["payload"]
        for name in ("target_event_id", "reason", "policy_ref"):
            if payload.get(name) in (None, ""):
                raise ValidationError(f"TOMBSTONE payload needs {name!r}", field=f"payload.{name}")
        target = check_uuid(payload["target_event_id"], "payload.target_event_id")
        raw = _uuid_bytes(target)
        k = batch_events.get(raw)
        if k is None:
            k = self.store.event_key(raw)
            if k is None or k >> 40 != branch_no:
                raise NotFoundError(f"TOMBSTONE target event {target} is not on this branch")
        by = erasures.get(k)
        if by is not None:
            raise RefusedError(f"event {target} was already erased by entry {by}")
        if raw in batch_events:
            i = (k & ((1 << 40) - 1)) - start
            mine = _row(k, rows[i])
            if mine[5] is None:
                raise RefusedError(f"event {target} was already erased")
            rows[i] = (*mine[:3], None, None, None)
            return k
        row = self.store.entry_row(branch_no, k & ((1 << 40) - 1))
        found = Entry.from_bytes(row.data)
        if found.kind is not Kind.EVENT or found.body.get("id") != target:
            # The event id index is a cache (verify checks it, step 5): trusting a damaged
            # one would erase the content of another event for good.
            raise StorageError(
                f"the event index points {target} at entry {found.seq}, which is not that "
                "event: the index is damaged; nothing was erased"
            )
        if row.erased_by is not None:
            raise RefusedError(f"event {target} was already erased by entry {row.erased_by}")
        return k

    def _write_rows(
        self,
        head: _Head,
        rows: _Rows,
        leaves: bytes,
        event_rows: list[_Events],
        erasures: Mapping[int, int],
        last_ts: int | None,
    ) -> None:
        """Insert entries, their completed tree nodes, erasures and the new head (in the txn).

        ``rows`` are the ``entries`` rows in seq order and ``leaves`` their hashes end to end
        (32 bytes each); the rows
        of the event index come in parts, each a list or packed.
        Everything written comes from the arguments: nothing outlives a rolled-back call.
        """
        no = head.row.no
        compact = head.compact
        nodes: list[tuple[int, bytes]] = []
        node_pack: tuple[bytes, bytes] | None = None
        if _N is not None:
            args = (no, compact.size, list(compact.hashes), leaves, self.store.node_min_level)
            try:
                if self.store.takes_packs:
                    hashes, keys, node_hashes = _N.compact_append_pack(
                        *args, self.store.node_by_end
                    )
                    node_pack = (keys, node_hashes)
                else:
                    hashes, nodes = _N.compact_append_rows(*args, self.store.node_by_end)
            except _N.Reject:
                pass  # the reference below
            else:
                compact = merkle.CompactRange.from_hashes(compact.size + len(leaves) // 32, hashes)
        if compact is head.compact:
            compact = _copy(compact)
            low = self.store.node_min_level
            nodes = [
                (self.store.key_of_node(no, lvl, i), h)
                for lvl, i, h in compact.append_many(
                    [leaves[i : i + 32] for i in range(0, len(leaves), 32)]
                )
                if lvl >= low  # the lower ones are folded from the leaves
            ]
        self._insert_entry_rows(entry_key(no, head.row.size), rows)
        pairs = [pair for part in event_rows if isinstance(part, list) for pair in part]
        if pairs:
            self.store.insert_event_ids(pairs)
        for part in event_rows:
            if isinstance(part, tuple):
                self.store.insert_event_pack(*part)
        for k, by in erasures.items():
            self.store.erase_content(k, by)
        if node_pack is not None:
            self.store.insert_node_pack(*node_pack)
        else:
            self.store.insert_nodes(nodes)
        size = head.row.size + len(rows)
        last = EntryHash(leaves[-32:])
        self.store.set_head(no, size, last)
        seal = self._txn[head.row.name]
        if seal.written is not None:
            if erasures:  # content erased in rows written before: read them from the file
                seal.written = None
            else:
                seal.written += rows
        head.row = BranchRow(no, head.row.name, size, last)
        head.compact = compact
        head.last_ts = last_ts

    def _insert_entry_rows(self, first_k: int, rows: _Rows) -> None:
        """Insert ``rows`` (keyed ``first_k`` on): each run of packed rows in one statement."""
        if set(map(type, rows)) == _PACKED:  # the native runs' only: one statement
            self.store.insert_entry_pack(first_k, cast("list[bytes]", rows))
            return
        i = 0
        while i < len(rows):
            j = i
            if isinstance(rows[i], bytes):
                while j < len(rows) and isinstance(rows[j], bytes):
                    j += 1
                self.store.insert_entry_pack(first_k + i, cast("list[bytes]", rows[i:j]))
            else:
                while j < len(rows) and not isinstance(rows[j], bytes):
                    j += 1
                self.store.insert_entries(cast("list[_Row]", rows[i:j]))
            i = j

    def own_rows(self, branch: str, start: int) -> list[tuple[Entry, bytes | None]] | None:
        """Return the entries from ``start`` this ledger's open write transaction appended.

        Each with its content bytes (None for an operation), decoded from the bytes the
        transaction hashed and wrote (so the caller need not read them back from the file),
        through the branch's new head. None when the transaction appended nothing there
        from ``start`` on, or erased content (then read the rows from the file).
        """
        seal = self._txn.get(branch)
        if seal is None or seal.written is None or start < seal.start_size:
            return None
        mine = seal.written[start - seal.start_size :]
        if not mine:
            return None
        rows = [_row(0, row) for row in mine]
        return [(Entry.from_bytes(row[2]), row[5]) for row in rows]

    def _last_ts(self, head: _Head) -> int | None:
        """Return the ts of the branch's newest entry (None when it has none yet)."""
        if head.last_ts is None and head.row.size:
            row = self.store.entry_row(head.row.no, head.row.size - 1)
            head.last_ts = Entry.from_bytes(row.data).ts
        return head.last_ts

    def _head(self, branch: str) -> _Head:
        """Return the branch's right edge, reloading it if another writer moved the head.

        Must run inside a transaction so the stored head cannot move underneath. When
        nothing changed the file since this ledger's last sealing commit grew the branch (no
        other connection committed: ``data_version``; nothing else written on this one:
        ``total_changes``), the cached head is the stored row and none is read.
        """
        cached = self._heads.get(branch)
        if (
            cached is not None
            and branch in self._sealed_heads
            and self._seal_token is not None
            and self._seal_token == (self.store.data_version(), self.store.db.total_changes())
        ):
            return cached
        row = self.store.branch(branch)
        for check in self._append_checks():
            check.check_head(self, row)  # e.g. transparency's: not below a cosigned size
        if self.derived is not self.store:
            self._catch_up()  # under the branch's row lock: what others appended first
        if cached is not None and cached.row == row:
            return cached
        ids = merkle.perfect_subtrees(row.size)
        hashes = self.store.read_nodes(row.no, ids)
        head = _Head(row, merkle.CompactRange.from_hashes(row.size, hashes))
        self._heads[branch] = head
        return head
