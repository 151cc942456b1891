"""Executing the notebook series: papermill in a prepared kernel environment, HTML reports, an index page, and
several notebooks side by side (:func:`run_series`). :mod:`workbench.tools.book.notebooks` describes the report folder
and finds, copies and checks the notebooks."""

from __future__ import annotations

import contextlib
import difflib
import html
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from workbench.errors import NotebookParameterError
from workbench.tools.book.notebooks import (
    absolute_path,
    check_parameters,
    list_notebooks,
    notebook_parameters,
    resolve_path_parameters,
    select_notebooks,
)

log = logging.getLogger(__name__)

PLOTLY_CDN = re.compile(r"""<script[^>]+src=["'][^"']*(cdn\.plot\.ly|/npm/plotly|plotly[^"'/]*\.min\.js)""", re.I)
# environment variables holding paths that the kernel reads (made absolute before it starts in its own folder)
PATH_ENV_VARS = ("WORKBENCH_MULTI30K", "WORKBENCH_CACHE", "WORKBENCH_NOTEBOOKS")
# kernel flag that keeps its start-up warnings (e.g. "running over TCP without encryption") off the console
QUIET_KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]

# seconds a single cell may run when the caller sets no limit: a cell of the series at default parameters takes a
# few minutes at most, so one still running after this is stuck, and the run fails with a time-out instead of waiting
# for ever; 0 means no limit. (The stuck runs seen so far were a kernel reply missed by the client's wait, which
# kernel_client.py now prevents; this limit stays as the net under anything else.)
DEFAULT_CELL_TIMEOUT = 1800

# seconds each notebook of the series took at default parameters, two at a time with one thread each, on an idle
# 2-core CPU (bench/results/book/full-jobs2-46a0025.json); only the order in which side-by-side runs start uses them
DEFAULT_SECONDS = {"01": 185, "02": 14, "03": 12, "04": 69, "05": 16, "06": 60, "07": 64, "08": 51, "09": 695,
                   "10": 66, "11": 17, "12": 321, "13": 209, "14": 15, "15": 69, "16": 17, "17": 60, "18": 206}


def kernel_name_for_this_python(preferred: str = "python3") -> str:
    """A kernelspec that runs this interpreter: ``preferred`` when it exists, else the ``python3`` kernelspec is
    installed for the user (``ipykernel.kernelspec.install``), which CI machines may lack.

    jupyter_client starts a kernelspec whose command is ``python`` with ``sys.executable``, so the kernel sees
    the same packages as the runner.
    """
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if preferred in specs:
        return preferred
    if preferred != "python3":
        raise NotebookParameterError(
            f"no Jupyter kernel named {preferred!r} (installed: {sorted(specs)}): pick one of them, or install it "
            f"with `python -m ipykernel install --user --name {preferred}`"
        )
    from ipykernel.kernelspec import install

    log.info("installing the python3 kernelspec for %s", sys.executable)
    install(user=True)
    return "python3"


@contextlib.contextmanager
def _kernel_environment(threads: int | None = None, data_dir: str | Path | None = None) -> Iterator[None]:
    """Environment the kernel inherits while notebooks run.

    * The package's parent folder goes first on PYTHONPATH, so the kernel imports this very ``workbench`` although
      it runs in the output folder (source checkouts without ``pip install -e .``); the other entries are made
      absolute.
    * The path variables of :data:`PATH_ENV_VARS` are made absolute against the caller's working directory: the
      kernel runs in the report folder, where ``WORKBENCH_MULTI30K=../shared/data/multi30k`` points nowhere.
    * ``data_dir`` (a local Multi30k folder) sets ``WORKBENCH_MULTI30K``, absolute too.
    * ``threads`` sets OMP_NUM_THREADS / MKL_NUM_THREADS: on a busy machine with few cores, torch's default of one
      thread per core can make the many small operations of a notebook run ten times slower.
    """
    root = str(Path(__file__).resolve().parents[3])
    inherited = [absolute_path(p or ".") for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)] \
        if os.environ.get("PYTHONPATH") else []
    changes = {"PYTHONPATH": os.pathsep.join([root, *inherited])}
    for name in PATH_ENV_VARS:
        if os.environ.get(name):
            changes[name] = absolute_path(os.environ[name])
    if data_dir is not None:
        changes["WORKBENCH_MULTI30K"] = absolute_path(data_dir)
    if threads is not None:
        if threads < 1:
            raise NotebookParameterError(f"threads={threads}: use 1 or more, or None for torch's default")
        changes.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    before = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def export_html(executed: str | Path, target: str | Path) -> Path:
    """Write the HTML export of an executed notebook (nbconvert, ``lab`` template).

    The figures keep the plotly.js that ``figures.setup_offline_renderer()`` embedded in the outputs, so the page
    draws them without network access.
    """
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(executed), as_version=4)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    target = Path(target)
    target.write_text(body, encoding="utf-8")
    return target


