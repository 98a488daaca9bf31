"""`memroot prove --object/--state/--namespace` and `memroot audit --proof` on real ledgers.

Each proof is written by the CLI from a real SQLite ledger with v2 roots and checked by the
offline auditor through the CLI; the attacks edit the ledger's stored map from a process of
their own and hand edited files to the auditor.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import cbor2
import pytest

from memroot.ledger.bundle.proof_file import check_proof
from memroot.ledger.entries import EventInput, OpInput, new_uuids
from memroot.ledger.ledger import Ledger
from memroot.projections import requests as rq

Cli = Any


def _ledger(
    tmp: Path, per_ns: dict[str, int], *, snapshot_every: int = 1000
) -> tuple[Path, dict[str, list[str]]]:
    """A ledger with one event per namespace and ``per_ns[ns]`` objects citing it."""
    path = tmp / "agent.ledger"
    ids: dict[str, list[str]] = {}
    with Ledger.init(path, origin="example.org/prove-test", snapshot_every=snapshot_every) as led:
        for ns, n in per_ns.items():
            ev = new_uuids(1)[0]
            who = rq.Actor("agent-7", "AI_AGENT", ns)
            items: list[EventInput | OpInput] = [
                EventInput(
                    stream="s",
                    actor_id="alice",
                    actor_type="HUMAN_USER",
                    role="USER",
                    content=f"{ns} said so",
                    namespace_id=ns,
                    id=ev,
                )
            ]
            ids[ns] = new_uuids(n) if n else []
            items += [
                rq.assert_object(
                    who, "FACT", "ASSERTED", "USER_STATED", [ev], f"fact {i}", object_id=oid
                )
                for i, oid in enumerate(ids[ns])
            ]
            for start in range(0, len(items), 2000):
                led.append_batch(items[start : start + 2000])
    return path, ids


@pytest.fixture
def small(tmp_path: Path, cmd: Cli) -> tuple[Path, dict[str, list[str]], str]:
    """Two namespaces, a root, one object falsified, a root after it; and the vkey."""
    path, ids = _ledger(tmp_path, {"alice": 3, "bob": 2})
    cmd.ok(cmd.at(path, "snapshot"))
    cmd.ok(cmd.at(path, "falsify", ids["alice"][1], "--reason", "retracted"))
    cmd.ok(cmd.at(path, "snapshot"))
    vkey = cmd.ok(cmd.at(path, "vkey")).stdout.strip()
    return path, ids, vkey


def _audit(cmd: Cli, proof: Path, vkey: str) -> dict[str, Any]:
    result = cmd.run("audit", "--proof", str(proof), "--vkey", vkey, "--json")
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def test_object_proof_round_trip(small: Any, cmd: Cli, tmp_path: Path) -> None:
    """prove --object writes a file the offline auditor accepts, naming the object's state."""
    path, ids, vkey = small
    out = tmp_path / "obj.proof.json"
    cmd.ok(cmd.at(path, "prove", "--object", ids["bob"][0], "-o", str(out)))
    got = _audit(cmd, out, vkey)
    assert got["ok"] and got["present"] and got["namespace"] == "bob"
    assert got["items"][0]["kind"] == "object" and got["items"][0]["id"] == ids["bob"][0]
    human = cmd.ok(cmd.run("audit", "--proof", str(out), "--vkey", vkey)).stdout
    assert "holds object" in human and human.rstrip().endswith("OK")


def test_state_proof_shows_the_falsification(small: Any, cmd: Cli, tmp_path: Path) -> None:
    """prove --state ID --kind memory_object proves the item's falsified state."""
    path, ids, vkey = small
    out = tmp_path / "state.proof.json"
    cmd.ok(cmd.at(path, "prove", "--state", ids["alice"][1], "--kind", "memory_object",
                  "-o", str(out)))  # fmt: skip
    got = _audit(cmd, out, vkey)
    assert got["kind"] == "state" and got["items"][0]["state"]["state"] == "falsified"


