"""Attribution with Captum: completeness of integrated gradients, saliency against plain autograd, contrastive
attribution, rank agreement and word alignments."""

from __future__ import annotations

import math

import pytest
import torch

from workbench import build_model, preset
from workbench.errors import AttributionError
from workbench.inspect.align import ibm1
from workbench.inspect.attribution import (
    attention_summaries,
    attribute,
    completeness,
    diagonal_prior,
    head_agreement,
    mean_se,
    measure_agreement,
    paired_gap,
    source_embeddings,
    spearman,
    summarise_agreement,
    token_id,
    word_alignment,
)
from workbench.inspect.capture import capture_attention, hooks_remaining
from workbench.inspect.inspection import inspect_translation


@pytest.fixture(scope="module")
def sentence():
    torch.manual_seed(0)
    model = build_model(preset("tiny"), 40, 40).eval()
    src = torch.randperm(36)[:9] + 4  # distinct source tokens: each embedding row is used once
    src[-1] = 3
    tgt_in = torch.randint(4, 40, (6,))
    tgt_in[0] = 2
    return model, src, tgt_in


def _log_probs(model, src, tgt_in):
    with torch.no_grad():
        return torch.log_softmax(model(src[None], tgt_in[None])[0].double(), -1)  # (T, V)


def test_integrated_gradients_completeness_within_one_percent(sentence):
    model, src, tgt_in = sentence
    targets = torch.randint(4, 40, (6,))
    a = attribute(model, src, tgt_in, targets=targets, n_steps=256)
    # f(input) and f(baseline) from plain forward passes, independently of Captum and of the hook
    logp = _log_probs(model, src, tgt_in)
    torch.testing.assert_close(a.value, logp[torch.arange(6), targets], rtol=1e-5, atol=1e-5)
    ref = copy_without_source_tokens(model)
    with torch.no_grad():
        base = torch.log_softmax(ref(src[None], tgt_in[None])[0].double(), -1)[torch.arange(6), targets]
    torch.testing.assert_close(a.baseline_value, base, rtol=1e-5, atol=1e-5)
    diff = a.value - a.baseline_value
    assert diff.abs().min() > 0.01  # the 1 % below is of a difference that is not vanishing
    error = (a.scores.sum(-1) - diff).abs() / diff.abs()
    assert error.max() < 0.01, error
    torch.testing.assert_close(a.delta, a.scores.sum(-1) - diff, rtol=1e-3, atol=1e-5)
    # the check can fail: with too few steps the path integral misses (ReLU kinks) by more than 1 %
    coarse = attribute(model, src, tgt_in, targets=targets, n_steps=4)
    assert coarse.relative_completeness_error().max() > 0.01


def copy_without_source_tokens(model):
    """A copy whose source token embeddings are all zero (the integrated-gradients baseline), built directly."""
    import copy

    ref = copy.deepcopy(model)
    with torch.no_grad():
        if ref.src_embed.tokens is ref.tgt_embed.tokens:
            raise AssertionError("the test model must not tie source and target embeddings")
        ref.src_embed.tokens.weight.zero_()
    return ref


