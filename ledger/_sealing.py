"""The ledger's key, the seal of every append and signed checkpoints.

Every append transaction, right before it commits, signs a checkpoint of each branch it
grew with the ledger's key (``_seal``); ``checkpoint`` signs one on demand and
``tlog_proof`` proves an entry against one. What is committed is then handed to the commit
observers (``Ledger._published``).
"""

from __future__ import annotations

from collections.abc import Mapping

from memroot.ledger import merkle
from memroot.ledger._reading import _Reading
from memroot.ledger._state import (
    _TRANSIENT_META,
    CHECKPOINT_KEEP_EVERY,
    _Seal,
    _SealState,
    branch_origin,
)
from memroot.ledger.backends.pg import PgStore
from memroot.ledger.backends.store import Store
from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.errors import (
    IntegrityError,
    KeyFileError,
    NotFoundError,
    RefusedError,
    StorageError,
)
from memroot.ledger.hashing import TreeRoot
from memroot.ledger.note import (
    Checkpoint,
    SignedCheckpoint,
    Verifier,
    format_tlog_proof,
    open_checkpoint,
    sign_checkpoint,
    vkey_of,
)
from memroot.ledger.signing import Ed25519Signer, Signer
from memroot.ledger.strict import SignedHead


class _Sealing(_Reading):
    """The key, the seal and checkpoints."""

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

    def reload_key(self) -> None:
        """Forget the loaded signing key; the next signature reads the key file again."""
        self._signer = None
        self._key_checked = None

    def _require_key(self, own_main: int | None = None, *, cached: bool = False) -> Signer:
        """Return the signing key, checked to be a key in force, before anything is appended.

        In force: the root key, or a writer key the root key authorized and did not revoke
        (docs/FORMAT.md 7.5), by the key set read now; the seal calls this again inside the
        write transaction, where it reads the locked state, so an append never races a
        revocation on another host. A root key retired by a rotation this very transaction
        appended still seals it (the old key signs the rotation off, 7.3).

        Raises:
            KeyFileError: the key file is missing, unreadable or not a key in force (another
                ledger's, a retired root key, a revoked writer key: the message names the
                entry that retired or revoked it): appending is refused, since every append
                is sealed by a checkpoint signed with it; nothing is written.
        """
        try:
            signer = self.signer
        except KeyFileError as e:
            raise KeyFileError(
                f"appending to {self.path} needs its signing key (every append is sealed by a "
                f"checkpoint signed in the same transaction), and {e}; nothing was written"
            ) from e
        known = self._signer_vkey
        if known is None or known[0] is not signer:
            known = self._signer_vkey = (signer, vkey_of(signer))
        vkey = known[1]
        ks = self._key_cache[1] if cached and self._key_cache is not None else self.key_set()
        state, seq = ks.status(vkey)
        if state in ("root", "writer"):
            return signer
        own = self._own_from(CANONICAL_BRANCH) if own_main is None else own_main
        if state == "retired" and own is not None and seq is not None and seq >= own:
            return signer
        if state == "retired":
            raise KeyFileError(
                f"key file {self.key_path} holds key {vkey}, the root key retired by entry "
                f"{seq} (KEY_ROTATE): a retired key signs nothing new; use the ledger's current "
                "key file; nothing was written"
            )
        if state == "revoked":
            name = next((w.name for w in self.key_set().writers.values() if w.vkey == vkey), "?")
            raise KeyFileError(
                f"key file {self.key_path} holds writer key {name!r} ({vkey}), revoked by entry "
                f"{seq} (KEY_REVOKE): a revoked key signs nothing new; nothing was written"
            )
        raise KeyFileError(
            f"key file {self.key_path} holds key {vkey}, which is not a key of this "
            "ledger (its root key, a rotation's or a writer key); nothing was written"
        )

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
        main = pending.get(CANONICAL_BRANCH)
        known = self._seal_states()
        # Nothing changed the file since the last seal (SQLite's counters say so): the key
        # set folded then still holds (a key entry this transaction appended dropped it).
        store = self.store
        unchanged = self._seal_version is not None and self._seal_token == (
            self._seal_version,
            store.changes_at_begin,
        )
        signer = self._require_key(None if main is None else main.start_size, cached=unchanged)
        for branch, seal in pending.items():
            self._sealed.append(self._sign_head(branch, seal, signer, known))
        for head in self._sealed:
            self._reader_checks.trust_head(head)
        self._sealed.clear()
        self._publish_pending = True

    def _unseal(self) -> None:
        """After a rollback: forget what the transaction would have sealed."""
        for branch in self._txn:
            self._reader_checks.forget(branch)
        self._txn = {}
        self._sealed.clear()
        self._publish_pending = False
        self._reader_checks.forget()
        self._forget_seal_states()
        self.forget_key_set()  # it may hold a key entry that was rolled back

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
        is kept by the retention for good. It never signs an entry: only a write transaction
        signs, and only the entries it appended itself (``_seal``). Entries that no signed
        checkpoint covers were written by someone without the key (a forged tail), and
        signing them would vouch for them with the ledger's key: refused. So this returns the
        head checkpoint, marked kept; a tree with no checkpoint at all (nothing sealed it)
        is signed once, at its genesis size only. It refuses a tree that is inconsistent
        with the newest checkpoint signed before (shorter, or a different root at that size).

        Raises:
            IntegrityError: step 6, if entries past the newest signed checkpoint exist.
            RefusedError: if the tree is inconsistent with an earlier signed checkpoint.
            KeyFileError: if the signing key cannot be loaded or is not a key of this ledger.
        """
        if self.store.readonly:
            head = self.head_checkpoint(branch)
            if head is None or head.checkpoint.size != self.size(branch):
                raise StorageError(f"{self.path} is open read-only: cannot sign a checkpoint")
            return head
        # A key file of another ledger (or a stray, retired or revoked key) would sign
        # checkpoints that no auditor of this ledger trusts: refuse before signing anything.
        signer = self._require_key()
        # It writes checkpoints and the marker outside any seal (perhaps inside an open bulk,
        # before that transaction's seal): what the seals remember no longer holds.
        self._forget_seal_states()
        with self.store.write():
            row = self.store.branch(branch)
            read = self._reader(row.no)
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
                if last_size < row.size and self._own_from(branch) != last_size:
                    raise IntegrityError(
                        f"branch {branch!r}: entries {last_size}..{row.size - 1} are covered by "
                        "no signed checkpoint (unsigned tail, written without the key); "
                        "refusing to sign them (`memroot verify` reports them)",
                        branch=branch,
                        seq=last_size,
                        step=6,
                    )
                if last_size == row.size:
                    # On request: the head is kept for good (retention), not dropped later.
                    if self.store.meta(f"{_TRANSIENT_META}{row.no}") == row.size:
                        self.store.delete_meta(f"{_TRANSIENT_META}{row.no}")
                    note = last_note  # nothing new to sign; what is pending still goes out
            elif row.size > 1 and self._own_from(branch) is None:
                raise IntegrityError(
                    f"branch {branch!r} has {row.size} entries and no signed checkpoint: "
                    "refusing to sign entries no seal vouched for",
                    branch=branch,
                    seq=0,
                    step=6,
                )
            if last is None or last[0] != row.size:
                root = merkle.tree_root(row.size, read)
                cp = Checkpoint(branch_origin(self.origin, branch), row.size, root)
                note = sign_checkpoint(cp, [signer])
                self.store.insert_checkpoint(row.no, row.size, root, note)
                self.store.delete_meta(f"{_TRANSIENT_META}{row.no}")
        return self._published(open_checkpoint(note, self._verifiers()))

    def _verifiers(self) -> list[Verifier]:
        """Every key this ledger ever signed with: root keys (all rotations) and writer keys."""
        return [Verifier.from_vkey(k) for k in self.all_vkeys()]

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
