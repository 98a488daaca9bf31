"""CLI commands of one capability (registered on the `memroot` group by import)."""

from __future__ import annotations
