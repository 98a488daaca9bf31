"""The built-in projections and the payloads of the two audit-record operations they read.

Every built-in takes a ``namespaces`` parameter (a slice rule: fold only operations whose
``namespace_id`` is listed; empty means all) and an ``id`` so one rule can be registered
several times with different slices (``failure-motifs:title-mismatch`` with
``motifs=("TITLE_MISMATCH",)``, as in the memory_root ticket). Summaries are canonical CBOR
maps keyed by item, so every item of a summary is addressable (``root show``, ``root diff``,
and a future ``FALSIFY`` of one summary item). Summaries stay bounded whatever the ledger's
size (a root stores every summary): lists are capped by a parameter, and ``corrections``
commits to the full list by a hash chain instead of carrying it.

Built-ins (version 1 unless said):

``failure-motifs``  ``VIOLATION_RECORDED``:
    version 2 (written since 2026-12-02): ``{motif: {"count", "error", "sources"}}``, a
    deterministic Space-Saving top-k of motifs and of sources within each, bounded. Version 1
    (``{motif: {"count", "distinct_sources", "sources"}}``, whose fold state counts every
    source it met) stays registered as retired, to replay roots that list it.
``corrections``  ``CORRECTION_APPLIED``: ``{"total", "by_motif", "by_verifier", "recent",
    "chain"}``; version 2 (written since 2026-12-02): ``by_motif`` / ``by_verifier`` are
    Space-Saving tables ``{text: [c, e]}`` of at most 32 keys each, bounded. Version 1 (one
    exact count for every motif and verifier text met) stays registered as retired, to
    replay its roots.
``epistemic-distribution``  ``ASSERT`` / ``EPISTEMIC_TRANSITION``: ``{epistemic_type: n}``
``lifecycle-counts``  ``ASSERT`` / ``DEPRECATE`` / ``SUPERSEDE`` / ``ARCHIVE``:
    version 2 (written since this version): ``{state: n}``, how many times an operation moved
    an object into each state, bounded. Version 1 (``{state: n}`` objects now in each state,
    whose fold state remembers every deprecated object not yet archived, to tell an
    ``ARCHIVE``'s from-state) stays registered as retired, to replay roots that list it.
``falsification-state``  ``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` / ``CASCADE``:
    version 2 (written since memory roots v2): ``{target_type: {state: n}}``, how many times
    an operation set each state, bounded; each item's own state is a leaf of the memory map
    (docs/FORMAT.md §6.13). Version 1 (``{target_type: {target_id: {"state", "seq"}}}``,
    growing with every item named) stays registered as retired, to replay v1 roots.

Kept whole: each retired version sits beside the version that replaced it, and both share
the slice rule, the payload readers and the Space-Saving count (``_space_saving``,
``_fold_correction``); the rules are one format (docs/FORMAT.md §6.6), read in one place.

Projections fold what the operations say; validating them is the job of the layer that owns
each operation (memory model, falsification). The two operations defined here are validated
at append by ``check_payload``:

``VIOLATION_RECORDED`` (an audit finding or violation against the agent):
    ``motif`` (required, ``[A-Za-z0-9][A-Za-z0-9_.:/-]{0,99}``, e.g. ``TITLE_MISMATCH``),
    ``source`` (required text: what produced it, e.g. a source title or retrieval path),
    ``detail`` / ``verifier`` (optional text), ``evidence_ids`` (optional list of UUIDs).
``CORRECTION_APPLIED`` (an operator- or verifier-accepted correction):
    ``correction`` (required text: what was corrected), ``accepted_by`` (required text: the
    verifier or operator that accepted it), ``motif`` (optional, as above), ``violation_id``
    (optional UUID of the ``VIOLATION_RECORDED`` it fixes), ``benchmark`` / ``policy_ref``
    (optional text: what proved the fix, what allowed it), ``evidence_ids`` (optional UUIDs).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from memroot.ledger import encoding
from memroot.ledger.entries import Entry, check_uuid
from memroot.ledger.errors import DecodeError, ValidationError
from memroot.ledger.hashing import sha256
from memroot.ledger.vocab import LifecycleState, OpType
from memroot.projections.projection import Projection, Summary

__all__ = [
    "CORRECTION_FIELDS",
    "MOTIF_RE",
    "VIOLATION_FIELDS",
    "Corrections",
    "CorrectionsTopK",
    "EpistemicDistribution",
    "FailureMotifs",
    "FailureMotifsTopK",
    "FalsificationCounts",
    "FalsificationState",
    "ItemStates",
    "LifecycleCounts",
    "LifecycleTransitions",
    "MemoryStateDigest",
    "builtin_projections",
    "check_payload",
    "retired_projections",
]

# Plain strings: comparing with an enum member goes through the enum's descriptor.
_VIOLATION_RECORDED: Final = OpType.VIOLATION_RECORDED.value
_CORRECTION_APPLIED: Final = OpType.CORRECTION_APPLIED.value
_ASSERT: Final = OpType.ASSERT.value
_EPISTEMIC_TRANSITION: Final = OpType.EPISTEMIC_TRANSITION.value
_DEPRECATE: Final = OpType.DEPRECATE.value
_SUPERSEDE: Final = OpType.SUPERSEDE.value
_ARCHIVE: Final = OpType.ARCHIVE.value
_CASCADE: Final = OpType.CASCADE.value
_ACTIVE: Final = LifecycleState.ACTIVE.value
_DEPRECATED: Final = LifecycleState.DEPRECATED.value
_SUPERSEDED: Final = LifecycleState.SUPERSEDED.value
_ARCHIVED: Final = LifecycleState.ARCHIVED.value

MOTIF_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,99}\Z")
_MAX_TEXT: Final = 4096
_MAX_EVIDENCE: Final = 1000

# field -> (required, kind); kind is "text", "motif", "uuid" or "uuids".
VIOLATION_FIELDS: Final[Mapping[str, tuple[bool, str]]] = {
    "motif": (True, "motif"),
    "source": (True, "text"),
    "detail": (False, "text"),
    "verifier": (False, "text"),
    "evidence_ids": (False, "uuids"),
}
CORRECTION_FIELDS: Final[Mapping[str, tuple[bool, str]]] = {
    "correction": (True, "text"),
    "accepted_by": (True, "text"),
    "motif": (False, "motif"),
    "violation_id": (False, "uuid"),
    "benchmark": (False, "text"),
    "policy_ref": (False, "text"),
    "evidence_ids": (False, "uuids"),
}


def _check_fields(
    payload: Mapping[str, Any], spec: Mapping[str, tuple[bool, str]], op: str
) -> None:
    for name in sorted(set(payload) - set(spec)):
        raise ValidationError(f"{op} payload has unknown field {name!r}", field=f"payload.{name}")
    for name, (required, kind) in spec.items():
        where = f"payload.{name}"
        value = payload.get(name)
        if value is None:
            if required:
                raise ValidationError(f"{op} payload needs {name!r}", field=where)
            continue
        if kind == "uuids":
            if type(value) is not list or len(value) > _MAX_EVIDENCE:
                raise ValidationError(
                    f"{op} {name} must be a list of at most {_MAX_EVIDENCE} UUIDs", field=where
                )
            for v in value:
                check_uuid(v, where)
        elif kind == "uuid":
            check_uuid(value, where)
        elif type(value) is not str or not value or len(value) > _MAX_TEXT:
            raise ValidationError(
                f"{op} {name} must be a non-empty string of at most {_MAX_TEXT} characters",
                field=where,
            )
        elif kind == "motif" and not MOTIF_RE.match(value):
            raise ValidationError(
                f"{op} {name} {value!r} must match {MOTIF_RE.pattern} (e.g. TITLE_MISMATCH)",
                field=where,
            )


def check_payload(op_type: str, payload: Mapping[str, Any]) -> None:
    """Validate the payload of ``VIOLATION_RECORDED`` or ``CORRECTION_APPLIED``.

    Other operation types pass untouched (their owners validate them).

    Raises:
        ValidationError: naming the missing, unknown or malformed payload field.
    """
    if op_type == _VIOLATION_RECORDED:
        _check_fields(payload, VIOLATION_FIELDS, op_type)
    elif op_type == _CORRECTION_APPLIED:
        _check_fields(payload, CORRECTION_FIELDS, op_type)


def _payload(entry: Entry) -> dict[str, Any]:
    payload = entry.body.get("payload")
    return payload if type(payload) is dict else {}


def _text_or_none(value: Any) -> str | None:
    return value if type(value) is str and value else None


def _summary(items: dict[str, Any], count: int | None = None) -> Summary:
    return Summary(encoding.encode(items), len(items) if count is None else count)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Sliced:
    """Shared parts of the built-ins: an id and the namespace slice.

    ``summary_is_canonical``: every summary is ``encoding.encode``'s output (``_summary``),
    so the writer need not decode it to check it (``memory_root._fold.Folder.outputs``); a
    subclass that makes its summary otherwise sets it False.
    """

    summary_is_canonical: ClassVar[bool] = True
    id: str
    namespaces: tuple[str, ...] = ()
    version: int = 1

    def _slice(self) -> dict[str, Any]:
        return {"namespaces": sorted(set(self.namespaces))}

    def _in_slice(self, entry: Entry) -> bool:
        return not self.namespaces or entry.body.get("namespace_id") in self.namespaces


def _require_room(projection: object, name: str, fields: tuple[str, ...]) -> None:
    """Refuse a top-k table of ``projection`` (named ``name``) whose ``fields`` are not >= 1.

    Raises:
        ValueError: naming the field, if one is not a positive int.
    """
    for field in fields:
        n = getattr(projection, field)
        if type(n) is not int or n < 1:
            raise ValueError(f"{name} {field} must be a positive int, got {n!r}")


def _violation(proj: _Sliced, motifs: tuple[str, ...], entry: Entry) -> tuple[str, str] | None:
    """Return a ``VIOLATION_RECORDED``'s ``(motif, source)`` when ``proj`` counts it, else None.

    One reading for both versions of ``failure-motifs``: the entry in the projection's slice,
    both fields texts, and the motif among ``motifs`` when any are named.
    """
    if entry.type != _VIOLATION_RECORDED or not proj._in_slice(entry):
        return None
    p = _payload(entry)
    motif, source = _text_or_none(p.get("motif")), _text_or_none(p.get("source"))
    if motif is None or source is None or (motifs and motif not in motifs):
        return None
    return motif, source


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureMotifs(_Sliced):
    """Count of recorded violations grouped by motif and, within a motif, by source.

    ``motifs`` restricts the projection to the listed motifs (empty: every motif);
    ``top_sources`` bounds how many sources a motif lists (the most frequent, ties by name),
    so a summary stays small when sources are free text. Summary:
    ``{motif: {"count": n, "distinct_sources": d, "sources": {source: n}}}``; count = number of
    motifs.

    Retired (``retired_projections``): version 2, ``FailureMotifsTopK``, replaced it, because
    its fold state keeps a count for every distinct source (free text), which grows with the
    history and every root stored again. It stays registered so that roots listing it replay.
    """

    id: str = "failure-motifs"
    motifs: tuple[str, ...] = ()
    top_sources: int = 100
    types: ClassVar[frozenset[str] | None] = frozenset({OpType.VIOLATION_RECORDED.value})

    @property
    def params(self) -> Mapping[str, Any]:
        """``{"motifs": [...], "namespaces": [...], "top_sources": n}``, lists sorted."""
        return {
            "motifs": sorted(set(self.motifs)),
            "top_sources": self.top_sources,
            **self._slice(),
        }

    def initial(self) -> dict[str, dict[str, int]]:
        """Return ``{}``: no motif seen yet."""
        return {}

    def fold(self, state: dict[str, dict[str, int]], entry: Entry) -> dict[str, dict[str, int]]:
        """Count one ``VIOLATION_RECORDED`` under its motif and source."""
        seen = _violation(self, self.motifs, entry)
        if seen is None:
            return state
        motif, source = seen
        sources = state.setdefault(motif, {})
        sources[source] = sources.get(source, 0) + 1
        return state

    def summarize(self, state: dict[str, dict[str, int]]) -> Summary:
        """Return ``{motif: {"count", "distinct_sources", "sources"}}``."""
        out = {}
        for motif, sources in state.items():
            top = sorted(sources.items(), key=lambda kv: (-kv[1], kv[0]))[: self.top_sources]
            out[motif] = {
                "count": sum(sources.values()),
                "distinct_sources": len(sources),
                "sources": dict(top),
            }
        return _summary(out)


def _space_saving(
    table: dict[str, Any], key: str, capacity: int, at: str | int, new: Callable[[int, int], Any]
) -> Any:
    """Count ``key`` in a Space-Saving table of at most ``capacity`` keys; return its entry.

    ``table`` maps each monitored key to an entry holding its count at index ``at`` (a
    ``[count, error]`` list, ``at`` 0, or a ``{"count", "error", ...}`` map, ``at``
    ``"count"``); ``new(count, error)`` makes a fresh entry. A monitored key adds 1 to its
    count; a new key takes a free place at ``(1, 0)``; when the table is full, the key with
    the smallest count (of those, the greatest in code point order) leaves and the new key
    takes its place at ``(c + 1, c)``, ``c`` the count it had (docs/FORMAT.md §6.6).
    """
    entry = table.get(key)
    if entry is not None:
        entry[at] += 1
        return entry
    if len(table) < capacity:
        entry = table[key] = new(1, 0)
        return entry
    c = min(e[at] for e in table.values())
    del table[max(k for k, e in table.items() if e[at] == c)]
    entry = table[key] = new(c + 1, c)
    return entry


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureMotifsTopK(_Sliced):
    """``failure-motifs`` version 2: recorded violations by motif and source, bounded.

    A deterministic Space-Saving sketch (Metwally, Agrawal, El Abbadi, 2005) at two levels:
    at most ``top_motifs`` motifs, and within each at most ``top_sources`` sources, each with
    a count and the most it may overstate (``error``): the true count lies in ``[count -
    error, count]``, and every motif (source) seen more than N / capacity times is listed, N
    the violations counted at that level. Summary (= the fold state)::

        {motif: {"count": c, "error": e, "sources": {source: [c, e]}}}

    count = the motifs listed. Version 1 (``FailureMotifs``) kept a count for every source
    it met, to rank its top ``top_sources``: a fold state growing with the distinct sources,
    written again with every root (470 KB at 10,000 sources). The exact rule, ties included,
    is docs/FORMAT.md §6.6.
    """

    id: str = "failure-motifs"
    version: int = 2
    motifs: tuple[str, ...] = ()
    top_motifs: int = 32
    top_sources: int = 32
    types: ClassVar[frozenset[str] | None] = FailureMotifs.types

    def __post_init__(self) -> None:
        """Refuse a sketch without room.

        Raises:
            ValueError: if ``top_motifs`` or ``top_sources`` is not a positive int.
        """
        _require_room(self, "failure-motifs", ("top_motifs", "top_sources"))

    @property
    def params(self) -> Mapping[str, Any]:
        """``{"motifs": [...], "namespaces": [...], "top_motifs": m, "top_sources": n}``."""
        return {
            "motifs": sorted(set(self.motifs)),
            "top_motifs": self.top_motifs,
            "top_sources": self.top_sources,
            **self._slice(),
        }

    def initial(self) -> dict[str, dict[str, Any]]:
        """Return ``{}``: no motif seen yet."""
        return {}

    def fold(self, state: dict[str, dict[str, Any]], entry: Entry) -> dict[str, dict[str, Any]]:
        """Count one ``VIOLATION_RECORDED`` under its motif, then under its source there."""
        seen = _violation(self, self.motifs, entry)
        if seen is None:
            return state
        motif, source = seen
        at = _space_saving(state, motif, self.top_motifs, "count", _motif_entry)
        _space_saving(at["sources"], source, self.top_sources, 0, _source_entry)
        return state

    def summarize(self, state: dict[str, dict[str, Any]]) -> Summary:
        """Return the sketch: ``{motif: {"count", "error", "sources": {source: [c, e]}}}``."""
        return _summary(state)


def _motif_entry(count: int, error: int) -> dict[str, Any]:
    return {"count": count, "error": error, "sources": {}}


def _source_entry(count: int, error: int) -> list[int]:
    return [count, error]


_CHAIN_START: Final = bytes(32)


def _no_correction() -> dict[str, Any]:
    return {"total": 0, "by_motif": {}, "by_verifier": {}, "recent": [], "chain": _CHAIN_START}


def _count_exact(state: dict[str, Any], group: str, value: str) -> None:
    state[group][value] = state[group].get(value, 0) + 1


def _fold_correction(
    proj: Corrections | CorrectionsTopK,
    state: dict[str, Any],
    entry: Entry,
    count: Callable[[dict[str, Any], str, str], None],
) -> dict[str, Any]:
    """Fold one ``CORRECTION_APPLIED`` (both versions): the item, its counts, chain, recent.

    ``count(state, group, text)`` counts a motif (``by_motif``) or verifier (``by_verifier``)
    text: exactly for version 1, in a bounded table for version 2.
    """
    if entry.type != _CORRECTION_APPLIED or not proj._in_slice(entry):
        return state
    op_id = entry.body.get("id")
    if type(op_id) is not str:
        return state
    item: dict[str, Any] = {"id": op_id, "seq": entry.seq}
    for name, value in _payload(entry).items():
        if name in CORRECTION_FIELDS:
            item[name] = value
    state["total"] += 1
    for key, group in (("motif", "by_motif"), ("accepted_by", "by_verifier")):
        value = _text_or_none(item.get(key))
        if value is not None:
            count(state, group, value)
    state["chain"] = sha256(state["chain"] + encoding.encode(item))
    recent: list[dict[str, Any]] = state["recent"]
    recent.append(item)
    del recent[: max(0, len(recent) - proj.recent)]
    return state


@dataclass(frozen=True, slots=True, kw_only=True)
class Corrections(_Sliced):
    """Accepted corrections (``CORRECTION_APPLIED``): counts, the latest ones, and a chain.

    Summary: ``{"total": n, "by_motif": {motif: n}, "by_verifier": {accepted_by: n},
    "recent": [the last `recent` corrections, oldest first], "chain": bytes(32)}``; each
    correction is ``{"id": op_id, "seq": n, <its payload fields>}`` and
    ``chain = SHA-256(previous chain || cbor(correction))`` from 32 zero bytes, so the
    summary commits to every correction without listing them all. Count = ``total``.

    Retired (``retired_projections``): version 2, ``CorrectionsTopK``, replaced it, because
    ``by_motif`` / ``by_verifier`` keep a count for every distinct text (free text), which
    grows with the history and every root stored again. It stays registered so that roots
    listing it replay.
    """

    id: str = "corrections"
    recent: int = 20
    types: ClassVar[frozenset[str] | None] = frozenset({OpType.CORRECTION_APPLIED.value})

    @property
    def params(self) -> Mapping[str, Any]:
        """``{"namespaces": [...], "recent": n}``."""
        return {"recent": self.recent, **self._slice()}

    def initial(self) -> dict[str, Any]:
        """Return no correction yet."""
        return _no_correction()

    def fold(self, state: dict[str, Any], entry: Entry) -> dict[str, Any]:
        """Count one ``CORRECTION_APPLIED`` and chain it."""
        return _fold_correction(self, state, entry, _count_exact)

    def summarize(self, state: dict[str, Any]) -> Summary:
        """Return the counts, the recent corrections and the chain."""
        return _summary(state, state["total"])


@dataclass(frozen=True, slots=True, kw_only=True)
class CorrectionsTopK(_Sliced):
    """``corrections`` version 2: accepted corrections with bounded counts by motif and verifier.

    As version 1 (``Corrections``: ``total``, the last ``recent`` corrections, the chain over
    every correction), but ``by_motif`` and ``by_verifier`` are deterministic Space-Saving
    tables of at most ``top_motifs`` motifs and ``top_verifiers`` verifiers, each
    ``{key: [count, error]}`` (the true count lies in ``[count - error, count]``; the rule,
    ties included, is ``failure-motifs`` version 2's, docs/FORMAT.md §6.6). Summary (= the fold
    state)::

        {"total": n, "by_motif": {motif: [c, e]}, "by_verifier": {accepted_by: [c, e]},
         "recent": [...], "chain": bytes(32)}

    count = ``total``. Version 1 kept one count for every distinct motif and verifier text
    it met, a fold state and summary growing with the vocabulary a history uses.
    """

    id: str = "corrections"
    version: int = 2
    recent: int = 20
    top_motifs: int = 32
    top_verifiers: int = 32
    types: ClassVar[frozenset[str] | None] = Corrections.types

    def __post_init__(self) -> None:
        """Refuse a table without room.

        Raises:
            ValueError: if ``top_motifs`` or ``top_verifiers`` is not a positive int.
        """
        _require_room(self, "corrections", ("top_motifs", "top_verifiers"))

    @property
    def params(self) -> Mapping[str, Any]:
        """``{"namespaces": [...], "recent": n, "top_motifs": m, "top_verifiers": v}``."""
        return {
            "recent": self.recent,
            "top_motifs": self.top_motifs,
            "top_verifiers": self.top_verifiers,
            **self._slice(),
        }

    def initial(self) -> dict[str, Any]:
        """Return no correction yet."""
        return _no_correction()

    def fold(self, state: dict[str, Any], entry: Entry) -> dict[str, Any]:
        """Count one ``CORRECTION_APPLIED`` in the bounded tables and chain it."""
        return _fold_correction(self, state, entry, self._count_bounded)

    def _count_bounded(self, state: dict[str, Any], group: str, value: str) -> None:
        capacity = self.top_motifs if group == "by_motif" else self.top_verifiers
        _space_saving(state[group], value, capacity, 0, _source_entry)

    def summarize(self, state: dict[str, Any]) -> Summary:
        """Return the total, the bounded tables, the recent corrections and the chain."""
        return _summary(state, state["total"])


@dataclass(frozen=True, slots=True, kw_only=True)
class EpistemicDistribution(_Sliced):
    """How many memory objects hold each epistemic type (RFC-0003), as the operations say.

    ``ASSERT`` adds one to its ``epistemic_type``; ``EPISTEMIC_TRANSITION`` moves one from
    ``from_type`` to ``to_type``. Summary: ``{epistemic_type: n}`` without zero counts.
    """

    id: str = "epistemic-distribution"
    types: ClassVar[frozenset[str] | None] = frozenset(
        {OpType.ASSERT.value, OpType.EPISTEMIC_TRANSITION.value}
    )

    @property
    def params(self) -> Mapping[str, Any]:
        """``{"namespaces": [...]}``."""
        return self._slice()

    def initial(self) -> dict[str, int]:
        """Return ``{}``."""
        return {}

    def fold(self, state: dict[str, int], entry: Entry) -> dict[str, int]:
        """Apply one ``ASSERT`` or ``EPISTEMIC_TRANSITION``."""
        if not self._in_slice(entry):
            return state
        p = _payload(entry)
        if entry.type == _ASSERT:
            to = _text_or_none(p.get("epistemic_type"))
            frm = None
        elif entry.type == _EPISTEMIC_TRANSITION:
            to = _text_or_none(p.get("to_type"))
            frm = _text_or_none(p.get("from_type"))
        else:
            return state
        if to is None:
            return state
        if frm is not None:
            state[frm] = state.get(frm, 0) - 1
        state[to] = state.get(to, 0) + 1
        return state

    def summarize(self, state: dict[str, int]) -> Summary:
        """Return the non-zero counts."""
        return _summary({k: n for k, n in state.items() if n})


@dataclass(frozen=True, slots=True, kw_only=True)
class LifecycleCounts(_Sliced):
    """How many memory objects are in each lifecycle state (RFC-0001), as the operations say.

    ``ASSERT``: +1 ACTIVE. ``DEPRECATE``: ACTIVE -> DEPRECATED. ``SUPERSEDE``: ACTIVE ->
    SUPERSEDED. ``ARCHIVE``: DEPRECATED -> ARCHIVED when the target was deprecated, else
    ACTIVE -> ARCHIVED (the state remembers only the deprecated ids, to know which).
    Summary: ``{state: n}`` without zero counts.

    The deprecated ids can grow large, so the state encodes them as one text value, the ids
    joined by newlines in the order they were deprecated (a function of the log, so every
    replay writes the same bytes): ``{"counts": {...}, "deprecated": text}``, an order of
    magnitude cheaper to write with every snapshot than a canonical map of the ids.

    Retired (``retired_projections``): version 2, ``LifecycleTransitions``, replaced it,
    because the remembered ids grow with the history and every root stored them again. It
    stays registered so that roots listing it replay.
    """

    id: str = "lifecycle-counts"
    types: ClassVar[frozenset[str] | None] = frozenset(
        {OpType.ASSERT.value, OpType.DEPRECATE.value, OpType.SUPERSEDE.value, OpType.ARCHIVE.value}
    )

    @property
    def params(self) -> Mapping[str, Any]:
        """``{"namespaces": [...]}``."""
        return self._slice()

    def initial(self) -> dict[str, Any]:
        """Return zero counts and no deprecated object."""
        return {"counts": {}, "deprecated": {}}

    def encode_state(self, state: dict[str, Any]) -> bytes:
        """Return the canonical encoding of the state (deprecated ids as one text, in order).

        Raises:
            ValueError: if an id contains a newline (ids that do are not remembered).
        """
        return encoding.encode(
            {"counts": state["counts"], "deprecated": "\n".join(state["deprecated"])}
        )

    def decode_state(self, data: bytes) -> dict[str, Any]:
        """Return the state ``encode_state`` wrote.

        Raises:
            DecodeError: if ``data`` is not canonical CBOR.
        """
        value = encoding.decode(data)
        ids = value["deprecated"]
        return {
            "counts": value["counts"],
            "deprecated": dict.fromkeys(ids.split("\n"), True) if ids else {},
        }

    def fold(self, state: dict[str, Any], entry: Entry) -> dict[str, Any]:
        """Apply one lifecycle operation."""
        if not self._in_slice(entry):
            return state
        counts: dict[str, int] = state["counts"]
        deprecated: dict[str, bool] = state["deprecated"]  # insertion-ordered: log order
        target = entry.body.get("target_id")
        frm: str | None = _ACTIVE
        if entry.type == _ASSERT:
            frm, to = None, _ACTIVE
        elif entry.type == _DEPRECATE:
            to = _DEPRECATED
            if type(target) is str and "\n" not in target:
                deprecated[target] = True
        elif entry.type == _SUPERSEDE:
            to = _SUPERSEDED
        elif entry.type == _ARCHIVE:
            to = _ARCHIVED
            if type(target) is str and deprecated.pop(target, False):
                frm = _DEPRECATED
        else:
            return state
        if frm is not None:
            counts[frm] = counts.get(frm, 0) - 1
        counts[to] = counts.get(to, 0) + 1
        return state

    def summarize(self, state: dict[str, Any]) -> Summary:
        """Return the non-zero counts per state."""
        return _summary({k: n for k, n in state["counts"].items() if n})


_ENTERS: Final = {
    _ASSERT: _ACTIVE,
    _DEPRECATE: _DEPRECATED,
    _SUPERSEDE: _SUPERSEDED,
    _ARCHIVE: _ARCHIVED,
}
"""Lifecycle operation -> the state it moves its object into (RFC-0001 section 8)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LifecycleTransitions(_Sliced):
    """``lifecycle-counts`` version 2: how often an operation moved an object into each state.

    ``ASSERT`` counts one ``ACTIVE``, ``DEPRECATE`` one ``DEPRECATED``, ``SUPERSEDE`` one
    ``SUPERSEDED``, ``ARCHIVE`` one ``ARCHIVED``, whatever the operation names. Summary:
    ``{state: n}`` (non-zero only), count = the number of states listed. The fold state is
    those four counts: version 1 told an ``ARCHIVE`` of a deprecated object from one of an
    active object by remembering every deprecated id not yet archived, a set that grows with
    the history and was written again with every root (docs/FORMAT.md §6.13). Counts of
    operations need no from-state; which objects are now in each state is the memory
    model's (the ``memory-state`` digest), each object's proven by its own operations.
    """

    id: str = "lifecycle-counts"
    version: int = 2
    types: ClassVar[frozenset[str] | None] = frozenset(_ENTERS)

    @property
    def params(self) -> Mapping[str, Any]:
        """``{"namespaces": [...]}``."""
        return self._slice()

    def initial(self) -> dict[str, int]:
        """Return no count."""
        return {}

    def fold(self, state: dict[str, int], entry: Entry) -> dict[str, int]:
        """Count the state one lifecycle operation moves its object into."""
        to = _ENTERS.get(entry.type)
        if to is None or not self._in_slice(entry):
            return state
        state[to] = state.get(to, 0) + 1
        return state

    def summarize(self, state: dict[str, int]) -> Summary:
        """Return the counts per state entered."""
        return _summary({k: n for k, n in state.items() if n})


