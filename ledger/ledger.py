"""The ledger: append entries, serve roots and proofs, sign checkpoints.

A ``Ledger`` is one SQLite file (``Store``) plus its signing key file (``<ledger>.key``, mode
0600). Every append, single or batch, is one write transaction that adds the entry rows, the
completed Merkle nodes, the new chain head, whatever derived state the installed hooks keep
(``AppendHook``) and, right before it commits, a checkpoint of every branch it grew, signed
with the ledger's key (the *seal*): a crash or a refused entry leaves nothing half-written,
and no committed entry is ever without a signature. Appending therefore needs the key.

Reads are strict by default (``memroot.ledger.strict``): every entry and content returned is
checked against the newest signed checkpoint first; ``strict=False`` is for forensics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import operator
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol

import apsw

from memroot.ledger import merkle
from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.entries import (
    CANONICAL_BRANCH,
    FORMAT_VERSION,
    MAX_BODY_BYTES,
    MAX_SNAPSHOT_EVERY,
    ZERO_HASH,
    Entry,
    EventInput,
    Kind,
    OpInput,
    _library_op,
    build_entry,
    check_ts,
    check_uuid,
    new_uuid,
    new_uuids,
    now_us,
    refuse_reserved,
)
from memroot.ledger.errors import (
    KeyFileError,
    NotFoundError,
    RefusedError,
    StorageError,
    ValidationError,
)
from memroot.ledger.hashing import (
    SALT_SIZE,
    EntryHash,
    TreeRoot,
    content_commitment,
    content_digest,
)
from memroot.ledger.note import (
    Checkpoint,
    SignedCheckpoint,
    Verifier,
    format_tlog_proof,
    open_checkpoint,
    sign_checkpoint,
    vkey_of,
)
from memroot.ledger.pg import DerivedCache, PgStore, StoreView, default_cache_path, is_url
from memroot.ledger.signing import Ed25519Signer, Signer
from memroot.ledger.store import (
    NODE_CACHE_MAX,
    NODE_CACHE_MIN_LEVEL,
    BranchRow,
    Store,
    entry_key,
    node_key,
)
from memroot.ledger.strict import CheckedRow, SignedHead, StrictReader, default_strict
from memroot.ledger.trust import TrustedState
from memroot.ledger.vocab import ActorType, BranchType, OpType

__all__ = [
    "CHECKPOINT_KEEP_EVERY",
    "DEFAULT_HOOKS",
    "DEFAULT_SNAPSHOT_EVERY",
    "AppendHook",
    "Appended",
    "Ledger",
    "branch_origin",
    "default_key_path",
]

DEFAULT_SNAPSHOT_EVERY: Final = 1000
CHECKPOINT_KEEP_EVERY: Final = 1000
"""Retention: a head checkpoint whose tree crossed a multiple of this size is kept for good."""
_TRANSIENT_META: Final = "transient_checkpoint/"
"""Meta key prefix (+ branch no): the size of the branch's head checkpoint when the next seal
may drop it (it is kept by no retention rule)."""
_MAX_ENTRY_BYTES: Final = MAX_BODY_BYTES + 1024
"""The largest entry ``build_entry`` accepts (the native event builder stops before one)."""
_N_RAND: Final = 42
"""Random bytes the native event builder takes per event: the salt and 10 for the UUIDv7."""
_KEEP_TYPES: Final = frozenset({OpType.SNAPSHOT.value, OpType.KEY_ROTATE.value, "GENESIS"})
SYSTEM_ACTOR: Final = "memroot"
SYSTEM_NAMESPACE: Final = "system"
POLICY_VERSION: Final = "memroot/1"
_ORIGIN_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}\Z")
_BRANCH_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


def default_key_path(ledger_path: Path) -> Path:
    """Return where the signing key of the ledger at ``ledger_path`` lives by default."""
    return Path(f"{ledger_path}.key")


def branch_origin(origin: str, branch: str) -> str:
    """Return the checkpoint origin of a branch: the log's origin for ``main``."""
    return origin if branch == CANONICAL_BRANCH else f"{origin}/branch/{branch}"


class AppendHook(Protocol):
    """Derived state kept by a layer above the ledger, updated inside the append transaction.

    ``apply`` sees every new entry in order, with the event content when there is one. It may
    refuse the entry by raising ``RefusedError`` (the whole transaction rolls back, nothing is
    written) and may return follow-up operations that the ledger appends right after it, in the
    same transaction (e.g. a SNAPSHOT every N entries). A hook may also define
    ``end_batch(db)``: the ledger calls it once after the last entry of every ``append_batch``
    (before it writes the entries), so a hook may buffer its rows for the batch and write them
    there in a few statements (``memroot.projections.hook.MemoryHook`` does). A hook that
    folds missing entries on its own (the memory model, falsification) may define
    ``folded(db, ledger, branch) -> int``, how many entries of ``branch`` it holds: a
    PostgreSQL ledger's cache catch-up then skips it for those (``Ledger._replay``).

    Two more methods are optional, for the native batch path: ``apply_events(db, ledger,
    entries, contents)`` folds a run of plain events of one branch (consecutive entries of
    kind EVENT, built by the native core) exactly as ``apply`` on each in turn would, and
    returns the follow-ups of the run; ``event_run(ledger, branch, seq, prev)`` bounds how
    many events from ``seq`` (after the entry hashed ``prev``) a run may hold, so that a
    follow-up only ever comes after a run's last event (no bound without it). When every
    installed hook has ``apply_events``, each hook folds a whole run in one call, one hook
    after the other (a batch that breaks two rules is refused with either hook's error);
    otherwise each event is handed to every hook in turn, as the reference loop does.
    """

    def install(self, db: apsw.Connection) -> None:
        """Create the hook's tables if missing (runs at open, inside a write transaction)."""

    def apply(
        self, db: apsw.Connection, ledger: Ledger, entry: Entry, content: str | None
    ) -> list[OpInput]:
        """Validate and fold one new entry; return follow-up operations to append."""


class Appended(NamedTuple):
    """What an append wrote: where the entry sits and what identifies it (immutable)."""

    branch: str
    seq: int
    entry_hash: EntryHash
    id: str
    kind: Kind
    type: str


@dataclass(frozen=True, slots=True)
class _Genesis:
    """The genesis entry of a branch, appended through the same path as everything else."""

    body: dict[str, Any]
    id: str
    ts: int | None = None


@dataclass(slots=True)
class _Seal:
    """A branch grown by the open write transaction: what its seal must check and sign."""

    start_size: int
    start_root: bytes
    keep: bool = False


@dataclass(frozen=True, slots=True)
class _SealState:
    """What a branch's last seal left in the file: its head checkpoint and retention marker."""

    last: tuple[int, bytes, str] | None
    """``(size, root, note)`` of the newest stored checkpoint, as ``latest_checkpoint``."""
    marker: Any
    """The ``_TRANSIENT_META`` value of the branch (None when the row is absent)."""


@dataclass(slots=True)
class _Head:
    """In-memory right edge of one branch's tree, valid while the stored head matches."""

    row: BranchRow
    compact: merkle.CompactRange
    last_ts: int | None = None  # ts of the entry at row.size - 1, read when first needed


_NativeRun = tuple[
    int,
    list[tuple[int, bytes, bytes, bytes | None, bytes | None, bytes | None]],
    list[tuple[bytes, int]],
    list[bytes],
    list[Any],
    int | None,
    list[Any] | None,
    list[str] | None,
]
"""What ``native.build_events`` returns (see ``Ledger._build_run``)."""


