"""The hooked paths of ``memroot bench`` (issue 12, point 5): import, mixed history, rebuild.

The phases of ``memroot.bench.ledger`` measure the ledger core alone. These measure what a
user of the command line runs, with every hook the CLI installs (``memroot.memory_root.stack``):

6. ``memroot import`` of ``n`` events from a JSON Lines file (``import_events``), then
   ``memroot verify`` of that ledger: all ten steps, with the memory-model, roots and
   falsification replay of steps 8-9 (``verify_import``).
7. A mixed history of ``n`` entries, 90% events and 10% memory operations (creates,
   supersedes, deprecates and falsifications: ``MIX``), appended through the default hooks in
   batches of ``BATCH`` (``mixed_append``), then ``memroot verify`` of it (``verify_mixed``).
8. ``memroot rebuild`` of the mixed ledger: the derived state dropped and replayed
   (``rebuild``).
9. ``memroot import-bundle`` of the mixed ledger's auditor's bundle (exported untimed): every
   step of the bundle verified, the entries copied and the layers' derived state folded
   (``import_bundle``; issue 27's ``import-bundle`` target).

Each measurement runs in its own child process (``python -m memroot.bench._hooked_child``),
so its peak RSS (``VmHWM``) is its own, and so that the same measurement can run on the
pure-Python reference (``MEMROOT_BACKEND=python`` in the child) in the same run. The child
times the command itself, not the interpreter's start-up and imports (``child_wall_s`` has
both); it reports wall and CPU seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from memroot.bench.results import HookedBench, HookedRebuild, HookedRun, HookedVerify
from memroot.ledger.entries import EventInput, OpInput, new_uuids
from memroot.ledger.errors import IntegrityError, MemrootError
from memroot.ledger.vocab import ActorType, Role

__all__ = [
    "BATCH",
    "HEARTBEAT_S",
    "MIX",
    "hooked_phases",
    "import_bundle",
    "import_events",
    "mixed_append",
    "mixed_history",
    "rebuild",
    "run_child",
    "verify_cli",
    "write_events_jsonl",
]

BATCH: Final = 1000
"""Entries per ``append_batch`` of the mixed history (one transaction each)."""

HEARTBEAT_S: Final = 30.0
"""A child silent for this long gets a 'still running' progress line."""

MIX: Final = {"EVENT": 90, "ASSERT": 7, "SUPERSEDE": 1, "DEPRECATE": 1, "FALSIFY": 1}
"""Entries of each type per 100 entries of the mixed history."""

# One operation every 10 entries, in this order: 7 creates (the 6th is the object the
# SUPERSEDE then puts in place of an older one), 1 supersede, 1 deprecate, 1 falsify.
_OP_CYCLE: Final = ("A", "A", "A", "A", "A", "N", "S", "D", "F", "A")
_NAMESPACE: Final = "bench"
_FILLER: Final = (
    "the agent noted that the user prefers tea without sugar and meetings after ten; "
    "remember it for the next session. "
)
CONTENT_BYTES: Final = 100

Progress = Callable[[str], None]
T = TypeVar("T")


def _content(i: int) -> str:
    head = f"{i:09d} "
    return head + _FILLER[: CONTENT_BYTES - len(head)]


def _event_fields(i: int) -> dict[str, Any]:
    return {
        "stream": f"bench-session-{i % 8}",
        "actor_id": "bench-user" if i & 1 else "bench-agent",
        "actor_type": ActorType.HUMAN_USER.value if i & 1 else ActorType.AI_AGENT.value,
        "role": Role.USER.value if i & 1 else Role.ASSISTANT.value,
        "content": _content(i),
        "namespace_id": _NAMESPACE,
    }


def write_events_jsonl(path: Path, n: int) -> int:
    """Write ``n`` events (~100-byte content, ids left to the ledger) as JSON Lines.

    Returns the file's size in bytes.
    """
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, n, 10_000):
            f.writelines(
                json.dumps({"kind": "event", **_event_fields(i)}) + "\n"
                for i in range(start, min(n, start + 10_000))
            )
    return path.stat().st_size


def mixed_history(n: int, batch: int = BATCH) -> Iterator[EventInput | OpInput]:
    """Yield a valid history of ``n`` entries: 90% events, 10% memory operations (``MIX``).

    Every 10th entry is an operation, cycling through ``ASSERT`` x5, ``ASSERT`` of a
    replacement, ``SUPERSEDE`` of the oldest live object by it, ``DEPRECATE`` and ``FALSIFY``
    of the oldest live objects, and one more ``ASSERT``. Each ASSERT cites the latest event as
    evidence. A FALSIFY cites the last event of an earlier batch of ``batch`` entries: the
    falsification hook does not see events appended earlier in the same ``append_batch``
    (it refuses them as evidence), so the evidence is kept out of the batch.
    """
    # Imported here: this module is imported by ``memroot bench`` before any child starts.
    from memroot.memory_root.falsify import OBJECT
    from memroot.memory_root.falsify.api import POLICY_VERSION
    from memroot.projections import requests as rq

    agent = rq.Actor("bench-agent", ActorType.AI_AGENT.value, _NAMESPACE)
    live: deque[str] = deque()  # object ids neither superseded, deprecated nor falsified
    ids: list[str] = []
    last_event: str | None = None
    before_batch: str | None = None  # the last event of an earlier batch
    ops = 0
    for i in range(n):
        if i % batch == 0:
            before_batch = last_event
        if not ids:
            ids = new_uuids(BATCH)
        if i % 10 != 9 or last_event is None:
            last_event = ids.pop()
            yield EventInput(**_event_fields(i), id=last_event)
            continue
        step = _OP_CYCLE[ops % len(_OP_CYCLE)]
        ops += 1
        if step in ("A", "N") or len(live) < 2:
            oid = ids.pop()
            live.append(oid)
            yield rq.assert_object(
                agent, "FACT", "ASSERTED", "USER_STATED", [last_event], f"fact {ops}",
                object_id=oid,
            )  # fmt: skip
        elif step == "S":
            newest = live.pop()
            yield rq.supersede(agent, live.popleft(), newest, "a newer statement")
            live.append(newest)
        elif step == "D":
            yield rq.deprecate(agent, live.popleft(), "no longer relevant")
        else:
            payload: dict[str, Any] = {"reason": "the source was retracted"}
            if before_batch is not None:
                payload["evidence_ids"] = [before_batch]
            yield OpInput(
                op_type="FALSIFY",
                actor_id="bench-auditor",
                actor_type=ActorType.HUMAN_USER.value,
                namespace_id=_NAMESPACE,
                payload=payload,
                policy_version=POLICY_VERSION,
                target_id=live.popleft(),
                target_type=OBJECT,
            )


# -- the children ------------------------------------------------------------------------------


def run_child(
    args: list[str],
    *,
    backend: str | None,
    label: str,
    progress: Progress,
    module: str = "memroot.bench._hooked_child",
) -> dict[str, Any]:
    """Run ``python -m MODULE ARGS`` (default ``memroot.bench._hooked_child``); return its JSON.

    ``backend`` sets the child's ``MEMROOT_BACKEND`` (``None``: inherited). The child's
    ``progress ...`` lines on stderr are passed to ``progress`` as they come; a child silent
    for ``HEARTBEAT_S`` gets a 'still running' line, so long runs show they are alive.

    Raises:
        MemrootError: if the child fails (its stderr is in the message).
    """
    env = None if backend is None else {**os.environ, "MEMROOT_BACKEND": backend}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    errors: list[str] = []
    out_parts: list[str] = []
    last = [time.monotonic()]

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("progress "):
                progress(f"{label}: {line.removeprefix('progress ').strip()}")
                last[0] = time.monotonic()
            else:
                errors.append(line)

    def read_stdout() -> None:
        assert proc.stdout is not None
        out_parts.append(proc.stdout.read())

    readers = [threading.Thread(target=f, daemon=True) for f in (read_stderr, read_stdout)]
    for r in readers:
        r.start()
    try:
        while True:
            try:
                proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() - last[0] >= HEARTBEAT_S:
                    progress(f"{label}: still running ({time.monotonic() - t0:.0f} s)")
                    last[0] = time.monotonic()
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C): do not leave the child running
            proc.kill()
            proc.wait()
    for r in readers:
        r.join()
    wall = time.monotonic() - t0
    out = "".join(out_parts).strip()
    if proc.returncode != 0 or not out:
        tail = "".join(errors).strip()[-2000:]
        raise MemrootError(f"the bench child {module} {' '.join(args[:1])} failed: {tail}")
    line: dict[str, Any] = json.loads(out.splitlines()[-1])
    line["child_wall_s"] = wall
    return line


def _run(line: dict[str, Any]) -> HookedRun:
    """Turn a child's JSON line into the figures of one measurement."""
    entries: int = line["entries"]
    seconds: float = line["seconds"]
    cpu: float = line["cpu_s"]
    hwm: int | None = line["vm_hwm_kb"]
    return {
        "entries": entries,
        "seconds": seconds,
        "cpu_s": cpu,
        "entries_per_s": entries / seconds if seconds > 0 else None,
        "entries_per_cpu_s": entries / cpu if cpu > 0 else None,
        "peak_rss_mb": hwm / 1024 if hwm is not None else None,
        "child_wall_s": line["child_wall_s"],
    }


