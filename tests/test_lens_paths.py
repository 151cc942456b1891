"""The decoder lens along a decoding (workbench.inspect.lens_paths) and its figure and widget: the layer from which
each emitted word leads, read from the same prefixes the search saw."""

from __future__ import annotations

import html

import pytest
import torch

from workbench.errors import PatchingError
from workbench.inspect.greedy_trace import trace_greedy
from workbench.inspect.lens import TunedLens, logit_lens
from workbench.inspect.lens_paths import beam_tree_leads, leads_from, lens_steps
from workbench.translation.decode_trace import trace_beam
from workbench.translation.shipped import load_any

SENTENCES = ["Ein Mann mit einem roten Hut fährt Fahrrad auf einer Straße.", "Zwei Hunde spielen im Schnee."]


@pytest.fixture(scope="module")
def small():
    model, tok, _ = load_any("small-de-en")
    return model.eval(), tok


def _logits(tops: list[int], chosen: int = 1, V: int = 4) -> torch.Tensor:
    """(L, 1, 1, V) logits whose top token at layer l is tops[l]; the chosen word is token ``chosen``."""
    out = torch.zeros(len(tops), 1, 1, V)
    for layer, top in enumerate(tops):
        out[layer, 0, 0, top] = 1.0
    return out


@pytest.mark.parametrize(("tops", "expected"), [
    ([1, 1, 1], 0),  # top from the first layer on
    ([0, 1, 1], 1),
    ([0, 2, 1], 2),  # decided only at the last layer
    ([1, 0, 1], 2),  # leading at layer 0, lost at 1: it leads from 2, where it stays top
    ([1, 1, 0], -1),  # never the top word at the last layer: never leads
    ([2, 3, 0], -1),
])
def test_leads_from_is_the_first_layer_it_stays_top(tops, expected):
    assert int(leads_from(_logits(tops), torch.tensor([[1]]))) == expected


def test_leads_from_refuses_mismatched_positions():
    with pytest.raises(PatchingError, match="one chosen token per position"):
        leads_from(torch.zeros(3, 2, 5, 7), torch.zeros(2, 4, dtype=torch.long))


def test_lens_steps_along_greedy(small):
    model, tok = small
    src_ids = tok.encode_src(SENTENCES[:1])[0]
    src = torch.tensor([src_ids])
    greedy = trace_greedy(model, src, k=3, bos_id=tok.bos_id, eos_id=tok.eos_id)
    steps = lens_steps(model, src_ids, greedy.tokens, bos_id=tok.bos_id)
    L, T = steps.p_chosen.shape
    assert (L, T) == (model.cfg.n_dec_layers, len(greedy.tokens))
    # greedy emits the model's top word: at the last layer it is the lens's top word at every step
    assert steps.rank_chosen[-1].eq(0).all()
    assert all(0 <= lead <= L - 1 for lead in steps.leads)
    # the last layer's probabilities are the model's own, on the same prefixes
    tgt = torch.tensor([[tok.bos_id, *greedy.tokens[:-1]]])
    probs = torch.softmax(model(src, tgt)[0].float(), -1)  # (T, V)
    expected = probs.gather(-1, torch.tensor(greedy.tokens)[:, None])[:, 0]
    torch.testing.assert_close(steps.p_chosen[-1], expected, rtol=1e-5, atol=1e-6)
    # each step's lead agrees with the lens read on its own
    lens = logit_lens(model, src, tgt)  # (L, 1, T, V)
    for t, lead in enumerate(steps.leads):
        top = lens[:, 0, t].argmax(-1) == greedy.tokens[t]  # (L,)
        assert bool(top[lead:].all()) and (lead == 0 or not bool(top[lead - 1]))
    # the head that looked hardest: its weight is the largest of the step's cross-attention
    for t, (layer, head, pos, w) in enumerate(steps.looked):
        assert w == pytest.approx(float(steps.cross[:, :, t].max()))
        assert float(steps.cross[layer, head, t, pos]) == pytest.approx(w)
    text = steps.describe(0, lambda i: tok.id_to_token(i, "tgt"), [tok.id_to_token(i, "src") for i in src_ids])
    assert "leads from decoder layer" in text and "head" in text
    with pytest.raises(PatchingError, match="out of range"):
        steps.describe(T, str, [])


def test_lens_steps_refuses_empty_tokens(small):
    model, tok = small
    with pytest.raises(PatchingError, match="non-empty 1-D"):
        lens_steps(model, [5, 6, tok.eos_id], [], bos_id=tok.bos_id)


@pytest.mark.parametrize("sentence", SENTENCES)
def test_beam_tree_leads_match_the_lens_of_each_prefix(small, sentence):
    model, tok = small
    src_ids = tok.encode_src([sentence])[0]
    src = torch.tensor([src_ids])
    trace = trace_beam(model, src, beam=3, bos_id=tok.bos_id, eos_id=tok.eos_id)
    leads = beam_tree_leads(model, src_ids, trace)
    assert set(leads) == {n.id for n in trace.nodes[1:]}
    never = 0
    for node in trace.nodes[1:]:
        prefix = torch.tensor([[tok.bos_id, *trace.hypothesis(node.parent)]])
        top = logit_lens(model, src, prefix)[:, 0, -1].argmax(-1) == node.token  # (L,)
        if not bool(top[-1]):
            expected = -1
            never += 1
        else:
            expected = next(layer for layer in range(len(top)) if bool(top[layer:].all()))
        assert leads[node.id] == expected, (node, trace.hypothesis(node.id))
    assert never > 0  # a beam keeps lower-ranked extensions: some words never lead


