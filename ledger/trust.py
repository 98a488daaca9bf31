"""The verifier's trusted state: what it accepted before, kept outside the ledger (step 10).

A verifier that remembers the newest checkpoint it accepted for an origin catches an older copy
of the ledger put back in place (a rollback) and a rewritten history, even when the rewriter
holds the signing key. The file is JSON, one record per origin::

    {"version": 1, "logs": {"<origin>": {"vkeys": [...], "size": N, "root": "<base64>",
                                         "note": "<signed checkpoint note>"}}}

Default location: ``$MEMROOT_TRUSTED``, else ``$XDG_STATE_HOME/memroot/trusted.json``, else
``~/.local/state/memroot/trusted.json``. Writes are atomic (temp file, fsync, rename).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memroot.ledger.errors import DecodeError, StorageError

__all__ = ["TrustedLog", "TrustedState", "default_trusted_path"]


def default_trusted_path() -> Path:
    """Return the trusted-state file to use when none is given."""
    env = os.environ.get("MEMROOT_TRUSTED")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(base) / "memroot" / "trusted.json"


@dataclass(frozen=True, slots=True)
class TrustedLog:
    """What a verifier trusts about one log (origin): its keys and newest accepted checkpoint."""

    vkeys: tuple[str, ...]
    size: int
    root: bytes
    note: str

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form of this record."""
        return {
            "vkeys": list(self.vkeys),
            "size": self.size,
            "root": base64.b64encode(self.root).decode(),
            "note": self.note,
        }

    @classmethod
    def from_json(cls, obj: Any, origin: str) -> TrustedLog:
        """Parse one record.

        Raises:
            DecodeError: naming the origin and what is wrong.
        """
        try:
            vkeys = tuple(str(k) for k in obj["vkeys"])
            size = obj["size"]
            root = base64.b64decode(obj["root"], validate=True)
            note = obj["note"]
            if type(size) is not int or size < 0 or len(root) != 32 or type(note) is not str:
                raise ValueError("bad size, root or note")
        except (KeyError, TypeError, ValueError, binascii.Error) as e:
            raise DecodeError(f"trusted state for {origin!r} is malformed: {e}") from e
        return cls(vkeys, size, root, note)


class TrustedState:
    """The trusted-state file, loaded into memory; ``save`` writes it back atomically."""

    def __init__(self, path: Path) -> None:
        """Load ``path`` (an absent file is an empty state).

        Raises:
            DecodeError: if the file exists but is not a trusted-state file.
        """
        self.path = Path(path)
        self.logs: dict[str, TrustedLog] = {}
        if not self.path.exists():
            return
        try:
            raw = json.loads(self.path.read_text("utf-8"))
            if raw.get("version") != 1 or not isinstance(raw.get("logs"), dict):
                raise ValueError("not a memroot trusted-state file (version 1)")
        except (OSError, ValueError, AttributeError) as e:
            raise DecodeError(f"cannot read trusted state {self.path}: {e}") from e
        for origin, obj in raw["logs"].items():
            self.logs[origin] = TrustedLog.from_json(obj, origin)

    def get(self, origin: str) -> TrustedLog | None:
        """Return what is trusted about ``origin``, or None."""
        return self.logs.get(origin)

    def put(self, origin: str, log: TrustedLog) -> None:
        """Record ``log`` for ``origin`` (in memory; call ``save``)."""
        self.logs[origin] = log

    def save(self) -> None:
        """Write the state atomically: a crash leaves the old file or the new one.

        Raises:
            StorageError: if the file cannot be written.
        """
        data = json.dumps(
            {"version": 1, "logs": {o: log.to_json() for o, log in sorted(self.logs.items())}},
            indent=2,
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".trusted-", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as e:
            raise StorageError(f"cannot write trusted state {self.path}: {e}") from e


def record_heads(
    state: TrustedState, heads: list[tuple[str, int, bytes, str]], vkeys: list[str]
) -> None:
    """Advance ``state`` to each checked head ``(origin, size, root, note)`` and save it.

    Only called with heads a strict read checked against the state (so each extends what
    was trusted); a head not larger than the trusted one changes nothing.

    Raises:
        StorageError: if the file cannot be written.
    """
    changed = False
    for origin, size, root, note in heads:
        log = state.get(origin)
        if log is None or size > log.size:
            state.put(origin, TrustedLog(tuple(vkeys), size, root, note))
            changed = True
    if changed:
        state.save()