def test_saliency_and_input_x_gradient_against_autograd_on_the_embedding_table(sentence):
    model, src, tgt_in = sentence
    sal = attribute(model, src, tgt_in, method="saliency", positions=[1, 4])
    ixg = attribute(model, src, tgt_in, method="input_x_gradient", positions=[1, 4])
    assert sal.scores.shape == ixg.scores.shape == (2, 9) and sal.positions == [1, 4]
    assert torch.all(sal.scores >= 0) and (ixg.scores < 0).any()
    scale = model.src_embed.scale
    for row, t in enumerate([1, 4]):
        model.zero_grad()
        logp = torch.log_softmax(model(src[None], tgt_in[None])[0, t], -1)
        logp[sal.targets[row]].backward()
        # x_j = E[src_j] * scale, so d f / d x_j = (d f / d E[src_j]) / scale (each token used once)
        grad_x = model.src_embed.tokens.weight.grad[src] / scale  # (S, D)
        x = source_embeddings(model, src[None])[0].detach()
        torch.testing.assert_close(sal.scores[row], grad_x.norm(dim=-1).double(), rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(ixg.scores[row], (grad_x * x).sum(-1).double(), rtol=1e-4, atol=1e-7)
    model.zero_grad()
    assert sal.targets.tolist() == _log_probs(model, src, tgt_in).argmax(-1)[[1, 4]].tolist()  # default targets


def test_contrastive_attribution_signs(sentence):
    model, src, tgt_in = sentence
    logp = _log_probs(model, src, tgt_in)
    best, worst = logp.argmax(-1), logp.argmin(-1)
    c = attribute(model, src, tgt_in, targets=best, foil=worst, n_steps=32)
    torch.testing.assert_close(c.value, logp.max(-1).values - logp.min(-1).values, rtol=1e-4, atol=1e-4)
    assert torch.all(c.value > 0)  # the chosen word beats the foil
    # integrated gradients is linear in the function: IG(log p(t) - log p(f)) = IG(log p(t)) - IG(log p(f))
    t = attribute(model, src, tgt_in, targets=best, n_steps=32)
    f = attribute(model, src, tgt_in, targets=worst, n_steps=32)
    torch.testing.assert_close(c.scores, t.scores - f.scores, rtol=1e-4, atol=1e-5)
    # swapping target and foil flips every sign; a foil equal to the target explains nothing
    swapped = attribute(model, src, tgt_in, targets=worst, foil=best, method="input_x_gradient")
    forward = attribute(model, src, tgt_in, targets=best, foil=worst, method="input_x_gradient")
    torch.testing.assert_close(swapped.scores, -forward.scores)
    same = attribute(model, src, tgt_in, targets=best, foil=best, method="input_x_gradient")
    assert torch.all(same.scores == 0) and torch.all(same.value == 0)


def test_attribution_leaves_the_model_as_it_was(sentence):
    model, src, tgt_in = sentence
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    attribute(model, src, tgt_in, n_steps=8)
    assert model.training and not model.src_embed.positional._forward_pre_hooks and hooks_remaining(model) == 0
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    model.eval()


def test_tied_source_and_target_embeddings_attribute_the_source_side_only():
    torch.manual_seed(1)
    model = build_model(preset("tiny", tie_src_tgt=True), 30, 30).eval()
    src, tgt_in = torch.tensor([5, 9, 7, 3]), torch.tensor([2, 9, 6])
    a = attribute(model, src, tgt_in, n_steps=256)
    assert a.scores.shape == (3, 4) and a.relative_completeness_error().max() < 0.01


def test_spearman_by_hand():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]).item() == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]).item() == pytest.approx(-1.0)
    # ties share their rank: a -> [1, 2.5, 2.5, 4], b -> [1, 3, 2, 4]; r = 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]).item() == pytest.approx(4.5 / math.sqrt(22.5))
    rows = spearman(torch.tensor([[1.0, 2, 3], [1, 1, 1]]), torch.tensor([[3.0, 2, 1], [1, 2, 3]]))
    assert rows[0].item() == pytest.approx(-1.0) and math.isnan(rows[1].item())
    with pytest.raises(AttributionError, match="shapes"):
        spearman([1, 2], [1, 2, 3])


def test_word_alignment_pools_subwords():
    src_tokens = ["▁ein", "▁mann", "▁fähr", "t", "<eos>"]
    out_tokens = ["▁a", "▁man", "▁ri", "des", "<eos>"]
    scores = torch.zeros(5, 5)
    scores[0, 0] = 1.0  # a -> ein
    scores[1, 1] = -2.0  # man -> mann (absolute value counts)
    scores[2, 3], scores[3, 2] = 0.6, 0.5  # rides -> fährt through two different subwords
    scores[3, 0] = 0.9  # ... but "des" alone would pick "ein"
    scores[:, 4] = 5.0  # eos columns are ignored
    assert word_alignment(scores, src_tokens, out_tokens) == [0, 1, 2]


