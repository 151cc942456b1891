"""The offline book: the builder's rewriting of executed notebooks (fast), and a SMOKE book opened in headless
Chromium with every network request blocked (slow, browser).

Debian's Chromium (/usr/bin/chromium) driven by the playwright package; never a browser download.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest
from conftest import offline_page

from workbench.errors import BookError
from workbench.tools.book import build as book
from workbench.tools.book import pages as book_pages
from workbench.tools.book import sphinx_build as book_sphinx

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SERIES = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


# -- the concept map and the home page ---------------------------------------------------------------------------
def _headings(notebook: Path) -> list[str]:
    nb = nbformat.read(str(notebook), as_version=4)
    return [line.lstrip("#").strip() for c in nb.cells if c.cell_type == "markdown"
            for line in c.source.splitlines() if re.match(r"^#{1,6} ", line)]


def test_concept_map_points_at_existing_notebook_sections():
    series = {p.stem[:2]: p for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))}
    text = (book.BOOK_SRC / "concepts.md").read_text(encoding="utf-8")
    targets = book_sphinx.nb_role_targets(text)
    assert len(targets) >= 30, "the concept map lost its rows"
    for notebook, heading in targets:
        assert notebook in series, f"{{nb}}`{notebook}`: no notebook {notebook}_*.ipynb in {NOTEBOOKS}"
        if heading:
            titles = [" ".join(h.lower().split()) for h in _headings(series[notebook])]
            want = " ".join(heading.lower().split())
            assert any(want in t for t in titles), f"no heading of {series[notebook].name} contains {heading!r}"
    mapped = {n for n, _ in targets}
    assert set(series) <= mapped, f"notebooks missing from the concept map: {sorted(set(series) - mapped)}"


def test_home_page_commands_are_the_readme_commands():
    index = (book.BOOK_SRC / "index.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [ln.strip() for block in re.findall(r"```bash\n(.*?)```", index, re.S) for ln in block.splitlines()
                if ln.strip()]
    assert len(commands) >= 3
    for command in commands:
        assert command in readme, f"the book's home page shows {command!r}, which the README does not have"


# -- rewriting an executed notebook ------------------------------------------------------------------------------
FIG = {"data": [{"type": "heatmap", "z": [[0.25, 0.75]]}], "layout": {"title": {"text": "toy"}}}


def _executed_notebook() -> nbformat.NotebookNode:
    """A notebook as papermill leaves it: plotly.js embedded by the renderer, a figure with the CDN MathJax
    script plotly adds, a bertviz-like output, a widget view, a tqdm bar, an error, asserts before and after."""
    v4 = nbformat.v4
    nb = v4.new_notebook()
    nb.cells = [
        v4.new_markdown_cell("# 99 · Toy\n\nprose"),
        v4.new_code_cell("fig.show()", outputs=[
            v4.new_output("display_data", data={"text/html": "<script>window.PlotlyConfig = {};</script><script>/**\n"
                                                "* plotly.js v3.1.0\n*/ var Plotly = 1;</script>"}),
            v4.new_output("display_data", data={
                "application/vnd.plotly.v1+json": FIG,
                "text/html": '<script src="https://cdnjs.cloudflare.com/ajax/libs/mathjax/3.2.2/es5/tex-svg.min.js">'
                             "</script><div>Plotly.newPlot(old)</div>"}),
        ]),
        v4.new_code_cell("head_view(...)", outputs=[
            v4.new_output("display_data", data={"application/javascript": "require.config({paths: {d3: "
                                                "'https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min'}})"}),
            v4.new_output("display_data", data={"text/html": '<script src="https://cdnjs.cloudflare.com/ajax/libs/'
                                                'require.js/2.3.6/require.min.js"></script><div id="bertviz"></div>'}),
        ]),
        v4.new_code_cell("inspector", outputs=[v4.new_output("display_data", data={
            "application/vnd.jupyter.widget-view+json": {"model_id": "box", "version_major": 2, "version_minor": 0},
            "text/plain": "VBox(...)"})]),
        v4.new_code_cell("fit(...)", outputs=[v4.new_output("display_data", data={
            "application/vnd.jupyter.widget-view+json": {"model_id": "bar", "version_major": 2, "version_minor": 0},
            "text/plain": "HBox(...)"})]),
        v4.new_code_cell("assert x == 1  # one is <one>\nif not SMOKE:\n    assert y > 2\n"),
        v4.new_code_cell("# the failing claim\nassert z < 0", outputs=[
            v4.new_output("error", ename="AssertionError", evalue="", traceback=[])]),
        v4.new_code_cell("assert w"),
    ]
    state = {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_slider", "IPY_MODEL_text",
                                                                  "IPY_MODEL_fig"]}},
        "slider": {"model_name": "IntSliderModel", "state": {"description": "layer", "value": 2}},
        "text": {"model_name": "HTMLModel", "state": {"value": "<b>translation:</b> a man"}},
        "fig": {"model_name": "AnyModel", "state": {"_widget_data": FIG["data"], "_widget_layout": FIG["layout"]}},
        "bar": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_d", "IPY_MODEL_p", "IPY_MODEL_s"]}},
        "d": {"model_name": "HTMLModel", "state": {"value": "epoch&nbsp;1/2: 50%"}},
        "p": {"model_name": "FloatProgressModel", "state": {"value": 5.0, "max": 10.0}},
        "s": {"model_name": "HTMLModel", "state": {"value": "5/10 [00:01&lt;00:01]"}},
    }
    nb.metadata["widgets"] = {book_pages.WIDGET_STATE_MIME: {"state": state, "version_major": 2, "version_minor": 0}}
    return nb


def _html_outputs(nb) -> list[str]:
    return [str(o["data"].get("text/html", "")) for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.get("data")]


def test_offline_notebook_leaves_nothing_that_reaches_the_network():
    nb = _executed_notebook()
    changes = book_pages.offline_notebook(nb)
    outputs = _html_outputs(nb)
    for text in outputs:
        assert not book_pages.EXTERNAL_REF.search(text), text[:200]
        assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text) and "plotly.js v" not in text
    assert not any("application/javascript" in o.get("data", {}) for c in nb.cells[1:] for o in c.get("outputs", []))
    assert "widgets" not in nb.metadata  # myst-nb would otherwise load require.js and the widget manager
    figure, bertviz, widget, progress = outputs
    assert "Plotly.newPlot" in figure and "[[0.25,0.75]]" in figure.replace(" ", "")
    assert "offline book leaves it out" in bertviz and "cdnjs.cloudflare.com" in " ".join(changes)
    assert len(nb.cells[2].outputs) == 1  # one note for the cell, not one per removed output
    assert "Plotly.newPlot" in widget and "[[0.25,0.75]]" in widget.replace(" ", "")  # the figure from the state
    assert "layer = 2" in widget and "<b>translation:</b> a man" in widget
    assert progress.startswith('<pre class="progress-snapshot">') and "epoch\xa01/2: 50%" in progress
    assert "5/10 [00:01&lt;00:01]" in progress and "█" * 10 + " " * 10 in progress


def test_figures_wider_than_the_column_take_its_width():
    from workbench.tools.book.pages import fit_column, plotly_html
    from workbench.viz.figures import PAGE_WIDTH

    wide = {"width": PAGE_WIDTH + 400, "height": 500, "autosize": False, "title": {"text": "t"}}
    fitted = fit_column(wide)
    assert "width" not in fitted and fitted["autosize"] is True and fitted["height"] == 500
    assert wide["width"] == PAGE_WIDTH + 400  # the caller's layout is left alone
    narrow = {"width": PAGE_WIDTH - 100, "height": 300}
    assert fit_column(narrow) == narrow
    out = plotly_html({"data": [{"type": "bar", "y": [1, 2]}], "layout": wide})
    assert f'"width":{PAGE_WIDTH + 400}' not in out.replace(" ", "") and '"responsive":true' in out.replace(" ", "")


def test_closing_checks_say_which_asserts_held_failed_or_did_not_run():
    nb = _executed_notebook()
    checks = book_pages.closing_checks(nb)
    assert [(c.source, c.condition, c.status) for c in checks] == [
        ("x == 1", "", "held"), ("y > 2", "if not SMOKE", "held"), ("z < 0", "", "failed"), ("w", "", "not reached")]
    assert checks[0].comment == "one is <one>" and checks[2].comment == "the failing claim"
    page = book_pages.BookPage("99_toy", Path("99_toy.ipynb"), "failed", 1.0, "AssertionError: ", {"loss": 0.5}, {})
    text = book_pages.checks_markdown(nb, page)
    assert "**✓ held**: `x == 1`" in text and "**✗ failed**: `z < 0`" in text and "**– not reached**: `w`" in text
    assert "| loss | 0.5 |" in text and "stopped with an error" in text
    assert "one is \\<one\\>" in text  # a comment is text, not HTML: <bos> must not vanish as a tag


def test_nb_targets_parse_titles_and_headings():
    assert book_sphinx.parse_nb_target("02") == (None, "02", "")
    assert book_sphinx.parse_nb_target("02#Why divide by") == (None, "02", "Why divide by")
    assert book_sphinx.parse_nb_target("the masks <04#The masks as matrices>") == ("the masks", "04", "The masks as matrices")


def test_serve_and_out_refuse_folders_that_hold_no_book(tmp_path):
    with pytest.raises(BookError, match="no book"):
        book.serve(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(BookError, match="not a book built earlier"):
        book._clear_out(tmp_path)
    assert (tmp_path / "notes.txt").exists()


def test_a_new_book_replaces_the_earlier_books_files_and_keeps_the_users(tmp_path):
    """The probe's finding: a rebuild deleted the whole folder, a gh-pages worktree's .git and CNAME included."""
    out, built = tmp_path / "book", tmp_path / "built"
    for folder in (out, built):
        (folder / "_static").mkdir(parents=True)
    (out / ".buildinfo").write_text("old")
    (out / "old-page.html").write_text("an earlier book's page")
    (out / "_static" / "old.js").write_text("old")
    (out / book.MANIFEST).write_text(json.dumps({"written": [".buildinfo", "_static", "old-page.html", "../x"]}))
    (out / ".git").mkdir()
    (out / ".git" / "HEAD").write_text("ref: refs/heads/gh-pages")
    (out / "CNAME").write_text("course.example.org")
    (tmp_path / "x").write_text("outside the book: never touched")
    (built / ".buildinfo").write_text("new")
    (built / "index.html").write_text("the new book")
    (built / "_static" / "new.js").write_text("new")
    book._install(built, out)
    assert (out / ".git" / "HEAD").read_text() == "ref: refs/heads/gh-pages"
    assert (out / "CNAME").read_text() == "course.example.org" and (tmp_path / "x").exists()
    assert not (out / "old-page.html").exists() and not (out / "_static" / "old.js").exists()
    assert (out / "index.html").read_text() == "the new book" and (out / "_static" / "new.js").exists()
    assert json.loads((out / book.MANIFEST).read_text())["written"] == [".buildinfo", "_static", "index.html"]
    later = tmp_path / "later"
    later.mkdir()
    (later / "index2.html").write_text("the next book")
    book._install(later, out)  # the next build's files replace these, the user's stay
    assert (out / "CNAME").exists() and not (out / "index.html").exists() and (out / "index2.html").exists()


def test_from_reports_needs_executed_notebooks(tmp_path):
    with pytest.raises(BookError, match="no executed notebooks"):
        book_pages.pages_from_reports(tmp_path)


@pytest.mark.parametrize("options, words", [
    (dict(jobs=0), "--jobs 0"), (dict(jobs=-2), "--jobs -2"), (dict(jobs=1.5), "--jobs 1.5"),
    (dict(from_reports="r", jobs=2), "apply when the notebooks run"),
    (dict(from_reports="r", threads=1), "apply when the notebooks run"),
])
def test_book_build_refuses_run_options_it_cannot_use_before_touching_anything(tmp_path, options, words):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "notes.txt").write_text("mine")
    if "from_reports" in options:
        options["from_reports"] = tmp_path / "reports"
    with pytest.raises(BookError, match=re.escape(words)):
        book.build_book(out=tmp_path / "book", reports=tmp_path / "ran", **options)
    assert (tmp_path / "book" / "notes.txt").read_text() == "mine" and not (tmp_path / "ran").exists()


# -- the SMOKE book in a real browser ----------------------------------------------------------------------------
class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


@pytest.fixture(scope="module")
def smoke_book(tmp_path_factory, smoke_runs):
    """The whole series' SMOKE book, built from the notebooks the session executes once (tests/test_notebooks checks
    each one's claims on the same executed copies)."""
    out = tmp_path_factory.mktemp("book")
    t0 = time.perf_counter()
    for path in SERIES:
        smoke_runs(path)
    t1 = time.perf_counter()
    result = book.build_book(out=out / "site", from_reports=smoke_runs.out)
    print(f"SMOKE book of {len(SERIES)} notebooks: notebooks {t1 - t0:.0f} s (0 when already run this session), "
          f"sphinx {result.sphinx_seconds:.0f} s")
    assert result.ok, [(p.name, p.error) for p in result.pages]
    assert [p.name for p in result.pages] == [p.stem for p in SERIES]  # one page per notebook, in series order
    assert sorted(q.name for q in out.iterdir()) == ["site"]  # nothing left beside the book
    unresolved = [w for w in result.warnings if "{nb}" in w or "mime" in w]
    assert not unresolved, unresolved  # every concept-map link found its section; every output had a renderer
    return result


