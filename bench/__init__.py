"""memroot.bench: the benchmarks, as a library the ``memroot bench`` command calls.

Module map:

- ``ledger``: the ledger core beside raw apsw and pymerkle (``memroot bench``): one function
  per measurement (batched append, durable single appends, inclusion proofs, full verify,
  append growth, the pure-Python reference) and ``run``, which runs them in order, then the
  hooked phases, and returns the whole report.
- ``hooked``: ``memroot bench`` phases 6-9 through every CLI hook (``memroot import``, the
  mixed history, ``memroot verify`` with all ten steps, ``memroot rebuild``, ``memroot
  import-bundle``), each in a
  child process (``_hooked_child``) on each backend.
- ``results``: the report's shape, one ``TypedDict`` per measurement (the ``--json`` keys).
- ``targets``: issue 2's speed targets, each beside the figure measured for it.
- ``report``: the human table of a run.
- ``machine``: the machine and library versions, the fsync probe, a process's peak RSS.
- ``_verify_child``: the full verify run in a child process (phase 4).
- ``_hooked_child``, ``_scale_child``: the children of ``hooked`` and ``bench_scale``.

The scripts beside them run as ``python bench/bench_X.py``: ``bench_scale`` (append and
verify at 10^5, 10^6 and 10^7 in one run, issue 12's scale target; not run in CI), and, for
the layers above the core, ``bench_memory`` (memory-model hook, replay, queries),
``bench_roots`` (memory roots and snapshots), ``bench_bundle`` (auditor's bundle export and
offline audit), ``bench_cascade`` (falsification cascades), ``bench_anchor_state`` (gated
invalidation: anchored reads and the append bookkeeping), and ``run_ledger`` (``memroot
bench --full``). See bench/README.md and BENCHMARKS.md.

The package imports none of its modules here, so that a benchmark child loads only what it
measures.
"""

from __future__ import annotations