def test_namespace_proof_lists_every_item(small: Any, cmd: Cli, tmp_path: Path) -> None:
    """prove --namespace lists every object and state of the namespace, nothing of another."""
    path, ids, vkey = small
    out = tmp_path / "alice.proof.json"
    cmd.ok(cmd.at(path, "prove", "--namespace", "alice", "-o", str(out)))
    got = _audit(cmd, out, vkey)
    objects = sorted(i["id"] for i in got["items"] if i["kind"] == "object")
    assert objects == sorted(ids["alice"])
    assert [i["id"] for i in got["items"] if i["kind"] != "object"] == [ids["alice"][1]]


def test_absent_object_and_empty_namespace_are_proven_absent(
    small: Any, cmd: Cli, tmp_path: Path
) -> None:
    """An unknown id needs --namespace; with it, and for an empty namespace, ABSENT exits 0."""
    path, _ids, vkey = small
    unknown = "01900000-0000-7000-8000-000000000077"
    refused = cmd.at(path, "prove", "--object", unknown)
    assert refused.exit_code == 3 and "--namespace" in refused.output
    out = tmp_path / "absent.proof.json"
    printed = cmd.ok(cmd.at(path, "prove", "--object", unknown, "--namespace", "alice",
                            "-o", str(out))).stdout  # fmt: skip
    assert "ABSENT" in printed
    got = _audit(cmd, out, vkey)
    assert not got["present"] and got["absent"] == {"kind": "object", "id": unknown}
    empty = tmp_path / "carol.proof.json"
    cmd.ok(cmd.at(path, "prove", "--namespace", "carol", "-o", str(empty)))
    assert not _audit(cmd, empty, vkey)["present"]


def test_proof_at_an_older_root(small: Any, cmd: Cli, tmp_path: Path) -> None:
    """--root proves the state at that root: before the falsification, no state item."""
    path, ids, vkey = small
    oldest = cmd.json_at(path, "roots")[-1]["memory_root"]
    out = tmp_path / "old.proof.json"
    cmd.ok(cmd.at(path, "prove", "--state", ids["alice"][1], "--kind", "memory_object",
                  "--namespace", "alice", "--root", oldest[:12], "-o", str(out)))  # fmt: skip
    got = _audit(cmd, out, vkey)
    assert got["root"] == oldest and not got["present"]


def test_proof_at_the_snapshots_own_checkpoint(small: Any, cmd: Cli, tmp_path: Path) -> None:
    """--at-snapshot proves the older root in the checkpoint that sealed its SNAPSHOT (kept
    for good): a smaller tree than the head's, a file the offline auditor accepts; without
    the flag the same root is proven in the head."""
    path, ids, vkey = small
    oldest = cmd.json_at(path, "roots")[-1]
    out, head = tmp_path / "own.proof.json", tmp_path / "head.proof.json"
    for f, extra in ((out, ["--at-snapshot"]), (head, [])):
        cmd.ok(cmd.at(path, "prove", "--object", ids["bob"][0], "--root",
                      oldest["memory_root"], *extra, "-o", str(f)))  # fmt: skip
    got, in_head = _audit(cmd, out, vkey), _audit(cmd, head, vkey)
    assert got["present"] and got["root"] == in_head["root"] == oldest["memory_root"]
    assert oldest["seq"] < got["tree_size"] < in_head["tree_size"]
    assert out.stat().st_size <= head.stat().st_size
    bad = cmd.at(path, "prove", "--index", "1", "--at-snapshot")
    assert bad.exit_code == 2 and "--at-snapshot goes with" in bad.output


def test_proof_of_a_branch_root(small: Any, cmd: Cli, tmp_path: Path) -> None:
    """A root on a branch is proven against the branch's checkpoint (origin O/branch/B)."""
    path, ids, vkey = small
    made = cmd.ok(cmd.at(path, "branch", "create", "--type", "SIMULATION", "--purpose", "p"))
    branch = made.stdout.strip()
    cmd.ok(cmd.at(path, "snapshot", "-b", branch))
    out = tmp_path / "branch.proof.json"
    cmd.ok(cmd.at(path, "prove", "-b", branch, "--object", ids["bob"][0], "-o", str(out)))
    got = _audit(cmd, out, vkey)
    assert got["branch"] == branch and got["origin"].endswith(f"/branch/{branch}")
    assert got["present"]


