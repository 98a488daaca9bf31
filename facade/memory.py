"""``memroot.open(path) -> Memory``: the API an agent runtime calls.

One object over one ledger file, with the same hooks the ``memroot`` command installs (so
every append is validated against the memory model, roots, falsification and branch rules,
and derived state is kept in step), and with defaults for who is writing::

    with memroot.open("agent.ledger", actor="agent-7", namespace="alice") as mem:
        said = mem.record(content="I take tea without sugar", actor="alice",
                          actor_type="HUMAN_USER", role="USER")
        pref = mem.remember("Alice takes tea without sugar", evidence=[said.id],
                            object_type="PREFERENCE", source_type="USER_STATED")
        hits = mem.recall(text="tea")
        report = mem.verify()

Each method is a thin call into the layers (``memroot.ledger``, ``memroot.projections``,
``memroot.memory_root``); errors come from ``memroot.ledger.errors`` and nothing is written
when one is raised.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from memroot.ledger.backends.pg import is_url
from memroot.ledger.entries import CANONICAL_BRANCH, EventInput, OpInput, parse_input
from memroot.ledger.errors import ClosedError, NotFoundError, ValidationError
from memroot.ledger.ledger import Appended, Ledger, branch_origin
from memroot.ledger.vocab import (
    ActorType,
    EpistemicType,
    MemoryType,
    Role,
    SourceType,
    canonical,
)
from memroot.projections import query as memq
from memroot.projections.checked import checked_query, current_in_file
from memroot.projections.epistemic import RetrievalMode

if TYPE_CHECKING:
    from memroot.ledger.trust import TrustedState
    from memroot.ledger.verify import AuditReport
    from memroot.memory_root import SnapshotResult
    from memroot.memory_root.branches import BranchInfo
    from memroot.memory_root.falsify import CascadeResult, Falsifier, ItemWhy, Plan
    from memroot.memory_root.merge import MergeResult
    from memroot.projections.query import Result
    from memroot.projections.why import Why

__all__ = ["DEFAULT_KINDS", "Memory", "Recorded", "ledger_hooks", "open_memory"]

DEFAULT_KINDS: Final = ("memory_object", "memory_root", "selfmodel", "summary_item")
"""Every kind of item a cascade may touch (SPEC 7)."""

_EVENT_KEYS: Final = {
    "stream",
    "actor_id",
    "actor_type",
    "role",
    "content",
    "namespace_id",
    "metadata",
    "parent_event_id",
    "id",
    "ts",
    "context",
}
_ALIASES: Final = {"actor": "actor_id", "namespace": "namespace_id", "parent": "parent_event_id"}
_OP_ALIASES: Final = {"actor": "actor_id", "namespace": "namespace_id"}


def ledger_hooks() -> list[Any]:
    """Return the append hooks a ``Memory`` (and the integrations) open a ledger with.

    The one place the facade chooses them: ``memroot.memory_root.stack.default_hooks()``, the
    list the CLI installs too.
    """
    from memroot.memory_root.stack import default_hooks

    return list(default_hooks())


@dataclass(frozen=True, slots=True)
class Recorded:
    """Where an appended event or operation landed: branch, seq, entry hash and its id."""

    branch: str
    seq: int
    entry_hash: bytes
    id: str
    type: str

    @classmethod
    def of(cls, a: Appended) -> Recorded:
        """Return the record of one ``Appended`` row."""
        return cls(a.branch, a.seq, bytes(a.entry_hash), a.id, a.type)


class Memory:
    """An agent's memory on one ledger file; see the module docstring.

    ``actor``, ``actor_type``, ``namespace`` and ``stream`` are the defaults every write
    uses unless a call names others; ``branch`` is where reads and writes go by default.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        actor: str = "agent",
        actor_type: str = "AI_AGENT",
        namespace: str = "default",
        stream: str = "default",
        branch: str = CANONICAL_BRANCH,
        policy_version: str = "memroot/1",
    ) -> None:
        """Wrap an open ledger (opened with ``ledger_hooks()``); prefer ``memroot.open``.

        Raises:
            ValidationError: an ``actor_type`` that is not an RFC-0001 actor type.
        """
        self._ledger: Ledger | None = ledger
        self.actor = actor
        self.actor_type = canonical(actor_type, ActorType, "actor_type")
        self.namespace = namespace
        self.stream = stream
        self.branch = branch
        self.policy_version = policy_version
        self._trusted: TrustedState | None = None  # set by ``memroot.open`` (trusted=)
        self._falsifier: Falsifier | None = None  # made once its tables exist (``_current``)

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def ledger(self) -> Ledger:
        """The open ledger under this memory.

        Raises:
            ClosedError: the memory was closed (every method goes through here, so any use
                after ``close()`` raises it and touches no file).
        """
        if self._ledger is None:
            raise ClosedError("this Memory is closed: open the ledger again with memroot.open")
        return self._ledger

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._ledger is None

    @property
    def path(self) -> Path:
        """The ledger file.

        Raises:
            ClosedError: the memory was closed.
        """
        return self.ledger.path

    def close(self) -> None:
        """Sign any checkpoint an automatic snapshot still needs, then close the file.

        Without a usable key file the checkpoint is left owed (the next writer with the key,
        or ``memroot checkpoint``, signs it); closing never fails for that. Closing a closed
        memory does nothing.
        """
        from memroot.ledger.errors import IntegrityError, KeyFileError

        ledger, self._ledger = self._ledger, None
        if ledger is None:
            return
        try:
            with contextlib.suppress(KeyFileError):
                if not ledger.derived.db.readonly("main"):
                    _sign_pending(ledger)
            if self._trusted is not None:
                # What this memory appended becomes trusted; a head that fails its check is
                # not recorded (the reads already refused it), and closing still closes.
                with contextlib.suppress(IntegrityError):
                    _trust(ledger, self._trusted)
        finally:
            ledger.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------

    def _append(self, item: EventInput | OpInput, branch: str | None) -> Appended:
        from memroot.memory_root import Roots

        return Roots(self.ledger).append(item, branch=branch or self.branch)

    def record(
        self, event: Mapping[str, Any] | None = None, /, *, branch: str | None = None, **fields: Any
    ) -> Recorded:
        """Append one RFC-0001 event, given as a dict or as keyword arguments.

        Fields not given take the memory's defaults (``stream``, ``actor_id``,
        ``actor_type`` ``AI_AGENT``, ``role`` ``ASSISTANT``, ``namespace_id``); ``content``
        is required. ``actor``, ``namespace`` and ``parent`` are accepted for ``actor_id``,
        ``namespace_id`` and ``parent_event_id``. A dict with ``"kind": "op"`` is appended
        as an operation (the fields of ``memroot append``); its ``actor_id``,
        ``actor_type``, ``namespace_id`` and ``policy_version`` default to the memory's.

        Raises:
            ValidationError: a missing or bad field (named); nothing is written.
            RefusedError, StorageError: as ``Ledger.append``.
            ClosedError: the memory was closed.
        """
        given: dict[str, Any] = dict(event or {})
        overlap = set(given) & set(fields)
        if overlap:
            raise ValidationError(
                f"field(s) {', '.join(sorted(overlap))} given both in the dict and as keywords",
                field=sorted(overlap)[0],
            )
        given.update(fields)
        if given.get("kind") == "op":
            _unalias(given, _OP_ALIASES)
            given.setdefault("actor_id", self.actor)
            given["actor_type"] = canonical(
                given.get("actor_type", self.actor_type), ActorType, "actor_type"
            )
            given.setdefault("namespace_id", self.namespace)
            given.setdefault("policy_version", self.policy_version)
            return Recorded.of(self._append(parse_input(given), branch))
        given.pop("kind", None)
        _unalias(given, _ALIASES)
        unknown = set(given) - _EVENT_KEYS
        if unknown:
            raise ValidationError(
                f"unknown event field(s): {', '.join(sorted(unknown))}", field=sorted(unknown)[0]
            )
        if "content" not in given:
            raise ValidationError("an event needs 'content'", field="content")
        item = EventInput(
            stream=given.pop("stream", self.stream),
            actor_id=given.pop("actor_id", self.actor),
            actor_type=canonical(given.pop("actor_type", self.actor_type), ActorType, "actor_type"),
            role=canonical(given.pop("role", "ASSISTANT"), Role, "role"),
            content=given.pop("content"),
            namespace_id=given.pop("namespace_id", self.namespace),
            **given,
        )
        return Recorded.of(self._append(item, branch))

    def remember(
        self,
        value: str,
        *,
        evidence: Sequence[str],
        object_type: str = "FACT",
        epistemic_type: str = "OBSERVED",
        source_type: str = "USER_STATED",
        confidence: float | None = None,
        salience: float = 0.5,
        structured_value: Any = None,
        entity_ids: Sequence[str] = (),
        namespace: str | None = None,
        branch: str | None = None,
    ) -> Recorded:
        """Assert a memory object citing the events it was learned from (an ``ASSERT``).

        ``evidence`` must name at least one event the branch holds; ``Recorded.id`` is the
        new object's id. ``confidence`` None takes the RFC-0003 default for the epistemic
        type.

        Raises:
            ValidationError / RefusedError: a bad field, unknown evidence, a namespace rule.
        """
        from memroot.projections import requests

        if isinstance(evidence, str):
            raise ValidationError(
                "evidence is a list of event ids, not one string", field="evidence"
            )
        by = requests.Actor(
            self.actor, self.actor_type, namespace or self.namespace, self.policy_version
        )
        op = requests.assert_object(
            by,
            canonical(object_type, MemoryType, "object_type"),
            canonical(epistemic_type, EpistemicType, "epistemic_type"),
            canonical(source_type, SourceType, "source_type"),
            list(evidence),
            value,
            confidence=confidence,
            salience=salience,
            structured_value=structured_value,
            entity_ids=entity_ids,
        )
        return Recorded.of(self._append(op, branch))

    # -- reading -------------------------------------------------------------------------------

    def recall(
        self,
        text: str | None = None,
        *,
        anchor: str | None = None,
        branch: str | None = None,
        as_of: int | None = None,
        types: Sequence[str] = (),
        namespaces: Sequence[str] = (),
        mode: str = "DEFAULT",
        git_branch: str | None = None,
        limit: int = 20,
        receipt: str | None = None,
    ) -> list[Result]:
        """Retrieve memory objects, most recently changed first (``memroot query``).

        ``text`` matches words of values; ``anchor`` keeps objects derived entirely from a
        conversation event's ancestor path; ``as_of`` reads memory as it was right after
        that entry; ``mode`` is the RFC-0003 retrieval mode (DEFAULT, EXPLICIT, AUDIT).
        ``receipt`` (a run id) appends a ``READ_RECEIPT`` naming the run, the query, the
        memory root in force and every object returned with its version and state.

        Raises:
            ValidationError: a bad filter, mode, run id, or an ``as_of`` past the head.
            IntegrityError: a served object's stored row is not what its own operations
                give (derived state edited; strict ledgers).
        """
        ledger = self.ledger
        branch = branch or self.branch
        retrieval = RetrievalMode(canonical(mode, RetrievalMode, "mode"))
        q = memq.Query(
            types=tuple(canonical(t, MemoryType, "types") for t in types),
            namespaces=tuple(namespaces),
            text=text,
            mode=retrieval,
            as_of=as_of,
            limit=limit,
            branch=branch,
            anchor=anchor,
            git_branch=git_branch,
        )
        if receipt is None:
            # Most reads find both layers current: the check and the read then share one
            # read transaction (one snapshot), with no catch-up to run.
            with ledger.reading() as db:
                if self._current(db, branch, as_of):
                    return checked_query(ledger, q)
            self._catch_up(branch)
            with ledger.reading():
                return checked_query(ledger, q)
        self._check_as_of(branch, as_of)
        self._catch_up(branch)
        from memroot.memory_root.receipts import receipt_op

        asked = {
            "text": text,
            "anchor": anchor,
            "branch": branch,
            "as_of": as_of,
            "types": list(q.types),
            "namespaces": list(namespaces),
            "mode": retrieval.value,
            "git_branch": git_branch,
            "limit": limit,
        }
        # One transaction: the receipt lands right after the state it describes.
        with ledger.write():
            results = checked_query(ledger, q)
            op = receipt_op(
                ledger,
                receipt,
                asked,
                results,
                branch=branch,
                actor_id=self.actor,
                actor_type=self.actor_type,
                namespace_id=self.namespace,
            )
            self._append(op, branch)
        return results

    def _check_as_of(self, branch: str, as_of: int | None) -> None:
        """Refuse an ``as_of`` past the branch's last entry.

        Raises:
            ValidationError: naming the branch's last entry.
        """
        size = self.ledger.size(branch)
        if as_of is not None and as_of >= size:
            raise ValidationError(
                f"as_of {as_of} is past the last entry of {branch} ({size - 1})", field="as_of"
            )

    def _current(self, db: Any, branch: str, as_of: int | None) -> bool:
        """Whether both layers' derived state already holds every entry (in ``db``'s snapshot).

        What ``_catch_up`` would find with nothing to fold; a False sends a read through it.
        Refuses an ``as_of`` past the branch's last entry first, as ``_check_as_of``.

        Raises:
            ValidationError: an ``as_of`` past the branch's last entry.
        """
        ledger = self.ledger
        if ledger.derived is ledger.store:
            got = current_in_file(db, branch)
            if got is not None:
                size, fresh = got
                if as_of is not None and as_of >= size:
                    self._check_as_of(branch, as_of)
                return fresh
        from memroot.memory_root.falsify import Falsifier
        from memroot.memory_root.falsify._core import has_table
        from memroot.projections.hook import current

        size = ledger.size(branch)
        if as_of is not None and as_of >= size:
            self._check_as_of(branch, as_of)
        if not current(ledger, db):
            return False
        if not has_table(db, "fz_states"):
            return False  # ``Falsifier`` installs its tables (or says a read-only file lacks them)
        if db.readonly("main"):
            return True  # as ``Falsifier.sync``: nothing can be folded into a read-only file
        if self._falsifier is None or self._falsifier.ledger is not ledger:
            self._falsifier = Falsifier(ledger)
        return self._falsifier.core.head(branch) == size

    def _catch_up(self, branch: str) -> None:
        """Fold every entry either layer's derived state lacks (entries appended without hooks).

        The falsification layer too: the completeness check explains a map's state leaves by
        its rows, so it must have folded them.
        """
        from memroot.memory_root.falsify import Falsifier
        from memroot.projections.hook import sync

        sync(self.ledger)
        Falsifier(self.ledger).sync(branch)

    def why(self, item_id: str, *, branch: str | None = None) -> Why | ItemWhy:
        """Return why memory holds an item: its operations and evidence, each proven.

        A memory object's UUID gives a ``Why`` (versions, operations, evidence with
        inclusion proofs); a root or SelfModel hex, or ``ROOT:projection:key``, gives an
        ``ItemWhy`` (state history, what it cites, what was built on it).

        Raises:
            NotFoundError / ValidationError: no such item on the branch.
        """
        from memroot.memory_root.falsify import Falsifier
        from memroot.projections.why import why as why_object

        branch = branch or self.branch
        if len(item_id) == 36 and item_id.count("-") == 4:
            return why_object(self.ledger, item_id, branch=branch)
        return Falsifier(self.ledger).why(item_id, branch)

    def state(self, item_id: str, *, branch: str | None = None) -> str:
        """Return an item's state on the branch: ``live``, ``stale`` or ``falsified``.

        Raises:
            NotFoundError / ValidationError: no such item on the branch.
        """
        from memroot.memory_root.falsify import Falsifier

        f = Falsifier(self.ledger)
        branch = branch or self.branch
        return f.state(f.resolve(item_id, branch), branch)

    # -- roots, falsification, branches --------------------------------------------------------

    def snapshot(self, *, branch: str | None = None) -> SnapshotResult:
        """Take a memory_root snapshot now and sign a checkpoint after it (``memroot snapshot``).

        Returns the existing root (``created`` False) when nothing changed since the last one.
        """
        from memroot.memory_root import Roots

        return Roots(self.ledger).snapshot(branch or self.branch)

    def falsify(
        self,
        item_id: str,
        reason: str,
        *,
        evidence: Sequence[str] = (),
        branch: str | None = None,
    ) -> Recorded:
        """Flip one item to ``falsified`` (a ``FALSIFY`` entry); nothing else changes.

        Raises:
            ValidationError, NotFoundError: a bad or unknown id; RuleError: already falsified.
            ClosedError: the memory was closed.
        """
        return self._state_op("falsify", item_id, reason, evidence, branch)

    def mark_stale(
        self,
        item_id: str,
        reason: str,
        *,
        evidence: Sequence[str] = (),
        branch: str | None = None,
    ) -> Recorded:
        """Mark one live item ``stale``, to be re-checked (a ``MARK_STALE``); nothing else changes.

        Raises:
            ValidationError, NotFoundError: a bad or unknown id; RuleError: the item is not live.
            ClosedError: the memory was closed.
        """
        return self._state_op("mark_stale", item_id, reason, evidence, branch)

    def restore(
        self,
        item_id: str,
        reason: str,
        *,
        evidence: Sequence[str] = (),
        cascade: bool = False,
        max_depth: int = 3,
        branch: str | None = None,
    ) -> Recorded:
        """Make a falsified or stale item ``live`` again (a ``RESTORE``, as ``memroot restore``).

        With ``cascade`` the one ``RESTORE`` also undoes the staleness the cascades from the
        item set, down to ``max_depth`` (deeper items stay stale), and withdraws the
        re-snapshots those cascades made; without it, dependents keep their state.

        Raises:
            ValidationError, NotFoundError: a bad or unknown id, a bad ``max_depth``.
            RuleError: the item is live. ClosedError: the memory was closed.
        """
        if not cascade:
            return self._state_op("restore", item_id, reason, evidence, branch)
        from memroot.memory_root.falsify import Falsifier

        branch = branch or self.branch
        done = Falsifier(self.ledger).restore_cascade(
            item_id,
            reason,
            max_depth,
            evidence,
            actor=self.actor,
            actor_type=self.actor_type,
            branch=branch,
        )
        return Recorded.of(done.appended[0])

    def _state_op(
        self, op: str, item_id: str, reason: str, evidence: Sequence[str], branch: str | None
    ) -> Recorded:
        from memroot.memory_root.falsify import Falsifier

        if isinstance(evidence, str):
            raise ValidationError(
                "evidence is a list of event ids, not one string", field="evidence"
            )
        branch = branch or self.branch
        f = Falsifier(self.ledger)
        call = {"falsify": f.falsify, "mark_stale": f.mark_stale, "restore": f.restore}[op]
        ref = f.resolve(item_id, branch)
        return Recorded.of(
            call(
                ref,
                reason,
                list(evidence),
                actor=self.actor,
                actor_type=self.actor_type,
                branch=branch,
            )
        )

    def forget(
        self,
        event_id: str,
        reason: str,
        *,
        policy_ref: str,
        on_dependents: str | None = None,
        namespace: str | None = None,
        branch: str | None = None,
    ) -> Recorded:
        """Erase an event's content (a ``TOMBSTONE``); its commitment stays in the chain.

        ``policy_ref`` names the policy that asks for it (``gdpr-art-17``). ``on_dependents``
        says what happens to the ACTIVE objects that cite the event: ``DEPRECATE``,
        ``ARCHIVE`` or ``KEEP`` (refused if that would leave one without evidence); when
        there are such objects it is required. The erasure reaches every branch holding the
        event (docs/memory.md "Erasure"). Needs ADMIN on the event's namespace.

        Raises:
            ValidationError: a bad id or ``on_dependents``; NotFoundError: no such event.
            RuleError: already erased, dependents without ``on_dependents``, no permission.
            ClosedError: the memory was closed.
        """
        from memroot.projections import requests
        from memroot.projections.ops import ON_DEPENDENTS

        mode = (
            None
            if on_dependents is None
            else canonical(on_dependents, ON_DEPENDENTS, "on_dependents")
        )
        by = requests.Actor(
            self.actor, self.actor_type, namespace or self.namespace, self.policy_version
        )
        op = requests.tombstone(by, event_id, reason, policy_ref, mode)
        return Recorded.of(self._append(op, branch))

    def cascade(
        self,
        item_id: str,
        *,
        max_depth: int = 3,
        max_items: int = 1000,
        kinds: Sequence[str] = DEFAULT_KINDS,
        reason: str | None = None,
        dry_run: bool = False,
        branch: str | None = None,
    ) -> Plan | CascadeResult:
        """Walk what depends on a falsified (or stale) item within the bound.

        ``dry_run`` returns the ``Plan`` and writes nothing; otherwise one ``CASCADE`` entry
        is appended and the ``CascadeResult`` (plan, re-snapshots, entries) returned.

        Raises:
            ValidationError: a bad bound or kind; RuleError: the item is live.
        """
        from memroot.memory_root.falsify import Falsifier

        branch = branch or self.branch
        f = Falsifier(self.ledger)
        if dry_run:
            return f.plan(item_id, max_depth, max_items, kinds, branch=branch)
        return f.cascade(
            item_id,
            max_depth,
            max_items,
            kinds,
            reason=reason,
            actor=self.actor,
            actor_type=self.actor_type,
            branch=branch,
        )

    def fork(
        self,
        purpose: str,
        *,
        branch_type: str = "SIMULATION",
        parent: str | None = None,
        expiry_days: int | None = None,
        branch_id: str | None = None,
    ) -> str:
        """Fork a branch of memory (RFC-0012) and return its id.

        ``branch_type``: SIMULATION, PLANNING, COUNTERFACTUAL, SANDBOX or TEST (any case).
        ``expiry_days`` None takes the namespace's default for the type.

        Raises:
            ValidationError: a bad type or purpose, no expiry for the type; RefusedError: a
                branch limit is reached. ClosedError: the memory was closed.
        """
        from memroot.memory_root.branches import create_branch

        _, genesis = create_branch(
            self.ledger,
            branch_type=branch_type,
            purpose=purpose,
            actor_id=self.actor,
            actor_type=self.actor_type,
            namespace_id=self.namespace,
            parent=parent or self.branch,
            expiry_days=expiry_days,
            branch_id=branch_id,
        )
        return genesis.branch

    def merge(
        self,
        branch: str,
        objects: Sequence[str],
        *,
        strategy: str = "PRESERVE_BOTH",
        reason: str | None = None,
    ) -> MergeResult:
        """Merge the named objects of ``branch`` into its parent (selective merge, RFC-0012).

        Raises:
            ValidationError, NotFoundError, RefusedError: as ``memroot branch merge``.
        """
        from memroot.memory_root.merge import merge_branch

        return merge_branch(
            self.ledger,
            branch,
            list(objects),
            strategy=strategy,
            actor_id=self.actor,
            actor_type=self.actor_type,
            reason=reason,
        )

    def branches(self, *, state: str | None = None) -> list[BranchInfo]:
        """Return every forked branch (optionally only those in ``state``), oldest first.

        Each record is checked against the ``BRANCH_CREATE`` that made it (strict read, as
        ``memroot branch list``). ``state``: OPEN, CLOSED, DISCARDED or ARCHIVED (any case).

        Raises:
            ValidationError: a bad state; IntegrityError: a registry row that is not what its
                entry made. ClosedError: the memory was closed.
        """
        from memroot.memory_root.branches import check_branches, list_branches

        ledger = self.ledger
        with ledger.reading():
            infos = list_branches(ledger, state=state)
            if ledger.strict:
                check_branches(ledger, infos)
        return infos

    def close_branch(self, branch_id: str, reason: str) -> Recorded:
        """Close an open branch (a ``BRANCH_CLOSE`` in its parent): nothing more is appended.

        Raises:
            NotFoundError: no such branch; RefusedError: it is not open, or it has open
                child branches (named). ClosedError: the memory was closed.
        """
        return self._end_branch(branch_id, "CLOSE", reason)

    def discard_branch(self, branch_id: str, reason: str) -> Recorded:
        """Discard an open branch: closed as ``DISCARDED`` (its entries stay, as evidence).

        Raises:
            NotFoundError, RefusedError, ClosedError: as ``close_branch``.
        """
        return self._end_branch(branch_id, "DISCARD", reason)

    def _end_branch(self, branch_id: str, action: str, reason: str) -> Recorded:
        from memroot.memory_root.branches import close_branch

        return Recorded.of(
            close_branch(
                self.ledger,
                branch_id,
                action=action,
                reason=reason,
                actor_id=self.actor,
                actor_type=self.actor_type,
            )
        )

    # -- verification --------------------------------------------------------------------------

    def verify(
        self,
        *,
        trusted: str | os.PathLike[str] | None = None,
        vkeys: Sequence[str] = (),
        update_trusted: bool = True,
    ) -> AuditReport:
        """Run every auditor step (as ``memroot verify``) and return the report.

        ``trusted`` is the trusted-state file (default as the CLI: ``$MEMROOT_TRUSTED`` or
        ``~/.local/state/memroot/trusted.json``). Never raises for bad data: check
        ``report.ok`` and ``report.findings`` (or call ``report.raise_first()``).
        """
        from memroot.ledger.trust import TrustedState, default_trusted_path
        from memroot.ledger.verify import verify_path
        from memroot.memory_root.stack import replay_checks

        self.close_pending()
        state = TrustedState(Path(trusted) if trusted is not None else default_trusted_path())
        if self.ledger.derived is self.ledger.store:
            checks = replay_checks(self.ledger)
            return verify_path(
                self.path, trusted=state, vkeys=vkeys, checks=checks, update_trusted=update_trusted
            )
        # A PostgreSQL ledger: one snapshot with this host's derived state, copied to a file
        # (as `memroot verify` does).
        with tempfile.TemporaryDirectory(prefix="memroot-verify-") as tmp:
            copy = Path(tmp) / "ledger.db"
            self.ledger.copy_snapshot(copy)
            with Ledger.open(copy, readonly=True, strict=False) as snapshot:
                checks = replay_checks(snapshot)
            return verify_path(
                copy, trusted=state, vkeys=vkeys, checks=checks, update_trusted=update_trusted
            )

    def close_pending(self) -> None:
        """Sign the checkpoints automatic snapshots still need (verify checks them).

        Raises:
            ClosedError: the memory was closed.
        """
        _sign_pending(self.ledger)


