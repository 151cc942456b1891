"""The notebooks as a rendered, offline book: a static site built by Sphinx + myst-nb + sphinx-book-theme.

``workbench book build`` executes the notebook series with :func:`workbench.tools.book.runner.run_series` (or reuses the
executed copies of an earlier ``workbench notebooks run`` with ``--from-reports``), turns each executed notebook
into one page in series order, adds a home page, a concepts page and a models page from ``workbench/book_src/``,
and runs ``sphinx-build`` with execution switched off. ``workbench book serve`` serves the result over HTTP.

Offline by construction (what the builder does to each executed notebook before Sphinx sees it):

* plotly: every figure output is rewritten from its ``application/vnd.plotly.v1+json`` data into a ``<div>`` that
  calls ``Plotly.newPlot``; plotly.js itself is copied from the installed ``plotly`` package into ``_static`` and
  loaded once per page (the 4.5 MB copy the ``notebook`` renderer embeds, and the MathJax CDN script plotly adds
  to each figure, are dropped);
* math: MathJax 3 from the ``sphinx-mathjax-offline`` package, copied into ``_static/mathjax`` (SVG output, so no
  web fonts are fetched);
* widgets: the embedded widget state cannot redraw an anywidget ``FigureWidget`` without its front-end module
  (which the ipywidgets HTML manager would fetch from a CDN) and its controls need a kernel, so each widget output
  becomes a snapshot: its plotly figures drawn from the stored state (interactive: hover, zoom), its HTML texts,
  and a line naming the controls and their values;
* any other output that loads a script, style or image from the network (bertviz's require.js and d3, for
  example) is replaced by a note saying so;
* every page ends with the notebook's closing checks: each ``assert`` with whether it held, failed or was not
  reached, and the values of its ``metrics.json``.

Search works from ``file://``: Sphinx loads ``searchindex.js`` with a script tag, so the search page lists the
matching pages. The excerpt under each hit is fetched from the page itself, which browsers refuse on ``file://``;
over ``workbench book serve`` the excerpts appear too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from workbench.errors import BookError
from workbench.tools.book.pages import BookPage, Check, closing_checks, pages_from_reports, prepare_notebook
from workbench.tools.book.sphinx_build import run_sphinx

log = logging.getLogger(__name__)

BOOK_SRC = Path(__file__).resolve().parents[2] / "book_src"  # conf.py and the hand-written pages


@dataclasses.dataclass(frozen=True)
class BookResult:
    """What :func:`build_book` produced."""

    out_dir: Path  # the site: open out_dir / "index.html"
    pages: list[BookPage]
    run_seconds: float  # executing the notebooks (0 with from_reports)
    sphinx_seconds: float  # sphinx-build
    warnings: list[str]  # Sphinx's warnings

    @property
    def index(self) -> Path:
        return self.out_dir / "index.html"

    @property
    def ok(self) -> bool:
        return all(p.status == "ok" for p in self.pages)


# -- the hand-written pages ---------------------------------------------------------------------------------------
def _demote(markdown: str, levels: int = 1) -> str:
    """Push every ATX heading down ``levels`` levels (outside fenced code)."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and re.match(r"^#{1,5} ", line):
            line = "#" * levels + line
        out.append(line)
    return "\n".join(out)


def models_markdown(root: str | Path | None = None) -> tuple[str, list[str]]:
    """The models page (every shipped model's CARD.md) and the list of model names."""
    from workbench.translation.shipped import WEIGHTS_DIR, list_pretrained

    folder = Path(root) if root is not None else WEIGHTS_DIR
    names = list_pretrained(folder)
    lines = ["# Shipped models", ""]
    if not names:
        lines.append("No trained model is installed with this copy of the workbench (`workbench/pretrained/` holds "
                     "none). The notebooks that need one train a small model themselves or take a `CHECKPOINT` "
                     "parameter.")
    for name in names:
        card = folder / name / "CARD.md"
        text = card.read_text(encoding="utf-8") if card.exists() else f"`{name}` ships without a CARD.md."
        if not text.lstrip().startswith("# "):
            text = f"# {name}\n\n{text}"
        lines += [_demote(text), ""]
    return "\n".join(lines) + "\n", names


def _models_summary(names: Sequence[str]) -> str:
    if not names:
        return ("No trained model is installed with this copy of the workbench; see {doc}`models` for what the "
                "notebooks do without one.")
    return "\n".join(f"- `{n}`: its card is on {{doc}}`the models page <models>`." for n in names)


