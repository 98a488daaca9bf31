"""Storage backends: where a ledger's rows live, behind one store interface.

``store`` is the SQLite ``Store`` (one file, apsw) that defines the interface every backend
answers: entries, Merkle nodes, branches, checkpoints, meta and the commit callbacks; ``pg``
is the PostgreSQL ``PgStore`` (a ``Store`` subclass over psycopg) with its SQLite derived-
state cache (``DerivedCache``, ``StoreView``); ``fds`` is the process's one descriptor per
file for memroot's own reads of files SQLite may hold locks on (a ledger's header, its
``-wal`` and ``-shm``), so that no ``close()`` ever drops them. This package may import only
the ledger's errors and the standard library plus its drivers; everything else in the ledger
imports it.
"""
