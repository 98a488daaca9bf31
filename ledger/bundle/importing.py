"""Rebuild a ledger file from an auditor's bundle, after verifying the bundle.

The rebuilt ledger holds the bundle's entries byte for byte, their content and salts (erased
content stays erased, by the same TOMBSTONE), the tree nodes recomputed from the entries, the
same chain heads and the same signed checkpoints: its roots and checkpoints are the original's.
It holds no signing key (a bundle never carries one): it reads, proves and verifies; signing
new checkpoints needs the original key file. Derived state of the layers above (memory objects,
roots) is not part of the ledger file's core tables and is rebuilt by those layers' replay.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memroot.ledger import merkle
from memroot.ledger.backends.pg import PgStore, is_url, redact
from memroot.ledger.backends.store import Store, entry_key
from memroot.ledger.bundle.audit import audit_bundle
from memroot.ledger.bundle.export import BundleReader
from memroot.ledger.entries import CANONICAL_BRANCH, ZERO_HASH, Entry, Kind
from memroot.ledger.errors import DecodeError, IntegrityError, StorageError
from memroot.ledger.hashing import content_digest, leaf_hash
from memroot.ledger.keyset import KEY_ENTRIES_META, KEY_ENTRY_TYPES, ROTATED_VKEYS_META
from memroot.ledger.trust import TrustedState
from memroot.ledger.verify import AuditReport
from memroot.ledger.vocab import OpType

__all__ = ["Imported", "import_bundle"]

_CHUNK = 4096


@dataclass(frozen=True, slots=True)
class Imported:
    """What ``import_bundle`` rebuilt."""

    path: Path
    origin: str
    ledger_id: str
    entries: int
    branches: int
    checkpoints: int
    report: AuditReport


def import_bundle(
    bundle: Path | BundleReader,
    path: Path | str,
    *,
    vkeys: Sequence[str] = (),
    trusted: TrustedState | None = None,
) -> Imported:
    """Verify ``bundle`` (every auditor step) and rebuild it as a new ledger file at ``path``.

    ``path`` may be a ``postgresql://`` URL of a database without memroot tables: the
    ledger is rebuilt there (``Imported.path`` then names the URL, password hidden).

    Nothing is written unless the audit finds no violation; the file is written in one
    transaction and removed again if anything fails, so ``path`` holds a whole ledger or none.

    Raises:
        IntegrityError: carrying the first finding, if the bundle does not verify.
        StorageError: if ``path`` exists or cannot be written.
        NotFoundError, DecodeError: if there is no readable bundle.
    """
    reader = bundle if isinstance(bundle, BundleReader) else BundleReader(Path(bundle))
    url = str(path) if is_url(path) else None
    path = Path(redact(url)) if url is not None else Path(path)
    if url is None and path.exists():
        raise StorageError(f"{path} already exists; refusing to overwrite a ledger")
    report = audit_bundle(reader, vkeys=vkeys, trusted=trusted, update_trusted=False)
    f = report.first_failure()
    if f is not None:
        raise IntegrityError(
            f"the bundle does not verify; nothing was imported: {f}",
            branch=f.branch,
            seq=f.seq,
            step=f.step,
            expected=f.expected,
            actual=f.actual,
        )
    # A PostgreSQL database (its tables made here) or a new file.
    store = PgStore(url, create=True) if url is not None else Store(path, create=True)
    try:
        with store.write():
            m = reader.manifest
            store.set_meta("ledger_id", m.ledger_id)
            store.set_meta("origin", m.origin)
            store.set_meta("snapshot_every", m.snapshot_every)
            entries = checkpoints = 0
            key_seqs: list[int] = []
            for b in reader.branches():
                entries += _import_branch(
                    reader, store, b.no, b.name, key_seqs if b.name == CANONICAL_BRANCH else None
                )
                no = store.branch(b.name).no
                for size, root, note in reader.checkpoints(b.no):
                    store.insert_checkpoint(no, size, root, note)
                    checkpoints += 1
            # The key cache (FORMAT.md 7.5) of the imported entries, as a writer keeps it
            # (a ledger without key entries has none).
            if key_seqs:
                store.set_meta(KEY_ENTRIES_META, json.dumps(key_seqs))
            main_no = store.branch(CANONICAL_BRANCH).no
            key_entries = [Entry.from_bytes(store.entry_row(main_no, s).data) for s in key_seqs]
            rotated = [
                str(e.body["payload"].get("new_vkey"))
                for e in key_entries
                if e.type == OpType.KEY_ROTATE.value and isinstance(e.body.get("payload"), dict)
            ]
            if rotated:
                store.set_meta(ROTATED_VKEYS_META, json.dumps(rotated))
    except BaseException:
        if isinstance(store, PgStore):
            store.drop()
            raise
        store.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        raise
    store.close()
    return Imported(
        path, m.origin, m.ledger_id, entries, len(reader.branches()), checkpoints, report
    )


def _import_branch(
    reader: BundleReader, store: Store, bundle_no: int, name: str, key_seqs: list[int] | None
) -> int:
    """Copy one branch's rows, event index, tree nodes and head; return its entry count.

    On ``main`` (``key_seqs`` given), the seqs of its key entries are collected there.
    """
    genesis = Entry.from_bytes(reader.entry_row(bundle_no, 0).data)
    if name == CANONICAL_BRANCH:
        no = store.add_branch(name, ZERO_HASH).no
    else:
        anchor: Any = genesis.body.get("anchor")
        if not isinstance(anchor, dict):
            raise DecodeError(f"branch {name!r}: its genesis records no anchor", branch=name)
        no = store.add_branch(
            name, genesis.prev, parent=str(anchor.get("branch")), anchor=anchor.get("seq")
        ).no
    compact = merkle.CompactRange()
    rows: list[tuple[Any, ...]] = []
    events: list[tuple[bytes, int]] = []
    erasures: list[tuple[int, int]] = []
    nodes: list[tuple[int, bytes]] = []
    head = ZERO_HASH
    count = 0

    def flush() -> None:
        store.insert_entries(rows)
        store.insert_event_ids(events)
        for k, by in erasures:
            store.erase_content(k, by)
        store.insert_nodes(nodes)
        for batch in (rows, events, erasures, nodes):
            batch.clear()

    for row in reader.iter_entry_rows(bundle_no):
        h = leaf_hash(row.data)
        k = entry_key(no, row.seq)
        entry = Entry.from_bytes(row.data, h)
        digest = None if row.content is None else content_digest(row.content)
        rows.append((k, h, row.data, digest, row.salt, row.content))
        if key_seqs is not None and entry.kind is Kind.OP and entry.type in KEY_ENTRY_TYPES:
            key_seqs.append(row.seq)
        if entry.kind is Kind.EVENT:
            events.append((bytes.fromhex(str(entry.body["id"]).replace("-", "")), k))
        if row.erased_by is not None:
            erasures.append((k, row.erased_by))
        for level, index, node in compact.append(h):
            if level >= store.node_min_level:  # the lower ones are folded from the leaves
                nodes.append((store.key_of_node(no, level, index), node))
        head, count = h, count + 1
        if len(rows) >= _CHUNK:
            flush()
    flush()
    store.set_head(no, count, head)
    return count
