"""One executed notebook as one page of the book (:mod:`workbench.tools.book.build` builds the whole book).

:func:`pages_from_reports` finds the executed notebooks of a ``notebooks run`` folder; :func:`prepare_notebook`
makes one ready for Sphinx: its outputs made offline (:func:`offline_notebook`: plotly figures redrawn from their
data, widget snapshots, network-loading outputs replaced by a note), a note on how it ran, and its closing checks
(:func:`closing_checks`, :func:`checks_markdown`) at the end.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import html
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workbench.errors import BookError

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
NOTEBOOK_NAME = re.compile(r"^\d\d_\w+$")  # NN_name, as notebooks.NOTEBOOK_GLOB
# the plotly.js copy that the "notebook" renderer embeds once per notebook (its own output, no figure in it)
PLOTLY_BUNDLE = re.compile(r"window\.PlotlyConfig|/\*\*?\s*\n?\s*\*?\s*plotly\.js v\d")
# a tag that makes the browser fetch something from the network: <script src=//...>, <link href=https://...>, ...
EXTERNAL_REF = re.compile(
    r"""<(?:script|link|img|iframe|source|embed)\b[^>]*?\b(?:src|href|data)\s*=\s*["']?((?:https?:)?//[^"'\s>]+)""",
    re.I,
)
JS_URL = re.compile(r"""["'`]((?:https?:)?//[\w.-]+\.[a-z]{2,}/[^"'`\s]*)["'`]""", re.I)  # URLs inside scripts
CHECKS_TITLE = "Closing checks"


@dataclasses.dataclass(frozen=True)
class BookPage:
    """One executed notebook, as the book shows it."""

    name: str  # NN_name (the page's file name without extension)
    notebook: Path  # the executed .ipynb
    status: str  # "ok" (ran to the end) or "failed" (a cell raised)
    seconds: float | None  # execution time, when known
    error: str | None  # the failing cell's error, when failed
    metrics: dict[str, Any]  # the notebook's metrics.json ({} when it wrote none)
    parameters: dict[str, Any]  # the parameters papermill injected (SMOKE=True for a SMOKE run)


# -- finding executed notebooks ---------------------------------------------------------------------------------
def _error_of(nb: Any) -> str | None:
    """``ename: evalue`` of the first error output of an executed notebook (None when no cell failed)."""
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "error":
                return f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".strip()
    return None


def pages_from_reports(reports: str | Path, only: str | Sequence[str] | None = None) -> list[BookPage]:
    """The executed notebooks of a ``notebooks run`` output folder (``reports/NN_name/NN_name.ipynb``), in order.

    Status comes from the executed notebook itself (a cell with an error output means it failed); run time and the
    error summary from ``summary.json`` when the folder has one.

    Raises:
        BookError: the folder holds no executed notebook (or none that ``only`` selects).
    """
    import nbformat

    from workbench.errors import NotebookParameterError
    from workbench.tools.book.notebooks import select_notebooks

    folder = Path(reports).expanduser()
    found = sorted(p for p in folder.glob("*/*.ipynb") if p.stem == p.parent.name and NOTEBOOK_NAME.match(p.stem))
    if not found:
        raise BookError(
            f"no executed notebooks (NN_name/NN_name.ipynb) in {folder}: run `workbench notebooks run --out {folder}` "
            "first"
        )
    try:
        found = select_notebooks(found, only)
    except NotebookParameterError as exc:  # a selector that matches nothing
        raise BookError(f"{exc} (in {folder})") from exc
    summary: dict[str, dict[str, Any]] = {}
    if (folder / "summary.json").exists():
        with contextlib.suppress(ValueError, TypeError):
            summary = {r["name"]: r for r in json.loads((folder / "summary.json").read_text(encoding="utf-8"))}
    pages = []
    for path in found:
        nb = nbformat.read(str(path), as_version=4)
        error = _error_of(nb)
        known = summary.get(path.stem, {})
        metrics_file = path.parent / "metrics.json"
        metrics = json.loads(metrics_file.read_text(encoding="utf-8")) if metrics_file.exists() else {}
        params = dict((nb.metadata.get("papermill") or {}).get("parameters") or known.get("parameters") or {})
        pages.append(BookPage(
            name=path.stem, notebook=path, status="failed" if error or known.get("status") == "failed" else "ok",
            seconds=known.get("seconds"), error=known.get("error") or error, metrics=metrics, parameters=params,
        ))
    return pages


