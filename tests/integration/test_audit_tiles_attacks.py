"""`memroot audit --tiles DIR --vkey K` fails closed on every file a tile client could fetch.

The directories hold 2,000+ entries (issue 23: from about 1,000 events the "content missing"
findings filled the cap of 1,000, the tiles audit then removed them, and forgeries passed as
"OK"). Each attack copies the genuine directory, has an attacker process (``python -c``) flip
bytes in the copy, and runs the auditor's command: exit 1 with the finding that names the
forgery, no trusted state recorded, and the genuine directory untouched and still passing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli
from memroot.ledger.transparency.tiles import checkpoint_path, tile_path

ORIGIN = "example.org/tiles-audit"
EVENT = {
    "kind": "event",
    "stream": "s",
    "actor_id": "alice",
    "actor_type": "HUMAN_USER",
    "role": "USER",
    "namespace_id": "alice",
}

# The attacker: sets byte OFFSET of FILE to the byte value NEW, in its own process.
ATTACKER = (
    "import sys; p, o, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]); "
    "b = bytearray(open(p, 'rb').read()); b[o] = v; open(p, 'wb').write(bytes(b))"
)


def memroot(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def attack(path: Path, offset: int, new: int | None = None) -> None:
    """Run the attacker on ``path``: byte ``offset`` becomes ``new`` (default: one bit flipped)."""
    data = path.read_bytes()
    value = data[offset] ^ 1 if new is None else new
    assert value != data[offset]
    subprocess.run([sys.executable, "-c", ATTACKER, str(path), str(offset), str(value)], check=True)
    assert path.read_bytes() != data


def signature_offset(note: bytes) -> tuple[int, int]:
    """Return the offset of a base64 character inside the note's signature and a replacement."""
    sig_line = note.rstrip(b"\n").split(b"\n")[-1]
    offset = len(note.rstrip(b"\n")) - len(sig_line) + len(sig_line) // 2 + 4
    return offset, ord("A") if note[offset] != ord("A") else ord("B")


def import_events(ledger: Path, out: Path, start: int, count: int) -> None:
    lines = [json.dumps({**EVENT, "content": f"memory {i}"}) for i in range(start, start + count)]
    out.write_text("\n".join(lines) + "\n")
    result = memroot("-l", str(ledger), "import", str(out))
    assert result.exit_code == 0, result.output


def tree_digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(directory).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


