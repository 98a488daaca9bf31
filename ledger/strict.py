"""Strict reads: every entry and content the ledger serves is checked against a signed root.

A ``StrictReader`` sits between ``Ledger``'s read methods and the store. Per branch it first
checks the stored chain head against the newest signed checkpoint (signature by a trusted
key, size equal to the branch's size, root equal to the stored tree's root and, with a
trusted state, consistent with the checkpoint trusted before): O(log n) reads. After that
every row it hands out is checked before it is returned:

    (1) strict decoding;                   (2) its seq and branch are where it is stored;
    (3) its prev link;                     (5) its leaf is in the signed tree;
    (4) its content commitment, or an erasure recorded by the TOMBSTONE it names.

Inclusion is checked for a whole contiguous range at once: the range's leaves are recomputed
from the entry bytes, the rest of the tree is read from the stored complete subtrees, and the
root this gives must be the signed one. A range of ``k`` entries costs O(k + log n) hashes, so
sequential reads stay cheap; single reads cost one O(log n) check each, and verified leaves are
cached. A failed check raises ``IntegrityError`` naming the branch, the entry and the step (the
auditor's step numbers, docs/FORMAT.md), never the tampered data itself.

Entries appended by the same ``Ledger`` in its still-open write transaction are its own (its
seal signs them at commit), so hooks reading them mid-append are not refused.

``relaxed()`` turns the default off for code that must read a damaged ledger to report on it
(``verify``), and ``Ledger.open(..., strict=False)`` for forensics.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from memroot.ledger import merkle
from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.backends.store import EntryRow, Store
from memroot.ledger.entries import CANONICAL_BRANCH, ZERO_HASH, Entry, Kind
from memroot.ledger.errors import DecodeError, IntegrityError, NotFoundError, ProofError
from memroot.ledger.hashing import content_commitment, leaf_hash, node_hash
from memroot.ledger.keyset import KEY_ENTRIES_META, KeyEntryError, KeySet, load_key_set
from memroot.ledger.note import Checkpoint, Verifier, open_checkpoint
from memroot.ledger.vocab import OpType

if TYPE_CHECKING:
    from memroot.ledger.trust import TrustedState

__all__ = [
    "CheckedRow",
    "SignedHead",
    "StrictReader",
    "default_strict",
    "leaves_root",
    "range_root",
    "relaxed",
]

_CHUNK: Final = 1024
_KINDS: Final = {k.value: k for k in Kind}
_LEAF_CACHE_MAX: Final = 1 << 16
_OPENED_MAX: Final = 64
"""How many opened checkpoint notes a reader remembers (``check_head``)."""
_PROVEN_MAX: Final = 1 << 12
"""How many leaves a reader remembers as proven in one signed tree (``_prove``)."""
_ROTATED_META: Final = "rotated_vkeys"  # ledger.keys.ROTATED_VKEYS_META (no import cycle)

_STRICT: contextvars.ContextVar[bool] = contextvars.ContextVar("memroot_strict", default=True)


def default_strict() -> bool:
    """Return whether a ``Ledger`` opened without ``strict=`` reads strictly (True by default)."""
    return _STRICT.get()


@contextlib.contextmanager
def relaxed() -> Iterator[None]:
    """Open ledgers non-strict by default inside the block (the verifier reads to report)."""
    token = _STRICT.set(False)
    try:
        yield
    finally:
        _STRICT.reset(token)


@dataclass(frozen=True, slots=True)
class SignedHead:
    """A branch's head as checked against its newest signed checkpoint."""

    branch: str
    no: int
    size: int
    root: bytes
    note: str


@dataclass(frozen=True, slots=True)
class CheckedRow:
    """One entry and its content, both checked: what ``Ledger.read`` returns."""

    entry: Entry
    content: str | None
    erased_by: int | None


def range_root(
    size: int,
    start: int,
    leaves: Sequence[bytes],
    read: Callable[[Sequence[tuple[int, int]]], list[bytes]],
) -> bytes:
    """Return the RFC 9162 root of ``size`` leaves, where ``leaves`` are those at ``start``...

    Every complete subtree that lies outside ``[start, start + len(leaves))`` is taken from
    ``read`` (the stored nodes, one call); every node over the range is recomputed. The
    result equals a signed root only if each given leaf is at its position in that tree.

    A run that ends the tree (the entries appended since an earlier head) is folded onto
    the stored perfect subtrees left of it (``perfect_subtrees(start)``, one read): the same
    nodes the general walk reads there, and the same root.
    """
    if leaves and start > 0 and start + len(leaves) == size:
        need = merkle.perfect_subtrees(start)
        got = read(need)
        if len(got) != len(need) or any(len(h) != 32 for h in got):
            raise DecodeError("a stored tree node is not 32 bytes", step=5)
        edge = merkle.CompactRange.from_hashes(start, got)
        edge.append_many(leaves)
        return bytes(edge.root())
    return leaves_root(size, {start + i: leaf for i, leaf in enumerate(leaves)}, read)