def html_is_offline(page: str) -> bool:
    """True when the page loads no plotly.js from a CDN (it may embed it, or have no figure at all)."""
    return PLOTLY_CDN.search(page) is None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _error_summary(exc: BaseException) -> str:
    """The failing cell's exception and the line that raised it (a bare ``assert`` has no message of its own)."""
    ename, evalue = getattr(exc, "ename", type(exc).__name__), getattr(exc, "evalue", str(exc))
    text = f"{ename}: {evalue}".strip()
    lines = [_ANSI.sub("", ln) for ln in "\n".join(getattr(exc, "traceback", None) or []).splitlines()]
    arrows = [ln.split("---->", 1)[1].strip() for ln in lines if "---->" in ln]  # IPython marks the failing line
    if arrows:
        text += f" (cell {getattr(exc, 'exec_count', '?')}, line {arrows[-1]})"
    return text[:2000]


def run_notebook(
    path: str | Path,
    out_dir: str | Path,
    parameters: dict[str, Any] | None = None,
    smoke: bool = False,
    kernel_name: str = "python3",
    timeout: int | None = None,
    html_report: bool = True,
    raise_on_error: bool = False,
    threads: int | None = None,
    data_dir: str | Path | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Execute one notebook with papermill in ``out_dir/NN_name/`` and collect what it measured.

    Args:
        path: the notebook.
        out_dir: parent of the notebook's output folder.
        parameters: values for the ``parameters`` cell (checked with :func:`check_parameters` first).
        smoke: set ``SMOKE=True`` (small sizes, as CI runs it).
        kernel_name: Jupyter kernel (the ``python3`` kernelspec is installed for the user if missing).
        timeout: seconds allowed per cell (None: :data:`DEFAULT_CELL_TIMEOUT`; 0: no limit).
        html_report: also write the HTML export.
        raise_on_error: re-raise a failing cell's error instead of returning ``status="failed"``.
        threads: torch threads in the kernel (OMP_NUM_THREADS); None keeps torch's default (one per core).
        data_dir: a local Multi30k folder for the kernel (sets ``WORKBENCH_MULTI30K``).
        quiet: keep the kernel's start-up warnings off the console (they are not the notebook's output).

    Relative paths (``out_dir``, ``data_dir``, path parameters, path environment variables) are resolved against
    the current working directory before the kernel starts in its own folder.

    Returns:
        ``{"name", "status" ("ok" | "failed"), "seconds", "metrics" (the notebook's metrics.json, {} if none),
        "parameters" (path parameters made absolute), "notebook" (executed .ipynb), "html" (or None), "html_offline" (no CDN plotly.js),
        "error" (only when failed)}``.

    Raises:
        NotebookParameterError: an unknown or ill-typed parameter (before anything runs).
    """
    import papermill

    from workbench.tools.book.kernel_client import register

    path = Path(path).resolve()
    params = dict(parameters or {})
    if smoke:
        params["SMOKE"] = True
    check_parameters(path, params)
    params = resolve_path_parameters(params)
    kernel = kernel_name_for_this_python(kernel_name)
    work = Path(out_dir).resolve() / path.stem
    work.mkdir(parents=True, exist_ok=True)
    metrics_file = work / "metrics.json"
    metrics_file.unlink(missing_ok=True)  # never report the metrics of an earlier run
    executed = work / path.name
    result: dict[str, Any] = {"name": path.stem, "parameters": params, "notebook": str(executed), "html": None}
    log.info("running %s with %s", path.name, params or "default parameters")
    start = time.perf_counter()
    try:
        with _kernel_environment(threads, data_dir):
            papermill.execute_notebook(
                str(path), str(executed), parameters=params, kernel_name=kernel, cwd=str(work),
                progress_bar=False, log_output=False, start_timeout=180,
                execution_timeout=DEFAULT_CELL_TIMEOUT if timeout is None else (timeout or None),
                extra_arguments=list(QUIET_KERNEL_ARGS) if quiet else [],
                engine_name=register(),  # waits on the kernel that cannot miss a reply (kernel_client.py)
            )
        stopped = stopped_early(executed)
        if stopped:  # papermill returns normally after a cell's sys.exit(0): the cells after it never ran
            raise NotebookStoppedError(stopped)
        result["status"] = "ok"
    except Exception as exc:  # papermill's PapermillExecutionError carries the failing cell's ename/evalue
        result["status"] = "failed"
        result["error"] = _error_summary(exc)
        log.warning("%s failed: %s", path.name, result["error"])
        if raise_on_error:
            raise
    finally:
        result["seconds"] = round(time.perf_counter() - start, 2)
    result["metrics"] = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
    if html_report and executed.exists():
        page = export_html(executed, work / f"{path.stem}.html")
        result["html"] = str(page)
        result["html_offline"] = html_is_offline(page.read_text(encoding="utf-8"))
    return result


class NotebookStoppedError(RuntimeError):
    """A notebook that papermill ran without an error, but not to its end (a cell called ``sys.exit(0)``)."""


def stopped_early(executed: str | Path) -> str | None:
    """None when every code cell of the executed notebook ran and none failed, else one line saying where it
    stopped (papermill records each cell's status; ``sys.exit(0)`` in a cell ends the run without an error)."""
    import nbformat

    cells = [c for c in nbformat.read(str(executed), as_version=4).cells if c.cell_type == "code"]
    states = [c.get("metadata", {}).get("papermill", {}).get("status") for c in cells]
    pending = sum(state == "pending" for state in states)
    failed = [i for i, state in enumerate(states) if state == "failed"]
    if not failed and not pending:
        return None
    where = f"code cell {failed[0] + 1} of {len(cells)} failed" if failed else "the run ended early"
    errors = [o for o in cells[failed[0]].get("outputs", []) if o.get("output_type") == "error"] if failed else []
    why = f" ({errors[0].get('ename')}: {errors[0].get('evalue')})" if errors else ""
    return f"{where}{why}; {pending} code cell(s) after it never ran"


# -- the series -------------------------------------------------------------------------------------------------
def _headline(metrics: dict[str, Any], limit: int = 6) -> str:
    parts = []
    for key, value in metrics.items():
        if isinstance(value, (bool, int, str)):
            parts.append(f"{key}={value}")
        elif isinstance(value, float):
            parts.append(f"{key}={value:.4g}")
        if len(parts) == limit:
            break
    return ", ".join(parts)


def write_index(results: Sequence[dict[str, Any]], out_dir: str | Path) -> Path:
    """Write ``index.html`` (and ``summary.json``) listing every notebook run: status, seconds, headline
    metrics, and links to its HTML report and executed notebook."""
    out = Path(out_dir)
    rows = []
    for r in results:
        folder = Path(r["notebook"]).parent
        link = (lambda p: html.escape(Path(p).relative_to(out.resolve()).as_posix()))  # noqa: E731
        name = html.escape(r["name"])
        report = f"<a href='{link(r['html'])}'>{name}</a>" if r.get("html") else name
        nb_link = f"<a href='{link(r['notebook'])}'>ipynb</a>" if Path(r["notebook"]).exists() else ""
        status = html.escape(r["status"])
        if r.get("error"):
            status += f"<br><small>{html.escape(r['error'][:300])}</small>"
        rows.append(
            f"<tr class='{html.escape(r['status'])}'><td>{report}</td><td>{status}</td><td>{r['seconds']:.1f}</td>"
            f"<td>{html.escape(_headline(r.get('metrics', {})))}</td><td>{nb_link}</td>"
            f"<td>{html.escape(folder.name)}/metrics.json</td></tr>"
        )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Attention Workbench: notebook reports</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{padding:6px 12px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}"
        "tr.failed td{background:#fdecea}</style></head><body>"
        "<h1>Attention Workbench: notebook reports</h1>"
        f"<p>{sum(r['status'] == 'ok' for r in results)} of {len(results)} notebooks ran without error.</p>"
        "<table><tr><th>notebook</th><th>status</th><th>seconds</th><th>headline metrics</th><th>executed</th>"
        f"<th>all metrics</th></tr>{''.join(rows)}</table></body></html>"
    )
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(list(results), indent=1, default=str), encoding="utf-8")
    return index


