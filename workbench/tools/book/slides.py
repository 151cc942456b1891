"""Each lesson as an offline slide deck for the lecture before the lab, made from the book's own material.

    python -m workbench.tools.book.slides --from-reports reports --out slides [--only 04]

One HTML file per executed lesson (``slides/NN_name.html``), beside ``plotly.min.js`` copied from the installed
plotly: a title slide with the lesson's objectives and lab time (the instructor layer,
:mod:`workbench.lessons.course`), one slide per figure the lesson drew (interactive, drawn from the executed
notebook's data by :func:`workbench.tools.book.pages.offline_notebook`, so nothing loads from the network), and a
last slide with the lesson's closing checks and whether each held. Slides are full-window sections with CSS scroll
snapping: PageDown, the arrow keys or the wheel go from one to the next, and printing gives one slide per page.
"""

from __future__ import annotations

import argparse
import html
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workbench.tools.book.pages import BookPage, closing_checks, offline_notebook, pages_from_reports

STYLE = """
html { scroll-snap-type: y mandatory; }
body { margin: 0; font-family: system-ui, sans-serif; color: #1a202c; }
section { scroll-snap-align: start; min-height: 100vh; box-sizing: border-box; padding: 3vh 5vw;
          display: flex; flex-direction: column; justify-content: center; page-break-after: always; }
h1 { font-size: 2.4em; margin: 0 0 .5em; } h2 { font-size: 1.6em; margin: 0 0 .4em; }
li { margin: .3em 0; font-size: 1.2em; } .meta { color: #4a5568; } .held { color: #2f855a; } .failed { color: #c53030; }
.checks li { font-size: .95em; font-family: ui-monospace, monospace; } .n { color: #718096; font-size: .8em; }
"""


def _title(nb: Any, page: BookPage) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("# "):
            return cell.source.lstrip()[2:].splitlines()[0].strip()
    return page.name


def _figures(nb: Any) -> list[str]:
    """The HTML of every plotly figure among the executed notebook's outputs (after offline_notebook)."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            text = str((out.get("data") or {}).get("text/html", ""))
            if "Plotly.newPlot" in text:
                found.append(text)
    return found


def lesson_deck(page: BookPage) -> str:
    """One lesson's deck as a standalone HTML page (it loads ``plotly.min.js`` from its own folder)."""
    import nbformat

    from workbench.lessons import course

    nb = nbformat.read(str(page.notebook), as_version=4)
    offline_notebook(nb)
    title = _title(nb, page)
    number = page.name[:2]
    head = [f"<section><h1>{html.escape(title)}</h1>"]
    if number in course.load()["lessons"]:
        entry = course.lesson(number)
        head.append(f"<p class='meta'>{entry['minutes']} minutes in the lab · "
                    f"{course.load()['difficulty'][str(entry['difficulty'])]}</p><h2>{course.CARD_TITLE}</h2><ul>")
        head += [f"<li>{html.escape(o)}</li>" for o in entry["objectives"]]
        head.append("</ul>")
    head.append("</section>")
    figures = _figures(nb)
    body = [f"<section><p class='n'>{html.escape(title)} · figure {i + 1} of {len(figures)}</p>{fig}</section>"
            for i, fig in enumerate(figures)]
    checks = closing_checks(nb, page.metrics)
    marks = {"held": ("held", "✓"), "failed": ("failed", "✗"), "not reached": ("", "–"), "skipped": ("", "–")}
    items = [f"<li class='{marks[c.status][0]}'>{marks[c.status][1]} {html.escape(c.source)}</li>" for c in checks]
    body.append(f"<section><h2>What the lesson checks</h2><ul class='checks'>{''.join(items) or '<li>no checks</li>'}"
                "</ul></section>")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style><script src='plotly.min.js'></script></head>"
            f"<body>{''.join(head + body)}</body></html>")


def build_slides(reports: str | Path, out: str | Path, only: str | Sequence[str] | None = None) -> list[Path]:
    """Write one deck per executed lesson of a ``notebooks run`` folder into ``out``; returns the decks' paths.

    Raises:
        BookError: ``reports`` holds no executed notebook (or none that ``only`` selects).
    """
    import plotly

    pages = pages_from_reports(reports, only)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", folder / "plotly.min.js")
    written = []
    for page in pages:
        path = folder / f"{page.name}.html"
        path.write_text(lesson_deck(page), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from-reports", required=True, help="a `workbench notebooks run` output folder")
    ap.add_argument("--out", default="slides", help="where the decks go (default: slides)")
    ap.add_argument("--only", action="append", help="lesson numbers or names (repeatable)")
    args = ap.parse_args(argv)
    written = build_slides(args.from_reports, args.out, args.only)
    print(f"{len(written)} decks in {args.out}: open {written[0] if written else args.out} in a browser")
    return 0


if __name__ == "__main__":
    sys.exit(main())
