"""The import rules of docs/architecture.md, checked on the project's own source with ``ast``.

Every module of every folder ``pyproject.toml`` maps into ``memroot`` is parsed; every import
in it counts, wherever it is (module level, a function body, ``if TYPE_CHECKING:``, ``try:``),
``from . import x`` is resolved against the module's package, and a string literal handed to
``importlib.import_module`` / ``__import__`` is an import too. Importing ``a.b.c`` is an edge
to ``a.b.c`` only (not to the packages ``a`` and ``a.b`` Python also runs: every submodule
would otherwise depend on its package's ``__init__``). The rules:

- no import circle between modules;
- no import upward across the layers of the doc's table (``## Layers``);
- no module over ``MAX_LINES`` lines unless its docstring has a line ``Kept whole: <why>``;
- a module names a module of another layer by string (``"memroot.x.y:name"``, an f-string
  handed to ``import_module``) only where the doc's ``## Late bindings`` table says so.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
DOC: Final = ROOT / "docs" / "architecture.md"
MAX_LINES: Final = 1000
KEPT_WHOLE: Final = "Kept whole:"
_ROW: Final = re.compile(r"^\|\s*(\d+(?:\.\d+)?)\s*\|\s*`(memroot[\w.]*)`\s*\|\s*`([\w./]+)`")
_LATE_ROW: Final = re.compile(r"^\|\s*`(memroot[\w.]*)`\s*\|\s*`(memroot[\w.*]*)`\s*\|")


@dataclass(frozen=True, slots=True)
class Edge:
    """One import: ``source`` imports ``target`` at ``line`` of ``path``."""

    source: str
    target: str
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({_rel(self.path)}:{self.line})"


def _rel(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


@dataclass(slots=True)
class Graph:
    """The project's modules (name -> file) and what each imports."""

    modules: dict[str, Path]
    edges: list[Edge] = field(default_factory=list)
    late: list[Edge] = field(default_factory=list)
    """String-named references to another module (``"memroot.x:name"``, an f-string prefix)."""
    opaque: list[Edge] = field(default_factory=list)
    """``import_module`` calls whose argument is a variable (target ``?``)."""


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """Return pyproject's folder -> import name mapping (``facade`` -> ``memroot``, ...)."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return {folder: name for name, folder in mapping.items()}


def find_modules(root: Path, folders: Mapping[str, str]) -> dict[str, Path]:
    """Return every module under the mapped folders, by import name.

    A folder nested in another mapped folder belongs to its own mapping only.
    """
    modules: dict[str, Path] = {}
    mapped = {root / f for f in folders}
    for folder, name in folders.items():
        base = root / folder
        for path in sorted(base.rglob("*.py*")):
            if path.suffix not in (".py", ".pyi") or "__pycache__" in path.parts:
                continue
            if any(p in mapped and p != base for p in path.parents):
                continue
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            module = ".".join([name, *parts])
            if path.suffix == ".pyi" and module in modules:
                continue  # the stub of a .py module: the .py is read
            modules[module] = path
    return modules


def _resolve(modules: Mapping[str, Path], dotted: str) -> str | None:
    """Return the module ``dotted`` names, or the nearest enclosing one that is a module."""
    while dotted:
        if dotted in modules:
            return dotted
        dotted = dotted.rpartition(".")[0]
    return None


def _is_import_call(node: ast.Call) -> bool:
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in ("import_module", "__import__")


def _fstring_prefix(arg: ast.expr, module: str) -> str | None:
    """Return the constant start of an f-string module name (``{__name__}`` is ``module``)."""
    if not isinstance(arg, ast.JoinedStr) or not arg.values:
        return None
    prefix = ""
    for part in arg.values:
        if isinstance(part, ast.Constant):
            prefix += str(part.value)
        elif (
            not prefix
            and isinstance(part, ast.FormattedValue)
            and isinstance(part.value, ast.Name)
            and part.value.id == "__name__"
        ):
            prefix = module
        else:
            break
    return prefix or None


def _imports(
    module: str, path: Path, tree: ast.Module, modules: Mapping[str, Path], top: str
) -> Iterable[tuple[str, str | None, int]]:
    """Yield ``(kind, target, line)``: kind ``import``, ``late`` or ``opaque``."""
    named = re.compile(rf"({top}(?:\.\w+)+):\w+")
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield "import", _resolve(modules, alias.name), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                yield "import", full if full in modules else _resolve(modules, source), node.lineno
        elif isinstance(node, ast.Call) and _is_import_call(node) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield "import", _resolve(modules, arg.value), node.lineno
            elif (prefix := _fstring_prefix(arg, module)) is not None and prefix.startswith(
                top + "."
            ):
                yield "late", prefix.rstrip(".") + ".*", node.lineno
            else:
                yield "opaque", "?", node.lineno
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = named.fullmatch(node.value)
            if name is not None:
                yield "late", _resolve(modules, name.group(1)), node.lineno


def build_graph(root: Path = ROOT, folders: Mapping[str, str] | None = None) -> Graph:
    """Parse every module under ``root``'s mapped folders and collect its imports."""
    folders = package_dirs(root) if folders is None else folders
    top = next(iter(folders.values())).split(".")[0]
    graph = Graph(find_modules(root, folders))
    for module, path in graph.modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for kind, target, line in _imports(module, path, tree, graph.modules, top):
            if target is None or target == module:
                continue
            edge = Edge(module, target, path, line)
            {"import": graph.edges, "late": graph.late, "opaque": graph.opaque}[kind].append(edge)
    return graph


