"""Provenance-only visibility of derived memory on conversation trees (seed 001, "branchmem").

Conversation history is a tree: editing a message, regenerating a reply or forking from a
checkpoint makes siblings. Events name their parent (``parent_event_id``); an agent reads "at
an anchor" event. The single rule: a derived memory object is visible at the anchor only when
**every** one of its evidence events lies on the anchor's ancestor path (the anchor included).
One source on a sibling hides the whole object. Switching the anchor changes nothing stored,
so an abandoned line's memories come back when the anchor moves back; with no anchor nothing
derived is returned (never the whole tree).

The parent links are stored as they come, and the path is walked at read time over what has
arrived (the ledger now refuses an event naming a parent it does not hold, docs/FORMAT.md
§3.1, so lines interleave in any order but a child never precedes its parent; the walk still
stops at a missing parent, for ledgers written before that rule).

``ConversationTree`` is an ``AppendHook`` keeping ``conv_parents(id, parent)`` in step with
appended events; ``ancestor_path`` and ``visible`` answer reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import apsw

from memroot.ledger import merkle
from memroot.ledger.entries import Entry, Kind, OpInput
from memroot.ledger.errors import MemrootError
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import Checkpoint, Verifier, open_checkpoint
from memroot.projections.views import View

__all__ = [
    "CONV_PARENTS_SCHEMA",
    "MAX_PATH",
    "ConversationTree",
    "PathStep",
    "ancestor_path",
    "ancestor_path_in",
    "filter_visible",
    "prove_path",
    "visible",
    "with_merged",
]

MAX_PATH: Final = 1_000_000  # a cycle guard: parent links come from callers
T = TypeVar("T")

CONV_PARENTS_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS conv_parents(id TEXT PRIMARY KEY, parent TEXT) STRICT, WITHOUT ROWID;
"""
"""The table ``ConversationTree`` keeps: each event's parent link."""


class ConversationTree:
    """``AppendHook`` recording each event's parent, for reads at an anchor."""

    def install(self, db: apsw.Connection) -> None:
        """Create ``conv_parents`` if missing."""
        db.execute(CONV_PARENTS_SCHEMA)

    def apply_events(
        self, db: apsw.Connection, ledger: Ledger, entries: Sequence[Entry], contents: Sequence[str]
    ) -> list[OpInput]:
        """Record the parent links of a run of events (the ledger's native batch path)."""
        db.executemany("INSERT OR IGNORE INTO conv_parents VALUES(?, ?)", self.rows(entries))
        return []

    @staticmethod
    def rows(events: Iterable[Entry]) -> list[tuple[str, str | None]]:
        """Return the ``conv_parents`` rows of some events: (event id, parent event id)."""
        return [(e.body["id"], e.body.get("parent_event_id")) for e in events]

    def apply(
        self, db: apsw.Connection, ledger: Ledger, entry: Entry, content: str | None
    ) -> list[OpInput]:
        """Record an event's parent link (every event, so that roots are known too)."""
        if entry.kind is Kind.EVENT:
            db.execute("INSERT OR IGNORE INTO conv_parents VALUES(?, ?)", self.rows([entry])[0])
        return []


def ancestor_path_in(parents: Mapping[str, str | None], anchor: str) -> set[str]:
    """Return ``anchor`` and its ancestors under ``parents`` (event id -> parent id or None).

    The walk stops at a root, at a parent that has not arrived yet, or at a cycle.
    """
    return _walk(parents.get, anchor)


def ancestor_path(db: apsw.Connection, anchor: str) -> set[str]:
    """Return ``anchor`` and its ancestors from the stored parent links (one lookup a step)."""

    def parent_of(event_id: str) -> str | None:
        row: Any = db.execute(
            "SELECT parent FROM conv_parents WHERE id = ?", (event_id,)
        ).fetchone()
        return None if row is None else row[0]

    return _walk(parent_of, anchor)


def _walk(parent_of: Callable[[str], str | None], anchor: str) -> set[str]:
    path = {anchor}
    node: str | None = parent_of(anchor)
    while node is not None and node not in path and len(path) < MAX_PATH:
        path.add(node)
        node = parent_of(node)
    return path


