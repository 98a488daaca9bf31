"""Ed25519 signing keys for checkpoints: the only module that imports ``cryptography``.

SPEC "Normative formats" 5: checkpoints are C2SP ``signed-note`` notes signed with Ed25519.
This module owns the key material and the raw signature primitive; ``memroot.ledger.note`` owns the
note, vkey, checkpoint and proof text formats and calls :func:`verify_signature` and a
:class:`Signer` for the cryptography.

With the native core, an ``Ed25519Signer`` signs with a native copy of its key and a signer's
check of its own signature (:func:`check_own_signature`) runs natively: every commit signs its
seal, and OpenSSL's Ed25519 was most of a durable append's CPU time. RFC 8032 signatures are
deterministic, so both sign the same bytes. Opening notes (:func:`verify_signature`) always
uses ``cryptography``, so what verifies does not depend on the backend.

A signing key is stored in the private key format of Go's ``golang.org/x/mod/sumdb/note``,
so the same file works with the Go tooling (``note.NewSigner``)::

    PRIVATE+KEY+<name>+<hex8 key hash>+<base64(0x01 || 32-byte Ed25519 seed)>

The key hash is the C2SP signed-note key ID, ``SHA-256(name || 0x0A || 0x01 || pubkey)[:4]``.
The private key never appears in a ``repr``, a log line or an error message.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import re
import stat
from pathlib import Path
from typing import Any, NoReturn, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from memroot.ledger._backend import NATIVE as _N
from memroot.ledger._fs import fsync_dir
from memroot.ledger.errors import KeyFileError
from memroot.ledger.hashing import sha256

__all__ = [
    "ALG_ED25519",
    "KEY_ID_SIZE",
    "PUBLIC_KEY_SIZE",
    "SEED_SIZE",
    "SIGNATURE_SIZE",
    "Ed25519Signer",
    "Signer",
    "check_own_signature",
    "is_valid_key_name",
    "key_hash",
    "verify_signature",
]

ALG_ED25519 = 0x01  # C2SP signed-note "Signature types": 0x01 is Ed25519
KEY_ID_SIZE = 4  # C2SP signed-note: a uint32 key ID, big-endian
PUBLIC_KEY_SIZE = 32  # RFC 8032 section 5.1.5
SEED_SIZE = 32  # RFC 8032 section 5.1.5: the private key is a 32-byte seed
SIGNATURE_SIZE = 64  # RFC 8032 section 5.1.6

_PRIVATE_PREFIX = "PRIVATE+KEY+"
_HEX8 = re.compile(r"[0-9a-f]{8}")
# O_NONBLOCK: opening a FIFO planted at the key path must not hang the process.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
# A key file holds one short line; anything much larger is not a key file.
_MAX_KEY_FILE_SIZE = 4096


def is_valid_key_name(name: str) -> bool:
    """Return whether ``name`` is a valid signed-note key name.

    C2SP signed-note: key names are non-empty, valid UTF-8, and contain no Unicode space and
    no ``+``. Control characters are refused too: a signed note may not contain them, so a
    name holding one could never appear on a signature line. (Memoised: every sealed append
    checks the same origin.)
    """
    if not isinstance(name, str):
        return False
    return _valid_key_name(name)


@functools.lru_cache(maxsize=256)
def _valid_key_name(name: str) -> bool:
    if not name or "+" in name:
        return False
    if any(ch.isspace() or ord(ch) < 0x20 for ch in name):
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates are not valid UTF-8
        return False
    return True


def key_hash(name: str, public_key: bytes) -> bytes:
    """Return the 4-byte signed-note key ID of an Ed25519 key.

    C2SP signed-note "Ed25519 signatures":
    ``SHA-256(key name || 0x0A || 0x01 || 32-byte public key)[:4]``.

    Raises:
        ValueError: if ``name`` is not a valid key name or ``public_key`` is not 32 bytes.

    """
    if not is_valid_key_name(name):
        raise ValueError(f"invalid key name {name!r}: need non-empty, no spaces, no '+'")
    if len(public_key) != PUBLIC_KEY_SIZE:
        raise ValueError(f"an Ed25519 public key is {PUBLIC_KEY_SIZE} bytes, got {len(public_key)}")
    return _key_hash(name, bytes(public_key))


@functools.lru_cache(maxsize=256)
def _key_hash(name: str, public_key: bytes) -> bytes:
    data = name.encode("utf-8") + b"\n" + bytes([ALG_ED25519]) + public_key
    return sha256(data)[:KEY_ID_SIZE]


def verify_signature(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Return whether ``signature`` is a valid Ed25519 signature of ``message``.

    Never raises for a bad signature, a wrong-sized signature or a malformed public key:
    every failure is reported as ``False``, so a caller cannot mistake an exception path for
    a pass.

    The accepted set is OpenSSL's. With the native core, the strict RFC 8032 check
    (``check_own_signature``'s: canonical encodings, no small-order key or ``R``, the
    cofactorless equation) is asked first, at about a third of the cost: it accepts only
    signatures OpenSSL accepts too (OpenSSL checks ``S`` canonical and compares the ``R`` it
    computes with the encoded one, which the strict check's equation and encodings imply),
    so a signature it accepts is OpenSSL's; one it refuses is asked of OpenSSL
    (tests/unit/ledger/test_signing_fast.py compares the two on edge cases and random
    mutations).
    """
    if len(public_key) != PUBLIC_KEY_SIZE or len(signature) != SIGNATURE_SIZE:
        return False
    if _N is not None:
        verifier = _native_verifier(bytes(public_key))
        if verifier is not None and verifier.verify_strict(bytes(message), bytes(signature)):
            return True
    return _openssl_verify(public_key, message, signature)


