"""The log's witness client and the auditor's witness checks (C2SP tlog-witness).

A *witness* keeps, for every log it follows, the newest checkpoint it cosigned, and cosigns a
new one only when a consistency proof shows it extends that one. A log whose checkpoints carry
cosignatures cannot show one history to one auditor and another (or an older copy) to the
next: the witnesses would have to cosign both. docs/FORMAT.md section 9 is the normative text.

This module is the log's client (``POST <url>/add-checkpoint``, C2SP tlog-witness) and the
auditor's witness lookups; the cosignature format is ``memroot.ledger.transparency.cosignature``,
the witness itself ``memroot.ledger.transparency.witness_server``.

The ledger side keeps its witnesses and their progress in two tables of the ledger file
(``witnesses``, ``witness_state``) and the cosignatures *in the checkpoint notes themselves*
(the witness's lines are appended to the stored note, as C2SP tlog-witness suggests), so an
export bundle or a tiles directory carries them with no format of its own.

Submission never loses a checkpoint: the checkpoint is signed and committed first; a witness
that is down or refuses only leaves it *pending* (recorded with the error), and every later
``after_checkpoint`` or ``memroot witness submit`` retries from where that witness is. A
problem is reported as a ``WitnessWarning`` (the CLI prints it on stderr), never raised to the
append that triggered it: the append did commit, and failing it would make callers retry it.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from memroot.ledger.entries import CANONICAL_BRANCH, Entry
from memroot.ledger.errors import (
    DecodeError,
    IntegrityError,
    MemrootError,
    NotFoundError,
    ProofError,
    RefusedError,
    StorageError,
)
from memroot.ledger.note import SignedCheckpoint, Verifier, open_checkpoint
from memroot.ledger.transparency._checkpoints import checkpoint_at, checkpoints_after, count_after
from memroot.ledger.transparency._versioned import VersionedCache
from memroot.ledger.transparency.cosignature import (
    MAX_REQUEST,
    SIG_PREFIX,
    SIZE_CONTENT_TYPE,
    Cosignature,
    WitnessKey,
    add_cosignature_lines,
    cosignatures,
    parse_size_body,
    render_add_checkpoint,
)
from memroot.ledger.transparency.witness_keys import render_add_keys
from memroot.ledger.vocab import OpType

if TYPE_CHECKING:
    from memroot.ledger.backends.store import BranchRow, Store
    from memroot.ledger.ledger import Ledger
    from memroot.ledger.verify import AuditReport, BranchLike

__all__ = [
    "CheckpointSource",
    "Submission",
    "WitnessConfig",
    "WitnessWarning",
    "add_witness",
    "after_checkpoint",
    "check_cosignatures",
    "fetch_latest",
    "list_witnesses",
    "remove_witness",
    "submit",
    "witness_status",
    "witnessed_trust",
]

_TIMEOUT: Final = 10.0  # seconds per HTTP request

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS witnesses(
  name TEXT PRIMARY KEY, url TEXT NOT NULL, vkey TEXT NOT NULL, branches TEXT NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS witness_state(
  witness TEXT NOT NULL, branch TEXT NOT NULL, size INTEGER, attempts INTEGER NOT NULL,
  error TEXT, tried INTEGER, PRIMARY KEY(witness, branch)
) STRICT;
"""


class WitnessWarning(UserWarning):
    """A witness could not cosign a checkpoint now; it stays pending and is retried."""


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class WitnessConfig:
    """A witness the ledger submits to: its name (the key name), URL, key and branches."""

    name: str
    url: str
    key: WitnessKey
    branches: tuple[str, ...]


_TABLES_SEEN: VersionedCache[bool] = VersionedCache()
"""Per open store: whether the witness tables exist (every sealed append asks; see
``_has_tables``)."""


