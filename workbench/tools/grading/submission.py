"""Reading a student's notebook without running it: which file to read, and what the grader takes from it.

:func:`read_submission` picks the ``.ipynb`` or its jupytext ``.py`` twin (the newer one, and says so);
:func:`extract` takes, with :mod:`ast` and never by running anything,

* from the cells tagged ``exercise``: imports, function and class definitions and assignments of literal constants
  to plain names, without their annotations (every other top-level statement, such as a call to a monkeypatched
  ``check`` or to ``os.system``, is dropped). A definition's own decorators, default values and class body still
  run when it is defined: in the sandbox, where the student's functions run anyway;
* from every other cell: its top-level imports (those that would bind an exercise's name are dropped, so a
  function the student did not write cannot come from the package);
* from the cells tagged ``answer``: each prediction, read with :func:`ast.literal_eval`.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SUBMISSION_BYTES = 256 * 2**20  # a notebook file larger than this is not read (with outputs, a lesson is tens of MB)
TWIN_SLACK = 1.0  # seconds: a .py twin saved within this of its .ipynb (jupytext writes both) is not "newer"


@dataclasses.dataclass
class Submission:
    """One student notebook as read from disk."""

    student: str
    name: str  # the notebook's stem, e.g. "05_masked_attention"
    file: str  # the file read (a name in the student's folder), "" when none could be read
    note: str  # why that file ("" for an .ipynb alone); or why none could be read
    cells: list[tuple[str, list[str]]]  # (source, tags) of each code cell

    @property
    def number(self) -> str:
        return self.name.split("_", 1)[0]

    @property
    def readable(self) -> bool:
        return bool(self.file) and not self.note.startswith("unreadable")


@dataclasses.dataclass
class Extracted:
    """What :func:`extract` took from a :class:`Submission`."""

    statements: list[dict[str, str]]  # {"code", "where"}: what the worker executes, in order
    missing: dict[str, str]  # function name -> one line: why no exercise cell defines it
    answers: dict[str, Any]  # prediction variable -> value read
    unreadable_answers: dict[str, str]  # prediction variable -> one line: why it could not be read
    dropped: int  # top-level statements of exercise cells left out


def _cells(nb: Any) -> list[tuple[str, list[str]]]:
    return [(c.source, list(c.metadata.get("tags", []))) for c in nb.cells if c.cell_type == "code"]


def _read_ipynb(path: Path) -> list[tuple[str, list[str]]]:
    import nbformat

    try:
        json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    try:
        return _cells(nbformat.reads(path.read_text(encoding="utf-8"), as_version=4))
    except Exception as exc:  # nbformat raises several kinds on a JSON file that is not a notebook
        raise ValueError(f"not a notebook ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") from None


def _read_py(path: Path) -> list[tuple[str, list[str]]]:
    import jupytext

    try:
        return _cells(jupytext.reads(path.read_text(encoding="utf-8"), fmt="py:percent"))
    except Exception as exc:  # jupytext's parse errors vary
        raise ValueError(f"not a jupytext notebook ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") from None


def read_submission(student: str, folder: Path, name: str) -> Submission:
    """Read ``folder/name.ipynb`` or its twin ``folder/name.py``, whichever was saved last (when one cannot be
    read, the other). Never raises: an unreadable notebook comes back with ``note`` starting "unreadable"."""
    ipynb, py = folder / f"{name}.ipynb", folder / f"{name}.py"
    order = [p for p in (ipynb, py) if p.exists()]
    if len(order) == 2 and py.stat().st_mtime > ipynb.stat().st_mtime + TWIN_SLACK:
        order.reverse()
    problems = []
    for path in order:
        if path.is_symlink() or folder.is_symlink():  # a link could hand in another's file, or one only the grader reads
            problems.append(f"{path.name} is a symbolic link, not graded: hand in the file itself")
            continue
        if not path.is_file():  # a folder, a named pipe (reading it would wait for ever), a device
            problems.append(f"{path.name} is not a regular file, not graded: hand in the notebook file itself")
            continue
        if path.stat().st_size > SUBMISSION_BYTES:
            problems.append(f"{path.name} is over {SUBMISSION_BYTES >> 20} MB, not graded: clear the outputs and "
                            "hand it in again")
            continue
        try:
            cells = _read_ipynb(path) if path.suffix == ".ipynb" else _read_py(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name} is {exc}" if isinstance(exc, ValueError) else f"{path.name}: {exc}")
            continue
        except (RecursionError, MemoryError) as exc:  # JSON nested thousands deep, say
            problems.append(f"{path.name} could not be read ({type(exc).__name__}): hand in the notebook as saved")
            continue
        if problems:
            note = f"read {path.name} because {problems[0]}"
        elif path == py and ipynb.exists():
            note = f"read {path.name}: saved after {ipynb.name}"
        else:
            note = ""
        return Submission(student, name, path.name, note, cells)
    why = "; ".join(problems) if problems else f"no {name}.ipynb or {name}.py"
    return Submission(student, name, "", f"unreadable: {why}", [])


def _python(source: str) -> str:
    """Cell source as plain Python: IPython's magics and shell escapes become calls (which are then dropped)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:  # a cell IPython cannot transform either: ast reports it
        return source


