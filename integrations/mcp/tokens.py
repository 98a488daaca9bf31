"""Bearer tokens of the MCP HTTP server: each binds one actor and one namespace.

The tokens live in a JSON file beside the ledger, ``LEDGER.mcp-tokens`` (mode 0600; for a
PostgreSQL ledger name one with ``--tokens``). The file holds, per token, its id, actor,
actor type, namespace, creation and revocation times, and the SHA-256 of the token: never the
token itself, which ``add`` returns once. A token is ``mrt_<id>_<secret>`` with 32 random
bytes of secret, so a plain hash is enough (nothing to brute-force). The file is not part of
the ledger (it is access control of one server, not memory), and is rewritten atomically
under an exclusive lock, so concurrent ``add``/``revoke`` never lose a change.

A running server re-reads the file whenever it changed (size, mtime, inode), so ``revoke``
takes effect from the next request. A file that does not parse refuses every token: a
damaged token file never lets anyone in.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from memroot.ledger.errors import NotFoundError, StorageError, ValidationError

__all__ = ["FORMAT", "TokenRecord", "TokenStore", "default_tokens_path"]

FORMAT: Final = "memroot-mcp-tokens/1"
_TOKEN: Final = re.compile(r"mrt_([0-9a-f]{16})_[A-Za-z0-9_-]{43}\Z")
_NAME: Final = re.compile(r"[\x21-\x7e]{1,200}\Z")
ACTOR_TYPES: Final = ("AI_AGENT", "HUMAN_USER", "SYSTEM_PROCESS", "EXTERNAL_CONNECTOR")


def default_tokens_path(ledger: str | os.PathLike[str]) -> Path:
    """Return where the tokens of a ledger file are kept: ``LEDGER.mcp-tokens``."""
    return Path(f"{os.fspath(ledger)}.mcp-tokens")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """One token as stored: who it acts as, and when it was made and revoked (microseconds)."""

    id: str
    actor: str
    actor_type: str
    namespace: str
    sha256: str
    created_at: int
    revoked_at: int | None = None

    def public(self) -> dict[str, Any]:
        """Return the record without its hash (what ``token list`` shows)."""
        out = asdict(self)
        del out["sha256"]
        return out


class TokenStore:
    """The token file of one server; safe to use from several threads and processes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Use the token file at ``path`` (created by the first ``add``)."""
        self.path = Path(path)
        self._mutex = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._records: dict[str, TokenRecord] = {}
        self._damaged: str | None = None

    # -- reading -------------------------------------------------------------------------------

    def _parse(self, data: bytes) -> dict[str, TokenRecord]:
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file")
            out = {}
            for item in doc["tokens"]:
                record = TokenRecord(**item)
                if not re.fullmatch(r"[0-9a-f]{64}", record.sha256):
                    raise ValueError(f"token {record.id}: sha256 is not 64 hex digits")
                out[record.id] = record
            return out
        except (ValueError, KeyError, TypeError) as e:
            raise StorageError(f"the MCP token file {self.path} is damaged: {e}") from None

    def records(self) -> list[TokenRecord]:
        """Return every token record, oldest first.

        Raises:
            StorageError: the file cannot be read or does not parse.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StorageError(f"cannot read the MCP token file {self.path}: {e}") from None
        return sorted(self._parse(data).values(), key=lambda r: (r.created_at, r.id))

    def find(self, token: str) -> TokenRecord | None:
        """Return the unrevoked record of ``token``, or None (never raises).

        Re-reads the file when it changed since the last call; a file that cannot be read
        or parsed finds no token at all (fail closed).
        """
        match = _TOKEN.fullmatch(token)
        if match is None:
            return None
        with self._mutex:
            try:
                st = self.path.stat()
                seen = (st.st_size, st.st_mtime_ns, st.st_ino)
                if seen != self._seen:
                    self._records = {r.id: r for r in self.records()}
                    self._seen, self._damaged = seen, None
            except (OSError, StorageError) as e:
                self._records, self._seen, self._damaged = {}, None, str(e)
            record = self._records.get(match.group(1))
        if record is None or record.revoked_at is not None:
            return None
        if not hmac.compare_digest(record.sha256, _digest(token)):
            return None
        return record

    # -- writing -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[TokenRecord]]:
        """Hold the file's lock; yield its records; write them back when the block ends."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise StorageError(f"cannot lock the MCP token file {self.path}: {e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            records = self.records()
            yield records
            doc = {"format": FORMAT, "tokens": [asdict(r) for r in records]}
            data = json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"
            try:
                tmp_fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name)
                with os.fdopen(tmp_fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp, 0o600)
                os.replace(tmp, self.path)
            except OSError as e:
                raise StorageError(f"cannot write the MCP token file {self.path}: {e}") from None
        finally:
            os.close(fd)

    def add(
        self, actor: str, namespace: str, actor_type: str = "AI_AGENT"
    ) -> tuple[str, TokenRecord]:
        """Make a token for ``actor`` in ``namespace``; return it (shown once) and its record.

        Raises:
            ValidationError: a bad actor, actor type or namespace.
            StorageError: the token file cannot be read or written.
        """
        for field, value in (("actor", actor), ("namespace", namespace)):
            if not isinstance(value, str) or not _NAME.match(value):
                raise ValidationError(
                    f"{field} must be 1-200 printable characters without spaces", field=field
                )
        if actor_type not in ACTOR_TYPES:
            raise ValidationError(
                f"actor type {actor_type!r} is not one of {', '.join(ACTOR_TYPES)}",
                field="actor_type",
            )
        token_id = secrets.token_hex(8)
        token = f"mrt_{token_id}_{secrets.token_urlsafe(32)}"
        record = TokenRecord(
            token_id, actor, actor_type, namespace, _digest(token), time.time_ns() // 1000
        )
        with self._locked() as records:
            records.append(record)
        return token, record

    def revoke(self, token_id: str) -> TokenRecord:
        """Revoke a token by id (from the next request on); return its record.

        Raises:
            NotFoundError: no token with that id.
            StorageError: the token file cannot be read or written.
        """
        with self._locked() as records:
            for i, r in enumerate(records):
                if r.id == token_id:
                    if r.revoked_at is None:
                        records[i] = TokenRecord(
                            **{**asdict(r), "revoked_at": time.time_ns() // 1000}
                        )
                    return records[i]
            raise NotFoundError(f"no MCP token {token_id!r} in {self.path}")