def _series_table(pages: Sequence[BookPage], checks: dict[str, list[Check]]) -> str:
    rows = ["| lesson | ran | seconds | checks that held, of those that ran | skipped |", "|---|---|---|---|---|"]
    for p in pages:
        held = sum(c.status == "held" for c in checks[p.name])
        skipped = sum(c.status == "skipped" for c in checks[p.name])
        ran = sum(c.status in ("held", "failed") for c in checks[p.name])
        took = f"{p.seconds:.0f}" if p.seconds is not None else "–"
        status = "ok" if p.status == "ok" else "**failed**"
        rows.append(f"| {{nb}}`{p.name}` | {status} | {took} | {held} of {ran} | {skipped} |")
    return "\n".join(rows)


def _build_note(pages: Sequence[BookPage]) -> str:
    smoke = [p.name[:2] for p in pages if p.parameters.get("SMOKE")]
    failed = [p.name[:2] for p in pages if p.status != "ok"]
    parts = []
    if smoke:
        parts.append(
            ":::{important}\nThis copy of the book was built from SMOKE runs (notebooks "
            f"{', '.join(smoke)}): every size is shrunk so that it builds in minutes, so its numbers are not the "
            "lessons' real results. `workbench book build` without `--smoke` runs them at full size.\n:::")
    if failed:
        parts.append(f":::{{error}}\nNotebooks {', '.join(failed)} stopped with an error; their pages show how far "
                     "they got and which check failed.\n:::")
    return "\n\n".join(parts)


