"""The ledger's witness client against a real HTTP witness on loopback (a server thread)."""

from __future__ import annotations

import shutil
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memroot.ledger.entries import OpInput
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import split_note
from memroot.ledger.transparency.cosignature import WitnessKey, cosignatures
from memroot.ledger.transparency.tiles import set_publish
from memroot.ledger.transparency.witness import WitnessWarning, add_witness, submit, witness_status
from memroot.ledger.transparency.witness_server import Witness, init_witness, serve

ORIGIN = "example.org/client"


@pytest.fixture
def witness(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """A witness served on 127.0.0.1 by a thread: (url, witness vkey, directory)."""
    wdir = tmp_path / "w"
    vkey = init_witness(wdir, "witness.example/c1")
    server = serve(wdir, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", vkey, wdir
    finally:
        server.shutdown()
        server.server_close()
        server.lock_file.close()  # type: ignore[attr-defined]


def test_a_restored_copy_is_told_it_was_rolled_back(
    tmp_path: Path, inputs: Any, witness: tuple[str, str, Path]
) -> None:
    """A copy behind the witness learns (409 with a larger size) that it was rolled back."""
    url, wvkey, wdir = witness
    path = tmp_path / "l.db"
    ledger = Ledger.init(path, origin=ORIGIN, hooks=())
    ledger.append_batch(inputs.mixed(2, seed=1))
    ledger.checkpoint()
    ledger.close()
    shutil.copy(path, tmp_path / "old.db")
    shutil.copy(f"{path}.key", tmp_path / "old.db.key")
    ledger = Ledger.open(path, hooks=())
    Witness(wdir).add_log(ledger.vkey())  # `witness follow` while the server runs
    add_witness(ledger, url, wvkey)
    ledger.append_batch(inputs.mixed(4, seed=2))
    ledger.checkpoint()
    assert [s.status for s in submit(ledger)] == ["up to date"]
    ledger.close()
    old = Ledger.open(tmp_path / "old.db", hooks=())
    add_witness(old, url, wvkey)  # the copy knows nothing of the witness's state
    [s] = submit(old)
    assert s.status == "conflict" and "rolled back" in s.message and "size 7" in s.message


def test_cosignatures_land_in_the_stored_note(
    tmp_path: Path, inputs: Any, witness: tuple[str, str, Path]
) -> None:
    """Each submitted checkpoint's stored note gains exactly one valid cosignature line."""
    url, wvkey, wdir = witness
    ledger = Ledger.init(tmp_path / "l.db", origin=ORIGIN, hooks=())
    Witness(wdir).add_log(ledger.vkey())
    add_witness(ledger, url, wvkey)
    ledger.append_batch(inputs.mixed(3, seed=3))
    signed = ledger.checkpoint()
    assert len(split_note(signed.note)[1]) == 2
    main = ledger.store.branch("main").no
    for _, _, note in ledger.store.checkpoints(main):
        assert len(cosignatures(note, [WitnessKey.from_vkey(wvkey)])) == 1
    [row] = witness_status(ledger)
    assert (row["cosigned_size"], row["pending"]) == (4, 0)


def test_a_publication_failure_is_a_warning_not_a_failed_checkpoint(
    tmp_path: Path, inputs: Any
) -> None:
    """An entry too large for tiles stops the automatic publication with a warning only: the
    append (which signs its own checkpoint) and a checkpoint on request both commit."""
    ledger = Ledger.init(tmp_path / "l.db", origin=ORIGIN, hooks=())
    set_publish(ledger, tmp_path / "www", ["main"])
    with warnings.catch_warnings(record=True) as on_append:
        warnings.simplefilter("always", WitnessWarning)
        ledger.append(inputs.oversized())
    assert any("publishing tiles failed" in str(w.message) for w in on_append)
    assert ledger.size() == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", WitnessWarning)
        signed = ledger.checkpoint()
    assert signed.checkpoint.size == 2
    assert any("publishing tiles failed" in str(w.message) for w in caught)
    assert ledger.store.latest_checkpoint(ledger.store.branch("main").no) is not None


def test_a_branch_is_witnessed_under_its_own_origin_key(
    tmp_path: Path, inputs: Any, witness: tuple[str, str, Path]
) -> None:
    """A witness that follows the branch's vkey (named O/branch/B) cosigns its checkpoints."""
    from memroot.ledger.note import Verifier

    url, wvkey, wdir = witness
    ledger = Ledger.init(tmp_path / "l.db", origin=ORIGIN, hooks=())
    create = OpInput(
        op_type="BRANCH_CREATE",
        actor_id="a",
        actor_type="AI_AGENT",
        namespace_id="ns",
        policy_version="p/1",
        payload={"branch_id": "sim-1", "branch_type": "SIMULATION", "purpose": "what if"},
    )
    ledger.fork(create, genesis={"branch_type": "SIMULATION"})
    ledger.append_batch(inputs.mixed(2, seed=4), branch="sim-1")
    branch_vkey = Verifier.from_vkey(ledger.vkey()).for_origin(f"{ORIGIN}/branch/sim-1")
    Witness(wdir).add_log(branch_vkey.vkey())
    add_witness(ledger, url, wvkey, ["sim-1"])
    signed = ledger.checkpoint("sim-1")
    [c] = cosignatures(signed.note, [WitnessKey.from_vkey(wvkey)])
    assert c.witness == "witness.example/c1"
    assert [(s.branch, s.status) for s in submit(ledger)] == [("sim-1", "up to date")]