def run_series(
    out_dir: str | Path = "reports",
    smoke: bool = False,
    only: str | Sequence[str] | None = None,
    parameters: dict[str, Any] | None = None,
    directory: str | Path | None = None,
    kernel_name: str = "python3",
    timeout: int | None = None,
    threads: int | None = None,
    data_dir: str | Path | None = None,
    quiet: bool = False,
    jobs: int | None = 1,
) -> list[dict[str, Any]]:
    """Run the numbered notebooks in order and write their reports plus ``out_dir/index.html``.

    Args:
        out_dir: where the reports go (one folder per notebook).
        smoke: run every notebook with ``SMOKE=True``.
        only: notebook numbers or names to run (default: all).
        parameters: values applied to every notebook that declares them; a name that no selected notebook
            declares is an error (with the closest declared name).
        directory: the notebook folder (default: see :func:`notebooks_dir`).
        kernel_name, timeout, threads, data_dir, quiet: as in :func:`run_notebook`.
        jobs: notebooks executed at the same time, each in its own worker process and kernel (None: see
            :func:`default_jobs`). With more than one, ``threads=None`` gives each kernel an equal share of the
            cores instead of torch's one thread per core, so the kernels do not oversubscribe the CPU. The
            notebooks are independent (each has its own folder and seeds), so the results are the same ones a
            serial run with that many threads gives; they come back in series order.

    Returns:
        One result dict per notebook (see :func:`run_notebook`); a failing notebook does not stop the series.
    """
    from tqdm.auto import tqdm

    out = Path(absolute_path(out_dir))  # resolved here, where the caller stands
    if out.exists() and not out.is_dir():
        raise NotebookParameterError(f"--out {out} is a file, not a folder: choose a folder for the reports")
    notebooks = select_notebooks(list_notebooks(directory), only)
    declared = {p: notebook_parameters(p) for p in notebooks}
    parameters = dict(parameters or {})
    known = set().union(*declared.values())
    unknown = sorted(set(parameters) - known)
    if unknown:
        close = {u: difflib.get_close_matches(u, sorted(known), n=1, cutoff=0.5) for u in unknown}
        hints = ", ".join(f"{u} (did you mean {c[0]}?)" if c else u for u, c in close.items())
        raise NotebookParameterError(f"no selected notebook has the parameter(s) {hints}; known: {sorted(known)}")
    jobs = default_jobs() if jobs is None else jobs
    if not isinstance(jobs, int) or jobs < 1:
        raise NotebookParameterError(f"jobs={jobs!r}: use 1 (one notebook at a time) or more, or None for "
                                     f"{default_jobs()} on this machine")
    jobs = min(jobs, max(1, len(notebooks)))
    threads = kernel_threads(jobs, threads)
    kwargs = dict(smoke=smoke, kernel_name=kernel_name, timeout=timeout, threads=threads, data_dir=data_dir, quiet=quiet)
    own = {nb: {k: v for k, v in parameters.items() if k in declared[nb]} for nb in notebooks}
    results: list[dict[str, Any]] = []
    if jobs == 1:
        bar = tqdm(notebooks, desc="notebooks", unit="nb")
        for nb in bar:
            bar.set_postfix_str(nb.stem, refresh=True)
            results.append(run_notebook(nb, out, parameters=own[nb], **kwargs))
            write_index(results, out)  # refreshed after every notebook, so a long series can be watched
        return results
    # worker processes, not threads: run_notebook sets the kernel's environment in os.environ, which is per process
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    done: dict[Path, dict[str, Any]] = {}
    # the longest first (known series notebooks by their measured default time, others after them in series order),
    # so that no long notebook starts last while the other workers run out of work
    start_order = sorted(notebooks, key=lambda nb: -DEFAULT_SECONDS.get(nb.stem.split("_", 1)[0], 0.0))
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool, \
            tqdm(total=len(notebooks), desc=f"notebooks ({jobs} at a time)", unit="nb") as bar:
        futures = {pool.submit(_run_in_worker, nb, out, own[nb], kwargs): nb for nb in start_order}
        for future in as_completed(futures):
            nb = futures[future]
            done[nb] = future.result()
            bar.set_postfix_str(nb.stem, refresh=False)
            bar.update(1)
            write_index([done[n] for n in notebooks if n in done], out)
    return [done[nb] for nb in notebooks]


