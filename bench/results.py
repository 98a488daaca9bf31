"""The typed shape of ``memroot bench``'s figures: one ``TypedDict`` per measurement.

The results are plain dictionaries so that ``json.dumps`` writes them as they are: the keys
here *are* the ``--json`` document (BENCHMARKS.md and the smoke test read them). A new
measurement adds a ``TypedDict`` here and a ``NotRequired`` key in ``LedgerBench``; a new
machine fact adds a ``NotRequired`` key in ``MachineInfo``.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

__all__ = [
    "BatchedAppend",
    "DurableAppend",
    "Growth",
    "HookedBench",
    "HookedRebuild",
    "HookedRun",
    "HookedVerify",
    "InclusionProofs",
    "LedgerBench",
    "MachineInfo",
    "MemrootBatched",
    "MemrootProofs",
    "Params",
    "PymerkleProofs",
    "ReferenceBackend",
    "ScaleBench",
    "ScaleParams",
    "ScaleSize",
    "TargetJSON",
    "Throughput",
    "VerifyResult",
]


class MachineInfo(TypedDict):
    """The machine and library versions the figures were measured with."""

    nproc: int | None
    usable_cpus: int
    cpu_model: str
    python: str
    implementation: str
    platform: str
    sqlite_apsw: str
    apsw: str
    sqlite_stdlib: str
    pymerkle: str | None
    backend: str
    loadavg_start: list[float]
    tmpdir: NotRequired[str]
    fsync_median_us: NotRequired[float]
    loadavg_end: NotRequired[list[float]]


class MemrootBatched(TypedDict):
    """memroot ``append_batch`` at one size; input construction timed apart."""

    entries: int
    append_s: float
    construction_s: float
    entries_per_s: float | None
    entries_per_s_incl_construction: float | None


class Throughput(TypedDict):
    """A baseline that wrote ``entries`` entries in ``seconds``."""

    entries: int
    seconds: float
    entries_per_s: float | None


class BatchedAppend(TypedDict):
    """Phase 1 at one size: memroot beside raw apsw and pymerkle (``None`` when missing)."""

    size: int
    memroot: MemrootBatched
    raw_apsw: Throughput
    pymerkle: Throughput | None
    ratio_memroot_raw: float | None
    ratio_memroot_pymerkle: float | None


class Growth(TypedDict):
    """Phase 5: the append rate of the last window of batches against the first."""

    size: int
    window: int
    first_per_s: float | None
    last_per_s: float | None
    ratio_last_first: float | None


class DurableAppend(TypedDict):
    """Phase 2: single fsync'd appends, memroot beside raw apsw."""

    count: int
    memroot_per_s: float | None
    raw_apsw_per_s: float | None
    ratio_memroot_raw: float | None
    memroot_extra_us_per_append: float


class MemrootProofs(TypedDict):
    """Phase 3, memroot: inclusion proofs generated and verified at ``size``."""

    size: int
    count: int
    generate_per_s: float | None
    verify_per_s: float | None
    proofs_per_s: float | None


class PymerkleProofs(TypedDict):
    """Phase 3, pymerkle: ``prove_inclusion`` + ``verify_inclusion`` at ``size``."""

    size: int
    count: int
    proofs_per_s: float | None


class InclusionProofs(TypedDict):
    """Phase 3: memroot, and pymerkle when it is installed."""

    memroot: MemrootProofs
    pymerkle: PymerkleProofs | None


class VerifyResult(TypedDict):
    """Phase 4: the full verify in a child process, its rate and its peak RSS."""

    entries: int
    seconds: float
    entries_per_s: float | None
    cpu_s: float
    entries_per_cpu_s: float | None
    child_wall_s: float
    peak_rss_mb: float
    rss_source: str
    ru_maxrss_children_mb: float
    bench_process_maxrss_mb: float


class HookedRun(TypedDict):
    """One hooked measurement (phases 6-9), timed inside its own child process.

    ``seconds`` and ``cpu_s`` are the command's wall and CPU time (the child's start-up and
    imports excluded: ``child_wall_s`` includes them); ``peak_rss_mb`` is the child's VmHWM
    (``None`` without /proc).
    """

    entries: int
    seconds: float
    cpu_s: float
    entries_per_s: float | None
    entries_per_cpu_s: float | None
    peak_rss_mb: float | None
    child_wall_s: float


