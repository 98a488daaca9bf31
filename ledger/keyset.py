"""The key set of a ledger: one root key, writer keys it authorizes (docs/FORMAT.md 7.3, 7.5).

The genesis key is the ledger's **root key**; ``KEY_ROTATE`` replaces it (7.3). The root key
authorizes **writer keys** with ``KEY_ADD`` and withdraws them with ``KEY_REVOKE``, entries on
``main`` that carry the root key's Ed25519 signature over an *authority statement*: the
canonical CBOR map ``authority_statement`` builds, bound to the log (origin), to the entry's
position (seq and prev, so a statement cannot be replayed elsewhere) and to what it does.
So anyone holding the root vkey can check, from the log alone, which writer keys may sign
checkpoints of which sizes.

``KeySet`` folds the key entries of ``main`` in order into that state (pure: no store, no
I/O); the append path, strict reads, ``memroot key list`` and ``memroot vkey --all`` use it,
and verify's step 6 applies the same statements (``check_statement``) checkpoint by
checkpoint. Writer keys are named like the root key (the log's origin, so a branch
checkpoint signs under ``O/branch/B`` as the root does, FORMAT.md 5); the ``name`` in the
entries (``host-b``) is the operator's label.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

from memroot.ledger import encoding
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind
from memroot.ledger.errors import DecodeError, ProofError
from memroot.ledger.note import Verifier, open_checkpoint
from memroot.ledger.signing import Signer
from memroot.ledger.vocab import OpType

__all__ = [
    "KEY_ENTRIES_META",
    "KEY_ENTRY_TYPES",
    "KEY_STATEMENT_CONTEXT",
    "ROTATED_VKEYS_META",
    "KeyEntryError",
    "KeySet",
    "RootKey",
    "WriterKey",
    "authority_statement",
    "check_new_writer",
    "check_statement",
    "load_key_set",
    "parse_key_entries",
    "sign_statement",
    "valid_key_name",
    "writer_in_force",
]

KEY_STATEMENT_CONTEXT: Final = "memroot/key-authority/v1"
"""The ``ctx`` of every authority statement: domain separation from every other signature."""

KEY_ENTRY_TYPES: Final = frozenset(
    {OpType.KEY_ROTATE.value, OpType.KEY_ADD.value, OpType.KEY_REVOKE.value}
)
"""The operation types that change the key set (on ``main`` only)."""

ROOT_NAME: Final = "root"
"""The label ``key list`` gives the root key; no writer key may take it."""

_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


class KeyEntryError(ValueError):
    """A key entry that does not follow the rules (the message says which and why)."""


def valid_key_name(name: object) -> bool:
    """Return whether ``name`` may label a writer key (as a branch name; not ``root``)."""
    return isinstance(name, str) and bool(_NAME_RE.match(name)) and name != ROOT_NAME


def authority_statement(
    *,
    origin: str,
    seq: int,
    prev: bytes,
    op_type: str,
    name: str,
    vkey: str,
    branches: dict[str, int] | None = None,
) -> bytes:
    """Return the canonical CBOR bytes the root key signs for a ``KEY_ADD`` / ``KEY_REVOKE``.

    The map ``{ctx, origin, seq, prev, type, name, vkey}`` (plus ``branches`` for a revoke:
    the size of every branch when the key was revoked), encoded per FORMAT.md 1.
    """
    statement: dict[str, Any] = {
        "ctx": KEY_STATEMENT_CONTEXT,
        "origin": origin,
        "seq": seq,
        "prev": bytes(prev),
        "type": op_type,
        "name": name,
        "vkey": vkey,
    }
    if branches is not None:
        statement["branches"] = dict(branches)
    return encoding.encode(statement)


def sign_statement(root: Signer, statement: bytes) -> str:
    """Return the root key's signature of ``statement``, base64 (the payload's ``sig``)."""
    return base64.b64encode(root.sign(statement)).decode("ascii")


def check_statement(
    payload: object, *, op_type: str, origin: str, seq: int, prev: bytes, root: Verifier
) -> None:
    """Check a ``KEY_ADD`` / ``KEY_REVOKE`` payload's shape and its root signature.

    Raises:
        KeyEntryError: naming what is wrong (shape, root key, signature).
    """
    if not isinstance(payload, dict):
        raise KeyEntryError("its payload is not a map")
    name, vkey, root_vkey, sig = (payload.get(k) for k in ("name", "vkey", "root_vkey", "sig"))
    if not valid_key_name(name):
        raise KeyEntryError(f"its name {name!r} is not a valid writer key name")
    if not isinstance(vkey, str) or not isinstance(sig, str):
        raise KeyEntryError("its vkey and sig must be text")
    branches = payload.get("branches")
    if op_type == OpType.KEY_REVOKE.value:
        if not isinstance(branches, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in branches.items()
        ):
            raise KeyEntryError("a KEY_REVOKE needs branches: a map of branch name to size")
    elif branches is not None:
        raise KeyEntryError("a KEY_ADD has no branches")
    if root_vkey != root.vkey():
        raise KeyEntryError(
            f"it names root key {root_vkey!r}, but the root key at entry {seq} is {root.vkey()}"
        )
    try:
        raw = base64.b64decode(sig, validate=True)
    except (binascii.Error, ValueError) as e:
        raise KeyEntryError("its sig is not base64") from e
    statement = authority_statement(
        origin=origin,
        seq=seq,
        prev=prev,
        op_type=op_type,
        name=str(name),
        vkey=vkey,
        branches=branches if isinstance(branches, dict) else None,
    )
    if len(raw) != 64 or not root.verify(statement, raw):
        raise KeyEntryError(f"its sig is not the root key's signature of its statement (seq {seq})")


def check_new_writer(
    origin: str,
    writers: dict[str, WriterKey],
    root_vkeys: set[str],
    seq: int,
    name: str,
    vkey: str,
) -> Verifier:
    """Check what a ``KEY_ADD`` at ``seq`` adds against the keys the log already has.

    The one rule for the key itself, which strict reads (``KeySet.apply``) and verify's step 6
    both apply after ``check_statement``: the vkey parses, is named after the log, and is not
    already a key of the log (a root key in ``root_vkeys`` or a writer key); the name is free.
    Returns the new key's verifier.

    Raises:
        KeyEntryError: naming the rule broken.
    """
    try:
        v = Verifier.from_vkey(vkey)
    except DecodeError as e:
        raise KeyEntryError(f"KEY_ADD at entry {seq}: vkey: {e}") from e
    if v.name != origin:
        raise KeyEntryError(
            f"KEY_ADD at entry {seq}: a writer key is named after the log ({origin!r})"
            f", not {v.name!r}"
        )
    if name in writers:
        raise KeyEntryError(
            f"KEY_ADD at entry {seq}: the name {name!r} is taken (entry {writers[name].added_by})"
        )
    if vkey in root_vkeys or vkey in {w.vkey for w in writers.values()}:
        raise KeyEntryError(f"KEY_ADD at entry {seq}: the key is already a key of this log")
    return v


def writer_in_force(writers: dict[str, WriterKey], seq: int, name: str, vkey: str) -> WriterKey:
    """Return the writer key a ``KEY_REVOKE`` at ``seq`` withdraws: named, same vkey, in force.

    Raises:
        KeyEntryError: if ``name`` is not a writer key in force with that vkey.
    """
    w = writers.get(name)
    if w is None or w.vkey != vkey or w.revoked_by is not None:
        raise KeyEntryError(f"KEY_REVOKE at entry {seq} names {name!r}, not a writer key in force")
    return w


@dataclass(slots=True)
class RootKey:
    """A root key: the genesis key or one a ``KEY_ROTATE`` installed."""

    vkey: str
    since: int  # seq of the KEY_ROTATE that installed it (0: the genesis)
    retired_by: int | None = None  # seq of the KEY_ROTATE that retired it
    branches: dict[str, int] | None = None  # branch sizes at that rotation (None: not recorded)


@dataclass(slots=True)
class WriterKey:
    """A writer key: authorized by a ``KEY_ADD``, perhaps withdrawn by a ``KEY_REVOKE``."""

    name: str
    vkey: str
    added_by: int  # seq of the KEY_ADD
    revoked_by: int | None = None  # seq of the KEY_REVOKE
    branches: dict[str, int] = field(default_factory=dict)  # branch sizes at the revoke

    def may_sign(self, branch: str, size: int) -> bool:
        """Whether this key may sign ``branch``'s checkpoint of ``size`` (FORMAT.md 7.5).

        On ``main``: a size above its ``KEY_ADD`` and, once revoked, not above its
        ``KEY_REVOKE``. On another branch: any size, once revoked up to the branch's size the
        revoke recorded. The one rule strict reads (``KeySet.signers_at``) and verify's step 6
        apply.
        """
        if branch == CANONICAL_BRANCH:
            return self.added_by < size and (self.revoked_by is None or size <= self.revoked_by)
        return self.revoked_by is None or size <= self.branches.get(branch, 0)

    def revoke(self, seq: int, branches: Any) -> None:
        """Withdraw this key at ``KEY_REVOKE`` entry ``seq``, with the branch sizes it records."""
        self.revoked_by = seq
        self.branches = {str(k): int(v) for k, v in branches.items()}

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form ``memroot key list --json`` prints."""
        return {
            "name": self.name,
            "vkey": self.vkey,
            "valid_from_size": self.added_by + 1,
            "revoked_at_entry": self.revoked_by,
            "revoked_at_size": None if self.revoked_by is None else self.revoked_by + 1,
            "max_size": self.revoked_by,
        }


