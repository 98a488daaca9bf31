"""Publish a branch's tree as a C2SP tlog-tiles directory (c2sp.org/tlog-tiles), incrementally.

Any static file server or object store can then serve the log to remote verifiers and
witnesses, which fetch only the tiles they need to check an inclusion or consistency proof:

    checkpoint                        the newest signed checkpoint note (the only mutable file)
    tile/<L>/<N>[.p/<W>]              Merkle tree tiles of height 8: 256 hashes of 32 bytes
    tile/entries/<N>[.p/<W>]          entry bundles: each entry as a big-endian uint16 length
                                      and the exact entry bytes
    memroot/checkpoints/<N>           memroot's extension: every retained signed checkpoint
                                      note, by tree size (``<N>`` grouped as tile indexes)

A level-``L`` tile holds the hashes of the complete subtrees of ``256**L`` leaves, which are
exactly the tree nodes at level ``8 * L`` (level 0: the leaf hashes). ``<N>`` is written in
3-digit groups, all but the last prefixed with ``x`` (1234067 is ``x001/x234/067``). Partial
tiles (width 1-255) are written for the size of *every* retained checkpoint, so a tile client
can verify each of them (C2SP: logs MUST serve the partial tiles of the sizes they signed).

Publishing is incremental: the directory's ``checkpoint`` says what is published (its size
``P``); the tree's right edge at ``P`` is read back from the published tiles, and only the
entries after ``P`` are read from the ledger and hashed. The new checkpoint replaces the old
one last, so an interrupted run leaves a consistent directory and the next run completes it.
Full tiles that already exist are compared byte for byte (a directory of another tree is
refused). When the ledger setting ``publish`` is set (``set_publish``), every checkpoint the
ledger signs is published at once (``publish_configured``, called after each checkpoint).

tlog-tiles limits an entry to 65535 bytes (uint16 lengths); a larger entry is refused, naming
it. ``TileReader`` serves tree nodes from a tiles directory (so roots and proofs can be
computed from the published files alone, as a tile client does).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from memroot.ledger import merkle
from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.errors import (
    DecodeError,
    NotFoundError,
    ProofError,
    RefusedError,
    StorageError,
)
from memroot.ledger.hashing import HASH_SIZE, leaf_hash, node_hash
from memroot.ledger.note import Verifier, open_checkpoint
from memroot.ledger.transparency._checkpoints import checkpoints_after
from memroot.ledger.transparency._versioned import VersionedCache

if TYPE_CHECKING:
    from memroot.ledger.backends.store import Store
    from memroot.ledger.ledger import Ledger

__all__ = [
    "CHECKPOINTS_DIR",
    "PUBLISH_META",
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "TileReader",
    "Tiles",
    "branch_directory",
    "checkpoint_path",
    "publish_configured",
    "publish_setting",
    "read_tile_file",
    "set_publish",
    "split_bundle",
    "tile_path",
    "write_tiles",
]

TILE_HEIGHT: Final = 8
TILE_WIDTH: Final = 1 << TILE_HEIGHT
MAX_TILE_ENTRY: Final = 0xFFFF
CHECKPOINTS_DIR: Final = "memroot/checkpoints"
PUBLISH_META: Final = "publish"
"""Store meta key: JSON ``{"dir": path, "branches": [...]}`` when every checkpoint publishes."""


def _grouped(index: int) -> str:
    groups = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        groups.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(groups))


def tile_path(level: int | str, index: int, width: int = TILE_WIDTH) -> str:
    """Return the tile path ``tile/<L>/<N>[.p/<W>]`` (``level="entries"`` for entry bundles).

    Raises:
        ValueError: for a negative index or a width outside 1..256.
    """
    if index < 0 or not 1 <= width <= TILE_WIDTH:
        raise ValueError(f"bad tile index {index} or width {width}")
    path = f"tile/{level}/{_grouped(index)}"
    return path if width == TILE_WIDTH else f"{path}.p/{width}"


def checkpoint_path(size: int) -> str:
    """Return the path of the retained checkpoint of ``size`` (memroot's extension)."""
    if size < 0:
        raise ValueError(f"bad checkpoint size {size}")
    return f"{CHECKPOINTS_DIR}/{_grouped(size)}"


def branch_directory(out: Path, branch: str) -> Path:
    """Return where ``branch`` is published under ``out``: ``out`` for main, else ``out/branch/B``.

    The path mirrors the branch's origin ``O/branch/B``, as tlog-tiles suggests the origin be
    the log's URL prefix.
    """
    return Path(out) if branch == CANONICAL_BRANCH else Path(out) / "branch" / branch


@dataclass(frozen=True, slots=True)
class Tiles:
    """What ``write_tiles`` published."""

    directory: Path
    origin: str
    size: int
    root: bytes
    tiles_written: int
    tiles_kept: int
    previous_size: int = 0
    checkpoints: int = 0


def split_bundle(data: bytes, what: str) -> list[bytes]:
    """Split an entry bundle into its entries (big-endian uint16 length, then the bytes).

    Raises:
        DecodeError: if a length runs past the end of the bundle.
    """
    out: list[bytes] = []
    i = 0
    while i < len(data):
        if i + 2 > len(data):
            raise DecodeError(f"{what} ends inside an entry length")
        n = int.from_bytes(data[i : i + 2], "big")
        if i + 2 + n > len(data):
            raise DecodeError(f"{what}: entry {len(out)} runs past the end of the bundle")
        out.append(data[i + 2 : i + 2 + n])
        i += 2 + n
    return out


def read_tile_file(directory: Path, rel: str, missing: str) -> bytes:
    """Return the bytes of the file ``rel`` of the tiles directory ``directory``.

    Raises:
        NotFoundError: ``missing``, if there is no such file.
        StorageError: if it cannot be read.
    """
    try:
        return (directory / rel).read_bytes()
    except FileNotFoundError as e:
        raise NotFoundError(missing) from e
    except OSError as e:
        raise StorageError(f"cannot read {directory / rel}: {e.strerror}") from e


class TileReader:
    """Serve the nodes of the tree of ``size`` leaves from a tiles directory (a NodeReader).

    Node ``(level, index)`` with ``level = 8L + r`` is hashed up from the ``2**r`` hashes of
    the level-``L`` tile that hold it: a full tile if its tile is complete at ``size``, else
    the partial tile of ``size`` (which C2SP requires for a signed size). Reads are cached.
    """

    def __init__(self, directory: Path, size: int) -> None:
        """Read tiles of the tree of ``size`` leaves under ``directory``."""
        self.directory = Path(directory)
        self.size = size
        self._cache: dict[tuple[int, int], bytes] = {}

    def tile(self, level: int, index: int) -> bytes:
        """Return the bytes of tile ``index`` at tile level ``level`` for this size.

        Raises:
            NotFoundError: if the file is missing.
            DecodeError: if it has the wrong length.
        """
        key = (level, index)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        full = self.size >> (TILE_HEIGHT * (level + 1))
        width = TILE_WIDTH if index < full else (self.size >> (TILE_HEIGHT * level)) % TILE_WIDTH
        if index > full or width == 0:
            raise NotFoundError(f"tile {level}/{index} is outside the tree of size {self.size}")
        rel = tile_path(level, index, width)
        data = read_tile_file(self.directory, rel, f"tile {rel} is missing from {self.directory}")
        if len(data) != width * HASH_SIZE:
            raise DecodeError(f"tile {rel} is {len(data)} bytes, expected {width * HASH_SIZE}")
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = data
        return data

    def hashes(self, level: int, index: int) -> list[bytes]:
        """Return the hashes of one tile."""
        data = self.tile(level, index)
        return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]

    def node(self, level: int, index: int) -> bytes:
        """Return the hash of the complete node ``(level, index)``."""
        tl, r = divmod(level, TILE_HEIGHT)
        first = index << r
        data = self.tile(tl, first >> TILE_HEIGHT)
        start = (first % TILE_WIDTH) * HASH_SIZE
        chunk = data[start : start + (HASH_SIZE << r)]
        if len(chunk) != HASH_SIZE << r:
            raise DecodeError(f"node ({level}, {index}) is not in its tile")
        hs = [chunk[i : i + HASH_SIZE] for i in range(0, len(chunk), HASH_SIZE)]
        while len(hs) > 1:
            hs = [node_hash(hs[i], hs[i + 1]) for i in range(0, len(hs), 2)]
        return hs[0]

    def __call__(self, ids: Sequence[tuple[int, int]]) -> list[bytes]:
        """Read nodes (the ``merkle.NodeReader`` protocol)."""
        return [self.node(level, index) for level, index in ids]