def test_wrong_key_and_edited_file_are_refused(small: Any, cmd: Cli, tmp_path: Path) -> None:
    """audit --proof refuses another log's key and a file with one changed byte (exit 1)."""
    path, ids, vkey = small
    out = tmp_path / "obj.proof.json"
    cmd.ok(cmd.at(path, "prove", "--object", ids["alice"][0], "-o", str(out)))
    other = tmp_path / "other.ledger"
    cmd.ok(cmd.at(other, "init"))
    other_vkey = cmd.ok(cmd.at(other, "vkey")).stdout.strip()
    bad = cmd.run("audit", "--proof", str(out), "--vkey", other_vkey)
    assert bad.exit_code == 1 and "REFUSED" in bad.output and "(P2)" in bad.output
    v1 = tmp_path / "obj.v1.proof.json"
    cmd.ok(cmd.at(path, "prove", "--object", ids["alice"][0], "--format", "1", "-o", str(v1)))
    doc = json.loads(v1.read_text())
    doc["item"]["id"] = ids["alice"][1]  # another object's id on this object's path
    edited = tmp_path / "edited.proof.json"
    edited.write_text(json.dumps(doc))
    bad = cmd.run("audit", "--proof", str(edited), "--vkey", vkey, "--json")
    assert bad.exit_code == 1 and json.loads(bad.stdout)["ok"] is False
    value = cbor2.loads(out.read_bytes())  # the same edit in the binary file (version 3)
    value[8][0][1] = ids["alice"][1]
    edited.write_bytes(cbor2.dumps(value, canonical=True))
    bad = cmd.run("audit", "--proof", str(edited), "--vkey", vkey, "--json")
    assert bad.exit_code == 1 and json.loads(bad.stdout)["ok"] is False
    assert cmd.run("audit", "--proof", str(out)).exit_code == 2  # no --vkey: usage


def test_prove_writes_version_3_and_format_2_and_1_keep_theirs(
    small: Any, cmd: Cli, tmp_path: Path
) -> None:
    """prove writes the compact version 3 by default, --format 2 and 1 theirs; audit reads all."""
    path, ids, vkey = small
    v3, v2, v1 = tmp_path / "obj.proof", tmp_path / "obj.v2.proof", tmp_path / "obj.proof.json"
    made = json.loads(cmd.ok(cmd.at(path, "prove", "--object", ids["bob"][0], "-o", str(v3),
                                    "--json")).stdout)  # fmt: skip
    cmd.ok(cmd.at(path, "prove", "--object", ids["bob"][0], "--format", "2", "-o", str(v2)))
    cmd.ok(cmd.at(path, "prove", "--object", ids["bob"][0], "--format", "1", "-o", str(v1)))
    raw = v3.read_bytes()
    assert raw[:16] == b"\x89\x6dmemroot-proof\x03"  # an array of 9, the name, version 3
    assert v2.read_bytes()[:16] == b"\x8a\x6dmemroot-proof\x02"  # an array of 10, version 2
    assert made["version"] == 3 and made["bytes"] == len(raw)
    assert json.loads(v1.read_text())["version"] == 1
    assert len(raw) < len(v2.read_bytes()) < len(v1.read_bytes())
    a, b, c = _audit(cmd, v3, vkey), _audit(cmd, v2, vkey), _audit(cmd, v1, vkey)
    assert a["present"] and a == {**b, "file": a["file"]} == {**c, "file": a["file"]}
    piped = cmd.ok(cmd.at(path, "prove", "--object", ids["bob"][0])).stdout_bytes
    assert piped == raw
    shown = json.loads(cmd.ok(cmd.at(path, "prove", "--object", ids["bob"][0], "--json")).stdout)
    assert base64.b64decode(shown["proof"]) == raw and shown["version"] == 3
    bad = cmd.at(path, "prove", "--index", "1", "--format", "1")
    assert bad.exit_code == 2 and "--format" in bad.output


