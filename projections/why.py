"""Why an agent believes something: an object's history and evidence, each entry proven.

``why(ledger, object_id)`` returns every operation that touched the object (the entries that
made each of its versions, and those that linked it: SUPERSEDE, CONTRADICTION_NOTED, RELATE,
SUMMARY_CREATED) and every event cited as its evidence (with the content, unless a TOMBSTONE
erased it). Each comes with its seq, its entry hash and an RFC 9162 inclusion proof against the
latest signed checkpoint, checked here before it is returned, so an auditor holding the
ledger's verifier key can check every step offline.

``why(ledger, object_id, anchor=E)`` adds ``at_anchor``: whether the object is visible at the
conversation anchor ``E``, its state there, and for each operation that changed it whether it
applies at ``E`` and, if not, why (its provenance is off the path, or the state the replay
reached there does not allow it; ``memroot.projections.gated``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memroot.ledger import merkle
from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.errors import NotFoundError
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import SignedCheckpoint
from memroot.projections.checked import refuse_deleted
from memroot.projections.gated import AnchorState
from memroot.projections.hook import sync
from memroot.projections.model import MemoryObject
from memroot.projections.query import anchor_path_of, edges_of, get_object, object_history
from memroot.projections.strict_rows import check_objects
from memroot.projections.views import view_of

__all__ = ["AnchorWhy", "EvidenceStep", "OperationStep", "Why", "why"]


@dataclass(frozen=True, slots=True)
class OperationStep:
    """One operation entry that touched the object, with its inclusion proof."""

    seq: int
    entry_hash: bytes
    op_type: str
    op_id: str
    actor_id: str
    actor_type: str
    ts: int
    version: int | None
    proof: tuple[bytes, ...] | None
    branch: str = CANONICAL_BRANCH

    def to_dict(self) -> dict[str, Any]:
        """Return the step as a JSON-ready dict (hashes in hex)."""
        return {
            "branch": self.branch,
            "seq": self.seq,
            "entry_hash": self.entry_hash.hex(),
            "op_type": self.op_type,
            "op_id": self.op_id,
            "actor_id": self.actor_id,
            "actor_type": self.actor_type,
            "ts": self.ts,
            "version": self.version,
            "proof": None if self.proof is None else [h.hex() for h in self.proof],
        }


@dataclass(frozen=True, slots=True)
class EvidenceStep:
    """One evidence event, its content (None once erased) and its inclusion proof."""

    event_id: str
    seq: int
    entry_hash: bytes
    actor_id: str
    ts: int
    content: str | None
    erased_by: int | None
    proof: tuple[bytes, ...] | None
    branch: str = CANONICAL_BRANCH

    def to_dict(self) -> dict[str, Any]:
        """Return the step as a JSON-ready dict (hashes in hex)."""
        return {
            "branch": self.branch,
            "event_id": self.event_id,
            "seq": self.seq,
            "entry_hash": self.entry_hash.hex(),
            "actor_id": self.actor_id,
            "ts": self.ts,
            "content": self.content,
            "erased_by": self.erased_by,
            "proof": None if self.proof is None else [h.hex() for h in self.proof],
        }


@dataclass(frozen=True, slots=True)
class AnchorWhy:
    """The object at a conversation anchor: visible or not, its state, and each operation.

    ``steps`` are JSON-ready dicts: ``branch``, ``seq``, ``op_id``, ``op_type``,
    ``provenance``, ``applied_globally``, ``applies`` (at the anchor) and ``reason`` (why not).
    """

    anchor: str
    visible: bool
    object: MemoryObject | None
    steps: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "anchor": self.anchor,
            "visible": self.visible,
            "object": None if self.object is None else self.object.to_dict(),
            "operations": list(self.steps),
        }


@dataclass(frozen=True, slots=True)
class Why:
    """An object's current (or last) version, its history and evidence, and the checkpoint."""

    object: MemoryObject
    versions: tuple[MemoryObject, ...]
    operations: tuple[OperationStep, ...]
    evidence: tuple[EvidenceStep, ...]
    checkpoint: SignedCheckpoint | None
    checkpoints: tuple[tuple[str, SignedCheckpoint], ...] = ()
    """Per branch, the checkpoint its steps are proven against (a branch object's history and
    evidence may lie on ancestor branches, before the fork)."""
    at_anchor: AnchorWhy | None = None
    """Given an anchor: the object as it is there (``AnchorWhy``)."""

    def to_dict(self) -> dict[str, Any]:
        """Return everything as a JSON-ready dict (hashes and roots in hex)."""
        cp = self.checkpoint
        out = {
            "object": self.object.to_dict(),
            "versions": [v.to_dict() for v in self.versions],
            "operations": [o.to_dict() for o in self.operations],
            "evidence": [e.to_dict() for e in self.evidence],
            "checkpoint": _cp_json(cp),
            "checkpoints": {b: _cp_json(c) for b, c in self.checkpoints},
        }
        if self.at_anchor is not None:
            out["at_anchor"] = self.at_anchor.to_dict()
        return out


def _cp_json(cp: SignedCheckpoint | None) -> dict[str, Any] | None:
    if cp is None:
        return None
    return {
        "origin": cp.checkpoint.origin,
        "size": cp.checkpoint.size,
        "root": cp.checkpoint.root.hex(),
        "note": cp.note,
    }


