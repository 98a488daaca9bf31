"""memroot ledger layer: canonical entries, hash chain, Merkle tree, checkpoints, verification.

The log's core is this package's own modules: ``encoding`` (canonical CBOR), ``hashing``,
``entries``, ``merkle``, ``signing``, ``note`` (C2SP signed notes: the checkpoints the ledger
seals every commit with), ``strict`` (checked reads), ``ledger`` (the ``Ledger``), ``keys``
(rotation), ``trust``, ``vocab`` and ``errors``. Each other idea has a package: ``backends``
(SQLite and PostgreSQL stores, below the core), ``verify`` (the auditor's steps),
``transparency`` (cosignatures, witnesses, tiles; it registers with the ledger's commit
observers) and ``bundle`` (export, offline audit, import). The core imports ``backends``
only; ``verify`` imports the core; ``transparency`` and ``bundle`` import the core and
``verify``. It imports none of the other layers.
"""
