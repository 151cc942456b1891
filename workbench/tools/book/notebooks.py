"""Run the teaching notebooks headless: parameter checks, papermill execution, HTML reports and an index page.

The notebooks are edited in the repository's ``notebooks/`` folder and ship inside the package (the wheel's
``workbench/notebook_files/``): a source checkout runs its own folder, an installed package the shipped copy, and
:func:`copy_notebooks` (``workbench notebooks copy DIR``) puts editable copies where the user wants them.

Each notebook runs with its own output folder as working directory, so the ``metrics.json`` it writes lands
next to its executed copy::

    reports/
      index.html                      one row per notebook: status, run time, headline metrics, links
      summary.json                    the same as data
      02_scaled_dot_product_attention/
        02_scaled_dot_product_attention.ipynb    executed notebook (outputs included)
        02_scaled_dot_product_attention.html     HTML export, plotly.js embedded (opens offline)
        metrics.json                             what the notebook measured

The kernel runs in that folder, so every path the user gave relative to where they stand (``$WORKBENCH_MULTI30K``,
``$WORKBENCH_CACHE``, ``data_dir``, a ``CHECKPOINT`` parameter, the output folder) is made absolute against the
caller's working directory before the kernel starts.

papermill only *warns* about a parameter the notebook does not declare; :func:`check_parameters` refuses it
(suggesting the closest name) and refuses values whose type does not match the declared annotation.

This module finds, copies and checks the notebooks; :mod:`workbench.tools.book.runner` executes them.
"""

from __future__ import annotations

import ast
import difflib
import logging
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.errors import NotebookCopyError, NotebookParameterError

log = logging.getLogger(__name__)

ENV_VAR = "WORKBENCH_NOTEBOOKS"  # overrides the notebook folder
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"  # NN_name.ipynb; files starting with "_" (generators, drafts) are skipped
PARAMETER_TYPES: dict[str, type | tuple[type, ...]] = {"bool": bool, "int": int, "float": (float, int), "str": str}
# string parameters that hold paths: CHECKPOINT, and any name ending in _DIR, _FILE or _PATH
PATH_PARAMETER = re.compile(r"^(CHECKPOINT|[A-Z0-9_]+_(DIR|FILE|PATH))$")




# -- where the notebooks are ------------------------------------------------------------------------------------
PACKAGED_DIR = "notebook_files"  # the copy inside the installed package (pyproject.toml maps notebooks/ there)


def packaged_notebooks_dir() -> Path:
    """The notebooks that ship inside the package (``workbench/notebook_files/`` of the wheel).

    In the repository the notebooks live in ``notebooks/`` (where they are edited); the wheel carries that folder
    as ``workbench/notebook_files/``, so an installed package runs them without the source tree.
    """
    return Path(__file__).resolve().parents[2] / PACKAGED_DIR


def _checkout_notebooks_dir(package_file: str | Path = Path(__file__).parents[2] / "__init__.py") -> Path | None:
    """``notebooks/`` of the source checkout the package runs from (editable install or PYTHONPATH), else None
    (a plain ``pip install``: the package sits in site-packages, where no ``pyproject.toml`` stands beside it).

    ``package_file`` is a module at the top of the package (its ``__init__.py`` by default)."""
    root = Path(package_file).resolve().parents[1]
    folder = root / "notebooks"
    return folder if (root / "pyproject.toml").is_file() and folder.is_dir() else None


def notebooks_dir(directory: str | Path | None = None) -> Path:
    """The notebook folder: ``directory`` if given, else ``$WORKBENCH_NOTEBOOKS``, else ``notebooks/`` of the
    source checkout when the package runs from one, else the copy shipped inside the installed package
    (:func:`packaged_notebooks_dir`)."""
    if directory is not None:
        return Path(directory).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return _checkout_notebooks_dir() or packaged_notebooks_dir()


