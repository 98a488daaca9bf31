"""Reading a ledger: entries and contents (strict by default), roots and Merkle proofs.

Every read is checked against the newest signed checkpoint first (``memroot.ledger.strict``)
unless the ledger was opened with ``strict=False``; the tree's roots and proofs come from
the stored nodes (or the native core).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from memroot.ledger import merkle
from memroot.ledger._backend import NATIVE as _N
from memroot.ledger._plumbing import _Plumbing
from memroot.ledger._state import _check_size, _uuid_bytes
from memroot.ledger.backends.store import NODE_CACHE_MAX, NODE_CACHE_MIN_LEVEL, BranchRow, Store
from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import DecodeError, IntegrityError, RefusedError
from memroot.ledger.hashing import TreeRoot
from memroot.ledger.keyset import (
    KEY_ENTRIES_META,
    ROTATED_VKEYS_META,
    KeyEntryError,
    KeySet,
    load_key_set,
)
from memroot.ledger.note import SignedCheckpoint, Verifier, open_checkpoint
from memroot.ledger.strict import CheckedRow, SignedHead


class _Reading(_Plumbing):
    """Entries, strict reads, stored checkpoints, roots and proofs."""

    def genesis(self, branch: str = CANONICAL_BRANCH) -> Entry:
        """Return the genesis entry of a branch."""
        return self.entry(0, branch)

    def genesis_vkeys(self) -> list[str]:
        """Return the root keys: the canonical genesis key and every rotation's new key."""
        return [r.vkey for r in self.key_set().roots]

    def all_vkeys(self) -> list[str]:
        """Return every key that signed or may sign a checkpoint: root and writer keys."""
        ks = self.key_set()
        return [r.vkey for r in ks.roots] + [
            w.vkey for w in sorted(ks.writers.values(), key=lambda w: w.added_by)
        ]

    def current_vkey(self) -> str:
        """Return the ledger's root vkey in force, read from the ledger, never a key file."""
        return self.key_set().root

    def key_set(self) -> KeySet:
        """Return the key set ``main``'s key entries define (``memroot.ledger.keyset``).

        Folded from the entries the key cache lists (re-read when the cache changed, so
        another process's key operation is seen at the next call); inside a write
        transaction, what it reads is the locked state.

        Raises:
            IntegrityError: if a key entry the cache lists is not a valid key entry (then
                ``memroot verify`` says which).
        """
        raw = self.store.meta(KEY_ENTRIES_META)
        if raw is None:  # no key cache (before writer keys): the rotations say if any
            raw = ("rotated", self.store.meta(ROTATED_VKEYS_META))
        cached = self._key_cache
        if cached is not None and cached[0] == raw:
            return cached[1]
        try:
            ks, seqs = load_key_set(self.store, self.origin)
        except (KeyEntryError, DecodeError) as e:
            raise IntegrityError(
                f"the key set of {self.path} does not read: {e} (run `memroot verify`)",
                branch=CANONICAL_BRANCH,
                step=6,
            ) from e
        self._key_cache = (raw, ks, seqs)
        return ks

    def key_entry_seqs(self) -> list[int]:
        """Return the seqs of ``main``'s key entries (as ``key_set`` found them)."""
        self.key_set()
        assert self._key_cache is not None
        return list(self._key_cache[2])

    def forget_key_set(self) -> None:
        """Drop the folded key set: the next ``key_set`` reads the key cache again."""
        self._key_cache = None

    # -- reads ---------------------------------------------------------------------------------

    def size(self, branch: str = CANONICAL_BRANCH) -> int:
        """Return the number of entries on a branch.

        Inside a write transaction that appended to the branch, the head that transaction
        wrote (``_write_rows`` keeps it in step; nobody else can move it under the lock).
        """
        if branch in self._txn:
            return self._heads[branch].row.size
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
        return open_checkpoint(note, [Verifier.from_vkey(k) for k in self.all_vkeys()])

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
                by_end = self.store.node_by_end
                leaves, inner = _N.inclusion_keys(row.no, index, size, cache, by_end)
                rows = self.store.tree_rows(leaves, inner)
                return _N.inclusion_from_rows(
                    row.no, index, size, cache, rows, NODE_CACHE_MIN_LEVEL, NODE_CACHE_MAX, by_end
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
        by_end = self.store.node_by_end
        try:
            leaves, inner = _N.inclusion_keys(no, index, size, cache, by_end)
        except _N.Reject:
            return None
        have, rows = self.store.tree_rows_of(branch, leaves, inner)
        if have is None or have[1] != no:
            return None
        _check_size(size, have[0])
        try:
            return _N.inclusion_from_rows(
                no, index, size, cache, rows, NODE_CACHE_MIN_LEVEL, NODE_CACHE_MAX, by_end
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

    def checkpoints(self, branch: str = CANONICAL_BRANCH) -> list[str]:
        """Return every stored signed checkpoint note of a branch, oldest first."""
        return [note for _, _, note in self.store.checkpoints(self.store.branch(branch).no)]

    def latest_checkpoint(self, branch: str = CANONICAL_BRANCH) -> str | None:
        """Return the newest stored signed checkpoint note of a branch, or None."""
        last = self.store.latest_checkpoint(self.store.branch(branch).no)
        return None if last is None else last[2]
