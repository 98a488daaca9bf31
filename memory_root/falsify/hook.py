"""``FalsifyHook``: the falsification layer's ``AppendHook`` (SPEC 7).

Inside every append transaction it keeps the dependency index and the states, and refuses
(writing nothing) a state operation on an unknown item, a falsification of a falsified item,
a restore of a live item, a cascade from a live item, a bound of zero, or a ``CASCADE`` whose
lists are not what the cascade gives. Install it after ``MemoryHook`` (which keeps objects'
``state`` column) and before ``RootsHook``. Entries appended without it are folded in later
(``catch_up``), by the same rules (``_core.FalsifyCore``). A memory object's state operation
with evidence is decided in its own view, read from the memory model's gated bookkeeping in
the same file, so ``catch_up`` first brings the memory model up to the same entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import apsw

from memroot.ledger.entries import Entry, Kind, OpInput
from memroot.ledger.errors import StorageError, ValidationError
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType
from memroot.memory_root.falsify import _core, _fold_cache
from memroot.memory_root.falsify._core import FalsifyCore, ledger_core, set_head
from memroot.memory_root.falsify.cascade import Plan
from memroot.memory_root.falsify.checked import check_item_states
from memroot.memory_root.falsify.checked_deps import check_index
from memroot.memory_root.falsify.deps import STATE_OPS
from memroot.projections import tables
from memroot.projections.hook import catch_up as memory_catch_up
from memroot.projections.registry import Registry, default_registry

__all__ = ["FalsifyHook"]

# Plain strings: comparing with an enum member goes through the enum's descriptor.
_CASCADE: Final = OpType.CASCADE.value
_SNAPSHOT: Final = OpType.SNAPSHOT.value


def _nothing() -> None:
    """Nothing to do before a commit: every batch wrote its heads at its end."""


class FalsifyHook:
    """The ``AppendHook`` of falsification (see the module docstring)."""

    def __init__(self, registry: Registry | None = None) -> None:
        """Use ``registry``'s projections (default: built-ins and entry points).

        They say what each root's projections read, and recompute re-snapshots.

        Raises:
            TypeError, ValueError, ImportError: if a projection plugin cannot be loaded.
        """
        self.registry = registry if registry is not None else default_registry()
        self._cores: dict[int, FalsifyCore] = {}
        self._memo: tuple[str, bytes, Plan] | None = None
        self._last: dict[tuple[int, str], tuple[int, bytes]] = {}

    def core(self, ledger: Ledger) -> FalsifyCore:
        """Return the core over ``ledger`` (made once per open ledger)."""
        core = self._cores.get(id(ledger))
        if core is None or core.db is not ledger.derived.db:
            core = self._cores[id(ledger)] = ledger_core(ledger, self.registry)
            # Heads (and lists to attach) buffered by a transaction that rolls back are
            # dropped with it.
            ledger.derived.on_commit(_nothing, core.rolled_back)
        return core

    def install(self, db: apsw.Connection) -> None:
        """Create the falsification tables if missing."""
        _core.install(db)

    def expect(self, branch: str, prev: bytes, plan: Plan) -> None:
        """Say that the next entry of ``branch`` after ``prev`` is this plan's CASCADE.

        The hook then checks the entry against ``plan`` instead of computing it again.
        """
        self._memo = (branch, prev, plan)

    def catch_up(self, ledger: Ledger, branch: str, stop: int | None = None) -> int:
        """Fold the stored entries of ``branch`` the tables have not seen (up to ``stop``).

        Entries appended without this hook that the rules refuse are skipped and recorded.
        Call inside a write transaction. Returns how many entries were folded.

        Raises:
            StorageError: if the tables are ahead of the branch (another file's state?).
        """
        core = self.core(ledger)
        head = core.head(branch)
        stop = ledger.store.branch(branch).size if stop is None else stop
        if head > stop:
            raise StorageError(
                f"falsification state of branch {branch!r} covers {head} entries, the branch "
                f"has {stop}: run `memroot rebuild`"
            )
        if head < stop and core.gated_db is ledger.derived.db and tables.installed(core.db):
            # Own views are read from the memory model as of each entry: fold it that far.
            memory_catch_up(core.db, ledger, branch, stop)
        for r in ledger.store.iter_entry_rows(ledger.store.branch(branch).no, head, stop):
            if r.digest is not None or r.erased_by is not None:
                continue  # an event (known by its content columns): nothing to fold
            core.apply(Entry.from_bytes(bytes(r.data)), strict=False)
        core.flush_heads()
        set_head(core.db, branch, stop)
        return stop - head

    def apply(
        self, db: apsw.Connection, ledger: Ledger, entry: Entry, content: str | None
    ) -> list[OpInput]:
        """Keep the index and states; refuse a state operation the rules do not allow.

        Raises:
            ValidationError, NotFoundError, RuleError: for a refused state operation (see
                the module docstring); nothing is written.
        """
        core = self.core(ledger)
        key = (id(ledger), entry.branch)
        # The stored head is read only when this entry does not follow the last one applied
        # here (first append, a rolled-back transaction, another writer).
        if self._last.get(key) != (entry.seq, entry.prev):
            # Heads events moved in a batch that did not land (it ended in an error) go.
            core.discard_heads()
            if core.head(entry.branch) != entry.seq:
                self.catch_up(ledger, entry.branch, entry.seq)
        if entry.kind is Kind.EVENT:
            # Only the head moves, written at the end of the batch (``end_batch``).
            self._memo = None  # a plan is for the CASCADE right after its prev
            core.apply(entry, strict=True)
            self._last[key] = (entry.seq + 1, entry.hash)
            return []
        memo = None
        if self._memo is not None:
            branch, prev, plan = self._memo
            self._memo = None
            if branch == entry.branch and prev == entry.prev:
                memo = plan
        if (
            entry.kind is Kind.OP
            and entry.type == _CASCADE
            and memo is None
            and ledger.store.branch(entry.branch).size != entry.seq
        ):
            raise ValidationError(
                "a CASCADE must be the first entry of its append (its plan reads the stored "
                "entries before it)",
                field="op_type",
            )
        if entry.kind is Kind.OP and entry.type == _SNAPSHOT:
            _fold_cache.keep_fold_states(db, entry.branch)
        self._last.pop(key, None)
        if entry.kind is Kind.OP and entry.type in STATE_OPS:
            # The states it is validated against are first checked against the ledger's
            # own operations (an edited fz_states row is refused, nothing written).
            check_item_states(ledger, core.db, entry)
            if entry.type == _CASCADE or _core.has_cascade_part(entry):
                # So is the dependency index its walk reads (an edge deleted or added).
                check_index(ledger, core.db, entry.branch, core.rules)
        # Folding committed entries again (a PostgreSQL cache's catch-up, an import), a
        # state operation the rules refuse is skipped and recorded, as every replay does.
        core.apply(entry, strict=not ledger.replaying, memo=memo)  # moves the head past it
        self._last[key] = (entry.seq + 1, entry.hash)
        return []

    def folded(self, db: apsw.Connection, ledger: Ledger, branch: str) -> int:
        """Return how many entries of ``branch`` the falsification tables hold."""
        return self.core(ledger).head(branch)

    def apply_events(
        self, db: apsw.Connection, ledger: Ledger, entries: Sequence[Entry], contents: Sequence[str]
    ) -> list[OpInput]:
        """Fold a run of events (the ledger's native batch path), as ``apply`` on each.

        The first is applied on its own (it checks the stored head); after it an event only
        moves the head, so the run's last one moves it past the run.
        """
        self.apply(db, ledger, entries[0], contents[0])
        if len(entries) > 1:
            last = entries[-1]
            self.core(ledger).apply(last, strict=True)
            self._last[(id(ledger), last.branch)] = (last.seq + 1, last.hash)
        return []

    def end_batch(self, db: apsw.Connection) -> None:
        """Write the heads the batch's events moved (the ledger calls it after each batch)."""
        for core in self._cores.values():
            if core.db is db:
                core.flush_heads()
