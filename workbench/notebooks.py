"""Run the notebook series headless: papermill execution, parameter checks, HTML reports and an index page."""

from __future__ import annotations

import difflib
import html
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from .errors import NotebookParameterError

log = logging.getLogger(__name__)

_TYPES = {"bool": bool, "int": int, "float": float, "str": str}


def notebooks_dir(directory: str | Path | None = None) -> Path:
    """``directory``, else ``$WORKBENCH_NOTEBOOKS``, else ``notebooks/`` next to the package (source checkout)."""
    if directory is not None:
        return Path(directory)
    if os.environ.get("WORKBENCH_NOTEBOOKS"):
        return Path(os.environ["WORKBENCH_NOTEBOOKS"])
    return Path(__file__).resolve().parents[1] / "notebooks"


def list_notebooks(directory: str | Path | None = None) -> list[Path]:
    """The numbered notebooks (``NN_name.ipynb``), in order."""
    folder = notebooks_dir(directory)
    found = sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb"))
    if not found:
        raise NotebookParameterError(f"no notebooks (NN_name.ipynb) in {folder}: pass --dir or set WORKBENCH_NOTEBOOKS")
    return found


def notebook_parameters(path: str | Path) -> dict[str, dict[str, Any]]:
    """The names, annotated types and defaults of the notebook's ``parameters`` cell (via papermill)."""
    import papermill

    return papermill.inspect_notebook(str(path))


def check_parameters(path: str | Path, params: dict[str, Any]) -> None:
    """Refuse misspelt or ill-typed parameters (papermill itself only warns)."""
    declared = notebook_parameters(path)
    for name, value in params.items():
        if name not in declared:
            close = difflib.get_close_matches(name, list(declared), n=1)
            hint = f" did you mean {close[0]}?" if close else ""
            raise NotebookParameterError(
                f"{Path(path).name} has no parameter {name!r}:{hint} its parameters are {sorted(declared)}"
            )
        expected = _TYPES.get(str(declared[name].get("inferred_type_name", "")).strip())
        ok = expected is None or isinstance(value, expected) or (expected is float and isinstance(value, int))
        if expected is int and isinstance(value, bool):
            ok = False
        if not ok:
            raise NotebookParameterError(
                f"{Path(path).name}: parameter {name} must be {expected.__name__}, got {value!r} ({type(value).__name__})"
            )


def _kernel_name() -> str:
    """A kernel for this interpreter; installs the ``python3`` kernelspec for the user if none exists."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if "python3" not in specs:
        from ipykernel.kernelspec import install

        install(user=True)
    return "python3"


def export_html(executed: Path, target: Path) -> Path:
    """HTML of an executed notebook; outputs keep plotly.js embedded (figures render offline)."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(executed, as_version=4)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    target.write_text(body, encoding="utf-8")
    return target


def run_notebook(
    path: str | Path,
    out_dir: str | Path,
    parameters: dict[str, Any] | None = None,
    smoke: bool = False,
    timeout: int | None = None,
    html_report: bool = True,
) -> dict[str, Any]:
    """Execute one notebook with papermill in its own output folder; return name, status, seconds, metrics."""
    import papermill

    path = Path(path).resolve()
    params = dict(parameters or {})
    declared = notebook_parameters(path)
    if smoke:
        params["SMOKE"] = True
    params = {k: v for k, v in params.items() if k in declared or k == "SMOKE"}
    check_parameters(path, params)
    work = Path(out_dir).resolve() / path.stem
    work.mkdir(parents=True, exist_ok=True)
    (work / "metrics.json").unlink(missing_ok=True)
    executed = work / path.name
    start = time.perf_counter()
    result: dict[str, Any] = {"name": path.stem, "notebook": str(executed), "parameters": params}
    try:
        papermill.execute_notebook(
            str(path), str(executed), parameters=params, cwd=str(work), kernel_name=_kernel_name(),
            progress_bar=False, log_output=False, execution_timeout=timeout,
        )
        result["status"] = "ok"
    except Exception as exc:  # papermill raises PapermillExecutionError with the cell's traceback
        result["status"] = "failed"
        result["error"] = str(exc)[-2000:]
    result["seconds"] = round(time.perf_counter() - start, 1)
    metrics_file = work / "metrics.json"
    result["metrics"] = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
    if html_report and executed.exists():
        result["html"] = str(export_html(executed, work.with_suffix(".html")))
    return result


def _select(notebooks: list[Path], only: list[str] | None) -> list[Path]:
    if not only:
        return notebooks
    chosen = [p for p in notebooks if any(p.stem.startswith(o) or o in p.stem for o in only)]
    if not chosen:
        raise NotebookParameterError(f"--only {only} matches none of {[p.stem for p in notebooks]}")
    return chosen


def write_index(results: list[dict[str, Any]], out_dir: Path) -> Path:
    rows = []
    for r in results:
        headline = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in list(r.get("metrics", {}).items())[:6] if isinstance(v, (int, float, str)))
        link = Path(r["html"]).name if r.get("html") else ""
        rows.append(
            f"<tr><td><a href='{html.escape(link)}'>{html.escape(r['name'])}</a></td><td>{r['status']}</td>"
            f"<td>{r['seconds']:.1f}</td><td>{html.escape(headline)}</td></tr>"
        )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Attention Workbench reports</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:4px 12px;border-bottom:1px solid #ddd}</style>"
        "</head><body><h1>Attention Workbench: notebook reports</h1><table><tr><th>notebook</th><th>status</th>"
        f"<th>seconds</th><th>headline metrics</th></tr>{''.join(rows)}</table></body></html>"
    )
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    (out_dir / "summary.json").write_text(json.dumps(results, indent=1, default=str))
    return index


def run_series(
    out_dir: str | Path = "reports",
    smoke: bool = False,
    only: list[str] | None = None,
    parameters: dict[str, Any] | None = None,
    directory: str | Path | None = None,
) -> list[dict[str, Any]]:
    """Run the numbered notebooks in order; writes per-notebook HTML, ``index.html`` and ``summary.json``.

    ``parameters`` apply to every notebook that declares them (a name no notebook declares is an error).
    """
    from tqdm.auto import tqdm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    notebooks = _select(list_notebooks(directory), only)
    if parameters:
        known = set().union(*(notebook_parameters(p) for p in notebooks))
        unknown = sorted(set(parameters) - known)
        if unknown:
            close = {u: difflib.get_close_matches(u, sorted(known), n=1) for u in unknown}
            raise NotebookParameterError(f"no notebook has parameter(s) {unknown} (closest: {close}); known: {sorted(known)}")
    results = []
    for nb in tqdm(notebooks, desc="notebooks", unit="nb"):
        log.info("running %s", nb.name)
        results.append(run_notebook(nb, out, parameters=parameters, smoke=smoke))
        write_index(results, out)
    return results
