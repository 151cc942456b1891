"""Widgets in Python (the browser tests drive them in a real JupyterLab)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench import build_model, preset
from workbench.inspect.inspection import inspect_translation, to_bertviz
from workbench.translation.tokenizer import WordTokenizer
from workbench.viz.lesson_widgets import complexity_explorer, mask_explorer, positional_explorer
from workbench.viz.widgets import AttentionInspector


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
    expected = insp.inspection.weights("dec.cross", 1)[0].numpy()
    np.testing.assert_allclose(np.asarray(fig.data[0].z), expected, rtol=1e-6)
    assert not np.allclose(first, expected)
    insp.head.value = -1
    assert insp.figure_box.children[0] is insp.grid
    np.testing.assert_allclose(np.asarray(insp.grid.data[1].z), insp.inspection.weights("dec.cross", 1)[1].numpy(), rtol=1e-6)
    insp.kind.value = "enc.self"
    assert np.asarray(insp.grid.data[0].z).shape == (5, 5)  # 4 words + eos
    assert insp.last_update_ms > 0


def test_the_grid_of_all_heads_follows_a_new_sentence(translator):
    """The probe's finding: after another sentence, the grid kept the first sentence's tick labels and size."""
    model, tok = translator
    insp = AttentionInspector(model, tok, sentence="ein mann")
    insp.head.value = -1
    insp.text.value = "ein mann fährt fahrrad"
    q, k = insp.inspection.axes(insp.kind.value)
    shown = [t.replace("&lt;", "<").replace("&gt;", ">") for t in insp.grid.layout.xaxis.ticktext]
    assert shown == list(k)
    assert np.asarray(insp.grid.data[0].z).shape == (len(q), len(k))


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


def _z(fig) -> np.ndarray:
    return np.array(fig.data[0].z, dtype=float)


def test_positional_explorer_redraws_when_a_slider_moves():
    box = positional_explorer(16, 8)
    (dm, ln), (p1, p2), readout, fig = box.children[0].children, box.children[1].children, box.children[2], box.children[3]
    before = _z(fig)
    assert before.shape == (8, 8)
    dm.value = 64  # wider table: every distance changes, the diagonal stays zero
    after = _z(fig)
    assert not np.allclose(before, after) and np.all(np.diag(after) == 0)
    # the distance between positions 0 and 1 is sqrt(sum_i 4 sin^2(w_i / 2)) with w_i = 10000^(-2i/d)
    w = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    assert after[0, 1] == pytest.approx(np.sqrt((4 * np.sin(w / 2) ** 2).sum()), rel=1e-5)
    ln.value = 12
    assert _z(fig).shape == (12, 12) and p1.max == p2.max == 11
    p2.value = 7
    assert f"{_z(fig)[0, 7]:.3f}" in readout.value and "PE(7)" in readout.value


def test_mask_explorer_redraws_when_a_control_moves():
    box = mask_explorer(6)
    (real, causal), fig = box.children[0].children, box.children[1]
    lower = np.tril(np.ones((6, 6)))
    np.testing.assert_array_equal(_z(fig), lower * (np.arange(6) < 4))  # 4 real tokens, causal
    causal.value = False
    np.testing.assert_array_equal(_z(fig), np.ones((6, 6)) * (np.arange(6) < 4))  # padding only
    real.value = 2
    np.testing.assert_array_equal(_z(fig), np.ones((6, 6)) * (np.arange(6) < 2))


def test_complexity_explorer_bars_follow_table_1():
    box = complexity_explorer(n=64, d=512)
    (ns, ds), (ks, rs), fig = box.children[0].children, box.children[1].children, box.children[2]
    kinds = list(fig.data[0].x)

    def bars():
        return dict(zip(kinds, fig.data[0].y, strict=True))

    b0 = bars()
    ns.value = 128  # self-attention 2 n^2 d quadruples; recurrent, convolution and restricted double
    b1 = bars()
    assert b1["self_attention"] == 4 * b0["self_attention"]
    assert all(b1[k] == 2 * b0[k] for k in ("recurrent", "convolutional", "restricted"))
    ds.value = 1024  # d^2 for recurrent and convolution, d for the attention rows
    b2 = bars()
    assert b2["recurrent"] == 4 * b1["recurrent"] and b2["convolutional"] == 4 * b1["convolutional"]
    assert b2["self_attention"] == 2 * b1["self_attention"] and b2["restricted"] == 2 * b1["restricted"]
    ks.value = 6  # from 3: only the convolution doubles
    b3 = bars()
    assert b3["convolutional"] == 2 * b2["convolutional"] and b3["self_attention"] == b2["self_attention"]
    rs.value = 32  # from 16: only restricted attention doubles
    b4 = bars()
    assert b4["restricted"] == 2 * b3["restricted"] and b4["recurrent"] == b3["recurrent"]


def test_inspector_saved_state_holds_its_first_figure(translator):
    """papermill/nbclient save a widget's synced state, not the in-place updates sent as messages: the saved
    FigureWidget must be the drawn heatmap, not the empty placeholder (the book redraws it from that state)."""
    model, tok = translator
    insp = AttentionInspector(model, tok, sentence="ein mann fährt fahrrad")
    saved = insp.single.get_state()["_widget_data"][0]
    np.testing.assert_allclose(np.asarray(saved["z"], dtype=float), insp.inspection.weights("dec.cross", 0)[0].numpy(),
                               rtol=1e-6)
    assert insp.figure_box.children[0] is insp.single
    insp.head.value = -1
    saved_grid = insp.grid.get_state()["_widget_data"]
    np.testing.assert_allclose(np.asarray(saved_grid[1]["z"], dtype=float),
                               insp.inspection.weights("dec.cross", 0)[1].numpy(), rtol=1e-6)


def test_inspector_shows_generation_and_the_beam_tree(translator):
    """The generation view draws the cross-attention rows greedy decoding computed step by step (with the cache),
    which equal a teacher-forced pass over the same output; with beam 4 it draws the search's tree."""
    from workbench.translation.decode_trace import rerank

    model, tok = translator
    insp = AttentionInspector(model, tok, sentence="ein mann fährt fahrrad")
    greedy = insp.generation_traces["greedy"]
    assert greedy.tokens == insp.inspection.out_ids  # the inspected translation is the greedy one
    drawn = np.asarray(insp.generation_figures["greedy"].data[0].z)
    np.testing.assert_allclose(drawn, greedy.cross[:, -1].mean(1).numpy(), rtol=1e-6)
    forced = insp.inspection.weights("dec.cross", -1).mean(0).numpy()  # (T, S) teacher-forced
    np.testing.assert_allclose(drawn, forced, atol=1e-5)
    assert "beam" not in insp.generation_figures
    # the lens along the same greedy decoding: one column per emitted word, a step's readout names its layer
    view = insp.lens_view
    assert view is not None and view.steps.tokens == greedy.tokens
    view.step.value = len(greedy.tokens) - 1
    assert "step" in view.readout.value and "head" in view.readout.value
    insp.search.value = 4
    beam, ranking = insp.generation_traces["beam"], insp.generation_traces["ranking"]
    assert ranking.winner == rerank(beam, 0.6).winner
    assert beam.hypothesis(ranking.winner) == insp.inspection.out_ids[: len(beam.hypothesis(ranking.winner))]
    names = {t.name for t in insp.generation_figures["beam"].data}
    assert "kept" in names and "winner at α = 0.6" in names
    hover = " ".join(h for d in insp.generation_figures["beam"].data if d.hovertext for h in d.hovertext)
    assert "lens: " in hover  # each node says the layer its word leads from (or never)


def test_model_note_says_what_the_shipped_model_knows():
    import workbench as wb
    from workbench.viz.widgets import GENERAL_MODEL, model_note

    card = wb.shipped.read_card("small-de-en")
    note = model_note(card)
    assert "Multi30k" in note and "photographs" in note and GENERAL_MODEL in note
    assert model_note(None) == ""
    assert GENERAL_MODEL in model_note({"name": "x", "limits": ["Domain: recipes."]})  # pointer added when missing
    assert GENERAL_MODEL in card["limits"][0] and GENERAL_MODEL in (wb.shipped.model_dir("small-de-en") / "CARD.md").read_text()