# -- making a notebook offline ------------------------------------------------------------------------------------
def fit_column(layout: dict[str, Any], column: int | None = None) -> dict[str, Any]:
    """``layout`` made to fit the book's column: a figure wider than ``column`` pixels (default
    :data:`workbench.viz.figures.PAGE_WIDTH`) loses its fixed width and takes the column's (its height is kept, so
    heatmap cells get narrower, never cut); narrower figures are returned unchanged."""
    from workbench.viz.figures import PAGE_WIDTH

    column = PAGE_WIDTH if column is None else column
    width = layout.get("width")
    if not isinstance(width, (int, float)) or width <= column:
        return layout
    fitted = {k: v for k, v in layout.items() if k != "width"}
    fitted["autosize"] = True
    return fitted


def plotly_html(figure: dict[str, Any]) -> str:
    """A ``<div>`` that draws a plotly figure with the page's plotly.js (no plotly.js, no MathJax, no CDN), no wider
    than the book's column (:func:`fit_column`)."""
    import plotly.io as pio

    fig = {k: figure[k] for k in ("data", "layout", "frames") if k in figure}
    fig["layout"] = fit_column(dict(fig.get("layout") or {}))
    config = {"responsive": True, **(figure.get("config") or {})}
    return pio.to_html(fig, include_plotlyjs=False, include_mathjax=False, full_html=False, validate=False,
                       default_width="100%", default_height=525, config=config)


def _note(text: str) -> str:
    return f'<div class="admonition note offline-note"><p>{html.escape(text)}</p></div>'


def _hosts(urls: Sequence[str]) -> str:
    hosts = sorted({re.sub(r"^(?:https?:)?//([^/]+).*$", r"\1", u) for u in urls})
    return ", ".join(hosts)


def _control_text(model: dict[str, Any]) -> str | None:
    """``description = value`` of an ipywidgets control in the stored widget state (None for non-controls)."""
    s = model.get("state", {})
    label = s.get("description") or model.get("model_name", "").removesuffix("Model")
    if "_options_labels" in s and s.get("index") is not None:
        return f"{label} = {s['_options_labels'][s['index']]}"
    if "value" in s and model.get("model_name") not in ("HTMLModel", "HTMLMathModel", "LabelModel"):
        return f"{label} = {s['value']}"
    if model.get("model_name") == "ButtonModel":
        return f"button “{s.get('description', '')}”"
    return None


def widget_snapshot(model_id: str, state: dict[str, Any]) -> str | None:
    """Static HTML for a widget view from the stored widget state: its plotly figures (interactive), its HTML
    texts, and a line naming its controls and their values; a progress bar (tqdm) becomes one line of text.
    None when the state has no such model."""
    if model_id not in state:
        return None
    items: list[tuple[str, str]] = []  # (kind, html or text), in display order
    seen: set[str] = set()

    def walk(mid: str) -> None:
        if mid in seen or mid not in state:
            return
        seen.add(mid)
        model = state[mid]
        s = model.get("state", {})
        name = model.get("model_name", "")
        if "_widget_data" in s and "_widget_layout" in s:  # plotly FigureWidget (anywidget)
            items.append(("figure", plotly_html({"data": s["_widget_data"], "layout": s["_widget_layout"],
                                                 "config": s.get("_config") or {}})))
        elif name in ("HTMLModel", "HTMLMathModel", "LabelModel"):
            if s.get("value"):
                items.append(("text", str(s["value"])))
        elif name.endswith("ProgressModel"):
            frac = float(s.get("value") or 0) / float(s.get("max") or 1)
            filled = max(0, min(20, round(20 * frac)))
            items.append(("progress", "▕" + "█" * filled + " " * (20 - filled) + "▏"))
        else:
            text = _control_text(model)
            if text:
                items.append(("control", text))
        for child in s.get("children", []) or []:
            if isinstance(child, str) and child.startswith("IPY_MODEL_"):
                walk(child[len("IPY_MODEL_"):])

    walk(model_id)
    if any(kind == "progress" for kind, _ in items):  # a tqdm bar: description, bar, counts on one line
        line = " ".join(html.unescape(re.sub(r"<[^>]+>", "", v)) if k == "text" else v
                        for k, v in items if k in ("text", "progress"))
        return f'<pre class="progress-snapshot">{html.escape(line)}</pre>'
    if not items:
        return None
    head = ("A snapshot of the interactive widget as it was when the notebook ran: its figures still respond to "
            "hover and zoom, but its controls need a running kernel (open the notebook in JupyterLab).")
    controls = [v for k, v in items if k == "control"]
    if controls:
        head += " Controls: " + "; ".join(controls) + "."
    body = "".join(v if k == "figure" else f'<div class="widget-snapshot-text">{v}</div>'
                   for k, v in items if k in ("figure", "text"))
    return f'<div class="widget-snapshot">{_note(head)}{body}</div>'