class HookedVerify(HookedRun):
    """``memroot verify`` of a hooked ledger: ``entries`` is every entry verified."""

    ok: bool
    steps_checked: list[int]


class HookedRebuild(HookedRun):
    """``memroot rebuild``: ``entries`` replayed; ``identical``: the same state digest after."""

    identical: bool


class HookedBench(TypedDict):
    """Phases 6-9 on one backend: the CLI's import, the mixed history, verify and rebuild.

    And ``import_bundle``: import-bundle of the mixed history's bundle (``entries``: the
    entries imported).
    """

    size: int
    batch: int
    mix_per_100: dict[str, int]
    import_events: HookedRun
    verify_import: HookedVerify
    mixed_append: HookedRun
    verify_mixed: HookedVerify
    rebuild: HookedRebuild
    import_bundle: HookedRun


class Params(TypedDict):
    """What the run measured with."""

    sizes: list[int]
    batch: int
    content_bytes: int
    durable: int
    proofs: int
    pymerkle_proofs: int
    hooked_size: int | None


class TargetJSON(TypedDict):
    """One issue-2 target beside the figure measured for it (``met``: None if not measured)."""

    name: str
    at: int | None
    value: float | None
    unit: str
    target: str
    met: bool | None


class ReferenceBackend(TypedDict):
    """The pure-Python reference measured in the same run as the native core, at one size."""

    size: int
    batched_append_per_s: float | None
    verify_per_s: float | None
    ratio_append_native_reference: float | None
    ratio_verify_native_reference: float | None
    hooked: HookedBench | None
    ratio_import_native_reference: float | None
    ratio_verify_import_native_reference: float | None
    ratio_mixed_append_native_reference: float | None
    ratio_verify_mixed_native_reference: float | None
    ratio_rebuild_native_reference: float | None
    ratio_import_bundle_native_reference: float | None


class LedgerBench(TypedDict):
    """The whole ``memroot bench --json`` document.

    ``command`` and ``equivalent_command`` are added by the command line that ran it.
    """

    machine: MachineInfo
    params: Params
    started: str
    batched_append: list[BatchedAppend]
    durable_append: DurableAppend
    inclusion_proofs: InclusionProofs
    verify: VerifyResult
    append_growth: Growth
    reference_backend: ReferenceBackend | None
    hooked: HookedBench | None
    targets: list[TargetJSON]
    notes: list[str]
    elapsed_s: float
    command: NotRequired[str]
    equivalent_command: NotRequired[str]


class ScaleSize(TypedDict):
    """``bench/bench_scale.py`` at one size: append and verify, each in its own child.

    The append rate *at* the size is that of its last ``window`` appends (``window_per_s``);
    ``append_per_s`` averages every append from the empty ledger. Ratios compare this size
    with the first (smallest) size of the run: 1.0 for the first.
    """

    size: int
    append_s: float
    append_cpu_s: float
    append_per_s: float | None
    append_per_cpu_s: float | None
    window: int
    window_per_s: float | None
    window_per_cpu_s: float | None
    append_peak_rss_mb: float | None
    db_mb: float
    verify_entries: int
    verify_s: float
    verify_cpu_s: float
    verify_per_s: float | None
    verify_per_cpu_s: float | None
    verify_peak_rss_mb: float | None
    ratio_append_to_first: float | None
    ratio_append_cpu_to_first: float | None
    ratio_verify_to_first: float | None
    ratio_verify_cpu_to_first: float | None
    ratio_append_rss_to_first: float | None
    ratio_verify_rss_to_first: float | None
    loadavg_after: list[float]


class ScaleParams(TypedDict):
    """What ``bench/bench_scale.py`` measured with."""

    sizes: list[int]
    window: int
    batch: int
    content_bytes: int
    tolerance: float


class ScaleBench(TypedDict):
    """The whole ``bench/bench_scale.py --json`` document.

    ``checks`` holds, per size after the first, whether its append and verify rates stay
    within ``tolerance`` of the first size's (wall clock and CPU time) and whether each
    child's peak RSS does (memory flat).
    """

    machine: MachineInfo
    params: ScaleParams
    started: str
    sizes: list[ScaleSize]
    checks: list[TargetJSON]
    notes: list[str]
    elapsed_s: float
    command: str
