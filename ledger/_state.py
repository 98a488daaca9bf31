"""What every part of the ``Ledger`` shares: its fields, constants and in-memory records.

``Ledger`` (``memroot.ledger.ledger``) is composed of one mixin per idea, each in a module
of its own and each built on the one below: ``_plumbing`` (transactions, the derived-state
cache, catch-up and folding through the hooks), ``_reading`` (entries, strict reads,
roots and proofs), ``_sealing`` (the key, the seal and checkpoints) and ``_appending``.
``_LedgerState`` declares the fields ``Ledger.__init__`` sets, so each mixin is checked
against them; it imports nothing of the ledger's mixins.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol, overload

import apsw

from memroot.ledger import merkle
from memroot.ledger.backends.pg import StoreView
from memroot.ledger.backends.store import BranchRow, Store
from memroot.ledger.entries import CANONICAL_BRANCH, MAX_BODY_BYTES, Entry, Kind, OpInput
from memroot.ledger.errors import RefusedError
from memroot.ledger.hashing import EntryHash
from memroot.ledger.keyset import KeySet
from memroot.ledger.note import SignedCheckpoint
from memroot.ledger.signing import Signer
from memroot.ledger.strict import SignedHead, StrictReader
from memroot.ledger.vocab import OpType

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
_KEEP_TYPES: Final = frozenset(
    {
        OpType.SNAPSHOT.value,
        OpType.KEY_ROTATE.value,
        OpType.KEY_ADD.value,
        OpType.KEY_REVOKE.value,
        "GENESIS",
    }
)
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


class Appended(NamedTuple):
    """What an append wrote: where the entry sits and what identifies it (immutable)."""

    branch: str
    seq: int
    entry_hash: EntryHash
    id: str
    kind: Kind
    type: str


_HASH: Final = 32
_ID_TEXT: Final = 36
"""Bytes of a canonical UUID's text (``8-4-4-4-12``, ASCII)."""


@dataclass(frozen=True, slots=True)
class PackedEvents:
    """A run of events the native core built with no object an event (no hooks installed).

    ``leaves`` holds their leaf hashes and ``ids`` their ids' texts, end to end in seq order
    from ``start`` (``native.build_events(pack=True)``); ``at`` makes the ``Appended`` of one.

    Raises:
        ValueError: if ``leaves`` and ``ids`` do not hold the same number of events.
    """

    branch: str
    start: int
    leaves: bytes
    ids: bytes

    def __post_init__(self) -> None:
        if len(self.leaves) % _HASH or len(self.ids) != len(self.leaves) // _HASH * _ID_TEXT:
            raise ValueError(
                f"{len(self.leaves)} bytes of leaf hashes for {len(self.ids)} bytes of ids"
            )

    def __len__(self) -> int:
        return len(self.leaves) // _HASH

    def at(self, i: int) -> Appended:
        """Return the ``Appended`` of the run's event ``i`` (0 <= i < len)."""
        return Appended(
            self.branch,
            self.start + i,
            EntryHash(self.leaves[_HASH * i : _HASH * (i + 1)]),
            self.ids[_ID_TEXT * i : _ID_TEXT * (i + 1)].decode("ascii"),
            Kind.EVENT,
            "EVENT",
        )