def _openssl_verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """OpenSSL's answer (through ``cryptography``) for sizes already checked; never raises."""
    try:
        _public_key(bytes(public_key)).verify(bytes(signature), bytes(message))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def check_own_signature(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Return whether a signature a signer just made verifies, before it is published.

    The signer's self-check (``note.sign_note``): a faulty signer, or a fault during
    signing, must not put out a note its own vkey cannot open. With the native core the
    check uses the strict rules of RFC 8032 verification (canonical encodings, no
    small-order key or ``R``), which accept a signature only where :func:`verify_signature`
    accepts it too; every signature of a sound key passes both. Without it, this is
    :func:`verify_signature`. Never raises; a failure is ``False``.
    """
    if _N is not None:
        verifier = _native_verifier(bytes(public_key))
        return verifier is not None and verifier.verify_strict(bytes(message), bytes(signature))
    return verify_signature(public_key, message, signature)


@functools.lru_cache(maxsize=64)
def _native_verifier(raw: bytes) -> Any:
    """Return the native verifier of a public key (decoded once), or None if it is not one."""
    assert _N is not None
    try:
        return _N.Ed25519Verifier(raw)
    except _N.Reject:
        return None


@functools.lru_cache(maxsize=64)
def _public_key(raw: bytes) -> Ed25519PublicKey:
    """Return the key object of 32 raw bytes (memoised: a writer checks every seal with one key).

    Raises:
        ValueError: if the bytes are not an Ed25519 public key (not cached then).
    """
    return Ed25519PublicKey.from_public_bytes(raw)


class Signer(Protocol):
    """Anything that signs notes: a key name, its key ID, its public key and ``sign``."""

    @property
    def name(self) -> str:
        """The signed-note key name (usually the log's origin)."""
        ...

    @property
    def key_id(self) -> bytes:
        """The 4-byte signed-note key ID (:func:`key_hash` of name and public key)."""
        ...

    @property
    def public_key(self) -> bytes:
        """The raw 32-byte Ed25519 public key."""
        ...

    def sign(self, message: bytes) -> bytes:
        """Return the 64-byte Ed25519 signature of ``message``."""
        ...


class Ed25519Signer:
    """An Ed25519 signing key with its signed-note name; the private key never leaves it.

    Build one with :meth:`generate`, :meth:`from_seed`, :meth:`from_private_key_text` or
    :meth:`load`; write it with :meth:`save`.
    """

    __slots__ = ("_key", "_key_id", "_name", "_native", "_public_key")

    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        """Wrap ``private_key`` under the key name ``name``.

        Raises:
            ValueError: if ``name`` is not a valid signed-note key name.

        """
        if not is_valid_key_name(name):
            raise ValueError(f"invalid key name {name!r}: need non-empty, no spaces, no '+'")
        self._name = name
        self._key = private_key
        self._public_key = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self._key_id = key_hash(name, self._public_key)
        self._native: Any = None  # the native copy of the key, made at the first native sign

    @classmethod
    def generate(cls, name: str) -> Ed25519Signer:
        """Return a new random key named ``name``.

        Raises:
            ValueError: if ``name`` is not a valid signed-note key name.

        """
        return cls(name, Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, name: str, seed: bytes) -> Ed25519Signer:
        """Return the key with the 32-byte RFC 8032 ``seed`` (deterministic: test vectors).

        Raises:
            ValueError: if ``name`` is invalid or ``seed`` is not 32 bytes.

        """
        if len(seed) != SEED_SIZE:
            raise ValueError(f"an Ed25519 seed is {SEED_SIZE} bytes, got {len(seed)}")
        return cls(name, Ed25519PrivateKey.from_private_bytes(bytes(seed)))

    @classmethod
    def from_private_key_text(cls, text: str) -> Ed25519Signer:
        """Parse ``PRIVATE+KEY+<name>+<hex8>+<base64(0x01 || seed)>`` (Go sumdb/note format).

        The key hash must be 8 lowercase hex digits and match the name and the public key
        derived from the seed. Error messages never include the key material.

        Raises:
            KeyFileError: if the text is malformed or its key hash does not match.

        """
        if not isinstance(text, str) or not text.startswith(_PRIVATE_PREFIX):
            raise KeyFileError("not a private key: it must start with 'PRIVATE+KEY+'")
        parts = text[len(_PRIVATE_PREFIX) :].split("+", 2)
        if len(parts) != 3:
            raise KeyFileError("malformed private key: expected PRIVATE+KEY+<name>+<hash>+<key>")
        name, hash_hex, key64 = parts
        if not is_valid_key_name(name):
            raise KeyFileError(
                f"malformed private key: invalid key name {name!r} (non-empty, no spaces, no '+')"
            )
        if not _HEX8.fullmatch(hash_hex):
            raise KeyFileError("malformed private key: key hash must be 8 lowercase hex digits")
        try:
            raw = base64.b64decode(key64, validate=True)
        except (binascii.Error, ValueError) as e:
            raise KeyFileError("malformed private key: key data is not valid base64") from e
        if base64.b64encode(raw).decode("ascii") != key64:
            raise KeyFileError("malformed private key: key data is not canonical base64")
        if len(raw) != 1 + SEED_SIZE:
            raise KeyFileError(
                f"malformed private key: key data is {len(raw)} bytes, expected {1 + SEED_SIZE}"
            )
        if raw[0] != ALG_ED25519:
            raise KeyFileError(
                f"unsupported private key algorithm 0x{raw[0]:02x}: only 0x01 (Ed25519)"
            )
        signer = cls(name, Ed25519PrivateKey.from_private_bytes(raw[1:]))
        if signer.key_id.hex() != hash_hex:
            raise KeyFileError(
                f"private key hash {hash_hex} does not match the key and name {name!r} "
                f"(computed {signer.key_id.hex()}): the file is corrupt or was edited"
            )
        return signer

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Ed25519Signer:
        """Read a private key file written by :meth:`save` (or Go's note tooling).

        The file must be a regular file that neither group nor others can read or write
        (``chmod 600``); one trailing newline is allowed.

        Raises:
            KeyFileError: if the file is missing, unreadable, not a regular file, too open,
                malformed, or its key hash does not match.

        """
        p = Path(path)
        try:
            fd = os.open(p, _READ_FLAGS)
        except FileNotFoundError as e:
            raise KeyFileError(f"key file {p} does not exist") from e
        except PermissionError as e:
            raise KeyFileError(f"key file {p} is not readable: permission denied") from e
        except OSError as e:
            raise KeyFileError(f"key file {p} cannot be opened: {e.strerror}") from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise KeyFileError(f"key file {p} is not a regular file")
            if os.name == "posix" and st.st_mode & 0o077:
                raise KeyFileError(
                    f"key file {p} is accessible by group or others "
                    f"(mode {stat.S_IMODE(st.st_mode):04o}); refusing to use it: "
                    f"run `chmod 600 {p}`"
                )
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(_MAX_KEY_FILE_SIZE + 1)
        except OSError as e:
            raise KeyFileError(f"key file {p} cannot be read: {e.strerror}") from e
        finally:
            os.close(fd)
        if len(data) > _MAX_KEY_FILE_SIZE:
            raise KeyFileError(f"key file {p} is too large to be a private key file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise KeyFileError(f"key file {p} is malformed: not UTF-8 text") from e
        if text.endswith("\n"):
            text = text[:-1]
        try:
            return cls.from_private_key_text(text)
        except KeyFileError as e:
            raise KeyFileError(f"key file {p}: {e}") from e

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the private key text to a new file ``path`` with mode 0600, atomically.

        The key is written to a temporary file created with ``O_CREAT | O_EXCL`` and mode
        0600 in the same directory, flushed to disk, then hard-linked to ``path``: a link
        never replaces an existing file, and a crash leaves either no key file or a whole one.

        Raises:
            KeyFileError: if ``path`` already exists or the file cannot be written.

        """
        p = Path(path)
        if p.exists() or p.is_symlink():
            raise KeyFileError(f"key file {p} already exists; refusing to overwrite it")
        tmp = p.with_name(f".{p.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(tmp, flags, 0o600)
        except OSError as e:
            raise KeyFileError(f"cannot create key file in {p.parent}: {e.strerror}") from e
        try:
            try:
                os.fchmod(fd, 0o600)  # the umask may only remove bits; make the mode exact
                os.write(fd, (self.private_key_text() + "\n").encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, p)
            except FileExistsError as e:
                raise KeyFileError(f"key file {p} already exists; refusing to overwrite it") from e
            fsync_dir(p.parent)
        except OSError as e:
            raise KeyFileError(f"cannot write key file {p}: {e.strerror}") from e
        finally:
            tmp.unlink(missing_ok=True)

    def private_key_text(self) -> str:
        """Return the secret ``PRIVATE+KEY+...`` text; whoever holds it can sign as this key."""
        key64 = base64.b64encode(bytes([ALG_ED25519]) + self._seed()).decode("ascii")
        return f"{_PRIVATE_PREFIX}{self._name}+{self._key_id.hex()}+{key64}"

    @property
    def name(self) -> str:
        """The signed-note key name."""
        return self._name

    @property
    def key_id(self) -> bytes:
        """The 4-byte signed-note key ID."""
        return self._key_id

    @property
    def public_key(self) -> bytes:
        """The raw 32-byte Ed25519 public key."""
        return self._public_key

    def sign(self, message: bytes) -> bytes:
        """Return the 64-byte Ed25519 signature of ``message`` (RFC 8032, deterministic).

        With the native core the signature is made natively, from a copy of the key that
        stays inside the extension; it is the same 64 bytes (RFC 8032 is deterministic).
        """
        if _N is None:
            return self._key.sign(bytes(message))
        native = self._native
        if native is None:
            native = _N.Ed25519Key(self._seed())
            if native.public_key() != self._public_key:  # pragma: no cover - a broken build
                raise ValueError("the native Ed25519 key does not match the key it was made of")
            self._native = native
        return bytes(native.sign(bytes(message)))

    def _seed(self) -> bytes:
        return self._key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )

    def __repr__(self) -> str:
        return f"Ed25519Signer(name={self._name!r}, key_id={self._key_id.hex()})"

    def __reduce__(self) -> NoReturn:
        # Pickling would copy the private key into whatever stores the pickle.
        raise TypeError("Ed25519Signer cannot be pickled: it holds a private key")
