"""The master notebooks' own solutions of the exercises, as functions (for the tests of the checks): every import
of a master's code cells, then its exercise cells as the book shows them (otter's markers removed), executed in
one namespace, as a student's notebook would hold them."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Any

from workbench.tools.book.assign import solution_view

REPO = Path(__file__).resolve().parents[1]


@functools.cache
def master_solutions(number: str) -> dict[str, Any]:
    """Name -> object defined by the exercise cells of master notebook ``number`` (e.g. "05")."""
    path = next((REPO / "notebooks").glob(f"{number}_*.py"))
    text = path.read_text(encoding="utf-8")
    cells = re.split(r"^# %%.*$", text, flags=re.M)
    headers = re.findall(r"^# %%.*$", text, flags=re.M)
    imports, exercises = [], []
    for header, body in zip(headers, cells[1:], strict=True):
        if "[markdown]" in header:
            continue
        if '"exercise"' in header:
            exercises.append(solution_view(body))
            continue
        try:
            tree = ast.parse(body)
        except SyntaxError:
            continue
        imports += [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    namespace: dict[str, Any] = {"__name__": f"master_{number}"}
    exec(compile("\n".join(imports), f"{path.name} imports", "exec"), namespace)  # noqa: S102 (our own masters)
    for i, source in enumerate(exercises):
        exec(compile(source, f"{path.name} exercise {i}", "exec"), namespace)  # noqa: S102
    return namespace