class Ledger:
    """An open memroot ledger. Use ``Ledger.init`` to create one and ``Ledger.open`` after."""

    def __init__(
        self,
        store: Store,
        *,
        key_path: Path | None = None,
        hooks: Sequence[AppendHook] = (),
        strict: bool | None = None,
        trusted: TrustedState | None = None,
        vkeys: Sequence[str] = (),
        cache_path: Path | None = None,
    ) -> None:
        """Wrap an open store; prefer ``Ledger.open`` / ``Ledger.init``.

        A PostgreSQL ledger with hooks keeps their derived state in a local SQLite cache
        (``derived``; ``cache_path``, default ``memroot.ledger.pg.default_cache_path``).
        """
        self.store = store
        self.derived: Store = store
        """Where the layers above keep their derived tables: the ledger file itself, or for a
        PostgreSQL ledger this host's cache file (``memroot.ledger.pg.DerivedCache``)."""
        self._applied: dict[str, tuple[int, bytes]] | None = None  # the cache's heads
        self._applied_version: int | None = None  # the cache's data_version when read
        self._replaying = False
        self.path = store.path
        # A PostgreSQL ledger has no file to keep its key beside: the key is always named.
        self._key_given = key_path is not None or not isinstance(store, PgStore)
        self.key_path = key_path or default_key_path(store.path)
        self.hooks = list(hooks)
        self._signer: Signer | None = None
        self._key_checked: Signer | None = None  # the loaded key, once found to be ours
        self._heads: dict[str, _Head] = {}
        self._branch_nos: dict[str, int] = {}  # branch name -> its number (never changes)
        self._txn: dict[str, _Seal] = {}
        self._sealed: list[SignedHead] = []
        # What the last committed seals left per branch no, valid while ``_seal_token`` is
        # (data_version, total_changes) of this connection when a write begins: nothing, not
        # another connection and not this one, changed the file since (``_seal_states``).
        self._seal_known: dict[int, _SealState] = {}
        self._seal_next: dict[int, _SealState] = {}
        self._seal_token: tuple[int, int] | None = None
        self._seal_version: int | None = None
        # The branches the last sealing commit grew: their cached heads are the stored rows
        # while ``_seal_token`` holds (``_head`` then reads no branch row).
        self._sealed_heads: frozenset[str] = frozenset()
        self._sealing_heads: frozenset[str] = frozenset()
        self._publish_pending = False
        self._forking = False
        self._batch_events: dict[bytes, int] = {}  # of the batch being appended (find_event)
        self.strict = default_strict() if strict is None else strict
        self.ledger_id: str = str(store.meta("ledger_id"))
        self.origin: str = str(store.meta("origin"))
        cadence = store.meta("snapshot_every")
        if type(cadence) is not int or cadence < 1:
            # A damaged meta row must not surface as a ValueError from every command.
            raise StorageError(
                f"{store.path} is not a memroot ledger or is damaged: snapshot_every is {cadence!r}"
            )
        self.snapshot_every: int = cadence
        self._reader_checks = StrictReader(
            store, self.origin, vkeys=tuple(vkeys), trusted=trusted, own_from=self._own_from
        )
        # What the hooks see as the store while committed entries are folded again
        # (``_fold_committed``): the real store when ``rows`` is None.
        self._view = StoreView(store)
        if self.hooks and isinstance(store, PgStore):
            self.derived = DerivedCache(
                cache_path or default_cache_path(self.ledger_id, key_path), self.ledger_id
            )
            # Before the seal (which forgets the grown branches): what the cache applied.
            store.on_commit(self._record_applied, _nothing)
            self.derived.on_commit(_nothing, self._forget_applied)
        store.on_commit(self._seal, self._unseal, self._sealed_committed)
        if self.hooks and not self.derived.readonly:
            with self.derived.write() as db:
                for hook in self.hooks:
                    hook.install(db)

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def init(
        cls,
        path: Path | str,
        *,
        origin: str | None = None,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        key_path: Path | None = None,
        hooks: Sequence[AppendHook] | None = None,
        cache_path: Path | None = None,
    ) -> Ledger:
        """Create a ledger file, its Ed25519 key, the genesis entry and a first checkpoint.

        ``path`` may be a ``postgresql://`` URL (``memroot.ledger.pg``): the tables are made
        in that database and ``key_path`` is then required; the hooks' derived state is kept
        in a local cache file (``cache_path``, see ``Ledger.open``).

        ``hooks`` as in ``open``: None installs the default hooks, ``()`` none.

        Raises:
            StorageError: if the ledger file exists or cannot be created.
            KeyFileError: if the key file exists or cannot be written.
            ValidationError: for a bad origin or snapshot cadence.
        """
        url = str(path) if is_url(path) else None
        if url is not None and key_path is None:
            raise KeyFileError(
                "a PostgreSQL ledger keeps no key file beside it: name one (key_path)"
            )
        path = Path(path)
        key_path = key_path or default_key_path(path)
        ledger_id = new_uuid()
        origin = origin or f"memroot.local/{ledger_id}"
        if not _ORIGIN_RE.match(origin):
            raise ValidationError(
                f"origin {origin!r} must be 1-200 characters of letters, digits and ._:/-",
                field="origin",
            )
        if type(snapshot_every) is not int or not 1 <= snapshot_every <= MAX_SNAPSHOT_EVERY:
            raise ValidationError(
                f"snapshot_every must be an integer from 1 to {MAX_SNAPSHOT_EVERY}",
                field="snapshot_every",
            )
        if url is None and path.exists():
            raise StorageError(f"{path} already exists; refusing to overwrite a ledger")
        if key_path.exists():
            raise KeyFileError(f"key file {key_path} already exists; refusing to overwrite it")
        signer = Ed25519Signer.generate(origin)
        if url is not None:
            store: Store = PgStore(url, create=True)
        else:
            store = Store(path, create=True)
        try:
            with store.write():
                store.set_meta("ledger_id", ledger_id)
                store.set_meta("origin", origin)
                store.set_meta("snapshot_every", snapshot_every)
                store.add_branch(CANONICAL_BRANCH, ZERO_HASH)
            signer.save(key_path)
        except BaseException:
            if isinstance(store, PgStore):
                store.drop()
                raise
            store.close()
            path.unlink(missing_ok=True)
            for suffix in ("-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            raise
        ledger = cls(
            store,
            key_path=key_path,
            hooks=_hooks(hooks, readonly=False),
            strict=False,
            cache_path=cache_path,
        )
        ledger._signer = signer
        genesis = {
            "branch_type": BranchType.CANONICAL.value,
            "format": FORMAT_VERSION,
            "keys": [vkey_of(signer)],
            "ledger_id": ledger_id,
            "origin": origin,
            "snapshot_every": snapshot_every,
        }
        with ledger.write() as db:
            ledger._append_locked(
                db, ledger._head(CANONICAL_BRANCH), [_Genesis(genesis, ledger_id)]
            )
        ledger.strict = default_strict()  # the genesis is sealed: reads can be checked now
        return ledger

    @classmethod
    def open(
        cls,
        path: Path | str,
        *,
        key_path: Path | None = None,
        hooks: Sequence[AppendHook] | None = None,
        readonly: bool = False,
        strict: bool | None = None,
        trusted: TrustedState | None = None,
        vkeys: Sequence[str] = (),
        cache_path: Path | None = None,
    ) -> Ledger:
        """Open an existing ledger file (or, for a ``postgresql://`` URL, database).

        A PostgreSQL ledger needs ``key_path`` to append. Its hooks (the default ones even
        when ``readonly``: the cache is this host's) keep their derived state in a local
        SQLite file, ``cache_path`` (default: ``$MEMROOT_CACHE``, else ``KEY.cache`` beside
        the key, else ``~/.cache/memroot/LEDGER_ID.cache``), brought up to date with the
        ledger on open and inside every transaction (docs/postgresql.md).

        ``strict`` (default True, see ``memroot.ledger.strict``) checks the canonical branch's
        stored head against its newest signed checkpoint now, and every entry and content
        read later; ``strict=False`` reads the file as it is (forensics). ``trusted`` (the
        verifier's trusted state) and ``vkeys`` pick the keys and the remembered checkpoint
        the head must agree with; without them the ledger's own genesis keys are used.
        ``readonly`` never writes to the file (read-only media too; hooks are not installed).
        ``hooks=None`` installs the default hooks (``DEFAULT_HOOKS``: the memory model,
        roots, falsification, branches, ...), so appends are validated exactly as the CLI
        validates them; ``hooks=()`` installs none (the bare ledger: entry and envelope
        checks only). A read-only ledger gets none by default (nothing is appended).

        Raises:
            StorageError: if there is no ledger at ``path`` or it cannot be read.
            IntegrityError: if ``strict`` and the head does not agree with a signed checkpoint
                (or the trusted state), naming the step; or the file is a corrupt SQLite file.
        """
        if is_url(path):
            store: Store = PgStore(str(path), readonly=readonly)
            chosen = _hooks(hooks, readonly=False)  # the cache is this host's: kept even so
        else:
            store = Store(Path(path), readonly=readonly)
            chosen = _hooks(hooks, readonly=readonly)
        ledger: Ledger | None = None
        try:
            ledger = cls(
                store,
                key_path=key_path,
                hooks=chosen,
                strict=strict,
                trusted=trusted,
                vkeys=vkeys,
                cache_path=cache_path,
            )
            if ledger.strict:
                with store.read():
                    ledger._reader_checks.check_head(CANONICAL_BRANCH)
            if ledger.derived is not store:
                ledger._open_cache()
        except BaseException:
            store.close()
            if ledger is not None and ledger.derived is not store:
                ledger.derived.close()
            raise
        return ledger

    def close(self) -> None:
        """Close the underlying file (and the derived-state cache, if any)."""
        self.store.close()
        if self.derived is not self.store:
            self.derived.close()

    # -- transactions over the ledger and its derived state -------------------------------------

    @contextlib.contextmanager
    def write(self) -> Iterator[apsw.Connection]:
        """Run the body as one write transaction of the ledger and its derived state.

        Yields the connection of the derived tables (the hooks' ``db``). For a ledger file
        it is the file's one transaction. For a PostgreSQL ledger the cache's transaction is
        opened first (so writers on one host never wait for each other's PostgreSQL locks
        while holding the cache), then PostgreSQL's; the cache catches up with what other
        hosts appended, PostgreSQL commits, then the cache. A cache commit lost after
        PostgreSQL's is replayed by the next catch-up; a failed PostgreSQL commit rolls the
        cache back.

        Raises:
            StorageError: if either store fails; nothing is written then.
        """
        if self.derived is self.store:
            with self.store.write() as db:
                yield db
            return
        with self.derived.write() as db, self.store.write():
            self._catch_up()
            yield db

    @contextlib.contextmanager
    def reading(self) -> Iterator[apsw.Connection]:
        """Run the body on one snapshot of the ledger and of its derived state; yield the latter.

        For a PostgreSQL ledger the cache is first brought up to the snapshot PostgreSQL's
        read transaction sees (committed entries other hosts appended are applied).

        Raises:
            StorageError: if either store fails.
        """
        if self.derived is self.store:
            with self.store.read() as db:
                yield db
            return
        # Before the snapshot: the cache may then lag it a little (never run ahead of it).
        # Inside an open snapshot another process may have applied newer entries: allowed.
        self._catch_up(ahead_ok=self.store.db.in_transaction)
        with self.store.read(), self.derived.read() as db:
            yield db

    def copy_snapshot(self, dst: Path) -> None:
        """Copy the ledger and its derived state, as one snapshot, to a new SQLite file ``dst``.

        For a PostgreSQL ledger the derived state is this host's cache, caught up to the
        snapshot copied (so ``verify`` checks it, steps 8-9); without hooks, the entries only.

        Raises:
            StorageError: if the ledger cannot be read or the copy cannot be written.
        """
        if not isinstance(self.store, PgStore) or self.derived is self.store:
            self.store.copy_snapshot(dst)
            return
        for _ in range(20):
            self._catch_up()
            # The cache's snapshot first (SQLite takes it at the first read), then
            # PostgreSQL's (at its first query, in _behind): the cache then holds nothing
            # newer than what PostgreSQL's snapshot sees (the cache commits after it).
            with self.derived.read() as db, self.store.read():
                db.execute("SELECT count(*) FROM cache_heads").fetchall()
                self._applied = None  # the cache's heads as this snapshot sees them
                if not self._behind():
                    self.store.copy_snapshot(dst, self.derived)
                    return
        raise StorageError(
            f"{self.store.where} kept growing while its derived-state cache was copied; try again"
        )

    # -- the derived-state cache of a PostgreSQL ledger -----------------------------------------

    def _open_cache(self) -> None:
        """Check the cache is of this ledger's history (else start it afresh), catch it up."""
        assert isinstance(self.derived, DerivedCache)
        try:
            self._catch_up()
        except _StaleCache:
            self.derived.reset()
            self._applied = None
            with self.derived.write() as db:
                db.execute(
                    "INSERT OR IGNORE INTO cache_meta VALUES('ledger_id', ?)", (self.ledger_id,)
                )
                for hook in self.hooks:
                    hook.install(db)
            self._catch_up()

    def _forget_applied(self) -> None:
        self._applied = None

    def _applied_heads(self) -> dict[str, tuple[int, bytes]]:
        """Return what the cache has applied (read again once another process committed)."""
        assert isinstance(self.derived, DerivedCache)
        version = self.derived.data_version()
        if self._applied is None or version != self._applied_version:
            self._applied = self.derived.heads()
            self._applied_version = version
        return self._applied

    def _record_applied(self) -> None:
        """Before PostgreSQL's COMMIT: record in the cache the heads this transaction grew."""
        if not self._txn:
            return
        assert isinstance(self.derived, DerivedCache)
        applied = self._applied_heads()
        rows = []
        for branch in self._txn:
            row = self._heads[branch].row
            applied[branch] = (row.size, bytes(row.head))
            rows.append((branch, row.size, bytes(row.head)))
        self.derived.set_heads(rows)

    def _catch_up(self, *, ahead_ok: bool = False) -> int:
        """Apply to the cache the committed entries it has not seen yet; return how many.

        Every branch in creation order (parents before their forks), each entry through the
        hooks as a live append would have (``_replay``). Runs inside a transaction of the
        ledger store; opens the cache's own write transaction when there is something to do.

        Raises:
            StorageError: if the cache is of another history (``_StaleCache``) or a hook
                refuses a committed entry.
        """
        if self.derived is self.store or self._replaying or not self._behind(ahead_ok):
            return 0
        with self.derived.write() as db:
            # Again under the cache's lock: another process may have caught it up meanwhile.
            return sum(self._replay(db, b, start) for b, start in self._behind(ahead_ok))

    def _behind(self, ahead_ok: bool = False) -> list[tuple[BranchRow, int]]:
        """Return the branches the cache lags behind, with the size it has applied of each.

        ``ahead_ok``: the branch heads are read in an older snapshot than the cache (another
        process applied newer entries): a cache ahead of them is not taken for stale.

        Raises:
            _StaleCache: if the cache is ahead of a branch or its head is not the ledger's.
        """
        applied = self._applied_heads()
        todo: list[tuple[BranchRow, int]] = []
        for b in self.store.branches():
            if b.name in self._txn:
                continue  # caught up before this transaction appended to it: the rest is ours
            size, head = applied.get(b.name, (0, b""))
            if size > b.size and ahead_ok:
                continue
            if size > b.size or (size and size == b.size and head != bytes(b.head)):
                raise _StaleCache(self.derived.path, b.name)
            if size < b.size:
                if size and bytes(self.store.entry_row(b.no, size - 1).hash) != head:
                    raise _StaleCache(self.derived.path, b.name)
                todo.append((b, size))
        return todo

    def _replay(self, db: apsw.Connection, b: BranchRow, start: int) -> int:
        """Apply entries ``start..`` of branch ``b`` to the cache through the hooks.

        The hooks see ``ledger.store`` as the cache knows the ledger (``StoreView``): the
        entry applied is the next one of its branch; the follow-ups they return, and what
        they would append, are already in the log and are not appended again.
        """
        assert isinstance(self.derived, DerivedCache)
        applied = self._applied_heads()
        rows = {
            r.name: BranchRow(r.no, r.name, applied[r.name][0], applied[r.name][1])
            for r in self.store.branches()
            if r.name in applied
        }
        prev = applied.get(b.name, (0, b""))[1]
        n, prev = self._fold_committed(
            db, b, start, prev, rows, f"the derived-state cache {self.derived.path}"
        )
        size = start + n
        applied[b.name] = (size, prev)
        self.derived.set_heads([(b.name, size, prev)])
        return n

    @property
    def replaying(self) -> bool:
        """True while committed entries are folded through the hooks again.

        A PostgreSQL cache's catch-up, ``replay_hooks`` and a check that replays
        (``folding_committed``) fold each branch whole, parents before their forks: the
        order across branches is not the live one (entries of a fork appended before its
        parent closed it come after the close). A hook skips the append-time rules that
        depend on that order or on sizes at the time (a branch's state and limits): the
        entries passed them when they were appended. Nothing is appended meanwhile.
        """
        return self._replaying

    @contextlib.contextmanager
    def folding_committed(self) -> Iterator[None]:
        """Mark the body as folding committed entries (``replaying`` is True in it)."""
        was, self._replaying = self._replaying, True
        try:
            yield
        finally:
            self._replaying = was

    def replay_hooks(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Fold every committed entry of a ledger file through its hooks; return how many.

        For a file whose entries were written without the hooks (``import_bundle`` copies a
        bundle's entries and checkpoints as they are): every branch in creation order, each
        entry as a live append would have applied it, in one write transaction, so the
        layers' derived state (memory model, roots, falsification, branch registry,
        conversation tree, ...) is what the exporting ledger had. Nothing is appended: the
        follow-ups the hooks return are already in the log. ``progress(done, total)`` is
        called every few thousand entries.

        A PostgreSQL ledger's cache does the same fold on its own when the ledger opens (and
        at every write and read): for one, this applies what is still missing, if anything.

        Raises:
            StorageError: if a hook refuses a committed entry (nothing is written then).
        """
        if self.derived is not self.store:
            return self._catch_up()
        rows: dict[str, BranchRow] = {}
        done = 0
        with self.write() as db:
            branches = self.store.branches()
            total = sum(b.size for b in branches)

            def tick(n: int) -> None:
                nonlocal done
                done += n
                if progress is not None:
                    progress(done, total)

            for b in branches:
                self._fold_committed(db, b, 0, b"", rows, f"the derived state of {self.path}", tick)
        return done

    def _fold_committed(
        self,
        db: apsw.Connection,
        b: BranchRow,
        start: int,
        prev: bytes,
        rows: dict[str, BranchRow],
        where: str,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, bytes]:
        """Fold committed entries ``start..`` of ``b`` through the hooks into ``db``.

        ``rows`` holds the heads the hooks are shown (``StoreView``) and is updated as the
        entries are folded; ``prev`` is the hash of entry ``start - 1``. Returns how many
        entries were folded and the hash of the last one.
        """
        hooks, real, view = self.hooks, self.store, self._view
        view.rows = rows
        self.store = view  # type: ignore[assignment]
        was, self._replaying = self._replaying, True
        n = 0
        try:
            # A hook that folded some of these on its own (reading the ledger's newest size
            # while another host appended) is not given them again.
            done = [_folded(hook, db, self, b.name) for hook in hooks]
            for row in real.iter_entry_rows(b.no, start, b.size):
                e = Entry.from_bytes(row.data)
                if row.seq and e.prev != prev:
                    raise StorageError(
                        f"entry {row.seq} of branch {b.name!r} does not link to the entry "
                        "before it: run `memroot verify`"
                    )
                rows[b.name] = BranchRow(b.no, b.name, row.seq, e.prev)
                content = None if row.content is None else bytes(row.content).decode("utf-8")
                try:
                    for hook, folded in zip(hooks, done, strict=True):
                        if row.seq >= folded:
                            hook.apply(db, self, e, content)
                except (RefusedError, ValidationError) as err:
                    raise StorageError(
                        f"{where} cannot apply entry {row.seq} of branch {b.name!r} ({err}): "
                        "was it appended without the hooks? Nothing was changed"
                    ) from err
                prev = bytes(row.hash)
                n += 1
                if n % 4096 == 0:
                    _end_batch(hooks, db)
                    if progress is not None:
                        progress(4096)
            _end_batch(hooks, db)
            if progress is not None and n % 4096:
                progress(n % 4096)
        finally:
            self.store = real
            view.rows = None
            self._replaying = was
        rows[b.name] = BranchRow(b.no, b.name, start + n, prev)
        return n, prev

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- keys ----------------------------------------------------------------------------------

    @property
    def signer(self) -> Signer:
        """The signing key, loaded from the key file on first use.

        Raises:
            KeyFileError: if the key file is missing, malformed or readable by others.
        """
        if self._signer is None:
            if not self._key_given:
                where = self.store.where if isinstance(self.store, PgStore) else self.path
                raise KeyFileError(
                    f"{where}: a PostgreSQL ledger keeps no key file beside it: name "
                    "its signing key (key_path)"
                )
            self._signer = Ed25519Signer.load(self.key_path)
        return self._signer

    def vkey(self) -> str:
        """Return the verifier key (note ``vkey`` format) of the current signing key."""
        return vkey_of(self.signer)

    def genesis(self, branch: str = CANONICAL_BRANCH) -> Entry:
        """Return the genesis entry of a branch."""
        return self.entry(0, branch)

    def genesis_vkeys(self) -> list[str]:
        """Return the verifier keys recorded in the canonical genesis and later KEY_ROTATEs."""
        genesis = Entry.from_bytes(
            self.store.entry_row(self.store.branch(CANONICAL_BRANCH).no, 0).data
        )
        keys = [str(k) for k in genesis.body.get("keys", [])]
        rotated = self.store.meta("rotated_vkeys")  # kept by ledger.keys.rotate_key
        if isinstance(rotated, str):
            keys += [str(k) for k in json.loads(rotated) if k not in keys]
        return keys

    def reload_key(self) -> None:
        """Forget the loaded signing key; the next signature reads the key file again."""
        self._signer = None
        self._key_checked = None

    def _require_key(self) -> Signer:
        """Return the signing key, checked to be this ledger's, before anything is appended.

        Raises:
            KeyFileError: the key file is missing, unreadable or another ledger's: appending is
                refused, since every append is sealed by a checkpoint signed with it.
        """
        try:
            signer = self.signer
        except KeyFileError as e:
            raise KeyFileError(
                f"appending to {self.path} needs its signing key (every append is sealed by a "
                f"checkpoint signed in the same transaction), and {e}; nothing was written"
            ) from e
        if self._key_checked is not signer:
            vkey = vkey_of(signer)
            if vkey not in self.genesis_vkeys():
                raise KeyFileError(
                    f"key file {self.key_path} holds key {vkey}, which is not a key of this "
                    "ledger (its genesis or a KEY_ROTATE); nothing was written"
                )
            self._key_checked = signer
        return signer

    # -- reads ---------------------------------------------------------------------------------

    def size(self, branch: str = CANONICAL_BRANCH) -> int:
        """Return the number of entries on a branch."""
        return self.store.branch(branch).size

    def branch_row(self, branch: str = CANONICAL_BRANCH) -> BranchRow:
        """Return a branch's stored chain head."""
        return self.store.branch(branch)

    def entry(self, seq: int, branch: str = CANONICAL_BRANCH) -> Entry:
        """Return entry ``seq`` of a branch, decoded strictly (and checked, when strict).

        Raises:
            NotFoundError: if there is no such entry.
            DecodeError: if its stored bytes are not a well-formed entry.
            IntegrityError: if strict and the entry fails a check (naming entry and step).
        """
        if self.strict:
            with self.store.read():
                return self._reader_checks.row(branch, seq)[1]
        row = self.store.entry_row(self.store.branch(branch).no, seq)
        return Entry.from_bytes(row.data)

    def entries(
        self, start: int = 0, stop: int | None = None, branch: str = CANONICAL_BRANCH
    ) -> Iterator[Entry]:
        """Yield the entries of a branch with ``start <= seq < stop``, decoded strictly.

        When strict, each chunk of entries is proven against the signed root before any of
        it is yielded.

        Raises:
            IntegrityError: if strict and an entry fails a check.
        """
        if self.strict:
            for _, e in self._reader_checks.rows(branch, start, stop):
                yield e
            return
        no = self.store.branch(branch).no
        for row in self.store.iter_entry_rows(no, start, stop):
            yield Entry.from_bytes(row.data)

    def content(self, seq: int, branch: str = CANONICAL_BRANCH) -> str | None:
        """Return an event's content, or None when it was erased (or the entry is no event).

        Raises:
            IntegrityError: if strict and the content is not what the entry commits to.
        """
        if self.strict:
            return self.read(seq, branch).content
        row = self.store.entry_row(self.store.branch(branch).no, seq)
        return None if row.content is None else bytes(row.content).decode("utf-8")

    def read(self, seq: int, branch: str = CANONICAL_BRANCH) -> CheckedRow:
        """Return entry ``seq`` with its content and erasure mark (all checked, when strict).

        Raises:
            NotFoundError: if there is no such entry.
            IntegrityError: if strict and the entry or its content fails a check.
        """
        if self.strict:
            with self.store.read():
                return self._reader_checks.checked(branch, seq)
        row = self.store.entry_row(self.store.branch(branch).no, seq)
        content = None if row.content is None else bytes(row.content).decode("utf-8", "replace")
        return CheckedRow(Entry.from_bytes(row.data), content, row.erased_by)

    def read_many(
        self, seqs: Sequence[int], branch: str = CANONICAL_BRANCH, *, links: bool = True
    ) -> dict[int, CheckedRow]:
        """Return scattered entries with their content, ``{seq: row}`` (checked when strict).

        When strict, all of them are proven in the signed tree with one multi-leaf proof;
        ``links=False`` skips comparing each prev with the entry before (for entries that
        are inputs of a check rather than served).

        Raises:
            NotFoundError: if one of ``seqs`` is not an entry of the branch.
            IntegrityError: if strict and an entry or its content fails a check.
        """
        if not self.strict:
            return {s: self.read(s, branch) for s in seqs}
        checks = self._reader_checks
        with self.store.read():
            return {
                s: CheckedRow(e, checks.content(branch, row, e), row.erased_by)
                for s, (row, e) in checks.many(branch, seqs, links=links).items()
            }

    def read_range(
        self, start: int = 0, stop: int | None = None, branch: str = CANONICAL_BRANCH
    ) -> Iterator[CheckedRow]:
        """Yield entries with their content, ``start <= seq < stop`` (checked, when strict)."""
        if self.strict:
            for row, e in self._reader_checks.rows(branch, start, stop):
                yield CheckedRow(e, self._reader_checks.content(branch, row, e), row.erased_by)
            return
        no = self.store.branch(branch).no
        for row in self.store.iter_entry_rows(no, start, stop):
            content = None if row.content is None else bytes(row.content).decode("utf-8", "replace")
            yield CheckedRow(Entry.from_bytes(row.data), content, row.erased_by)

    def check_heads(self) -> list[SignedHead]:
        """Check every branch's stored head against its newest signed checkpoint (strict open).

        A head already checked in this process (and not moved since) is not checked again.

        Raises:
            IntegrityError: as ``strict.StrictReader.check_head``.
        """
        with self.store.read():
            return [self._reader_checks.head(b.name, need=b.size) for b in self.store.branches()]

    def check_all(self) -> int:
        """Check every entry and content of every branch as a strict read would; return the count.

        One read transaction. Used before serving everything at once (``export``).

        Raises:
            IntegrityError: naming the first entry, branch and step that fails.
        """
        n = 0
        checks = self._reader_checks
        with self.store.read():
            for b in self.store.branches():
                checks.check_head(b.name)
                for row, e in checks.rows(b.name):
                    checks.content(b.name, row, e)
                    n += 1
        return n

    def head_checkpoint(self, branch: str = CANONICAL_BRANCH) -> SignedCheckpoint | None:
        """Return the branch's newest signed checkpoint, verified (no signing, no write).

        When strict it is the checked head, so it covers every entry of the branch.

        Raises:
            IntegrityError: if strict and the head does not agree with it.
        """
        if self.strict:
            with self.store.read():
                head = self._reader_checks.head(branch, need=self.store.branch(branch).size)
            note = head.note
        else:
            found = self.latest_checkpoint(branch)
            if found is None:
                return None
            note = found
        return open_checkpoint(note, [Verifier.from_vkey(k) for k in self.genesis_vkeys()])

    def find_event(self, event_id: str) -> tuple[str, int] | None:
        """Return ``(branch, seq)`` of the event with this id, or None.

        An event appended earlier in the batch being appended counts (its index row is
        written with the batch).
        """
        raw = _uuid_bytes(event_id)
        k = self._batch_events.get(raw)
        if k is None:
            k = self.store.event_key(raw)
        if k is None:
            return None
        no, seq = k >> 40, k & ((1 << 40) - 1)
        for b in self.store.branches():
            if b.no == no:
                return b.name, seq
        return None  # pragma: no cover - event_ids only points at existing branches

    # -- tree ----------------------------------------------------------------------------------

    def _reader(self, branch_no: int) -> merkle.NodeReader:
        def read(ids: Sequence[tuple[int, int]]) -> list[bytes]:
            return self.store.read_nodes(branch_no, ids)

        return read

    def root(self, size: int | None = None, branch: str = CANONICAL_BRANCH) -> TreeRoot:
        """Return the Merkle root of a branch at ``size`` (default: now), in O(log n) reads.

        Raises:
            RefusedError: if ``size`` exceeds the branch's size.
        """
        # No read transaction needed: complete subtrees never change and sizes only grow.
        row = self.store.branch(branch)
        size = row.size if size is None else size
        _check_size(size, row.size)
        return TreeRoot(merkle.tree_root(size, self._reader(row.no)))

    def inclusion_proof(
        self, index: int, size: int | None = None, branch: str = CANONICAL_BRANCH
    ) -> list[bytes]:
        """Return the RFC 9162 inclusion proof of entry ``index`` in the tree of ``size``.

        Raises:
            RefusedError: if ``index >= size`` or ``size`` exceeds the branch's size.
        """
        if size is not None and _N is not None and isinstance(self.store, Store):
            proof = self._native_proof(index, size, branch)
            if proof is not None:
                return proof
        row = self.store.branch(branch)
        self._branch_nos[branch] = row.no
        size = row.size if size is None else size
        _check_size(size, row.size)
        if not 0 <= index < size:
            raise RefusedError(f"index {index} is not in a tree of size {size}")
        if _N is not None and isinstance(self.store, Store):
            # Natively: the path's keys, one query for those the node cache lacks, the fold.
            cache = self.store.node_cache
            try:
                leaves, inner = _N.inclusion_keys(row.no, index, size, cache)
                rows = self.store.tree_rows(leaves, inner)
                return _N.inclusion_from_rows(
                    row.no, index, size, cache, rows, NODE_CACHE_MIN_LEVEL, NODE_CACHE_MAX
                )
            except _N.Reject:
                pass  # a missing or damaged node: the reference says which
        return merkle.inclusion_proof(index, size, self._reader(row.no))

    def _native_proof(self, index: int, size: int, branch: str) -> list[bytes] | None:
        """Return the inclusion proof from one statement: the path rows and the branch size.

        The path's keys need the branch's number, which never changes for a name (it is
        remembered from an earlier proof, and the branch row read with the path must agree);
        the size is checked against the row read in the same statement. None when the
        number is not known yet or anything is off: the caller's path then decides.

        Raises:
            RefusedError: if ``size`` exceeds the branch's size or ``index`` is not in it.
        """
        assert _N is not None and isinstance(self.store, Store)
        no = self._branch_nos.get(branch)
        if no is None or not 0 <= index < size:
            return None
        cache = self.store.node_cache
        try:
            leaves, inner = _N.inclusion_keys(no, index, size, cache)
        except _N.Reject:
            return None
        have, rows = self.store.tree_rows_of(branch, leaves, inner)
        if have is None or have[1] != no:
            return None
        _check_size(size, have[0])
        try:
            return _N.inclusion_from_rows(
                no, index, size, cache, rows, NODE_CACHE_MIN_LEVEL, NODE_CACHE_MAX
            )
        except _N.Reject:
            return None

    def consistency_proof(
        self, size1: int, size2: int | None = None, branch: str = CANONICAL_BRANCH
    ) -> list[bytes]:
        """Return the RFC 9162 consistency proof between tree sizes ``size1`` and ``size2``.

        Raises:
            RefusedError: if ``size1`` is 0, the sizes are out of order or exceed the
                branch's size.
        """
        with self.store.read():
            row = self.store.branch(branch)
            size2 = row.size if size2 is None else size2
            _check_size(size2, row.size)
            if not 0 < size1 <= size2:
                raise RefusedError(
                    f"consistency needs 0 < size1 <= size2, got {size1}, {size2} (every tree "
                    "extends the empty one, so a proof from size 0 would prove nothing)"
                )
            return merkle.consistency_proof(size1, size2, self._reader(row.no))

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
    ) -> list[Appended]:
        """Append many entries in one transaction: all of them land, or none.

        Follow-up operations returned by hooks (e.g. automatic snapshots) land in the same
        transaction and are included in the result.

        Raises:
            ValidationError / RefusedError: an entry is refused; nothing was written.
            StorageError: the file could not be written; nothing was written.
        """
        items = list(items)
        if not items or self._replaying:
            # Replaying committed entries into the cache: what a hook appends is in the log.
            return []
        self._require_key()
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
    ) -> list[Appended]:
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
    ) -> list[Appended]:
        branch = head.row.name
        start = head.row.size
        prev = head.row.head
        if branch not in self._txn:
            self._txn[branch] = _Seal(start, bytes(head.compact.root()))
        seal = self._txn[branch]
        no = head.row.no
        seq = start
        # What _write_rows inserts: the entries rows (k, hash, data, digest, salt, content),
        # their leaf hashes, the event index rows and the erasures (entry key, erasing seq).
        rows: list[tuple[int, bytes, bytes, bytes | None, bytes | None, bytes | None]] = []
        leaves: list[bytes] = []
        event_rows: list[tuple[bytes, int]] = []
        erasures: dict[int, int] = {}  # entry key -> erasing seq, this call's only
        unindexed: list[tuple[bytes, int]] = []  # native events not yet in batch_events
        out: list[Appended] = []
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
                if k and set(map(_ID, queue[len(queue) - k :])) != _NO_ID:
                    # Ids of the requests' own: the run ends before the first one taken, which
                    # the reference loop then refuses (after the events before it).
                    if unindexed:
                        batch_events.update(unindexed)
                        unindexed = []
                    assert built is not None
                    if stored is None:  # the batch's own event ids the index holds: one lookup
                        stored = self._stored_ids(_own_ids(items))
                    taken = None
                    if not _all_new(built[2], batch_events, stored):  # then find the first one
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
                    _, n_rows, n_events, n_leaves, n_out, n_ts, n_entries, n_contents = built
                    del queue[len(queue) - k :]
                    rows += n_rows
                    leaves += n_leaves
                    event_rows += n_events
                    out += n_out
                    prev = EntryHash(n_leaves[-1])
                    seq += k
                    n += k
                    last_ts = n_ts
                    if not hooks:
                        unindexed += n_events
                        continue
                    # The hooks may look the batch's events up (``find_event``).
                    batch_events.update(n_events)
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
                batch_events.update(unindexed)
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
                event_rows.append((raw_id, entry_key(no, seq)))
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
        self._write_rows(head, rows, leaves, event_rows, erasures, last_ts)
        return out

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

        With hooks installed, each event's ``Entry`` and content come too.
        """
        assert _N is not None
        try:
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
        rows: list[tuple[int, bytes, bytes, bytes | None, bytes | None, bytes | None]],
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
            if rows[i][5] is None:
                raise RefusedError(f"event {target} was already erased")
            rows[i] = (*rows[i][:3], None, None, None)
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
        rows: list[tuple[int, bytes, bytes, bytes | None, bytes | None, bytes | None]],
        leaves: list[bytes],
        event_rows: list[tuple[bytes, int]],
        erasures: Mapping[int, int],
        last_ts: int | None,
    ) -> None:
        """Insert entries, their completed tree nodes, erasures and the new head (in the txn).

        ``rows`` are the ``entries`` rows in seq order and ``leaves`` their hashes.
        Everything written comes from the arguments: nothing outlives a rolled-back call.
        """
        no = head.row.no
        compact = head.compact
        if _N is not None:
            try:
                hashes, nodes = _N.compact_append_rows(
                    no, compact.size, list(compact.hashes), leaves
                )
            except _N.Reject:
                pass  # the reference below
            else:
                compact = merkle.CompactRange.from_hashes(compact.size + len(leaves), hashes)
        if compact is head.compact:
            compact = _copy(compact)
            nodes = [(node_key(no, lvl, i), h) for lvl, i, h in compact.append_many(leaves)]
        self.store.insert_entries(rows)
        if event_rows:
            self.store.insert_event_ids(event_rows)
        for k, by in erasures.items():
            self.store.erase_content(k, by)
        self.store.insert_nodes(nodes)
        size = head.row.size + len(rows)
        last = EntryHash(leaves[-1])
        self.store.set_head(no, size, last)
        head.row = BranchRow(no, head.row.name, size, last)
        head.compact = compact
        head.last_ts = last_ts

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
        if self.derived is not self.store:
            self._catch_up()  # under the branch's row lock: what others appended first
        if cached is not None and cached.row == row:
            return cached
        ids = merkle.perfect_subtrees(row.size)
        hashes = self.store.read_nodes(row.no, ids)
        head = _Head(row, merkle.CompactRange.from_hashes(row.size, hashes))
        self._heads[branch] = head
        return head

    # -- the seal: a signed checkpoint in every append's transaction -----------------------------

    def _own_from(self, branch: str) -> int | None:
        """Where this ledger's open write transaction began appending to ``branch``, or None."""
        seal = self._txn.get(branch)
        return None if seal is None else seal.start_size

    def _seal(self) -> None:
        """Before COMMIT: sign a checkpoint of every branch this transaction grew.

        Runs inside the transaction (``Store.on_commit``): the checkpoint rows commit with
        the entries or not at all, so a signed note never names an uncommitted tree and no
        committed entry lacks one. Refuses (rolling everything back) to sign a tree that is
        inconsistent with the branch's previous head checkpoint. Applies the retention
        (docs/FORMAT.md §5): the previous head is dropped unless a rule keeps it.
        """
        pending, self._txn = self._txn, {}
        if not pending:
            return
        self._sealing_heads = frozenset(pending)
        signer = self._require_key()
        known = self._seal_states()
        for branch, seal in pending.items():
            self._sealed.append(self._sign_head(branch, seal, signer, known))
        for head in self._sealed:
            self._reader_checks.trust_head(head)
        self._sealed.clear()
        self._publish_pending = True

    def _sealed_committed(self) -> None:
        """After a sealing COMMIT: hand the new checkpoints to the witnesses and tiles."""
        if not self._publish_pending:
            return
        if self._seal_version is not None:
            # What this transaction's seals wrote is now the file's state: the next seal may
            # take it from memory while nothing else writes (taken before the witnesses write).
            self._seal_known.update(self._seal_next)
            self._seal_token = (self._seal_version, self.store.db.total_changes())
            self._sealed_heads = self._sealing_heads
        self._seal_next = {}
        self._sealing_heads = frozenset()
        self._publish_pending = False
        from memroot.ledger.witness import after_commit

        after_commit(self)

    def _unseal(self) -> None:
        """After a rollback: forget what the transaction would have sealed."""
        for branch in self._txn:
            self._reader_checks.forget(branch)
        self._txn = {}
        self._sealed.clear()
        self._publish_pending = False
        self._reader_checks.forget()
        self._forget_seal_states()

    def _forget_seal_states(self) -> None:
        """Drop what the seals remember: the next one reads the checkpoints and marker."""
        self._seal_known = {}
        self._seal_next = {}
        self._seal_token = None
        self._seal_version = None
        self._sealed_heads = frozenset()
        self._sealing_heads = frozenset()

    def _seal_states(self) -> dict[int, _SealState]:
        """Return what the last seals left per branch no, when it is still the file's state.

        Valid when neither another connection (SQLite's ``data_version``) nor this one
        (``total_changes`` when this write began) changed the file since the last sealing
        commit: then the newest checkpoint and the retention marker of a branch are the ones
        that seal wrote (or read), and reading them again would return the same rows. Else
        (and always on PostgreSQL, which has no such counter) nothing is known: the seal
        reads them.
        """
        self._seal_next = {}
        store = self.store
        version = store.data_version() if isinstance(store, Store) else None
        self._seal_version = version
        if version is None:
            self._seal_known = {}
            return {}
        assert isinstance(store, Store)
        if self._seal_token != (version, store.changes_at_begin):
            self._seal_known = {}
        return self._seal_known

    def _sign_head(
        self, branch: str, seal: _Seal, signer: Signer, known: Mapping[int, _SealState]
    ) -> SignedHead:
        # The right edge this transaction's appends left (``_write_rows`` keeps it in step).
        cached = self._heads[branch]
        row = cached.row
        read = self._reader(row.no)
        root = bytes(cached.compact.root())
        marker = f"{_TRANSIENT_META}{row.no}"
        state = known.get(row.no)
        if state is None:
            last = self.store.latest_checkpoint(row.no)
            marked = self.store.meta(marker) if last is not None else None
        else:
            last, marked = state.last, state.marker
        if last is not None:
            last_size, last_root, _ = last
            if last_size > row.size:
                raise RefusedError(
                    f"branch {branch!r} has {row.size} entries but a checkpoint of size "
                    f"{last_size} was signed: the ledger was truncated; refusing to append"
                )
            at_start = seal.start_root if last_size == seal.start_size else None
            if (at_start or bytes(merkle.tree_root(last_size, read))) != bytes(last_root):
                raise RefusedError(
                    f"branch {branch!r}: the tree at size {last_size} no longer matches its "
                    "signed checkpoint (history was rewritten); refusing to append"
                )
            if last_size == row.size:  # nothing landed (a refused append inside a bulk)
                self._seal_next[row.no] = _SealState(last, marked)
                return SignedHead(branch, row.no, row.size, root, last[2])
        cp = Checkpoint(branch_origin(self.origin, branch), row.size, TreeRoot(root))
        note = sign_checkpoint(cp, [signer])
        self.store.insert_checkpoint(row.no, row.size, root, note)
        if last is not None and last[0] < row.size and marked == last[0]:
            self.store.delete_checkpoint(row.no, last[0])
        before = 0 if last is None else last[0]
        keep = (
            seal.keep
            or last is None
            or row.size // CHECKPOINT_KEEP_EVERY != (before // CHECKPOINT_KEEP_EVERY)
        )
        if keep:
            self.store.delete_meta(marker)
        else:
            self.store.set_meta(marker, row.size)
        self._seal_next[row.no] = _SealState((row.size, root, note), None if keep else row.size)
        return SignedHead(branch, row.no, row.size, root, note)

    # -- checkpoints ---------------------------------------------------------------------------

    def checkpoint(self, branch: str = CANONICAL_BRANCH) -> SignedCheckpoint:
        """Sign and store a checkpoint of the branch's current tree; return it.

        Every append is already sealed by a head checkpoint; this one is *on request*, so it
        is kept by the retention for good. Signs only what is committed (the read and the
        insert run in one write transaction, after the appends' commits), and refuses to sign
        a tree that is inconsistent with the newest checkpoint signed before (shorter, or a
        different root at that size). Signing again at an unchanged size returns the stored
        checkpoint.

        Raises:
            RefusedError: if the tree is inconsistent with an earlier signed checkpoint.
            KeyFileError: if the signing key cannot be loaded or is not a key of this ledger.
        """
        if self.store.readonly:
            head = self.head_checkpoint(branch)
            if head is None or head.checkpoint.size != self.size(branch):
                raise StorageError(f"{self.path} is open read-only: cannot sign a checkpoint")
            return head
        signer = self.signer
        if vkey_of(signer) not in self.genesis_vkeys():
            # A key file of another ledger (or a stray key) would sign checkpoints that no
            # auditor of this ledger trusts: refuse before signing anything.
            raise KeyFileError(
                f"key file {self.key_path} holds key {vkey_of(signer)}, which is not a key of "
                "this ledger (its genesis or a KEY_ROTATE); use the ledger's own key file"
            )
        # It writes checkpoints and the marker outside any seal (perhaps inside an open bulk,
        # before that transaction's seal): what the seals remember no longer holds.
        self._forget_seal_states()
        with self.store.write():
            row = self.store.branch(branch)
            read = self._reader(row.no)
            root = merkle.tree_root(row.size, read)
            last = self.store.latest_checkpoint(row.no)
            if last is not None:
                last_size, last_root, last_note = last
                if last_size > row.size:
                    raise RefusedError(
                        f"branch {branch!r} has {row.size} entries but a checkpoint of size "
                        f"{last_size} was signed: the ledger was truncated; refusing to sign"
                    )
                if merkle.tree_root(last_size, read) != last_root:
                    raise RefusedError(
                        f"the tree at size {last_size} no longer matches the signed checkpoint "
                        f"(history was rewritten); refusing to sign"
                    )
                if last_size == row.size:
                    # On request: the head is kept for good (retention), not dropped later.
                    if self.store.meta(f"{_TRANSIENT_META}{row.no}") == row.size:
                        self.store.delete_meta(f"{_TRANSIENT_META}{row.no}")
                    note = last_note  # nothing new to sign; what is pending still goes out
            if last is None or last[0] != row.size:
                cp = Checkpoint(branch_origin(self.origin, branch), row.size, root)
                note = sign_checkpoint(cp, [signer])
                self.store.insert_checkpoint(row.no, row.size, root, note)
                self.store.delete_meta(f"{_TRANSIENT_META}{row.no}")
        return self._published(open_checkpoint(note, self._verifiers()))

    def _published(self, signed: SignedCheckpoint) -> SignedCheckpoint:
        """Hand a committed checkpoint to the witnesses and the tiles directory.

        Never raises for them: a witness that is down leaves it pending (see
        ``memroot.ledger.witness``). Inside a write transaction nothing is sent yet.
        """
        if self.store.db.in_transaction:
            return signed
        from memroot.ledger.witness import after_checkpoint

        return after_checkpoint(self, signed)

    def _verifiers(self) -> list[Verifier]:
        """Every key this ledger ever signed with: checkpoints from before a rotation."""
        keys = self.genesis_vkeys()
        current = vkey_of(self.signer)
        return [Verifier.from_vkey(k) for k in (keys if current in keys else [*keys, current])]

    def checkpoints(self, branch: str = CANONICAL_BRANCH) -> list[str]:
        """Return every stored signed checkpoint note of a branch, oldest first."""
        return [note for _, _, note in self.store.checkpoints(self.store.branch(branch).no)]

    def latest_checkpoint(self, branch: str = CANONICAL_BRANCH) -> str | None:
        """Return the newest stored signed checkpoint note of a branch, or None."""
        last = self.store.latest_checkpoint(self.store.branch(branch).no)
        return None if last is None else last[2]

    def tlog_proof(
        self, index: int, size: int | None = None, branch: str = CANONICAL_BRANCH
    ) -> str:
        """Return a C2SP ``tlog-proof@v1`` of entry ``index`` against a signed checkpoint.

        Without ``size`` the current tree is checkpointed (or the stored checkpoint reused).

        Raises:
            NotFoundError: if no checkpoint was signed at ``size``.
            RefusedError: if ``index`` is outside the tree.
        """
        if size is None:
            head = self.head_checkpoint(branch)
            if head is None or head.checkpoint.size != self.size(branch):
                head = self.checkpoint(branch)
            note = head.note
            size = head.checkpoint.size
        else:
            found = [
                n for s, _, n in self.store.checkpoints(self.store.branch(branch).no) if s == size
            ]
            if not found:
                raise NotFoundError(
                    f"no checkpoint was signed at size {size}; prove against the latest one "
                    "(give no size) or sign one with `memroot checkpoint`"
                )
            note = found[0]
        proof = self.inclusion_proof(index, size, branch)
        return format_tlog_proof(index, proof, note)


