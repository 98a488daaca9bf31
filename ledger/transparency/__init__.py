"""Transparency: what a ledger shows the outside world after it signs a checkpoint.

Checkpoints' cosignatures (``cosignature``, C2SP tlog-cosignature), the witness client that
submits every sealed checkpoint and keeps the cosignatures (``witness``), a witness server
(``witness_server``) and tiles and their publication (``tiles``, C2SP tlog-tiles). It plugs
into the ledger through the observer interface the ledger owns (``CommitObserver``,
``Ledger.on_commit``). This package may import the log's core (``memroot.ledger``'s entries,
note, hashing, merkle, signing, errors, the ``Ledger``), the storage backends and the
auditor's findings (``memroot.ledger.verify``); the core never imports it (the ledger names
its default observer as a string, as it names its default hooks).
"""