def _published(out: Path, verifiers: list[Verifier], origin: str) -> tuple[int, bytes] | None:
    """Return ``(size, root)`` of the checkpoint published in ``out``, or None."""
    path = out / "checkpoint"
    if not path.exists():
        return None
    try:
        cp = open_checkpoint(path.read_bytes(), verifiers, origin=origin).checkpoint
    except (DecodeError, ProofError, OSError) as e:
        raise RefusedError(f"{path} is not a checkpoint of this log: {e}") from e
    return cp.size, bytes(cp.root)


def write_tiles(
    ledger: Ledger,
    out: Path,
    *,
    branch: str = CANONICAL_BRANCH,
    sign: bool = True,
    backfill: bool = True,
) -> Tiles:
    """Publish ``branch`` into the tlog-tiles directory ``out``, adding only what is new.

    With ``sign`` the tree is checkpointed first if it grew. Every retained checkpoint of the
    branch gets its partial tiles and its note under ``memroot/checkpoints/``; the newest
    becomes ``out/checkpoint``. With ``backfill`` the retained checkpoints no larger than the
    published one are checked too and their missing files written (a directory written
    before partial tiles were kept for every checkpoint); that is O(checkpoints), so the
    publication after every checkpoint skips it.

    Raises:
        RefusedError: if the branch has no checkpoint, an entry exceeds 65535 bytes, or ``out``
            holds tiles of a different tree (or of a larger tree than the ledger's).
        NotFoundError: if there is no such branch.
        StorageError: if the files cannot be written.
        KeyFileError: if ``sign`` and the signing key cannot be loaded.
    """
    out = Path(out)
    if sign:
        ledger.checkpoint(branch)
    store = ledger.store
    b = store.branch(branch)
    last = store.latest_checkpoint(b.no)
    if last is None:
        raise RefusedError(f"branch {branch!r} has no signed checkpoint to publish")
    size, root, note = last
    verifiers = [Verifier.from_vkey(k) for k in ledger.all_vkeys()]
    origin = open_checkpoint(note, verifiers).checkpoint.origin
    writer = _TileWriter(out)
    try:
        published = _published(out, verifiers, origin)
        start = 0
        if published is not None:
            start, start_root = published
            if start > size:
                raise RefusedError(
                    f"{out} publishes a tree of size {start}, larger than the ledger's {size}: "
                    "the ledger was rolled back, or the directory is of another copy"
                )
            if start and ledger.root(start, branch) != start_root:
                raise RefusedError(
                    f"{out} holds tiles of a different tree (the root at size {start} differs)"
                )
        levels, bundle, compact = _seed(out, start)
        with store.read():
            # Recompute the signed root over what is to be published before a file is
            # written: a tampered entry must not reach a public directory, even partly.
            edge = merkle.CompactRange.from_hashes(compact.size, compact.hashes)
            _check_entries(store, b.no, branch, start, size, root, edge)
            _write_growth(writer, out, store, b.no, start, size, backfill, levels, bundle, compact)
        # Read the new edge back from the files: what a tile client will compute.
        if merkle.tree_root(size, TileReader(out, size)) != root:
            raise RefusedError(f"the tiles written to {out} do not give the signed root")
        writer.put("checkpoint", note.encode("utf-8"), replace=True)
    except OSError as e:
        raise StorageError(f"cannot write tiles to {out}: {e}") from e
    return Tiles(
        out, origin, size, bytes(root), writer.written, writer.kept, start, writer.checkpoints
    )