def _sign_pending(ledger: Ledger) -> None:
    from memroot.memory_root import Roots

    for b in ledger.store.branches():
        Roots(ledger).sign_pending(b.name)


def _unalias(given: dict[str, Any], aliases: Mapping[str, str]) -> None:
    """Rename the short field names of ``given`` in place (``actor`` -> ``actor_id``).

    Raises:
        ValidationError: both the short and the full name are given.
    """
    for short, full in aliases.items():
        if short in given:
            if full in given:
                raise ValidationError(f"give {short!r} or {full!r}, not both", field=full)
            given[full] = given.pop(short)


def open_memory(
    path: str | os.PathLike[str],
    *,
    create: bool = True,
    origin: str | None = None,
    snapshot_every: int | None = None,
    key_path: str | os.PathLike[str] | None = None,
    actor: str = "agent",
    actor_type: str = "AI_AGENT",
    namespace: str = "default",
    stream: str = "default",
    branch: str = CANONICAL_BRANCH,
    trusted: str | os.PathLike[str] | bool | None = None,
) -> Memory:
    """Open (or, with ``create``, create) the ledger at ``path`` and return its ``Memory``.

    A trusted state is kept per ledger, as the CLI keeps one: ``trusted`` names the file
    (default ``$MEMROOT_TRUSTED``, else ``~/.local/state/memroot/trusted.json``);
    ``trusted=False`` keeps none. Every head read is checked against it (a restored older
    copy or a forked history is refused with ``IntegrityError``, step 10), and it records
    the newest checked heads at open and at close.

    ``path`` may be a ``postgresql://`` URL of a ledger made with ``memroot init`` (never
    created here); ``key_path`` then names its signing key.

    A new ledger gets its Ed25519 key beside it (``PATH.key``, mode 0600) as with
    ``memroot init``; ``origin`` and ``snapshot_every`` apply only then.

    Raises:
        NotFoundError: no ledger at ``path`` and ``create`` is false.
        StorageError, KeyFileError, ValidationError: as ``Ledger.open`` / ``Ledger.init``.
    """
    from memroot.ledger.ledger import DEFAULT_SNAPSHOT_EVERY
    from memroot.ledger.trust import TrustedState, default_trusted_path

    key = None if key_path is None else Path(key_path)
    p = Path(path)
    state = None
    if trusted is not False:
        where = default_trusted_path() if trusted is None or trusted is True else Path(trusted)
        state = TrustedState(where)
    if is_url(path):
        # A PostgreSQL ledger (made by `memroot init`): its derived state lives in this
        # host's cache file (docs/postgresql.md).
        ledger = Ledger.open(str(path), key_path=key, hooks=ledger_hooks(), trusted=state)
    elif p.exists():
        ledger = Ledger.open(p, key_path=key, hooks=ledger_hooks(), trusted=state)
    elif create:
        ledger = Ledger.init(
            p,
            origin=origin,
            snapshot_every=snapshot_every or DEFAULT_SNAPSHOT_EVERY,
            key_path=key,
            hooks=ledger_hooks(),
        )
    else:
        raise NotFoundError(f"no ledger at {p} (pass create=True to make one)")
    if state is not None:
        try:
            _trust(ledger, state)
        except BaseException:
            ledger.close()
            raise
    mem = Memory(
        ledger,
        actor=actor,
        actor_type=actor_type,
        namespace=namespace,
        stream=stream,
        branch=branch,
    )
    mem._trusted = state
    return mem


def _trust(ledger: Ledger, state: TrustedState) -> None:
    """Record the ledger's checked heads in ``state`` (a strict ledger only).

    Raises:
        IntegrityError: a head fails its check (against the state too).
    """
    from memroot.ledger.trust import record_heads

    if not ledger.strict:
        return
    heads = ledger.check_heads()
    origins = {h.branch: branch_origin(ledger.origin, h.branch) for h in heads}
    record_heads(
        state,
        [(origins[h.branch], h.size, h.root, h.note) for h in heads],
        ledger.genesis_vkeys(),
    )