def with_merged(db: apsw.Connection, view: View, path: set[str]) -> set[str]:
    """Return ``path`` with the source-branch evidence of merged objects that join it.

    A merge import keeps the evidence it had in its branch: events the view does not hold,
    on no path of the target's conversations. On the target, each such event stands where
    its branch's line left the target's conversation tree: at its nearest ancestor the view
    holds (the event the branch's conversation continued from). It is on ``path`` when that
    ancestor is; an event whose line never joins the view's events (a conversation started
    in the branch) joins every path. So an import is visible at the target's anchors on the
    line the branch continued, and its later operations are gated the same way.
    """
    cond, params = view.versions("o", "mem_objects")
    imported = {
        e
        for (ev,) in db.execute(
            f"SELECT o.evidence_ids FROM mem_objects o WHERE o.source_type = 'IMPORTED' AND {cond}",
            params,
        )
        for e in str(ev).split(",")
        if e and e not in path
    }
    if not imported:
        return path
    e_cond, e_params = view.events("ev")

    def held(event_id: str) -> bool:
        row = db.execute(
            f"SELECT 1 FROM mem_events ev WHERE ev.id = ? AND {e_cond}", (event_id, *e_params)
        ).fetchone()
        return row is not None

    def parent_of(event_id: str) -> str | None:
        row: Any = db.execute(
            "SELECT parent FROM conv_parents WHERE id = ?", (event_id,)
        ).fetchone()
        return None if row is None else row[0]

    out = set(path)
    for e in imported:
        if held(e):
            continue  # an event of the view: the usual rule
        node, seen = parent_of(e), {e}
        while node is not None and node not in seen and not held(node):
            seen.add(node)
            node = parent_of(node)
        if node is None or node in seen or node in path:
            out.add(e)
    return out


def visible(evidence_ids: Iterable[str], path: set[str] | None) -> bool:
    """Return True when every evidence event lies on the anchor's path.

    With no anchor (``path`` None) nothing derived is visible; an object with no evidence is
    never visible at an anchor either (it cannot be placed on any path).
    """
    if path is None:
        return False
    ids = list(evidence_ids)
    return bool(ids) and all(e in path for e in ids)


def filter_visible(
    items: Sequence[T], evidence_of: Callable[[T], Iterable[str]], path: set[str] | None
) -> list[T]:
    """Return the items whose evidence is entirely on ``path`` (see ``visible``)."""
    return [item for item in items if visible(evidence_of(item), path)]


@dataclass(frozen=True, slots=True)
class PathStep:
    """One event on an anchor's ancestor path, as the ledger's entries (not a cache) say."""

    event_id: str
    branch: str | None
    seq: int | None
    entry_hash: bytes | None
    parent: str | None
    proven_in: int | None
    """Size of the signed checkpoint the event was proven in (None: not proven)."""
    problem: str | None

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "event_id": self.event_id,
            "branch": self.branch,
            "seq": self.seq,
            "entry_hash": None if self.entry_hash is None else self.entry_hash.hex(),
            "parent": self.parent,
            "proven_in": self.proven_in,
            "problem": self.problem,
        }


def prove_path(ledger: Ledger, anchor: str, vkeys: Sequence[str] = ()) -> list[PathStep]:
    """Walk ``anchor``'s ancestor path through the entries and prove every event on it.

    Each event is found by id, decoded strictly, its ``parent_event_id`` read from the entry
    itself, and its entry proven (RFC 9162 inclusion) in the newest signed checkpoint of its
    branch, opened with ``vkeys`` (default: the ledger's genesis keys). A step's ``problem``
    says what failed: not in the ledger (a parent not arrived yet, or lost), not yet covered
    by a checkpoint, or a proof or signature that does not verify.
    """
    verifiers = [Verifier.from_vkey(k) for k in (vkeys or ledger.genesis_vkeys())]
    signed: dict[str, Checkpoint] = {}  # branch -> its newest checkpoint, opened once

    def checkpoint_of(branch: str) -> Checkpoint:
        if branch not in signed:
            note = ledger.latest_checkpoint(branch)
            if note is None:
                raise MemrootError("no signed checkpoint on this branch")
            signed[branch] = open_checkpoint(note, verifiers).checkpoint
        return signed[branch]

    steps: list[PathStep] = []
    seen: set[str] = set()
    node: str | None = anchor
    while node is not None and node not in seen and len(steps) < MAX_PATH:
        seen.add(node)
        found = ledger.find_event(node)
        if found is None:
            steps.append(PathStep(node, None, None, None, None, None, "not in the ledger"))
            break
        branch, seq = found
        try:
            entry = ledger.entry(seq, branch)
        except MemrootError as e:
            steps.append(PathStep(node, branch, seq, None, None, None, f"unreadable: {e}"))
            break
        parent = entry.body.get("parent_event_id")
        parent = parent if isinstance(parent, str) else None
        problem: str | None = None
        proven: int | None = None
        if entry.body.get("id") != node:
            problem = "the event index points at another entry"
        else:
            try:
                cp = checkpoint_of(branch)
                if cp.size <= seq:
                    problem = f"not covered yet by a signed checkpoint (size {cp.size})"
                else:
                    proof = ledger.inclusion_proof(seq, cp.size, branch)
                    merkle.verify_inclusion(entry.hash, seq, cp.size, proof, cp.root)
                    proven = cp.size
            except MemrootError as e:
                problem = str(e)
        steps.append(PathStep(node, branch, seq, entry.hash, parent, proven, problem))
        node = parent
    return steps
