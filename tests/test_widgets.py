"""Widgets in Python (the browser tests drive them in a real JupyterLab)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench import build_model, preset
from workbench.analysis import inspect_translation, to_bertviz
from workbench.tokenizer import WordTokenizer
from workbench.widgets import AttentionInspector, complexity_explorer, mask_explorer, positional_explorer


@pytest.fixture(scope="module")
def translator():
    tok = WordTokenizer.train([("ein mann fährt fahrrad", "a man rides a bike")])
    torch.manual_seed(0)
    return build_model(preset("tiny", n_heads=2), tok.src_vocab_size, tok.tgt_vocab_size).eval(), tok


def test_inspector_updates_figures_in_place(translator):
    model, tok = translator
    insp = AttentionInspector(model, tok, sentence="ein mann fährt fahrrad")
    fig = insp.single
    first = np.asarray(fig.data[0].z).copy()
    insp.layer.value = 1
    assert insp.single is fig  # same FigureWidget, new data
    expected = insp.inspection.weights("cross", 1)[0].numpy()
    np.testing.assert_allclose(np.asarray(fig.data[0].z), expected, rtol=1e-6)
    assert not np.allclose(first, expected)
    insp.head.value = -1
    assert insp.figure_box.children[0] is insp.grid
    np.testing.assert_allclose(np.asarray(insp.grid.data[1].z), insp.inspection.weights("cross", 1)[1].numpy(), rtol=1e-6)
    insp.kind.value = "enc_self"
    assert np.asarray(insp.grid.data[0].z).shape == (5, 5)  # 4 words + eos
    assert insp.last_update_ms > 0


def test_inspector_reports_bad_input_without_raising(translator):
    model, tok = translator
    insp = AttentionInspector(model, tok, sentence="ein mann")
    insp.text.value = "   "
    assert "empty" in insp.output.value


def test_bertviz_arguments_work_with_bertviz(translator):
    from bertviz import head_view, model_view

    model, tok = translator
    ins = inspect_translation(model, tok, "ein mann fährt")
    kwargs = to_bertviz(ins.cache, ins.src_tokens, ins.tgt_tokens)
    assert set(kwargs) == {"encoder_attention", "decoder_attention", "cross_attention", "encoder_tokens", "decoder_tokens"}
    assert kwargs["cross_attention"][0].shape == (1, 2, len(ins.tgt_tokens), len(ins.src_tokens))
    html = head_view(**kwargs, html_action="return").data
    assert '"ein"' in html and '"mann"' in html  # tokens travel in the JSON params
    assert model_view(**kwargs, html_action="return").data
    with pytest.raises(ValueError, match="do not match"):
        to_bertviz(ins.cache, ins.src_tokens[:-1], ins.tgt_tokens)


def test_small_explorers_build():
    for w in (positional_explorer(16, 8), mask_explorer(6), complexity_explorer()):
        assert w.children


def test_inspector_saved_state_holds_its_first_figure(translator):
    """papermill/nbclient save a widget's synced state, not the in-place updates sent as messages: the saved
    FigureWidget must be the drawn heatmap, not the empty placeholder (the book redraws it from that state)."""
    model, tok = translator
    insp = AttentionInspector(model, tok, sentence="ein mann fährt fahrrad")
    saved = insp.single.get_state()["_widget_data"][0]
    np.testing.assert_allclose(np.asarray(saved["z"], dtype=float), insp.inspection.weights("cross", 0)[0].numpy(),
                               rtol=1e-6)
    assert insp.figure_box.children[0] is insp.single
    insp.head.value = -1
    saved_grid = insp.grid.get_state()["_widget_data"]
    np.testing.assert_allclose(np.asarray(saved_grid[1]["z"], dtype=float),
                               insp.inspection.weights("cross", 0)[1].numpy(), rtol=1e-6)