def write_sources(pages: Sequence[BookPage], src: str | Path, solutions: bool = True) -> list[str]:
    """Fill a Sphinx source folder: the template of ``book_src/``, the prepared notebooks, the generated home and
    models pages, and plotly.js in ``_static``. ``solutions=False`` shows each exercise as its stub (a course's
    public book). Returns the changes made to notebook outputs."""
    import nbformat
    import plotly

    from workbench.tools.book.assign import book_solutions, book_stubs

    src = Path(src)
    shutil.copytree(BOOK_SRC, src, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    static = src / "_static"
    static.mkdir(exist_ok=True)
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", static / "plotly.min.js")
    from workbench.tools.book.translate_page import add_page

    translate = add_page(src)  # "Translate in your browser" (None, logged in one line, without Node.js)
    changes: list[str] = []
    checks: dict[str, list[Check]] = {}
    for page in pages:
        nb, made = prepare_notebook(page)
        if solutions:
            book_solutions(nb)  # exercise cells show their solution (collapsed by their hide-input tag), not the markers
        else:
            book_stubs(nb)  # exercise cells show the student's stub: no solution anywhere in the site
        changes += [f"{page.name}: {c}" for c in made]
        checks[page.name] = closing_checks(nb, page.metrics)
        nbformat.write(nb, str(src / f"{page.name}.ipynb"))
    models_md, names = models_markdown()
    (src / "models.md").write_text(models_md, encoding="utf-8")
    index = (src / "index.md").read_text(encoding="utf-8")
    lessons = "\n".join(p.name for p in pages)
    for key, value in {"{{ build_note }}": _build_note(pages), "{{ series_table }}": _series_table(pages, checks),
                       "{{ models }}": _models_summary(names), "{{ lessons }}": lessons,
                       "{{ translate }}": translate or "",
                       "{{ translate_link }}": "{doc}`translate`: type German, read the English and its attention, "
                                               "all in this page (served)." if translate else ""}.items():
        index = index.replace(key, value)
    (src / "index.md").write_text(index, encoding="utf-8")
    return changes


def _check_out(out: Path) -> None:
    """Refuse an ``--out`` that is a file or a folder holding anything but an earlier book (Sphinx's ``.buildinfo``)."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / ".buildinfo").exists())):
        raise BookError(f"{out} exists and is not a book built earlier: choose an empty or new --out folder")


MANIFEST = ".workbench-book.json"  # in a built book: the entries the build wrote (all an earlier book's own files)


def _clear_out(out: Path) -> None:
    """Remove an earlier book's own files (those its manifest lists); refuse to touch a folder that is not one."""
    if not out.exists():
        return
    _check_out(out)
    for name in {*_written(out), ".buildinfo", MANIFEST}:
        _remove(out / name)


def _written(out: Path) -> list[str]:
    """The top-level names an earlier build wrote into ``out`` (none recorded: a book from before the manifest)."""
    try:
        names = json.loads((out / MANIFEST).read_text(encoding="utf-8"))["written"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [n for n in names if isinstance(n, str) and n and "/" not in n and n not in (".", "..")]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _install(built: Path, out: Path) -> None:
    """Put the book built in ``built`` into ``out``: an earlier book's own files replaced, whatever else the folder
    holds kept (the ``.git`` of a gh-pages worktree, a ``CNAME``, the user's notes), and the new files listed."""
    _clear_out(out)
    out.mkdir(parents=True, exist_ok=True)
    new = sorted(p.name for p in built.iterdir())
    for name in new:
        _remove(out / name)  # a user's file of a name the book writes is the book's now
        shutil.move(str(built / name), str(out / name))
    (out / MANIFEST).write_text(json.dumps({"written": new}, indent=1), encoding="utf-8")


def build_book(
    out: str | Path = "book",
    smoke: bool = False,
    only: str | Sequence[str] | None = None,
    from_reports: str | Path | None = None,
    reports: str | Path = "reports",
    parameters: dict[str, Any] | None = None,
    threads: int | None = None,
    timeout: int | None = None,
    jobs: int | None = 1,
    solutions: bool = True,
) -> BookResult:
    """Build the book: execute the notebooks (or reuse executed copies), then run Sphinx.

    Args:
        out: the site's folder (replaced if it holds an earlier book).
        smoke: run the notebooks with ``SMOKE=True``.
        only: notebook numbers or names to include (default: all, in series order).
        from_reports: reuse the executed notebooks of this ``notebooks run`` folder instead of running them.
        reports: where the notebooks are executed (ignored with ``from_reports``).
        parameters, threads, timeout, jobs: as in :func:`workbench.tools.book.runner.run_series` (``jobs=None``, as
            the command line passes by default: two notebooks at a time on a machine with two or more cores).
        solutions: show each exercise's solution (collapsed); False shows the student's stub instead
            (``--no-solutions``, for a course's public site).

    Returns:
        A :class:`BookResult`; a notebook that failed still gets its page (``result.ok`` is then False).

    Raises:
        BookError: no executed notebook, Sphinx missing, or the Sphinx build failed.
    """
    from workbench.tools.book.runner import run_series

    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise BookError(f"--jobs {jobs!r}: run 1 notebook at a time or more (the default: 2 on a machine with 2 or "
                        "more cores)")
    if from_reports is not None and (threads is not None or timeout is not None or (jobs or 1) > 1):
        raise BookError("--jobs, --threads and a timeout apply when the notebooks run: drop them with "
                        "--from-reports, or drop --from-reports to run the notebooks again")
    out = Path(out).expanduser().resolve()
    _check_out(out)  # before the notebooks run: a wrong --out is refused at once, not after the whole series
    t0 = time.perf_counter()
    if from_reports is not None:
        if smoke or parameters:
            raise BookError("--smoke and -p apply when the notebooks run: drop them with --from-reports, or drop "
                            "--from-reports to run the notebooks again")
        pages = pages_from_reports(from_reports, only)
    else:
        results = run_series(out_dir=reports, smoke=smoke, only=only, parameters=parameters, threads=threads,
                             timeout=timeout, jobs=jobs)
        pages = pages_from_reports(reports, [r["name"] for r in results])
    run_seconds = time.perf_counter() - t0 if from_reports is None else 0.0
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="workbench-book-") as tmp:
        src = Path(tmp) / "src"
        for change in write_sources(pages, src, solutions=solutions):
            log.info("offline: %s", change)
        # built in the temporary folder, then moved: myst-nb writes a jupyter_execute/ folder beside the output
        # folder, and a failed build leaves an earlier book in place
        built = Path(tmp) / "site"
        warnings = run_sphinx(src, built, Path(tmp) / "doctrees")
        _install(built, out)
    for w in warnings:
        log.warning("sphinx: %s", w)
    return BookResult(out_dir=out, pages=pages, run_seconds=round(run_seconds, 2),
                      sphinx_seconds=round(time.perf_counter() - t1, 2), warnings=warnings)


# -- serving ------------------------------------------------------------------------------------------------------
class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("book serve: " + format, *args)


def serve(directory: str | Path = "book", port: int = 8000, bind: str = "127.0.0.1") -> ThreadingHTTPServer:
    """An HTTP server for a built book (call ``serve_forever()`` on it; ``port=0`` picks a free port).

    Raises:
        BookError: the folder holds no built book.
    """
    folder = Path(directory).expanduser().resolve()
    if not (folder / "index.html").exists():
        raise BookError(f"no book in {folder} (no index.html): build it with `workbench book build --out {directory}`")
    handler = functools.partial(_QuietHandler, directory=str(folder))
    try:
        return ThreadingHTTPServer((bind, port), handler)
    except OSError as exc:  # a port in use, or an address this machine does not have (or cannot resolve)
        fix = ("pick another --port" if exc.errno in (errno.EADDRINUSE, errno.EACCES)
               else "give --bind an address of this machine, such as 127.0.0.1 or 0.0.0.0")
        raise BookError(f"cannot serve on {bind}:{port} ({exc}): {fix}") from exc


@contextlib.contextmanager
def served(directory: str | Path) -> Iterator[str]:
    """Serve a built book on a free local port in a background thread; yields its base URL (for tests)."""
    import threading

    server = serve(directory, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
