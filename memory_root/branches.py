"""Branch policy (RFC-0012): types, expiry, resource limits, close/discard/archive, GC.

The ledger layer forks chains (``Ledger.fork``: a ``BRANCH_CREATE`` in the parent anchors the
branch's own chain and tree). This module adds what RFC-0012 asks of a branch on top:

- every branch has a type (SIMULATION, COUNTERFACTUAL, PLANNING, SANDBOX, TEST) and an expiry
  policy ``{max_age_days, max_events?, max_storage_mb?, on_expiry}``; defaults per type, which
  a ``BRANCH_POLICY`` operation can change per namespace; a branch with no expiry is refused;
- limits: open branches per user (10) and per system (100), storage per user (500 MB), all
  configurable (``BranchLimits``); a refused creation names the limit and the branches the
  user could close;
- ``BRANCH_CLOSE`` operations (in the parent) close, discard, archive or expire a branch;
  nothing more can be appended to a branch that is not OPEN;
- ``BRANCH_MERGE`` operations (in the parent; ``memroot.memory_root.merge`` writes them) are refused
  for a branch type that never merges or a discarded/archived branch; imported objects are
  recorded in ``branch_merges`` so an object is imported once;
- ``gc(now)`` (meant to run daily, idempotent): expired branches handled per ``on_expiry``,
  branches 7 days past their max age force-closed, branches over max_events closed.

Branch state is derived from ledger entries by ``BranchRegistry`` (an ``AppendHook``) into the
``branch_meta`` table, in the same transaction as the append, so it rebuilds by replay. Time
comes from entries' ``ts`` (deterministic) and, for GC, from an injectable clock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import apsw

from memroot.ledger.backends.store import BRANCH_SHIFT
from memroot.ledger.entries import (
    CANONICAL_BRANCH,
    Entry,
    Kind,
    OpInput,
    _library_op,
    new_uuid,
    now_us,
)
from memroot.ledger.errors import (
    IntegrityError,
    MemrootError,
    NotFoundError,
    RefusedError,
    ValidationError,
)
from memroot.ledger.ledger import Appended, Ledger
from memroot.ledger.vocab import ActorType, BranchType, OpType, canonical
from memroot.memory_root.branch_state import STATE_AFTER, ProvenStates

__all__ = [
    "CLOSE_ACTIONS",
    "DAY_US",
    "DEFAULT_EXPIRY_DAYS",
    "FORCE_CLOSE_GRACE_DAYS",
    "MAX_EXPIRY_DAYS",
    "MAX_EXPIRY_EVENTS",
    "MAX_EXPIRY_STORAGE_MB",
    "MERGEABLE_TYPES",
    "BranchInfo",
    "BranchLimits",
    "BranchRegistry",
    "Expiry",
    "GcAction",
    "check_branches",
    "close_branch",
    "create_branch",
    "gc",
    "get_branch",
    "list_branches",
    "set_branch_policy",
]

DAY_US: Final = 86_400 * 1_000_000
FORCE_CLOSE_GRACE_DAYS: Final = 7
MAX_EXPIRY_DAYS: Final = 3_650
"""The longest max age a branch may have (10 years): a branch is a bounded experiment."""
MAX_EXPIRY_EVENTS: Final = 2**40 - 1
"""The largest ``max_events`` (a branch cannot hold more entries than that)."""
MAX_EXPIRY_STORAGE_MB: Final = 1_048_576
"""The largest ``max_storage_mb`` (1 TB)."""
DEFAULT_EXPIRY_DAYS: Final[dict[str, int | None]] = {
    BranchType.SIMULATION.value: 7,
    BranchType.COUNTERFACTUAL.value: 7,
    BranchType.PLANNING.value: 30,
    BranchType.SANDBOX.value: 14,
    BranchType.TEST.value: 1,
}
MERGEABLE_TYPES: Final = frozenset({BranchType.SIMULATION.value, BranchType.PLANNING.value})
ON_EXPIRY: Final = ("ARCHIVE_BRANCH", "DISCARD_BRANCH")
CLOSE_ACTIONS: Final = ("CLOSE", "DISCARD", "ARCHIVE", "MERGED")
_STATES: Final = ("OPEN", "CLOSED", "DISCARDED", "ARCHIVED")
_STATE_AFTER: Final = STATE_AFTER
_POLICY_VERSION: Final = "memroot-branches/1"

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS branch_meta(
    branch_id TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    type TEXT NOT NULL,
    purpose TEXT NOT NULL,
    created_by TEXT NOT NULL,
    namespace_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    fork_size INTEGER NOT NULL,
    max_age_days INTEGER NOT NULL,
    max_events INTEGER,
    max_storage_mb INTEGER,
    on_expiry TEXT NOT NULL,
    state TEXT NOT NULL,
    closed_at INTEGER,
    closed_reason TEXT,
    create_seq INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS branch_merges(
    branch_id TEXT NOT NULL,
    object_id TEXT NOT NULL,
    new_object_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY(branch_id, object_id)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS branch_policy(
    namespace_id TEXT NOT NULL,
    branch_type TEXT NOT NULL,
    max_age_days INTEGER,
    PRIMARY KEY(namespace_id, branch_type)
) STRICT;
"""


