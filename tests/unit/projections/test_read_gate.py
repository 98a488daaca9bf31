"""Import rules of the read gate: surfaces get derived memory only from projections.checked.

A surface module (cli/, facade/, integrations/, the read receipts and the report) must not
run SQL on a derived table (``mem_*``, ``fz_*``, the memory-root tables, ``lg_*``) nor import
the unchecked readers of ``projections.query`` or ``checked.unchecked_query``. Each exception
is in ``ALLOWED`` with the reason it is safe; an entry nothing needs any more fails too, so
the list cannot outgrow the code.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[3]
SURFACES = ("cli", "facade", "integrations")
EXTRA = ("memory_root/receipts.py",)
DERIVED = re.compile(
    r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
    r"((?:mem|fz|lg)_[a-z_]+|memory_roots?|memory_root_[a-z]+|selfmodel_snapshots|conv_parents"
    r"|git_context)\b",
    re.IGNORECASE,
)
UNCHECKED = {
    "query",
    "get_object",
    "object_history",
    "get_entity",
    "resolve_entity",
    "entity_members",
    "edges_of",
    "anchor_path_of",
}
"""The readers of ``projections.query`` that return derived rows unchecked."""

ALLOWED: dict[tuple[str, str], str] = {
    ("cli/memory_cmds.py", "unchecked_query"): "`memroot query --no-strict`: forensics, said so",
    ("cli/falsify_cmds.py", "fz_unapplied"): "why's note of operations not applied globally: "
    "an explanation beside the checked history, no memory served (verify step 9 re-derives it)",
    ("facade/receipts.py", "get_object"): "the receipts check IS verify step 9 (it compares "
    "each receipt with the derived state that the same audit re-derives)",
    ("memory_root/receipts.py", "get_object"): "the same check after its move below the facade",
    ("memory_root/receipts.py", "memory_roots"): "the roots of a branch, to name the root in force "
    "in a receipt: root records are not behind the read gate yet (verify step 8 re-derives "
    "every root; a strict roots read is open work of issue 23)",
}
"""(module, name or table) -> why the surface may use it."""

LANGGRAPH = (
    "integrations/langgraph/",
    "the LangGraph lookup index (lg_*): each row locates an entry that is read strictly and "
    "checked against the thread's newest entry (issue 23.8); no derived value is served",
)
"""Any ``lg_*`` table in the LangGraph package: its tables are its own index, checked there."""


def _allowed(rel: str, name: str) -> bool:
    return (rel, name) in ALLOWED or (rel.startswith(LANGGRAPH[0]) and name.startswith("lg_"))


def _modules() -> list[Path]:
    out = [p for s in SURFACES for p in (PKG / s).rglob("*.py")]
    return out + [PKG / e for e in EXTRA if (PKG / e).exists()]


def _uses(path: Path) -> set[str]:
    """Return the unchecked names and derived tables a module uses."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "memroot.projections.query":
            found |= {a.name for a in node.names if a.name in UNCHECKED}
        elif isinstance(node, ast.ImportFrom) and node.module == "memroot.projections":
            aliases |= {a.asname or a.name for a in node.names if a.name == "query"}
        elif isinstance(node, ast.Import):
            aliases |= {
                a.asname or a.name for a in node.names if a.name == "memroot.projections.query"
            }
        if isinstance(node, ast.ImportFrom) and node.module == "memroot.projections.checked":
            found |= {a.name for a in node.names if a.name == "unchecked_query"}
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= {m.group(1).lower() for m in DERIVED.finditer(node.value)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr in UNCHECKED
        ):
            found.add(node.attr)
    return found


def test_surfaces_read_derived_memory_only_through_the_gate() -> None:
    """No surface module reads a derived table or an unchecked reader outside the allowlist."""
    offences = []
    used: set[tuple[str, str]] = set()
    for path in _modules():
        rel = path.relative_to(PKG).as_posix()
        for name in sorted(_uses(path)):
            if _allowed(rel, name):
                used.add((rel, name))
            else:
                offences.append(f"{rel}: {name}")
    assert not offences, "surfaces bypass projections.checked:\n" + "\n".join(offences)
    present = {p.relative_to(PKG).as_posix() for p in _modules()}
    stale = [k for k in ALLOWED if k[0] in present and k not in used]
    assert not stale, f"allowlist entries nothing uses any more: {stale}"


def test_the_rule_sees_a_bypass(tmp_path: Path) -> None:
    """The scanner flags each way of reaching derived rows (so the rule above can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from memroot.projections import query as memq\n"
        "from memroot.projections.query import get_object\n"
        "from memroot.projections.checked import unchecked_query\n"
        "def f(db, q):\n"
        "    db.execute('SELECT value FROM mem_objects WHERE id = ?')\n"
        "    db.execute('select * from fz_states')\n"
        "    return memq.query(db, q)\n",
        encoding="utf-8",
    )
    assert _uses(bad) == {"get_object", "unchecked_query", "mem_objects", "fz_states", "query"}
