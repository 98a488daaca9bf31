"""An HTTP witness (C2SP tlog-witness) that cosigns memroot checkpoints (cosignature/v1).

For every log (origin) it is configured for, the witness keeps the newest checkpoint it
cosigned, and cosigns a newer one only after checking the log's signature and a consistency
proof from it. It never cosigns a smaller tree after a larger one, nor two different trees,
including across restarts (the state is written to disk, atomically, before it answers).

A witness directory holds::

    witness.key     the Ed25519 key (mode 0600; the key file format of memroot.ledger.signing)
    witness.json    {"version": 1, "name": NAME, "logs": {origin: [log vkey, ...]}}
    state.json      {"version": 1, "logs": {origin: {"size", "root" (base64), "note"}}}
    keys.json       {"version": 1, "logs": {origin: [[seq, base64 entry], ...]}}: the key entries
                    it was shown (``POST /add-keys``, memroot.ledger.transparency.witness_keys)
    evidence.jsonl  every refused request that the log had signed (proof of misbehaviour)
    witness.lock    held (flock) by the one process serving the directory

HTTP (docs/FORMAT.md section 9):

- ``POST /add-checkpoint``: C2SP tlog-witness. 200 with the cosignature line; 400 malformed
  body or old size above the checkpoint's; 403 no valid signature by a configured log key;
  404 unknown origin; 409 (``text/x.tlog.size``, the witness's size) old size is not the
  witness's, or same size with another root; 422 the consistency proof does not verify.
- ``POST /add-keys``: memroot's extension: the log's key entries with proofs, so checkpoints
  by writer keys and rotated root keys are cosigned (``witness_keys``, FORMAT.md 11.5).
- ``GET /checkpoint?origin=O``: memroot's monitor read (the spec leaves it to be designed):
  the newest checkpoint the witness cosigned for ``O``, with its cosignature; 404 if none.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, Final

from memroot.ledger import merkle
from memroot.ledger.entries import CANONICAL_BRANCH
from memroot.ledger.errors import (
    DecodeError,
    KeyFileError,
    ProofError,
    RefusedError,
    StorageError,
)
from memroot.ledger.hashing import EMPTY_ROOT
from memroot.ledger.note import Verifier, open_checkpoint, parse_checkpoint, split_note
from memroot.ledger.signing import Ed25519Signer
from memroot.ledger.transparency.cosignature import (
    MAX_REQUEST,
    SIZE_CONTENT_TYPE,
    WitnessKey,
    cosign,
    parse_add_checkpoint,
)
from memroot.ledger.transparency.witness_keys import LearnedKeys, learn_keys, load_learned

__all__ = ["Answer", "Witness", "init_witness", "serve"]

KEY_FILE: Final = "witness.key"
CONFIG_FILE: Final = "witness.json"
STATE_FILE: Final = "state.json"
EVIDENCE_FILE: Final = "evidence.jsonl"
LOCK_FILE: Final = "witness.lock"
KEYS_FILE: Final = "keys.json"
_TEXT: Final = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: status, content type and body."""

    status: int
    content_type: str
    body: bytes


def _text(status: int, message: str) -> Answer:
    return Answer(status, _TEXT, (message.rstrip("\n") + "\n").encode("utf-8"))


def _write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file, fsync, rename, directory fsync)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text("utf-8"))
    except FileNotFoundError as e:
        raise StorageError(
            f"{path} does not exist: not a witness directory (`witness init`)"
        ) from e
    except (OSError, ValueError) as e:
        raise DecodeError(f"cannot read the witness {what} {path}: {e}") from e
    if (
        not isinstance(raw, dict)
        or raw.get("version") != 1
        or not isinstance(raw.get("logs"), dict)
    ):
        raise DecodeError(f"{path} is not a memroot witness {what} (version 1)")
    return raw


