"""The Projection protocol: rule and summary digests, checks, and the registry."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

import cbor2
import pytest

from memroot.ledger.entries import Entry
from memroot.projections.builtins import (
    Corrections,
    CorrectionsTopK,
    EpistemicDistribution,
    FailureMotifs,
    FalsificationState,
    LifecycleCounts,
    builtin_projections,
)
from memroot.projections.projection import (
    Summary,
    check_projection,
    rule_digest,
    rule_preimage,
    summary_digest,
)
from memroot.projections.registry import Registry, default_registry, load_entry_points


@dataclass(frozen=True, slots=True)
class CountAll:
    """A third-party-style projection: counts every entry of the listed types."""

    id: str = "count-all"
    version: int = 1
    params: dict[str, Any] | None = None
    types = None

    def initial(self) -> int:
        return 0

    def fold(self, state: int, entry: Entry) -> int:
        return state + 1

    def summarize(self, state: int) -> Summary:
        return Summary(cbor2.dumps({"n": state}), 1)


def _count_all(**kw: Any) -> CountAll:
    p = CountAll(**kw)
    return replace(p, params=p.params if p.params is not None else {})


def test_rule_digest_is_the_tagged_sha256_of_the_canonical_rule():
    """rule_digest = SHA-256("memroot/rule/v1" || 0x00 || cbor({id, version, params}))."""
    p = FailureMotifs(motifs=("TITLE_MISMATCH",))
    preimage = cbor2.dumps(
        {
            "id": "failure-motifs",
            "version": 1,
            "params": {"motifs": ["TITLE_MISMATCH"], "namespaces": [], "top_sources": 100},
        },
        canonical=True,
    )
    assert rule_preimage(p) == preimage
    assert rule_digest(p) == hashlib.sha256(b"memroot/rule/v1\x00" + preimage).digest()


def test_summary_digest_is_the_tagged_sha256_of_the_bytes():
    """summary_digest = SHA-256("memroot/summary/v1" || 0x00 || summary_bytes)."""
    data = cbor2.dumps({"a": 1})
    assert summary_digest(data) == hashlib.sha256(b"memroot/summary/v1\x00" + data).digest()
    assert Summary(data, 1).digest == summary_digest(data)


@pytest.mark.parametrize("proj", builtin_projections(), ids=lambda p: p.id)
def test_every_rule_changes_with_version_and_params(proj: Any):
    """A different version or a different namespace slice gives a different rule digest."""
    base = rule_digest(proj)
    assert rule_digest(replace(proj, version=proj.version + 1)) != base
    assert rule_digest(replace(proj, namespaces=("team",))) != base
    assert rule_digest(replace(proj, id=proj.id + ":x")) != base


def test_params_are_normalised_so_order_and_duplicates_do_not_matter():
    """Params are sorted sets: listing motifs in another order gives the same rule."""
    a = FailureMotifs(motifs=("B", "A", "A"), namespaces=("y", "x"))
    b = FailureMotifs(motifs=("A", "B"), namespaces=("x", "y"))
    assert rule_digest(a) == rule_digest(b)


def test_summary_refuses_a_negative_count_or_non_bytes():
    """Summary checks its own fields."""
    with pytest.raises(ValueError):
        Summary(b"\xa0", -1)
    with pytest.raises(TypeError):
        Summary("text", 0)  # type: ignore[arg-type]


def test_check_projection_names_what_is_wrong():
    """A malformed id, a negative version or non-CBOR params are refused with a reason."""
    check_projection(_count_all())
    with pytest.raises(ValueError, match="id"):
        check_projection(_count_all(id="Bad Id"))
    with pytest.raises(ValueError, match="version"):
        check_projection(_count_all(version=-1))
    with pytest.raises(TypeError):
        check_projection(_count_all(params={"x": {1, 2}}))
    with pytest.raises(TypeError, match="not a projection"):
        check_projection(object())  # type: ignore[arg-type]


def test_registry_sorts_by_id_whatever_the_registration_order():
    """projections() is sorted by id, so the order of registration cannot reach a root."""
    items = [*builtin_projections(), _count_all()]
    forward = Registry(items).projections()
    backward = Registry(list(reversed(items))).projections()
    assert [p.id for p in forward] == [p.id for p in backward] == sorted(p.id for p in items)


def test_registry_refuses_two_active_projections_with_one_id():
    """Registering the same id twice is a programming mistake, refused."""
    reg = Registry([Corrections()])
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Corrections(namespaces=("x",)))


def test_retired_projection_replays_but_does_not_run():
    """A retired rule is found by its digest but is not among the active projections."""
    old = LifecycleCounts()
    reg = Registry([replace(old, version=2)])
    reg.register(old, retired=True)
    assert [p.version for p in reg.projections()] == [2]
    assert reg.by_rule(rule_digest(old)) is old
    assert len(reg.known()) == 2


def test_default_registry_holds_the_builtins():
    """Without plugins the default registry is exactly the five built-ins."""
    reg = default_registry()
    assert {p.id for p in reg.projections()} >= {
        "failure-motifs",
        "corrections",
        "epistemic-distribution",
        "lifecycle-counts",
        "falsification-state",
    }
    assert reg.get("corrections") == CorrectionsTopK()
    assert reg.get("nope") is None


class _EP:
    def __init__(self, name: str, obj: Any) -> None:
        self.name = name
        self._obj = obj

    def load(self) -> Any:
        return self._obj


def test_entry_points_accept_instances_classes_and_factories(monkeypatch: pytest.MonkeyPatch):
    """memroot.projections entry points may name a projection, a class or a factory."""
    eps = [
        _EP("b", lambda: [_count_all(id="from-factory")]),
        _EP("a", EpistemicDistribution),
        _EP("c", FalsificationState(id="falsification-state:x")),
    ]
    monkeypatch.setattr(
        "importlib.metadata.entry_points",
        lambda group: eps if group == "memroot.projections" else [],
    )
    loaded = load_entry_points()
    assert [p.id for p in loaded] == [
        "epistemic-distribution",
        "from-factory",
        "falsification-state:x",
    ]


def test_entry_point_that_is_not_a_projection_is_named(monkeypatch: pytest.MonkeyPatch):
    """A broken plugin fails loudly with its entry point's name."""
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [_EP("broken", object())])
    with pytest.raises(TypeError, match="broken"):
        load_entry_points()
