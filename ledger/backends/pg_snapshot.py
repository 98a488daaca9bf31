"""What a PostgreSQL read transaction sees once, and whose commits moved the snapshot since.

Two pieces of ``PgStore`` (``memroot.ledger.backends.pg``), kept apart from its SQL:

- ``Snapshot``: inside one ``REPEATABLE READ`` transaction nothing the ledger's tables hold
  can change, so the branch rows, the snapshot itself, each branch's newest entry key, the
  meta rows, the newest checkpoint of a branch and the entry rows already read are read
  once per transaction and answered from memory after that (a checked read asked the
  server for the branch rows up to nine times). Dropped when the transaction ends.
- ``Commits``: ``pg_current_snapshot()`` moves on every write anywhere on the server, this
  connection's own included, so it cannot tell this host's commits from others'. A snapshot
  is ``xmin:xmax:xip``: every transaction id below ``xmax`` and not in ``xip`` has ended. The
  ids that ended between two snapshots are therefore known exactly; when every one of them
  is a transaction this connection committed itself (``own``, recorded right before each
  COMMIT), nobody else wrote anything, anywhere. Any other id (another host's append, an
  attacker's edit of a table, a write to another database of the server) counts as
  another's commit: ``foreign`` moves, and what the read gate kept is re-checked.
"""

from __future__ import annotations

from typing import Any, Final

from memroot.ledger.backends.store import BranchRow, EntryRow

__all__ = ["Commits", "Snapshot", "parse_snapshot"]

_ENUMERATE_MAX: Final = 1 << 16
"""Past this many new transaction ids the ended ones are not listed: another's, surely."""


def parse_snapshot(text: str) -> tuple[int, int, frozenset[int]]:
    """Return ``(xmin, xmax, xip)`` of ``pg_current_snapshot()::text`` (``"10:20:12,15"``).

    Raises:
        ValueError: if ``text`` is not of that form.
    """
    xmin, xmax, xip = text.split(":")
    return int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x)


class Commits:
    """Whether transactions other than this connection's own ended between its snapshots.

    ``observe`` is handed each snapshot a read transaction reads in, in order; ``foreign``
    counts the observations at which some other transaction had ended since the one before
    (so two reads at the same ``foreign`` saw only this connection's own commits between
    them); ``mine`` counts this connection's own commits.
    """

    __slots__ = ("foreign", "last", "mine", "own")

    def __init__(self) -> None:
        self.own: set[int] = set()
        self.last: tuple[int, int, frozenset[int]] | None = None
        self.foreign = 0
        self.mine = 0

    def committed(self, xid: int | None) -> None:
        """Record this connection's commit of transaction ``xid`` (None: it wrote nothing)."""
        self.mine += 1
        if xid is not None:
            self.own.add(xid)

    def observe(self, text: str) -> None:
        """Take the snapshot ``text`` a read transaction reads in (``pg_current_snapshot``).

        Raises:
            ValueError: if ``text`` is no snapshot.
        """
        now = parse_snapshot(text)
        last = self.last
        self.last = now
        if last is None or now == last:
            if last is None:
                self.foreign += 1  # nothing to compare with: as if another had written
            return
        if not self._only_own(last, now):
            self.foreign += 1
        # An own id below the new xmin ended before it: no later difference can hold it.
        self.own = {x for x in self.own if x >= now[0]}

    def _only_own(
        self, last: tuple[int, int, frozenset[int]], now: tuple[int, int, frozenset[int]]
    ) -> bool:
        """Whether every transaction that ended between ``last`` and ``now`` is this one's."""
        _, old_xmax, old_xip = last
        _, new_xmax, new_xip = now
        if new_xmax < old_xmax:
            return False  # not a later snapshot: assume the worst
        running = sum(1 for x in new_xip if x >= old_xmax)
        if new_xmax - old_xmax - running > len(self.own):
            return False
        if new_xmax - old_xmax > _ENUMERATE_MAX:
            return False
        ended = {x for x in range(old_xmax, new_xmax) if x not in new_xip}
        ended.update(x for x in old_xip if x < new_xmax and x not in new_xip)
        return ended <= self.own


class Snapshot:
    """The small tables of a ledger as one ``REPEATABLE READ`` transaction sees them.

    Filled from the statement that opens the transaction (``PgStore.read``): the branch rows
    in creation order, each branch's largest entry key (None: no entry) and the snapshot's
    text; the rest is filled as first asked (``meta``, ``checkpoints``, ``rows``).
    """

    __slots__ = ("branches", "by_name", "checkpoints", "last_key", "meta", "rows", "text")

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        """Take the rows ``(no, name, size, head, max entry key, snapshot text)``."""
        self.branches = [BranchRow(int(r[0]), str(r[1]), int(r[2]), bytes(r[3])) for r in rows]
        self.by_name = {b.name: b for b in self.branches}
        self.last_key = {int(r[0]): None if r[4] is None else int(r[4]) for r in rows}
        self.text: str | None = str(rows[0][5]) if rows else None
        self.meta: dict[str, Any] | None = None
        self.checkpoints: dict[int, tuple[int, bytes, str] | None] = {}
        self.rows: dict[int, EntryRow] = {}

    def no_entry_from(self, key: int, branch_no: int) -> bool:
        """Whether the branch holds no entry with key ``>= key`` (known from the opening read)."""
        if branch_no not in self.last_key:
            return False  # not a branch of this snapshot: ask the table
        last = self.last_key[branch_no]
        return last is None or last < key