def cycles(graph: Graph) -> list[list[Edge]]:
    """Return one import circle (as its edges) per strongly connected group of modules."""
    out: dict[str, dict[str, Edge]] = {m: {} for m in graph.modules}
    for e in graph.edges:
        out[e.source].setdefault(e.target, e)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in out[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(graph.modules) + 100))
    try:
        for v in sorted(out):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return [_one_cycle(out, group) for group in groups]


def _one_cycle(out: Mapping[str, Mapping[str, Edge]], group: set[str]) -> list[Edge]:
    """Return a circle through the smallest module of ``group`` (breadth first: a short one)."""
    start = min(group)
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w, e in sorted(out[v].items()):
                if w == start:
                    path = [e]
                    while path[0].source != start:
                        path.insert(0, came[path[0].source])
                    return path
                if w in group and w not in came:
                    came[w] = e
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no circle in {sorted(group)}")


Rank = tuple[int, ...]
"""A layer's rank: ``(2,)`` for rank 2; ``(1, 3)`` for part 3 of layer 1 (rank 1.3)."""


def layer_table(doc: Path = DOC) -> list[tuple[Rank, str, str]]:
    """Return the rows ``(rank, import name, folder)`` of the doc's ``## Layers`` tables.

    A layer's own row has a whole rank (``1``); the rows of its parts (``1.0``, ``1.1``, ...)
    order the packages inside it, and the part named like the layer is its core.
    """
    return [
        (tuple(map(int, m.group(1).split("."))), m.group(2), m.group(3).rstrip("/"))
        for m in map(_ROW.match, _section(doc, "## Layers"))
        if m is not None
    ]


def late_table(doc: Path = DOC) -> set[tuple[str, str]]:
    """Return the ``(module, what it names)`` pairs of the doc's ``## Late bindings`` table."""
    return {
        (m.group(1), m.group(2))
        for m in map(_LATE_ROW.match, _section(doc, "## Late bindings"))
        if m is not None
    }


def _section(doc: Path, heading: str) -> list[str]:
    lines = doc.read_text().splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def ranks(table: Iterable[tuple[Rank, str, str]]) -> dict[str, Rank]:
    """Return import name -> rank (a part's rank over its layer's whole one)."""
    return {name: rank for rank, name, _ in sorted(table, key=lambda row: len(row[0]))}


def rank_of(module: str, by_name: Mapping[str, Rank]) -> Rank:
    """Return the rank of the layer ``module`` belongs to (the longest name it starts with)."""
    best = max(
        (n for n in by_name if module == n or module.startswith(n + ".")), key=len, default=None
    )
    if best is None:
        raise AssertionError(f"{module} is in no layer of docs/architecture.md")
    return by_name[best]


def upward(graph: Graph, by_name: Mapping[str, Rank]) -> list[Edge]:
    """Return the imports from a lower layer to a higher one."""
    return [e for e in graph.edges if rank_of(e.target, by_name) > rank_of(e.source, by_name)]


def oversized(graph: Graph, limit: int = MAX_LINES) -> list[str]:
    """Return the modules over ``limit`` lines whose docstring gives no ``Kept whole:`` reason."""
    found = []
    for module, path in sorted(graph.modules.items()):
        text = path.read_text()
        n = len(text.splitlines())
        if n <= limit:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not any(line.strip().startswith(KEPT_WHOLE) for line in doc.splitlines()):
            found.append(f"{module} ({_rel(path)}: {n} lines)")
    return found


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph()


@pytest.fixture(scope="module")
def by_name() -> dict[str, Rank]:
    return ranks(layer_table())


def test_no_import_circle(graph: Graph) -> None:
    """No module imports itself back through others (function-level and TYPE_CHECKING count)."""
    found = cycles(graph)
    if found:
        pytest.fail(
            "import circles (one per group of modules importing each other; breaking it may "
            "show another):\n" + "\n\n".join("\n".join(f"  {e}" for e in c) for c in found)
        )


def test_no_import_upward(graph: Graph, by_name: dict[str, Rank]) -> None:
    """No module imports one of a higher layer of docs/architecture.md's table."""
    found = upward(graph, by_name)
    if found:
        pytest.fail("imports upward across the layers:\n" + "\n".join(f"  {e}" for e in found))


def test_no_module_over_the_limit_without_its_reason(graph: Graph) -> None:
    """A module over MAX_LINES lines says in its docstring why it is kept whole."""
    found = oversized(graph)
    if found:
        pytest.fail(
            f"over {MAX_LINES} lines, no '{KEPT_WHOLE}' line in the docstring: "
            + (", ".join(found))
        )