DEFAULT_HOOKS: Final = "memroot.memory_root.stack:default_hooks"
"""The factory of the hooks ``Ledger.open``/``Ledger.init`` install when given none.

Named here and imported only when a ledger is opened, so the ledger layer does not import
the layers above it (SPEC "Layers"); the factory is the one list the CLI installs too.
"""


class _StaleCache(StorageError):
    """The derived-state cache is ahead of, or diverges from, the ledger: not trusted."""

    def __init__(self, path: Path, branch: str) -> None:
        super().__init__(
            f"the derived-state cache {path} does not match branch {branch!r} of the ledger "
            "(another ledger's, or the ledger was rolled back): reopen the ledger to rebuild "
            "it, or delete the file"
        )


_ONLY_EVENTS: Final = {EventInput}
_ID: Final = operator.attrgetter("id")
_NO_ID: Final = {None}


def _nothing() -> None:
    """No bookkeeping to do."""


def _folded(hook: AppendHook, db: apsw.Connection, ledger: Ledger, branch: str) -> int:
    """Return how many entries of ``branch`` ``hook`` says it holds (0: it does not say)."""
    folded = getattr(hook, "folded", None)
    return 0 if folded is None else int(folded(db, ledger, branch))


def _end_batch(hooks: Sequence[AppendHook], db: apsw.Connection) -> None:
    for hook in hooks:
        end_batch = getattr(hook, "end_batch", None)
        if end_batch is not None:
            end_batch(db)


def _hooks(hooks: Sequence[AppendHook] | None, *, readonly: bool) -> Sequence[AppendHook]:
    """Return ``hooks``, or the default hooks for None (none for a read-only ledger)."""
    if hooks is not None:
        return hooks
    if readonly:
        return ()
    module, _, name = DEFAULT_HOOKS.partition(":")
    factory = getattr(importlib.import_module(module), name)
    return list(factory())


def _own_ids(items: Sequence[EventInput | OpInput | _Genesis]) -> list[bytes]:
    """Return the 16 bytes of each event request's own (canonical) id."""
    texts = [it.id for it in items if type(it) is EventInput and it.id is not None]
    if _N is not None:
        return [raw for raw in _N.uuid_bytes(texts) if raw is not None]
    return [_uuid_bytes(t) for t in texts]


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


def _copy(compact: merkle.CompactRange) -> merkle.CompactRange:
    return merkle.CompactRange.from_hashes(compact.size, compact.hashes)


def _check_size(size: int, have: int) -> None:
    if not 0 <= size <= have:
        raise RefusedError(f"size {size} is outside the tree (it has {have} entries)")


def _uuid_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace("-", ""))