def list_notebooks(directory: str | Path | None = None) -> list[Path]:
    """The numbered notebooks (``NN_name.ipynb``) of the folder, in order.

    Raises:
        NotebookParameterError: the folder holds no numbered notebook.
    """
    folder = notebooks_dir(directory)
    if not folder.is_dir():
        given = " (from $" + ENV_VAR + ")" if directory is None and os.environ.get(ENV_VAR) else ""
        raise NotebookParameterError(f"the notebook folder {folder}{given} does not exist or is not a folder: check "
                                     "the path (`workbench notebooks copy DIR` makes a copy of the series to edit)")
    found = sorted(folder.glob(NOTEBOOK_GLOB))
    if not found:
        raise NotebookParameterError(
            f"no notebooks named NN_name.ipynb in {folder}: pass the folder explicitly or set ${ENV_VAR}"
        )
    return found


def select_notebooks(notebooks: Sequence[Path], only: str | Sequence[str] | None) -> list[Path]:
    """Keep the notebooks whose number or name matches ``only`` (``"02"`` or ``"2"``, ``"02_scaled"``,
    ``"positional"``): a number is a lesson number, a name is matched whole, as a prefix ending at ``_``, or, from
    three characters on, anywhere in the name.

    Raises:
        NotebookParameterError: a selector that matches no notebook.
    """
    if only is None or (not isinstance(only, str) and len(only) == 0):
        return list(notebooks)
    wanted = [only] if isinstance(only, str) else list(only)
    chosen: list[Path] = []
    for sel in wanted:
        sel = str(sel).strip()
        if not sel:
            raise NotebookParameterError("--only '' is empty: give a lesson number such as '02' or part of a "
                                         "name (an unset shell variable?)")
        if sel.isdigit():  # a lesson number: 1 is lesson 01, never the lessons 10 to 19
            hits = [p for p in notebooks if p.stem[:2].isdigit() and int(p.stem[:2]) == int(sel)]
        else:
            hits = [p for p in notebooks if p.stem == sel or p.stem.startswith(f"{sel}_")
                    or (len(sel) > 2 and sel in p.stem)]
        if not hits:
            raise NotebookParameterError(
                f"--only {sel!r} matches none of {[p.stem for p in notebooks]}: use a number such as "
                f"{notebooks[0].stem[:2]!r} or part of a name"
            )
        chosen += [p for p in hits if p not in chosen]
    return sorted(chosen)


def copy_notebooks(
    target: str | Path,
    only: str | Sequence[str] | None = None,
    force: bool = False,
    directory: str | Path | None = None,
    write: Callable[[Path, Path], None] | None = None,
) -> list[Path]:
    """Copy the numbered notebooks into ``target`` for editing: each ``NN_name.ipynb`` with its paired jupytext
    ``NN_name.py`` (so an edit in JupyterLab keeps both in step where jupytext is installed).

    Args:
        target: the folder to copy into (created if missing).
        only: notebook numbers or names to copy (default: all), as in :func:`select_notebooks`.
        force: overwrite files of the same names already in ``target``.
        directory: where to copy from (default: see :func:`notebooks_dir`).
        write: how one file is written, ``write(source, destination)`` (default: its contents copied as they are;
            :func:`workbench.tools.book.assign.copy_student` passes one that strips the exercise solutions).

    Returns:
        The files written, in order.

    Raises:
        NotebookCopyError: ``target`` already holds one of the files (nothing is copied) and ``force`` is
            False, or ``target`` is a file.
        NotebookParameterError: no notebook to copy, or an ``only`` that matches none.
    """
    sources = [f for nb in select_notebooks(list_notebooks(directory), only)
               for f in (nb, nb.with_suffix(".py")) if f.is_file()]
    folder = Path(target).expanduser()
    if folder.exists() and not folder.is_dir():
        raise NotebookCopyError(f"{folder} is a file, not a folder: give a folder to copy the notebooks into")
    if sources and folder.exists() and folder.resolve() == sources[0].parent.resolve():
        raise NotebookCopyError(f"{folder} is the folder the notebooks are copied from: nothing was copied (with "
                                "--force they would overwrite themselves); choose another folder")
    clashes = [folder / f.name for f in sources if (folder / f.name).exists()]
    if clashes and not force:
        names = ", ".join(p.name for p in clashes[:4]) + (f" and {len(clashes) - 4} more" if len(clashes) > 4 else "")
        raise NotebookCopyError(
            f"{folder} already holds {names}: nothing was copied. Pass --force (force=True) to overwrite them, "
            "or copy into another folder"
        )
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for f in sources:
        dest = folder / f.name
        part = folder / f".{f.name}.{os.getpid()}.part"
        try:
            # contents only: an installed package's files may be read-only, the user's copies must not be
            (write or shutil.copyfile)(f, part)
            os.replace(part, dest)  # a file appears whole or not at all (a full disk left a truncated notebook)
        except OSError as exc:
            part.unlink(missing_ok=True)
            created = [p for p in written if p not in clashes]
            for p in created:  # undo this call's new files, so that copying again needs no --force
                p.unlink(missing_ok=True)
            kept = [p.name for p in written if p in clashes]
            raise NotebookCopyError(
                f"could not write {dest} ({exc.strerror or exc}): the copy stopped there and the files it had added "
                "were removed" + (f" (already replaced: {', '.join(kept)})" if kept else "")
                + ". Free some space or choose a folder you can write to, then copy again"
            ) from exc
        written.append(dest)
    return written