@dataclass(frozen=True, slots=True)
class BranchLimits:
    """RFC-0012 section 7 resource limits (all configurable)."""

    per_user: int = 10
    per_system: int = 100
    storage_mb_per_user: int = 500


@dataclass(frozen=True, slots=True)
class Expiry:
    """RFC-0012 section 4 BranchExpiry. ``max_age_days`` is required (no unbounded branch)."""

    max_age_days: int
    on_expiry: str = "ARCHIVE_BRANCH"
    max_events: int | None = None
    max_storage_mb: int | None = None

    def __post_init__(self) -> None:
        if type(self.max_age_days) is not int or not 1 <= self.max_age_days <= MAX_EXPIRY_DAYS:
            raise ValidationError(
                f"expiry.max_age_days must be a number of days from 1 to {MAX_EXPIRY_DAYS} "
                f"(MAX_EXPIRY_DAYS): every branch expires, got {self.max_age_days!r}",
                field="expiry.max_age_days",
            )
        if self.on_expiry not in ON_EXPIRY:
            raise ValidationError(
                f"expiry.on_expiry must be one of {', '.join(ON_EXPIRY)}",
                field="expiry.on_expiry",
            )
        for name, most in (
            ("max_events", MAX_EXPIRY_EVENTS),
            ("max_storage_mb", MAX_EXPIRY_STORAGE_MB),
        ):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or not 1 <= value <= most):
                raise ValidationError(
                    f"expiry.{name} must be an integer from 1 to {most}, got {value!r}",
                    field=f"expiry.{name}",
                )

    def to_payload(self) -> dict[str, Any]:
        """Return the expiry as stored in the BRANCH_CREATE payload."""
        out: dict[str, Any] = {"max_age_days": self.max_age_days, "on_expiry": self.on_expiry}
        if self.max_events is not None:
            out["max_events"] = self.max_events
        if self.max_storage_mb is not None:
            out["max_storage_mb"] = self.max_storage_mb
        return out

    @classmethod
    def from_payload(cls, value: Any, *, recorded: bool = False) -> Expiry:
        """Parse the expiry of a BRANCH_CREATE payload.

        ``recorded``: the payload is a committed entry's, folded again: its values are taken
        as they were accepted, even past today's bounds (``_stored_expiry``).

        Raises:
            ValidationError: if it is missing or malformed.
        """
        if not isinstance(value, dict) or value.get("max_age_days") is None:
            raise ValidationError(
                "a branch needs an expiry policy with max_age_days (unbounded branches are "
                "not permitted)",
                field="payload.expiry",
            )
        extra = set(value) - {"max_age_days", "on_expiry", "max_events", "max_storage_mb"}
        if extra:
            raise ValidationError(
                f"unknown expiry field {sorted(extra)[0]!r}", field="payload.expiry"
            )
        args = (
            value["max_age_days"],
            value.get("on_expiry", "ARCHIVE_BRANCH"),
            value.get("max_events"),
            value.get("max_storage_mb"),
        )
        return _stored_expiry(*args) if recorded else cls(*args)


@dataclass(frozen=True, slots=True)
class BranchInfo:
    """A branch's policy record and state, as derived from the ledger."""

    branch_id: str
    parent: str
    type: str
    purpose: str
    created_by: str
    namespace_id: str
    created_at: int
    fork_size: int
    expiry: Expiry
    state: str
    closed_at: int | None
    closed_reason: str | None
    create_seq: int

    @property
    def expires_at(self) -> int:
        """When the branch expires (microseconds since the epoch)."""
        return self.created_at + self.expiry.max_age_days * DAY_US

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "branch_id": self.branch_id,
            "parent": self.parent,
            "type": self.type,
            "purpose": self.purpose,
            "created_by": self.created_by,
            "namespace_id": self.namespace_id,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "fork_size": self.fork_size,
            "expiry": self.expiry.to_payload(),
            "state": self.state,
            "closed_at": self.closed_at,
            "closed_reason": self.closed_reason,
            "create_seq": self.create_seq,
        }


def _stored_expiry(
    days: int, on_expiry: str, max_events: int | None, max_storage_mb: int | None
) -> Expiry:
    """Return a stored branch's expiry as recorded, even past today's limits.

    A branch created before a limit existed must still list and close; only new requests
    are held to the limits.
    """
    try:
        return Expiry(days, on_expiry, max_events, max_storage_mb)
    except ValidationError:
        expiry = object.__new__(Expiry)
        for name, value in zip(
            ("max_age_days", "on_expiry", "max_events", "max_storage_mb"),
            (days, on_expiry, max_events, max_storage_mb),
            strict=True,
        ):
            object.__setattr__(expiry, name, value)
        return expiry


