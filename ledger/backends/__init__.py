"""Storage backends: where a ledger's rows live, behind one store interface.

``store`` is the SQLite ``Store`` (one file, apsw) that defines the interface every backend
answers: entries, Merkle nodes, branches, checkpoints, meta and the commit callbacks; ``pg``
is the PostgreSQL ``PgStore`` (a ``Store`` subclass over psycopg) with its SQLite derived-
state cache (``DerivedCache``, ``StoreView``). This package may import only the ledger's
errors and the standard library plus its drivers; everything else in the ledger imports it.
"""
