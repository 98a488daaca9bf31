"""Auditor's bundles: a self-contained, streamable export of a ledger (docs/FORMAT.md §7).

A bundle is a directory an auditor verifies offline with the ledger's public key and nothing
else (``memroot.ledger.bundle.audit``). Layout, version 1::

    manifest.json                     what is in the bundle: counts, heads, roots, file digests
    branches/<branch>/entries         every entry's exact bytes, in seq order
    branches/<branch>/entries.idx     byte offset of every 256th entry (random access)
    branches/<branch>/content         event content and salts (or the erasing TOMBSTONE's seq),
                                      in a fixed binary layout
    branches/<branch>/checkpoints     every signed checkpoint note with its size and root
    sections/<name>                   records of a layer above (memory roots, summaries, ...)

Every data file is a sequence of *frames*: a 4-byte big-endian length, then that many bytes.
An ``entries`` frame is the entry bytes as hashed into the tree; a ``content`` frame is a fixed
binary record (seq, salt, content; or seq and the erasing TOMBSTONE's seq); every other frame
is one value in memroot's canonical CBOR. Frames stream: writing and reading hold one record
at a time.

The manifest is not signed and need not be: entries are bound by the signed checkpoints,
content by the commitments inside the entries. Its per-file SHA-256 digests and counts catch a
truncated or damaged copy early and name the file. New record kinds of the layers above travel
as named sections (``BundleSection``) without a format change: the manifest lists them, the
reader hands their records to whoever asks, and the auditor's replay checks compare them.

This module imports no storage driver: the reader is part of the offline verifier.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Final, Protocol

from memroot.ledger import encoding
from memroot.ledger._fs import fsync_dir
from memroot.ledger.entries import CANONICAL_BRANCH, now_us
from memroot.ledger.errors import DecodeError, NotFoundError, RefusedError, StorageError
from memroot.ledger.hashing import HASH_SIZE, sha256_stream

if TYPE_CHECKING:
    from memroot.ledger.ledger import Ledger

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "INDEX_EVERY",
    "MANIFEST",
    "MAX_FRAME",
    "BranchInfo",
    "BundleBranch",
    "BundleReader",
    "BundleRow",
    "BundleSection",
    "CachelessSource",
    "FileInfo",
    "Manifest",
    "branch_files",
    "export_bundle",
    "read_frames",
]

BUNDLE_FORMAT: Final = "memroot-bundle"
BUNDLE_VERSION: Final = 1
MANIFEST: Final = "manifest.json"
MAX_FRAME: Final = 64 * 1024 * 1024  # an entry is at most ~1 MiB, content at most 16 MiB
MAX_MANIFEST: Final = 64 * 1024 * 1024
INDEX_EVERY: Final = 256
_LEN: Final = struct.Struct(">I")
_OFFSET: Final = struct.Struct(">Q")
# Content frames (fixed binary layouts, no CBOR: the auditor needs only struct unpacking):
#   present: seq u64 || 0x01 || salt length u8 || salt || content bytes
#   erased:  seq u64 || 0x02 || seq of the erasing TOMBSTONE u64
_CONTENT_HEAD: Final = struct.Struct(">QBB")
_ERASED: Final = struct.Struct(">QBQ")
_PRESENT: Final = 0x01
_ERASED_TAG: Final = 0x02
_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_HEX64_RE: Final = re.compile(r"[0-9a-f]{64}\Z")
_BUF: Final = 1 << 20


def branch_files(branch: str) -> dict[str, str]:
    """Return the bundle-relative paths of a branch's files, by kind."""
    base = f"branches/{branch}"
    return {
        "entries": f"{base}/entries",
        "index": f"{base}/entries.idx",
        "content": f"{base}/content",
        "checkpoints": f"{base}/checkpoints",
    }


def _section_path(name: str) -> str:
    return f"sections/{name}"