# every drawn plotly figure ends inside the article's column (nothing to scroll sideways); returns the offenders
FIGURES_PAST_THE_COLUMN = """() => {
  const col = (document.querySelector('article.bd-article') || document.querySelector('main')).getBoundingClientRect();
  return Array.from(document.querySelectorAll('div.plotly-graph-div')).map(d => {
    const svg = d.querySelector('.main-svg'); const r = (svg || d).getBoundingClientRect();
    return [(d.layout && d.layout.title && d.layout.title.text || '').slice(0, 50), Math.round(r.right), Math.round(col.right)];
  }).filter(x => x[1] > x[2] + 1);
}"""
WAIT_MATH = "() => !document.querySelector('script[src*=\"mathjax\"]') || (window.MathJax && MathJax.startup && MathJax.startup.promise)"


@pytest.mark.browser
@pytest.mark.slow
def test_smoke_book_reads_offline(smoke_book, browser, tmp_path):
    site = smoke_book.out_dir
    pages = sorted(site.glob("*.html"))
    names = [p.name for p in pages]
    for nb in smoke_book.pages:
        assert f"{nb.name}.html" in names
    assert {"index.html", "concepts.html", "teaching.html", "models.html", "search.html"} <= set(names)
    context, page, left, errors = offline_page(browser)
    try:
        for path in pages:
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            page.wait_for_function(WAIT_MATH, timeout=60_000)
            page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
            divs = page.evaluate("() => document.querySelectorAll('div.plotly-graph-div').length")
            drawn = page.evaluate("() => Array.from(document.querySelectorAll('div.plotly-graph-div'))"
                                  ".filter(d => d.querySelector('.main-svg')).length")
            assert drawn == divs, f"{path.name}: {drawn} of {divs} plotly figures drew their SVG"
            over = page.evaluate(FIGURES_PAST_THE_COLUMN)
            assert not over, f"{path.name}: figures wider than the book's column (right edge, column's): {over}"
            has_math = 'class="math' in path.read_text(encoding="utf-8")
            rendered = page.evaluate("() => document.querySelectorAll('mjx-container').length")
            if has_math:
                assert rendered > 0, f"{path.name}: math left for MathJax, but nothing rendered"
            text = page.evaluate("() => document.body.innerText")
            for raw in ("$$", "\\(", "\\["):
                assert raw not in text, f"{path.name}: raw {raw!r} in the text (math not rendered)"
            if path.stem in {p.name for p in smoke_book.pages}:
                assert divs > 0, f"{path.name}: a notebook page without figures"
                assert rendered > 0
                assert "Closing checks" in text and "✓ held" in text and "✗ failed" not in text
                assert "After this lesson you can" in text and "Lab time" in text  # the instructor layer's card
            if path.name != "search.html":
                assert not errors, f"{path.name}: {errors}"
            errors.clear()
        page.goto((site / "index.html").as_uri())
        page.screenshot(path=str(tmp_path / "home.png"), full_page=True)
        first = smoke_book.pages[0].name
        page.goto((site / f"{first}.html").as_uri())
        page.wait_for_function(WAIT_MATH, timeout=60_000)
        page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
        page.screenshot(path=str(tmp_path / "notebook.png"), full_page=False)
        for shot in ("home.png", "notebook.png"):
            assert (tmp_path / shot).stat().st_size > 20_000
            print(f"screenshot: {tmp_path / shot}")
        assert left == [], f"requests that tried to leave the machine: {left}"
    finally:
        context.close()


