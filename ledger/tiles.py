"""Publish a branch's tree as a C2SP tlog-tiles directory (c2sp.org/tlog-tiles).

Any static file server or object store can then serve the log to remote verifiers and
witnesses, which fetch only the tiles they need to check an inclusion or consistency proof:

    checkpoint                        the newest signed checkpoint note (the only mutable file)
    tile/<L>/<N>[.p/<W>]              Merkle tree tiles of height 8: 256 hashes of 32 bytes
    tile/entries/<N>[.p/<W>]          entry bundles: each entry as a big-endian uint16 length
                                      and the exact entry bytes

A level-``L`` tile holds the hashes of the complete subtrees of ``256**L`` leaves, which are
exactly the tree nodes at level ``8 * L`` (level 0: the leaf hashes). ``<N>`` is written in
3-digit groups, all but the last prefixed with ``x`` (1234067 is ``x001/x234/067``). Partial
tiles (width 1-255) are written for the checkpoint's size. Running ``write_tiles`` again on the
same directory adds what the tree grew by: full tiles already there are checked, not rewritten,
and the partial tiles of earlier checkpoints stay (the spec asks logs to serve them).

tlog-tiles limits an entry to 65535 bytes (uint16 lengths); a larger entry is refused, naming
it. The tree's hashes are recomputed from the entry bytes as they stream, not read from the
store's node cache.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from memroot.ledger import merkle
from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.errors import RefusedError, StorageError
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.note import Verifier, open_checkpoint

if TYPE_CHECKING:
    from memroot.ledger.ledger import Ledger

__all__ = ["TILE_HEIGHT", "TILE_WIDTH", "Tiles", "tile_path", "write_tiles"]

TILE_HEIGHT: Final = 8
TILE_WIDTH: Final = 1 << TILE_HEIGHT
MAX_TILE_ENTRY: Final = 0xFFFF


def tile_path(level: int | str, index: int, width: int = TILE_WIDTH) -> str:
    """Return the tile path ``tile/<L>/<N>[.p/<W>]`` (``level="entries"`` for entry bundles).

    Raises:
        ValueError: for a negative index or a width outside 1..256.
    """
    if index < 0 or not 1 <= width <= TILE_WIDTH:
        raise ValueError(f"bad tile index {index} or width {width}")
    groups = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        groups.append(f"x{index % 1000:03d}")
        index //= 1000
    path = f"tile/{level}/" + "/".join(reversed(groups))
    return path if width == TILE_WIDTH else f"{path}.p/{width}"


@dataclass(frozen=True, slots=True)
class Tiles:
    """What ``write_tiles`` published."""

    directory: Path
    origin: str
    size: int
    root: bytes
    tiles_written: int
    tiles_kept: int


def write_tiles(
    ledger: Ledger, out: Path, *, branch: str = CANONICAL_BRANCH, sign: bool = True
) -> Tiles:
    """Write (or extend) the tlog-tiles directory ``out`` for ``branch`` at its checkpoint.

    With ``sign`` the tree is checkpointed first if it grew; the tiles describe the newest
    signed checkpoint, whose note becomes ``out/checkpoint``.

    Raises:
        RefusedError: if the branch has no checkpoint, an entry exceeds 65535 bytes, or ``out``
            holds tiles of a different tree.
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
    verifiers = [Verifier.from_vkey(k) for k in ledger.genesis_vkeys()]
    origin = open_checkpoint(note, verifiers).checkpoint.origin
    writer = _TileWriter(out)
    levels: list[list[bytes]] = []  # per tile level: hashes of the current (partial) tile
    bundle: list[bytes] = []
    compact = merkle.CompactRange()
    try:
        with store.read():
            for row in store.iter_entry_rows(b.no, 0, size):
                data = bytes(row.data)
                if len(data) > MAX_TILE_ENTRY:
                    raise RefusedError(
                        f"entry {row.seq} of {branch!r} is {len(data)} bytes; tlog-tiles entry "
                        f"bundles hold entries of at most {MAX_TILE_ENTRY} bytes"
                    )
                bundle.append(len(data).to_bytes(2, "big") + data)
                h = leaf_hash(data)
                completed = [(0, row.seq, h), *compact.append(h)]
                for level, index, node in completed:
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
        if compact.size != size or compact.root() != root:
            raise RefusedError(
                f"the entries of {branch!r} do not recompute the signed root at size {size}; "
                "run `memroot verify` before publishing"
            )
        # Partial tiles for this checkpoint's size: floor(size / 256**l) mod 256 hashes.
        for tl, hashes in enumerate(levels):
            if hashes:
                n = size >> (TILE_HEIGHT * (tl + 1))
                writer.put(tile_path(tl, n, len(hashes)), b"".join(hashes))
        if bundle:
            writer.put(tile_path("entries", size // TILE_WIDTH, len(bundle)), b"".join(bundle))
        writer.replace("checkpoint", note.encode("utf-8"))
    except OSError as e:
        raise StorageError(f"cannot write tiles to {out}: {e}") from e
    return Tiles(out, origin, size, bytes(root), writer.written, writer.kept)


class _TileWriter:
    """Write immutable tile files once; check the ones already there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.written = 0
        self.kept = 0

    def put(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        if path.exists():
            if path.read_bytes() != data:
                raise RefusedError(
                    f"{path} already exists with other contents: the directory holds tiles "
                    "of a different tree"
                )
            self.kept += 1
            return
        self.replace(rel, data)
        self.written += 1

    def replace(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
