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

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import apsw

from memroot.ledger._appending import _Appending, _Genesis
from memroot.ledger._state import _ORIGIN_RE, _Head, _Seal, _SealState
from memroot.ledger._state import CHECKPOINT_KEEP_EVERY as CHECKPOINT_KEEP_EVERY
from memroot.ledger._state import DEFAULT_SNAPSHOT_EVERY as DEFAULT_SNAPSHOT_EVERY
from memroot.ledger._state import POLICY_VERSION as POLICY_VERSION
from memroot.ledger._state import SYSTEM_ACTOR as SYSTEM_ACTOR
from memroot.ledger._state import SYSTEM_NAMESPACE as SYSTEM_NAMESPACE
from memroot.ledger._state import Appended as Appended
from memroot.ledger._state import branch_origin as branch_origin
from memroot.ledger._state import default_key_path as default_key_path
from memroot.ledger.backends.pg import DerivedCache, PgStore, StoreView, default_cache_path, is_url
from memroot.ledger.backends.store import BranchRow, Store
from memroot.ledger.entries import (
    CANONICAL_BRANCH,
    FORMAT_VERSION,
    MAX_SNAPSHOT_EVERY,
    ZERO_HASH,
    Entry,
    OpInput,
    new_uuid,
)
from memroot.ledger.errors import KeyFileError, StorageError, ValidationError
from memroot.ledger.keyset import KeySet
from memroot.ledger.note import SignedCheckpoint, vkey_of
from memroot.ledger.signing import Ed25519Signer, Signer
from memroot.ledger.strict import SignedHead, StrictReader, default_strict
from memroot.ledger.trust import TrustedState
from memroot.ledger.vocab import BranchType

__all__ = [
    "CHECKPOINT_KEEP_EVERY",
    "DEFAULT_APPEND_CHECKS",
    "DEFAULT_HOOKS",
    "DEFAULT_OBSERVERS",
    "DEFAULT_SNAPSHOT_EVERY",
    "AppendCheck",
    "AppendHook",
    "Appended",
    "CommitObserver",
    "Ledger",
    "branch_origin",
    "default_key_path",
]


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


class CommitObserver(Protocol):
    """What is told of the checkpoints a ledger commits (``Ledger.on_commit``).

    The ledger's default observer is transparency's (witness submission, tile publication:
    ``DEFAULT_OBSERVERS``); the ledger owns this interface so that it imports none of them.
    Neither method may raise for the observer's own trouble (a witness that is down): the
    checkpoint is committed whatever the observer does.
    """

    def committed(self, ledger: Ledger) -> None:
        """After an append transaction that sealed a checkpoint was committed."""

    def checkpointed(self, ledger: Ledger, signed: SignedCheckpoint) -> SignedCheckpoint:
        """After ``Ledger.checkpoint`` committed ``signed``: return it, with what was added.

        What an observer may add is cosignatures (a witness's): the checkpoint it returns
        is ``signed`` itself or the same checkpoint with more signature lines.
        """


class AppendCheck(Protocol):
    """What checks a branch's head before anything is appended onto it (``Ledger.before_append``).

    Called inside the write transaction whenever an append reads the head from the file
    (the first append, and after anything else changed the file: another connection's
    commit, or a write on this one outside the ledger's appends), with the row as stored,
    before any entry is built; it refuses by raising (an ``IntegrityError`` naming the step),
    and then nothing is written. The ledger's default check is transparency's (not below
    the size a configured witness cosigned: ``DEFAULT_APPEND_CHECKS``); the ledger owns
    this interface so that it imports none of them.
    """

    def check_head(self, ledger: Ledger, row: BranchRow) -> None:
        """Raise to refuse appending onto ``row`` (the head as stored); else return."""


