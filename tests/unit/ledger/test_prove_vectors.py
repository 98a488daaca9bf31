"""Proof-file vectors (docs/FORMAT.md §6.15): regenerated identically, and checked twice.

The second check is an outside auditor's, written from FORMAT.md alone with json, hashlib,
cbor2 and cryptography's Ed25519 (no memroot import in ``_outside_check``): it accepts every
vector (versions 1, 2 and 3) and rejects every single-bit flip anywhere in a file, as
memroot's checker does.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import cbor2
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger.bundle.proof_file import check_proof
from memroot.ledger.errors import IntegrityError

PROOFS = Path(__file__).resolve().parents[2] / "vectors" / "memroot" / "proofs"
VKEY = (PROOFS / "test.vkey").read_text().strip()
FILES = {p.name: p.read_bytes() for p in sorted(PROOFS.glob("*.proof.json"))}
V3 = {p.name: p.read_bytes() for p in sorted(PROOFS.glob("*.v3.proof"))}
"""Version 3 files (compact binary), one for each version 1 file, with the same content."""
BINARY = {p.name: p.read_bytes() for p in sorted(PROOFS.glob("*.proof")) if p.name not in V3}
"""Version 2 files (binary), one for each version 1 file, with the same content."""
EVERY = {**FILES, **BINARY, **V3}


def _generator() -> Any:
    path = PROOFS.parent / "gen_proof_vectors.py"
    spec = importlib.util.spec_from_file_location("gen_proof", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_regenerating_gives_identical_bytes() -> None:
    """Running the generator again reproduces every file of proofs/ byte for byte."""
    rendered = _generator().render()
    on_disk = {p.name: p.read_bytes() for p in PROOFS.iterdir()}
    assert rendered == on_disk


# -- an outside auditor's check, from FORMAT.md §4, §5, §6.12-6.13, §6.15 alone --------------------


class Refused(Exception):
    """The outside auditor refuses a proof file."""


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise Refused(what)


def _b64(s: Any, n: int | None = None) -> bytes:
    _need(type(s) is str, "base64 field is not a string")
    _need(re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", s) is not None and len(s) % 4 == 0, "base64")
    raw = base64.b64decode(s)
    _need(base64.b64encode(raw).decode() == s, "non-canonical base64")
    _need(n is None or len(raw) == n, "wrong length")
    return raw


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _tagged(tag: str, data: bytes) -> bytes:
    return _sha(tag.encode() + b"\x00" + data)


def _cbor(raw: bytes) -> Any:
    try:
        value = cbor2.loads(raw)
    except Exception as e:
        raise Refused(f"cbor: {e}") from e
    _need(cbor2.dumps(value, canonical=True) == raw, "CBOR is not canonical")
    return value


def _open_note(note: str, vkey: str) -> tuple[str, int, bytes]:
    """§5: verify the signed checkpoint with the vkey (or its branch name); return its body."""
    name, key_id_hex, key64 = vkey.split("+", 2)
    key = base64.b64decode(key64)
    _need(key[0] == 1 and len(key) == 33, "vkey is not Ed25519")
    pub = key[1:]
    _need(_sha(name.encode() + b"\n\x01" + pub)[:4].hex() == key_id_hex, "vkey key id")
    _need("\n\n" in note and note.endswith("\n"), "note shape")
    text, sigs = note.split("\n\n", 1)
    text += "\n"
    lines = text.split("\n")
    origin, size_s, root64 = lines[0], lines[1], lines[2]
    _need(re.fullmatch(r"0|[1-9][0-9]*", size_s) is not None, "checkpoint size")
    names = {name}
    prefix = name + "/branch/"
    if origin.startswith(prefix) and re.fullmatch(
        r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", origin[len(prefix) :]
    ):
        names.add(origin)
    ok = False
    for line in sigs.split("\n")[:-1]:
        _need(line.startswith("\u2014 "), "signature line")
        signer, sig64 = line[2:].split(" ")
        blob = _b64(sig64)
        if signer not in names or blob[:4] != _sha(signer.encode() + b"\n\x01" + pub)[:4]:
            continue  # another key's signature: ignored
        try:
            Ed25519PublicKey.from_public_bytes(pub).verify(blob[4:], text.encode())
        except InvalidSignature as e:
            raise Refused("bad signature") from e
        ok = True
    _need(ok, "no signature by the trusted key")
    return origin, int(size_s), _b64(root64, 32)


def _rfc9162_root(leaf: bytes, index: int, size: int, path: list[bytes]) -> bytes:
    """RFC 9162 §2.1.3.2."""
    _need(index < size, "index beyond the tree")
    fn, sn, r = index, size - 1, leaf
    for p in path:
        _need(sn != 0, "inclusion path too long")
        if fn & 1 or fn == sn:
            r = _sha(b"\x01" + p + r)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            r = _sha(b"\x01" + r + p)
        fn >>= 1
        sn >>= 1
    _need(sn == 0, "inclusion path too short")
    return r


EMPTY = _tagged("memroot/map/empty/v1", b"")


def _bit(key: bytes, i: int) -> int:
    return (key[i // 8] >> (7 - i % 8)) & 1


def _walk(key: bytes, path: Any) -> tuple[bytes, bytes | None, bytes | None]:
    """§6.12: the root a path gives for key, and the (key, value) it ends at."""
    _need(type(path) is dict and set(path) == {"siblings", "leaf"}, "path fields")
    sib = [_b64(s, 32) for s in path["siblings"]]
    _need(len(sib) <= 256, "too many siblings")
    end = path["leaf"]
    if end is None:
        h, k, v = EMPTY, None, None
    else:
        _need(set(end) == {"key", "value"}, "leaf fields")
        k, v = _b64(end["key"], 32), _b64(end["value"], 32)
        _need(all(_bit(k, i) == _bit(key, i) for i in range(len(sib))), "leaf off the path")
        h = _tagged("memroot/map/leaf/v1", k + v)
    for i in reversed(range(len(sib))):
        pair = sib[i] + h if _bit(key, i) else h + sib[i]
        h = _tagged("memroot/map/node/v1", pair)
    return h, k, v


def _tree(pairs: list[tuple[bytes, bytes]], depth: int = 0) -> bytes:
    if not pairs:
        return EMPTY
    if len(pairs) == 1:
        return _tagged("memroot/map/leaf/v1", pairs[0][0] + pairs[0][1])
    zero = [p for p in pairs if not _bit(p[0], depth)]
    one = [p for p in pairs if _bit(p[0], depth)]
    return _tagged("memroot/map/node/v1", _tree(zero, depth + 1) + _tree(one, depth + 1))


def _item(it: Any) -> tuple[bytes, bytes | None]:
    _need(type(it) is dict and set(it) == {"kind", "id", "state"}, "item fields")
    _need(type(it["kind"]) is str and type(it["id"]) is str, "item kind/id")
    _need(bool(it["kind"]) and bool(it["id"]), "empty kind/id")
    key = _tagged("memroot/map/item/v1", cbor2.dumps([it["kind"], it["id"]], canonical=True))
    if it["state"] is None:
        return key, None
    state = _b64(it["state"])
    _cbor(state)
    return key, _tagged("memroot/map/value/v1", state)


def _dupes(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    _need(len(set(keys)) == len(keys), "duplicate JSON key")
    return dict(pairs)


def _hashes(raw: Any, limit: int) -> list[str]:
    """A version 2 list of hashes (concatenated), as the version 1 base64 strings."""
    _need(type(raw) is bytes and len(raw) % 32 == 0 and len(raw) <= 32 * limit, "hashes")
    return [base64.b64encode(raw[i : i + 32]).decode() for i in range(0, len(raw), 32)]


def _v2_path(p: Any) -> dict[str, Any]:
    _need(type(p) is list and len(p) == 2, "path shape")
    leaf = p[1]
    if leaf is not None:
        _need(type(leaf) is bytes and len(leaf) == 64, "leaf: key and value, 64 bytes")
        leaf = {
            k: base64.b64encode(x).decode() for k, x in (("key", leaf[:32]), ("value", leaf[32:]))
        }
    return {"siblings": _hashes(p[0], 256), "leaf": leaf}


def _v2_item(it: Any) -> dict[str, Any]:
    _need(type(it) is list and len(it) == 3, "item shape")
    kind, item_id, state = it
    _need(state is None or type(state) is bytes, "state")
    return {
        "kind": kind,
        "id": item_id,
        "state": None if state is None else base64.b64encode(state).decode(),
    }


def _outside_v2(raw: bytes) -> dict[str, Any]:
    """§6.15 "Version 2": the binary file read into the fields version 1 names.

    Its first 16 bytes are an array of 10, the text "memroot-proof" and the version (2); it
    is one canonical CBOR value. Byte strings go back to the base64 text version 1 checks
    (so one set of checks below serves both), and the root is the entry's memory_root.
    """
    _need(raw[:16] == b"\x8a\x6dmemroot-proof\x02", "not a version 2 file")
    f = _cbor(raw)
    _need(type(f) is list and len(f) == 10, "file shape")
    _fmt, version, kind, checkpoint, index, entry, inclusion, namespace, npath, claim = f
    _need(_fmt == "memroot-proof" and version == 2, "format/version")
    _need(type(entry) is bytes, "entry")
    _need(type(claim) is list, "claim")
    out = {
        "format": "memroot-proof", "version": 1, "kind": kind, "checkpoint": checkpoint,
        "snapshot": {"index": index, "entry": base64.b64encode(entry).decode(),
                     "inclusion": _hashes(inclusion, 64)},
        "namespace": namespace, "namespace_path": _v2_path(npath),
    }  # fmt: skip
    body = _cbor(entry)[7]
    _need(type(body) is dict and type(body.get("payload")) is dict, "entry payload")
    root = body["payload"].get("memory_root")
    _need(type(root) is bytes and len(root) == 32, "the entry's memory_root")
    out["root"] = root.hex()
    if kind == "namespace":
        out["items"] = [_v2_item(it) for it in claim]
    else:
        _need(len(claim) == 2, "claim: item and item path")
        out["item"] = _v2_item(claim[0])
        out["item_path"] = None if claim[1] is None else _v2_path(claim[1])
    return out


def _b64s(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _v3_path(p: Any, own: tuple[bytes, bytes] | None) -> dict[str, Any]:
    """§6.15 "Version 3" PATH3 = [empty bitmap, non-empty siblings, end], as a version 1 path.

    Bit i of the bitmap (most significant bit of byte 0 first) marks sibling i as EMPTY;
    the path has popcount + hashes siblings, the bitmap is exactly ceil(that / 8) bytes with
    no bit set past the last, no carried hash is EMPTY; the end is null, true (the claim's
    own leaf ``own``) or its 64 bytes (never ``own``'s).
    """
    _need(type(p) is list and len(p) == 3, "path3 shape")
    bitmap, raw, end = p
    _need(type(bitmap) is bytes and type(raw) is bytes and len(raw) % 32 == 0, "path3 fields")
    depth = len(raw) // 32 + sum(bin(b).count("1") for b in bitmap)
    _need(depth <= 256 and len(bitmap) == (depth + 7) // 8, "bitmap length")
    _need(all(not bitmap[i // 8] >> (7 - i % 8) & 1 for i in range(depth, 8 * len(bitmap))), "bits")
    hashes = [raw[i : i + 32] for i in range(0, len(raw), 32)]
    _need(EMPTY not in hashes, "an empty sibling carried")
    it = iter(hashes)
    sib = [EMPTY if bitmap[i // 8] >> (7 - i % 8) & 1 else next(it) for i in range(depth)]
    if end is True:
        _need(own is not None, "true without an item state")
        assert own is not None
        end = own[0] + own[1]
    elif end is not None:
        _need(type(end) is bytes and len(end) == 64, "leaf: 64 bytes")
        _need(own is None or end != own[0] + own[1], "the item's own leaf not written as true")
    leaf = None if end is None else {"key": _b64s(end[:32]), "value": _b64s(end[32:])}
    return {"siblings": [_b64s(h) for h in sib], "leaf": leaf}


def _v3_note(cp: Any, vkey: str, branch: str, entry: bytes, index: int, inc: list[bytes]) -> str:
    """§6.15 "Version 3": the checkpoint text, or [size, signature] and its note rebuilt.

    The rebuilt note is §5's: origin (the trusted key's name on main, else
    ``<name>/branch/<branch>``), size and base64 root (the inclusion path's), a blank line and
    one signature line named as the origin. A text the rebuild would give is refused.
    """
    name, _kid, key64 = vkey.split("+", 2)
    pub = base64.b64decode(key64)[1:]
    if type(cp) is str:
        text, _, sigs = cp.partition("\n\n")
        lines = text.split("\n")
        sig_lines = sigs.split("\n")
        rebuildable = (
            len(lines) == 3
            and len(sig_lines) == 2
            and sig_lines[1] == ""
            and sig_lines[0].startswith(f"\u2014 {lines[0]} ")
            and len(base64.b64decode(sig_lines[0].rsplit(" ", 1)[1] + "==")) == 68
            and (branch == "main" or lines[0].endswith(f"/branch/{branch}"))
        )
        _need(not rebuildable, "a note the checker rebuilds carried as text")
        return cp
    _need(type(cp) is list and len(cp) == 2, "checkpoint: [size, signature]")
    size, sig = cp
    _need(type(size) is int and size >= 0 and type(sig) is bytes and len(sig) == 64, "size/sig")
    origin = name if branch == "main" else f"{name}/branch/{branch}"
    root = _rfc9162_root(_sha(b"\x00" + entry), index, size, inc)
    key_id = _sha(origin.encode() + b"\n\x01" + pub)[:4]
    return f"{origin}\n{size}\n{_b64s(root)}\n\n\u2014 {origin} {_b64s(key_id + sig)}\n"


def _outside_v3(raw: bytes, vkey: str) -> dict[str, Any]:
    """§6.15 "Version 3": the compact file read into the fields version 1 names.

    Its first 16 bytes are an array of 9, "memroot-proof" and 3. The entry comes without its
    payload's memory_root, put back as P4's hash of the rest; the index is its seq.
    """
    _need(raw[:16] == b"\x89\x6dmemroot-proof\x03", "not a version 3 file")
    f = _cbor(raw)
    _need(type(f) is list and len(f) == 9, "file shape")
    _fmt, version, kind, checkpoint, bare, inclusion, namespace, npath, claim = f
    _need(_fmt == "memroot-proof" and version == 3, "format/version")
    _need(type(bare) is bytes and type(claim) is list, "entry/claim")
    entry = _cbor(bare)
    _need(type(entry) is list and len(entry) == 8 and type(entry[7]) is dict, "entry shape")
    payload = entry[7]["payload"]
    _need(type(payload) is dict and "memory_root" not in payload, "memory_root left in")
    _need(payload.get("v") in (2, 3) and type(payload["v"]) is int, "not a v2/v3 root")
    root = _tagged(f"memroot/root/v{payload['v']}", cbor2.dumps(payload, canonical=True))
    payload["memory_root"] = root
    full = cbor2.dumps(entry, canonical=True)
    index = entry[2]
    _need(type(index) is int and index >= 0 and type(entry[3]) is str, "seq/branch")
    inc = [base64.b64decode(h) for h in _hashes(inclusion, 64)]
    note = _v3_note(checkpoint, vkey, entry[3], full, index, inc)
    out = {
        "format": "memroot-proof", "version": 1, "kind": kind, "checkpoint": note,
        "root": root.hex(), "namespace": namespace,
        "snapshot": {"index": index, "entry": _b64s(full), "inclusion": _hashes(inclusion, 64)},
    }  # fmt: skip
    if kind == "namespace":
        out["namespace_path"] = _v3_path(npath, None)
        out["items"] = [_v2_item(it) for it in claim]
        return out
    _need(len(claim) == 2, "claim: item and item path")
    out["item"] = _v2_item(claim[0])
    ik, value = _item(out["item"])
    own = None if value is None else (ik, value)
    out["item_path"] = None if claim[1] is None else _v3_path(claim[1], own)
    ns_own = None  # the namespace's own leaf: its key, the root the item path gives
    if out["item_path"] is not None:
        _need(type(namespace) is str, "namespace")
        nk = _tagged("memroot/map/ns/v1", namespace.encode())
        with contextlib.suppress(Refused):  # no root (a leaf off the path): nothing derived
            ns_own = (nk, _walk(ik, out["item_path"])[0])
    out["namespace_path"] = _v3_path(npath, ns_own)
    return out


def _outside_check(raw: bytes, vkey: str) -> dict[str, Any]:
    """Check a proof file as FORMAT.md §6.15 says; return the claim, or raise Refused."""
    if raw[:1] and 0x80 <= raw[0] <= 0x9F and raw[15:16] == b"\x03":  # version 3
        return _outside_fields(_outside_v3(raw, vkey), vkey)
    if raw[:1] and 0x80 <= raw[0] <= 0x9F:  # a CBOR array head: the binary file
        return _outside_fields(_outside_v2(raw), vkey)
    try:
        f = json.loads(raw.decode("utf-8"), object_pairs_hook=_dupes)
    except (UnicodeDecodeError, ValueError) as e:
        raise Refused(f"json: {e}") from e
    return _outside_fields(f, vkey)


def _outside_fields(f: Any, vkey: str) -> dict[str, Any]:
    """The checks P1-P6 on a version 1 file's fields (or a version 2 file's, read as them)."""
    _need(type(f) is dict and f.get("format") == "memroot-proof", "format")
    _need(f.get("version") == 1 and type(f.get("version")) is int, "version")
    kind = f.get("kind")
    common = {"format", "version", "kind", "root", "checkpoint", "snapshot", "namespace"}
    common.add("namespace_path")
    if kind == "namespace":
        _need(set(f) == common | {"items"}, "fields")
    else:
        _need(kind in ("object", "state") and set(f) == common | {"item", "item_path"}, "fields")
    _need(type(f["root"]) is str and re.fullmatch(r"[0-9a-f]{64}", f["root"]) is not None, "root")
    _need(type(f["namespace"]) is str and f["namespace"] != "", "namespace")
    # (P2) the signed checkpoint.
    _need(type(f["checkpoint"]) is str, "checkpoint")
    origin, size, tree_root = _open_note(f["checkpoint"], vkey)
    # (P3) the SNAPSHOT entry in the signed tree.
    snap = f["snapshot"]
    _need(type(snap) is dict and set(snap) == {"index", "entry", "inclusion"}, "snapshot")
    index = snap["index"]
    _need(type(index) is int and index >= 0, "index")
    entry_raw = _b64(snap["entry"])
    entry = _cbor(entry_raw)
    _need(type(entry) is list and len(entry) == 8, "entry shape")
    _v, _prev, seq, branch, _ts, ekind, etype, body = entry
    _need(ekind == "op" and etype == "SNAPSHOT" and seq == index, "not the SNAPSHOT at index")
    log = vkey.split("+", 1)[0]
    _need(origin == (log if branch == "main" else f"{log}/branch/{branch}"), "origin/branch")
    path = [_b64(h, 32) for h in snap["inclusion"]]
    leaf = _sha(b"\x00" + entry_raw)
    _need(_rfc9162_root(leaf, index, size, path) == tree_root, "entry not in the signed tree")
    # (P4) the root v2 or v3 preimage (v3: "projections" is the list's 32-byte hash).
    payload = body["payload"]
    version = payload["v"]
    _need(version in (2, 3) and payload["branch"] == branch, "not a v2/v3 root of the branch")
    if version == 3:
        listed = payload["projections"]
        _need(type(listed) is bytes and len(listed) == 32, "v3 projections not a hash")
    preimage = {k: v for k, v in payload.items() if k != "memory_root"}
    computed = _tagged(f"memroot/root/v{version}", cbor2.dumps(preimage, canonical=True))
    _need(computed == payload["memory_root"], "preimage hash mismatch")
    _need(computed.hex() == f["root"], "another root than the file's")
    map_root = payload["map"]
    # (P5, P6) the map.
    nk = _tagged("memroot/map/ns/v1", f["namespace"].encode())
    top, end_k, end_v = _walk(nk, f["namespace_path"])
    _need(top == map_root, "namespace path does not give the map root")
    ns_in = end_k == nk
    if kind == "namespace":
        _need(type(f["items"]) is list, "items")
        pairs = [_item(it) for it in f["items"]]
        _need(all(v is not None for _, v in pairs), "an item without state")
        keys = [k for k, _ in pairs]
        _need(keys == sorted(set(keys)), "items not sorted by key, each once")
        if not pairs:
            _need(not ns_in, "namespace present but nothing listed")
            return {"namespace": f["namespace"], "items": []}
        _need(ns_in and _tree(pairs) == end_v, "items do not rebuild the namespace")  # type: ignore[arg-type]
        return {"namespace": f["namespace"], "items": f["items"]}
    it = f["item"]
    ik, value = _item(it)
    _need((it["kind"] == "object") == (kind == "object"), "kind")
    _need(kind == "object" or (it["kind"].startswith("state/") and len(it["kind"]) > 6), "kind")
    if not ns_in:
        _need(value is None and f["item_path"] is None, "absent namespace holds no item")
        return {"absent": [f["namespace"], it["kind"], it["id"]]}
    _need(f["item_path"] is not None, "item path missing")
    sub, k, v = _walk(ik, f["item_path"])
    _need(sub == end_v, "item path does not give the namespace's subtree")
    if value is None:
        _need(k != ik, "the item is present")
        return {"absent": [f["namespace"], it["kind"], it["id"]]}
    _need(k == ik and v == value, "the state is not the one the map holds")
    return {"present": [f["namespace"], it["kind"], it["id"], it["state"]]}


# -- both checkers on every vector and every bit flip -------------------------------------------


@pytest.mark.parametrize("name", sorted(EVERY))
def test_every_vector_is_accepted_by_both_checkers(name: str) -> None:
    """memroot's checker and the outside auditor's accept every vector and agree on it."""
    proven = check_proof(EVERY[name], [VKEY])
    claim = _outside_check(EVERY[name], VKEY)
    if "absent" in claim:
        assert not proven.present and proven.absent_item == tuple(claim["absent"][1:])
    elif "present" in claim:
        assert proven.present and proven.items[0][:2] == tuple(claim["present"][1:3])
    else:
        assert [i[:2] for i in proven.items] == [(x["kind"], x["id"]) for x in claim["items"]]


def test_the_claims_are_the_ones_named() -> None:
    """Each vector proves what its name says (present, absent, every item of alice)."""
    c = {n: check_proof(FILES[n], [VKEY]) for n in FILES}
    assert c["object.proof.json"].present and c["state.proof.json"].present
    assert not c["object-absent.proof.json"].present
    assert not c["object-absent-ns.proof.json"].present
    assert len(c["namespace.proof.json"].items) == 5
    assert not c["namespace-empty.proof.json"].present
    assert c["object-branch.proof.json"].branch == "sim-1"
    v3 = c["object-v3root.proof.json"]  # object's claim, at a v3 root of the same map
    assert v3.present and v3.items == c["object.proof.json"].items
    assert v3.root != c["object.proof.json"].root


@pytest.mark.parametrize("name", sorted(V3))
def test_a_v3_vector_has_the_content_of_its_twins(name: str) -> None:
    """NAME.v3.proof proves what NAME.proof.json and NAME.proof prove, and is the smallest."""
    stem = name.removesuffix(".v3.proof")
    twin, v2 = FILES[f"{stem}.proof.json"], BINARY[f"{stem}.proof"]
    assert check_proof(V3[name], [VKEY]) == check_proof(twin, [VKEY])
    assert _outside_check(V3[name], VKEY) == _outside_check(twin, VKEY)
    assert _outside_v3(V3[name], VKEY) == json.loads(twin)
    assert len(V3[name]) < len(v2) < len(twin)


def test_the_v3_vectors_use_every_form() -> None:
    """The version 3 vectors hold each form: both checkpoints, every end, empty siblings."""
    values = {n: cbor2.loads(raw) for n, raw in V3.items()}
    notes = {type(v[3]) for v in values.values()}
    assert notes == {str, list}  # object-branch-r1 carries its note as text
    assert type(values["object-branch-r1.v3.proof"][3]) is str
    paths = [v[7] for v in values.values()] + [
        v[8][1] for v in values.values() if v[2] != "namespace"
    ]
    ends = {"null" if p is None or p[2] is None else type(p[2]).__name__ for p in paths}
    assert ends == {"null", "bool", "bytes"}
    assert any(p is not None and any(p[0]) for p in paths)  # a sibling marked empty


@pytest.mark.parametrize("name", sorted(BINARY))
def test_a_binary_vector_has_the_content_of_its_json_twin(name: str) -> None:
    """NAME.proof proves what NAME.proof.json proves; the outside reading of both agrees."""
    twin = FILES[f"{name}.json"]
    assert check_proof(BINARY[name], [VKEY]) == check_proof(twin, [VKEY])
    assert _outside_check(BINARY[name], VKEY) == _outside_check(twin, VKEY)
    assert _outside_v2(BINARY[name]) == json.loads(twin)
    assert len(BINARY[name]) < len(twin)


def _flip(raw: bytes, pos: int, bit: int) -> bytes:
    out = bytearray(raw)
    out[pos % len(out)] ^= 1 << bit
    return bytes(out)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(FILES)), st.integers(min_value=0), st.integers(0, 7))
def test_a_bit_flip_anywhere_is_rejected_by_both(name: str, pos: int, bit: int) -> None:
    """Any single-bit change anywhere in a proof file is refused by both checkers (or true)."""
    _rejected_or_still_true(_flip(FILES[name], pos, bit))


@pytest.mark.parametrize("name", sorted({**BINARY, **V3}))
def test_every_bit_flip_of_a_binary_vector_is_rejected_by_both(name: str) -> None:
    """Every single-bit change of every version 2 and 3 vector is refused by both (or true)."""
    raw = {**BINARY, **V3}[name]
    for pos in range(len(raw)):
        for bit in range(8):
            _rejected_or_still_true(_flip(raw, pos, bit))


_OUTSIDE_REFUSALS = (Refused, KeyError, TypeError, ValueError, IndexError, AttributeError)


def _rejected_or_still_true(bad: bytes) -> None:
    """Both checkers refuse ``bad``, or both accept a true absence (the documented exception).

    An absence proof whose claimed id or namespace was changed to another one whose key
    shares the path's prefix still proves a true absence (FORMAT.md §6.15); the claim is
    checked against the generator's map.
    """
    try:
        proven = check_proof(bad, [VKEY])
    except IntegrityError:
        with pytest.raises(_OUTSIDE_REFUSALS):
            _outside_check(bad, VKEY)
        return
    assert not proven.present, "a changed file was accepted as proving a present item"
    _outside_check(bad, VKEY)
    gen = _generator()
    held = {(ns, k, i) for ns, items in gen.ITEMS.items() for k, i, _ in items}
    if proven.kind == "namespace":
        assert proven.namespace not in gen.ITEMS
    else:
        assert proven.absent_item is not None
        assert (proven.namespace, *proven.absent_item) not in held


def _fields(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _fields(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _fields(v, (*path, i))]
    return [path] if value is not None else []


def _flip_field(value: Any, n: int) -> Any:
    if isinstance(value, bool) or value is None:
        return not value
    if isinstance(value, int):
        return value ^ (1 << (n % 8))
    assert isinstance(value, str)
    try:
        raw = base64.b64decode(value, validate=True)
        if raw and base64.b64encode(raw).decode() == value and len(value) >= 8:
            b = bytearray(raw)
            b[n % len(b)] ^= 1 << (n % 8)
            return base64.b64encode(bytes(b)).decode()
    except ValueError:
        pass
    chars = list(value)
    i = n % len(chars)
    chars[i] = chr(ord(chars[i]) ^ (1 << (n % 5)))
    return "".join(chars)


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for p in path[:-1]:
        doc = doc[p]
    doc[path[-1]] = value


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(FILES)), st.integers(min_value=0), st.integers(min_value=0))
def test_a_changed_byte_in_any_field_is_rejected_or_still_true(name: str, f: int, n: int) -> None:
    """Flipping a byte of any field's value (decoded base64, text, number) is refused (or true)."""
    doc = json.loads(FILES[name])
    paths = _fields(doc)
    path = paths[f % len(paths)]
    _set(doc, path, _flip_field(_get(doc, path), n))
    _rejected_or_still_true(json.dumps(doc).encode())