def leaves_root(
    size: int,
    known: dict[int, bytes],
    read: Callable[[Sequence[tuple[int, int]]], list[bytes]],
) -> bytes:
    """Return the root of ``size`` leaves from the ``known`` leaves (position -> leaf hash).

    A multi-leaf inclusion proof: every complete subtree holding none of the known
    positions is read from the stored nodes (one ``read`` call), every subtree holding one
    is recomputed. O(k log n) for k scattered leaves, O(k + log n) for a contiguous run. The
    result equals a signed root only if every known leaf is at its position in that tree.
    """
    positions = sorted(known)
    if _N is not None and size >= 0 and (not positions or positions[0] >= 0):
        ids: list[tuple[int, int]] = _N.merkle_leaves_plan(size, positions)
        hashes = read(ids) if ids else []
        with contextlib.suppress(_N.Reject):  # a node not 32 bytes: the reference says so
            return bytes(
                _N.merkle_leaves_root(size, positions, [known[p] for p in positions], hashes)
            )
        return _leaves_root(size, known, positions, dict(zip(ids, hashes, strict=True)))
    need: list[tuple[int, int]] = []
    # A contiguous run (a strict read of consecutive entries): a subtree inside it is
    # recomputed from its leaves in one native call, not node by node.
    first, end = (positions[0], positions[-1] + 1) if positions else (0, 0)
    run = end - first == len(positions)

    def inside(lo: int, hi: int) -> bool:
        return run and first <= lo and hi <= end

    def holds(lo: int, hi: int) -> bool:
        i = bisect.bisect_left(positions, lo)
        return i < len(positions) and positions[i] < hi

    def plan(level: int, index: int) -> None:
        lo = index << level
        if not holds(lo, lo + (1 << level)):
            need.append((level, index))
        elif level > 0 and not inside(lo, lo + (1 << level)):
            plan(level - 1, 2 * index)
            plan(level - 1, 2 * index + 1)

    for level, index in merkle.perfect_subtrees(size):
        plan(level, index)
    return _leaves_root(
        size, known, positions, dict(zip(need, read(need), strict=True)) if need else {}
    )


def _leaves_root(
    size: int, known: dict[int, bytes], positions: list[int], got: dict[tuple[int, int], bytes]
) -> bytes:
    """``leaves_root`` from the subtrees its plan read (``got``); the reference's walk."""
    first, end = (positions[0], positions[-1] + 1) if positions else (0, 0)
    run = end - first == len(positions)

    def inside(lo: int, hi: int) -> bool:
        return run and first <= lo and hi <= end

    tops = merkle.perfect_subtrees(size)
    for h in got.values():
        if len(h) != 32:
            raise DecodeError("a stored tree node is not 32 bytes", step=5)

    def node(level: int, index: int) -> bytes:
        found = got.get((level, index))
        if found is not None:
            return found
        if level == 0:
            return known[index]
        lo = index << level
        if inside(lo, lo + (1 << level)):
            # RFC 9162: the root of 2^level leaves is the hash of that perfect subtree.
            whole = merkle.CompactRange()
            whole.append_many([known[i] for i in range(lo, lo + (1 << level))])
            return bytes(whole.root())
        return node_hash(node(level - 1, 2 * index), node(level - 1, 2 * index + 1))

    return merkle.root_from_subtrees([node(level, index) for level, index in tops])


def _fail(step: int, branch: str, seq: int | None, what: str, **kw: str | None) -> IntegrityError:
    where = f"branch {branch}" + (f" entry {seq}" if seq is not None else "")
    return IntegrityError(
        f"strict read refused: {where}: step {step}: {what} (run `memroot verify` for the full "
        "report; a read with strict=False reads it anyway)",
        branch=branch,
        seq=seq,
        step=step,
        expected=kw.get("expected"),
        actual=kw.get("actual"),
    )


def _past_head(branch: str, seq: int, size: int) -> IntegrityError:
    return _fail(
        2,
        branch,
        seq,
        f"an entry is stored at {seq}, past the branch head ({size} entries): inserted without "
        "the key",
    )


class _Keys:
    """The keys strict reads trust, with rotations applied as the verifier does (step 6).

    Root keys as the verifier learns them; writer keys from ``main``'s key entries
    (``keyset.load_key_set``), each authorized by a trusted root key's statement and proven
    in ``main``'s signed tree (``StrictReader._learn_writers``).
    """

    def __init__(self, verifiers: list[Verifier]) -> None:
        self.keys = {v.vkey(): v for v in verifiers}
        self.retired: dict[str, int] = {}
        self.keyset: KeySet | None = None  # the writer keys' source, once learned

    def signers(self, branch: str, size: int) -> list[Verifier]:
        """Return the root and writer keys that may sign ``branch``'s checkpoint of ``size``."""
        roots = self.valid(size if branch == CANONICAL_BRANCH else None)
        if self.keyset is None:
            return roots
        allowed = set(self.keyset.signers_at(branch, size))
        writers = [
            Verifier.from_vkey(w.vkey) for w in self.keyset.writers.values() if w.vkey in allowed
        ]
        return roots + writers

    def valid(self, size: int | None) -> list[Verifier]:
        return [
            v
            for k, v in self.keys.items()
            if size is None or k not in self.retired or size <= self.retired[k]
        ]


