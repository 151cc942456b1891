"""Slide decks (workbench/tools/book/slides.py): one offline deck per executed lesson, a title slide with the lesson's
objectives, one slide per figure, a slide of its checks; in the browser every figure draws with the network cut."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import plotly.graph_objects as go
import pytest
from conftest import offline_page

from workbench.lessons import course
from workbench.tools.book.slides import build_slides


def _executed(folder: Path, n_figures: int) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 04 · Positional encoding\n\nIntro.")]
    for i in range(n_figures):
        cell = nbformat.v4.new_code_cell(f"fig{i}")
        fig = go.Figure(go.Bar(y=[1, i + 2]), layout={"title": {"text": f"figure {i}"}}).to_plotly_json()
        cell.outputs = [nbformat.v4.new_output("display_data", data={"application/vnd.plotly.v1+json": fig,
                                                                     "text/plain": "Figure"})]
        nb.cells.append(cell)
    nb.cells.append(nbformat.v4.new_code_cell("assert 1 + 1 == 2  # arithmetic"))
    run = folder / "04_positional_encoding"
    run.mkdir(parents=True)
    nbformat.write(nb, str(run / "04_positional_encoding.ipynb"))
    (run / "metrics.json").write_text(json.dumps({"x": 1}))
    return folder


def test_a_deck_has_the_objectives_each_figure_and_the_checks(tmp_path):
    written = build_slides(_executed(tmp_path / "reports", 3), tmp_path / "slides")
    assert [p.name for p in written] == ["04_positional_encoding.html"]
    assert (tmp_path / "slides" / "plotly.min.js").stat().st_size > 1_000_000  # plotly.js beside the deck
    text = written[0].read_text()
    assert text.count("<section") == 1 + 3 + 1  # title, one per figure, checks
    assert text.count("Plotly.newPlot") == 3 and "cdn" not in text.lower() and "https://" not in text
    for objective in course.lesson("04")["objectives"]:
        assert objective.replace("'", "&#x27;") in text
    assert "1 + 1 == 2" in text and "✓" in text  # the closing check, held


@pytest.mark.browser
@pytest.mark.slow
def test_the_deck_of_a_small_lesson_draws_offline(smoke_runs, browser, tmp_path):
    from workbench.tools.book.notebooks import list_notebooks

    nb = next(p for p in list_notebooks() if p.name.startswith("04_"))
    result = smoke_runs(nb)
    assert result["status"] == "ok", result.get("error")
    deck = build_slides(smoke_runs.out, tmp_path / "slides", only="04")[0]
    context, page, external, errors = offline_page(browser)
    try:
        page.goto(deck.as_uri())
        page.wait_for_timeout(2000)
        sections, divs, drawn = page.evaluate(
            "() => [document.querySelectorAll('section').length, document.querySelectorAll('div.plotly-graph-div').length,"
            " Array.from(document.querySelectorAll('div.plotly-graph-div')).filter(d => d.querySelector('.main-svg')).length]")
        assert divs >= 3 and drawn == divs and sections == divs + 2  # every figure of lesson 04 drew, offline
        assert external == [] and not errors
    finally:
        context.close()
