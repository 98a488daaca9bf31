"""The key set as ``memroot key list`` and ``memroot vkey --all`` print it (docs/FORMAT.md 7.5)."""

from __future__ import annotations

from typing import Any

from memroot.ledger.keys import list_keys
from memroot.ledger.ledger import Ledger

__all__ = ["human_rows", "key_rows"]


def key_rows(ledger: Ledger) -> list[dict[str, Any]]:
    """Every key of the ledger, root keys first, as ``key list`` and ``vkey --all`` print."""
    ks, writers = list_keys(ledger)
    rows: list[dict[str, Any]] = []
    for r in ks.roots:
        rows.append(
            {
                "name": "root",
                "role": "root",
                "vkey": r.vkey,
                "valid_from_size": 1 if r.since == 0 else r.since + 2,
                "retired_at_entry": r.retired_by,
                "max_size": None if r.retired_by is None else r.retired_by + 1,
                "revoked_at_entry": None,
            }
        )
    for w in writers:
        rows.append({**w.to_dict(), "role": "writer"})
    return rows


def human_rows(rows: list[dict[str, Any]]) -> str:
    """Render the rows as text: one key a line, with its range of main sizes."""
    out = []
    for r in rows:
        upto = "" if r["max_size"] is None else f"..{r['max_size']}"
        state = (
            f" revoked at entry {r['revoked_at_entry']}"
            if r.get("revoked_at_entry") is not None
            else (
                f" retired at entry {r['retired_at_entry']}"
                if r.get("retired_at_entry") is not None
                else ""
            )
        )
        out.append(
            f"{r['role']:6} {r['name']:16} sizes {r['valid_from_size']}{upto or '..'}"
            f"{state}  {r['vkey']}"
        )
    return "\n".join(out)