@pytest.mark.parametrize("tuned", [False, True])
def test_beam_tree_leads_read_out_only_each_parents_last_position(small, tuned):
    """The leads are those of the lens read at every position of the parents' prefixes (logit_lens, as before),
    while the read-out projects one row per parent and layer: no (L, P, T, V) logits. (Each prefix read on its
    own: test_beam_tree_leads_match_the_lens_of_each_prefix.)"""
    model, tok = small
    src_ids = tok.encode_src(SENTENCES[1:])[0]
    src = torch.tensor([src_ids])
    trace = trace_beam(model, src, beam=3, bos_id=tok.bos_id, eos_id=tok.eos_id)
    lens = None
    if tuned:  # translators that move the read-out: a lens that is not the identity
        lens = TunedLens.for_model(model)
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            lens.weight.copy_(torch.randn(lens.weight.shape, generator=g) * 0.05)
            lens.bias.copy_(torch.randn(lens.bias.shape, generator=g) * 0.05)
    rows: list[int] = []  # rows each call of the output projection reads
    handle = model.generator.register_forward_hook(lambda _m, inp, _out: rows.append(inp[0].shape[:-1].numel()))
    try:
        leads = beam_tree_leads(model, src_ids, trace, lens=lens)
    finally:
        handle.remove()
    parents = {n.parent for n in trace.nodes[1:]}
    assert rows == [len(parents)] * model.cfg.n_dec_layers
    assert set(leads) == {n.id for n in trace.nodes[1:]}
    order = sorted(parents)
    prefixes = [[tok.bos_id, *trace.hypothesis(p)] for p in order]
    tgt = torch.full((len(order), max(map(len, prefixes))), model.pad_id)  # (P, T) right-padded
    for row, prefix in enumerate(prefixes):
        tgt[row, :len(prefix)] = torch.tensor(prefix)
    every = logit_lens(model, src.expand(len(order), -1), tgt, lens=lens)  # (L, P, T, V) every position
    at_last = every[:, torch.arange(len(order)), torch.tensor([len(p) - 1 for p in prefixes])]  # (L, P, V)
    for node in trace.nodes[1:]:
        expected = leads_from(at_last[:, order.index(node.parent), None, None], torch.tensor([[node.token]]))
        assert leads[node.id] == int(expected), node


def test_figure_and_widget(small):
    from workbench.viz.decoding_figures import beam_tree_figure, lens_steps_figure
    from workbench.viz.decoding_widgets import LensStepView

    model, tok = small
    src_ids = tok.encode_src(SENTENCES[1:])[0]
    src = torch.tensor([src_ids])
    label = lambda i: tok.id_to_token(i, "tgt")  # noqa: E731
    greedy = trace_greedy(model, src, k=3, bos_id=tok.bos_id, eos_id=tok.eos_id)
    steps = lens_steps(model, src_ids, greedy.tokens, bos_id=tok.bos_id)
    fig = lens_steps_figure(steps, label)
    torch.testing.assert_close(torch.tensor(fig.data[0].z, dtype=torch.float64), steps.p_chosen.double())
    rings = fig.data[1]
    assert list(rings.y) == [steps.leads[t] for t in rings.x]
    view = LensStepView(steps, label, [tok.id_to_token(i, "src") for i in src_ids])
    last = len(greedy.tokens) - 2  # the last word before eos
    view.step.value = last
    assert html.escape(label(greedy.tokens[last])) in view.readout.value
    layer, head, _, _ = steps.looked[last]
    torch.testing.assert_close(torch.tensor(view.head_figure.data[0].y, dtype=torch.float64), steps.cross[layer, head, last].double())
    trace = trace_beam(model, src, beam=3, bos_id=tok.bos_id, eos_id=tok.eos_id)
    leads = beam_tree_leads(model, src_ids, trace)
    tree = beam_tree_figure(trace, label, leads=leads)
    hover = " ".join(h for d in tree.data if d.hovertext for h in d.hovertext)
    assert "lens: leads from decoder layer" in hover and "never the top word" in hover


@pytest.mark.parametrize(("src", "tgt", "match"), [
    ([[5, 6, 3]], [[2, 10**6]], "outside the model's vocabulary"),
    ([[-1, 6, 3]], [[2]], "outside the model's vocabulary"),
    ([[5.0, 6.0, 3.0]], [[2]], "torch.long tensor of token ids, got torch.float32"),
])
def test_lens_refuses_ids_the_model_cannot_read(small, src, tgt, match):
    model, _ = small
    src_t = torch.tensor(src)
    with pytest.raises(PatchingError, match=match):
        logit_lens(model, src_t, torch.tensor(tgt))
