"""A canonical digest of the derived memory state, and where two states first differ.

``state_digest(db)`` commits to every row of the memory tables of one branch (events, object
versions, entities, edges, namespaces, grants and skipped entries), in a deterministic order,
with the row ids that only number rows physically left out. Two databases hold the same
derived state exactly when their digests are equal; ``rebuild`` and the auditor's step 9 compare
digests, and snapshots can commit to the state through it.

``as_of=S`` digests the state as of entry ``S``: rows with ``vfrom <= S`` (events with
``seq <= S``), with ``vto`` and ``erased_by`` later than ``S`` read as NULL. So the digest as
of ``S`` does not change when later entries are appended, and equals the digest taken when the
head was ``S + 1`` entries long.

Encoding (version 1). Each table's rows are read in the order below; a row is the list of its
columns (INTEGER and TEXT as themselves, NULL as null, REAL as the 8 bytes of its IEEE 754
binary64 big-endian form). Rows are grouped in chunks of 1024; a chunk's hash is
``SHA-256(cbor(list of rows))``. A table's digest is ``SHA-256(cbor([name, row count,
concatenated chunk hashes]))`` and the state digest is
``SHA-256("memroot/memory-state/v1" || 0x00 || cbor([1, branch, [table digests]]))``.
Rows of versioned tables are ordered by creation (within a branch, the order in which the
ledger's entries created them, which any replay reproduces); events by id; skipped entries by
seq.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import apsw

from memroot.ledger import encoding
from memroot.ledger._backend import NATIVE as _N
from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.hashing import domain_hash, sha256
from memroot.projections.tables import (
    EDGE_COLS,
    ENTITY_COLS,
    EVENT_COLS,
    GRANT_COLS,
    NAMESPACE_COLS,
    OBJECT_COLS,
)

__all__ = [
    "CHUNK",
    "DIGEST_TAG",
    "TABLES",
    "Difference",
    "array_head",
    "encode_rows",
    "first_difference",
    "rows_digest",
    "state_digest",
]

DIGEST_TAG: Final = "memroot/memory-state/v1"
CHUNK: Final = 1024
_PACK: Final = struct.Struct(">d").pack


@dataclass(frozen=True, slots=True)
class _Table:
    name: str
    columns: tuple[str, ...]
    key: tuple[int, ...]  # positions of the columns that name a row in a Difference


TABLES: Final = (
    _Table("mem_events", EVENT_COLS, (0,)),
    _Table("mem_objects", (*OBJECT_COLS, "vto"), (0, OBJECT_COLS.index("vfrom"))),
    _Table("mem_entities", (*ENTITY_COLS, "vto"), (0, ENTITY_COLS.index("vfrom"))),
    _Table("mem_edges", (*EDGE_COLS, "vto"), (0, EDGE_COLS.index("vfrom"))),
    _Table("mem_namespaces", (*NAMESPACE_COLS, "vto"), (0, NAMESPACE_COLS.index("vfrom"))),
    _Table("mem_grants", (*GRANT_COLS, "vto"), (0, 1, 2, GRANT_COLS.index("vfrom"))),
    _Table("mem_skipped", ("branch", "seq", "op_type", "reason"), (1,)),
)
"""The tables a digest covers, in digest order, with the columns it reads."""


def _select(t: _Table, branch: str, as_of: int | None) -> tuple[str, tuple[Any, ...]]:
    cols = list(t.columns)
    if t.name == "mem_events":
        if as_of is None:
            return (
                f"SELECT {', '.join(cols)} FROM mem_events WHERE branch = ? ORDER BY id",
                (branch,),
            )
        cols[-1] = "CASE WHEN erased_by <= ?1 THEN erased_by END"
        return (
            f"SELECT {', '.join(cols)} FROM mem_events WHERE branch = ?2 AND seq <= ?1 ORDER BY id",
            (as_of, branch),
        )
    if t.name == "mem_skipped":
        where = "branch = ?2" + ("" if as_of is None else " AND seq <= ?1")
        return (
            f"SELECT {', '.join(cols)} FROM mem_skipped WHERE {where} ORDER BY seq",
            (as_of, branch),
        )
    if as_of is None:
        return f"SELECT {', '.join(cols)} FROM {t.name} WHERE branch = ? ORDER BY rid", (branch,)
    cols[-1] = "CASE WHEN vto <= ?1 THEN vto END"
    return (
        f"SELECT {', '.join(cols)} FROM {t.name} WHERE branch = ?2 AND vfrom <= ?1 ORDER BY rid",
        (as_of, branch),
    )


def _rows(
    db: apsw.Connection, t: _Table, branch: str, as_of: int | None
) -> Iterator[tuple[Any, ...]]:
    sql, params = _select(t, branch, as_of)
    yield from db.execute(sql, params)


def _canonical(row: Sequence[Any]) -> list[Any]:
    return [_PACK(v) if type(v) is float else v for v in row]


def _float_free(db: apsw.Connection, name: str) -> bool:
    """Return True when no column of table ``name`` can hold a float (STRICT, no REAL/ANY)."""
    row = db.execute("SELECT strict FROM pragma_table_list WHERE name = ?", (name,)).fetchone()
    if row is None or not row[0]:
        return False
    types: Any = db.execute("SELECT type FROM pragma_table_xinfo(?)", (name,)).fetchall()
    return all(str(r[0]).upper() not in ("REAL", "ANY") for r in types)


def array_head(n: int) -> bytes:
    """Return the canonical CBOR head of an array of ``n`` items (major type 4)."""
    if n < 24:
        return bytes([0x80 | n])
    for code, size in ((0x98, 1), (0x99, 2), (0x9A, 4)):
        if n < 1 << (8 * size):
            return bytes([code]) + n.to_bytes(size, "big")
    return b"\x9b" + n.to_bytes(8, "big")


def encode_rows(rows: list[Sequence[Any]], *, floats_as_bytes: bool = False) -> bytes:
    """Return the canonical CBOR of the list of ``rows``, each row as an array.

    With ``floats_as_bytes`` a float value is encoded as the 8 bytes of its IEEE 754
    binary64 big-endian form (the digest's encoding of REAL columns). The native core
    encodes the rows as SQLite returns them (tuples); the reference builds the lists.

    Raises:
        TypeError, ValueError: if a value is outside the CBOR data model.
    """
    if _N is not None:
        try:
            return _N.encode_rows(rows, floats_as_bytes)
        except _N.Reject:
            pass  # the reference raises the error
    return encoding.encode([_canonical(r) if floats_as_bytes else list(r) for r in rows])


def rows_digest(db: apsw.Connection, table: str, cols: Sequence[str]) -> bytes | None:
    """Return a digest of every row of ``table`` (``cols``, ordered by them), or None.

    Two tables with equal digests hold equal rows in that order (as Python compares them).
    None when the table may hold a float (an equal digest would then not say so: NaN) or a
    value outside the CBOR data model: compare row by row then.
    """
    if not _float_free(db, table):
        return None
    names = ", ".join(cols)
    rows = db.execute(f"SELECT {names} FROM {table} ORDER BY {names}")
    chunks: list[bytes] = []
    try:
        while block := list(itertools.islice(rows, CHUNK)):
            chunks.append(sha256(encode_rows(block)))
    except (TypeError, ValueError):
        return None
    return sha256(b"".join(chunks))


def _table_digest(db: apsw.Connection, t: _Table, branch: str, as_of: int | None) -> bytes:
    chunks: list[bytes] = []
    count = 0
    sql, params = _select(t, branch, as_of)
    rows = db.execute(sql, params)
    # Rows of a table that holds no float are already canonical: a chunk is taken whole.
    plain = _float_free(db, t.name)
    while block := list(itertools.islice(rows, CHUNK)):
        chunks.append(sha256(encode_rows(block, floats_as_bytes=not plain)))
        count += len(block)
    return sha256(encoding.encode([t.name, count, b"".join(chunks)]))


def state_digest(
    db: apsw.Connection, *, as_of: int | None = None, branch: str = CANONICAL_BRANCH
) -> bytes:
    """Return the 32-byte digest of the derived memory state of ``branch``.

    ``as_of`` digests the state as of that entry (see the module docstring). Cost: one pass
    over the branch's rows (about a second per million rows here); run it inside one read or
    write transaction for a consistent result.

    Raises:
        apsw.SQLError: if the memory tables are not installed in ``db``.
    """
    digests = [_table_digest(db, t, branch, as_of) for t in TABLES]
    return domain_hash(DIGEST_TAG, encoding.encode([1, branch, digests]))


@dataclass(frozen=True, slots=True)
class Difference:
    """The first row where two derived states differ.

    ``key`` names the row (an id and the seq of its version, for most tables); ``column`` is
    the first differing column, or None when one side has a row the other lacks.
    """

    table: str
    key: tuple[Any, ...]
    column: str | None
    stored: Any
    replayed: Any

    def __str__(self) -> str:
        what = "row" if self.column is None else f"column {self.column}"
        name = " ".join(str(k) for k in self.key)
        return (
            f"{self.table} {name}: {what} differs (stored {self.stored!r}, replayed "
            f"{self.replayed!r})"
        )


def first_difference(
    stored: apsw.Connection,
    replayed: apsw.Connection,
    *,
    as_of: int | None = None,
    branch: str = CANONICAL_BRANCH,
) -> Difference | None:
    """Return the first row, in digest order, where two states differ; None if none does.

    Raises:
        apsw.SQLError: if the memory tables are missing from either database.
    """
    for t in TABLES:
        a_rows, b_rows = _rows(stored, t, branch, as_of), _rows(replayed, t, branch, as_of)
        while True:
            a, b = next(a_rows, None), next(b_rows, None)
            if a is None and b is None:
                break
            if a is None or b is None:
                present = a if a is not None else b
                assert present is not None
                return Difference(
                    t.name,
                    tuple(present[i] for i in t.key),
                    None,
                    None if a is None else "present",
                    None if b is None else "present",
                )
            if a != b:
                col = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
                return Difference(
                    t.name, tuple(a[i] for i in t.key), t.columns[col], a[col], b[col]
                )
    return None