_STATE_OF: Final = {
    OpType.FALSIFY.value: "falsified",
    OpType.MARK_STALE.value: "stale",
    OpType.RESTORE.value: "live",
}


def _map_head(n: int) -> bytes:
    """Return the canonical CBOR head of a map of ``n`` pairs (major type 5, shortest form)."""
    if n < 24:
        return bytes((0xA0 + n,))
    for info, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * width):
            return bytes((0xA0 + info,)) + n.to_bytes(width, "big")
    raise ValueError(f"a map of {n} pairs is outside CBOR")  # pragma: no cover - 2**64 pairs


def _key_order(key: str) -> tuple[int, bytes]:
    """Canonical CBOR order of text map keys: shorter encodings first, then bytewise."""
    raw = key.encode()
    return len(raw), raw


_SORT_PENDING: Final = 256
"""More new items than this since the last encoding are sorted in at once (a ``CASCADE``
touching thousands), not inserted one by one into the sorted list."""


class _Kind:
    """One target type's items, kept sorted in canonical key order with their encoded pairs."""

    __slots__ = ("frags", "joined", "keys", "pending", "values")

    def __init__(self) -> None:
        self.keys: list[tuple[int, bytes]] = []  # canonical order of the placed items
        self.frags: list[bytes] = []  # cbor(id) || cbor(value), as ``keys``
        self.pending: dict[str, bytes] = {}  # new items (and their pairs) not placed yet
        self.values: dict[str, Any] = {}
        self.joined: bytes | None = None  # the map's encoding while nothing changed

    def set(self, item: str, value: Any) -> None:
        """Set ``item``'s value and its encoded pair."""
        # cbor([id, value]) is a 1-byte array head (0x82) and the two encodings.
        frag = encoding.encode([item, value])[1:]
        if item in self.values and item not in self.pending:
            self.frags[bisect_left(self.keys, _key_order(item))] = frag
        else:
            self.pending[item] = frag
        self.values[item] = value
        self.joined = None

    def encoded(self) -> bytes:
        """Return the canonical encoding of the items as one map."""
        if self.joined is None:
            if len(self.pending) > _SORT_PENDING:
                pairs = sorted(
                    [
                        *zip(self.keys, self.frags, strict=True),
                        *((_key_order(i), f) for i, f in self.pending.items()),
                    ]
                )  # keys are unique: the pairs never compare by their frags
                self.keys = [k for k, _ in pairs]
                self.frags = [f for _, f in pairs]
            else:
                for item, frag in self.pending.items():
                    key = _key_order(item)
                    i = bisect_left(self.keys, key)
                    self.keys.insert(i, key)
                    self.frags.insert(i, frag)
            self.pending.clear()
            self.joined = _map_head(len(self.keys)) + b"".join(self.frags)
        return self.joined


