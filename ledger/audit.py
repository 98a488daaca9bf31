"""The offline auditor: every verification step over an auditor's bundle, with no ledger file.

``audit_bundle`` runs the same numbered steps as ``memroot.ledger.verify.audit`` (the step logic is
shared: ``memroot.ledger.verify.audit_source``), reading a bundle directory
(``memroot.ledger.bundle``)
instead of a SQLite store. It needs the standard library, cbor2 and cryptography only: no
storage driver is imported, and content commitments (step 4) use the native ``blake3``
package when it is installed and a pure-Python BLAKE3 otherwise (the report says which).

What a bundle cannot show, the report does not claim: a bundle has no stored caches (leaf
hashes, tree nodes, content addresses), so step 5 recomputes the roots from the entry bytes
and compares them with the signed checkpoints, and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memroot.ledger.bundle import BundleReader
from memroot.ledger.errors import MemrootError
from memroot.ledger.hashing import BLAKE3_NATIVE
from memroot.ledger.trust import TrustedState
from memroot.ledger.verify import AuditReport, Finding, Progress, ReplayCheck, audit_source

__all__ = ["audit_bundle", "open_bundle", "verify_bundle"]


def open_bundle(path: Path) -> BundleReader:
    """Open a bundle for reading (its manifest is read and checked).

    Raises:
        NotFoundError: if there is no bundle directory at ``path``.
        DecodeError: if the manifest is missing or malformed.
    """
    return BundleReader(Path(path))


def audit_bundle(
    bundle: Path | BundleReader,
    *,
    vkeys: Sequence[str] = (),
    trusted: TrustedState | None = None,
    checks: Sequence[ReplayCheck] = (),
    progress: Progress | None = None,
    update_trusted: bool = True,
) -> AuditReport:
    """Run every auditor step over a bundle and return the report; never raises for bad data.

    Keys and trusted state work as in ``memroot.ledger.verify.audit``: the given ``vkeys``, else the
    trusted state's keys for the bundle's origin, else (trust on first use, reported as a note)
    the keys in the bundle's own genesis entry. ``checks`` are the replay checks of the layers
    above (steps 7-9), built from the same reader so they can read its sections.
    """
    try:
        reader = bundle if isinstance(bundle, BundleReader) else open_bundle(bundle)
    except MemrootError as e:
        report = AuditReport()
        report.steps_checked.add(1)
        report.add(Finding(1, f"the bundle cannot be opened: {e}"))
        return report
    report = audit_source(
        reader,
        origin=reader.manifest.origin,
        trusted=trusted,
        vkeys=vkeys,
        checks=checks,
        progress=progress,
        update_trusted=update_trusted,
    )
    report.trusted["bundle"] = _bundle_facts(reader)
    # (1) every file of the bundle is read whole: sections that no replay check consumed are
    # still checked against the manifest, so a damaged file never passes unnoticed.
    for name in reader.section_names():
        try:
            for _ in reader.section(name):
                pass
        except MemrootError as e:
            report.add(Finding(1, f"bundle section {name!r} cannot be read: {e}"))
    if not BLAKE3_NATIVE:
        report.add(
            Finding(
                4,
                "the blake3 package is not installed: content commitments were checked with "
                "memroot's pure-Python BLAKE3 (same result, slower)",
                severity="note",
            )
        )
    return report


def verify_bundle(bundle: Path | BundleReader, **kwargs: Any) -> AuditReport:
    """Like ``audit_bundle``, but raise an ``IntegrityError`` for the first finding.

    Raises:
        IntegrityError: carrying the first finding's step, branch, seq, expected and actual.
    """
    return audit_bundle(bundle, **kwargs).raise_first()


def _bundle_facts(reader: BundleReader) -> dict[str, Any]:
    m = reader.manifest
    return {
        "path": str(reader.path),
        "origin": m.origin,
        "ledger_id": m.ledger_id,
        "created": m.created,
        "sections": list(m.sections),
        "branches": {b.name: {"size": b.size, "root": b.root.hex()} for b in m.branches},
    }