def import_events(
    work: Path, events_file: Path, *, backend: str | None, label: str, progress: Progress
) -> tuple[Path, HookedRun]:
    """``memroot init`` (untimed) then ``memroot import`` of ``events_file`` (timed).

    Returns the ledger and the figures.

    Raises:
        MemrootError: if the child fails.
    """
    ledger = work / "import.ledger"
    line = run_child(
        ["import", str(ledger), str(events_file)], backend=backend, label=label,
        progress=progress,
    )  # fmt: skip
    return ledger, _run(line)


def mixed_append(
    work: Path, n: int, *, backend: str | None, label: str, progress: Progress
) -> tuple[Path, HookedRun]:
    """Append the ``n``-entry mixed history through the default hooks (batches of ``BATCH``).

    Returns the ledger and the figures.

    Raises:
        MemrootError: if the child fails.
    """
    ledger = work / "mixed.ledger"
    line = run_child(
        ["mixed", str(ledger), str(n)], backend=backend, label=label, progress=progress
    )
    return ledger, _run(line)


def verify_cli(
    ledger: Path, *, backend: str | None, label: str, progress: Progress
) -> HookedVerify:
    """``memroot verify --no-update --json`` of ``ledger``: all ten steps, every replay check.

    Raises:
        IntegrityError: if the ledger does not verify.
        MemrootError: if the child fails.
    """
    trusted = ledger.with_name(ledger.name + ".trusted.json")
    line = run_child(
        ["verify", str(ledger), str(trusted)], backend=backend, label=label, progress=progress
    )
    if not line["ok"]:
        raise IntegrityError(f"the benchmark ledger {ledger.name} did not verify: {line}")
    run = _run(line)
    return {**run, "ok": True, "steps_checked": list(line["steps_checked"])}


