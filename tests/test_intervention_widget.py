"""The head-intervention inspector, driven from Python (its figures are checked against the library)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench import build_model, hooks_remaining, preset
from workbench.inspect.capture import capture_attention
from workbench.inspect.intervene import ablate_heads
from workbench.translation.decode import translate
from workbench.translation.metrics import corpus_bleu
from workbench.translation.tokenizer import WordTokenizer
from workbench.viz.widgets import HeadInterventionInspector

PAIRS = [("ein mann fährt fahrrad", "a man rides a bike"), ("eine frau liest", "a woman reads"),
         ("ein hund läuft", "a dog runs")]


@pytest.fixture(scope="module")
def translator():
    tok = WordTokenizer.train(PAIRS)
    torch.manual_seed(0)
    return build_model(preset("tiny", n_heads=2), tok.src_vocab_size, tok.tgt_vocab_size).eval(), tok


def _teacher_forced(model, insp, heads):
    ins = insp.original
    src, tgt_in = torch.tensor([ins.src_ids]), torch.tensor([[2, *ins.out_ids[:-1]]])
    with torch.no_grad(), ablate_heads(model, heads), capture_attention(model) as cache:
        logp = torch.log_softmax(model(src, tgt_in)[0], -1)[torch.arange(len(ins.out_ids)), ins.out_ids]
    return logp, cache


def test_toggling_a_head_retranslates_and_redraws(translator):
    model, tok = translator
    insp = HeadInterventionInspector(model, tok, sentence="ein mann fährt fahrrad", max_extra=4)
    assert np.all(np.asarray(insp.delta_figure.data[0].y) == 0) and "(unchanged)" in insp.result.value
    insp.toggles[("dec.cross", 1, 0)].value = True
    heads = [("dec.cross", 1, 0)]
    assert insp.outcome.heads == heads and insp.toggles[("dec.cross", 1, 0)].button_style == "danger"
    logp, cache = _teacher_forced(model, insp, heads)
    base, _ = _teacher_forced(model, insp, [])
    np.testing.assert_allclose(np.asarray(insp.delta_figure.data[0].y), (logp - base).numpy(), atol=1e-5)
    assert np.abs(np.asarray(insp.delta_figure.data[0].y)).max() > 1e-4
    np.testing.assert_allclose(np.asarray(insp.attention_figure.data[1].z), cache["dec.cross", 0][0, 1].numpy(), rtol=1e-5)
    with torch.no_grad(), ablate_heads(model, heads):
        expected = translate(model, tok, ["ein mann fährt fahrrad"], beam=1, max_extra=4)[0]
    assert "<b>intervened:</b> <span" in insp.result.value and expected in insp.result.value
    assert insp.last_update_ms > 0 and hooks_remaining(model) == 0
    insp.layer.value = 1  # the ablated head's own layer: its subplot says so
    assert insp.attention_figure.layout.annotations[0].text == "head 0 (off)"
    insp.toggles[("dec.cross", 1, 0)].value = False  # switched back: bit-identical to the original
    assert np.all(np.asarray(insp.delta_figure.data[0].y) == 0) and insp.outcome.out_ids == insp.original.out_ids
    np.testing.assert_array_equal(np.asarray(insp.rollout_figure.data[1].z), np.asarray(insp.rollout_figure.data[0].z))


def test_layer_button_switches_a_whole_layer_and_back(translator):
    model, tok = translator
    insp = HeadInterventionInspector(model, tok, sentence="eine frau liest", max_extra=4)
    insp.layer_buttons[("enc.self", 0)].click()
    assert insp.heads_off() == [("enc.self", 0, 0), ("enc.self", 0, 1)] and insp.outcome.heads == insp.heads_off()
    insp.kind.value = "enc.self"
    assert np.asarray(insp.attention_figure.data[0].z).shape == (4, 4)  # 3 words + eos
    insp.layer_buttons[("enc.self", 0)].click()
    assert insp.heads_off() == [] and insp.outcome.heads == []
    insp.reset.click()
    assert hooks_remaining(model) == 0


def test_bleu_button_and_mean_ablation(translator):
    model, tok = translator
    insp = HeadInterventionInspector(model, tok, sentence="ein hund läuft", validation=PAIRS, max_extra=4)
    heads = [("dec.cross", 0, None), ("dec.cross", 1, None)]
    insp.set_heads([(k, layer, h) for k, layer, _ in heads for h in range(2)])
    scores = insp.score_bleu()
    srcs, refs = [s for s, _ in PAIRS], [t for _, t in PAIRS]
    with ablate_heads(model, heads):
        expected = corpus_bleu(translate(model, tok, srcs, beam=1), refs).score
    assert scores["intervened"] == pytest.approx(expected)
    assert scores["original"] == pytest.approx(corpus_bleu(translate(model, tok, srcs, beam=1), refs).score)
    assert "→" in insp.bleu_result.value
    zero = insp.outcome.reference_logprob.clone()
    insp.mode.value = "mean"
    assert insp.means is not None and not torch.allclose(insp.outcome.reference_logprob, zero)
    assert hooks_remaining(model) == 0


def test_bad_sentence_is_reported_not_raised(translator):
    model, tok = translator
    insp = HeadInterventionInspector(model, tok, sentence="ein mann")
    insp.text.value = "  "
    assert "empty" in insp.result.value and insp.bleu_button.disabled and insp.mode.disabled


def test_toggle_labels_are_never_cut(translator):
    """Seen at 1400 px in JupyterLab: fixed 34 px / 64 px buttons cut "0" to "0.." and "L0 all" to "L...". The toggles
    are as wide as their text and their rows do not shrink them; the grids wrap instead of squeezing."""
    model, tok = translator
    insp = HeadInterventionInspector(model, tok, sentence="ein mann fährt fahrrad", max_extra=4)
    buttons = [*insp.toggles.values(), *insp.layer_buttons.values()]
    for b in buttons:
        assert b.layout.width == "auto" and b.layout.flex == "0 0 auto", (b.description, b.layout.width)
        assert b.layout.min_width is not None
    grids = insp.widget.children[2]
    assert grids.layout.flex_flow == "row wrap"