def test_late_bindings_are_the_documented_ones(graph: Graph) -> None:
    """Every module named by string is listed in docs/architecture.md, and nothing more."""
    found = {(e.source, e.target) for e in graph.late}
    assert found == late_table(), "string-named modules differ from the doc's table:\n" + "\n".join(
        f"  {e}" for e in graph.late
    )
    documented = {source for source, _ in found}
    stray = [e for e in graph.opaque if e.source not in documented]
    assert not stray, "import_module of a computed name outside a documented late binding:\n" + (
        "\n".join(f"  {e}" for e in stray)
    )


def test_layer_table_maps_the_folders_pyproject_maps(graph: Graph) -> None:
    """The doc's layers are pyproject.toml's package-dir and native core; each part is in one."""
    table = layer_table()
    layers = [(name, folder) for rank, name, folder in table if len(rank) == 1]
    parts = [(rank, name, folder) for rank, name, folder in table if len(rank) == 2]
    assert len(layers) + len(parts) == len(table)
    assert len(dict(layers)) == len(layers), "a layer is listed twice"
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (native,) = config["tool"]["setuptools-rust"]["ext-modules"]
    mapped = {(folder, name) for folder, name in package_dirs().items()}
    mapped.add((str(Path(native["path"]).parent), native["target"]))
    assert {(folder, name) for name, folder in layers} == mapped
    modules = graph.modules
    whole = {name: rank for rank, name, _ in table if len(rank) == 1}
    for rank, name, folder in parts:
        assert (ROOT / folder).exists(), folder
        assert name in modules, f"{name} ({folder}) is not a module"
        layer = max((n for n in whole if name == n or name.startswith(n + ".")), key=len)
        assert whole[layer] == rank[:1], f"{name} is numbered {rank} but is part of {layer}"


def test_every_module_is_in_a_layer(graph: Graph, by_name: dict[str, Rank]) -> None:
    """Each parsed module belongs to a layer of the table (and there are modules to parse)."""
    assert len(graph.modules) > 100
    for module in graph.modules:
        rank_of(module, by_name)
    assert "memroot._native" in graph.modules


def test_cli_hooks_reexports_the_stack() -> None:
    """``memroot.cli.hooks`` (the README's first import path) gives the stack's own functions."""
    from memroot.cli import hooks
    from memroot.memory_root import stack

    assert {"default_hooks", "replay_checks", "bundle_sections", "bundle_checks"} <= set(
        hooks.__all__
    )
    for name in hooks.__all__:
        assert getattr(hooks, name) is getattr(stack, name)


# -- the checker itself, on a small tree with every kind of import it must see ----------------


def _tree(root: Path, files: Mapping[str, str]) -> Graph:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return build_graph(root, {"low": "pkg.low", "high": "pkg.high"})


def test_checker_finds_a_circle_hidden_in_a_function_body(tmp_path: Path) -> None:
    """A circle closed by a function-level relative import is reported with its lines."""
    graph = _tree(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/a.py": "from pkg.low import b\n",
            "low/b.py": "def f():\n    from . import c\n",
            "low/c.py": "import pkg.low.a\n",
            "high/__init__.py": "",
        },
    )
    (circle,) = cycles(graph)
    assert [(e.source, e.target, e.line) for e in circle] == [
        ("pkg.low.a", "pkg.low.b", 1),
        ("pkg.low.b", "pkg.low.c", 2),
        ("pkg.low.c", "pkg.low.a", 1),
    ]


def test_checker_finds_an_upward_import_under_type_checking(tmp_path: Path) -> None:
    """An annotation-only import of a higher layer is an upward import; a string literal too."""
    graph = _tree(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/a.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from pkg.high.h import H\n"
            ),
            "low/b.py": "import importlib\nimportlib.import_module('pkg.high')\n",
            "low/c.py": "FACTORY = 'pkg.high.h:make'\n",
            "high/__init__.py": "",
            "high/h.py": "",
        },
    )
    found = {
        (e.source, e.target, e.line) for e in upward(graph, {"pkg.low": (0,), "pkg.high": (1,)})
    }
    assert found == {("pkg.low.a", "pkg.high.h", 3), ("pkg.low.b", "pkg.high", 2)}
    assert [(e.source, e.target) for e in graph.late] == [("pkg.low.c", "pkg.high.h")]


def test_checker_finds_an_oversized_module_without_its_reason(tmp_path: Path) -> None:
    """A long module is flagged unless its docstring has a ``Kept whole:`` line."""
    body = "x = 1\n" * (MAX_LINES + 1)
    graph = _tree(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/long.py": '"""Long."""\n' + body,
            "low/whole.py": '"""Long.\n\nKept whole: one idea.\n"""\n' + body,
            "high/__init__.py": "",
        },
    )
    assert [m.split(" ")[0] for m in oversized(graph)] == ["pkg.low.long"]