# -- parameters -------------------------------------------------------------------------------------------------
def notebook_parameters(path: str | Path) -> dict[str, dict[str, Any]]:
    """The notebook's ``parameters`` cell as papermill reads it: name -> ``{"name", "inferred_type_name",
    "default", "help"}`` (``default`` is the source text of the literal, ``help`` the trailing comment)."""
    import papermill

    path = Path(path)
    if not path.exists():
        raise NotebookParameterError(f"notebook {path} does not exist: check the path or run list_notebooks()")
    return dict(papermill.inspect_notebook(str(path)))


def check_parameters(path: str | Path, params: dict[str, Any]) -> None:
    """Refuse parameters the notebook does not declare, and values of the wrong type.

    The type comes from the annotation in the ``parameters`` cell (``bool``, ``int``, ``float``, ``str``); an
    int is accepted for a float, a bool is not accepted for an int.

    Raises:
        NotebookParameterError: naming the bad parameter, the closest declared name and the declared type.
    """
    declared = notebook_parameters(path)
    name_of = Path(path).name
    for name, value in params.items():
        if name not in declared:
            close = difflib.get_close_matches(name, list(declared), n=1, cutoff=0.5)
            hint = f"did you mean {close[0]}? " if close else ""
            raise NotebookParameterError(
                f"{name_of} has no parameter {name!r}: {hint}its parameters are {', '.join(sorted(declared))}"
            )
        type_name = str(declared[name].get("inferred_type_name") or "").strip()
        expected = PARAMETER_TYPES.get(type_name)
        if expected is None:
            continue  # no annotation papermill understands: nothing to check against
        ok = isinstance(value, expected) and not (isinstance(value, bool) and type_name != "bool")
        if not ok:
            raise NotebookParameterError(
                f"{name_of}: parameter {name} is declared {type_name} (default {declared[name].get('default')}), "
                f"got {value!r} of type {type(value).__name__}: pass a {type_name}"
            )


def parse_parameters(items: Sequence[str]) -> dict[str, Any]:
    """``["SMOKE=True", "D_MODEL=128", "SENTENCE=a b"]`` -> a dict; values are Python literals, anything that
    is not a literal stays a string (for the CLI's ``-p NAME=VALUE``)."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise NotebookParameterError(f"parameter {item!r} is not NAME=VALUE: write it like D_MODEL=128")
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            value = raw
        out[name.strip()] = value
    return out


# -- running ----------------------------------------------------------------------------------------------------
def absolute_path(path: str | Path) -> str:
    """``path`` made absolute against the current working directory (``~`` expanded)."""
    return os.path.abspath(os.path.expanduser(str(path)))


def resolve_path_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``params`` whose non-empty path parameters (``CHECKPOINT``, ``*_DIR``, ``*_FILE``, ``*_PATH``)
    are absolute, resolved against the caller's working directory: the kernel runs in the report folder, where
    a relative path would point nowhere."""
    return {k: absolute_path(v) if PATH_PARAMETER.match(k) and isinstance(v, str) and v else v for k, v in params.items()}
