"""The auditor's bundle: a ledger exported to a directory, audited offline, imported back.

``export`` writes and reads the bundle format (docs/FORMAT.md section 7), ``audit`` runs the
auditor's steps over a bundle or a tiles directory with no storage driver, ``importing``
rebuilds a ledger from a bundle it audited first. This package may import the log's core,
``memroot.ledger.verify``, ``memroot.ledger.transparency`` (tiles, cosignatures) and, for
``importing`` only, the storage backends; nothing in the ledger imports it.
"""