@pytest.mark.parametrize(
    ("name", "change", "said"),
    [
        ("truncated", lambda b: b[: len(b) // 2], "not one canonical CBOR value"),
        ("trailing", lambda b: b + b"\x00", "not one canonical CBOR value"),
        ("version 4", lambda b: b[:15] + b"\x04" + b[16:], "version: is 4"),
        ("magic only", lambda b: b[:16], "not one canonical CBOR value"),
        ("not ours", lambda b: b"\x82\x01\x02", "does not begin as a memroot-proof file"),
        ("json version 2", lambda b: b'{"format":"memroot-proof","version":2}', "version 2 is"),
        ("garbage", lambda b: b"\xff\xfe", "is not UTF-8"),
        ("empty", lambda b: b"", "is not JSON"),
    ],
)
def test_audit_refuses_malformed_and_unknown_versions_clearly(
    small: Any, cmd: Cli, tmp_path: Path, name: str, change: Any, said: str
) -> None:
    """A malformed file or an unknown version is refused with a message (exit 1), no traceback."""
    path, ids, vkey = small
    out = tmp_path / "obj.proof"
    cmd.ok(cmd.at(path, "prove", "--object", ids["bob"][0], "-o", str(out)))
    bad_file = tmp_path / "bad.proof"
    bad_file.write_bytes(change(out.read_bytes()))
    bad = cmd.run("audit", "--proof", str(bad_file), "--vkey", vkey)
    assert bad.exit_code == 1, (name, bad.output)
    assert "REFUSED" in bad.output and said in bad.output, (name, bad.output)
    assert "Traceback" not in bad.output


def _attack(path: Path, sql: str) -> None:
    """Edit the ledger file from a process of the attacker's own (plain apsw)."""
    code = (
        "import apsw, sys\n"
        "db = apsw.Connection(sys.argv[1])\n"
        f"db.execute({sql!r})\n"
        "print(db.changes())\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert int(out.stdout) > 0


def test_edited_map_node_is_refused_and_nothing_written(
    small: Any, cmd: Cli, tmp_path: Path
) -> None:
    """map_node_edited: an attacker rewrites a stored leaf; prove refuses, writes no file."""
    path, _ids, _ = small
    _attack(path, "UPDATE memory_map_nodes SET b = zeroblob(32) WHERE leaf = 1")
    out = tmp_path / "obj.proof.json"
    bad = cmd.at(path, "prove", "--namespace", "alice", "-o", str(out))
    assert bad.exit_code == 1 and "edited" in bad.output
    assert not out.exists() and not (tmp_path / "obj.proof.json.tmp").exists()


def test_deleted_map_nodes_are_refused(small: Any, cmd: Cli, tmp_path: Path) -> None:
    """map_nodes_deleted: with the stored map gone, prove refuses (exit 1), prints no proof."""
    path, ids, _ = small
    _attack(path, "DELETE FROM memory_map_nodes")
    bad = cmd.at(path, "prove", "--object", ids["alice"][0])
    assert bad.exit_code == 1 and "not stored" in bad.output and "memroot-proof" not in bad.output


def test_ten_thousand_item_namespace_proof_verifies(tmp_path: Path, cmd: Cli) -> None:
    """A namespace of 10,000 objects is proven whole and the proof checks offline."""
    path, ids = _ledger(tmp_path, {"big": 10_000, "small": 3})
    vkey = cmd.ok(cmd.at(path, "vkey")).stdout.strip()
    cmd.ok(cmd.at(path, "snapshot"))
    out = tmp_path / "big.proof.json"
    cmd.ok(cmd.at(path, "prove", "--namespace", "big", "-o", str(out)))
    proven = check_proof(out.read_bytes(), [vkey])
    assert proven.present and len(proven.items) == 10_000
    assert {i for _, i, _ in proven.items} == set(ids["big"])


def test_cascade_resnapshot_refused_and_stale_root_noted(
    small: Any, cmd: Cli, tmp_path: Path
) -> None:
    """A cascade's re-snapshot (no SNAPSHOT of its own) is refused; a stale root is noted."""
    path, ids, vkey = small
    cmd.ok(cmd.at(path, "cascade", ids["alice"][1]))
    roots = cmd.json_at(path, "roots")
    resnap = next(r for r in roots if r.get("replaces"))
    refused = cmd.at(path, "prove", "--namespace", "alice", "--root", resnap["memory_root"])
    assert refused.exit_code == 3 and "re-snapshot" in refused.output
    out = tmp_path / "stale.proof.json"
    made = cmd.ok(cmd.at(path, "prove", "--namespace", "alice", "-o", str(out))).stdout
    assert "is stale" in made
    assert _audit(cmd, out, vkey)["present"]


def test_operation_rows_hidden_from_the_prover_are_refused(
    small: Any, cmd: Cli, tmp_path: Path
) -> None:
    """op_rows_disguised: ASSERT rows marked as events make a namespace proof refuse.

    An object proof no longer reads the operations (its state comes from the object's
    indexed rows, checked against the committed leaf), so it is still given, and true.
    """
    path, ids, vkey = small
    _attack(
        path,
        "UPDATE entries SET digest = zeroblob(32) WHERE digest IS NULL AND erased_by IS NULL "
        "AND instr(data, CAST('ASSERT' AS BLOB)) > 0",
    )
    out = tmp_path / "ns.proof.json"
    bad = cmd.at(path, "prove", "--namespace", "alice", "-o", str(out))
    assert bad.exit_code == 1 and "not known to the prover" in bad.output, bad.output
    assert not out.exists()
    obj = tmp_path / "obj.proof.json"
    ok = cmd.at(path, "prove", "--object", ids["alice"][0], "-o", str(obj))
    assert ok.exit_code == 0, ok.output
    assert _audit(cmd, obj, vkey)["present"]


def test_object_rows_edited_cannot_make_the_prover_lie(
    small: Any, cmd: Cli, tmp_path: Path
) -> None:
    """object_hint_forged: an edited namespace or seq in the object's rows is not trusted.

    The prover's look-up by id is a hint: one that does not hash to the committed leaf is
    dropped and the view's operations decide, so the proof is the true one.
    """
    path, ids, vkey = small
    oid = ids["alice"][0]
    _attack(
        path,
        f"UPDATE mem_objects SET namespace_id = 'mallory', vfrom = vfrom + 1 WHERE id = '{oid}'",
    )
    out = tmp_path / "obj.proof.json"
    ok = cmd.at(path, "prove", "--object", oid, "-o", str(out))
    assert ok.exit_code == 0, ok.output
    got = _audit(cmd, out, vkey)
    assert got["present"] and got["namespace"] == "alice"


def test_an_object_or_state_proof_reads_no_operation(small: Any) -> None:
    """prove by id: a present object or state comes from its indexed rows, with no scan.

    The view's operations are read only for what no row can hint (an absent item here).
    """
    from memroot.memory_root.proofs import open_root

    path, ids, _ = small
    with Ledger.open(path, readonly=True) as led, led.reading():
        source = open_root(led)
        _, obj = source.prove_item("object", ids["alice"][0])
        _, st = source.prove_item("state/memory_object", ids["alice"][1])
        assert obj.present and st.present and st.items[0][2]["state"] == "falsified"
        assert source.scans == 0
        _, gone = source.prove_item("object", "01900000-0000-7000-8000-00000000dead", "alice")
        assert not gone.present and source.scans == 1


_DOWNGRADE = """
import apsw, hashlib, sys
def h(tag, *parts):
    return hashlib.sha256(tag + b"\\x00" + b"".join(parts)).digest()
db = apsw.Connection(sys.argv[1])
with db:
    rows = db.execute("SELECT leaf, a, b FROM memory_map_nodes").fetchall()
    db.execute("DROP TABLE memory_map_nodes; DROP TABLE memory_map_roots")
    db.execute("CREATE TABLE memory_map_nodes(hash BLOB PRIMARY KEY, leaf INTEGER NOT NULL "
               "CHECK(leaf IN (0, 1)), a BLOB NOT NULL, b BLOB NOT NULL) STRICT, WITHOUT ROWID")
    db.executemany("INSERT OR IGNORE INTO memory_map_nodes VALUES(?,?,?,?)", [
        (h(b"memroot/map/leaf/v1" if leaf else b"memroot/map/node/v1", a, b), leaf, a, b)
        for leaf, a, b in rows])
print(len(rows))
"""


def test_a_hash_keyed_map_is_read_then_converted_on_a_writers_open(
    small: Any, cmd: Cli, tmp_path: Path
) -> None:
    """A file whose map is the hash-keyed table (before row numbers): a reader proves from it
    as it is; a writer's open converts it (rows found by position, ``memory_map_roots``); the
    proofs are the same bytes, and appends and snapshots go on."""
    path, ids, vkey = small
    want = {ns: cmd.ok(cmd.at(path, "prove", "--namespace", ns)).stdout for ns in ("alice", "bob")}
    obj = cmd.ok(cmd.at(path, "prove", "--object", ids["alice"][0])).stdout
    out = subprocess.run([sys.executable, "-c", _DOWNGRADE, str(path)], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert int(out.stdout) > 0

    def columns() -> list[str]:
        code = (
            "import apsw, sys\n"
            "db = apsw.Connection(sys.argv[1], flags=apsw.SQLITE_OPEN_READONLY)\n"
            "print(','.join(r[1] for r in db.execute('PRAGMA table_info(memory_map_nodes)')))\n"
        )
        got = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                             text=True, check=True)  # fmt: skip
        return got.stdout.strip().split(",")

    assert columns() == ["hash", "leaf", "a", "b"]
    with Ledger.open(path, readonly=True) as led:  # a reader: the table as it is, by hash
        from memroot.memory_root import records, root_v2
        from memroot.memory_root.state_map import prove_namespace

        latest = records.latest_root(led.derived.db, "main")
        assert latest is not None and latest.map_root is not None
        proof = prove_namespace(root_v2.map_nodes(led), latest.map_root, "alice")
        assert len(proof.items) == 4  # three objects, one falsification state
    assert columns() == ["hash", "leaf", "a", "b"]
    for ns in ("alice", "bob"):  # the CLI opens a writer: converted, the same proofs
        assert cmd.ok(cmd.at(path, "prove", "--namespace", ns)).stdout == want[ns]
    assert columns() == ["at", "leaf", "a", "b", "at_a", "at_b"]
    code = (
        "import apsw, sys\n"
        "db = apsw.Connection(sys.argv[1], flags=apsw.SQLITE_OPEN_READONLY)\n"
        "print(db.execute('SELECT count(*) FROM memory_roots WHERE map IS NOT NULL AND map NOT IN "
        "(SELECT hash FROM memory_map_roots)').fetchall()[0][0])\n"
    )
    unlisted = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                              text=True, check=True)  # fmt: skip
    assert unlisted.stdout.strip() == "0"  # every stored map root is a start of walks
    assert cmd.ok(cmd.at(path, "prove", "--object", ids["alice"][0])).stdout == obj
    cmd.ok(cmd.at(path, "falsify", ids["bob"][0], "--reason", "retracted"))
    cmd.ok(cmd.at(path, "snapshot"))
    proof_file = tmp_path / "bob.proof"
    cmd.ok(cmd.at(path, "prove", "--object", ids["bob"][0], "-o", str(proof_file)))
    assert _audit(cmd, proof_file, vkey)["ok"] is True
    assert cmd.json_at(path, "verify")["ok"] is True
