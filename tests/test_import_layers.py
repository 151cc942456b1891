"""Imports point down the layers (STYLE.md, Layout): model <- translation <- inspect / lessons / bridges <- viz
<- tools, on a base of errors and runtime, with the public API (``workbench/__init__.py``) above the library.

Every ``import`` and ``from ... import`` in ``workbench/**/*.py`` is read with :mod:`ast` (lazy imports inside
functions included): an import of a higher layer fails unless it is in :data:`ALLOWED`, each with its reason.
Inside ``tools/`` the trades (:data:`TOOLS`) are layered the same way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import workbench

ROOT = Path(workbench.__file__).parent

# the layers, bottom up: a module may import its own layer and those below
LAYERS = {
    "errors": 0, "runtime": 0, "_version": 0,  # the base: error classes, seeds, devices, number formats
    "model": 1,  # the paper's model and its hook points
    "translation": 2,  # data, tokenizer, recipe, decoding, metrics, checkpoints, shipped models
    "inspect": 3, "lessons": 3, "bridges": 3,  # the side door, what the lessons measure, other toolkits' formats
    "viz": 4,  # figures and widgets
    "__init__": 5,  # the public API (wb.*)
    "tools": 6,  # command line, book and notebooks, grading, benchmarks, release: API users
    "book_src": 7, "__main__": 7,  # the book's Sphinx configuration and ``python -m workbench``: tools' users
}

# within tools/, one sub-package (or module) a trade, on the same rule: a trade imports its own and those below
TOOLS = {
    "provenance": 0,  # the record every result file carries, and the one report writer
    "bench": 1, "book": 1, "release": 1,  # the benchmark suite; notebooks and the book; building a shipped model
    "grading": 2,  # grading a class: runs the notebooks (book/) in a sandbox
    "cli": 3,  # the ``workbench`` command: every trade's commands
}

# upward imports that remain, each with its reason (file, imported module); shrink this, never grow it silently
ALLOWED: set[tuple[str, str]] = set()  # none remain (issue 47 item 3 took the last ones down)


def _layer(module: str) -> tuple[str, float]:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    if top == "tools" and len(parts) > 2:  # a trade of tools/: between tools/ itself and the layer above
        return f"tools.{parts[2]}", LAYERS["tools"] + TOOLS[parts[2]] / 10
    return top, LAYERS.get(top, LAYERS["__init__"])


def _own_layer(rel: str) -> float:
    """The layer of a file, from its path below ``workbench/`` (``tools/cli/main.py`` is the trade ``cli``)."""
    parts = rel.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1] or ["__init__"]
    return _layer(".".join(["workbench", *parts]))[1]


def upward_imports() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        own = _own_layer(rel)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = ([f"workbench.{a.name}" for a in node.names] if node.module == "workbench"
                         else [node.module])
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if (name == "workbench" or name.startswith("workbench.")) and _layer(name)[1] > own:
                    found.add((rel, name))
    return found


def test_every_package_folder_has_a_layer():
    tops = {p.relative_to(ROOT).parts[0].removesuffix(".py") for p in ROOT.rglob("*.py")}
    assert tops <= set(LAYERS), tops - set(LAYERS)
    trades = {p.relative_to(ROOT / "tools").parts[0].removesuffix(".py") for p in (ROOT / "tools").rglob("*.py")}
    assert trades - {"__init__"} == set(TOOLS), trades ^ set(TOOLS)


def test_imports_point_down_the_layers():
    found = upward_imports()
    assert found - ALLOWED == set(), f"imports of a higher layer: {sorted(found - ALLOWED)}"
    assert ALLOWED - found == set(), f"allowed but gone (remove from ALLOWED): {sorted(ALLOWED - found)}"


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The rule can fail: a model file importing viz/ (even lazily, in a function) is found."""
    fake = tmp_path / "workbench"
    (fake / "model").mkdir(parents=True)
    (fake / "model" / "bad.py").write_text("def f():\n    from workbench.viz import figures\n")
    (fake / "runtime.py").write_text("from workbench import model\n")
    (fake / "tools" / "book").mkdir(parents=True)  # within tools/: the book importing the command line, and fine ones
    (fake / "tools" / "book" / "bad.py").write_text("from workbench.tools.cli import main\n")
    (fake / "tools" / "book" / "__init__.py").write_text("from workbench.tools import provenance\n")
    (fake / "tools" / "grading.py").write_text("from workbench.tools.book import runner\nimport workbench.model\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", fake)
    assert upward_imports() == {("model/bad.py", "workbench.viz"), ("runtime.py", "workbench.model"),
                                ("tools/book/bad.py", "workbench.tools.cli")}
