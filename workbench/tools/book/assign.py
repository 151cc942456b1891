"""Student copies of the master notebooks, and grading a folder of them.

The notebooks in ``notebooks/`` are masters: each exercise's solution sits between otter-grader's solution markers,
so the masters stay compatible with ``otter assign``::

    def attention_weights(q, k, mask=None):
        \"\"\"... statement ...\"\"\"
        # BEGIN SOLUTION NO PROMPT
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        ...
        # END SOLUTION
        \"\"\" # BEGIN PROMPT
        raise NotImplementedError("write attention_weights")
        \"\"\"  # END PROMPT

:func:`strip_solutions` applies otter's rules line by line: a ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` block
becomes ``...`` (removed outright with ``NO PROMPT``), a line ending in ``# SOLUTION`` becomes ``...`` (an
assignment keeps its left side: ``x = ...``), a line ending in ``# SOLUTION NO PROMPT`` goes, and the lines between
``# BEGIN PROMPT`` and ``# END PROMPT`` (a string in the master, so inert there) become code. The checks are kept.
:func:`copy_student` writes the ``.ipynb`` and its paired jupytext ``.py`` stripped the same way, outputs removed.

:mod:`workbench.tools.grading.grader` grades a class of copies (in a sandbox, judging in its own process).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from workbench.errors import NotebookCopyError

BEGIN_SOLUTION = re.compile(r"^(\s*)# BEGIN SOLUTION( NO PROMPT)?\s*$")
END_SOLUTION = re.compile(r"^\s*# END SOLUTION\s*$")
BEGIN_PROMPT = re.compile(r'^\s*(""")?\s*# BEGIN PROMPT\s*$')
END_PROMPT = re.compile(r'^\s*(""")?;?\s*# END PROMPT\s*$')
SOLUTION_NO_PROMPT = re.compile(r"#\s*SOLUTION NO PROMPT\s*$")
SOLUTION_ASSIGNMENT = re.compile(r"^(\s*[\w, .\[\]]+\s*=)(?!=).*#\s*SOLUTION\s*$")
SOLUTION_LINE = re.compile(r"^(\s*)[^#\n]+#\s*SOLUTION\s*$")


class SolutionMarkerError(NotebookCopyError):
    """Unbalanced otter solution markers in a master notebook."""


def strip_solutions(source: str, where: str = "cell") -> str:
    """The student version of ``source``: otter-grader's solution markers applied (see the module docstring).

    Raises:
        SolutionMarkerError: a BEGIN without its END (or the reverse), or nested blocks; ``where`` names the cell.
    """
    out: list[str] = []
    in_solution = in_prompt = False
    for number, line in enumerate(source.split("\n"), start=1):
        begin = BEGIN_SOLUTION.match(line)
        if begin:
            if in_solution or in_prompt:
                raise SolutionMarkerError(f"{where}, line {number}: BEGIN SOLUTION inside another block: close it first")
            in_solution = True
            if not begin.group(2):
                out.append(begin.group(1) + "...")
            continue
        if END_SOLUTION.match(line):
            if not in_solution:
                raise SolutionMarkerError(f"{where}, line {number}: END SOLUTION without BEGIN SOLUTION")
            in_solution = False
            continue
        if in_solution:
            continue
        if BEGIN_PROMPT.match(line):
            if in_prompt:
                raise SolutionMarkerError(f"{where}, line {number}: BEGIN PROMPT inside another prompt")
            in_prompt = True
            continue
        if END_PROMPT.match(line):
            if not in_prompt:
                raise SolutionMarkerError(f"{where}, line {number}: END PROMPT without BEGIN PROMPT")
            in_prompt = False
            continue
        if SOLUTION_NO_PROMPT.search(line):
            continue
        assignment = SOLUTION_ASSIGNMENT.match(line)
        if assignment:
            out.append(assignment.group(1) + " ...")
            continue
        solution = SOLUTION_LINE.match(line)
        if solution:
            out.append(solution.group(1) + "...")
            continue
        out.append(line)
    if in_solution or in_prompt:
        raise SolutionMarkerError(f"{where}: a BEGIN {'SOLUTION' if in_solution else 'PROMPT'} is never closed")
    return "\n".join(out)


