"""memroot.bench: the benchmarks, as a library the ``memroot bench`` command calls.

Module map:

- ``ledger``: the ledger core beside raw apsw and pymerkle (``memroot bench``): one function
  per measurement (batched append, durable single appends, inclusion proofs, full verify,
  append growth) and ``run``, which runs them in order and returns the whole report.
- ``results``: the report's shape, one ``TypedDict`` per measurement (the ``--json`` keys).
- ``targets``: issue 2's speed targets, each beside the figure measured for it.
- ``report``: the human table of a run.
- ``machine``: the machine and library versions, the fsync probe, a process's peak RSS.
- ``_verify_child``: the full verify run in a child process (phase 4).

The scripts beside them measure the layers above the core and run as
``python bench/bench_X.py``: ``bench_memory`` (memory-model hook, replay, queries),
``bench_roots`` (memory roots and snapshots), ``bench_bundle`` (auditor's bundle export and
offline audit), ``bench_cascade`` (falsification cascades), ``bench_anchor_state`` (gated
invalidation: anchored reads and the append bookkeeping), and ``run_ledger`` (``memroot
bench --full``). See bench/README.md and BENCHMARKS.md.

The package imports none of its modules here, so that a benchmark child loads only what it
measures.
"""

from __future__ import annotations