def _opens_with(note: str, verifiers: list[Verifier], origin: str) -> bool:
    try:
        open_checkpoint(note, verifiers, origin=origin)
    except (ProofError, DecodeError):
        return False
    return True


def _opens(note: str, keys: _Keys, size: int, origin: str) -> bool:
    try:
        open_checkpoint(note, keys.valid(size), origin=origin)
    except (ProofError, DecodeError):
        return False
    return True


class StrictReader:
    """The checks behind a strict ``Ledger``'s reads (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        origin: str,
        *,
        vkeys: tuple[str, ...] = (),
        trusted: TrustedState | None = None,
        own_from: Callable[[str], int | None] = lambda branch: None,
    ) -> None:
        """Check reads of ``store``.

        ``own_from(branch)`` is where this process's open write transaction started
        appending on the branch (its entries are not signed yet).
        """
        self.store = store
        self.origin = origin
        self.given = vkeys
        self.trusted = trusted
        self.own_from = own_from
        self._heads: dict[str, SignedHead] = {}
        self._leaves: dict[tuple[int, int], bytes] = {}
        self._keys: _Keys | None = None
        self._keys_marker: tuple[object, object] = (None, None)
        self._version: int | None = None  # the file's data_version the heads were checked at
        # (note text, origin, signers' vkeys) -> the checkpoint it opened to (``check_head``)
        self._opened: dict[tuple[str, str, tuple[str, ...]], Checkpoint] = {}
        # branch number -> (a signed root, {seq: leaf} proven in its tree) (``_prove``)
        self._proven: dict[int, tuple[bytes, dict[int, bytes]]] = {}
        # each branch's head as last checked before the file changed (``check_head``)
        self._before: dict[str, SignedHead] = {}
        # branch number -> (n, the perfect subtrees of the first n leaves) as a proof that
        # held computed them: the edge the next head's new entries fold onto (``_prove``)
        self._edges: dict[int, tuple[int, tuple[bytes, ...]]] = {}

    # -- heads ----------------------------------------------------------------------------------

    def _origin(self, branch: str) -> str:
        return self.origin if branch == CANONICAL_BRANCH else f"{self.origin}/branch/{branch}"

    def _initial_keys(self) -> list[Verifier]:
        log = self.trusted.get(self.origin) if self.trusted is not None else None
        if self.given:
            texts = list(self.given)
        elif log is not None:
            texts = list(log.vkeys)
        else:
            texts = self._genesis_keys()
        out = []
        for t in texts:
            try:
                out.append(Verifier.from_vkey(t))
            except DecodeError as e:
                raise _fail(6, CANONICAL_BRANCH, None, f"a trusted key is malformed: {e}") from e
        return out

    def _genesis_keys(self) -> list[str]:
        try:
            row = self.store.entry_row(self.store.branch(CANONICAL_BRANCH).no, 0)
            keys = Entry.from_bytes(bytes(row.data)).body.get("keys", [])
        except (NotFoundError, DecodeError) as e:
            raise _fail(1, CANONICAL_BRANCH, 0, "the genesis entry does not read") from e
        return [str(k) for k in keys] if isinstance(keys, list) else []

    def keys(self) -> _Keys:
        """Return the trusted keys, learning signed-off rotations from main's checkpoints.

        Learned again when the key cache changed (another process's key operation).
        """
        marker = (self.store.meta(KEY_ENTRIES_META), self.store.meta(_ROTATED_META))
        if self._keys is None or marker != self._keys_marker:
            keys = _Keys(self._initial_keys())
            raw = marker[1]
            claimed: list[str] = []
            if isinstance(raw, str):
                with contextlib.suppress(ValueError, TypeError):
                    claimed = [str(k) for k in json.loads(raw)]
            if [c for c in claimed if c not in keys.keys]:
                self._learn_rotations(keys, claimed)
            if marker[0] is not None:
                self._learn_writers(keys)
            self._keys = keys
            self._keys_marker = marker
        return self._keys

    def _learn_writers(self, keys: _Keys) -> None:
        """Learn the writer keys: each KEY_ADD's root must be trusted, each entry proven.

        The key entries the cache lists are folded (their statements checked against the
        root chain they name), the root that signed each statement must be one these reads
        trust, and every key entry is proven in ``main``'s newest checkpoint, itself opened
        with the keys learned. A cache that omits a key entry is found by ``memroot verify``
        (step 5); one that lists a forged one fails here.

        Raises:
            IntegrityError: step 6, naming what does not hold.
        """
        try:
            ks, seqs = load_key_set(self.store, self.origin)
        except (KeyEntryError, DecodeError, NotFoundError) as e:
            raise _fail(6, CANONICAL_BRANCH, None, f"the key entries do not check: {e}") from e
        for w in ks.writers.values():
            root = next((r for r in reversed(ks.roots) if r.since < w.added_by), ks.roots[0])
            if root.vkey not in keys.keys:
                raise _fail(
                    6,
                    CANONICAL_BRANCH,
                    w.added_by,
                    f"writer key {w.name!r} was authorized by {root.vkey}, not a trusted root key",
                )
        main = self.store.branch(CANONICAL_BRANCH)
        last = self.store.latest_checkpoint(main.no)
        if last is None or not seqs:
            keys.keyset = ks
            return
        size, root_hash, note = last
        keys.keyset = ks
        if not _opens_with(note, keys.signers(CANONICAL_BRANCH, size), self.origin):
            return  # the head check reports the head no trusted key signed
        covered = [s for s in seqs if s < size]
        leaves: dict[int, bytes] = {
            r.seq: leaf_hash(bytes(r.data))
            for s in covered
            for r in self.store.iter_entry_rows(main.no, s, s + 1)
        }
        if sorted(leaves) != covered or (
            covered
            and leaves_root(size, leaves, lambda ids: self.store.read_nodes(main.no, ids))
            != bytes(root_hash)
        ):
            raise _fail(
                6,
                CANONICAL_BRANCH,
                covered[-1] if covered else None,
                "a key entry is not in main's signed tree (forged or moved)",
            )

    def _learn_rotations(self, keys: _Keys, claimed: list[str]) -> None:
        """Trust a rotated key only as step 6 does: its KEY_ROTATE was signed off by the old key.

        Main's stored checkpoints are walked by size; the first one that only a claimed key
        verifies must follow a checkpoint that the old key signed and that covers a KEY_ROTATE
        naming both keys (found among the entries that checkpoint added, each proven in it).
        """
        main = self.store.branch(CANONICAL_BRANCH)
        origin = self.origin
        prev_size = 0
        last: tuple[int, bytes, str] | None = None
        for size, root, note in self.store.checkpoints(main.no):
            if not _opens(note, keys, size, origin) and (
                last is None
                or not self._rotation_before(keys, claimed, main.no, prev_size, last)
                or not _opens(note, keys, size, origin)
            ):
                continue  # the head check reports a head that no trusted key signed
            if last is not None:
                prev_size = last[0]
            last = (size, bytes(root), note)

    def _rotation_before(
        self,
        keys: _Keys,
        claimed: list[str],
        main_no: int,
        lo: int,
        signoff: tuple[int, bytes, str],
    ) -> bool:
        size, root, note = signoff
        if size <= lo:
            return False
        rows = list(self.store.iter_entry_rows(main_no, lo, size))
        if [r.seq for r in rows] != list(range(lo, size)):
            return False
        leaves = [leaf_hash(bytes(r.data)) for r in rows]
        if range_root(size, lo, leaves, lambda ids: self.store.read_nodes(main_no, ids)) != root:
            return False
        for r in reversed(rows):
            try:
                e = Entry.from_bytes(bytes(r.data))
            except DecodeError:
                return False
            payload = e.body.get("payload")
            if e.type != OpType.KEY_ROTATE or not isinstance(payload, dict):
                continue
            new, old = payload.get("new_vkey"), payload.get("old_vkey")
            old_key = keys.keys.get(old) if isinstance(old, str) else None
            if not isinstance(new, str) or new not in claimed or old_key is None:
                continue
            try:
                open_checkpoint(note, [old_key], origin=self.origin)
                new_key = Verifier.from_vkey(new)
            except (ProofError, DecodeError):
                continue
            keys.keys[new_key.vkey()] = new_key
            keys.retired[old_key.vkey()] = size
            return True
        return False

    def head(self, branch: str, *, need: int = 0) -> SignedHead:
        """Return the branch's checked head.

        It is checked again when ``need`` entries are asked for and the cached head is
        smaller (another writer appended).
        """
        self._file_changed()
        cached = self._heads.get(branch)
        if cached is not None:
            if cached.size >= need:
                return cached
            # A store with no data_version (PostgreSQL): the head is checked again because a
            # read needs entries past it; it is where the new entries begin, as on a file.
            self._before[branch] = cached
        return self.check_head(branch)

    def _file_changed(self) -> None:
        """Forget every checked head when another connection committed since they were checked.

        A long-lived handle (a LangGraph saver in a graph process, an MCP server) must not
        serve on the strength of a head it checked before someone changed the file under it:
        SQLite's ``data_version`` moves on every other connection's commit, never on this
        connection's own. (PostgreSQL has no such counter: a head is checked again when a
        read needs entries past it.)
        """
        version = self.store.data_version()
        if version != self._version:
            self._before.update(self._heads)
            self._heads.clear()
            self._version = version

    def forget(self, branch: str | None = None) -> None:
        """Drop the cached head of a branch (or every branch): the next read checks again."""
        if branch is None:
            self._heads.clear()
        else:
            self._heads.pop(branch, None)

    def trust_head(self, head: SignedHead) -> None:
        """Remember a head this process has just signed (its seal), so reads need no re-check."""
        self._heads[head.branch] = head

    def check_head(self, branch: str) -> SignedHead:
        """Check the stored head of ``branch`` against its newest signed checkpoint.

        Raises:
            IntegrityError: naming the step: 6 (no checkpoint, bad signature, or entries no
                signed checkpoint covers), 5 (size or root disagree with the stored tree),
                3 (the stored head is not the last entry), 10 (older than, or inconsistent
                with, the trusted state).
            NotFoundError: if there is no such branch.
        """
        row = self.store.branch(branch)
        last = self.store.latest_checkpoint(row.no)
        if last is None:
            raise _fail(6, branch, None, "no signed checkpoint covers this branch")
        size, root, note = last
        signers = self.keys().signers(branch, size)
        origin = self._origin(branch)
        # A note is opened once per reader: the same text, origin and keys give the same
        # answer (an edited note is other text, opened and checked again).
        opened = (note, origin, tuple(v.vkey() for v in signers))
        signed = self._opened.get(opened)
        if signed is None:
            try:
                signed = open_checkpoint(note, signers, origin=origin).checkpoint
            except (ProofError, DecodeError) as e:
                raise _fail(
                    6,
                    branch,
                    size - 1 if size else None,
                    f"the newest checkpoint does not verify: {e}",
                ) from e
            if len(self._opened) >= _OPENED_MAX:
                self._opened.clear()
            self._opened[opened] = signed
        if signed.size != size or signed.root != bytes(root):
            raise _fail(5, branch, size - 1, "the stored checkpoint index disagrees with its note")
        own = self.own_from(branch)
        if size < row.size and own != size:
            raise _fail(
                6,
                branch,
                size,
                f"entries {size}..{row.size - 1} are covered by no signed checkpoint (unsigned "
                "tail)",
                expected=str(row.size),
                actual=str(size),
            )
        if size > row.size:
            raise _fail(
                5,
                branch,
                row.size,
                "the branch is shorter than its signed checkpoint (truncated)",
                expected=str(size),
                actual=str(row.size),
            )
        head = SignedHead(branch, row.no, size, bytes(root), note)
        if own is None and self._since_before(head, bytes(row.head)):
            self._check_trusted(head)
            self._heads[branch] = head
            return head
        if own is None:
            # An entry stored past the head (agmi T5) is never read by a read that stops at
            # the head, so nothing would report it: it is a finding here.
            for past in self.store.iter_entry_rows(row.no, row.size, None, chunk=1):
                raise _past_head(branch, past.seq, row.size)
        if size:
            # The last entry proven in the signed tree, and the stored head naming it.
            last_row = self._row(head, size - 1)
            leaf = leaf_hash(bytes(last_row.data))
            self._prove(head, size - 1, [leaf])
            if own is None and bytes(row.head) != leaf:
                raise _fail(3, branch, None, "the stored chain head is not the last entry")
        self._check_trusted(head)
        self._heads[branch] = head
        return head

    def _since_before(self, head: SignedHead, stored_head: bytes) -> bool:
        """``check_head``'s entry checks in one read, when this reader checked the branch before.

        The rows from the entry at the head checked before (a few: another connection's
        commit) to the new head, and one more slot, in one statement: an entry stored past
        the head is refused (step 2), the rows' leaves are proven together in the new signed
        tree (step 5, remembered for the strict read of the same entries that follows:
        ``strict_rows.appended_since``) and the stored chain head must be the last one's
        (step 3). Returns False, having refused nothing, when that does not apply (no head
        checked before, another branch row, a long way behind, an entry missing or a range
        that does not prove): ``check_head`` then checks the head as on a first read, with
        the same findings in the same order as ever.

        Raises:
            IntegrityError: step 2 (an entry past the head), 3 (the stored chain head).
        """
        prev = self._before.get(head.branch)
        size = head.size
        if prev is None or prev.no != head.no or not 0 < prev.size <= size:
            return False
        lo = prev.size - 1
        if size - lo > _CHUNK:
            return False
        rows = list(self.store.iter_entry_rows(head.no, lo, None, chunk=size - lo + 1))
        past = [r for r in rows if r.seq >= size]
        if past:
            raise _past_head(head.branch, past[0].seq, size)
        if [r.seq for r in rows] != list(range(lo, size)):
            return False  # an entry missing: the first-read path names it
        # Decoded (natively, with the link to the entry before when it is known) for the
        # strict read of the same entries that follows (``rows``); only their leaves here.
        before = self._leaves.get((head.no, lo - 1)) if lo > 0 else None
        decoded = None
        if lo == 0 or before is not None:
            decoded = self._decode_chunk(head.branch, lo, rows, before)
        leaves = decoded[1] if decoded is not None else [leaf_hash(bytes(r.data)) for r in rows]
        try:
            self._prove(head, lo, leaves)
        except IntegrityError:
            return False  # the first-read path proves the last entry alone, as ever
        if stored_head != leaves[-1]:
            raise _fail(3, head.branch, None, "the stored chain head is not the last entry")
        memo = self.store.read_memo()
        if decoded is not None and memo is not None:
            memo["strict", head.no, head.root, lo, size] = (before, rows, decoded)
        return True

    def _check_trusted(self, head: SignedHead) -> None:
        if self.trusted is None:
            return
        log = self.trusted.get(self._origin(head.branch))
        if log is None or log.size == 0:
            return
        if log.size > head.size:
            raise _fail(
                10,
                head.branch,
                head.size,
                f"rollback: a checkpoint of size {log.size} was trusted before, the ledger has "
                f"{head.size} signed entries",
                expected=str(log.size),
                actual=str(head.size),
            )
        if log.size == head.size:
            ok = log.root == head.root
        else:
            try:
                proof = merkle.consistency_proof(log.size, head.size, self._reader(head.no))
                merkle.verify_consistency(log.size, head.size, proof, log.root, head.root)
                ok = True
            except IntegrityError:
                ok = False
        if not ok:
            raise _fail(
                10,
                head.branch,
                log.size - 1,
                "history differs from the checkpoint trusted before (rewritten or forked)",
            )

    def _reader(self, no: int) -> Callable[[Sequence[tuple[int, int]]], list[bytes]]:
        return lambda ids: self.store.read_nodes(no, ids)

    # -- rows ------------------------------------------------------------------------------------

    def _row(self, head: SignedHead, seq: int) -> EntryRow:
        try:
            return self.store.entry_row(head.no, seq)
        except NotFoundError as e:
            raise _fail(2, head.branch, seq, "the entry is missing from the signed tree") from e

    def _prove(self, head: SignedHead, start: int, leaves: Sequence[bytes]) -> None:
        """(5) the leaves at ``start``... are in the signed tree of ``head``; cache them.

        Leaves already proven at these positions in the tree of the same signed root are not
        proven again (the same leaves, positions and root give the same answer).
        """
        if leaves and self._all_proven(head, {start + i: leaf for i, leaf in enumerate(leaves)}):
            return
        if self._prove_on_edge(head, start, leaves):
            return
        try:
            got = range_root(head.size, start, leaves, self._reader(head.no))
        except (IntegrityError, KeyError) as e:
            raise _fail(5, head.branch, start, "the stored tree cannot prove the entry") from e
        except Exception as e:  # a missing node: StorageError from read_nodes
            raise _fail(
                5, head.branch, start, f"the stored tree cannot prove the entry: {e}"
            ) from e
        if got != head.root:
            raise _fail(
                5,
                head.branch,
                start if len(leaves) == 1 else None,
                "entry not in the signed tree (edited, moved, inserted or replayed)"
                if len(leaves) == 1
                else f"entries {start}..{start + len(leaves) - 1} are not the signed tree's",
            )
        self._proven_now(head, start, leaves)

    def _proven_now(self, head: SignedHead, start: int, leaves: Sequence[bytes]) -> None:
        """Remember ``leaves`` at ``start``... as proven in the tree of ``head``."""
        if len(self._leaves) > _LEAF_CACHE_MAX:
            self._leaves.clear()
        for i, leaf in enumerate(leaves):
            self._leaves[(head.no, start + i)] = leaf
        self._proven_at(head, {start + i: leaf for i, leaf in enumerate(leaves)})

    def _all_proven(self, head: SignedHead, leaves: dict[int, bytes]) -> bool:
        """Whether each of ``leaves`` (seq -> leaf hash) was proven there in ``head``'s tree."""
        at = self._proven.get(head.no)
        return (
            at is not None
            and at[0] == head.root
            and all(at[1].get(s) == leaf for s, leaf in leaves.items())
        )

    def _proven_at(self, head: SignedHead, leaves: dict[int, bytes]) -> None:
        """Remember ``leaves`` (seq -> leaf hash) as proven in the tree of ``head``.

        A later proof of the same leaves at the same positions under the same signed root
        (``_prove``, ``many``) has its answer already.
        """
        at = self._proven.get(head.no)
        if at is None or at[0] != head.root or len(at[1]) > _PROVEN_MAX:
            at = self._proven[head.no] = (head.root, {})
        at[1].update(leaves)

    def _prove_on_edge(self, head: SignedHead, start: int, leaves: Sequence[bytes]) -> bool:
        """``_prove`` of a run that ends the tree, folded onto an edge a proof gave before.

        A run ending the tree of ``head`` (the entries another connection appended, from the
        head checked before) needs the perfect subtrees left of it. The last proof of such a
        run computed them for its own head's first ``size - 1`` leaves (its edge folded
        with all its leaves but the last), and they are authentic: folded with that last
        leaf they gave its signed root. So they are not read again. A kept edge whose fold
        does not give ``head``'s root (another tree's) is dropped and the stored nodes are
        folded instead. True when a fold gives the root (the run is proven, and the edge at
        this head is kept for the next); False, having refused nothing, when the stored
        nodes do not either: ``_prove`` then proves the run as ever, with the same findings.
        """
        if not leaves or start == 0 or start + len(leaves) != head.size:
            return False
        known = self._edges.pop(head.no, None)
        edges: list[tuple[bytes, ...] | None] = [None]  # None: the stored nodes
        if known is not None and known[0] == start:
            edges.insert(0, known[1])
        for edge in edges:
            if edge is None:
                try:
                    edge = tuple(self.store.read_nodes(head.no, merkle.perfect_subtrees(start)))
                except Exception:  # a missing node: the stored-nodes path names it
                    return False
            try:
                grown = merkle.CompactRange.from_hashes(start, edge)
                grown.append_many(leaves[:-1])
                at_last = grown.hashes
                grown.append_many(leaves[-1:])
            except ValueError:
                return False  # a node that is not 32 bytes: the stored-nodes path names it
            if bytes(grown.root()) == head.root:
                self._edges[head.no] = (head.size - 1, at_last)
                self._proven_now(head, start, leaves)
                return True
        return False

    def _decode(self, head: SignedHead, seq: int, row: EntryRow, prev: bytes | None) -> Entry:
        branch = head.branch
        try:
            entry = Entry.from_bytes(bytes(row.data))
        except DecodeError as e:
            raise _fail(1, branch, seq, "the entry does not decode strictly") from e
        if entry.seq != seq or entry.branch != branch:
            raise _fail(2, branch, seq, "the entry records another position (replayed or moved)")
        if (seq == 0) != (entry.kind is Kind.GENESIS):
            raise _fail(3, branch, seq, "a genesis entry must be exactly entry 0")
        if seq == 0 and branch == CANONICAL_BRANCH and entry.prev != ZERO_HASH:
            raise _fail(3, branch, seq, "the canonical genesis must link to zeros")
        if prev is not None and entry.prev != prev:
            raise _fail(3, branch, seq, "prev does not match the hash of the entry before")
        return entry

    def rows(
        self, branch: str, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[EntryRow, Entry]]:
        """Yield checked ``(row, entry)`` pairs with ``start <= seq < stop`` (default: all)."""
        stored = self.store.branch(branch)
        want = stored.size if stop is None else min(stop, stored.size)
        own = self.own_from(branch)
        signed_need = want if own is None else min(want, own)
        head = self.head(branch, need=signed_need)
        if own is None:
            want = min(want, head.size)
        seq = max(start, 0)
        prev: bytes | None = None
        if seq > 0 and seq < want:
            prev = self._leaf(head, seq - 1)
        memo = self.store.read_memo()
        while seq < want:
            end = min(seq + _CHUNK, want)
            signed_end = min(end, head.size)
            kept = (
                None if memo is None else memo.pop(("strict", head.no, head.root, seq, end), None)
            )
            if kept is not None and kept[0] == prev:
                # The head check read and decoded these rows in this transaction (nothing
                # written since: ``read_memo``), with the same link before: the same checks.
                rows, checked = kept[1], kept[2]
            else:
                rows = list(self.store.iter_entry_rows(head.no, seq, end))
                for i, r in enumerate(rows):
                    if r.seq != seq + i:
                        raise _fail(2, branch, seq + i, "the entry is missing from the signed tree")
                if len(rows) != end - seq:
                    raise _fail(
                        2, branch, seq + len(rows), "the entry is missing from the signed tree"
                    )
                checked = self._decode_chunk(branch, seq, rows, prev)
            if checked is not None:  # (1)-(3) of the whole chunk: natively, or by the head check
                entries, leaves = checked
                if signed_end > seq:
                    self._prove(head, seq, leaves[: signed_end - seq])
                yield from zip(rows, entries, strict=True)
                prev = leaves[-1] if leaves else prev
                seq = end
                continue
            leaves = [leaf_hash(bytes(r.data)) for r in rows]
            if signed_end > seq:
                self._prove(head, seq, leaves[: signed_end - seq])
            for r, leaf in zip(rows, leaves, strict=True):
                entry = self._decode(head, r.seq, r, prev)
                prev = leaf
                yield r, entry
            seq = end

    @staticmethod
    def _decode_chunk(
        branch: str, start: int, rows: list[EntryRow], prev: bytes | None
    ) -> tuple[list[Entry], list[bytes]] | None:
        """``(entries, leaves)`` of a chunk checked by the native core, as ``_decode`` each.

        None without the native core, or when it refuses a row (the reference loop then
        re-checks the chunk and raises its own error at that row).
        """
        if _N is None:
            return None
        try:
            return _N.decode_chunk(rows, branch, start, prev, CANONICAL_BRANCH, Entry, _KINDS)
        except _N.Reject:
            return None

    def _leaf(self, head: SignedHead, seq: int) -> bytes:
        cached = self._leaves.get((head.no, seq))
        if cached is not None:
            return cached
        leaf = leaf_hash(bytes(self._row(head, seq).data))
        if seq < head.size:
            self._prove(head, seq, [leaf])
        return leaf

    def row(self, branch: str, seq: int) -> tuple[EntryRow, Entry]:
        """Return one checked ``(row, entry)``.

        Raises:
            NotFoundError: if the branch has no entry ``seq``.
            IntegrityError: if a check fails.
        """
        for pair in self.rows(branch, seq, seq + 1):
            return pair
        raise NotFoundError(f"no entry {seq} on branch {branch!r}")

    def many(
        self, branch: str, seqs: Sequence[int], *, links: bool = True
    ) -> dict[int, tuple[EntryRow, Entry]]:
        """Return checked ``(row, entry)`` of scattered entries, proven together.

        One read of the rows (with each one's predecessor, for its prev link, unless
        ``links`` is off: the prev is inside the proven bytes either way), one multi-leaf
        proof against the signed root: O(k log n) however far apart the k entries are.

        Raises:
            NotFoundError: if the branch has no entry at one of ``seqs``.
            IntegrityError: if a check fails (naming that entry).
        """
        wanted = sorted(set(seqs))
        if not wanted:
            return {}
        stored = self.store.branch(branch)
        if wanted[0] < 0 or wanted[-1] >= stored.size:
            bad = wanted[0] if wanted[0] < 0 else wanted[-1]
            raise NotFoundError(f"no entry {bad} on branch {branch!r}")
        own = self.own_from(branch)
        head = self.head(branch, need=wanted[-1] + 1 if own is None else min(wanted[-1] + 1, own))
        if own is None and wanted[-1] >= head.size:
            raise _fail(6, branch, head.size, "the entry is covered by no signed checkpoint")
        with_prev = sorted(set(wanted) | {s - 1 for s in wanted if s > 0 and links})
        rows = {r.seq: r for r in self.store.entry_rows(head.no, with_prev)}
        for s in with_prev:
            if s not in rows:
                raise _fail(2, branch, s, "the entry is missing from the signed tree")
        leaves: dict[int, bytes] = {s: leaf_hash(bytes(rows[s].data)) for s in with_prev}
        signed = {s: h for s, h in leaves.items() if s < head.size}
        if signed and not self._all_proven(head, signed):
            try:
                got = leaves_root(head.size, signed, self._reader(head.no))
            except (IntegrityError, KeyError) as e:
                raise _fail(5, branch, None, "the stored tree cannot prove the entries") from e
            except Exception as e:  # a missing node: StorageError from read_nodes
                raise _fail(
                    5, branch, None, f"the stored tree cannot prove the entries: {e}"
                ) from e
            if got != head.root:
                # Name the entry: prove each alone (only on this failure path).
                for s in sorted(signed):
                    self._prove(head, s, [signed[s]])
            self._proven_at(head, signed)
        out: dict[int, tuple[EntryRow, Entry]] = {}
        for s in wanted:
            prev = leaves.get(s - 1) if s > 0 else None
            out[s] = (rows[s], self._decode(head, s, rows[s], prev))
        return out

    def content(self, branch: str, row: EntryRow, entry: Entry) -> str | None:
        """(4) Return the checked content of an entry: None for an erased event or no event.

        Raises:
            IntegrityError: step 4, if the stored content is not what the entry commits to,
                was removed without its TOMBSTONE, or sits beside an entry that is no event.
        """
        seq = row.seq
        planted = (row.content, row.salt, row.digest, row.erased_by)
        if entry.kind is not Kind.EVENT:
            if any(x is not None for x in planted):
                raise _fail(4, branch, seq, "an entry that is not an event has stored content")
            return None
        event_id = entry.body.get("id")
        if row.content is None:
            by = row.erased_by
            if row.salt is not None or type(by) is not int or by <= seq:
                raise _fail(
                    4, branch, seq, "the event's content is missing and no TOMBSTONE erased it"
                )
            try:
                _, tomb = self.row(branch, by)
            except NotFoundError as e:
                raise _fail(
                    4, branch, seq, "the event's content is missing and no TOMBSTONE erased it"
                ) from e
            payload = tomb.body.get("payload")
            target = payload.get("target_event_id") if isinstance(payload, dict) else None
            if tomb.type != OpType.TOMBSTONE or target != event_id:
                raise _fail(
                    4, branch, seq, "the event's content is missing and no TOMBSTONE erased it"
                )
            return None
        if row.erased_by is not None:
            raise _fail(
                4, branch, seq, "the event is marked erased but its content is still stored"
            )
        salt = bytes(row.salt) if row.salt is not None else b""
        data = bytes(row.content)
        if len(salt) != 32 or content_commitment(salt, data) != entry.body.get(
            "content_commitment"
        ):
            raise _fail(
                4, branch, seq, "the content does not match the entry's commitment (edited)"
            )
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:  # pragma: no cover - committed content is UTF-8
            raise _fail(4, branch, seq, "the content is not UTF-8") from e

    def checked(self, branch: str, seq: int) -> CheckedRow:
        """Return entry ``seq`` with its content, both checked."""
        row, entry = self.row(branch, seq)
        return CheckedRow(entry, self.content(branch, row, entry), row.erased_by)
