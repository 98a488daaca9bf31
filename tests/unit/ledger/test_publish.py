"""`publish`: tiles for every retained checkpoint, incremental, read back by a plain client."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memroot.cli.main import cli
from memroot.ledger.bundle.audit import audit_tiles
from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import Verifier, open_checkpoint, split_note
from memroot.ledger.transparency.tiles import (
    publish_configured,
    set_publish,
    tile_path,
    write_tiles,
)

ORIGIN = "example.org/published"


def _mth(hashes: list[bytes]) -> bytes:
    """RFC 6962 MTH over already-hashed leaves (plain hashlib, no memroot code)."""
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = 1 << ((len(hashes) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + _mth(hashes[:k]) + _mth(hashes[k:])).digest()


def plain_client_root(directory: Path, size: int) -> bytes:
    """What a C2SP tile client does: fetch the level-0 tiles a tree of ``size`` needs (full,
    then the partial one of that size, ``.p/W``) and the entry bundles, check that each entry
    hashes to its tile hash, and compute the root."""
    leaves: list[bytes] = []
    for n in range((size + 255) // 256):
        width = 256 if (n + 1) * 256 <= size else size % 256
        tile = (directory / tile_path(0, n, width)).read_bytes()
        bundle = (directory / tile_path("entries", n, width)).read_bytes()
        assert len(tile) == 32 * width
        hashes = [tile[i : i + 32] for i in range(0, len(tile), 32)]
        i, entries = 0, []
        while i < len(bundle):
            ln = int.from_bytes(bundle[i : i + 2], "big")
            entries.append(bundle[i + 2 : i + 2 + ln])
            i += 2 + ln
        assert [hashlib.sha256(b"\x00" + e).digest() for e in entries] == hashes
        leaves += hashes
    return _mth(leaves)


@pytest.fixture
def grown(tmp_path: Path, inputs: Any) -> Path:
    """A ledger checkpointed at many sizes, crossing the 256 and 512 tile boundaries."""
    path = tmp_path / "l.db"
    with Ledger.init(path, origin=ORIGIN) as ledger:
        for n in (4, 120, 131, 1, 200, 60):
            ledger.append_batch(inputs.mixed(n, seed=n))
            ledger.checkpoint()
    return path


def test_every_retained_checkpoint_is_verifiable_by_a_plain_tile_client(
    tmp_path: Path, grown: Path
) -> None:
    """For each signed size, the partial tiles exist and give the signed root."""
    out = tmp_path / "log"
    with Ledger.open(grown) as ledger:
        write_tiles(ledger, out)
        vkey = Verifier.from_vkey(ledger.vkey())
        sizes = [s for s, _, _ in ledger.store.checkpoints(ledger.store.branch("main").no)]
    assert sizes == [1, 5, 125, 256, 257, 457, 517]
    for size in sizes:
        note = (out / "memroot/checkpoints" / f"{size:03d}").read_text()
        cp = open_checkpoint(note, [vkey], origin=ORIGIN).checkpoint
        assert plain_client_root(out, size) == cp.root, size
    top = open_checkpoint((out / "checkpoint").read_text(), [vkey]).checkpoint
    assert top.size == 517
    # a tree of 256 is one full tile and a level-1 partial tile of width 1 (tlog-tiles)
    assert (out / "tile/1/000.p/1").stat().st_size == 32


def test_publishing_again_reads_only_the_new_entries(
    tmp_path: Path, grown: Path, inputs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second run starts at the published size and leaves the published files alone."""
    out = tmp_path / "log"
    with Ledger.open(grown) as ledger:
        write_tiles(ledger, out)
        before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
        ledger.append_batch(inputs.mixed(300, seed=99))
        starts: list[int] = []
        real = ledger.store.iter_entry_rows

        def spy(branch_no: int, start: int = 0, stop: int | None = None, **kw: Any) -> Any:
            starts.append(start)
            return real(branch_no, start, stop, **kw)

        monkeypatch.setattr(ledger.store, "iter_entry_rows", spy)
        t = write_tiles(ledger, out)
    # one pass recomputes the signed root before anything is written, one writes
    assert starts == [517, 517] and t.previous_size == 517 and t.size == 817
    changed = [p for p, m in before.items() if p.stat().st_mtime_ns != m]
    assert changed == [out / "checkpoint"]
    assert plain_client_root(out, 817) == t.root


def _files(out: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} if out.exists() else {}


def test_publishing_a_rewritten_entry_writes_nothing(
    tmp_path: Path, grown: Path, inputs: Any, raw: Any
) -> None:
    """A tampered entry never reaches the public directory, not even its bundle."""
    fresh, out = tmp_path / "fresh", tmp_path / "log"
    with Ledger.open(grown) as ledger:
        write_tiles(ledger, out)
        ledger.append_batch(inputs.mixed(300, seed=7))
        ledger.checkpoint()
    before = _files(out)
    raw.rewrite(grown, 600)  # in the growth not yet published
    with Ledger.open(grown, strict=False) as ledger:
        with pytest.raises(RefusedError, match="nothing was written"):
            write_tiles(ledger, out, sign=False)
        with pytest.raises(RefusedError, match="do not recompute the signed root"):
            write_tiles(ledger, fresh, sign=False)
    assert _files(out) == before
    assert not fresh.exists()
    # and the CLI: exit 3, the message on stderr, nothing written
    result = CliRunner().invoke(cli, ["-l", str(grown), "publish", str(fresh), "--no-sign"])
    assert result.exit_code == 3 and "nothing was written" in result.stderr
    assert not fresh.exists()