def test_attention_summaries_rows_sum_to_one(sentence):
    model, src, tgt_in = sentence
    with torch.no_grad(), capture_attention(model) as cache:
        model(src[None], tgt_in[None])
    summary = attention_summaries(cache)
    assert set(summary) == {"cross mean", "cross last", "rollout"}
    for value in summary.values():
        assert value.shape == (6, 9)
        torch.testing.assert_close(value.sum(-1), torch.ones(6, dtype=torch.float64))
    torch.testing.assert_close(summary["cross last"], cache["dec.cross", 1][0].double().mean(0))


def test_measure_agreement_on_real_sentences(subword_tokenizer, small_pairs):
    tok = subword_tokenizer
    torch.manual_seed(0)
    model = build_model(preset("tiny"), tok.src_vocab_size, tok.tgt_vocab_size).eval()
    t_prob = ibm1(small_pairs[:300], iterations=3)
    rows = measure_agreement(model, tok, [s for s, _ in small_pairs[:2]], t_prob=t_prob,
                             methods=("saliency", "integrated_gradients"), n_steps=8)
    assert len(rows) == 2
    keys = {k for k in rows[0] if "/" in k}
    assert {"spearman/saliency/rollout", "spearman/integrated_gradients/cross mean", "align/cross last",
            "align/integrated_gradients"} <= keys
    for row in rows:
        for k in keys:
            v = row[k]
            assert math.isnan(v) or (-1.0 <= v <= 1.0 if k.startswith("spearman") else 0.0 <= v <= 1.0), (k, v)
        assert any(not math.isnan(row[k]) for k in keys if k.startswith("spearman"))


def test_bad_arguments_raise_clear_errors(sentence):
    model, src, tgt_in = sentence
    with pytest.raises(AttributionError, match="unknown attribution method 'lime'"):
        attribute(model, src, tgt_in, method="lime")
    with pytest.raises(AttributionError, match="positions \\[6\\]"):
        attribute(model, src, tgt_in, positions=[6])
    with pytest.raises(AttributionError, match="foil id 40 is outside"):
        attribute(model, src, tgt_in, foil=40, method="saliency")
    with pytest.raises(AttributionError, match="targets has 2 ids for 6 positions"):
        attribute(model, src, tgt_in, targets=[4, 5], method="saliency")
    with pytest.raises(AttributionError, match="one sentence"):
        attribute(model, src.expand(2, -1), tgt_in, method="saliency")
    with pytest.raises(AttributionError, match="unknown baseline"):
        attribute(model, src, tgt_in, baseline="blur")


def test_token_id_for_a_typed_foil(subword_tokenizer):
    i = token_id(subword_tokenizer, "dog")
    assert subword_tokenizer.id_to_token(i) == "▁dog"
    with pytest.raises(AttributionError, match="empty"):
        token_id(subword_tokenizer, "  ")
    with pytest.raises(AttributionError, match="<unk>"):
        token_id(subword_tokenizer, "\u2603")