# -- manifest ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One data file as the manifest records it."""

    path: str
    records: int
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """Return the manifest form."""
        return {"records": self.records, "bytes": self.bytes, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class BranchInfo:
    """One branch as the manifest records it: its chain head and tree root at export."""

    name: str
    size: int
    head: bytes
    root: bytes
    checkpoints: int

    def to_json(self) -> dict[str, Any]:
        """Return the manifest form (hashes in hex)."""
        return {
            "name": self.name,
            "size": self.size,
            "head": self.head.hex(),
            "root": self.root.hex(),
            "checkpoints": self.checkpoints,
        }


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a bundle holds (``manifest.json``)."""

    origin: str
    ledger_id: str
    snapshot_every: int
    created: int
    vkeys: tuple[str, ...]
    branches: tuple[BranchInfo, ...]
    files: dict[str, FileInfo]
    sections: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """Return the JSON document."""
        return {
            "format": BUNDLE_FORMAT,
            "version": BUNDLE_VERSION,
            "origin": self.origin,
            "ledger_id": self.ledger_id,
            "snapshot_every": self.snapshot_every,
            "created": self.created,
            "vkeys": list(self.vkeys),
            "branches": [b.to_json() for b in self.branches],
            "sections": list(self.sections),
            "files": {p: f.to_json() for p, f in sorted(self.files.items())},
        }

    @classmethod
    def from_json(cls, obj: Any) -> Manifest:
        """Parse and check a manifest document strictly.

        Raises:
            DecodeError: naming the first missing, unknown or malformed field.
        """
        if not isinstance(obj, dict):
            raise DecodeError("the bundle manifest is not a JSON object")
        if obj.get("format") != BUNDLE_FORMAT:
            raise DecodeError(f"not a memroot bundle (format {obj.get('format')!r})")
        if obj.get("version") != BUNDLE_VERSION:
            raise DecodeError(
                f"bundle version {obj.get('version')!r} is not supported (this memroot reads "
                f"version {BUNDLE_VERSION})"
            )
        origin = _field(obj, "origin", str)
        ledger_id = _field(obj, "ledger_id", str)
        snapshot_every = _field(obj, "snapshot_every", int)
        created = _field(obj, "created", int)
        vkeys = tuple(_str_list(obj, "vkeys"))
        raw_branches = _field(obj, "branches", list)
        branches: list[BranchInfo] = []
        for i, b in enumerate(raw_branches):
            where = f"branches[{i}]"
            if not isinstance(b, dict):
                raise DecodeError(f"manifest {where} is not an object")
            name = _field(b, "name", str, where)
            if not _NAME_RE.match(name) or any(x.name == name for x in branches):
                raise DecodeError(f"manifest {where}: bad or repeated branch name {name!r}")
            size = _field(b, "size", int, where)
            count = _field(b, "checkpoints", int, where)
            if size < 0 or count < 0:
                raise DecodeError(f"manifest {where}: negative size or checkpoint count")
            branches.append(
                BranchInfo(name, size, _hash(b, "head", where), _hash(b, "root", where), count)
            )
        if not branches or branches[0].name != CANONICAL_BRANCH:
            raise DecodeError(f"manifest branches must start with {CANONICAL_BRANCH!r}")
        sections = tuple(_str_list(obj, "sections"))
        for name in sections:
            if not _NAME_RE.match(name) or sections.count(name) > 1:
                raise DecodeError(f"manifest: bad or repeated section name {name!r}")
        raw_files = _field(obj, "files", dict)
        files: dict[str, FileInfo] = {}
        for path, f in raw_files.items():
            where = f"files[{path!r}]"
            if not isinstance(f, dict):
                raise DecodeError(f"manifest {where} is not an object")
            records = _field(f, "records", int, where)
            size = _field(f, "bytes", int, where)
            digest = _field(f, "sha256", str, where)
            if records < 0 or size < 0 or not _HEX64_RE.match(digest):
                raise DecodeError(f"manifest {where}: bad record count, size or sha256")
            files[path] = FileInfo(path, records, size, digest)
        expected = {p for b in branches for p in branch_files(b.name).values()}
        expected |= {_section_path(s) for s in sections}
        if set(files) != expected:
            odd = sorted(set(files) ^ expected)
            raise DecodeError(f"manifest files do not match its branches and sections: {odd}")
        return cls(
            origin,
            ledger_id,
            snapshot_every,
            created,
            vkeys,
            tuple(branches),
            files,
            sections,
        )


def _field(obj: dict[str, Any], name: str, kind: type, where: str = "") -> Any:
    value = obj.get(name)
    if type(value) is not kind:
        at = f" {where}" if where else ""
        raise DecodeError(f"manifest{at}: field {name!r} must be a {kind.__name__}")
    return value


def _str_list(obj: dict[str, Any], name: str) -> list[str]:
    value = _field(obj, name, list)
    if not all(type(v) is str for v in value):
        raise DecodeError(f"manifest: {name!r} must be a list of strings")
    return list(value)


def _hash(obj: dict[str, Any], name: str, where: str) -> bytes:
    value = _field(obj, name, str, where)
    if not _HEX64_RE.match(value):
        raise DecodeError(f"manifest {where}: {name!r} must be 64 lowercase hex digits")
    return bytes.fromhex(value)


# -- frames -----------------------------------------------------------------------------------


class _FrameWriter:
    """Write frames to a new file while counting and hashing them.

    Frames collect in a buffer of about 1 MiB that is hashed and written in one call, so the
    per-frame cost is two appends to a bytearray.
    """

    def __init__(self, root: Path, rel: str) -> None:
        self.rel = rel
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f: BinaryIO = open(path, "xb", buffering=0)  # noqa: SIM115 - closed in close()
        self._sha = sha256_stream()
        self._buf = bytearray()
        self.records = 0
        self.bytes = 0

    def write(self, payload: bytes) -> int:
        """Append one frame; return the byte offset it starts at."""
        n = len(payload)
        if n > MAX_FRAME:
            raise RefusedError(f"a record of {n} bytes exceeds the bundle frame limit")
        at = self.bytes
        buf = self._buf
        buf += _LEN.pack(n)
        buf += payload
        self.records += 1
        self.bytes = at + 4 + n
        if len(buf) >= _BUF:
            self._flush()
        return at

    def _flush(self) -> None:
        if self._buf:
            self._sha.update(self._buf)
            view = memoryview(self._buf)
            # An unbuffered write may write less than asked (a file size limit, a full disk):
            # write the rest, so the failure surfaces as an OSError instead of lost bytes.
            while view:
                n = self._f.write(view)
                if not n:
                    raise OSError(errno.EIO, f"cannot write {self.rel}: nothing was written")
                view = view[n:]
            view.release()
            self._buf.clear()

    def close(self) -> FileInfo:
        """Flush to disk and return the file's manifest record."""
        self._flush()
        os.fsync(self._f.fileno())
        self._f.close()
        return FileInfo(self.rel, self.records, self.bytes, self._sha.hexdigest())

    def abort(self) -> None:
        """Close without caring about the contents (the bundle is being discarded)."""
        with contextlib.suppress(OSError):
            self._f.close()


def read_frames(f: IO[bytes], info: FileInfo) -> Iterator[bytes]:
    """Yield the frames of an open bundle file, checking them against the manifest record.

    The count, total size and SHA-256 are checked when the file ends; a frame that claims more
    bytes than remain (or than ``MAX_FRAME``) is refused before anything is allocated for it.
    The file is read and hashed in chunks of about 1 MiB.

    Raises:
        DecodeError: naming the file, if it is truncated, longer, damaged or not as recorded.
    """
    sha = sha256_stream()
    buf = b""
    pos = 0  # start of the first unread frame in buf
    consumed = 0  # bytes of the frames yielded so far
    count = 0
    eof = False

    def fill(need: int) -> None:
        nonlocal buf, pos, eof
        while len(buf) - pos < need and not eof:
            chunk = f.read(max(_BUF, need))
            if not chunk:
                eof = True
                return
            sha.update(chunk)
            buf = buf[pos:] + chunk
            pos = 0

    while True:
        if len(buf) - pos < 4:
            fill(4)
        have = len(buf) - pos
        if have == 0:
            break
        if have < 4:
            raise DecodeError(f"bundle file {info.path} ends inside a frame header")
        (n,) = _LEN.unpack_from(buf, pos)
        if n > MAX_FRAME or consumed + 4 + n > info.bytes:
            raise DecodeError(
                f"bundle file {info.path}: frame {count} claims {n} bytes, more than the "
                "manifest leaves for it (truncated, damaged or extended)"
            )
        if have < 4 + n:
            fill(4 + n)
        if len(buf) - pos < 4 + n:
            raise DecodeError(f"bundle file {info.path} is truncated inside frame {count}")
        payload = buf[pos + 4 : pos + 4 + n]
        pos += 4 + n
        consumed += 4 + n
        count += 1
        yield payload
    if consumed != info.bytes or count != info.records or sha.hexdigest() != info.sha256:
        raise DecodeError(
            f"bundle file {info.path} does not match the manifest (records {count} of "
            f"{info.records}, sha256 {sha.hexdigest()} of {info.sha256})"
        )


# -- writing ----------------------------------------------------------------------------------


class BundleSection(Protocol):
    """Records of a layer above the ledger that travel in a bundle (e.g. memory roots).

    ``records`` yields values of memroot's CBOR data model, one per frame, streamed. The
    layer's replay check reads them back with ``BundleReader.section(name)``.
    """

    name: str

    def records(self, ledger: Ledger) -> Iterable[Any]:
        """Yield the section's records."""


def export_bundle(
    ledger: Ledger,
    out: Path,
    *,
    sections: Sequence[BundleSection] = (),
    sign: bool = True,
) -> Manifest:
    """Write the auditor's bundle of ``ledger`` to the new directory ``out``; return its manifest.

    With ``sign``, every branch whose tree grew since its newest checkpoint gets a fresh signed
    checkpoint first, so the whole bundle is covered by signatures (unless another process
    appends in between: its entries are exported unsigned, after the newest checkpoint). The
    export reads one consistent snapshot of the ledger without blocking writers (appends that
    commit after the snapshot began are not included), streams every file, and appears under
    ``out`` only when complete: it is written to a temporary sibling directory and renamed.

    Raises:
        RefusedError: if ``out`` exists, or a section name is invalid or repeated.
        StorageError: if the files cannot be written (nothing is left behind).
        KeyFileError: if ``sign`` and the signing key cannot be loaded.
    """
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise RefusedError(f"{out} already exists; refusing to overwrite it")
    names = [s.name for s in sections]
    for name in names:
        if not isinstance(name, str) or not _NAME_RE.match(name) or names.count(name) > 1:
            raise RefusedError(f"bad or repeated bundle section name {name!r}")
    if sign:
        for b in ledger.store.branches():
            ledger.checkpoint(b.name)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        tmp.mkdir(parents=False)
    except OSError as e:
        raise StorageError(f"cannot create the bundle directory next to {out}: {e}") from e
    try:
        manifest = _write(ledger, tmp, sections)
        data = json.dumps(manifest.to_json(), indent=1, sort_keys=True).encode("utf-8")
        with open(tmp / MANIFEST, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _fsync_tree(tmp)
        os.rename(tmp, out)
        fsync_dir(out.parent)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise StorageError(f"cannot write the bundle {out}: {e}") from e
        raise
    return manifest


def _write(ledger: Ledger, root: Path, sections: Sequence[BundleSection]) -> Manifest:
    store = ledger.store
    files: dict[str, FileInfo] = {}
    infos: list[BranchInfo] = []
    open_writers: list[_FrameWriter] = []
    try:
        with store.read():  # one snapshot: heads, rows and checkpoints agree
            for b in store.branches():
                paths = branch_files(b.name)
                entries = _FrameWriter(root, paths["entries"])
                content = _FrameWriter(root, paths["content"])
                open_writers[:] = [entries, content]
                offsets: list[bytes] = []
                for position, row in enumerate(store.iter_entry_rows(b.no)):
                    at = entries.write(row.data)
                    if position % INDEX_EVERY == 0:
                        offsets.append(_OFFSET.pack(at))
                    if row.content is not None:
                        salt = bytes(row.salt or b"")
                        content.write(
                            _CONTENT_HEAD.pack(position, _PRESENT, len(salt))
                            + salt
                            + bytes(row.content)
                        )
                    elif row.erased_by is not None:
                        content.write(_ERASED.pack(position, _ERASED_TAG, row.erased_by))
                for w in (entries, content):
                    info = w.close()
                    files[info.path] = info
                open_writers.clear()
                index = _FrameWriter(root, paths["index"])
                open_writers[:] = [index]
                index.write(b"".join(offsets))
                files[paths["index"]] = index.close()
                cps = _FrameWriter(root, paths["checkpoints"])
                open_writers[:] = [cps]
                checkpoints = store.checkpoints(b.no)
                for size, cp_root, note in checkpoints:
                    cps.write(encoding.encode({"note": note, "root": bytes(cp_root), "size": size}))
                files[paths["checkpoints"]] = cps.close()
                open_writers.clear()
                # For information only (the auditor recomputes it): the root from the tree
                # cache, O(log n) reads in this same snapshot.
                tree_root = bytes(ledger.root(b.size, b.name))
                infos.append(BranchInfo(b.name, b.size, bytes(b.head), tree_root, len(checkpoints)))
            for section in sections:
                w = _FrameWriter(root, _section_path(section.name))
                open_writers[:] = [w]
                for record in section.records(ledger):
                    w.write(encoding.encode(record))
                files[w.rel] = w.close()
                open_writers.clear()
            vkeys = tuple(ledger.genesis_vkeys())
            return Manifest(
                origin=ledger.origin,
                ledger_id=ledger.ledger_id,
                snapshot_every=ledger.snapshot_every,
                created=now_us(),
                vkeys=vkeys,
                branches=tuple(infos),
                files=files,
                sections=tuple(s.name for s in sections),
            )
    finally:
        for w in open_writers:
            w.abort()


def _fsync_tree(root: Path) -> None:
    for dirpath, _, _ in os.walk(root):
        fsync_dir(Path(dirpath))


# -- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BundleRow:
    """One entry as a bundle holds it: the shape of ``store.EntryRow``, without caches."""

    seq: int
    data: bytes
    salt: bytes | None = None
    content: bytes | None = None
    erased_by: int | None = None
    hash: bytes | None = None
    digest: bytes | None = None


@dataclass(frozen=True, slots=True)
class BundleBranch:
    """A branch of a bundle in the shape the auditor reads (``no`` is the manifest order)."""

    no: int
    name: str
    size: int
    head: bytes


class CachelessSource:
    """The cache answers of a source that stores no caches (a bundle, a tiles directory).

    ``has_caches`` is False: the auditor recomputes leaf hashes and roots from the entry
    bytes and never asks for the caches, so there is nothing to disagree.
    """

    has_caches = False
    has_content = True

    def node_mismatches(
        self, branch_no: int, nodes: Sequence[tuple[int, int, bytes]]
    ) -> list[tuple[int, int, bytes, bytes | None]]:
        """Return no mismatches: there is no node cache to disagree."""
        return []

    def event_index_mismatches(
        self, branch_no: int, events: Sequence[tuple[str, int]]
    ) -> list[tuple[str, int, int | None]]:
        """Return no mismatches: there is no event index."""
        return []

    def event_index_size(self) -> int:
        """Return 0: there is no event index (never asked: ``has_caches`` is False)."""
        return 0


class BundleReader(CachelessSource):
    """An open bundle directory: manifest, branch rows, checkpoints and sections, streamed.

    Construction reads and checks the manifest only; every other file is read on demand, frame
    by frame, and checked against the manifest's count and digest when it ends.
    """

    def __init__(self, path: Path) -> None:
        """Open the bundle at ``path``.

        Raises:
            NotFoundError: if there is no bundle directory at ``path``.
            DecodeError: if the manifest is missing, unreadable or malformed.
        """
        self.path = Path(path)
        if not self.path.is_dir():
            raise NotFoundError(f"no bundle directory at {self.path}")
        mpath = self.path / MANIFEST
        try:
            with _open_regular(mpath, MANIFEST) as f:
                raw = f.read(MAX_MANIFEST + 1)
        except OSError as e:
            raise DecodeError(f"cannot read the bundle manifest {mpath}: {e.strerror}") from e
        if len(raw) > MAX_MANIFEST:
            raise DecodeError(f"bundle manifest {mpath} is larger than {MAX_MANIFEST} bytes")
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise DecodeError(f"bundle manifest {mpath} is not valid JSON: {e}") from e
        self.manifest = Manifest.from_json(obj)
        self._branches = [
            BundleBranch(i, b.name, b.size, b.head) for i, b in enumerate(self.manifest.branches)
        ]

    # -- the LedgerSource interface (ledger.verify) ---------------------------------------------

    def branches(self) -> list[BundleBranch]:
        """Return the bundle's branches in the manifest's order (parents first)."""
        return list(self._branches)

    def branch(self, name: str) -> BundleBranch:
        """Return one branch by name.

        Raises:
            NotFoundError: if the bundle has no such branch.
        """
        for b in self._branches:
            if b.name == name:
                return b
        raise NotFoundError(f"the bundle has no branch named {name!r}")

    def meta(self, key: str) -> Any:
        """Return a ledger-wide value from the manifest (``origin``, ``ledger_id``, ...)."""
        return {
            "origin": self.manifest.origin,
            "ledger_id": self.manifest.ledger_id,
            "snapshot_every": self.manifest.snapshot_every,
        }.get(key)

    def _open(self, rel: str) -> tuple[BinaryIO, FileInfo]:
        return _open_regular(self.path / rel, rel), self.manifest.files[rel]

    def iter_entry_rows(self, branch_no: int) -> Iterator[BundleRow]:
        """Yield a branch's rows in file order, each joined with its content record.

        The offset index is checked against the entries file once the branch ends.

        Raises:
            DecodeError: if a file does not match the manifest or a content record is bad.
        """
        paths = branch_files(self._branches[branch_no].name)
        ef, einfo = self._open(paths["entries"])
        cf, cinfo = self._open(paths["content"])
        offsets: list[int] = []
        at = 0
        with ef, cf:
            contents = (_content_record(p, cinfo.path) for p in read_frames(cf, cinfo))
            pending = next(contents, None)
            last_seq = -1
            for seq, data in enumerate(read_frames(ef, einfo)):
                if seq % INDEX_EVERY == 0:
                    offsets.append(at)
                at += 4 + len(data)
                if pending is not None and pending[0] <= last_seq:
                    raise DecodeError(f"bundle file {cinfo.path}: records are not in seq order")
                if pending is not None and pending[0] == seq:
                    _, salt, content, erased_by = pending
                    yield BundleRow(seq, data, salt, content, erased_by)
                    last_seq = seq
                    pending = next(contents, None)
                else:
                    yield BundleRow(seq, data)
            if pending is not None:
                raise DecodeError(
                    f"bundle file {cinfo.path}: a record names entry {pending[0]}, which the "
                    "branch does not have (or records are out of order)"
                )
            for _ in contents:  # drain: checks the file's digest and count
                pass
        if self._offsets(branch_no) != offsets:
            raise DecodeError(f"bundle file {paths['index']} does not index the entries file")

    def _offsets(self, branch_no: int) -> list[int]:
        """Read a branch's offset index.

        Raises:
            DecodeError: if the index file is damaged or not an index.
        """
        rel = branch_files(self._branches[branch_no].name)["index"]
        xf, xinfo = self._open(rel)
        with xf:
            frames = list(read_frames(xf, xinfo))
        if len(frames) != 1 or len(frames[0]) % 8:
            raise DecodeError(f"bundle file {rel} is not an offset index")
        return [o for (o,) in _OFFSET.iter_unpack(frames[0])]

    def entry_row(self, branch_no: int, seq: int) -> BundleRow:
        """Return one row, found through the offset index (content is not joined).

        Raises:
            NotFoundError: if the branch has no entry ``seq``.
            DecodeError: if the index or the entries file is damaged.
        """
        b = self._branches[branch_no]
        if not 0 <= seq < b.size:
            raise NotFoundError(f"no entry {seq} on branch {b.name!r} in the bundle")
        paths = branch_files(b.name)
        offsets = self._offsets(branch_no)
        slot = seq // INDEX_EVERY
        if slot >= len(offsets):
            raise DecodeError(f"bundle file {paths['index']} has no offset for entry {seq}")
        ef, einfo = self._open(paths["entries"])
        with ef:
            ef.seek(offsets[slot])
            for _ in range(seq - slot * INDEX_EVERY + 1):
                head = ef.read(4)
                if len(head) != 4:
                    raise DecodeError(f"bundle file {einfo.path} is truncated at entry {seq}")
                (n,) = _LEN.unpack(head)
                if n > MAX_FRAME:
                    raise DecodeError(f"bundle file {einfo.path} is damaged at entry {seq}")
                data = ef.read(n)
            if len(data) != n:
                raise DecodeError(f"bundle file {einfo.path} is truncated at entry {seq}")
        return BundleRow(seq, data)

    def checkpoints(self, branch_no: int) -> list[tuple[int, bytes, str]]:
        """Return ``(size, root, note)`` of every checkpoint of a branch, by size.

        Raises:
            DecodeError: if the file does not match the manifest or a record is malformed.
        """
        rel = branch_files(self._branches[branch_no].name)["checkpoints"]
        f, info = self._open(rel)
        out: list[tuple[int, bytes, str]] = []
        with f:
            for payload in read_frames(f, info):
                rec = encoding.decode(payload)
                if (
                    type(rec) is not dict
                    or set(rec) != {"note", "root", "size"}
                    or type(rec["size"]) is not int
                    or type(rec["root"]) is not bytes
                    or len(rec["root"]) != HASH_SIZE
                    or type(rec["note"]) is not str
                ):
                    raise DecodeError(f"bundle file {rel}: malformed checkpoint record")
                out.append((rec["size"], rec["root"], rec["note"]))
        if [s for s, _, _ in out] != sorted({s for s, _, _ in out}):
            raise DecodeError(f"bundle file {rel}: checkpoints are not in increasing size order")
        return out

    def latest_checkpoint(self, branch_no: int) -> tuple[int, bytes, str] | None:
        """Return the checkpoint with the largest size, or None."""
        cps = self.checkpoints(branch_no)
        return cps[-1] if cps else None

    def read_nodes(self, branch_no: int, ids: Sequence[tuple[int, int]]) -> list[bytes]:
        """Refuse: a bundle carries no tree node cache (roots are recomputed from entries).

        Raises:
            StorageError: always.
        """
        raise StorageError("a bundle carries no tree node cache")

    # -- sections -------------------------------------------------------------------------------

    def section_names(self) -> tuple[str, ...]:
        """Return the names of the sections of the layers above, in manifest order."""
        return self.manifest.sections

    def section(self, name: str) -> Iterator[Any]:
        """Yield the decoded records of one section, streamed.

        Raises:
            NotFoundError: if the bundle has no such section.
            DecodeError: if the file does not match the manifest or a record is not CBOR.
        """
        if name not in self.manifest.sections:
            raise NotFoundError(f"the bundle has no section named {name!r}")
        f, info = self._open(_section_path(name))
        with f:
            for payload in read_frames(f, info):
                yield encoding.decode(payload)


def _open_regular(path: Path, rel: str) -> BinaryIO:
    """Open a bundle file for reading, refusing anything but a regular file.

    A bundle comes from elsewhere: a FIFO or device planted in it must not hang or flood the
    auditor, so the file is opened without blocking and checked before it is read.

    Raises:
        DecodeError: if the file is missing, unreadable or not a regular file.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise DecodeError(f"bundle file {rel} cannot be read: {e.strerror}") from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DecodeError(f"bundle file {rel} is not a regular file")
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _content_record(
    payload: bytes, where: str
) -> tuple[int, bytes | None, bytes | None, int | None]:
    """Decode one content frame: ``(seq, salt, content, erased_by)``.

    Raises:
        DecodeError: if the frame has neither layout.
    """
    if len(payload) >= _CONTENT_HEAD.size:
        seq, tag, salt_len = _CONTENT_HEAD.unpack_from(payload)
        if tag == _PRESENT and len(payload) >= _CONTENT_HEAD.size + salt_len:
            # A salt of the wrong size is the auditor's finding (step 4), not a format error.
            body = _CONTENT_HEAD.size + salt_len
            return seq, payload[_CONTENT_HEAD.size : body], payload[body:], None
        if tag == _ERASED_TAG and len(payload) == _ERASED.size:
            seq, _, erased_by = _ERASED.unpack(payload)
            return seq, None, None, erased_by
    raise DecodeError(f"bundle file {where}: malformed content record")