def test_the_ledger_setting_publishes_every_checkpoint(tmp_path: Path, inputs: Any) -> None:
    """With set_publish, each checkpoint the ledger signs lands in the directory at once."""
    out = tmp_path / "log"
    with Ledger.init(tmp_path / "l.db", origin=ORIGIN) as ledger:
        set_publish(ledger, out, ["main"])
        for n in (3, 7, 2):
            ledger.append_batch(inputs.mixed(n, seed=n))
            signed = ledger.checkpoint()
            published = (out / "checkpoint").read_text()
            assert published == signed.note
        assert [p.name for p in sorted((out / "memroot/checkpoints").iterdir())] == [
            "001",
            "004",
            "011",
            "013",
        ]
        set_publish(ledger, None)
        assert publish_configured(ledger) == []


def test_audit_tiles_verifies_a_log_from_the_tiles_alone(tmp_path: Path, grown: Path) -> None:
    """Entries, leaf hashes, upper tiles, every checkpoint root and signature: all hold."""
    out = tmp_path / "log"
    with Ledger.open(grown) as ledger:
        write_tiles(ledger, out)
        vkey = ledger.vkey()
    report = audit_tiles(out, vkeys=[vkey], update_trusted=False)
    assert report.ok, [str(f) for f in report.findings]
    assert report.entries == 517 and report.checkpoints == 7
    assert 4 not in report.steps_checked


def _published(tmp_path: Path, grown: Path) -> tuple[Path, str]:
    out = tmp_path / "log"
    with Ledger.open(grown) as ledger:
        write_tiles(ledger, out)
        return out, ledger.vkey()


def _steps(out: Path, vkey: str) -> set[int]:
    report = audit_tiles(out, vkeys=[vkey], update_trusted=False)
    return {f.step for f in report.findings}


def _flip_bit(path: Path, at: int) -> None:
    """Flip the low bit of byte ``at`` of a published file."""
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    path.write_bytes(bytes(data))


def test_a_changed_leaf_tile_is_found(tmp_path: Path, grown: Path) -> None:
    """A level-0 hash that is not its entry's hash fails step 5."""
    out, vkey = _published(tmp_path, grown)
    _flip_bit(out / "tile/0/001", 40)
    assert 5 in _steps(out, vkey)


def test_a_changed_entry_is_found(tmp_path: Path, grown: Path) -> None:
    """An entry bundle byte flipped breaks decoding, the chain or the roots."""
    out, vkey = _published(tmp_path, grown)
    _flip_bit(out / "tile/entries/000", 300)
    assert _steps(out, vkey) & {1, 3, 5}


def test_a_missing_partial_tile_of_an_old_checkpoint_is_found(tmp_path: Path, grown: Path) -> None:
    """A signed size whose partial tile is gone fails step 5 (a client could not verify it)."""
    out, vkey = _published(tmp_path, grown)
    (out / "tile/0/000.p/125").unlink()
    assert 5 in _steps(out, vkey)


def test_a_forged_checkpoint_is_found(tmp_path: Path, grown: Path) -> None:
    """A retained checkpoint note whose signature does not verify fails step 6."""
    out, vkey = _published(tmp_path, grown)
    path = out / "memroot/checkpoints/125"
    text, _ = split_note(path.read_text())
    path.write_text(text + "\n\u2014 " + ORIGIN + " " + base64.b64encode(bytes(68)).decode() + "\n")
    assert 6 in _steps(out, vkey)


def test_publish_backfills_what_an_older_directory_lacks(tmp_path: Path, grown: Path) -> None:
    """Partial tiles and notes of old checkpoints missing from the directory are written."""
    out, vkey = _published(tmp_path, grown)
    (out / "tile/0/000.p/125").unlink()
    (out / "tile/entries/000.p/5").unlink()
    (out / "memroot/checkpoints/005").unlink()
    with Ledger.open(grown) as ledger:
        write_tiles(ledger, out)
    for rel in ("tile/0/000.p/125", "tile/entries/000.p/5", "memroot/checkpoints/005"):
        assert (out / rel).exists(), rel
    for size in (5, 125):
        note = (out / "memroot/checkpoints" / f"{size:03d}").read_text()
        cp = open_checkpoint(note, [Verifier.from_vkey(vkey)]).checkpoint
        assert plain_client_root(out, size) == cp.root


def test_the_publish_and_audit_commands(tmp_path: Path, grown: Path, inputs: Any) -> None:
    """`publish DIR --every-checkpoint` then `audit --tiles DIR --vkey K` exit 0."""
    runner = CliRunner()
    out = tmp_path / "www"
    done = runner.invoke(
        cli, ["-l", str(grown), "publish", str(out), "--every-checkpoint", "--json"]
    )
    assert done.exit_code == 0, done.output
    [pub] = json.loads(done.stdout)["published"]
    assert (pub["size"], pub["previous_size"]) == (517, 0)
    with Ledger.open(grown) as ledger:
        vkey = ledger.vkey()
        ledger.append_batch(inputs.mixed(5, seed=5))
        ledger.checkpoint()  # publishes by itself now
    audited = runner.invoke(
        cli, ["audit", "--tiles", str(out), "--vkey", vkey, "--no-update", "--json"]
    )
    assert audited.exit_code == 0, audited.output
    assert json.loads(audited.stdout)["trusted"]["tiles"]["size"] == 522
