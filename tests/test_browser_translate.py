"""The page "Translate in your browser" in headless Chromium, served locally with every other request blocked.

Only the page's assets are built (into a temporary folder, :func:`workbench.tools.book.translate_page.standalone_page`),
not the book; ``npm ci`` runs from the committed lock file into the npm cache folder (outside the checkout) the
first time. The page must translate as Python runs the same exported graphs (onnxruntime, greedy), tokenize as the
workbench's tokenizer, draw a chosen head's cross-attention, and change its translation when a head is switched off
exactly as Python does with that head off.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from conftest import offline_page, require, require_module

pytestmark = [pytest.mark.browser, pytest.mark.slow]

READY = "() => window.wbTranslator && window.wbTranslator.timing.first_translation_ms !== null"
TRANSLATE_ALL = """async (sentences) => {
  const out = [];
  for (const s of sentences) { const r = await window.wbTranslator.translate(s, {beam: 1}); out.push([r.text, r.ms]); }
  return out;
}"""
SRC_IDS = """(sentences) => sentences.map((s) => {
  const t = window.wbTranslator;
  return [...t.encode(s).ids, t.model.info.eos_id];
})"""
HEATMAP_Z = "() => { const gd = document.getElementById('wb-heatmap'); return gd && gd.data ? gd.data[0].z : null; }"


@pytest.fixture(scope="module")
def page_dir(tmp_path_factory):
    require(shutil.which("node") and shutil.which("npm"), "Node.js (node, npm)",
            "apt-get install nodejs npm (the page's JavaScript comes from npm at build time)")
    require_module("onnxruntime", 'pip install -e ".[dev]" (the [onnx] extra)')
    from workbench.tools.book.translate_page import standalone_page

    folder = tmp_path_factory.mktemp("translate_page")
    sizes = standalone_page(folder)
    assert sum(sizes.values()) <= 25e6, sizes  # the budget for the page's added assets
    return folder


@pytest.fixture(scope="module")
def test_sentences(multi30k_dir):
    from workbench.translation.data import load_multi30k

    return [p[0] for p in load_multi30k("test_2016_flickr", "de", "en", data_dir=multi30k_dir)]


def test_page_translates_as_python(browser, page_dir, test_sentences, record_property):
    from workbench.bridges.onnx import PAGE_GATES, OnnxTranslator
    from workbench.tools.book.build import served

    python = OnnxTranslator(page_dir / "_static" / "translate" / "model")
    sentences = test_sentences[:20]
    with served(page_dir) as url:
        url = url.rstrip("/")
        context, page, left, errors = offline_page(browser, allow=url, width=1200, height=1500)
        try:
            page.goto(f"{url}/index.html")
            page.wait_for_function(READY, timeout=120_000)
            timing = page.evaluate("() => window.wbTranslator.timing")
            record_property("first_translation_ms", timing["first_translation_ms"])
            print(f"time to first translation: {timing['first_translation_ms']:.0f} ms after the page started")

            # tokenization: the page's ids are the workbench's, on the whole test split and on text that tests the
            # normaliser (NFKC, runs of whitespace), typed special tokens (text, not control ids) and unseen characters
            odd = ["  Ein   Hund\tläuft  ", "Straße ﬁ Café ½ — «Zitat»", "<eos> und <unk> <pad>", "漢字 ünknöwn ☃", "",
                   "Ein\u200b Hund\ufeff läuft\u00ad", "\u200b\u2060"]  # invisible format characters dropped
            texts = test_sentences + odd
            assert page.evaluate(SRC_IDS, texts) == python.tokenizer.encode_src(texts)

            # 20 sentences, greedy: identical to the same graphs run by onnxruntime in Python
            got = page.evaluate(TRANSLATE_ALL, sentences)
            assert [t for t, _ in got] == python.translate(sentences)
            record_property("ms_per_sentence_median", float(np.median([ms for _, ms in got])))

            # the example sentence: a chosen head's cross-attention is drawn from this translation's weights
            text = page.input_value("#wb-src")
            ids, weights = python.greedy_ids(python.tokenizer.encode_src([text])[0])  # weights (steps, L, H, S)
            page.select_option("#wb-layer", "1")
            page.select_option("#wb-head", "5")
            z = np.array(page.evaluate(HEATMAP_Z))
            assert z.shape == (len(ids) + 1, weights.shape[-1])
            np.testing.assert_allclose(z, weights[:, 1, 5], atol=1e-4)
            assert page.locator("#wb-heatmap .main-svg").count() > 0  # plotly drew it

            # switch off a head whose absence changes Python's translation: the page changes the same way
            before = page.inner_text("#wb-out")
            assert before == python.translate([text])[0]
            candidates = [(kind, layer, h) for kind in ("dec.cross", "enc.self", "dec.self") for layer in range(3)
                          for h in range(8)]
            head = next(c for c in candidates if python.translate([text], off=[c])[0] != before)
            expected = python.translate([text], off=[head])[0]
            count = int(page.get_attribute("#wb-translate", "data-translations"))
            page.click("#wb-heads-box summary")
            kind = PAGE_GATES[head[0]]  # the page's name of the kind
            page.uncheck(f'#wb-heads input[data-kind="{kind}"][data-layer="{head[1]}"][data-head="{head[2]}"]')
            page.click("#wb-translate-btn")
            page.wait_for_function(f"() => Number(document.getElementById('wb-translate').dataset.translations) > {count}")
            after = page.inner_text("#wb-out")
            assert after == expected and after != before
            assert not errors and not left, (errors, left)
        finally:
            context.close()


def test_page_from_file_says_how_to_serve(browser, page_dir):
    context, page, left, errors = offline_page(browser)
    try:
        page.goto((page_dir / "index.html").as_uri())
        page.wait_for_selector("#wb-file-note", state="visible", timeout=30_000)
        assert "workbench book serve" in page.inner_text("#wb-file-note")
        assert not left
    finally:
        context.close()