class Published:
    """The genuine publication and the directories the attacks start from."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ledger = root / "agent.ledger"
        self.genuine = root / "genuine"
        self.older = root / "older"  # the same log published earlier, at 2,000+ entries
        self.other = root / "other"  # another ledger, same origin, another key
        self.vkey = ""
        self.sizes: list[int] = []


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Published:
    """A log of 2,100+ entries published with retained checkpoints mid-tile, and its decoys."""
    pub = Published(tmp_path_factory.mktemp("tiles-audit"))
    jsonl = pub.root / "events.jsonl"
    assert memroot("-l", str(pub.ledger), "init", "--origin", ORIGIN).exit_code == 0
    import_events(pub.ledger, jsonl, 0, 1000)
    assert memroot("-l", str(pub.ledger), "checkpoint").exit_code == 0  # kept for good
    import_events(pub.ledger, jsonl, 1000, 1050)
    assert memroot("-l", str(pub.ledger), "publish", str(pub.genuine)).exit_code == 0
    shutil.copytree(pub.genuine, pub.older)
    import_events(pub.ledger, jsonl, 2050, 100)
    assert memroot("-l", str(pub.ledger), "publish", str(pub.genuine)).exit_code == 0
    pub.vkey = memroot("-l", str(pub.ledger), "vkey").stdout.strip()
    other = pub.root / "other.ledger"
    assert memroot("-l", str(other), "init", "--origin", ORIGIN).exit_code == 0
    import_events(other, jsonl, 0, 2150)
    assert memroot("-l", str(other), "publish", str(pub.other)).exit_code == 0
    pub.sizes = sorted(
        int(
            "".join(p.lstrip("x") for p in f.relative_to(pub.genuine / "memroot/checkpoints").parts)
        )
        for f in (pub.genuine / "memroot/checkpoints").rglob("*")
        if f.is_file()
    )
    return pub


@pytest.fixture
def forged(published: Published, tmp_path: Path) -> Path:
    """A copy of the genuine directory for the attacker to edit."""
    copy = tmp_path / "forged"
    shutil.copytree(published.genuine, copy)
    return copy


def audit(published: Published, directory: Path, trusted: Path) -> tuple[Result, dict[str, object]]:
    result = memroot(
        "audit",
        "--tiles",
        str(directory),
        "--vkey",
        published.vkey,
        "--trusted",
        str(trusted),
        "--json",
    )
    assert "Traceback" not in result.output
    return result, json.loads(result.stdout)


def assert_refused(
    published: Published, directory: Path, tmp_path: Path, step: int, text: str
) -> None:
    """The audit fails naming ``text`` at ``step``; it trusts nothing; the genuine one passes."""
    before = tree_digest(published.genuine)
    trusted = tmp_path / "trusted-by-forgery.json"
    result, report = audit(published, directory, trusted)
    assert result.exit_code == 1, result.output
    assert report["ok"] is False
    findings = report["findings"]
    assert isinstance(findings, list)
    assert any(f["step"] == step and text in f["message"] for f in findings), findings
    assert not trusted.exists()  # a failing audit records no trusted state
    result, report = audit(published, published.genuine, tmp_path / "trusted-genuine.json")
    assert result.exit_code == 0 and report["ok"] is True, result.output
    assert tree_digest(published.genuine) == before


def test_genuine_directory_passes_and_is_trusted(published: Published, tmp_path: Path) -> None:
    """The genuine 2,100+ entry directory passes every step and its head becomes trusted."""
    assert published.sizes[-1] > 2000 and len(published.sizes) >= 3
    assert any(s % 256 for s in published.sizes[1:-1])  # an old partial tile mid-tile
    trusted = tmp_path / "trusted.json"
    result, report = audit(published, published.genuine, trusted)
    assert result.exit_code == 0, result.output
    assert report["ok"] is True and report["entries"] == published.sizes[-1]
    assert report["dropped_findings"] == 0 and report["findings"] == []
    logs = json.loads(trusted.read_text())
    assert str(published.sizes[-1]) in json.dumps(logs)


def test_other_ledger_same_origin(published: Published, tmp_path: Path) -> None:
    """A directory published by another ledger under the same origin fails the given vkey."""
    assert_refused(published, published.other, tmp_path, 6, "does not verify")


def test_head_checkpoint_bad_signature(published: Published, forged: Path, tmp_path: Path) -> None:
    """A byte of the head checkpoint's signature changed: step 6 refuses the head."""
    head = forged / "checkpoint"
    offset, new = signature_offset(head.read_bytes())
    attack(head, offset, new)
    assert_refused(published, forged, tmp_path, 6, f"checkpoint at size {published.sizes[-1]}")


def test_retained_note_tampered(published: Published, forged: Path, tmp_path: Path) -> None:
    """A retained checkpoint note (an older size) with a changed signature byte fails step 6."""
    size = published.sizes[1]
    note = forged / checkpoint_path(size)
    offset, new = signature_offset(note.read_bytes())
    attack(note, offset, new)
    assert_refused(published, forged, tmp_path, 6, f"checkpoint at size {size} does not verify")


def test_retained_note_of_head_size_tampered(
    published: Published, forged: Path, tmp_path: Path
) -> None:
    """The retained copy of the head's note differs from `checkpoint`: it is verified too."""
    size = published.sizes[-1]
    note = forged / checkpoint_path(size)
    offset, new = signature_offset(note.read_bytes())
    attack(note, offset, new)
    assert_refused(published, forged, tmp_path, 6, f"checkpoint at size {size} does not verify")