def _has_tables(store: Store, version: int | None = None) -> bool:
    """Tell whether the ledger has the witness tables (any witness was ever configured).

    Cached per connection: the answer changes only when a connection creates the tables.
    Another connection's commit changes SQLite's ``data_version`` (which is then read again);
    this connection's own ``add_witness`` forgets the cached answer. ``version``: the
    ``data_version`` the caller already holds (``Store.committed_version`` right after a
    commit), so that nothing is read while the answer is cached.
    """

    def look() -> bool:
        with store.read() as db:
            return (
                db.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'witnesses'"
                ).fetchone()
                is not None
            )

    return _TABLES_SEEN.get(store, store.data_version() if version is None else version, look)


def list_witnesses(store: Store) -> list[WitnessConfig]:
    """Return the witnesses configured on the ledger, by name.

    Raises:
        StorageError: if the ledger cannot be read.
        DecodeError: if a stored witness row is damaged.

    """
    if not _has_tables(store):
        return []
    with store.read() as db:
        rows = db.execute(
            "SELECT name, url, vkey, branches FROM witnesses ORDER BY name"
        ).fetchall()
    return [
        WitnessConfig(str(n), str(u), WitnessKey.from_vkey(str(k)), tuple(json.loads(str(b))))
        for n, u, k, b in rows
    ]


def _check_url(url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise RefusedError(f"witness URL {url!r} must be an http:// or https:// URL")
    if parsed.query or parsed.fragment:
        raise RefusedError(f"witness URL {url!r} must not have a query or fragment")
    return url.rstrip("/")


def add_witness(
    ledger: Ledger, url: str, vkey: str, branches: Sequence[str] = (CANONICAL_BRANCH,)
) -> WitnessConfig:
    """Configure a witness: every later checkpoint of ``branches`` is submitted to it.

    The witness is added with nothing cosigned yet; the next ``submit`` (or checkpoint)
    sends it the newest checkpoints. Adding a witness of the same name replaces it.

    Raises:
        DecodeError: if ``vkey`` is not a cosignature/v1 witness vkey.
        RefusedError: for a bad URL; NotFoundError for a branch that does not exist.
        StorageError: if the ledger cannot be written.

    """
    key = WitnessKey.from_vkey(vkey)
    url = _check_url(url)
    if not branches:
        raise RefusedError("a witness needs at least one branch to witness")
    for b in branches:
        ledger.store.branch(b)  # NotFoundError names a branch that does not exist
    _TABLES_SEEN.forget(ledger.store)
    try:
        with ledger.store.write() as db:
            db.execute(_SCHEMA)
            db.execute(
                "INSERT OR REPLACE INTO witnesses(name, url, vkey, branches) VALUES(?, ?, ?, ?)",
                (key.name, url, key.vkey(), json.dumps(sorted(set(branches)))),
            )
            db.execute("DELETE FROM witness_state WHERE witness = ?", (key.name,))
    finally:
        _TABLES_SEEN.forget(ledger.store)  # created (or not): look again
    return WitnessConfig(key.name, url, key, tuple(sorted(set(branches))))


def remove_witness(ledger: Ledger, name: str) -> None:
    """Stop submitting to witness ``name`` (cosignatures already kept stay in the notes).

    Raises:
        NotFoundError: if no witness of that name is configured.

    """
    if not any(w.name == name for w in list_witnesses(ledger.store)):
        raise NotFoundError(f"no witness named {name!r} is configured")
    with ledger.store.write() as db:
        db.execute("DELETE FROM witnesses WHERE name = ?", (name,))
        db.execute("DELETE FROM witness_state WHERE witness = ?", (name,))


# --------------------------------------------------------------------------- submission


@dataclass(frozen=True, slots=True)
class Submission:
    """What one witness did with one branch's pending checkpoints.

    ``status``: ``cosigned`` (it cosigned up to ``size``), ``up to date`` (nothing pending),
    ``unavailable`` (unreachable or a server error: retried later), ``refused`` (403, 404,
    400: the witness is not configured for this log), ``conflict`` (422, or a 409 naming a
    size larger than this ledger: the witness saw another history; an integrity problem).
    ``pending`` counts the checkpoints not cosigned yet.
    """

    witness: str
    branch: str
    status: str
    size: int | None
    pending: int
    message: str

    @property
    def ok(self) -> bool:
        """True when nothing is left pending for this witness and branch."""
        return self.status in ("cosigned", "up to date") and self.pending == 0

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "witness": self.witness,
            "branch": self.branch,
            "status": self.status,
            "size": self.size,
            "pending": self.pending,
            "message": self.message,
            "ok": self.ok,
        }