def _checkpoint(ledger: Ledger, branch: str) -> SignedCheckpoint | None:
    """Return the branch's newest signed checkpoint (nothing is signed or written: a read).

    A strict ledger's head checkpoint covers every entry; a non-strict one (forensics) may
    have an unsigned tail, whose entries then come without a proof.
    """
    return ledger.head_checkpoint(branch)


def why(
    ledger: Ledger, object_id: str, *, branch: str = CANONICAL_BRANCH, anchor: str | None = None
) -> Why:
    """Return the history and evidence of a memory object, every entry with its proof.

    With ``anchor`` (an event id) the result also says how the object is at that
    conversation anchor (``Why.at_anchor``).

    Entries newer than the checkpoint (only when the signing key is not available and the
    newest stored checkpoint is older than the head) come without a proof.

    Raises:
        NotFoundError: if no such object ever existed on the branch, or ``anchor`` is no
            event the branch sees.
        ProofError: if a computed proof does not verify against the checkpoint (a damaged
            tree; ``memroot verify`` says more).
    """
    sync(ledger, branch)
    db = ledger.derived.db
    with ledger.reading():
        versions = object_history(db, object_id, branch=branch)
        if not versions:
            if ledger.strict:
                refuse_deleted(db, object_id, branch)
            raise NotFoundError(f"no memory object {object_id} on branch {branch}")
        check_objects(ledger, [versions[-1]], branch)  # strict: the row is what its ops give
        version_at = {(v.branch, v.seq): v.version for v in versions}
        linked = {(e.branch, e.seq) for e in edges_of(db, object_id, branch=branch)}
        evidence_ids = list(dict.fromkeys(e for v in versions for e in v.evidence_ids))
        events = {
            r[0]: (str(r[3]), int(r[1]), r[2])
            for r in db.execute(
                f"SELECT id, seq, erased_by, branch FROM mem_events WHERE id IN "
                f"({', '.join('?' * len(evidence_ids))})",
                evidence_ids,
            )
        }
    cps: dict[str, SignedCheckpoint | None] = {}

    def proof(on: str, seq: int, entry_hash: bytes) -> tuple[bytes, ...] | None:
        # Each step is proven in the tree of the branch its entry lives on: a branch object's
        # history and evidence before the fork lie on its ancestors.
        if on not in cps:
            cps[on] = _checkpoint(ledger, on)
        cp = cps[on]
        if cp is None or seq >= cp.checkpoint.size:
            return None
        path = ledger.inclusion_proof(seq, cp.checkpoint.size, on)
        merkle.verify_inclusion(entry_hash, seq, cp.checkpoint.size, path, cp.checkpoint.root)
        return tuple(path)

    ops = []
    for on, seq in sorted(set(version_at) | linked, key=lambda k: (k[0] != branch, k)):
        e = ledger.entry(seq, on)
        b = e.body
        ops.append(
            OperationStep(
                seq,
                e.hash,
                e.type,
                str(b["id"]),
                str(b["actor_id"]),
                str(b["actor_type"]),
                e.ts,
                version_at.get((on, seq)),
                proof(on, seq, e.hash),
                on,
            )
        )
    evidence = []
    for event_id in evidence_ids:
        if event_id not in events:  # pragma: no cover - evidence is checked at ASSERT
            continue
        on, seq, erased_by = events[event_id]
        e = ledger.entry(seq, on)
        evidence.append(
            EvidenceStep(
                event_id,
                seq,
                e.hash,
                str(e.body["actor_id"]),
                e.ts,
                ledger.content(seq, on),
                erased_by,
                proof(on, seq, e.hash),
                on,
            )
        )
    if branch not in cps:
        cps[branch] = _checkpoint(ledger, branch)
    at_anchor = None
    if anchor is not None:
        with ledger.reading():
            at_anchor = _at_anchor(ledger, object_id, branch, anchor, ops)
    return Why(
        versions[-1],
        tuple(versions),
        tuple(ops),
        tuple(evidence),
        cps[branch],
        tuple((b, c) for b, c in sorted(cps.items()) if c is not None),
        at_anchor,
    )


def _at_anchor(
    ledger: Ledger, object_id: str, branch: str, anchor: str, ops: list[OperationStep]
) -> AnchorWhy:
    """Replay the object's operations through the anchor's path and say what applies there."""
    db = ledger.derived.db
    view = view_of(db, branch)
    path = anchor_path_of(db, view, anchor)
    current = get_object(db, object_id, branch=branch)
    state = AnchorState(db, view, path)
    visible, at, gated_steps = state.explain(current)
    created_from = list(state.folder.creation_evidence(current))
    gated = {(s.op.branch, s.op.seq) for s in gated_steps}
    steps: list[dict[str, Any]] = []
    for o in ops:
        if o.version is None or (o.branch, o.seq) in gated:
            continue
        # Before the object's first operation with provenance: ungated, the replay's base.
        if o.version == 1:
            reason = (
                "creates the object; all its evidence lies on the path"
                if visible
                else "creates the object; its evidence is not all on this path, so it is hidden"
            )
        else:
            reason = "no provenance: applies everywhere (before any gated operation)"
        steps.append(
            {
                "branch": o.branch,
                "seq": o.seq,
                "op_id": o.op_id,
                "op_type": o.op_type,
                "provenance": created_from if o.version == 1 else [],
                "applied_globally": True,
                "applies": o.version != 1 or visible,
                "reason": reason,
            }
        )
    steps += [s.to_dict() for s in gated_steps]
    return AnchorWhy(anchor, visible, at, tuple(steps))
