"""The auditor's verification of a ledger: the ten numbered steps of SPEC and docs/FORMAT.md.

``audit`` lists every finding of a SQLite ledger in an ``AuditReport``, ``verify`` raises the
first, ``verify_path`` opens a file read-only first; ``audit_source`` runs the same steps over
any ``LedgerSource`` (an auditor's bundle: ``memroot.ledger.bundle.audit``). The modules are
named for the steps they hold. This package may import the log's core (``memroot.ledger``'s
entries, encoding, hashing, merkle, note, strict, trust, vocab, errors) and, for a SQLite
file, its backend (``memroot.ledger.backends.store``, imported inside the functions that read
one: a bundle's auditor runs without a storage driver); never transparency, the bundle
package or a layer above.
"""

from memroot.ledger.verify.auditor import audit, audit_source, verify, verify_path
from memroot.ledger.verify.report import (
    MAX_FINDINGS,
    STEPS,
    AfterScan,
    AuditReport,
    BranchLike,
    Finding,
    LedgerSource,
    Progress,
    ReplayCheck,
    RowLike,
)
from memroot.ledger.verify.store_source import bound_cache

__all__ = [
    "MAX_FINDINGS",
    "STEPS",
    "AfterScan",
    "AuditReport",
    "BranchLike",
    "Finding",
    "LedgerSource",
    "Progress",
    "ReplayCheck",
    "RowLike",
    "audit",
    "audit_source",
    "bound_cache",
    "verify",
    "verify_path",
]
