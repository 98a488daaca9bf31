"""A branch's state as its parent's entries give it, checked before a write (issue 23.3).

``branch_meta.state`` (OPEN, CLOSED, DISCARDED, ARCHIVED) is derived: anyone who can write the
file can set a discarded branch back to OPEN, and an append to it, a second close or a merge
would then be validated against the edit. The state the ledger gives a branch is its first
``BRANCH_CLOSE`` in its parent after its ``BRANCH_CREATE`` (``STATE_AFTER`` of its action), or
OPEN. ``ProvenStates.check`` reads those entries strictly (each proven in the signed tree)
before a live append to a branch, a ``BRANCH_CLOSE`` or a ``BRANCH_MERGE`` is validated, and
refuses a stored state that allows more than the ledger's: OPEN where the ledger closed the
branch, mergeable (OPEN or CLOSED) where it discarded or archived it. A stricter stored state
is this transaction's own close (not stored yet), or refuses the write by itself.

What was read is remembered per parent head (size and chain head): entries a signed head
covers never change, so the answer holds while the parent does not move.
"""

from __future__ import annotations

from typing import Final

import apsw

from memroot.ledger.entries import Kind
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from memroot.ledger.vocab import OpType

__all__ = ["STATE_AFTER", "ProvenStates"]

STATE_AFTER: Final = {
    "CLOSE": "CLOSED",
    "DISCARD": "DISCARDED",
    "ARCHIVE": "ARCHIVED",
    "MERGED": "CLOSED",
    "ARCHIVE_BRANCH": "ARCHIVED",
    "DISCARD_BRANCH": "DISCARDED",
}
"""The state a ``BRANCH_CLOSE`` action leaves its branch in."""

_ENDED: Final = ("DISCARDED", "ARCHIVED")


class ProvenStates:
    """Branch states read from the ledger's entries, remembered per parent head."""

    def __init__(self) -> None:
        """Start with nothing read."""
        self._proven: dict[tuple[str, str, int, bytes], str] = {}

    def state(self, ledger: Ledger, branch_id: str, parent: str, create_seq: int) -> str:
        """Return the state the parent's entries after ``create_seq`` give ``branch_id``.

        Raises:
            IntegrityError: an entry of the parent fails its strict read.
        """
        head = ledger.store.branch(parent)
        key = (ledger.ledger_id, branch_id, head.size, bytes(head.head))
        want = self._proven.get(key)
        if want is None:
            want = "OPEN"
            for e in ledger.entries(create_seq + 1, head.size, parent):
                p = e.body.get("payload")
                if (
                    e.kind is Kind.OP
                    and e.type == OpType.BRANCH_CLOSE
                    and isinstance(p, dict)
                    and p.get("branch_id") == branch_id
                    and p.get("action") in STATE_AFTER
                ):
                    want = STATE_AFTER[str(p["action"])]
                    break
            self._proven[key] = want
        return want

    def check(self, db: apsw.Connection, ledger: Ledger, branch_id: object) -> None:
        """Check ``branch_id``'s stored state before a live write is validated against it.

        Nothing is checked while committed entries are folded again (``replaying``), on a
        non-strict ledger, or for a branch the registry does not hold (the rules refuse it).

        Raises:
            IntegrityError: step 9, naming the branch, its stored state and the ledger's.
        """
        if ledger.replaying or not ledger.strict or not isinstance(branch_id, str):
            return
        row = db.execute(
            "SELECT state, parent, create_seq FROM branch_meta WHERE branch_id = ?", (branch_id,)
        ).fetchone()
        if row is None:
            return
        stored, parent, create_seq = str(row[0]), str(row[1]), int(row[2])
        want = self.state(ledger, branch_id, parent, create_seq)
        if (stored == "OPEN" and want != "OPEN") or (stored not in _ENDED and want in _ENDED):
            raise IntegrityError(
                f"strict read refused: branch {parent} entry {create_seq}: step 9: the stored "
                f"registry row of branch {branch_id} says {stored} where its parent's entries "
                f"say {want} (derived state edited); nothing was written: run `memroot "
                "verify`, or `memroot rebuild` to re-derive it",
                branch=parent,
                seq=create_seq,
                step=9,
            )