class ItemStates:
    """``falsification-state``'s fold state: ``{target_type: {target_id: {"state", "seq"}}}``.

    It keeps its canonical CBOR encoding up to date item by item, so a summary costs a join
    of the encoded items (not an encoding of every item named so far, which every automatic
    snapshot would pay). ``encoded()`` is exactly ``encoding.encode(self.to_value())``.
    """

    __slots__ = ("_encoded", "_kinds", "count")

    def __init__(self) -> None:
        """Start with no item."""
        self._kinds: dict[str, _Kind] = {}
        self._encoded: bytes | None = None
        self.count = 0
        """The number of items named."""

    @classmethod
    def from_value(cls, value: Any) -> ItemStates:
        """Return the states of a decoded summary.

        Raises:
            DecodeError: if ``value`` is not a map of maps.
        """
        out = cls()
        if type(value) is not dict or any(type(v) is not dict for v in value.values()):
            raise DecodeError("a falsification-state fold state must be a map of maps")
        for kind, items in value.items():
            out._kinds[kind] = _Kind()
            for item, v in items.items():
                out.set(kind, item, v)
        return out

    def set(self, kind: str, item: str, value: Any) -> None:
        """Set the value of ``item`` of type ``kind``."""
        k = self._kinds.get(kind)
        if k is None:
            k = self._kinds[kind] = _Kind()
        self.count += item not in k.values
        k.set(item, value)
        self._encoded = None

    def __eq__(self, other: object) -> bool:
        """States are equal when their canonical encodings are."""
        if not isinstance(other, ItemStates):
            return NotImplemented
        return self.encoded() == other.encoded()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        """Show the states as maps."""
        return f"ItemStates({self.to_value()!r})"

    def to_value(self) -> dict[str, dict[str, Any]]:
        """Return the states as plain maps (in canonical key order; values not copied)."""
        return {
            kind: {item: k.values[item] for item in sorted(k.values, key=_key_order)}
            for kind, k in sorted(self._kinds.items(), key=lambda x: _key_order(x[0]))
        }

    def encoded(self) -> bytes:
        """Return the canonical CBOR encoding of the states."""
        if self._encoded is None:
            kinds = sorted(self._kinds.items(), key=lambda x: _key_order(x[0]))
            parts = [_map_head(len(kinds))]
            for kind, k in kinds:
                parts.append(encoding.encode(kind))
                parts.append(k.encoded())
            self._encoded = b"".join(parts)
        return self._encoded