class Ledger(_Appending):
    """An open memroot ledger. Use ``Ledger.init`` to create one and ``Ledger.open`` after.

    One mixin per idea, each on the one below (``memroot.ledger._state``): ``_Plumbing``
    (transactions, catch-up, the hooks' derived state), ``_Reading``, ``_Sealing`` (key,
    seal, checkpoints) and ``_Appending``; this class opens and creates ledgers and tells
    the commit observers.
    """

    hooks: list[AppendHook]

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
        (``derived``; ``cache_path``, default ``memroot.ledger.backends.pg.default_cache_path``).
        """
        self.store = store
        self.derived: Store = store
        """Where the layers above keep their derived tables: the ledger file itself, or for a
        PostgreSQL ledger this host's cache file (``memroot.ledger.backends.pg.DerivedCache``)."""
        self._applied: dict[str, tuple[int, bytes]] | None = None  # the cache's heads
        self._applied_version: int | None = None  # the cache's data_version when read
        self._replaying = False
        self._catching_up = False  # a PostgreSQL cache applying other hosts' entries
        self.path = store.path
        # A PostgreSQL ledger has no file to keep its key beside: the key is always named.
        self._key_given = key_path is not None or not isinstance(store, PgStore)
        self.key_path = key_path or default_key_path(store.path)
        self.hooks = list(hooks)
        self._signer: Signer | None = None
        self._key_checked: Signer | None = None  # the loaded key, once found to be ours
        self._signer_vkey: tuple[Signer, str] | None = None  # a signer and its vkey text
        # (key cache meta as read, the key set it gives, the key entries' seqs): _Reading
        self._key_cache: tuple[object, KeySet, list[int]] | None = None
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
        self._observers: list[CommitObserver] | None = None  # DEFAULT_OBSERVERS, when first told
        self._head_checks: list[AppendCheck] | None = None  # DEFAULT_APPEND_CHECKS, when first used
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

        ``path`` may be a ``postgresql://`` URL (``memroot.ledger.backends.pg``): the tables are
        made in that database and ``key_path`` is then required; the hooks' derived state is kept
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
        for observer in self._commit_observers():
            observer.committed(self)

    def _published(self, signed: SignedCheckpoint) -> SignedCheckpoint:
        """Hand a committed checkpoint to the commit observers (the witnesses, the tiles).

        They never raise for their own trouble: a witness that is down leaves it pending
        (see ``memroot.ledger.transparency.witness``). Inside a write transaction nothing is
        told yet.
        """
        if self.store.db.in_transaction:
            return signed
        for observer in self._commit_observers():
            signed = observer.checkpointed(self, signed)
        return signed

    def on_commit(self, observer: CommitObserver) -> None:
        """Tell ``observer`` of every checkpoint this ledger commits from now on.

        After the default observers (``DEFAULT_OBSERVERS``: witnesses and tiles), in the
        order registered.
        """
        self._commit_observers().append(observer)

    def before_append(self, check: AppendCheck) -> None:
        """Run ``check`` on every branch head an append reads from the file, from now on.

        After the default checks (``DEFAULT_APPEND_CHECKS``: a witness's cosigned size), in
        the order registered.
        """
        self._append_checks().append(check)

    def _append_checks(self) -> list[AppendCheck]:
        """Return the append checks, the defaults imported at the first call."""
        if self._head_checks is None:
            self._head_checks = [_named(spec) for spec in DEFAULT_APPEND_CHECKS]
        return self._head_checks

    def _commit_observers(self) -> list[CommitObserver]:
        """Return the commit observers, the defaults imported at the first call."""
        if self._observers is None:
            self._observers = [_named(spec) for spec in DEFAULT_OBSERVERS]
        return self._observers


DEFAULT_HOOKS: Final = "memroot.memory_root.stack:default_hooks"
"""The factory of the hooks ``Ledger.open``/``Ledger.init`` install when given none.

Named here and imported only when a ledger is opened, so the ledger layer does not import
the layers above it (SPEC "Layers"); the factory is the one list the CLI installs too.
"""


DEFAULT_OBSERVERS: Final = ("memroot.ledger.transparency.witness:COMMIT_OBSERVER",)
"""The commit observers every ledger tells of its checkpoints (``CommitObserver``).

Named here and imported at a ledger's first committed checkpoint, as ``DEFAULT_HOOKS`` is,
so the log's core imports no transparency module: transparency imports the core.
"""


DEFAULT_APPEND_CHECKS: Final = ("memroot.ledger.transparency.witness:APPEND_CHECK",)
"""The checks every ledger runs on a branch head before appending onto it (``AppendCheck``).

Named here and imported at a ledger's first append, as ``DEFAULT_OBSERVERS`` is: the log's
core does not know the witness tables; transparency checks them.
"""


def _named(spec: str) -> Any:
    """Return the object ``module:name`` names, importing its module."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _nothing() -> None:
    """No bookkeeping to do."""


def _hooks(hooks: Sequence[AppendHook] | None, *, readonly: bool) -> Sequence[AppendHook]:
    """Return ``hooks``, or the default hooks for None (none for a read-only ledger)."""
    if hooks is not None:
        return hooks
    if readonly:
        return ()
    return list(_named(DEFAULT_HOOKS)())