@dataclass(slots=True)
class KeySet:
    """The key set the key entries of ``main`` define, folded in seq order.

    ``KeySet.start(genesis_vkey)``, then ``apply`` each key entry. Rotations are taken as
    signed off (the reader of the entries proved them; verify's step 6 checks the sign-off).
    """

    origin: str
    roots: list[RootKey]
    writers: dict[str, WriterKey] = field(default_factory=dict)
    last: int = 0  # seq of the newest key entry applied (0: none but the genesis)

    @classmethod
    def start(cls, origin: str, genesis_vkey: str) -> KeySet:
        """Return the key set of a ledger with no key entry: its genesis key is the root."""
        return cls(origin, [RootKey(genesis_vkey, 0)])

    @property
    def root(self) -> str:
        """The root key in force (after every rotation applied)."""
        return self.roots[-1].vkey

    def root_verifier(self) -> Verifier:
        """Return the root key in force, as a verifier.

        Raises:
            DecodeError: if the stored vkey is malformed.
        """
        return Verifier.from_vkey(self.root)

    def apply(self, seq: int, prev: bytes, op_type: str, payload: object) -> None:
        """Fold one key entry of ``main`` at ``seq`` (its ``prev`` and payload).

        Raises:
            KeyEntryError: if it breaks the rules (then nothing changes).
        """
        if seq <= self.last and self.last:
            raise KeyEntryError(f"key entry {seq} is not after key entry {self.last}")
        if op_type == OpType.KEY_ROTATE.value:
            if not isinstance(payload, dict) or payload.get("old_vkey") != self.root:
                raise KeyEntryError(
                    f"KEY_ROTATE at entry {seq} does not retire the root key in force"
                )
            new = payload.get("new_vkey")
            try:
                Verifier.from_vkey(new if isinstance(new, str) else "")
            except DecodeError as e:
                raise KeyEntryError(f"KEY_ROTATE at entry {seq}: new_vkey: {e}") from e
            branches = payload.get("branches")
            self.roots[-1].retired_by = seq
            self.roots[-1].branches = dict(branches) if isinstance(branches, dict) else None
            self.roots.append(RootKey(str(new), seq))
        elif op_type in (OpType.KEY_ADD.value, OpType.KEY_REVOKE.value):
            try:
                root = self.root_verifier()
            except DecodeError as e:
                raise KeyEntryError(f"the root key is malformed: {e}") from e
            check_statement(
                payload, op_type=op_type, origin=self.origin, seq=seq, prev=prev, root=root
            )
            assert isinstance(payload, dict)
            name, vkey = str(payload["name"]), str(payload["vkey"])
            if op_type == OpType.KEY_ADD.value:
                known = {r.vkey for r in self.roots}
                check_new_writer(self.origin, self.writers, known, seq, name, vkey)
                self.writers[name] = WriterKey(name, vkey, seq)
            else:
                writer_in_force(self.writers, seq, name, vkey).revoke(seq, payload["branches"])
        else:
            raise KeyEntryError(f"{op_type} is not a key entry")
        self.last = seq

    # -- what a key may sign --------------------------------------------------------------------

    def status(self, vkey: str) -> tuple[str, int | None]:
        """Return ``(state, seq)`` of a key now.

        ``root`` (seq of the rotation that installed it, 0 for the genesis), ``writer`` (of its
        KEY_ADD), ``retired`` (of the rotation), ``revoked`` (of the revoke) or ``unknown``.
        """
        if vkey == self.root:
            return "root", self.roots[-1].since
        for r in self.roots[:-1]:
            if r.vkey == vkey:
                return "retired", r.retired_by
        for w in self.writers.values():
            if w.vkey == vkey:
                return ("writer", w.added_by) if w.revoked_by is None else ("revoked", w.revoked_by)
        return "unknown", None

    def signers_at(self, branch: str, size: int) -> list[str]:
        """Return the vkeys that may sign ``branch``'s checkpoint of ``size`` (FORMAT.md 7.5).

        On ``main``: the root in force at ``size``, and every writer key added at an entry
        below ``size`` and not revoked at an entry below ``size``. On another branch: every
        root key, a retired one up to the branch's size recorded by its rotation (any size
        when the rotation predates the record), and every writer key, a revoked one up to
        the branch's size its revoke recorded.
        """
        if branch == CANONICAL_BRANCH:
            # A retired root signs up to its sign-off: the rotation's own seal (size
            # retired_by + 1), as the verifier's rule (7.3) accepts.
            roots = [
                r.vkey
                for r in self.roots
                if (r.since < size or (r.since == 0 and size <= 1))
                and (r.retired_by is None or size <= r.retired_by + 1)
            ]
        else:
            roots = [
                r.vkey
                for r in self.roots
                if r.retired_by is None or r.branches is None or size <= r.branches.get(branch, 0)
            ]
        return roots + [w.vkey for w in self.writers.values() if w.may_sign(branch, size)]


