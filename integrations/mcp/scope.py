"""What one MCP client may reach: the objects, events and branches of its own namespace.

Every tool of the server names ledger items by id (an object, an evidence event, an anchor,
a branch). A ``Scope`` looks each one up through the library's checked reads and hands it on
only when it belongs to the client's namespace; an item of another namespace gets exactly the
refusal a missing id gets (``NotFoundError`` with the same words), so a client can neither
act on another namespace's memory nor learn that an id exists there.

The rules (issue 23, point 7):

- a memory object is the client's when its ``namespace_id`` is the client's namespace;
- an event is the client's when the event entry's ``namespace_id`` is (read from the entry
  itself, proven in the signed tree, not from a derived row);
- a branch is the client's when its ``BRANCH_CREATE`` was written in the client's namespace
  (the registry row checked against that entry); ``main`` is every client's;
- memory roots, summary items and SelfModels fold every namespace: a client sees a root's
  commitment (its hash, state and high-water mark) but not its per-namespace content, and
  cannot falsify or cascade one (that is an operator's act: ``memroot falsify``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from memroot.ledger.entries import CANONICAL_BRANCH, Kind
from memroot.ledger.errors import IntegrityError, NotFoundError, RefusedError

if TYPE_CHECKING:
    from memroot.memory import Memory
    from memroot.memory_root.falsify import Plan
    from memroot.projections.why import Why

__all__ = ["Scope"]


class Scope:
    """The namespace-checked view of one client: a ``Memory`` with its actor and namespace."""

    def __init__(self, mem: Memory) -> None:
        """Confine every look-up to ``mem.namespace`` (writes go as ``mem.actor``)."""
        self.mem = mem
        self.namespace = mem.namespace

    # -- the uniform refusals ------------------------------------------------------------------

    @staticmethod
    def _no_object(object_id: str, branch: str) -> NotFoundError:
        return NotFoundError(f"no memory object {object_id} on branch {branch!r}")

    @staticmethod
    def _no_event(event_id: str, branch: str) -> NotFoundError:
        return NotFoundError(f"no event {event_id} on branch {branch!r}")

    @staticmethod
    def _no_branch(name: str) -> NotFoundError:
        return NotFoundError(f"no branch named {name!r}")

    # -- look-ups ------------------------------------------------------------------------------

    def branch(self, name: str | None) -> str:
        """Return ``name`` (default ``main``) when it is ``main`` or a branch of this namespace.

        Raises:
            NotFoundError: no such branch, or a branch of another namespace (same words).
            IntegrityError: the branch's registry row is not what its entry made.
        """
        from memroot.memory_root.branches import check_branches, get_branch

        branch = name or CANONICAL_BRANCH
        if branch == CANONICAL_BRANCH:
            return branch
        ledger = self.mem.ledger
        if branch not in {b.name for b in ledger.store.branches()}:
            raise self._no_branch(branch)
        with ledger.reading():
            try:
                info = get_branch(ledger, branch)
            except NotFoundError:
                raise self._no_branch(branch) from None
            check_branches(ledger, [info])
        if info.namespace_id != self.namespace:
            raise self._no_branch(branch)
        return branch

    def event(self, event_id: str, branch: str) -> None:
        """Check that ``event_id`` is an event of this namespace that ``branch`` sees.

        The event is located through the memory model and then read from the ledger (a
        strict read): its entry must be that event, and its ``namespace_id`` decides.

        Raises:
            NotFoundError: no such event, or one of another namespace (same words).
            IntegrityError: the located entry is not that event (derived state edited).
        """
        from memroot.projections.backends import SqlState
        from memroot.projections.hook import sync

        ledger = self.mem.ledger
        sync(ledger, branch)
        with ledger.reading():
            ref = SqlState(ledger.derived.db).event(branch, event_id.lower())
        if ref is None:
            raise self._no_event(event_id, branch)
        entry = ledger.entry(ref.seq, ref.branch)
        if entry.kind is not Kind.EVENT or entry.body.get("id") != ref.id:
            raise IntegrityError(
                f"strict read refused: branch {ref.branch} entry {ref.seq}: step 9: the stored "
                f"row of event {ref.id} locates an entry that is not that event (derived state "
                "edited); run `memroot verify`",
                branch=ref.branch,
                seq=ref.seq,
                step=9,
            )
        if entry.body.get("namespace_id") != self.namespace:
            raise self._no_event(event_id, branch)

    def events(self, event_ids: Iterable[str], branch: str) -> list[str]:
        """Check every id with ``event`` and return them as given.

        Raises:
            NotFoundError, IntegrityError: as ``event``, for the first that fails.
        """
        ids = list(event_ids)
        for event_id in ids:
            self.event(event_id, branch)
        return ids

    def object(self, object_id: str, branch: str) -> Why:
        """Return ``why`` of a memory object of this namespace on ``branch`` (a strict read).

        The object's namespace is first taken from its stored row, only to refuse: an object
        of another namespace is never read further (so no strict-read finding about it
        reaches this client either). What is served comes from the strict ``why``, which
        checks the row against its operations, so an edited namespace cannot let one in.

        Raises:
            NotFoundError: no such object, or one of another namespace (same words).
            IntegrityError: the object's rows or entries fail their strict read.
        """
        from memroot.projections.checked import checked_object
        from memroot.projections.hook import sync
        from memroot.projections.why import Why

        ledger = self.mem.ledger
        sync(ledger, branch)
        with ledger.reading():
            try:
                row = checked_object(ledger, object_id.lower(), branch=branch)
            except NotFoundError:
                raise self._no_object(object_id, branch) from None
        if row.namespace_id != self.namespace:
            raise self._no_object(object_id, branch)
        try:
            found = self.mem.why(object_id.lower(), branch=branch)
        except NotFoundError:
            raise self._no_object(object_id, branch) from None
        if not isinstance(found, Why) or found.object.namespace_id != self.namespace:
            raise self._no_object(object_id, branch)
        return found

    def objects(self, object_ids: Sequence[str], branch: str) -> list[str]:
        """Check every id with ``object`` and return them as given.

        Raises:
            NotFoundError, IntegrityError: as ``object``, for the first that fails.
        """
        for object_id in object_ids:
            self.object(object_id, branch)
        return list(object_ids)

    def mine(self, object_ids: Sequence[str], branch: str) -> list[str]:
        """Return the ids (in order) that name objects of this namespace on ``branch``.

        For filtering what a result mentions (e.g. ``conflicts_with``): an id is kept only
        when its stored row says this namespace.
        """
        from memroot.projections.checked import checked_object

        ledger = self.mem.ledger
        kept = []
        with ledger.reading():
            for object_id in object_ids:
                try:
                    row = checked_object(ledger, object_id, branch=branch)
                except NotFoundError:
                    continue
                if row.namespace_id == self.namespace:
                    kept.append(object_id)
        return kept

    def event_namespace(self, seq: int, branch: str) -> str:
        """Return the ``namespace_id`` of the entry at ``seq`` of ``branch`` (a strict read)."""
        return str(self.mem.ledger.entry(seq, branch).body.get("namespace_id"))

    def check_plan(self, plan: Plan) -> None:
        """Refuse a cascade plan that reaches a memory object of another namespace.

        A client may falsify its own objects, and a cascade marks stale what was built on
        them; when that includes another namespace's objects, the cascade is not this
        client's to run (an operator runs it with ``memroot cascade``).

        Raises:
            RefusedError: the plan reaches another namespace's objects (how many).
            IntegrityError: an object's rows fail their strict read.
        """
        from memroot.memory_root.falsify.deps import OBJECT
        from memroot.projections.checked import checked_object
        from memroot.projections.strict_rows import check_objects

        ledger = self.mem.ledger
        items = [s.item for s in (*plan.touched, *plan.passed)] + [c.item for c in plan.beyond]
        ids = {i.id for i in items if i.kind == OBJECT}
        outside = 0
        with ledger.reading():
            objs = []
            for object_id in sorted(ids):
                try:
                    objs.append(checked_object(ledger, object_id, branch=plan.branch))
                except NotFoundError:
                    outside += 1  # an object the branch does not show: not this client's
            check_objects(ledger, objs, plan.branch)
        outside += sum(1 for o in objs if o.namespace_id != self.namespace)
        if outside:
            raise RefusedError(
                f"the cascade reaches {outside} memory object(s) of other namespaces: this "
                f"server acts only inside namespace {self.namespace!r} (an operator can run "
                "`memroot cascade`)"
            )