@pytest.mark.browser
@pytest.mark.slow
def test_smoke_book_internal_links_resolve(smoke_book):
    site = smoke_book.out_dir
    checked = 0
    for path in sorted(site.rglob("*.html")):
        for href in _parse(path).hrefs:
            parts = urlsplit(href)
            if parts.scheme or href.startswith("//"):
                continue  # external links are links, not requests
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            assert target.exists(), f"{path.relative_to(site)}: link {href!r} points at a missing file"
            if parts.fragment and target.suffix == ".html":
                assert unquote(parts.fragment) in _parse(target).ids, f"{path.name}: {href!r} has no such anchor"
            checked += 1
    assert checked > 50
    concepts = (site / "concepts.html").read_text(encoding="utf-8")
    for nb in smoke_book.pages:  # the concept map links into the notebooks of this build, section by section
        assert re.search(rf'href="{nb.name}\.html#[\w-]+"', concepts), nb.name


def _unique_word(site: Path, docname: str, others: list[str]) -> str:
    """A word of the notebook's prose whose stem (and every indexed term containing it) belongs to that page only,
    so the search must return exactly that page."""
    from sphinx.search.en import SearchEnglish

    raw = (site / "searchindex.js").read_text(encoding="utf-8")
    index = json.loads(raw[raw.index("(") + 1: raw.rindex(")")])
    doc = index["docnames"].index(docname)

    def docs_of(term: str) -> set[int]:
        found: set[int] = set()
        for table in ("terms", "titleterms"):
            for key, value in index[table].items():
                if term in key:
                    found |= {value} if isinstance(value, int) else set(value)
        return found

    nb = nbformat.read(str(site / "_sources" / f"{docname}.ipynb"), as_version=4)
    prose = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    stem = SearchEnglish({}).stem
    for word in sorted(set(re.findall(r"\b[a-z]{7,}\b", prose.lower()))):
        if docs_of(stem(word)) == {doc} and not any(word in (site / f"{o}.html").read_text() for o in others):
            return word
    pytest.fail(f"no word of {docname} is unique to it in the search index")