def test_level1_tile_tampered(published: Published, forged: Path, tmp_path: Path) -> None:
    """A hash in the level-1 tile flipped: the roots from the tiles are not the signed ones."""
    size = published.sizes[-1]
    tile = forged / tile_path(1, 0, (size >> 8) % 256)
    attack(tile, 40)
    assert_refused(published, forged, tmp_path, 5, "root computed from the tiles")


def test_old_partial_tile_tampered(published: Published, forged: Path, tmp_path: Path) -> None:
    """A hash in an old checkpoint's level-0 partial tile flipped: step 5 names the file."""
    size = next(s for s in published.sizes[1:-1] if s % 256)
    rel = tile_path(0, size // 256, size % 256)
    attack(forged / rel, 7)
    assert_refused(published, forged, tmp_path, 5, f"{rel} is not the start of the signed tile")


def test_old_partial_level1_tile_tampered(
    published: Published, forged: Path, tmp_path: Path
) -> None:
    """A hash in an old checkpoint's level-1 partial tile flipped: step 5 names the file."""
    size = next(
        s for s in published.sizes[1:-1] if (s >> 8) % 256 != (published.sizes[-1] >> 8) % 256
    )
    rel = tile_path(1, 0, (size >> 8) % 256)
    attack(forged / rel, 3)
    assert_refused(published, forged, tmp_path, 5, f"{rel} is not the start of the signed tile")


@pytest.mark.parametrize("which", ["first", "mid-tile"])
def test_old_partial_entry_bundle_flipped(
    published: Published, forged: Path, tmp_path: Path, which: str
) -> None:
    """A byte of an old partial entry bundle (`tile/entries/000.p/1`, ...) flipped: refused."""
    size = (
        published.sizes[0]
        if which == "first"
        else next(s for s in published.sizes[1:-1] if s % 256)
    )
    rel = tile_path("entries", size // 256, size % 256)
    bundle = forged / rel
    attack(bundle, len(bundle.read_bytes()) - 3)
    assert_refused(published, forged, tmp_path, 5, f"{rel} is not the start of the signed tile")


def test_tile_beyond_the_signed_tree(published: Published, forged: Path, tmp_path: Path) -> None:
    """A partial tile wider than the head's (a larger tree's file left behind) is refused."""
    size = published.sizes[-1]
    head = forged / tile_path(0, size // 256, size % 256)
    wider = forged / tile_path(0, size // 256, size % 256 + 1)
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; open(sys.argv[2], 'wb').write(open(sys.argv[1], 'rb').read() + bytes(32))",
            str(head),
            str(wider),
        ],
        check=True,
    )
    assert_refused(published, forged, tmp_path, 5, "outside the signed tree")


def test_rollback_against_trusted(published: Published, tmp_path: Path) -> None:
    """After the newest publication was trusted, the older (genuine, signed) one is refused."""
    trusted = tmp_path / "trusted.json"
    result, _ = audit(published, published.genuine, trusted)
    assert result.exit_code == 0, result.output
    remembered = trusted.read_text()
    result, report = audit(published, published.older, trusted)
    assert result.exit_code == 1, result.output
    findings = report["findings"]
    assert isinstance(findings, list)
    assert any(f["step"] == 10 and "rollback" in f["message"] for f in findings), findings
    assert trusted.read_text() == remembered  # the trusted state never moves back
    result, _ = audit(published, published.genuine, trusted)
    assert result.exit_code == 0, result.output


def test_older_directory_passes_without_trusted_state(published: Published, tmp_path: Path) -> None:
    """The older publication is itself genuine: only the trusted state makes it a rollback."""
    result, report = audit(published, published.older, tmp_path / "fresh.json")
    assert result.exit_code == 0 and report["ok"] is True, result.output
