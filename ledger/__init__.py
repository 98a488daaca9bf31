"""memroot ledger layer: canonical entries, hash chain, Merkle tree, checkpoints, verification.

Modules: ``encoding`` (canonical CBOR), ``hashing``, ``entries``, ``merkle``, ``signing``,
``note`` (C2SP formats), ``store`` (SQLite), ``ledger`` (the ``Ledger``), ``verify`` (the
auditor's steps), ``trust``, ``bundle`` / ``audit`` / ``bundle_import`` / ``tiles`` (offline
auditing), ``keys`` (rotation). It imports none of the other layers.
"""