@pytest.mark.browser
@pytest.mark.slow
def test_smoke_book_search_finds_the_notebook_offline(smoke_book, browser):
    site = smoke_book.out_dir
    docnames = [p.name for p in smoke_book.pages]
    context, page, left, _ = offline_page(browser)
    try:
        for docname in docnames:
            word = _unique_word(site, docname, [d for d in docnames if d != docname] + ["index", "concepts"])
            page.goto((site / "search.html").as_uri() + f"?q={word}")
            page.wait_for_selector("#search-results ul.search li a", timeout=60_000)
            hits = page.evaluate("() => Array.from(document.querySelectorAll('#search-results ul.search li > a'))"
                                 ".map(a => a.getAttribute('href').split(/[?#]/)[0])")
            print(f"search {word!r} -> {hits}")
            assert hits == [f"{docname}.html"], (word, hits)
        assert left == []
    finally:
        context.close()


@pytest.mark.browser
@pytest.mark.slow
def test_book_serve_serves_the_site_and_search_excerpts(smoke_book, browser):
    """Over HTTP the search page also fetches each hit's page for an excerpt (browsers refuse that on file://)."""
    site = smoke_book.out_dir
    first = smoke_book.pages[0].name
    word = _unique_word(site, first, [p.name for p in smoke_book.pages[1:]] + ["index", "concepts"])
    with book.served(site) as url:
        with urllib.request.urlopen(url + "index.html", timeout=10) as r:
            assert r.status == 200 and b"Attention Workbench" in r.read()
        context, page, left, _ = offline_page(browser, allow=url)
        try:
            page.goto(f"{url}search.html?q={word}")
            page.wait_for_selector("#search-results ul.search li p.context", timeout=60_000)
            excerpt = page.inner_text("#search-results ul.search li p.context")
            assert word in excerpt.lower(), excerpt
            assert left == []
        finally:
            context.close()