def solution_view(source: str) -> str:
    """The master's solution as the book shows it: the marker lines and the student's prompt block left out.

    Raises:
        SolutionMarkerError: unbalanced markers, as :func:`strip_solutions`.
    """
    strip_solutions(source)  # validates the markers
    out, in_prompt = [], False
    for line in source.split("\n"):
        if BEGIN_PROMPT.match(line):
            in_prompt = True
        elif END_PROMPT.match(line):
            in_prompt = False
        elif not (in_prompt or BEGIN_SOLUTION.match(line) or END_SOLUTION.match(line)):
            out.append(re.sub(r"\s*#\s*SOLUTION( NO PROMPT)?\s*$", "", line))
    return "\n".join(out).rstrip("\n")


def book_solutions(nb: Any) -> int:
    """Show each exercise cell (tag ``exercise``) of an executed master as its solution (:func:`solution_view`), in
    place; returns the number of cells changed."""
    changed = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and "exercise" in cell.metadata.get("tags", []) and has_solutions(cell.source):
            cell.source = solution_view(cell.source)
            changed += 1
    return changed


def book_stubs(nb: Any) -> int:
    """Show every code cell of an executed master that holds solutions as the student sees it (:func:`strip_solutions`:
    the stub, not the solution), in place; its outputs go, and so does its ``hide-input`` tag (the stub is shown, not
    folded behind "Show the solution"). Returns the number of cells changed. For a course's public book
    (``workbench book build --no-solutions``)."""
    changed = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and has_solutions(cell.source):
            cell.source = strip_solutions(cell.source, f"cell {i}")
            cell.outputs = []
            tags = cell.metadata.get("tags", [])
            if "hide-input" in tags:
                cell.metadata["tags"] = [t for t in tags if t != "hide-input"]
            changed += 1
    return changed


def has_solutions(source: str) -> bool:
    """Does ``source`` hold otter solution markers?"""
    return any(BEGIN_SOLUTION.match(line) or SOLUTION_NO_PROMPT.search(line) for line in source.split("\n"))


def student_notebook(nb: Any, name: str = "notebook") -> Any:
    """A copy of the nbformat notebook ``nb`` with every code cell's solutions stripped and all outputs removed."""
    import copy

    nb = copy.deepcopy(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        cell.source = strip_solutions(cell.source, f"{name}, cell {i}")
        cell.outputs, cell.execution_count = [], None
    return nb


def write_student_copy(source: Path, destination: Path) -> None:
    """Write the student version of one file of a notebook pair: an ``.ipynb`` through :func:`student_notebook`
    (outputs removed), its jupytext ``.py`` through :func:`strip_solutions`."""
    if source.suffix == ".ipynb":
        import nbformat

        nbformat.write(student_notebook(nbformat.read(source, as_version=4), source.name), destination)
    else:
        destination.write_text(strip_solutions(source.read_text(encoding="utf-8"), source.name), encoding="utf-8")


def copy_student(target: str | Path, **options: Any) -> list[Path]:
    """Write student versions of the notebooks into ``target``: each ``.ipynb`` and its jupytext ``.py`` with the
    solutions replaced by their stubs (:func:`strip_solutions`), the checks kept. The folder, the choice of notebooks
    (``only``, ``directory``) and ``force`` work as in :func:`workbench.tools.book.notebooks.copy_notebooks`, which does
    the copying with :func:`write_student_copy`.

    Raises:
        NotebookCopyError: as :func:`workbench.tools.book.notebooks.copy_notebooks` (files in the way without ``force``).
    """
    from workbench.tools.book.notebooks import copy_notebooks

    return copy_notebooks(target, write=write_student_copy, **options)