# -- the key set as a ledger's store holds it ------------------------------------------------

KEY_ENTRIES_META: Final = "key_entries"
"""Store meta key: JSON list of the seqs of ``main``'s key entries, oldest first.

A cache, never an authority: written in the transaction that appends a key entry (and by
``import-bundle``), read to find the entries without scanning ``main``; each listed entry is
read and folded (``load_key_set``), strict reads prove each one in the signed tree, and
verify compares the list with the entries it scanned (step 5).
"""

ROTATED_VKEYS_META: Final = "rotated_vkeys"
"""Store meta key (ledgers before writer keys): JSON list of the vkeys KEY_ROTATEs named."""


def parse_key_entries(raw: object) -> list[int] | None:
    """Return the cached seq list, or None when absent or malformed (then scan)."""
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in value
    ):
        return None
    return [int(s) for s in value]


def load_key_set(store: Any, origin: str) -> tuple[KeySet, list[int]]:
    """Fold ``main``'s key entries from ``store`` (a ``Store`` or ``PgStore``) into a key set.

    The entries are found through the cache (``KEY_ENTRIES_META``); a ledger without it
    (written before writer keys, or imported) is scanned once if it has any rotation
    (``ROTATED_VKEYS_META``), else it has none. Each entry is read from the store and must
    be a key entry on ``main`` at its seq.

    Raises:
        KeyEntryError: if a listed entry is not a key entry or breaks the rules.
        DecodeError: if an entry does not decode.
    """
    main = store.branch("main")
    genesis = Entry.from_bytes(bytes(store.entry_row(main.no, 0).data))
    keys = genesis.body.get("keys")
    if not isinstance(keys, list) or not keys or not isinstance(keys[0], str):
        raise KeyEntryError("the genesis entry lists no key")
    ks = KeySet.start(origin, keys[0])
    seqs = parse_key_entries(store.meta(KEY_ENTRIES_META))
    if seqs is None:
        if store.meta(ROTATED_VKEYS_META) is None:
            return ks, []
        found: list[Entry] = []
        for row in store.iter_entry_rows(main.no, 1, None):
            e = Entry.from_bytes(bytes(row.data))
            if e.kind is Kind.OP and e.type in KEY_ENTRY_TYPES:
                found.append(e)
        entries = found
    else:
        entries = []
        for seq in seqs:
            if seq >= main.size:
                raise KeyEntryError(f"the key cache lists entry {seq}, past the end of main")
            entries.append(Entry.from_bytes(bytes(store.entry_row(main.no, seq).data)))
    signoffs: list[tuple[int, str]] | None = None
    for e in entries:
        if e.kind is not Kind.OP or e.type not in KEY_ENTRY_TYPES or e.branch != "main":
            raise KeyEntryError(f"the key cache lists entry {e.seq}, which is no key entry")
        if e.type == OpType.KEY_ROTATE.value:
            # As step 6 (FORMAT.md 7.3): the first checkpoint covering the rotation must be
            # signed by the root key it retires. None yet (its own transaction, before the
            # seal): it is pending, and so is everything after it.
            if signoffs is None:
                signoffs = [(int(size), str(note)) for size, _, note in store.checkpoints(main.no)]
            after = [(size, n) for size, n in signoffs if size > e.seq]
            note = min(after)[1] if after else None
            if note is None:
                break
            try:
                open_checkpoint(note, [ks.root_verifier()], origin=origin)
            except (DecodeError, ProofError) as err:
                raise KeyEntryError(
                    f"KEY_ROTATE at entry {e.seq} was not signed off by the root key it retires"
                ) from err
        ks.apply(e.seq, bytes(e.prev), str(e.type), e.body.get("payload"))
    return ks, [e.seq for e in entries]
