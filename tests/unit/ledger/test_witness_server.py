"""The witness's add-checkpoint logic: every status code C2SP tlog-witness names, and state."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.errors import RefusedError
from memroot.ledger.ledger import Ledger
from memroot.ledger.transparency.cosignature import (
    SIZE_CONTENT_TYPE,
    WitnessKey,
    add_cosignature_lines,
    cosignatures,
    render_add_checkpoint,
)
from memroot.ledger.transparency.witness_server import EVIDENCE_FILE, Witness, init_witness, serve

ORIGIN = "example.org/witnessed"


@pytest.fixture
def setup(tmp_path: Path, inputs: Any) -> tuple[Ledger, Witness, Path]:
    """A ledger of 6 entries (checkpoints at 1 and 6) and a witness that follows it."""
    ledger = Ledger.init(tmp_path / "l.db", origin=ORIGIN)
    ledger.append_batch(inputs.mixed(5, seed=1))
    ledger.checkpoint()
    wdir = tmp_path / "w"
    init_witness(wdir, "witness.example/w1")
    w = Witness(wdir, clock=lambda: 1_800_000_000)
    w.add_log(ledger.vkey())
    return ledger, w, wdir


def _note(ledger: Ledger, size: int) -> str:
    main = ledger.store.branch("main").no
    return next(n for s, _, n in ledger.store.checkpoints(main) if s == size)


def _add(w: Witness, ledger: Ledger, old: int, size: int, note: str | None = None) -> Any:
    proof = ledger.consistency_proof(old, size) if 0 < old < size else []
    return w.add_checkpoint(render_add_checkpoint(old, proof, note or _note(ledger, size)))


def test_a_first_checkpoint_is_cosigned_and_the_state_survives_a_restart(setup: Any) -> None:
    """200 with a cosignature/v1 line; a new Witness on the directory knows the size."""
    ledger, w, wdir = setup
    a = _add(w, ledger, 0, 1)
    assert a.status == 200
    note = add_cosignature_lines(_note(ledger, 1), a.body.decode())
    [c] = cosignatures(note, [w.key])
    assert c.timestamp == 1_800_000_000
    again = Witness(wdir)
    assert _add(again, ledger, 0, 6).status == 409  # it remembers size 1
    assert _add(again, ledger, 1, 6).status == 200
    assert again.latest(ORIGIN).body.decode().startswith(f"{ORIGIN}\n6\n")


def test_unknown_origin_is_404_and_a_foreign_key_403(setup: Any, tmp_path: Path) -> None:
    """A log it does not follow is 404; the right origin signed by another key is 403."""
    _, w, _ = setup
    other = Ledger.init(tmp_path / "o.db", origin="example.org/other")
    assert _add(w, other, 0, 1).status == 404
    impostor = Ledger.init(tmp_path / "i.db", origin=ORIGIN)
    assert _add(w, impostor, 0, 1).status == 403


def test_an_old_size_above_the_checkpoint_is_400(setup: Any) -> None:
    """old > checkpoint size is a bad request."""
    ledger, w, _ = setup
    assert _add(w, ledger, 0, 6).status == 200
    answer = w.add_checkpoint(render_add_checkpoint(6, [], _note(ledger, 1)))
    assert answer.status == 400


def test_a_rollback_is_refused_with_409_and_the_witness_size(setup: Any) -> None:
    """Once it cosigned 6, an older checkpoint is refused: 409 text/x.tlog.size "6"."""
    ledger, w, _ = setup
    assert _add(w, ledger, 0, 6).status == 200
    answer = _add(w, ledger, 0, 1)
    assert (answer.status, answer.content_type, answer.body) == (409, SIZE_CONTENT_TYPE, b"6\n")
    assert w.latest(ORIGIN).body.decode().startswith(f"{ORIGIN}\n6\n")


def test_a_fork_is_refused_with_409_or_422(setup: Any, tmp_path: Path, inputs: Any) -> None:
    """A copy that grew differently: same size another root is 409; larger with a proof
    from the witness's size that cannot match its root is 422; both are kept as evidence."""
    ledger, w, wdir = setup
    ledger.close()
    shutil.copy(tmp_path / "l.db", tmp_path / "fork.db")
    shutil.copy(tmp_path / "l.db.key", tmp_path / "fork.db.key")
    a = Ledger.open(tmp_path / "l.db")
    b = Ledger.open(tmp_path / "fork.db")
    a.append_batch(inputs.mixed(3, seed=7))
    b.append_batch(inputs.mixed(3, seed=8))
    a.checkpoint()
    b.checkpoint()
    assert _add(w, a, 0, 9).status == 200
    assert _add(w, b, 9, 9).status == 409
    b.append_batch(inputs.mixed(1, seed=9))
    b.checkpoint()
    assert _add(w, b, 9, 10).status == 422
    evidence = [json.loads(x) for x in (wdir / EVIDENCE_FILE).read_text().splitlines()]
    assert [e["why"].split(" ")[0] for e in evidence] == ["another", "consistency"]
    assert w.latest(ORIGIN).body.decode().startswith(f"{ORIGIN}\n9\n")


def test_a_proof_from_zero_must_be_empty(setup: Any) -> None:
    """A non-empty proof with old 0 is 422 (nothing can be proven from the empty tree)."""
    ledger, w, _ = setup
    body = render_add_checkpoint(0, [b"\x00" * 32], _note(ledger, 6))
    assert w.add_checkpoint(body).status == 422


def test_malformed_requests_are_400(setup: Any) -> None:
    """A body that is not old line, proof, blank line, note is a bad request."""
    _, w, _ = setup
    assert w.add_checkpoint(b"hello").status == 400


def test_one_directory_is_served_by_one_process(setup: Any) -> None:
    """A second server on the same witness directory is refused (its lock is held)."""
    _, _, wdir = setup
    first = serve(wdir, "127.0.0.1", 0)
    try:
        with pytest.raises(RefusedError, match="already serves"):
            serve(wdir, "127.0.0.1", 0)
    finally:
        first.server_close()
        first.lock_file.close()  # type: ignore[attr-defined]


def test_the_witness_vkey_is_a_cosignature_key(tmp_path: Path) -> None:
    """init prints a vkey of algorithm 0x04 that parses as the witness's key."""
    vkey = init_witness(tmp_path / "w", "witness.example/w9")
    assert WitnessKey.from_vkey(vkey) == Witness(tmp_path / "w").key