class _Unavailable(Exception):
    """The witness did not answer (connection refused, timeout, 5xx)."""


def _post(url: str, body: bytes, timeout: float) -> tuple[int, str, str]:
    """POST and return ``(status, content type, text)``; raise _Unavailable when unreachable."""
    import urllib.error
    import urllib.request  # here, not at the top: every append imports this module (40 ms)

    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "text/plain; charset=utf-8"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return (
                int(response.status),
                str(response.headers.get("Content-Type", "")),
                response.read(MAX_REQUEST).decode("utf-8", "replace"),
            )
    except urllib.error.HTTPError as e:
        text = e.read(4096).decode("utf-8", "replace")
        if e.code >= 500:
            raise _Unavailable(f"HTTP {e.code}: {text.strip()[:200]}") from e
        return int(e.code), str(e.headers.get("Content-Type", "")), text
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise _Unavailable(f"unreachable: {reason}") from e


def _state(store: Store, witness: str, branch: str) -> int | None:
    with store.read() as db:
        row = db.execute(
            "SELECT size FROM witness_state WHERE witness = ? AND branch = ?", (witness, branch)
        ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _record(store: Store, witness: str, branch: str, size: int | None, error: str | None) -> None:
    with store.write() as db:
        old = db.execute(
            "SELECT size, attempts FROM witness_state WHERE witness = ? AND branch = ?",
            (witness, branch),
        ).fetchone()
        attempts = 0 if error is None else (int(old[1]) + 1 if old else 1)
        keep = size if size is not None else (old[0] if old else None)
        db.execute(
            "INSERT OR REPLACE INTO witness_state(witness, branch, size, attempts, error, tried) "
            "VALUES(?, ?, ?, ?, ?, ?)",
            (witness, branch, keep, attempts, error, int(time.time())),
        )


def _keep_cosignatures(store: Store, branch_no: int, size: int, lines: str) -> None:
    """Append verified cosignature lines to the stored checkpoint note (one transaction)."""
    with store.write() as db:
        # The checkpoints table belongs to the store; the note is updated in place (same
        # text and log signature, more signature lines), re-read inside the write lock so a
        # concurrent submitter's lines are kept too.
        row = db.execute(
            "SELECT CAST(note AS BLOB) FROM checkpoints WHERE branch = ? AND size = ?",
            (branch_no, size),
        ).fetchone()
        if row is None:
            return  # pruned by the retention policy meanwhile: nothing to keep it with
        note = bytes(row[0]).decode("utf-8")
        db.execute(
            "UPDATE checkpoints SET note = ? WHERE branch = ? AND size = ?",
            (add_cosignature_lines(note, lines), branch_no, size),
        )


def _show_keys(ledger: Ledger, w: WitnessConfig, timeout: float) -> None:
    """Show the witness main's key entries with proofs (``POST /add-keys``, FORMAT.md 11.5).

    Only when the log has key entries: then checkpoints signed by writer keys or a rotated
    root key are cosigned by a witness that knows only the root vkey. Best effort: a witness
    without the extension (404) or that refuses them answers the checkpoints with 403 as
    before, which the submission reports; an unreachable one is reported by the submission.
    """
    seqs = ledger.key_entry_seqs()
    if not seqs:
        return
    store = ledger.store
    main = store.branch(CANONICAL_BRANCH)
    stored = store.checkpoints(main.no)
    if not stored:
        return
    size, _, note = stored[-1]
    entries: list[tuple[int, bytes, list[bytes], tuple[str, list[bytes]] | None]] = []
    for seq in seqs:
        if seq >= size:
            break
        data = bytes(store.entry_row(main.no, seq).data)
        signoff = None
        if Entry.from_bytes(data).type == OpType.KEY_ROTATE.value:
            off = next(((s, n) for s, _, n in stored if s > seq), None)
            if off is None:
                return
            signoff = (off[1], ledger.inclusion_proof(seq, off[0]))
        entries.append((seq, data, ledger.inclusion_proof(seq, size), signoff))
    with contextlib.suppress(_Unavailable):
        _post(w.url + "/add-keys", render_add_keys(ledger.origin, note, entries), timeout)


def _submit_branch(ledger: Ledger, w: WitnessConfig, branch: str, timeout: float) -> Submission:
    store = ledger.store
    b = store.branch(branch)
    known = _state(store, w.name, branch)
    pending = checkpoints_after(store, b.no, -1 if known is None else known)
    if not pending:
        return Submission(w.name, branch, "up to date", known, 0, "nothing to submit")
    verifiers = [Verifier.from_vkey(k) for k in ledger.all_vkeys()]
    _show_keys(ledger, w, timeout)
    url = w.url + "/add-checkpoint"
    done = 0
    last_size = known
    queue = list(pending)
    conflicts = 0
    while queue:
        size, _root, note = queue[0]
        old = 0 if known is None else known
        if old > size:
            queue.pop(0)
            continue
        proof = ledger.consistency_proof(old, size, branch) if 0 < old < size else []
        try:
            status, ctype, text = _post(url, render_add_checkpoint(old, proof, note), timeout)
        except _Unavailable as e:
            msg = f"witness {w.name} at {w.url} is {e}"
            _record(store, w.name, branch, known, msg)
            return Submission(w.name, branch, "unavailable", last_size, len(queue), msg)
        if status == 200:
            cp = open_checkpoint(note, verifiers).checkpoint
            lines = "".join(
                line for line in text.splitlines(keepends=True) if line.startswith(SIG_PREFIX)
            )
            try:
                merged = add_cosignature_lines(note, lines)
                if not any(c.witness == w.name for c in cosignatures(merged, [w.key])):
                    raise ProofError(f"the answer holds no cosignature by {w.key}")
            except (DecodeError, ProofError) as e:
                msg = f"witness {w.name} answered 200 without a valid cosignature: {e}"
                _record(store, w.name, branch, known, msg)
                return Submission(w.name, branch, "refused", last_size, len(queue), msg)
            _keep_cosignatures(store, b.no, size, lines)
            known = last_size = cp.size
            _record(store, w.name, branch, known, None)
            done += 1
            queue.pop(0)
            conflicts = 0
            continue
        theirs = _size_answer(status, ctype, text)
        if theirs is not None:
            conflicts += 1
            if theirs > b.size:
                msg = (
                    f"witness {w.name} has cosigned a tree of size {theirs} for "
                    f"{_origin(ledger, branch)}, but this ledger has only {b.size} entries: "
                    "it was rolled back, or another copy of it signed more"
                )
                _record(store, w.name, branch, known, msg)
                return Submission(w.name, branch, "conflict", last_size, len(queue), msg)
            if theirs != old and conflicts <= 2:
                known = theirs
                _record(store, w.name, branch, known, None)
                continue
        msg = f"witness {w.name} refused the checkpoint of size {size}: HTTP {status} {text[:200]}"
        kind = "conflict" if status in (409, 422) else "refused"
        _record(store, w.name, branch, known, msg)
        return Submission(w.name, branch, kind, last_size, len(queue), msg)
    return Submission(w.name, branch, "cosigned", last_size, 0, f"{done} checkpoint(s) cosigned")


def _size_answer(status: int, ctype: str, text: str) -> int | None:
    """Return the size a 409 ``text/x.tlog.size`` answer names, or None for any other answer."""
    if status != 409 or SIZE_CONTENT_TYPE not in ctype:
        return None
    try:
        return parse_size_body(text)
    except DecodeError:
        return None


def _origin(ledger: Ledger, branch: str) -> str:
    return ledger.origin if branch == CANONICAL_BRANCH else f"{ledger.origin}/branch/{branch}"


def submit(
    ledger: Ledger, *, names: Sequence[str] = (), timeout: float = _TIMEOUT
) -> list[Submission]:
    """Submit every pending checkpoint to every configured witness (or those in ``names``).

    For each witness and branch, the checkpoints newer than what the witness cosigned are
    sent oldest first, each with a consistency proof from the witness's size; each
    cosignature is verified and appended to the stored note. A 409 naming another size is
    followed once (the witness knew more than this ledger recorded).

    Raises:
        NotFoundError: if ``names`` holds a witness that is not configured.
        StorageError: if the ledger cannot be read or written.

    """
    configured = list_witnesses(ledger.store)
    missing = set(names) - {w.name for w in configured}
    if missing:
        raise NotFoundError(f"no witness named {sorted(missing)[0]!r} is configured")
    out: list[Submission] = []
    for w in configured:
        if names and w.name not in names:
            continue
        for branch in w.branches:
            try:
                out.append(_submit_branch(ledger, w, branch, timeout))
            except NotFoundError as e:
                out.append(Submission(w.name, branch, "refused", None, 0, str(e)))
    return out


def after_commit(ledger: Ledger) -> list[Submission]:
    """Submit every pending checkpoint and publish tiles, after a commit that signed one.

    What the ledger's commit observer (``COMMIT_OBSERVER``) does after every append
    transaction that sealed a checkpoint (and ``after_checkpoint``'s first half). Never
    raises for a witness or publication problem: it warns with a ``WitnessWarning``. When no
    witness and no publication is configured it reads nothing: both answers are cached per
    connection under the ``data_version`` the committed transaction read
    (``Store.committed_version``), so another process's ``memroot witness add`` or
    ``publish --every-checkpoint`` is seen at the next commit after it (and this
    connection's own at once: they forget the cached answers).
    """
    out: list[Submission] = []
    version = ledger.store.committed_version
    try:
        if _has_tables(ledger.store, version):
            out = submit(ledger)
    except MemrootError as e:
        warnings.warn(WitnessWarning(f"witness submission failed: {e}"), stacklevel=2)
    for s in out:
        if not s.ok:
            warnings.warn(
                WitnessWarning(
                    f"{s.message} ({s.pending} checkpoint(s) of {s.branch!r} pending; they are "
                    "kept and retried: `memroot witness submit`)"
                ),
                stacklevel=2,
            )
    try:
        from memroot.ledger.transparency.tiles import publish_configured

        publish_configured(ledger, version)
    except MemrootError as e:
        warnings.warn(WitnessWarning(f"publishing tiles failed: {e}"), stacklevel=2)
    return out


def after_checkpoint(ledger: Ledger, signed: SignedCheckpoint) -> SignedCheckpoint:
    """Submit what is pending and publish tiles, after checkpoint ``signed`` was committed.

    What the commit observer does after ``Ledger.checkpoint`` signs a checkpoint; returns the
    checkpoint with the cosignatures it gathered. It never raises for a witness or
    publication problem (the checkpoint is committed and stays; the problem is recorded and
    retried later) but warns with a ``WitnessWarning`` naming the witness and the error.
    """
    out = after_commit(ledger)
    if not out:
        return signed
    try:
        b = ledger.store.branch(_branch_of(ledger, signed.checkpoint.origin))
        note = checkpoint_at(ledger.store, b.no, signed.checkpoint.size)
    except MemrootError:
        return signed
    if note is None or note == signed.note:
        return signed
    return SignedCheckpoint(signed.checkpoint, note, signed.signer_names)


class _Transparency:
    """The ledger's default commit observer: the witnesses and the tiles directory."""

    def committed(self, ledger: Ledger) -> None:
        """Submit what is pending and publish tiles (``after_commit``)."""
        after_commit(ledger)

    def checkpointed(self, ledger: Ledger, signed: SignedCheckpoint) -> SignedCheckpoint:
        """Return ``signed`` with the cosignatures gathered (``after_checkpoint``)."""
        return after_checkpoint(ledger, signed)


COMMIT_OBSERVER: Final = _Transparency()
"""What ``memroot.ledger.ledger.DEFAULT_OBSERVERS`` names: every ledger registers it."""


class _CosignedFloor:
    """The ledger's default append check: never append onto a head a witness outgrew."""

    def check_head(self, ledger: Ledger, row: BranchRow) -> None:
        """Refuse to append onto a head smaller than a size a configured witness cosigned.

        ``witness_state`` records, per witness and branch, the newest size the witness
        cosigned (or said it holds); a head below it was rolled back, and appending onto it
        would fork the history the witness vouched for. Inside the write transaction (its
        locked state); with no witness ever configured it reads nothing (``_has_tables``,
        under the ``data_version`` the transaction holds).

        Raises:
            IntegrityError: step 10, naming the branch, the cosigned size and the head's.
        """
        store = ledger.store
        if not _has_tables(store, store.data_version()):
            return
        got = store.db.execute(
            "SELECT max(s.size) FROM witness_state s JOIN witnesses w ON w.name = s.witness "
            "WHERE s.branch = ?",
            (row.name,),
        ).fetchone()
        cosigned = None if got is None or got[0] is None else int(got[0])
        if cosigned is not None and cosigned > row.size:
            raise IntegrityError(
                f"rollback: a witness cosigned {cosigned} entries of branch {row.name!r}, the "
                f"ledger has {row.size}: it was rolled back (or truncated); nothing was "
                "written. Restore the newest copy, or run `memroot verify`",
                branch=row.name,
                seq=row.size,
                step=10,
                expected=str(cosigned),
                actual=str(row.size),
            )


APPEND_CHECK: Final = _CosignedFloor()
"""What ``memroot.ledger.ledger.DEFAULT_APPEND_CHECKS`` names: every ledger runs it."""


def _branch_of(ledger: Ledger, origin: str) -> str:
    prefix = f"{ledger.origin}/branch/"
    return origin[len(prefix) :] if origin.startswith(prefix) else CANONICAL_BRANCH


def witness_status(ledger: Ledger) -> list[dict[str, Any]]:
    """Return, per witness and branch, its URL, cosigned size, pending count and last error."""
    out: list[dict[str, Any]] = []
    for w in list_witnesses(ledger.store):
        for branch in w.branches:
            try:
                b = ledger.store.branch(branch)
            except NotFoundError:
                continue
            known = _state(ledger.store, w.name, branch)
            with ledger.store.read() as db:
                row = db.execute(
                    "SELECT attempts, error, tried FROM witness_state "
                    "WHERE witness = ? AND branch = ?",
                    (w.name, branch),
                ).fetchone()
            pending = count_after(ledger.store, b.no, -1 if known is None else known)
            out.append(
                {
                    "witness": w.name,
                    "url": w.url,
                    "vkey": w.key.vkey(),
                    "branch": branch,
                    "cosigned_size": known,
                    "pending": pending,
                    "failed_attempts": int(row[0]) if row else 0,
                    "last_error": row[1] if row else None,
                    "last_try": row[2] if row else None,
                }
            )
    return out


# --------------------------------------------------------------------------- auditor side


class CheckpointSource(Protocol):
    """What the cosignature check reads: a ledger store, a bundle or a tiles directory."""

    def branch(self, name: str) -> BranchLike:
        """Return one branch by name."""

    def checkpoints(self, branch_no: int) -> list[tuple[int, bytes, str]]:
        """Return ``(size, root, note)`` of every checkpoint of a branch, by size."""


def fetch_latest(url: str, origin: str, timeout: float = _TIMEOUT) -> str | None:
    """Ask a memroot witness for the newest checkpoint it cosigned for ``origin``.

    ``GET <url>/checkpoint?origin=<origin>`` (a memroot extension: C2SP tlog-witness leaves
    monitor retrieval to be designed). Returns the cosigned note, or None on 404 (the
    witness never cosigned this origin). Nothing is verified here.

    Raises:
        StorageError: if the witness cannot be reached or answers anything else.

    """
    import urllib.error
    import urllib.request

    target = _check_url(url) + "/checkpoint?" + urllib.parse.urlencode({"origin": origin})
    try:
        with urllib.request.urlopen(target, timeout=timeout) as response:
            return str(response.read(MAX_REQUEST).decode("utf-8"))
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise StorageError(f"witness {url} answered HTTP {e.code} for {origin!r}") from e
    except (urllib.error.URLError, OSError, UnicodeDecodeError) as e:
        raise StorageError(f"witness {url} cannot be reached: {getattr(e, 'reason', e)}") from e


def check_cosignatures(
    source: CheckpointSource,
    origin: str,
    keys: Sequence[WitnessKey],
    quorum: int,
    report: AuditReport,
) -> None:
    """(6): the newest checkpoint of ``main`` carries ``quorum`` valid witness cosignatures.

    Every cosignature line by a given witness key on any stored checkpoint must verify (a
    step 6 violation otherwise). The report's ``trusted["witnesses"]`` says how many
    checkpoints each key cosigned and the newest cosigned size.
    """
    from memroot.ledger.verify import Finding

    facts: dict[str, Any] = {"keys": [str(k) for k in keys], "quorum": quorum}
    try:
        b = source.branch(CANONICAL_BRANCH)
        stored = source.checkpoints(b.no)
    except MemrootError as e:
        report.add(Finding(6, f"checkpoints cannot be read for witness checks: {e}"))
        return
    newest_ok: int | None = None
    per_key = {str(k): 0 for k in keys}
    last: list[Cosignature] = []
    for size, _root, note in stored:
        try:
            found = cosignatures(note, keys)
        except (DecodeError, ProofError) as e:
            report.add(Finding(6, f"checkpoint at size {size}: {e}", CANONICAL_BRANCH, size - 1))
            found = []
        for c in found:
            per_key[f"{c.witness}+{c.key_id.hex()}"] += 1
        if len(found) >= quorum:
            newest_ok = size
        last = found
    facts["cosigned"] = per_key
    facts["newest_cosigned_size"] = newest_ok
    report.trusted["witnesses"] = facts
    if not stored:
        report.add(Finding(6, "no checkpoint to check for witness cosignatures", CANONICAL_BRANCH))
        return
    size = stored[-1][0]
    if len(last) < quorum:
        report.add(
            Finding(
                6,
                f"the newest checkpoint (size {size}) of {origin} carries {len(last)} valid "
                f"witness cosignature(s), {quorum} required (newest cosigned size: "
                f"{newest_ok}); run `memroot witness submit` on the ledger",
                CANONICAL_BRANCH,
                size - 1 if size else None,
                expected=str(quorum),
                actual=str(len(last)),
            )
        )


def witnessed_trust(
    urls: Sequence[str],
    origins: Sequence[str],
    log_vkeys: Sequence[str],
    keys: Sequence[WitnessKey],
    timeout: float = _TIMEOUT,
) -> tuple[dict[str, tuple[int, bytes, str, str]], list[str]]:
    """Ask every witness for its newest cosigned checkpoint of each origin.

    Returns ``{origin: (size, root, note, witness url)}`` with the largest size any witness
    vouches for, and notes (origins a witness never cosigned). A witness's answer counts
    only if the log's signature verifies with ``log_vkeys`` and a cosignature by one of
    ``keys`` verifies.

    Raises:
        StorageError: if a witness cannot be reached.
        IntegrityError: if a witness's answer does not verify (its checkpoint or its
            cosignature), or names another origin.

    """
    verifiers = [Verifier.from_vkey(k) for k in log_vkeys]
    best: dict[str, tuple[int, bytes, str, str]] = {}
    notes: list[str] = []
    for url in urls:
        for origin in origins:
            note = fetch_latest(url, origin, timeout)
            if note is None:
                notes.append(f"witness {url} has cosigned no checkpoint of {origin}")
                continue
            try:
                cp = open_checkpoint(note, verifiers, origin=origin).checkpoint
                if not cosignatures(note, keys):
                    raise ProofError("it carries no cosignature by a given witness key")
            except (DecodeError, ProofError) as e:
                raise IntegrityError(
                    f"witness {url}'s newest checkpoint of {origin} does not verify: {e}",
                    step=10,
                ) from e
            if origin not in best or cp.size > best[origin][0]:
                best[origin] = (cp.size, cp.root, note, url)
    return best, notes