@dataclass(frozen=True, slots=True, kw_only=True)
class FalsificationState(_Sliced):
    """The state (live | stale | falsified) of every item a state operation named.

    ``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` name their item by the operation's
    ``target_type`` and ``target_id``; ``CASCADE`` lists the items it touched in
    ``payload.touched`` as ``[{"type": ..., "id": ...}, ...]`` and marks them stale.
    Summary: ``{target_type: {target_id: {"state": s, "seq": n}}}``; count = items named.
    The fold state is an ``ItemStates``, stored as the summary's own bytes.
    """

    id: str = "falsification-state"
    types: ClassVar[frozenset[str] | None] = frozenset(
        {OpType.FALSIFY.value, OpType.MARK_STALE.value, OpType.RESTORE.value, OpType.CASCADE.value}
    )

    @property
    def params(self) -> Mapping[str, Any]:
        """``{"namespaces": [...]}``."""
        return self._slice()

    def initial(self) -> ItemStates:
        """Return no item."""
        return ItemStates()

    def fold(self, state: ItemStates, entry: Entry) -> ItemStates:
        """Set the state of the item(s) the operation names."""
        if not self._in_slice(entry):
            return state
        if entry.type == _CASCADE:
            touched = _payload(entry).get("touched")
            targets = [
                (t.get("type"), t.get("id"), "stale")
                for t in (touched if type(touched) is list else [])
                if type(t) is dict
            ]
        elif entry.type in _STATE_OF:
            targets = [
                (entry.body.get("target_type"), entry.body.get("target_id"), _STATE_OF[entry.type])
            ]
        else:
            return state
        for kind, item, new in targets:
            if type(kind) is str and type(item) is str:
                state.set(kind, item, {"state": new, "seq": entry.seq})
        return state

    def summarize(self, state: ItemStates) -> Summary:
        """Return the states by target type and id."""
        return Summary(state.encoded(), state.count)

    def encode_state(self, state: ItemStates) -> bytes:
        """Return the summary's bytes (the canonical encoding of the states as maps)."""
        return state.encoded()

    def decode_state(self, data: bytes) -> ItemStates:
        """Return the states ``encode_state`` wrote.

        Raises:
            DecodeError: if ``data`` is not canonical CBOR.
        """
        return ItemStates.from_value(encoding.decode(data))


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryStateDigest:
    """The digest of the derived memory state (objects, entities, edges, ...) at the high-water.

    A state projection (``StateProjection``): the summary is ``{"digest": bytes(32)}`` with
    the memory model's ``memroot.projections.digest.state_digest(db, as_of=high_water,
    branch=...)``,
    so a root commits to what memory believed. Opt in (it is not among
    ``builtin_projections``): it needs the memory model's hook installed before the
    ``RootsHook``, and each snapshot reads the whole derived state of the branch (about a
    second per million rows), which an automatic snapshot every 1000 entries pays each time.
    """

    id: str = "memory-state"
    version: int = 1
    types: ClassVar[frozenset[str] | None] = frozenset()

    @property
    def params(self) -> Mapping[str, Any]:
        """``{}``."""
        return {}

    def initial(self) -> None:
        """Return None: nothing is folded."""
        return None

    def fold(self, state: None, entry: Entry) -> None:
        """Fold nothing (``types`` is empty)."""
        return state

    def summarize(self, state: None) -> Summary:
        """Refuse: the engine calls ``summarize_state``.

        Raises:
            TypeError: always.
        """
        raise TypeError("memory-state summarises derived state: call summarize_state")

    def summarize_state(self, db: Any, branch: str, as_of: int) -> Summary:
        """Return ``{"digest": state_digest(db, as_of=as_of, branch=branch)}``.

        Raises:
            apsw.SQLError: if the memory model's tables are not in ``db``.
        """
        from memroot.projections.digest import state_digest

        return Summary(encoding.encode({"digest": state_digest(db, as_of=as_of, branch=branch)}), 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class FalsificationCounts(_Sliced):
    """``falsification-state`` version 2: how many times each state was set, per target type.

    Folds what version 1 folds (``FALSIFY`` / ``MARK_STALE`` / ``RESTORE`` name one item,
    ``CASCADE`` each of ``payload.touched`` as stale) but keeps counts only: summary
    ``{target_type: {state: n}}`` (``falsified`` / ``stale`` / ``live``, non-zero only),
    count = the number of target types. Bounded whatever the history: each item's own
    state is its ``state/<target_type>`` leaf in the memory map a v2 root commits to.
    """

    id: str = "falsification-state"
    version: int = 2
    types: ClassVar[frozenset[str] | None] = FalsificationState.types

    @property
    def params(self) -> Mapping[str, Any]:
        """``{"namespaces": [...]}``."""
        return self._slice()

    def initial(self) -> dict[str, dict[str, int]]:
        """Return no count."""
        return {}

    def fold(self, state: dict[str, dict[str, int]], entry: Entry) -> dict[str, dict[str, int]]:
        """Add one to the state each named item is set to."""
        if not self._in_slice(entry):
            return state
        if entry.type == _CASCADE:
            touched = _payload(entry).get("touched")
            for t in touched if type(touched) is list else []:
                if type(t) is dict and type(t.get("type")) is str and type(t.get("id")) is str:
                    by = state.setdefault(t["type"], {})
                    by["stale"] = by.get("stale", 0) + 1
        elif entry.type in _STATE_OF:
            kind, item = entry.body.get("target_type"), entry.body.get("target_id")
            if type(kind) is str and type(item) is str:
                by = state.setdefault(kind, {})
                new = _STATE_OF[entry.type]
                by[new] = by.get(new, 0) + 1
        return state

    def summarize(self, state: dict[str, dict[str, int]]) -> Summary:
        """Return the counts by target type and state."""
        return _summary(state)


def builtin_projections() -> list[Projection]:
    """Return one instance of every built-in projection, with default ids and params.

    ``failure-motifs`` is version 2 (``FailureMotifsTopK``), ``corrections`` version 2
    (``CorrectionsTopK``), ``falsification-state`` version
    2 (``FalsificationCounts``) and ``lifecycle-counts`` version 2 (``LifecycleTransitions``);
    their versions 1 (``FailureMotifs``, ``Corrections``, ``FalsificationState``,
    ``LifecycleCounts``) are in ``retired_projections``.
    """
    return [
        FailureMotifsTopK(),
        CorrectionsTopK(),
        EpistemicDistribution(),
        LifecycleTransitions(),
        FalsificationCounts(),
    ]


def retired_projections() -> list[Projection]:
    """Return the built-ins replaced by a newer version, kept to replay old roots."""
    return [Corrections(), FailureMotifs(), FalsificationState(), LifecycleCounts()]
