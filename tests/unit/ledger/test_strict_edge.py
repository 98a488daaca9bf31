"""The head check folds the entries another connection appended onto the edge it proved before.

After a head check proves the entries since the head it checked before (a run that ends the
tree), it keeps the perfect subtrees of its head's first ``size - 1`` leaves
(``StrictReader._edges``): authentic, since folded with the last leaf they gave the signed
root. The next check after another commit folds the new entries onto them instead of reading
the stored nodes (``_prove_on_edge``); an edge that does not give the new signed root is
dropped and the stored nodes decide, as on a first read. Leaves proven under one signed root
are not proven again by a scattered read (``StrictReader.many``) either, while an edit of the
row makes another leaf, which is proven (and refused).
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from memroot.ledger.backends.store import Store, entry_key
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from tests.conftest import event_input


def _pair(tmp_path: Path) -> tuple[Ledger, Ledger]:
    """A reader and a writer handle on one new ledger file (different connections)."""
    path, key = tmp_path / "m.ledger", tmp_path / "m.key"
    Ledger.init(path, origin="example.org/edge", key_path=key).close()
    return Ledger.open(path, key_path=key), Ledger.open(path, key_path=key)


def _append(writer: Ledger, n: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(n):
        writer.append(event_input(rng, i, content=f"entry {seed}.{i}"))


def _with_edge(tmp_path: Path, first: int) -> tuple[Ledger, Ledger]:
    """A reader that checked ``first`` entries, then two more that another handle appended (the
    second check proves them on the stored nodes and keeps the edge)."""
    reader, writer = _pair(tmp_path)
    _append(writer, first, 1)
    reader.check_heads()
    _append(writer, 2, 2)
    reader.check_heads()
    return reader, writer


def _node_reads(monkeypatch: pytest.MonkeyPatch, store: type[Store] = Store) -> list[int]:
    """Count the stored-node reads (``store.read_nodes``) from here on."""
    calls: list[int] = []
    real = store.read_nodes

    def counted(self: Store, *args: object, **kwargs: object) -> list[bytes]:
        calls.append(1)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "read_nodes", counted)
    return calls


def test_commits_of_another_connection_are_proven_on_the_kept_edge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each later head check reads no stored node, and gives the head a new reader gives."""
    reader, writer = _with_edge(tmp_path, 5)
    try:
        reads = _node_reads(monkeypatch)
        for seed in range(3, 9):
            _append(writer, seed % 3 + 1, seed)
            with reader.store.read():
                head = reader.check_heads()[0]
                assert [e.seq for e in reader.entries(head.size - 1, head.size)] == [head.size - 1]
        assert reads == []
        with Ledger.open(tmp_path / "m.ledger", key_path=tmp_path / "m.key") as fresh:
            assert fresh.check_heads() == [head]
    finally:
        reader.close()
        writer.close()


def test_an_edge_that_does_not_give_the_signed_root_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept edge of another tree (here: a wrong hash in it) is no refusal and no pass: the
    stored nodes prove the new entries, as on a first read, and the edge is made anew."""
    reader, writer = _with_edge(tmp_path, 6)
    try:
        (no, (size, edge)), *_ = reader._reader_checks._edges.items()
        wrong = (bytes(32), *edge[1:])
        reader._reader_checks._edges[no] = (size, wrong)
        reads = _node_reads(monkeypatch)
        _append(writer, 2, 3)
        head = reader.check_heads()[0]
        assert head.size == writer.size()
        assert reads  # the stored nodes decided
        assert reader._reader_checks._edges[no][1] != wrong
    finally:
        reader.close()
        writer.close()


_EDIT = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
k = int(sys.argv[2])
data = db.execute("SELECT data FROM entries WHERE k = ?", (k,)).fetchone()[0]
edited = data.replace(b"session-", b"sessiom-")
assert edited != data
db.execute("UPDATE entries SET data = ? WHERE k = ?", (edited, k))
db.commit()
"""


def _edit(path: Path, reader: Ledger, seq: int) -> None:
    """The attacker's edit of entry ``seq`` of main, in a process of its own."""
    k = entry_key(reader.store.branch("main").no, seq)
    done = subprocess.run(
        [sys.executable, "-c", _EDIT, str(path), str(k)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_entries_appended_and_edited_by_another_process_are_refused(tmp_path: Path) -> None:
    """The attacker (its own process, plain sqlite3, no key) edits an entry another connection
    appended, after the reader kept its edge: the fold gives another root, and the stored
    nodes' proof refuses the entry."""
    reader, writer = _with_edge(tmp_path, 4)
    try:
        _append(writer, 2, 3)
        _edit(tmp_path / "m.ledger", reader, writer.size() - 1)
        with pytest.raises(IntegrityError):
            reader.check_heads()
    finally:
        reader.close()
        writer.close()


def test_a_scattered_read_proves_an_edited_row_again(tmp_path: Path) -> None:
    """``read_many`` of entries proven before takes their proof as given; the same row edited
    by the attacker since is another leaf, proven again, and refused."""
    reader, writer = _pair(tmp_path)
    try:
        _append(writer, 6, 1)
        seqs = [2, 4]
        first = {s: r.entry.hash for s, r in reader.read_many(seqs, links=False).items()}
        again = {s: r.entry.hash for s, r in reader.read_many(seqs, links=False).items()}
        assert first == again
        _edit(tmp_path / "m.ledger", reader, 4)
        with pytest.raises(IntegrityError):
            reader.read_many(seqs, links=False)
    finally:
        reader.close()
        writer.close()


def test_the_signers_follow_what_the_keys_learned() -> None:
    """``_Keys.signers`` answers what the keys give now: a key retired (a rotation learned)
    signs only up to its size; a branch's checkpoint may be signed by any trusted key."""
    from memroot.ledger.note import Verifier
    from memroot.ledger.signing import Ed25519Signer
    from memroot.ledger.strict import _Keys

    old = Verifier.from_signer(Ed25519Signer.from_seed("example.org/log", bytes(range(32))))
    new = Verifier.from_signer(Ed25519Signer.from_seed("example.org/log", bytes(range(1, 33))))
    keys = _Keys([old, new])
    assert keys.signers("main", 10) == [old, new]
    assert keys.signers("main", 10) == [old, new]
    keys.retired[old.vkey()] = 5  # learned: the old key signed up to size 5 only
    assert keys.signers("main", 10) == [new]
    assert keys.signers("main", 5) == [old, new]
    assert keys.signers("sim", 10) == [old, new]  # a branch's checkpoints: any trusted key