def test_measure_agreement_baselines_and_heads(subword_tokenizer, small_pairs):
    tok = subword_tokenizer
    torch.manual_seed(0)
    model = build_model(preset("tiny"), tok.src_vocab_size, tok.tgt_vocab_size).eval()
    t_prob = ibm1(small_pairs[:300], iterations=3)
    sentences = [s for s, _ in small_pairs[:3]]
    kw = dict(methods=("input_x_gradient", "integrated_gradients"), n_steps=8, baselines=True, per_head=True)
    rows = measure_agreement(model, tok, sentences, t_prob=t_prob, seed=1, **kw)
    for row in rows:
        assert -1 <= row["spearman/integrated_gradients/random"] <= 1
        assert -1 <= row["spearman/input_x_gradient/diagonal"] <= 1
        heads = torch.tensor(row["head_spearman/integrated_gradients"])
        assert heads.shape == (model.cfg.n_dec_layers, model.cfg.n_heads)
        # the completeness figures, recomputed from Captum's own convergence delta for the same translation (not
        # from the row's arithmetic): the row scores the non-eos output tokens of the greedy translation
        ins = inspect_translation(model, tok, row["source"])
        a = attribute(model, ins.src_ids, [tok.bos_id, *ins.out_ids[:-1]], targets=ins.out_ids,
                      method="integrated_gradients", n_steps=8)
        keep = [t for t, w in enumerate(ins.out_tokens) if w != "<eos>"]
        assert row["ig/abs_delta"] == pytest.approx(float(a.delta[keep].abs().sum()), rel=1e-4, abs=1e-6)
        assert row["ig/abs_change"] == pytest.approx(float((a.value - a.baseline_value)[keep].abs().sum()), rel=1e-6)
        assert row["ig/abs_change"] > 0
        # the uniform guess: 1 / number of source words (whitespace words of the sentence, as the aligner sees it)
        if not math.isnan(row["align/uniform"]):
            assert row["align/uniform"] == pytest.approx(1 / len(row["source"].split()))
        assert "align/diagonal" in row and "align/random" in row
    assert head_agreement(rows, "integrated_gradients").shape == (model.cfg.n_dec_layers, model.cfg.n_heads)
    # the random baseline is seeded: the same seed gives the same draw, another seed another one
    again = measure_agreement(model, tok, sentences, t_prob=t_prob, seed=1, **kw)
    other = measure_agreement(model, tok, sentences, t_prob=t_prob, seed=2, **kw)
    key = "spearman/integrated_gradients/random"
    assert [r[key] for r in again] == [r[key] for r in rows] and [r[key] for r in other] != [r[key] for r in rows]
    # without the options the rows carry none of these keys
    plain = measure_agreement(model, tok, sentences[:1], t_prob=t_prob, methods=("saliency",), n_steps=4)
    assert not any(k.endswith(("/random", "/diagonal", "/uniform")) or k.startswith(("ig/", "head_")) for k in plain[0])


def test_diagonal_prior_favours_the_proportional_position():
    d = diagonal_prior(3, 5)
    assert d.shape == (3, 5) and d.max() == 1.0 and d.min() >= 0.0
    assert d.argmax(-1).tolist() == [0, 2, 4]  # first -> first, middle -> middle, last -> last
    assert d[0, 1] == pytest.approx(0.75) and d[1, 0] == pytest.approx(0.5)


def test_mean_se_paired_gap_and_summaries_by_hand():
    s = mean_se([1.0, 2.0, 3.0, float("nan")])
    assert s["n"] == 3 and s["mean"] == pytest.approx(2.0) and s["se"] == pytest.approx(1 / math.sqrt(3))
    rows = [{"a": 0.5, "b": 0.1}, {"a": 0.7, "b": 0.2}, {"a": 0.6, "b": float("nan")}, {"a": 0.9, "b": 0.3}]
    g = paired_gap(rows, "a", "b")  # gaps 0.4, 0.5, 0.6 (the NaN row left out)
    assert g["n"] == 3 and g["mean"] == pytest.approx(0.5) and g["se"] == pytest.approx(0.1 / math.sqrt(3))
    assert g["z"] == pytest.approx(0.5 / (0.1 / math.sqrt(3)))
    summary = summarise_agreement([{"spearman/x/y": 0.2, "align/y": 0.5, "source": "s", "head_spearman/x": [[0.1]]},
                                   {"spearman/x/y": 0.4, "align/y": float("nan")}])
    assert set(summary) == {"spearman/x/y", "align/y"}
    assert summary["spearman/x/y"]["mean"] == pytest.approx(0.3) and summary["align/y"]["n"] == 1
    c = completeness([{"ig/abs_delta": 0.1, "ig/abs_change": 4.0, "ig/max_relative_error": 0.05},
                      {"ig/abs_delta": 0.3, "ig/abs_change": 6.0, "ig/max_relative_error": 0.2}])
    assert c["relative_error"] == pytest.approx(0.04) and c["worst_token_relative_error"] == 0.2
    with pytest.raises(AttributionError, match="baselines=True"):
        completeness([{"spearman/x/y": 0.1}])
    with pytest.raises(AttributionError, match="per_head=True"):
        head_agreement([{"spearman/x/y": 0.1}])