def test_checks_under_a_false_condition_are_skipped_not_held():
    """The book counts only the checks that ran: an assert under an ``if`` that was false with the run's parameters
    (the parameters cell, then papermill's injected one) or metrics is skipped; one whose ``if`` cannot be judged
    stays held (its cell ran) but is counted apart."""
    v4 = nbformat.v4
    nb = v4.new_notebook()
    nb.cells = [
        v4.new_code_cell("SMOKE: bool = False  # s\nN_TEST: int = 1000  # n", metadata={"tags": ["parameters"]}),
        v4.new_code_cell("SMOKE = True\n", metadata={"tags": ["injected-parameters"]}),
        v4.new_code_cell("assert a\nif SMOKE:\n    assert b\nelse:\n    assert c\nif not SMOKE and N_TEST == 1000:\n"
                         "    assert d\nif metrics['n_test'] == 60:\n    assert e\nif later_value > 0:\n    assert f\n"),
    ]
    checks = book_pages.closing_checks(nb, {"n_test": 60})
    assert [(c.source, c.status, c.known) for c in checks] == [
        ("a", "held", True), ("b", "held", True), ("c", "skipped", True), ("d", "skipped", True), ("e", "held", True),
        ("f", "held", False)]
    assert [c.status for c in book_pages.closing_checks(nb, {"n_test": 1000})][4] == "skipped"
    summary = book_pages.checks_summary(checks)
    assert summary.startswith("The notebook ran to the end: 4 of its checks ran and held; 2 did not run")
    assert "1 of those that held sit under a condition this page cannot evaluate" in summary
    page = book_pages.BookPage("99_toy", Path("99_toy.ipynb"), "ok", 1.0, None, {"n_test": 60}, {"SMOKE": True})
    assert "**– skipped**: `c`" in book_pages.checks_markdown(nb, page)
    table = book._series_table([page], {"99_toy": checks})
    assert "| 4 of 4 | 2 |" in table


def test_nb_anchor_finds_a_heading_whose_apostrophe_sphinx_made_curly():
    """Sphinx's smartquotes render "The paper's Table 2" with a curly apostrophe; the concept map writes it straight."""
    from docutils import nodes

    doc = nodes.document(None, None)
    section = nodes.section()
    section += nodes.title(text="The paper\u2019s Table 2 beside ours")
    doc += section
    assert book_sphinx.find_section(doc, "The paper's Table 2") is section
    assert book_sphinx.find_section(doc, "the PAPER\u2019S table 2") is section
    assert book_sphinx.find_section(doc, "Table 3") is None
