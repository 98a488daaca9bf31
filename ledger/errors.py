"""The one error hierarchy of memroot, split by whose fault an error is.

``MemrootError`` is the root. Under it:

- ``IntegrityError``: stored or received data is bad or tampered with (the data's fault). It
  carries structured fields (branch, seq, step, expected, actual) so a report can name the
  exact entry and auditor step.
- ``DecodeError`` (an ``IntegrityError``): bytes that are not strict deterministic CBOR, or a
  note, proof or file that does not parse.
- ``ProofError`` (an ``IntegrityError``): a Merkle proof or signature that does not verify.
- ``RefusedError``: a well-formed request that the ledger refuses (the caller's fault): a bad
  entry, a limit, a lifecycle rule, an inconsistent checkpoint.
- ``ValidationError`` (a ``RefusedError``): an entry or request with a missing or wrong field.
- ``ClosedError`` (a ``RefusedError``): a call on a handle (a ``Memory``) after ``close()``.
- ``StorageError``: the environment failed us (disk full, read-only file, locked database).

Programming mistakes raise the built-in ``ValueError`` / ``TypeError``. The CLI maps this
hierarchy to exit codes in one place (``memroot.cli.main``).
"""

from __future__ import annotations

import os

__all__ = [
    "ClosedError",
    "DecodeError",
    "IntegrityError",
    "KeyFileError",
    "MemrootError",
    "NotFoundError",
    "ProofError",
    "RefusedError",
    "StorageError",
    "ValidationError",
    "cache_edited",
]


class MemrootError(Exception):
    """Root of every error memroot raises on purpose."""


class IntegrityError(MemrootError):
    """Stored or received data is malformed or has been tampered with.

    Attributes:
        branch: the branch the bad data belongs to, when known.
        seq: the entry's sequence number, when known.
        step: the auditor's step (1-10, docs/FORMAT.md) that found it, when known.
        expected: what a correct ledger holds (hex for hashes), when known.
        actual: what was found, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        branch: str | None = None,
        seq: int | None = None,
        step: int | None = None,
        expected: str | None = None,
        actual: str | None = None,
    ) -> None:
        super().__init__(message)
        self.branch = branch
        self.seq = seq
        self.step = step
        self.expected = expected
        self.actual = actual


class DecodeError(IntegrityError):
    """Bytes that are not what the format says (CBOR, note, proof, JSON line, bundle)."""


class ProofError(IntegrityError):
    """A Merkle proof, checkpoint or signature that does not verify."""


class RefusedError(MemrootError):
    """A request the ledger refuses; nothing was written."""


class ValidationError(RefusedError):
    """An entry or request with a missing, unknown or wrongly typed field.

    Attributes:
        field: the dotted name of the offending field, when there is one.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFoundError(RefusedError):
    """A request names something (entry, object, branch, root) that does not exist."""


class ClosedError(RefusedError):
    """A call on a handle (a ``Memory``) after it was closed; nothing was read or written."""


class StorageError(MemrootError):
    """The storage under the ledger failed: disk full, read-only, locked, missing file."""


class KeyFileError(MemrootError):
    """A signing or verifier key file is missing, unreadable, malformed or too open."""


def cache_edited(
    path: os.PathLike[str] | str, what: str, *, branch: str | None = None, seq: int | None = None
) -> IntegrityError:
    """Return the refusal of an edited host cache: what is wrong, and how to recover.

    The cache holds derived state only (no entry, no key), so deleting it loses nothing:
    the next open of the ledger rebuilds it from the entries in PostgreSQL.
    """
    return IntegrityError(
        f"step 9: this host's derived-state cache {path} is edited: {what}; nothing was "
        f"served or written. Delete the file ({path}, with its -wal and -shm files): the "
        "next open rebuilds it from the ledger",
        branch=branch,
        seq=seq,
        step=9,
    )