def offline_notebook(nb: Any) -> list[str]:
    """Rewrite an executed notebook's outputs (in place) so that the page needs no network; returns one line
    per change that removed something (for the build log)."""
    state = ((nb.metadata.get("widgets") or {}).get(WIDGET_STATE_MIME) or {}).get("state") or {}
    changes: list[str] = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        kept = []
        noted = False
        for out in cell.get("outputs", []):
            data = out.get("data")
            if out.get("output_type") not in ("display_data", "execute_result") or not data:
                kept.append(out)
                continue
            html_text = str(data.get("text/html", ""))
            if PLOTLY_MIME in data:
                out["data"] = {"text/html": plotly_html(dict(data[PLOTLY_MIME])),
                               "text/plain": data.get("text/plain", "plotly figure")}
            elif html_text and PLOTLY_BUNDLE.search(html_text[:4000]) and "Plotly.newPlot" not in html_text[-20000:]:
                continue  # plotly.js itself: the page loads _static/plotly.min.js instead
            elif WIDGET_VIEW_MIME in data:
                snap = widget_snapshot(str(data[WIDGET_VIEW_MIME].get("model_id", "")), state)
                out["data"] = {"text/html": snap or _note(
                    "An interactive widget that needs a running kernel (open the notebook in JupyterLab)."),
                    "text/plain": data.get("text/plain", "widget")}
                if not (snap or "").startswith('<pre class="progress-snapshot">'):
                    changes.append(f"cell {index}: widget shown as a snapshot")
            else:
                urls = EXTERNAL_REF.findall(html_text) if html_text else []
                if "application/javascript" in data:
                    urls += JS_URL.findall(str(data["application/javascript"]))
                if not urls:
                    kept.append(out)
                    continue
                changes.append(f"cell {index}: output loading {_hosts(urls)} left out")
                if noted:
                    continue
                noted = True
                out["data"] = {"text/html": _note(
                    f"This output loads its JavaScript or styles from the internet ({_hosts(urls)}), so the offline "
                    "book leaves it out; the figures next to it show the same data. Run the notebook online to see it.")}
            kept.append(out)
        cell["outputs"] = kept
    nb.metadata.pop("widgets", None)  # no widget state left to render: myst-nb then loads no require.js / CDN script
    return changes


# -- the closing checks -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Check:
    """One ``assert`` of a notebook."""

    cell: int  # index of its code cell
    source: str  # the asserted expression, on one line
    condition: str  # "" or the enclosing ``if``/``for``/``while`` headers ("if not SMOKE")
    comment: str  # the comment on its line or the comment lines just above it
    status: str  # "held" | "failed" | "not reached" | "skipped" (its ``if`` was false in this run)
    guards: tuple[tuple[bool, str], ...] = ()  # the enclosing ``if`` tests: (must be true?, expression)
    known: bool = True  # False: a guard could not be evaluated from the run's parameters and metrics