def _check_entries(
    store: Store,
    branch_no: int,
    branch: str,
    start: int,
    size: int,
    root: bytes,
    compact: merkle.CompactRange,
) -> None:
    """Refuse unless entries ``start..size`` extend ``compact`` to the signed ``root``."""
    for row in store.iter_entry_rows(branch_no, start, size):
        data = bytes(row.data)
        if len(data) > MAX_TILE_ENTRY:
            raise RefusedError(
                f"entry {row.seq} of {branch!r} is {len(data)} bytes; tlog-tiles entry "
                f"bundles hold entries of at most {MAX_TILE_ENTRY} bytes"
            )
        compact.append(leaf_hash(data))
    if compact.size != size or compact.root() != root:
        raise RefusedError(
            f"the entries of {branch!r} do not recompute the signed root at size {size}; "
            "run `memroot verify` before publishing (nothing was written)"
        )


def _write_growth(
    writer: _TileWriter,
    out: Path,
    store: Store,
    branch_no: int,
    start: int,
    size: int,
    backfill: bool,
    levels: list[list[bytes]],
    bundle: list[bytes],
    compact: merkle.CompactRange,
) -> None:
    """Write the tiles, bundles and checkpoint notes of entries ``start..size`` (checked).

    ``levels``, ``bundle`` and ``compact`` are the right edge ``_seed`` read back from the
    published tiles; they are extended in place.
    """
    retained = checkpoints_after(store, branch_no, -1 if backfill else start)
    notes = {s: n for s, _, n in retained}
    sizes = sorted(s for s in notes if s > start)
    for s in sorted(x for x in notes if x <= start):
        _backfill(writer, out, s, start)
        if not (out / checkpoint_path(s)).exists():
            writer.put(checkpoint_path(s), notes[s].encode("utf-8"))
    next_i = 0
    for row in store.iter_entry_rows(branch_no, start, size):
        data = bytes(row.data)
        bundle.append(len(data).to_bytes(2, "big") + data)
        h = leaf_hash(data)
        for level, index, node in [(0, row.seq, h), *compact.append(h)]:
            if level % TILE_HEIGHT:
                continue
            tl = level // TILE_HEIGHT
            if tl == len(levels):
                levels.append([])
            levels[tl].append(node)
            if len(levels[tl]) == TILE_WIDTH:
                writer.put(tile_path(tl, index // TILE_WIDTH), b"".join(levels[tl]))
                levels[tl].clear()
        if len(bundle) == TILE_WIDTH:
            writer.put(tile_path("entries", row.seq // TILE_WIDTH), b"".join(bundle))
            bundle.clear()
        while next_i < len(sizes) and sizes[next_i] == compact.size:
            _partials(writer, sizes[next_i], levels, bundle)
            writer.put(
                checkpoint_path(sizes[next_i]),
                notes[sizes[next_i]].encode("utf-8"),
                replace=True,
            )
            next_i += 1
    writer.checkpoints = len(sizes)


def _seed(out: Path, size: int) -> tuple[list[list[bytes]], list[bytes], merkle.CompactRange]:
    """Read the tree's right edge at the published ``size`` back from the tiles."""
    if size == 0:
        return [], [], merkle.CompactRange()
    reader = TileReader(out, size)
    compact = merkle.CompactRange.from_hashes(size, reader(merkle.perfect_subtrees(size)))
    levels: list[list[bytes]] = []
    tl = 0
    while size >> (TILE_HEIGHT * tl):
        width = (size >> (TILE_HEIGHT * tl)) % TILE_WIDTH
        index = size >> (TILE_HEIGHT * (tl + 1))
        levels.append(reader.hashes(tl, index) if width else [])
        tl += 1
    width = size % TILE_WIDTH
    bundle: list[bytes] = []
    if width:
        rel = tile_path("entries", size // TILE_WIDTH, width)
        try:
            entries = split_bundle((out / rel).read_bytes(), rel)
        except FileNotFoundError as e:
            raise RefusedError(f"{out / rel} is missing: the directory is incomplete") from e
        if len(entries) != width:
            raise RefusedError(f"{out / rel} holds {len(entries)} entries, not {width}")
        bundle = [len(e).to_bytes(2, "big") + e for e in entries]
    return levels, bundle, compact


def _partials(
    writer: _TileWriter, size: int, levels: list[list[bytes]], bundle: list[bytes]
) -> None:
    """Write the partial tiles of ``size``: ``floor(size / 256**l) mod 256`` hashes per level."""
    for tl, hashes in enumerate(levels):
        if hashes:
            n = size >> (TILE_HEIGHT * (tl + 1))
            writer.put(tile_path(tl, n, len(hashes)), b"".join(hashes))
    if bundle:
        writer.put(tile_path("entries", size // TILE_WIDTH, len(bundle)), b"".join(bundle))


def _backfill(writer: _TileWriter, out: Path, size: int, published: int) -> None:
    """Write any missing partial tile of an older retained ``size`` from published tiles.

    A partial tile of width ``w`` is the first ``w`` hashes (or entries) of the tile that
    holds it at a larger size: the full tile, or the partial tile of ``published``.
    """
    tl = 0
    while size >> (TILE_HEIGHT * tl):
        width = (size >> (TILE_HEIGHT * tl)) % TILE_WIDTH
        index = size >> (TILE_HEIGHT * (tl + 1))
        if width and not (out / tile_path(tl, index, width)).exists():
            source = TileReader(out, published).tile(tl, index)
            writer.put(tile_path(tl, index, width), source[: width * HASH_SIZE])
        tl += 1
    width = size % TILE_WIDTH
    rel = tile_path("entries", size // TILE_WIDTH, width) if width else None
    if rel is not None and not (out / rel).exists():
        full = out / tile_path("entries", size // TILE_WIDTH)
        pw = published % TILE_WIDTH
        src = (
            full
            if full.exists()
            else out / tile_path("entries", published // TILE_WIDTH, pw or TILE_WIDTH)
        )
        entries = split_bundle(src.read_bytes(), str(src))[:width]
        writer.put(rel, b"".join(len(e).to_bytes(2, "big") + e for e in entries))


class _TileWriter:
    """Write immutable tile files once; check the ones already there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.written = 0
        self.kept = 0
        self.checkpoints = 0  # checkpoints newly published (after the published size)

    def put(self, rel: str, data: bytes, *, replace: bool = False) -> None:
        path = self.root / rel
        if not replace and path.exists():
            if path.read_bytes() != data:
                raise RefusedError(
                    f"{path} already exists with other contents: the directory holds tiles "
                    "of a different tree"
                )
            self.kept += 1
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        if not replace:
            self.written += 1


# --------------------------------------------------------------------------- ledger setting


_SETTING_SEEN: VersionedCache[str | None] = VersionedCache()
"""Per open store: the raw publish setting (every sealed append asks; see ``publish_setting``)."""


def publish_setting(
    ledger: Ledger, version: int | None = None
) -> tuple[Path, tuple[str, ...]] | None:
    """Return ``(directory, branches)`` when every checkpoint publishes, else None.

    With ``version`` (the store's ``data_version`` the caller holds, as after a commit) the
    stored value is cached per connection under it: another connection's change moves the
    number, and ``set_publish``, the setting's one writer, forgets the cached value.

    Raises:
        DecodeError: if the stored setting is damaged.
    """
    store = ledger.store

    def read() -> str | None:
        raw = store.meta(PUBLISH_META)
        return raw if isinstance(raw, str) else None

    raw = _SETTING_SEEN.get(store, version, read)
    if raw is None:
        return None
    try:
        obj = json.loads(raw)
        return Path(obj["dir"]), tuple(str(b) for b in obj["branches"])
    except (ValueError, KeyError, TypeError) as e:
        raise DecodeError(f"the ledger's publish setting is damaged: {e}") from e


def set_publish(ledger: Ledger, out: Path | None, branches: Sequence[str] = ()) -> None:
    """Make every checkpoint of ``branches`` publish to ``out`` (None: stop publishing).

    Raises:
        NotFoundError: for a branch that does not exist.
        StorageError: if the ledger cannot be written.
    """
    for b in branches:
        ledger.store.branch(b)
    value = (
        None
        if out is None
        else json.dumps({"dir": str(Path(out).resolve()), "branches": sorted(set(branches))})
    )
    _SETTING_SEEN.forget(ledger.store)
    try:
        with ledger.store.write():
            ledger.store.set_meta(PUBLISH_META, value)
    finally:
        _SETTING_SEEN.forget(ledger.store)  # set (or not): read it again


def publish_configured(ledger: Ledger, version: int | None = None) -> list[Tiles]:
    """Publish every configured branch (the ledger setting); nothing when it is not set.

    ``version``: as :func:`publish_setting` (the witnesses' ``after_commit`` passes the one
    the committed transaction read).

    Raises:
        RefusedError, StorageError: as :func:`write_tiles`.
    """
    setting = publish_setting(ledger, version)
    if setting is None:
        return []
    out, branches = setting
    return [
        write_tiles(ledger, branch_directory(out, b), branch=b, sign=False, backfill=False)
        for b in branches
    ]
