"""The package's shape: folders that show the layers, short modules, an import graph without cycles, one public API."""

from __future__ import annotations

import ast
from pathlib import Path

import workbench as wb

PACKAGE = Path(wb.__file__).resolve().parent
LONG_ALLOWED = {"viz/figures.py"}  # the figures module holds one function per lesson figure
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    """``workbench.x.y`` -> its file, for every module of the package (book_src's Sphinx conf.py left out)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ("book_src", "notebook_files", "pretrained"):
            continue
        parts = ["workbench", *rel.with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(path: Path, module: str, top_level_only: bool) -> set[str]:
    """The package modules ``module`` imports (``from workbench.a import b`` counts ``workbench.a.b`` when that is
    a module, else ``workbench.a``)."""
    modules = _modules()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    seen: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            seen |= {a.name for a in node.names if a.name.startswith("workbench")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workbench"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                seen.add(full if full in modules else node.module)
    return {m for m in seen if m in modules and m != module}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def _graph(top_level_only: bool) -> dict[str, set[str]]:
    # the package's __init__ re-exports the public API: an edge into it from a submodule is the API, not a layer
    return {m: _imports(p, m, top_level_only) - {"workbench"} for m, p in _modules().items() if m != "workbench"}


def test_no_module_is_longer_than_500_lines_except_the_figures():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert set(long) <= LONG_ALLOWED, f"split these modules: {long}"


def test_the_model_imports_nothing_from_the_other_folders():
    outside = {m: sorted(i for i in _imports(p, m, False) if not i.startswith("workbench.model")
                         and i not in ("workbench.errors", "workbench.runtime"))
               for m, p in _modules().items() if m.startswith("workbench.model")}
    assert not {m: v for m, v in outside.items() if v}, outside


def test_the_import_graph_has_no_cycle_even_through_function_local_imports():
    assert _cycles(_graph(top_level_only=False)) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_public_api_names_each_export_once_and_each_exists():
    assert len(wb.__all__) == len(set(wb.__all__)), sorted(n for n in wb.__all__ if wb.__all__.count(n) > 1)
    assert [n for n in wb.__all__ if not hasattr(wb, n)] == []
