"""Real-browser tests: the inspector widget in a live JupyterLab, and offline HTML reports, in headless Chromium.

Debian's Chromium (/usr/bin/chromium) driven by the playwright package; never a browser download.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from conftest import offline_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


INSPECTOR_CELL = """
import torch, workbench as wb
from workbench.translation.tokenizer import WordTokenizer
from workbench.viz.widgets import AttentionInspector
tok = WordTokenizer.train([("ein mann fährt ein rotes fahrrad", "a man rides a red bike")])
torch.manual_seed(0)
model = wb.build_model(wb.preset("tiny", n_heads=2), tok.src_vocab_size, tok.tgt_vocab_size).eval()
insp = AttentionInspector(model, tok, sentence="ein mann fährt ein rotes fahrrad")
insp
"""

Z_OF_FIRST_PLOT = "() => { const gd = document.querySelector('.js-plotly-plot'); return gd && gd.data ? JSON.stringify(gd.data[0].z) : null; }"
N_TRACES = "() => Array.from(document.querySelectorAll('.js-plotly-plot')).filter(g => g.offsetParent !== null).map(g => g.data.length)"


@contextlib.contextmanager
def _lab_with_cell(browser, tmp_path, source: str):
    """A live JupyterLab on a one-cell notebook, opened in the browser; yields the page, the cell not yet run."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(source))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "inspect.ipynb")
    from workbench.tools.book.runner import kernel_name_for_this_python

    kernel_name_for_this_python()  # make sure a python3 kernelspec exists
    port, token = _free_port(), "workbench-test-token"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--allow-root", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}", "--ServerApp.open_browser=False",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
                break
            except Exception:
                if time.time() > deadline or server.poll() is not None:
                    pytest.fail("JupyterLab did not start")
                time.sleep(1)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"http://127.0.0.1:{port}/lab/tree/inspect.ipynb?token={token}")
        page.wait_for_selector(".jp-Notebook", timeout=90_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'], .jp-Notebook .jp-Cell", timeout=60_000)
        time.sleep(3)  # let the kernel connect
        yield page
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def _run_cell(page) -> None:
    page.click(".jp-Cell .jp-InputArea-editor")
    page.keyboard.press("Shift+Enter")


def test_inspector_in_jupyterlab(browser, tmp_path):
    with _lab_with_cell(browser, tmp_path, INSPECTOR_CELL) as page:
        _run_cell(page)
        page.wait_for_selector(".widget-slider", timeout=120_000)
        page.wait_for_function("() => { const g = document.querySelector('.js-plotly-plot'); return g && g.data; }", timeout=60_000)
        before = page.evaluate(Z_OF_FIRST_PLOT)
        # layer slider: keyboard on the noUiSlider handle (the same event path as a drag)
        t0 = time.perf_counter()
        page.focus(".widget-slider .noUi-handle")
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => {{ const g = document.querySelector('.js-plotly-plot'); return g && JSON.stringify(g.data[0].z) !== {json.dumps(before)}; }}", timeout=30_000)
        slider_ms = (time.perf_counter() - t0) * 1000
        assert page.inner_text(".widget-readout").strip() == "1"
        after = page.evaluate(Z_OF_FIRST_PLOT)
        assert after != before
        # head picker: "all heads" shows the grid, one heatmap per head
        head_select = page.locator(".widget-dropdown select").nth(1)
        head_select.select_option(label="all heads")
        page.wait_for_function(f"() => ({N_TRACES})().includes(2)", timeout=30_000)
        page.screenshot(path=str(tmp_path / "inspector.png"), full_page=True)
        assert (tmp_path / "inspector.png").stat().st_size > 10_000
        print(f"figure updated {slider_ms:.0f} ms after the slider key press (browser round trip)")


INTERVENTION_CELL = """
import torch, workbench as wb
from workbench.translation.tokenizer import WordTokenizer
from workbench.viz.widgets import HeadInterventionInspector
tok = WordTokenizer.train([("ein mann fährt ein rotes fahrrad", "a man rides a red bike")])
torch.manual_seed(0)
model = wb.build_model(wb.preset("tiny", n_heads=2), tok.src_vocab_size, tok.tgt_vocab_size).eval()
insp = HeadInterventionInspector(model, tok, sentence="ein mann fährt ein rotes fahrrad", max_extra=4)
insp
"""

# the bars of the log-probability change: the plot whose traces are all bar charts (the first holds the bars, the
# others are legend entries naming the two colours)
DELTA_BARS = ("() => { const g = Array.from(document.querySelectorAll('.js-plotly-plot'))"
              ".find(g => g.data && g.data.length && g.data.every(t => t.type === 'bar'));"
              " return g ? JSON.stringify(Array.from(g.data[0].y)) : null; }")  # y may arrive as a typed array


def test_head_intervention_inspector_in_jupyterlab(browser, tmp_path):
    with _lab_with_cell(browser, tmp_path, INTERVENTION_CELL) as page:
        _run_cell(page)
        page.wait_for_selector(".widget-toggle-button", timeout=120_000)
        page.wait_for_function(f"() => ({DELTA_BARS})() !== null", timeout=60_000)
        before = page.evaluate(DELTA_BARS)
        assert set(json.loads(before)) == {0}  # nothing switched off yet: no change in any log-probability
        # switch off every cross-attention head of decoder layer 1 with its "L1 all" button (third grid)
        t0 = time.perf_counter()
        page.locator(".widget-vbox:has(> .widget-html:has-text('cross-attention')) button:has-text('L1 all')").click()
        page.wait_for_function(f"() => ({DELTA_BARS})() !== {json.dumps(before)}", timeout=30_000)
        toggle_ms = (time.perf_counter() - t0) * 1000
        changed = json.loads(page.evaluate(DELTA_BARS))
        assert max(abs(v) for v in changed) > 1e-4
        assert page.locator(".widget-toggle-button.mod-danger").count() == 2  # both heads shown as off
        assert page.get_by_text("2 head(s) off (zero-ablation)").count() == 1
        page.screenshot(path=str(tmp_path / "intervention.png"), full_page=True)
        print(f"log-probability bars updated {toggle_ms:.0f} ms after the click (browser round trip)")


def test_html_report_renders_offline(browser, smoke_runs):
    from workbench.tools.book.notebooks import list_notebooks

    nb = next(p for p in list_notebooks() if p.name.startswith("04_"))
    result = smoke_runs(nb)  # executed once per session, shared with tests/test_notebooks and the SMOKE book
    assert result["status"] == "ok", result.get("error")
    html = Path(result["html"])
    context, page, external, _ = offline_page(browser)
    page.goto(html.as_uri())
    page.wait_for_timeout(3000)
    n_plots = page.evaluate("() => document.querySelectorAll('.js-plotly-plot').length")
    n_drawn = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot')).filter(g => g.querySelector('svg.main-svg')).length")
    assert n_plots >= 3 and n_drawn == n_plots  # every plotly figure drew, with all network requests blocked
    assert not any("plot.ly" in u or "plotly" in u for u in external)  # plotly.js came from the page itself
    context.close()