def _one_line(text: str, limit: int = 220) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _asserts_in(source: str) -> list[tuple[str, str, str, tuple[tuple[bool, str], ...]]]:
    """(expression, condition, comment, guards) for every ``assert`` statement of a cell, in order; ``guards`` are
    the enclosing ``if`` tests as (must be true?, expression)."""
    lines = source.splitlines()
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics: fall back on lines that start with assert
        return [(_one_line(ln.strip()[len("assert"):].split("#")[0].strip()), "", "", ())
                for ln in lines if ln.strip().startswith("assert ")]
    found: list[tuple[str, str, str, tuple[tuple[bool, str], ...]]] = []

    def comment_for(node: ast.AST) -> str:
        last = lines[node.end_lineno - 1][node.end_col_offset:] if node.end_lineno else ""
        if "#" in last:
            return last.split("#", 1)[1].strip()
        above = []
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#"):
            above.insert(0, lines[i].strip().lstrip("#").strip())
            i -= 1
        return " ".join(above)

    def visit(body: Sequence[ast.stmt], context: list[str], guards: tuple[tuple[bool, str], ...]) -> None:
        for node in body:
            if isinstance(node, ast.Assert):
                expr = ast.get_source_segment(source, node.test) or ast.unparse(node.test)
                found.append((_one_line(expr), " → ".join(context), comment_for(node), guards))
            elif isinstance(node, ast.If):
                cond = ast.get_source_segment(source, node.test) or ast.unparse(node.test)
                test = ast.unparse(node.test)
                visit(node.body, [*context, f"if {_one_line(cond, 80)}"], (*guards, (True, test)))
                visit(node.orelse, [*context, f"unless {_one_line(cond, 80)}"], (*guards, (False, test)))
            elif isinstance(node, (ast.For, ast.While)):
                head = (f"for {ast.unparse(node.target)} in {_one_line(ast.unparse(node.iter), 60)}"
                        if isinstance(node, ast.For) else f"while {_one_line(ast.unparse(node.test), 60)}")
                visit(node.body, [*context, head], guards)
                visit(node.orelse, context, guards)
            elif isinstance(node, (ast.With, ast.Try)):
                visit(node.body, context, guards)
                for extra in (getattr(node, "orelse", []), getattr(node, "finalbody", [])):
                    visit(extra, context, guards)
            # asserts inside functions and classes run only when called: not listed as checks

    visit(tree.body, [], ())
    return found


SAFE_BUILTINS = {"len": len, "abs": abs, "min": min, "max": max, "bool": bool, "int": int, "float": float,
                 "str": str, "True": True, "False": False, "None": None}