class AppendedRun(Sequence[Appended]):
    """What one ``append_batch`` wrote, in order: a read-only sequence of ``Appended``.

    Kept in parts: lists of ``Appended``, and ``PackedEvents`` whose ``Appended`` are made
    as they are read (a batched append without hooks makes no object an event, and most
    callers of one never read them: BENCHMARKS.md, ``append2``). Equal to any sequence of
    the same ``Appended`` (a list included).
    """

    __slots__ = ("_ends", "_parts")

    def __init__(self, parts: Iterable[list[Appended] | PackedEvents]) -> None:
        self._parts = [part for part in parts if len(part)]
        self._ends: list[int] = list(itertools.accumulate(map(len, self._parts)))

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, i: int) -> Appended: ...

    @overload
    def __getitem__(self, i: slice) -> list[Appended]: ...

    def __getitem__(self, i: int | slice) -> Appended | list[Appended]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} of {n} appended entries")
        p = bisect.bisect_right(self._ends, i)
        part = self._parts[p]
        off = i - (self._ends[p - 1] if p else 0)
        return part[off] if isinstance(part, list) else part.at(off)

    def __iter__(self) -> Iterator[Appended]:
        for part in self._parts:
            if isinstance(part, list):
                yield from part
            else:
                yield from map(part.at, range(len(part)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"AppendedRun({list(self)!r})"


@dataclass(slots=True)
class _Seal:
    """A branch grown by the open write transaction: what its seal must check and sign."""

    start_size: int
    start_root: bytes
    keep: bool = False
    written: list[Any] | None = field(default_factory=list)
    """The ``entries`` row ``(k, hash, data, digest, salt, content)`` of each entry the
    transaction appended, in seq order from ``start_size`` (``_Appending.own_rows`` reads
    ``data`` and ``content``; the rows are kept as inserted, not copied entry by entry: a
    tuple, or packed into one byte string, ``store.pack_entry_row``); None once it erased
    content (not tracked)."""


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


def _copy(compact: merkle.CompactRange) -> merkle.CompactRange:
    return merkle.CompactRange.from_hashes(compact.size, compact.hashes)


def _check_size(size: int, have: int) -> None:
    if not 0 <= size <= have:
        raise RefusedError(f"size {size} is outside the tree (it has {have} entries)")


def _uuid_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace("-", ""))


class _HookLike(Protocol):
    """An ``AppendHook`` as the mixins call it (``memroot.ledger.ledger.AppendHook``).

    The mixins pass the ``Ledger`` they are part of; the public protocol, in the module that
    defines ``Ledger``, names that type.
    """

    def install(self, db: apsw.Connection) -> None:
        """Create the hook's tables in the derived-state database."""

    def apply(
        self, db: apsw.Connection, ledger: Any, entry: Entry, content: str | None
    ) -> Sequence[OpInput]:
        """Fold one entry into the derived state; return follow-up operations."""


class _AppendCheckLike(Protocol):
    """An ``AppendCheck`` as the mixins call it (``memroot.ledger.ledger.AppendCheck``)."""

    def check_head(self, ledger: Any, row: BranchRow) -> None:
        """Refuse (raise) to append onto the branch head ``row``, or return."""


class _LedgerState:
    """The fields of a ``Ledger`` (set by ``Ledger.__init__``) that its mixins share."""

    store: Store
    derived: Store
    path: Path
    key_path: Path
    hooks: Sequence[_HookLike]
    strict: bool
    ledger_id: str
    origin: str
    snapshot_every: int
    _applied: dict[str, tuple[int, bytes]] | None
    _applied_version: int | None
    _replaying: bool
    _catching_up: bool
    _key_given: bool
    _signer: Signer | None
    _key_checked: Signer | None
    _signer_vkey: tuple[Signer, str] | None
    _key_cache: tuple[object, KeySet, list[int]] | None
    _heads: dict[str, _Head]
    _branch_nos: dict[str, int]
    _txn: dict[str, _Seal]
    _sealed: list[SignedHead]
    _seal_known: dict[int, _SealState]
    _seal_next: dict[int, _SealState]
    _seal_token: tuple[int, int] | None
    _seal_version: int | None
    _sealed_heads: frozenset[str]
    _sealing_heads: frozenset[str]
    _publish_pending: bool
    _forking: bool
    _batch_events: dict[bytes, int]
    _reader_checks: StrictReader
    _view: StoreView

    def _append_checks(self) -> Sequence[_AppendCheckLike]:
        """Return the checks of a head loaded for appending (``Ledger`` holds them).

        Raises:
            NotImplementedError: always: ``Ledger`` defines it.
        """
        raise NotImplementedError

    def _published(self, signed: SignedCheckpoint) -> SignedCheckpoint:
        """Hand a committed checkpoint to the commit observers (``Ledger`` tells them).

        Raises:
            NotImplementedError: always: ``Ledger`` defines it.
        """
        raise NotImplementedError