def kernel_threads(jobs: int, threads: int | None = None) -> int | None:
    """Torch threads per kernel: ``threads`` if given; with ``jobs`` kernels side by side an equal share of the
    cores (at least 1); one kernel alone keeps torch's default (None)."""
    if threads is not None or jobs <= 1:
        return threads
    return max(1, (os.cpu_count() or 1) // jobs)


def _run_in_worker(nb: Path, out: Path, parameters: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """:func:`run_notebook` in a worker process, whose loggers start unconfigured: keep them as quiet as the
    caller's console (a failure still comes back in the result)."""
    if kwargs.get("quiet"):
        for name in ("papermill", __name__):
            logging.getLogger(name).setLevel(logging.ERROR)
    return run_notebook(nb, out, parameters=parameters, **kwargs)


def default_jobs() -> int:
    """Notebooks run at the same time by default: 2 on a machine with 2 or more cores, else 1.

    The training cells of the Transformer notebooks use a second torch thread well (08 took 276 s with two threads,
    461 s with one), but the rest of a lesson (kernel start-up, plotting, tokenising, sacreBLEU, small tensor
    operations, decoding loops) keeps one core busy, so two kernels with one thread each finished the default series
    sooner on an idle 2-core CPU than one kernel with two: 10 min 41 s against 13 min 44 s, and 20 min 43 s for one
    kernel with one thread (``bench/time_book.py``: ``bench/results/book/full-jobs2-9beb237.json``,
    ``bench/results/book/full-serial-2threads-62ac516.json``, and ``bench/results/book/full-serial-dc5f0f1.json``,
    run under an inherited ``OMP_NUM_THREADS=1``).
    ``$WORKBENCH_NOTEBOOK_JOBS`` overrides it.
    """
    env = os.environ.get("WORKBENCH_NOTEBOOK_JOBS")
    if env:
        try:
            value = int(env)
        except ValueError:
            raise NotebookParameterError(f"WORKBENCH_NOTEBOOK_JOBS={env!r}: use a whole number such as 1 or 2") from None
        if value < 1:
            raise NotebookParameterError(f"WORKBENCH_NOTEBOOK_JOBS={env!r}: use 1 or more")
        return value
    return 2 if (os.cpu_count() or 1) >= 2 else 1