def rebuild(ledger: Path, *, backend: str | None, label: str, progress: Progress) -> HookedRebuild:
    """``memroot rebuild --json`` of ``ledger``: every derived table dropped and replayed.

    Raises:
        IntegrityError: if the rebuilt state's digest differs from the state before.
        MemrootError: if the child fails.
    """
    line = run_child(["rebuild", str(ledger)], backend=backend, label=label, progress=progress)
    if not line["identical"]:
        raise IntegrityError(f"rebuild of {ledger.name} changed the derived state: {line}")
    return {**_run(line), "identical": True}


def import_bundle(
    ledger: Path, *, backend: str | None, label: str, progress: Progress
) -> HookedRun:
    """``memroot import-bundle`` of ``ledger``'s bundle into a new ledger beside it (timed).

    The bundle is exported first, untimed, in the same child.

    Raises:
        MemrootError: if the child fails (a bundle that does not verify included).
    """
    out = ledger.with_name(ledger.stem + ".imported.ledger")
    line = run_child(
        ["bundle", str(ledger), str(out)], backend=backend, label=label, progress=progress
    )
    return _run(line)


def hooked_phases(
    root: Path,
    n: int,
    backends: Sequence[tuple[str | None, str]],
    *,
    progress: Progress,
) -> list[HookedBench]:
    """Run phases 6-9 at ``n`` entries under ``root`` on each backend, one after the other.

    ``backends`` lists ``(MEMROOT_BACKEND for the child or None to inherit, name)``; every
    measurement runs on each backend in turn before the next starts, so both see about the
    same background load. Returns one ``HookedBench`` per backend, in order.

    Raises:
        IntegrityError: if a benchmark ledger does not verify or rebuild identically.
        MemrootError: if a child fails.
    """
    events_file = root / "events.jsonl"
    write_events_jsonl(events_file, n)
    works = []
    for _, name in backends:
        works.append(root / name)
        works[-1].mkdir()

    def each(what: str, measure: Callable[[int, str | None, str], T]) -> list[T]:
        out = []
        for k, (env, name) in enumerate(backends):
            label = f"{what} ({name})"
            progress(label)
            out.append(measure(k, env, label))
        return out

    imports = each(
        f"[6/9] memroot import, {n:,} events",
        lambda k, env, label: import_events(works[k], events_file, backend=env, label=label,
                                            progress=progress),
    )  # fmt: skip
    v_imports = each(
        "[6/9] memroot verify (all ten steps) of the imported ledger",
        lambda k, env, label: verify_cli(imports[k][0], backend=env, label=label,
                                         progress=progress),
    )  # fmt: skip
    mixes = each(
        f"[7/9] mixed history, {n:,} entries, through the default hooks",
        lambda k, env, label: mixed_append(works[k], n, backend=env, label=label,
                                           progress=progress),
    )  # fmt: skip
    v_mixes = each(
        "[7/9] memroot verify (all ten steps) of the mixed history",
        lambda k, env, label: verify_cli(mixes[k][0], backend=env, label=label,
                                         progress=progress),
    )  # fmt: skip
    rebuilds = each(
        "[8/9] memroot rebuild of the mixed history",
        lambda k, env, label: rebuild(mixes[k][0], backend=env, label=label, progress=progress),
    )
    bundles = each(
        "[9/9] memroot import-bundle of the mixed history's bundle",
        lambda k, env, label: import_bundle(mixes[k][0], backend=env, label=label,
                                            progress=progress),
    )  # fmt: skip
    return [
        {
            "size": n,
            "batch": BATCH,
            "mix_per_100": dict(MIX),
            "import_events": imports[k][1],
            "verify_import": v_imports[k],
            "mixed_append": mixes[k][1],
            "verify_mixed": v_mixes[k],
            "rebuild": rebuilds[k],
            "import_bundle": bundles[k],
        }
        for k in range(len(backends))
    ]
