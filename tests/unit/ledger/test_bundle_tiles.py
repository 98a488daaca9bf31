"""C2SP tlog-tiles publication: paths, tile contents, entry bundles, checkpoint, growth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.errors import RefusedError
from memroot.ledger.hashing import leaf_hash
from memroot.ledger.ledger import Ledger
from memroot.ledger.merkle import CompactRange, verify_inclusion
from memroot.ledger.note import Verifier, open_checkpoint
from memroot.ledger.transparency.tiles import tile_path, write_tiles

ORIGIN = "example.org/memroot-test"


def test_tile_paths_follow_the_spec() -> None:
    """Indexes are 3-digit groups with x-prefixed directories; partial tiles get .p/W."""
    assert tile_path(0, 1234067) == "tile/0/x001/x234/067"
    assert tile_path(2, 0) == "tile/2/000"
    assert tile_path(1, 1000) == "tile/1/x001/000"
    assert tile_path(0, 5, 17) == "tile/0/005.p/17"
    assert tile_path("entries", 273, 112) == "tile/entries/273.p/112"
    with pytest.raises(ValueError):
        tile_path(0, 1, 0)


def read_bundle(data: bytes) -> list[bytes]:
    """Split an entry bundle into its uint16 length-prefixed entries."""
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i : i + 2], "big")
        out.append(data[i + 2 : i + 2 + n])
        i += 2 + n
    return out


def hashes(data: bytes) -> list[bytes]:
    assert len(data) % 32 == 0
    return [data[i : i + 32] for i in range(0, len(data), 32)]


@pytest.fixture
def ledger_path(tmp_path: Path, make_ledger: Any) -> Path:
    """A ledger of 601 entries: two full level-0 tiles and a partial one of 89."""
    return make_ledger(tmp_path, 600, origin=ORIGIN)


def test_tiles_of_a_601_entry_tree(tmp_path: Path, ledger_path: Path) -> None:
    """The directory holds exactly the spec's tiles, and they re-derive the signed root."""
    out = tmp_path / "log"
    with Ledger.open(ledger_path) as ledger:
        t = write_tiles(ledger, out)
        vkey = ledger.vkey()
        entries = [e.raw for e in ledger.entries()]
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    # Two retained checkpoints (size 1 from init, size 601): partial tiles for both.
    assert files == [
        "checkpoint",
        "memroot/checkpoints/001",
        "memroot/checkpoints/601",
        "tile/0/000",
        "tile/0/000.p/1",
        "tile/0/001",
        "tile/0/002.p/89",
        "tile/1/000.p/2",
        "tile/entries/000",
        "tile/entries/000.p/1",
        "tile/entries/001",
        "tile/entries/002.p/89",
    ]
    cp = open_checkpoint((out / "checkpoint").read_text(), [Verifier.from_vkey(vkey)])
    assert (cp.checkpoint.origin, cp.checkpoint.size, cp.checkpoint.root) == (ORIGIN, 601, t.root)
    leaves = [
        h for f in ("000", "001", "002.p/89") for h in hashes((out / f"tile/0/{f}").read_bytes())
    ]
    bundled = [
        e
        for f in ("000", "001", "002.p/89")
        for e in read_bundle((out / f"tile/entries/{f}").read_bytes())
    ]
    assert bundled == entries
    assert leaves == [leaf_hash(e) for e in entries]
    level1 = hashes((out / "tile/1/000.p/2").read_bytes())
    for i, h in enumerate(level1):
        cr = CompactRange()
        for leaf in leaves[i * 256 : (i + 1) * 256]:
            cr.append(leaf)
        assert cr.root() == h
    cr = CompactRange()
    for leaf in leaves:
        cr.append(leaf)
    assert cr.root() == t.root


def test_a_verifier_proves_inclusion_from_tiles(tmp_path: Path, ledger_path: Path) -> None:
    """An inclusion proof built by the ledger verifies against the published checkpoint root."""
    out = tmp_path / "log"
    with Ledger.open(ledger_path) as ledger:
        t = write_tiles(ledger, out)
        proof = ledger.inclusion_proof(300, t.size)
    leaf = hashes((out / "tile/0/001").read_bytes())[300 - 256]
    verify_inclusion(leaf, 300, t.size, proof, t.root)


def test_tiles_grow_incrementally(tmp_path: Path, ledger_path: Path, inputs: Any) -> None:
    """Re-running after growth keeps full tiles, adds new ones and the new partial tiles."""
    out = tmp_path / "log"
    with Ledger.open(ledger_path) as ledger:
        first = write_tiles(ledger, out)
        ledger.append_batch(inputs.mixed(200, seed=3))
        second = write_tiles(ledger, out)
    assert first.tiles_written == 9 and second.size == 801
    # Incremental: only the entries after 601 are read; written: tile 002 of each kind, the
    # new partial tiles 003.p/33 of each, and the level-1 partial tile 000.p/3; nothing of
    # the published part is rewritten or re-read.
    assert second.previous_size == 601
    assert (second.tiles_kept, second.tiles_written) == (0, 5)
    for rel in ("tile/0/002.p/89", "tile/0/003.p/33", "tile/0/002", "tile/1/000.p/3"):
        assert (out / rel).exists(), rel


def test_tiles_of_another_tree_are_refused(
    tmp_path: Path, ledger_path: Path, make_ledger: Any
) -> None:
    """A directory published by another log is refused and left as it was."""
    out = tmp_path / "log"
    other = make_ledger(tmp_path, 5, name="other.db", origin=ORIGIN)
    with Ledger.open(other) as ledger:
        write_tiles(ledger, out)
    before = (out / "checkpoint").read_bytes()
    with Ledger.open(ledger_path) as ledger, pytest.raises(RefusedError, match="not a checkpoint"):
        write_tiles(ledger, out)
    assert (out / "checkpoint").read_bytes() == before


def test_a_stale_tile_of_another_tree_is_never_overwritten(
    tmp_path: Path, ledger_path: Path, inputs: Any
) -> None:
    """A full tile that growth would write but that exists with other bytes is refused."""
    out = tmp_path / "log"
    with Ledger.open(ledger_path) as ledger:
        write_tiles(ledger, out)
        planted = out / "tile/0/002"
        planted.write_bytes(bytes(8192))
        ledger.append_batch(inputs.mixed(200, seed=3))
        with pytest.raises(RefusedError, match="different tree"):
            write_tiles(ledger, out)
    assert planted.read_bytes() == bytes(8192)


def test_entries_over_65535_bytes_are_refused(
    tmp_path: Path, make_ledger: Any, inputs: Any
) -> None:
    """tlog-tiles bundles use uint16 lengths: a larger entry is refused, naming it."""
    path = make_ledger(tmp_path, 3, origin=ORIGIN)
    with Ledger.open(path, hooks=()) as ledger:
        big = ledger.append(inputs.oversized())
        with pytest.raises(RefusedError, match=f"entry {big.seq} "):
            write_tiles(ledger, tmp_path / "log")