def init_witness(directory: Path, name: str) -> str:
    """Create a witness directory with a new key named ``name``; return the witness vkey.

    Raises:
        StorageError: if the directory already holds a witness or cannot be written.
        KeyFileError: if the key file cannot be written.
        ValueError: if ``name`` is not a valid key name.

    """
    directory = Path(directory)
    if (directory / CONFIG_FILE).exists() or (directory / KEY_FILE).exists():
        raise StorageError(f"{directory} already holds a witness; refusing to overwrite it")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(f"cannot create {directory}: {e.strerror}") from e
    signer = Ed25519Signer.generate(name)
    signer.save(directory / KEY_FILE)
    try:
        _write_json(directory / CONFIG_FILE, {"version": 1, "name": name, "logs": {}})
        _write_json(directory / STATE_FILE, {"version": 1, "logs": {}})
    except OSError as e:
        raise StorageError(f"cannot write the witness files in {directory}: {e}") from e
    return WitnessKey.from_signer(signer).vkey()


class Witness:
    """The witness's logic over its directory; thread-safe (one lock around check and write).

    Open it once per process: ``serve`` holds the directory's lock file, so a second
    process cannot serve (and so cannot race) the same state.
    """

    def __init__(self, directory: Path, *, clock: Callable[[], float] = time.time) -> None:
        """Load the witness in ``directory``.

        Raises:
            StorageError: if it is not a witness directory.
            DecodeError: if its files are damaged.
            KeyFileError: if the key file is missing, malformed or too open.

        """
        self.directory = Path(directory)
        self._clock = clock
        self._lock = threading.Lock()
        config = _read_json(self.directory / CONFIG_FILE, "configuration")
        self.signer = Ed25519Signer.load(self.directory / KEY_FILE)
        if config.get("name") != self.signer.name:
            raise KeyFileError(
                f"{self.directory / KEY_FILE} is named {self.signer.name!r}, the configuration "
                f"{config.get('name')!r}"
            )
        self.key = WitnessKey.from_signer(self.signer)
        self.logs: dict[str, list[Verifier]] = self._read_logs(config)
        self._config_stamp = self._stamp()
        self.learned: dict[str, LearnedKeys] = self._read_learned()
        self.state: dict[str, dict[str, Any]] = dict(
            _read_json(self.directory / STATE_FILE, "state")["logs"]
        )

    @staticmethod
    def _read_logs(config: dict[str, Any]) -> dict[str, list[Verifier]]:
        return {
            str(o): [Verifier.from_vkey(str(k)) for k in ks] for o, ks in config["logs"].items()
        }

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = (self.directory / CONFIG_FILE).stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _keys_for(self, origin: str) -> list[Verifier] | None:
        """Return the log keys of ``origin`` (None if it is not followed).

        The configuration is read again whenever its file changed (mtime and size, checked
        per request), so `witness follow` takes effect on a running server: a new log, or a
        new key of a followed one.
        """
        stamp = self._stamp()
        if stamp != self._config_stamp:
            try:
                fresh = self._read_logs(_read_json(self.directory / CONFIG_FILE, "configuration"))
            except (StorageError, DecodeError):
                fresh = None
            if fresh is not None:
                with self._lock:
                    self.logs = fresh
                    self._config_stamp = stamp
        return self.logs.get(origin)

    def _read_learned(self) -> dict[str, LearnedKeys]:
        """Fold the key entries kept in ``keys.json`` (none when the file is absent)."""
        path = self.directory / KEYS_FILE
        if not path.exists():
            return {}
        raw = _read_json(path, "key sets")
        out = {}
        for origin, entries in raw["logs"].items():
            keys = self.logs.get(str(origin))
            if keys and isinstance(entries, list):
                out[str(origin)] = load_learned(str(origin), keys[0], entries)
        return out

    def _learned_signers(self, origin: str, text: str) -> list[Verifier]:
        """Return the keys a learned key set allows for this checkpoint (``O`` or a branch)."""
        if not self.learned:
            return []
        log, branch = origin, CANONICAL_BRANCH
        if origin not in self.learned and "/branch/" in origin:
            log, _, branch = origin.rpartition("/branch/")
        learned = self.learned.get(log)
        if learned is None:
            return []
        try:
            size = parse_checkpoint(text).size
        except DecodeError:
            return []
        return learned.verifiers(branch, size)

    def add_keys(self, body: bytes) -> Answer:
        """Answer ``POST /add-keys`` (memroot's extension, docs/FORMAT.md 11.5)."""
        self._keys_for("")  # pick up a changed configuration first
        roots = {o: ks[0] for o, ks in self.logs.items() if ks}
        try:
            origin, learned = learn_keys(body, roots, self.learned)
        except DecodeError as e:
            return _text(400, f"malformed key request: {e}")
        except KeyError:
            return _text(404, "this witness does not follow that log")
        except ProofError as e:
            status = 409 if str(e).startswith("409") else 403
            return _text(status, f"the key entries do not check: {e}")
        with self._lock:
            before = self.learned.get(origin)
            if before is not None and len(before.entries) >= len(learned.entries):
                return _text(200, f"key set of {origin}: {len(before.entries)} entries known")
            self.learned[origin] = learned
            data = {
                "version": 1,
                "logs": {o: [list(e) for e in lk.entries] for o, lk in self.learned.items()},
            }
            try:
                _write_json(self.directory / KEYS_FILE, data)
            except OSError as e:
                if before is None:
                    self.learned.pop(origin, None)
                else:
                    self.learned[origin] = before
                return _text(503, f"cannot persist the key set: {e}")
        return _text(200, f"key set of {origin}: {len(learned.entries)} entries known")

    @property
    def name(self) -> str:
        """The witness's name (its key name)."""
        return self.signer.name

    def add_log(self, vkey: str) -> str:
        """Follow the log whose checkpoints ``vkey`` signs (origin = the key's name).

        Raises:
            DecodeError: if ``vkey`` is not a log vkey.
            StorageError: if the configuration cannot be written.

        """
        v = Verifier.from_vkey(vkey.strip())
        with self._lock:
            keys = self.logs.setdefault(v.name, [])
            if v not in keys:
                keys.append(v)
            data = {
                "version": 1,
                "name": self.name,
                "logs": {o: [k.vkey() for k in ks] for o, ks in sorted(self.logs.items())},
            }
            try:
                _write_json(self.directory / CONFIG_FILE, data)
            except OSError as e:
                raise StorageError(f"cannot write {self.directory / CONFIG_FILE}: {e}") from e
        return v.name

    def latest(self, origin: str) -> Answer:
        """Answer ``GET /checkpoint?origin=``: the newest cosigned checkpoint, or 404."""
        with self._lock:
            record = self.state.get(origin)
        if record is None:
            return _text(404, f"no checkpoint of {origin!r} was cosigned here")
        return Answer(200, _TEXT, str(record["note"]).encode("utf-8"))

    def add_checkpoint(self, body: bytes) -> Answer:
        """Answer ``POST /add-checkpoint`` exactly as C2SP tlog-witness prescribes."""
        try:
            old, proof, note = parse_add_checkpoint(body)
            text, _ = split_note(note)
        except DecodeError as e:
            return _text(400, f"malformed request: {e}")
        origin = text.split("\n", 1)[0]
        keys = self._keys_for(origin)
        if keys is None:
            return _text(404, f"this witness does not follow the log {origin!r}")
        try:
            cp = open_checkpoint(
                note, [*keys, *self._learned_signers(origin, text)], origin=origin
            ).checkpoint
        except (DecodeError, ProofError) as e:
            return _text(403, f"no valid signature by a key of {origin!r}: {e}")
        if old > cp.size:
            return _text(400, f"old size {old} is above the checkpoint size {cp.size}")
        with self._lock:
            record = self.state.get(origin)
            have = int(record["size"]) if record else 0
            have_root = base64.b64decode(record["root"]) if record else None
            if old != have:
                self._evidence(origin, body, f"old size {old}, witness has {have}")
                return Answer(409, SIZE_CONTENT_TYPE, f"{have}\n".encode())
            if old == cp.size and have_root is not None and have_root != cp.root:
                self._evidence(origin, body, f"another root at size {have}")
                return Answer(409, SIZE_CONTENT_TYPE, f"{have}\n".encode())
            try:
                if old == 0:
                    if proof:
                        raise ProofError("a proof from size 0 must be empty")
                    if cp.size == 0 and cp.root != EMPTY_ROOT:
                        raise ProofError("a tree of size 0 has the empty root")
                elif old == cp.size:
                    if proof:
                        raise ProofError("a proof between equal sizes must be empty")
                else:
                    assert have_root is not None
                    merkle.verify_consistency(old, cp.size, proof, have_root, cp.root)
            except ProofError as e:
                self._evidence(origin, body, f"consistency proof fails: {e}")
                return _text(422, f"the consistency proof from size {old} does not verify: {e}")
            line = cosign(self.signer, text, int(self._clock()))
            cosigned = note + line
            self.state[origin] = {
                "size": cp.size,
                "root": base64.b64encode(cp.root).decode(),
                "note": cosigned,
            }
            try:
                _write_json(self.directory / STATE_FILE, {"version": 1, "logs": dict(self.state)})
            except OSError as e:
                # Not persisted, so not answered: restore the previous record.
                if record is None:
                    self.state.pop(origin, None)
                else:
                    self.state[origin] = record
                return _text(503, f"cannot persist the witness state: {e}")
        return Answer(200, _TEXT, line.encode("utf-8"))

    def _evidence(self, origin: str, body: bytes, why: str) -> None:
        """Keep a refused but log-signed request: it may prove the log misbehaved."""
        record = {
            "time": int(self._clock()),
            "origin": origin,
            "why": why,
            "request": body.decode("utf-8", "replace"),
        }
        with (
            contextlib.suppress(OSError),
            open(self.directory / EVIDENCE_FILE, "a", encoding="utf-8") as f,
        ):
            f.write(json.dumps(record, sort_keys=True) + "\n")


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive, as tlog-witness recommends
    timeout = 30  # seconds: an idle or trickling client does not hold a thread for ever

    def _send(self, answer: Answer) -> None:
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(answer.body)

    def do_POST(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        if path not in ("/add-checkpoint", "/add-keys"):
            self._send(_text(404, "not found"))
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._send(_text(411, "a Content-Length is required"))
            return
        if not 0 <= length <= MAX_REQUEST:
            self._send(_text(400, f"request body larger than {MAX_REQUEST} bytes"))
            return
        body = self.rfile.read(length)
        witness = self.server.witness
        self._send(witness.add_keys(body) if path == "/add-keys" else witness.add_checkpoint(body))

    def do_GET(self) -> None:
        parts = urllib.parse.urlsplit(self.path)
        origins = urllib.parse.parse_qs(parts.query).get("origin", [])
        if parts.path != "/checkpoint" or len(origins) != 1:
            self._send(_text(404, "not found (GET /checkpoint?origin=O)"))
            return
        self._send(self.server.witness.latest(origins[0]))

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log is not None:
            self.server.log.write(f"{self.address_string()} {format % args}\n")
            self.server.log.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], witness: Witness, log: IO[str] | None) -> None:
        self.witness = witness
        self.log = log
        super().__init__(address, _Handler)


def serve(
    directory: Path, host: str, port: int, *, log: IO[str] | None = None
) -> ThreadingHTTPServer:
    """Open the witness in ``directory`` and bind its HTTP server (call ``serve_forever``).

    The directory's lock file is held for the life of the process, so one witness state is
    never served by two processes. ``port`` 0 picks a free port (``server.server_address``).

    Raises:
        RefusedError: if another process serves the directory.
        StorageError: if the address cannot be bound or the directory is not a witness.

    """
    witness = Witness(directory)
    try:
        lock = open(Path(directory) / LOCK_FILE, "a")  # noqa: SIM115 - held while serving
    except OSError as e:
        raise StorageError(f"cannot open {Path(directory) / LOCK_FILE}: {e.strerror}") from e
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        lock.close()
        raise RefusedError(f"another process already serves the witness in {directory}") from e
    try:
        server = _Server((host, port), witness, log)
    except OSError as e:
        lock.close()
        raise StorageError(f"cannot listen on {host}:{port}: {e.strerror}") from e
    server.lock_file = lock  # type: ignore[attr-defined]  # kept open: the lock lives with it
    return server