def run_namespace(nb: Any, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a check's ``if`` can be judged against after the run: the notebook's parameters (its ``parameters`` cell,
    then papermill's ``injected-parameters`` cell, both plain literal assignments) and ``metrics`` (its metrics.json)."""
    names: dict[str, Any] = {}
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "code" and ("parameters" in tags or "injected-parameters" in tags):
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:
                continue
            for node in tree.body:
                target = node.target if isinstance(node, ast.AnnAssign) else (
                    node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
                if isinstance(target, ast.Name) and node.value is not None:
                    try:
                        names[target.id] = ast.literal_eval(node.value)
                    except ValueError:
                        pass
    if metrics is not None:
        names["metrics"] = metrics
    return names


def _ran(guards: tuple[tuple[bool, str], ...], names: dict[str, Any]) -> bool | None:
    """Whether every guard had its required truth in this run; None when one cannot be evaluated from ``names``."""
    for must, test in guards:
        try:
            value = bool(eval(test, {"__builtins__": SAFE_BUILTINS}, dict(names)))  # noqa: S307 (the notebook's own code)
        except Exception:
            return None
        if value != must:
            return False
    return True


def closing_checks(nb: Any, metrics: dict[str, Any] | None = None) -> list[Check]:
    """Every ``assert`` of an executed notebook with its outcome: asserts in cells before the first failing cell
    held, those of the failing cell are marked failed (one of them, or the cell's code, raised), later ones were
    not reached. An assert under an ``if`` that was false in this run (judged from the run's parameters and
    ``metrics``) did not run: it is ``skipped``, not held; one whose ``if`` cannot be judged so is marked
    ``known=False``."""
    names = run_namespace(nb, metrics)
    failed_cell = None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            failed_cell = index
            break
    checks = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or "assert" not in cell.source:
            continue
        status = ("held" if failed_cell is None or index < failed_cell
                  else "failed" if index == failed_cell else "not reached")
        for expr, cond, comment, guards in _asserts_in(cell.source):
            ran = _ran(guards, names) if guards else True
            skipped = ran is False and status == "held"  # an assert of a failing or later cell keeps its status
            checks.append(Check(index, expr, cond, comment, "skipped" if skipped else status, guards, ran is not None))
    return checks


def _code(text: str) -> str:
    """Markdown inline code for any text (a longer backtick fence when the text holds backticks)."""
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _plain(text: str) -> str:
    """Text shown as it is in Markdown: every character Markdown (or MyST) could act on is backslash-escaped, so
    a comment such as ``tgt_in = <bos> + tgt_out[:-1]`` keeps its ``<bos>``."""
    return re.sub(r"([\\`*_{}\[\]<>|$~#!])", r"\\\1", text)


def _cell_text(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        text = str(value)
    elif isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (int, str)):
        text = str(value)
    else:
        text = json.dumps(value, default=str)
    return _plain(_one_line(text, 160))


def checks_summary(checks: Sequence[Check]) -> str:
    """One sentence on a finished run's checks: how many ran and held, how many were skipped (their ``if`` was
    false in this run), how many sit under an ``if`` the page cannot judge."""
    held = sum(c.status == "held" for c in checks)
    skipped = sum(c.status == "skipped" for c in checks)
    unknown = sum(c.status == "held" and not c.known for c in checks)
    text = f"The notebook ran to the end: {held} of its checks ran and held"
    if skipped:
        text += (f"; {skipped} did not run, because the condition they sit under was false with these parameters "
                 "(marked skipped below)")
    if unknown:
        text += (f"; {unknown} of those that held sit under a condition this page cannot evaluate from the parameters "
                 "and metrics, and are counted as held because the cell ran")
    return text + "."


def checks_markdown(nb: Any, page: BookPage) -> str:
    """The section appended to every page: status, each assert with its outcome, and the metrics table."""
    checks = closing_checks(nb, page.metrics)
    symbol = {"held": "✓ held", "failed": "✗ failed", "not reached": "– not reached", "skipped": "– skipped"}
    if page.status == "ok":
        lead = checks_summary(checks)
    else:
        lead = (f"**The notebook stopped with an error**: {_code(_one_line(page.error or 'unknown error', 400))}. "
                "Checks in the cells before the failing one held; the failing cell's checks are marked failed "
                "(one of them, or other code in that cell, raised) and later ones did not run.")
    lines = [f"## {CHECKS_TITLE}", "", lead, ""]
    for c in checks:
        where = f" (under {_code(c.condition)})" if c.condition else ""
        why = f" — {_plain(c.comment)}" if c.comment else ""
        lines.append(f"- **{symbol[c.status]}**: {_code(c.source)}{where}{why}")
    if not checks:
        lines.append("This notebook has no assert statement.")
    lines += ["", "### What it measured (`metrics.json`)", ""]
    if page.metrics:
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| {_cell_text(k)} | {_cell_text(v)} |" for k, v in page.metrics.items()]
    else:
        lines.append("The notebook wrote no `metrics.json`" + (" (it stopped before its last cell)."
                                                                if page.status != "ok" else "."))
    return "\n".join(lines) + "\n"


def _run_note(page: BookPage) -> str:
    params = ", ".join(f"`{k}={v!r}`" for k, v in page.parameters.items()) or "its default parameters"
    took = f" in {page.seconds:.0f} s" if page.seconds is not None else ""
    smoke = (" SMOKE shrinks every size so that the series runs in minutes: the numbers are smaller and noisier "
             "than those of the lesson's real run." if page.parameters.get("SMOKE") else "")
    if page.status == "ok":
        return (f":::{{note}}\nThis page is the notebook as executed with {params}{took}.{smoke} Its checks are "
                f"listed [at the end](#closing-checks).\n:::\n")
    return (f":::{{error}}\nThis notebook stopped with an error when executed with {params}{took}: "
            f"{_code(_one_line(page.error or 'unknown error', 400))}. The outputs stop at the failing cell; see "
            f"[the closing checks](#closing-checks).\n:::\n")


def _lesson_card(number: str) -> str | None:
    """The instructor layer's box for lesson ``number`` (None for a notebook it does not know, e.g. a student's)."""
    from workbench.lessons import course

    return course.card_markdown(number) if number in course.load()["lessons"] else None


def prepare_notebook(page: BookPage) -> tuple[Any, list[str]]:
    """The executed notebook made ready for the book: offline outputs, the lesson's card (objectives,
    prerequisites, minutes, difficulty, exercises) and a run note after the title cell, the closing checks at the
    end. Returns (notebook, changes)."""
    import nbformat

    nb = nbformat.read(str(page.notebook), as_version=4)
    changes = offline_notebook(nb)
    checks = nbformat.v4.new_markdown_cell(checks_markdown(nb, page))
    note = nbformat.v4.new_markdown_cell(_run_note(page))
    added = [note, checks]
    first_md = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.lstrip()
                     .startswith("# ")), None)
    at = 0 if first_md is None else first_md + 1
    nb.cells.insert(at, note)
    card = _lesson_card(page.name[:2])
    if card is not None:  # objectives, prerequisites, minutes, difficulty: under the title, above the run note
        added.append(nbformat.v4.new_markdown_cell(card))
        nb.cells.insert(at, added[-1])
    nb.cells.append(checks)
    if nb.nbformat_minor < 5:  # cell ids exist from nbformat 4.5 on: the new cells must not carry one
        for cell in added:
            cell.pop("id", None)
    return nb, changes