def _info(row: Sequence[Any]) -> BranchInfo:
    return BranchInfo(
        branch_id=row[0],
        parent=row[1],
        type=row[2],
        purpose=row[3],
        created_by=row[4],
        namespace_id=row[5],
        created_at=row[6],
        fork_size=row[7],
        expiry=_stored_expiry(row[8], row[11], row[9], row[10]),
        state=row[12],
        closed_at=row[13],
        closed_reason=row[14],
        create_seq=row[15],
    )


_COLUMNS: Final = (
    "branch_id, parent, type, purpose, created_by, namespace_id, created_at, fork_size, "
    "max_age_days, max_events, max_storage_mb, on_expiry, state, closed_at, closed_reason, "
    "create_seq"
)


class BranchRegistry:
    """``AppendHook`` keeping ``branch_meta`` in step with BRANCH_* operations.

    It validates BRANCH_CREATE (type, expiry, limits), BRANCH_CLOSE and BRANCH_POLICY payloads
    at append, refuses any entry appended to a branch that is not OPEN, and any entry that
    would take a branch past its ``max_events`` or ``max_storage_mb`` (RFC-0012 section 4).
    """

    def __init__(self, limits: BranchLimits | None = None) -> None:
        """Use ``limits`` (RFC-0012 defaults when None)."""
        self.limits = limits or BranchLimits()
        # (ledger id, branch) -> (seq of the next entry, bytes up to it), for max_storage_mb
        self._bytes: dict[tuple[str, str], tuple[int, int]] = {}
        self._waiver = 0
        self._states = ProvenStates()  # the stored states checked before a write

    @contextlib.contextmanager
    def limits_waived(self) -> Iterator[None]:
        """Let the appends in the body past ``max_events`` / ``max_storage_mb``.

        For what an erasure must write whatever the branch holds (``memroot.memory_root.
        erasure``): a right-to-erasure request is never blocked by a resource limit.
        """
        self._waiver += 1
        try:
            yield
        finally:
            self._waiver -= 1

    def _waived(self, entry: Entry) -> bool:
        # A TOMBSTONE only removes content; it is never refused for the branch's size.
        return self._waiver > 0 or (entry.kind is Kind.OP and entry.type == OpType.TOMBSTONE)

    def install(self, db: apsw.Connection) -> None:
        """Create the branch tables if missing."""
        db.execute(_SCHEMA)

    def apply_events(
        self, db: apsw.Connection, ledger: Ledger, entries: Sequence[Entry], contents: Sequence[str]
    ) -> list[OpInput]:
        """Check a run of events (the ledger's native batch path), as ``apply`` on each.

        Events on ``main`` have nothing to check (no state, no limits).
        """
        if entries[0].branch != CANONICAL_BRANCH:
            for entry, content in zip(entries, contents, strict=True):
                self.apply(db, ledger, entry, content)
        return []

    def apply(
        self, db: apsw.Connection, ledger: Ledger, entry: Entry, content: str | None
    ) -> list[OpInput]:
        """Validate and fold one entry (see the class docstring)."""
        # Folding committed entries again (``Ledger.replaying``), a fork is folded whole
        # after its parent, past the parent's BRANCH_CLOSE of it, with the sizes of today:
        # its entries passed the state and limit rules when they were appended.
        if entry.branch != CANONICAL_BRANCH and not ledger.replaying:
            row = db.execute(
                "SELECT state, max_events, max_storage_mb FROM branch_meta WHERE branch_id = ?",
                (entry.branch,),
            ).fetchone()
            if row is not None and entry.seq > 0:
                self._states.check(db, ledger, entry.branch)
            if row is not None and row[0] != "OPEN":
                raise RefusedError(
                    f"branch {entry.branch!r} is {row[0]}: nothing more can be appended to it"
                )
            if row is not None and entry.seq > 0 and not self._waived(entry):
                self._check_size(db, ledger, entry, content, row[1], row[2])
        if entry.kind is not Kind.OP:
            return []
        if entry.type == OpType.BRANCH_CREATE:
            self._create(db, ledger, entry)
        elif entry.type == OpType.BRANCH_CLOSE:
            self._states.check(db, ledger, _payload_branch(entry))
            self._close(db, entry, replaying=ledger.replaying)
        elif entry.type == OpType.BRANCH_POLICY:
            self._policy(db, entry)
        elif entry.type == OpType.BRANCH_MERGE:
            self._states.check(db, ledger, _payload_branch(entry))
            self._merge(db, entry)
        return []

    def _check_size(
        self,
        db: apsw.Connection,
        ledger: Ledger,
        entry: Entry,
        content: str | None,
        max_events: int | None,
        max_storage_mb: int | None,
    ) -> None:
        """RFC-0012 section 4 at append: refuse an entry that would cross a branch limit.

        ``max_events`` counts the entries after the branch genesis (as ``gc`` does), so
        entry ``max_events + 1`` is refused; ``max_storage_mb`` the bytes of the branch's
        entries and content, kept as a running total per branch (recounted from the
        store whenever an entry does not follow the one counted last, e.g. after a
        rolled-back append). Nothing of the refused append is written.

        Raises:
            RefusedError: naming the limit and the branch.
        """
        if max_events is not None and entry.seq > max_events:
            raise RefusedError(
                f"limit reached: branch {entry.branch!r} already holds {entry.seq - 1} entries "
                f"after its genesis (max_events = {max_events}); nothing was appended. Close it "
                "(`memroot branch close`) or fork a new branch with a higher max_events"
            )
        if max_storage_mb is None:
            return
        key = (ledger.ledger_id, entry.branch)
        cached = self._bytes.get(key)
        if cached is None or cached[0] != entry.seq:
            used = _branch_bytes(ledger.store.db, entry.branch)
        else:
            used = cached[1]
        used += len(entry.raw) + (0 if content is None else len(content.encode("utf-8")))
        if used > max_storage_mb * 1048576:
            self._bytes.pop(key, None)
            raise RefusedError(
                f"limit reached: branch {entry.branch!r} would hold {used / 1048576:.2f} MB "
                f"(max_storage_mb = {max_storage_mb}); nothing was appended. Close it "
                "(`memroot branch close`) or fork a new branch with a higher max_storage_mb"
            )
        self._bytes[key] = (entry.seq + 1, used)

    def _merge(self, db: apsw.Connection, entry: Entry) -> None:
        """RFC-0012 section 8, whoever appends the BRANCH_MERGE: into the parent, mergeable."""
        p = entry.body["payload"]
        branch_id = p.get("branch_id") if isinstance(p, dict) else None
        row = db.execute(
            "SELECT type, state, parent FROM branch_meta WHERE branch_id = ?", (branch_id,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no branch {branch_id!r} to merge")
        btype, state, parent = row
        if btype not in MERGEABLE_TYPES:
            raise RefusedError(f"a {btype} branch never merges (RFC-0012)")
        if state in ("DISCARDED", "ARCHIVED"):
            raise RefusedError(f"branch {branch_id!r} is {state}: it no longer merges")
        if parent != entry.branch:
            raise RefusedError(f"BRANCH_MERGE of {branch_id!r} belongs in its parent {parent!r}")
        items = p.get("items")
        if not isinstance(items, list):
            raise ValidationError(
                "BRANCH_MERGE payload.items must be a list", field="payload.items"
            )
        for item in items:
            if not isinstance(item, dict):
                raise ValidationError("BRANCH_MERGE items are objects", field="payload.items")
            if item.get("outcome") == "IMPORTED":
                db.execute(
                    "INSERT INTO branch_merges VALUES(?, ?, ?, ?)",
                    (
                        branch_id,
                        str(item.get("object_id")),
                        str(item.get("new_object_id")),
                        entry.seq,
                    ),
                )

    def _create(self, db: apsw.Connection, ledger: Ledger, entry: Entry) -> None:
        p = entry.body["payload"]
        btype = p.get("branch_type")
        if btype not in DEFAULT_EXPIRY_DAYS:
            raise ValidationError(
                f"branch_type {btype!r} must be one of {', '.join(DEFAULT_EXPIRY_DAYS)} "
                "(CANONICAL always exists)",
                field="payload.branch_type",
            )
        purpose = p.get("purpose")
        if not isinstance(purpose, str) or not purpose.strip():
            raise ValidationError("a branch needs a purpose", field="payload.purpose")
        # Folded again, a committed entry's expiry stands as accepted (bounds added later
        # do not apply to it).
        expiry = Expiry.from_payload(p.get("expiry"), recorded=ledger.replaying)
        actor = entry.body["actor_id"]
        if not ledger.replaying:
            self._check_limits(db, ledger, actor)
        fork = p.get("fork", {})
        db.execute(
            f"INSERT INTO branch_meta({_COLUMNS}) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                p["branch_id"],
                p.get("parent_branch_id", entry.branch),
                btype,
                purpose,
                actor,
                entry.body["namespace_id"],
                entry.ts,
                int(fork.get("tree_size", entry.seq)),
                expiry.max_age_days,
                expiry.max_events,
                expiry.max_storage_mb,
                expiry.on_expiry,
                "OPEN",
                None,
                None,
                entry.seq,
            ),
        )

    def _check_limits(self, db: apsw.Connection, ledger: Ledger, actor: str) -> None:
        """RFC-0012 section 7: refuse, naming the limit and branches the user could close."""
        open_rows: list[Any] = db.execute(
            "SELECT branch_id, created_by, purpose FROM branch_meta WHERE state = 'OPEN' "
            "ORDER BY created_at"
        ).fetchall()
        mine = [r for r in open_rows if r[1] == actor]
        hint = (
            "; close or discard one of: "
            + ", ".join(f"{r[0]} ({r[2]})" for r in (mine or open_rows)[:10])
            if open_rows
            else ""
        )
        if len(mine) >= self.limits.per_user:
            raise RefusedError(
                f"limit reached: {actor} has {len(mine)} open branches "
                f"(max_concurrent_branches_per_user = {self.limits.per_user})" + hint
            )
        if len(open_rows) >= self.limits.per_system:
            raise RefusedError(
                f"limit reached: {len(open_rows)} open branches in the system "
                f"(max_concurrent_branches_per_system = "
                f"{self.limits.per_system})" + hint
            )
        used = sum(_branch_bytes(ledger.store.db, r[0]) for r in mine)
        if used >= self.limits.storage_mb_per_user * 1024 * 1024:
            raise RefusedError(
                f"limit reached: {actor}'s open branches hold "
                f"{used / 1048576:.1f} MB (branch_storage_quota_per_user_mb = "
                f"{self.limits.storage_mb_per_user})" + hint
            )

    def _close(self, db: apsw.Connection, entry: Entry, *, replaying: bool) -> None:
        p = entry.body["payload"]
        branch_id, action = p.get("branch_id"), p.get("action")
        if action not in _STATE_AFTER:
            raise ValidationError(
                f"BRANCH_CLOSE action must be one of {', '.join(_STATE_AFTER)}",
                field="payload.action",
            )
        row = db.execute(
            "SELECT state, parent FROM branch_meta WHERE branch_id = ?", (branch_id,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no branch {branch_id!r} to close")
        if row[0] != "OPEN":
            raise RefusedError(f"branch {branch_id!r} is already {row[0]}")
        if row[1] != entry.branch:
            raise RefusedError(f"BRANCH_CLOSE of {branch_id!r} belongs in its parent {row[1]!r}")
        # Replaying, the children's own BRANCH_CLOSE entries (in this branch) come later.
        children = [] if replaying else open_children(db, str(branch_id))
        if children:
            # A child of a closed branch could go on growing from a parent nobody can append
            # to or merge into any more: its children end first.
            raise RefusedError(
                f"branch {branch_id!r} has open child branches: {', '.join(children)}; close, "
                "discard or archive them first"
            )
        db.execute(
            "UPDATE branch_meta SET state = ?, closed_at = ?, closed_reason = ? "
            "WHERE branch_id = ?",
            (_STATE_AFTER[action], entry.ts, str(p.get("reason", action)), branch_id),
        )

    def _policy(self, db: apsw.Connection, entry: Entry) -> None:
        p = entry.body["payload"]
        days = p.get("expiry_days")
        if not isinstance(days, dict) or not days:
            raise ValidationError(
                "BRANCH_POLICY needs expiry_days: {BRANCH_TYPE: days|null}",
                field="payload.expiry_days",
            )
        for btype, value in days.items():
            if btype not in DEFAULT_EXPIRY_DAYS:
                raise ValidationError(f"unknown branch type {btype!r}", field="payload.expiry_days")
            if value is not None and (type(value) is not int or not 1 <= value <= MAX_EXPIRY_DAYS):
                raise ValidationError(
                    f"expiry days for {btype} must be an integer from 1 to {MAX_EXPIRY_DAYS} "
                    "or null (no default)",
                    field="payload.expiry_days",
                )
            db.execute(
                "INSERT OR REPLACE INTO branch_policy VALUES(?, ?, ?)",
                (entry.body["namespace_id"], btype, value),
            )


def _payload_branch(entry: Entry) -> object:
    p = entry.body.get("payload")
    return p.get("branch_id") if isinstance(p, dict) else None


def open_children(db: apsw.Connection, branch_id: str) -> list[str]:
    """Return the OPEN branches forked from ``branch_id``, oldest first."""
    rows = db.execute(
        "SELECT branch_id FROM branch_meta WHERE parent = ? AND state = 'OPEN' "
        "ORDER BY created_at, branch_id",
        (branch_id,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def _branch_bytes(db: apsw.Connection, branch_id: str) -> int:
    """Bytes held by a branch's entries and content (a range scan of that branch only)."""
    found: Any = db.execute("SELECT no FROM branches WHERE name = ?", (branch_id,)).fetchone()
    if found is None:
        return 0
    no = int(found[0])
    row: Any = db.execute(
        "SELECT coalesce(sum(length(data) + coalesce(length(content), 0)), 0) "
        "FROM entries WHERE k >= ? AND k < ?",
        (no << BRANCH_SHIFT, (no + 1) << BRANCH_SHIFT),
    ).fetchone()
    return int(row[0])


def default_expiry_days(db: apsw.Connection, namespace_id: str, branch_type: str) -> int | None:
    """Return the default max age for a branch type in a namespace (None: no default)."""
    row = db.execute(
        "SELECT max_age_days FROM branch_policy WHERE namespace_id = ? AND branch_type = ?",
        (namespace_id, branch_type),
    ).fetchone()
    return DEFAULT_EXPIRY_DAYS.get(branch_type) if row is None else row[0]


def _registry(ledger: Ledger) -> BranchRegistry:
    for hook in ledger.hooks:
        if isinstance(hook, BranchRegistry):
            return hook
    raise ValueError("the ledger was opened without a BranchRegistry hook")


def create_branch(
    ledger: Ledger,
    *,
    branch_type: str,
    purpose: str,
    actor_id: str,
    actor_type: str = ActorType.AI_AGENT.value,
    namespace_id: str = "default",
    parent: str = CANONICAL_BRANCH,
    expiry: Expiry | None = None,
    expiry_days: int | None = None,
    branch_id: str | None = None,
    memory_root: bytes | None = None,
    policy_version: str = _POLICY_VERSION,
) -> tuple[Appended, Appended]:
    """Fork a branch with its RFC-0012 policy; return (BRANCH_CREATE, branch genesis).

    The expiry is ``expiry``, else ``expiry_days`` (with on_expiry ARCHIVE_BRANCH), else the
    namespace's default for the type, else the built-in default; a branch with none is refused.

    Raises:
        ValidationError: a bad type, purpose or expiry; RefusedError: a limit is reached (the
            message names it and branches to close), the parent is not open, the id exists.
    """
    _registry(ledger)
    branch_type = canonical(branch_type, DEFAULT_EXPIRY_DAYS, "branch_type")
    if expiry is None:
        days = expiry_days
        if days is None:
            days = default_expiry_days(ledger.derived.db, namespace_id, branch_type)
        if days is None:
            raise ValidationError(
                f"no expiry policy for a {branch_type} branch in namespace {namespace_id!r}: "
                "give expiry_days (unbounded branches are not permitted)",
                field="expiry_days",
            )
        expiry = Expiry(days)
    name = branch_id or f"{branch_type.lower()[:4]}-{new_uuid()[-12:]}"
    payload: dict[str, Any] = {
        "branch_id": name,
        "branch_type": branch_type,
        "created_by": actor_id,
        "expiry": expiry.to_payload(),
        "purpose": purpose,
    }
    if memory_root is None:
        memory_root = _latest_root(ledger, parent)
    if memory_root is not None:
        # SPEC 8: the fork is anchored at the parent's memory_root too; the branch's first
        # root then takes it as its parent.
        payload["memory_root"] = memory_root
    op = OpInput(
        op_type=OpType.BRANCH_CREATE.value,
        actor_id=actor_id,
        actor_type=actor_type,
        namespace_id=namespace_id,
        payload=payload,
        policy_version=policy_version,
        target_id=name,
        target_type="BRANCH",
    )
    return ledger.fork(op, parent=parent, genesis={"branch_type": branch_type})


def _latest_root(ledger: Ledger, branch: str) -> bytes | None:
    """Return the parent's newest memory root when the roots layer is installed."""
    from memroot.memory_root.hook import RootsHook
    from memroot.memory_root.records import latest_root

    if not any(isinstance(h, RootsHook) for h in ledger.hooks):
        return None
    record = latest_root(ledger.derived.db, branch)
    return None if record is None else record.root


def close_branch(
    ledger: Ledger,
    branch_id: str,
    *,
    action: str = "CLOSE",
    reason: str,
    actor_id: str,
    actor_type: str = ActorType.HUMAN_USER.value,
    namespace_id: str | None = None,
) -> Appended:
    """Close, discard or archive an open branch: a BRANCH_CLOSE entry in its parent.

    Raises:
        NotFoundError: no such branch; RefusedError: it is not open, or it has open child
            branches (named; end them first); ValidationError: action.
    """
    action = canonical(action, _STATE_AFTER, "action")
    info = get_branch(ledger, branch_id)
    op = _library_op(
        OpInput(
            op_type=OpType.BRANCH_CLOSE.value,
            actor_id=actor_id,
            actor_type=actor_type,
            namespace_id=namespace_id or info.namespace_id,
            payload={"action": action, "branch_id": branch_id, "reason": reason},
            policy_version=_POLICY_VERSION,
            target_id=branch_id,
            target_type="BRANCH",
        )
    )
    return ledger.append(op, branch=info.parent)


def set_branch_policy(
    ledger: Ledger,
    namespace_id: str,
    expiry_days: dict[str, int | None],
    *,
    actor_id: str,
    actor_type: str = ActorType.HUMAN_USER.value,
) -> Appended:
    """Record per-namespace default expiry days for branch types (None: no default).

    Raises:
        ValidationError: for an unknown type or a bad number of days.
    """
    op = OpInput(
        op_type=OpType.BRANCH_POLICY.value,
        actor_id=actor_id,
        actor_type=actor_type,
        namespace_id=namespace_id,
        payload={"expiry_days": expiry_days},
        policy_version=_POLICY_VERSION,
    )
    return ledger.append(_library_op(op))


def get_branch(ledger: Ledger, branch_id: str) -> BranchInfo:
    """Return a branch's policy record.

    Raises:
        NotFoundError: if there is no such branch.
    """
    row = ledger.derived.db.execute(
        f"SELECT {_COLUMNS} FROM branch_meta WHERE branch_id = ?", (branch_id,)
    ).fetchone()
    if row is None:
        raise NotFoundError(f"no branch {branch_id!r}")
    return _info(row)


def list_branches(ledger: Ledger, *, state: str | None = None) -> list[BranchInfo]:
    """Return every branch record (optionally only those in ``state``, any case), oldest first.

    Raises:
        ValidationError: ``state`` is not OPEN, CLOSED, DISCARDED or ARCHIVED.
    """
    sql = f"SELECT {_COLUMNS} FROM branch_meta"
    args: tuple[Any, ...] = ()
    if state is not None:
        sql += " WHERE state = ?"
        args = (canonical(state, _STATES, "state"),)
    return [_info(r) for r in ledger.derived.db.execute(sql + " ORDER BY created_at", args)]


_KEPT: Final = 12
"""``branch_meta`` columns a BRANCH_CREATE sets for good (all but state, closed_at/_reason);
``create_seq`` is the 16th and is checked by where the entry is read."""


def _edited_branch(info: BranchInfo, what: str) -> IntegrityError:
    return IntegrityError(
        f"strict read refused: branch {info.parent} entry {info.create_seq}: step 9: the "
        f"stored registry row of branch {info.branch_id} {what} (derived state edited); run "
        "`memroot verify`, or `memroot rebuild` to re-derive it",
        branch=info.parent,
        seq=info.create_seq,
        step=9,
    )


def check_branches(ledger: Ledger, infos: Sequence[BranchInfo]) -> None:
    """Check, on a strict ledger, that each served registry row is what its entry made.

    Each branch must be a branch of the ledger, and its row's policy columns (parent, type,
    purpose, creator, namespace, creation time, fork size, expiry) must be what its
    ``BRANCH_CREATE`` (read and proven at ``create_seq`` of the parent, one multi-leaf proof
    per parent) gives when folded again. The state (OPEN, CLOSED, ...) comes from
    BRANCH_CLOSE entries the row does not locate: it is left to verify step 9, which replays
    the whole registry. Run inside the read transaction the rows were read in; a non-strict
    ledger is not checked.

    Raises:
        IntegrityError: step 9, naming the branch and its BRANCH_CREATE entry, or the step
            of an entry that fails its strict read.
    """
    if not ledger.strict or not infos:
        return
    known = {b.name for b in ledger.store.branches()}
    by_parent: dict[str, list[BranchInfo]] = {}
    for info in infos:
        if info.branch_id not in known:
            raise _edited_branch(info, "names no branch of the ledger")
        by_parent.setdefault(info.parent, []).append(info)
    replay = apsw.Connection(":memory:")
    registry = BranchRegistry()
    registry.install(replay)
    try:
        for parent, group in by_parent.items():
            try:
                read = ledger.read_many([i.create_seq for i in group], parent, links=False)
            except NotFoundError:
                raise _edited_branch(group[0], "cites an entry its parent lacks") from None
            for info in group:
                entry = read[info.create_seq].entry
                if entry.kind is not Kind.OP or entry.type != OpType.BRANCH_CREATE:
                    raise _edited_branch(info, f"cites a {entry.type} entry")
                try:
                    with ledger.folding_committed():
                        registry._create(replay, ledger, entry)
                except (MemrootError, apsw.Error):
                    raise _edited_branch(info, "cites a BRANCH_CREATE that makes no row") from None
                want = replay.execute(
                    f"SELECT {_COLUMNS} FROM branch_meta WHERE branch_id = ?", (info.branch_id,)
                ).fetchone()
                stored = ledger.derived.db.execute(
                    f"SELECT {_COLUMNS} FROM branch_meta WHERE branch_id = ?", (info.branch_id,)
                ).fetchone()
                if want is None or stored is None or want[:_KEPT] != stored[:_KEPT]:
                    raise _edited_branch(info, "is not what its BRANCH_CREATE gives")
    finally:
        replay.close()


@dataclass(frozen=True, slots=True)
class GcAction:
    """One thing ``gc`` did, would do (``dry_run``), or could not do (``error``)."""

    branch_id: str
    action: str
    reason: str
    seq: int | None
    """The BRANCH_CLOSE entry's seq in the parent; None for a dry run or a failure."""
    error: str | None = None
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "branch_id": self.branch_id,
            "action": self.action,
            "reason": self.reason,
            "seq": self.seq,
            "error": self.error,
            "dry_run": self.dry_run,
        }


def _due(ledger: Ledger, info: BranchInfo, t: int) -> tuple[str, str] | None:
    """Return the (action, reason) gc owes ``info`` at time ``t``, or None."""
    if t >= info.expires_at + FORCE_CLOSE_GRACE_DAYS * DAY_US:
        return (
            "CLOSE",
            f"forced close: {FORCE_CLOSE_GRACE_DAYS} days past max age of "
            f"{info.expiry.max_age_days} days",
        )
    if t >= info.expires_at:
        return info.expiry.on_expiry, f"expired: max age of {info.expiry.max_age_days} days reached"
    if (
        info.expiry.max_events is not None
        and ledger.size(info.branch_id) - 1 > info.expiry.max_events
    ):
        return "CLOSE", f"max_events {info.expiry.max_events} exceeded"
    if (
        info.expiry.max_storage_mb is not None
        and _branch_bytes(ledger.store.db, info.branch_id) > info.expiry.max_storage_mb * 1048576
    ):
        return "CLOSE", f"max_storage_mb {info.expiry.max_storage_mb} exceeded"
    return None


def _depth(parents: dict[str, str], branch_id: str) -> int:
    depth, node, seen = 0, branch_id, set()
    while node in parents and node not in seen:
        seen.add(node)
        node = parents[node]
        depth += 1
    return depth


def gc(
    ledger: Ledger,
    *,
    now: int | None = None,
    clock: Callable[[], int] = now_us,
    actor_id: str = "memroot-gc",
    dry_run: bool = False,
) -> list[GcAction]:
    """Process expired branches (RFC-0012 section 7); idempotent, meant to run daily.

    A branch past its max age is handled per ``on_expiry`` (ARCHIVE_BRANCH or DISCARD_BRANCH);
    one 7 days past it is force-closed (CLOSE) whatever its on_expiry; one over ``max_events``
    or ``max_storage_mb`` is closed. Each action is a BRANCH_CLOSE entry in the parent (its
    ``ts`` the clock's, its payload's ``as_of`` the time gc judged by), appended in its own
    transaction; children come before their parents, so a parent due with its children closes
    after them. A branch gc cannot handle (a refused close, a damaged record) is reported as a
    ``GcAction`` with ``error`` and the others are still handled. ``dry_run`` appends nothing
    and returns what would be done.
    """
    t = clock() if now is None else now
    rows = ledger.derived.db.execute(
        f"SELECT {_COLUMNS} FROM branch_meta WHERE state = 'OPEN' ORDER BY created_at"
    ).fetchall()
    parents = {str(r[0]): str(r[1]) for r in rows}
    rows.sort(key=lambda r: -_depth(parents, str(r[0])))
    done: list[GcAction] = []
    closing: set[str] = set()
    for row in rows:
        branch_id = str(row[0])
        try:
            info = _info(row)
            due = _due(ledger, info, t)
        except MemrootError as e:
            done.append(GcAction(branch_id, "NONE", "could not read the branch", None, str(e)))
            continue
        if due is None:
            continue
        action, reason = due
        if dry_run:
            waiting = [c for c in open_children(ledger.derived.db, branch_id) if c not in closing]
            if waiting:
                error = f"open child branches: {', '.join(waiting)}"
                done.append(GcAction(branch_id, action, reason, None, error, dry_run=True))
            else:
                closing.add(branch_id)
                done.append(GcAction(branch_id, action, reason, None, dry_run=True))
            continue
        op = _library_op(
            OpInput(
                op_type=OpType.BRANCH_CLOSE.value,
                actor_id=actor_id,
                actor_type=ActorType.SYSTEM_PROCESS.value,
                namespace_id=info.namespace_id,
                payload={"action": action, "as_of": t, "branch_id": branch_id, "reason": reason},
                policy_version=_POLICY_VERSION,
                target_id=branch_id,
                target_type="BRANCH",
            )
        )
        try:
            made = ledger.append(op, branch=info.parent)
        except MemrootError as e:
            done.append(GcAction(branch_id, action, reason, None, str(e)))
            continue
        done.append(GcAction(branch_id, action, reason, made.seq))
    return done