def _bound(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


def _without(node: ast.Import | ast.ImportFrom, names: set[str]) -> ast.stmt | None:
    """The import without the aliases that bind one of ``names`` (None when none is left)."""
    kept = [a for a in node.names if _bound(a) not in names]
    if not kept:
        return None
    node = ast.Import(names=kept) if isinstance(node, ast.Import) else ast.ImportFrom(node.module, kept, node.level)
    return node


def _literal(node: ast.expr | None) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return node is not None


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def extract(sub: Submission, functions: Sequence[str], variables: Sequence[str] = ()) -> Extracted:
    """What the grader takes from ``sub`` (see the module docstring) for the exercise functions ``functions`` and the
    prediction variables ``variables``."""
    names = set(functions)
    imports: list[dict[str, str]] = []
    definitions: list[dict[str, str]] = []
    defined_where: dict[str, str] = {}
    elsewhere: dict[str, str] = {}
    syntax: list[str] = []
    answers: dict[str, Any] = {}
    unreadable: dict[str, str] = {}
    dropped = 0
    for index, (source, tags) in enumerate(sub.cells):
        where = f"{sub.file}, code cell {index + 1}"
        try:
            tree = ast.parse(_python(source))
        except SyntaxError as exc:
            if "exercise" in tags:
                syntax.append(f"{where} has a syntax error (line {exc.lineno}: {exc.msg})")
            if "answer" in tags:
                for var in variables:
                    if var in source:
                        unreadable[var] = f"{where} has a syntax error (line {exc.lineno}: {exc.msg})"
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                kept = _without(node, names)
                if kept is not None:
                    (definitions if "exercise" in tags else imports).append({"code": ast.unparse(kept), "where": where})
            elif "exercise" in tags and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                definitions.append({"code": ast.unparse(node), "where": where})
                defined_where[node.name] = where
            elif "exercise" in tags and isinstance(node, (ast.Assign, ast.AnnAssign)) and _literal(node.value) \
                    and all(isinstance(t, ast.Name) for t in _targets(node)):
                # a constant bound to plain names, its annotation dropped (an annotation is an expression that
                # runs); an attribute or item target (sys.modules["x"] = None) is code, and dropped
                plain = ast.Assign(targets=_targets(node), value=node.value, lineno=node.lineno)
                definitions.append({"code": ast.unparse(plain), "where": where})
            elif "exercise" in tags:
                dropped += 1
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
                elsewhere.setdefault(node.name, where)
            if "answer" in tags and isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in variables:
                        try:
                            answers[target.id] = ast.literal_eval(node.value)
                        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                            unreadable[target.id] = (f"{where}: {target.id} is not a literal "
                                                     f"({ast.unparse(node.value)[:40]}): write a number, or None")
    missing = {}
    for name in functions:
        if name in defined_where:
            continue
        if name in elsewhere:
            missing[name] = (f"def {name} is in {elsewhere[name]}, which is not tagged 'exercise': put it back in "
                             "its exercise cell")
        elif syntax:
            missing[name] = syntax[0]
        else:
            found = sorted(defined_where) or ["nothing"]
            missing[name] = f"no cell tagged 'exercise' defines {name} (they define: {', '.join(found)})"
    return Extracted(imports + definitions, missing, answers, unreadable, dropped)


def notebook_names(folder: Path) -> list[str]:
    """The stems of the numbered notebooks (``NN_name.ipynb`` or ``NN_name.py``) in ``folder``, in order."""
    stems = {p.stem for p in folder.glob("[0-9][0-9]_*.ipynb")} | {p.stem for p in folder.glob("[0-9][0-9]_*.py")}
    return sorted(stems)
