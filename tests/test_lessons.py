"""The helpers behind the teaching notebooks, checked on small inputs: score functions (02), positional
diagnostics (03), causality probes (04), measurement probes and Markdown tables (02, 04, 06)."""

from __future__ import annotations

import math

import pytest
import torch
from _derived import expected_jacobian_norm, jacobian_norm_closed_form  # tests/_derived.py

import workbench as wb
from workbench.lessons import complexity as C
from workbench.lessons.causality import decoder_dependency, future_leak_check, incremental_logits
from workbench.lessons.measure import counted_flops, peak_tensor_bytes
from workbench.lessons.positional import cosine_matrix, distance_matrix, offset_profile, offset_spread
from workbench.lessons.scores import (
    additive_scores,
    dot_scores,
    scaling_study,
    score_cost,
    softmax_jacobian_norm,
)
from workbench.model.positional import sinusoidal_table
from workbench.viz.figures import markdown_table


def test_scaling_study_variance_grows_with_dk_and_scaling_undoes_it():
    g = torch.Generator().manual_seed(0)
    s = scaling_study([4, 64, 256], n_pairs=4000, n_keys=8, n_queries=128, generator=g)
    assert all(len(v) == 3 for v in s.values())
    assert C.fit_loglog_slope([4, 64, 256], s["var_dot"])[0] == pytest.approx(1.0, abs=0.1)
    assert all(v == pytest.approx(1.0, abs=0.15) for v in s["var_scaled"])
    assert s["max_weight_unscaled"][-1] > s["max_weight_scaled"][-1]
    assert s["jacobian_unscaled"][-1] < s["jacobian_scaled"][-1]
    assert max(s["entropy_scaled"]) <= math.log(8) + 1e-6


def test_softmax_jacobian_norm_matches_closed_form():
    z = torch.randn(5, 7)
    p = torch.softmax(z, -1)
    jac = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]  # (5, 7, 7)
    assert torch.allclose(softmax_jacobian_norm(z), jac.flatten(1).norm(dim=-1), atol=1e-6)
    assert torch.allclose(softmax_jacobian_norm(z), jacobian_norm_closed_form(p), atol=1e-6)
    for n in (2, 7, 16):  # uniform weights: sqrt(n - 1) / n
        assert float(softmax_jacobian_norm(torch.zeros(1, n))) == pytest.approx(math.sqrt(n - 1) / n, rel=1e-6)
    assert float(softmax_jacobian_norm(torch.tensor([[3.0, 3.0, -100.0]]))) == pytest.approx(0.5, rel=1e-6)
    one_hot_like = torch.tensor([[100.0, 0.0, 0.0]])
    assert float(softmax_jacobian_norm(one_hot_like)) < 1e-6  # saturated: no gradient


@pytest.mark.parametrize("d_k", [16, 256])
def test_scaling_study_jacobian_matches_the_derived_expectation(d_k):
    """The measured mean Jacobian norm (autograd, 512 queries) against its expectation derived above, within 5
    standard errors of a 512-query mean. Scaled, it stays near 0.30 for every d_k (above the uniform
    sqrt(15)/16 = 0.24, since unit-variance scores are not flat); unscaled, it falls towards the one-hot 0."""
    study = scaling_study([d_k], n_pairs=100, n_keys=16, n_queries=512, generator=torch.Generator().manual_seed(0))
    for tag in ("scaled", "unscaled"):
        mean, std = expected_jacobian_norm(d_k, 16, scaled=tag == "scaled")
        assert study[f"jacobian_{tag}"][0] == pytest.approx(mean, abs=5 * std / math.sqrt(512)), tag


def test_additive_and_dot_scores_shapes_and_counted_flops():
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    w_q, w_k, v = torch.randn(4, 6), torch.randn(4, 6), torch.randn(6)
    add = additive_scores(q, k, w_q, w_k, v)
    assert add.shape == (2, 3, 5)
    ref = torch.tanh((q @ w_q)[:, 0] + (k @ w_k)[:, 1]) @ v  # query 0 of batch 0 and 1 against key 1
    assert torch.allclose(add[:, 0, 1], ref, atol=1e-5)
    assert dot_scores(q, k).shape == (2, 3, 5)
    assert counted_flops(lambda: dot_scores(q, k)) == score_cost("dot", 2, 3, 5, 4)["flops"]
    assert score_cost("additive", 2, 3, 5, 4, 6)["largest_intermediate"] == 2 * 3 * 5 * 6
    with pytest.raises(ValueError, match="additive"):
        score_cost("multiplicative", 1, 1, 1, 1)


def test_offset_profile_of_sinusoids_depends_on_offset_only():
    dist = distance_matrix(sinusoidal_table(40, 64))
    prof = offset_profile(dist, 10)
    assert prof["offset"] == list(range(1, 11))
    assert offset_spread(dist, 10) < 1e-4
    assert offset_spread(torch.rand(6, 6)) > 0
    cos = cosine_matrix(sinusoidal_table(5, 8))
    assert torch.allclose(cos.diagonal(), torch.ones(5), atol=1e-6)


@pytest.fixture(scope="module")
def tiny_model():
    wb.set_seed(0)
    return wb.build_model(wb.preset("tiny"), 20, 20).eval()


def test_future_leak_check_and_dependency_are_causal(tiny_model):
    src = torch.randint(4, 20, (2, 6))
    tgt = torch.randint(4, 20, (2, 7))
    leak = future_leak_check(tiny_model, src, tgt, 2, generator=torch.Generator().manual_seed(0))
    assert leak["past_identical"] and leak["past_max_diff"] == 0.0 and leak["future_max_diff"] > 0
    assert (leak["tgt_changed"][:, 3:] != tgt[:, 3:]).all() and torch.equal(leak["tgt_changed"][:, :3], tgt[:, :3])
    dep = decoder_dependency(tiny_model, src[:1], tgt[:1])
    assert dep.shape == (7, 7)
    assert float(dep.triu(1).abs().max()) == 0.0 and float(dep.diagonal().min()) > 0


def test_incremental_logits_match_full_pass(tiny_model):
    src = torch.randint(4, 20, (2, 6))
    tgt = torch.randint(4, 20, (2, 5))
    steps, cache = incremental_logits(tiny_model, src, tgt)
    with torch.no_grad():
        full = tiny_model(src, tgt)
    assert torch.allclose(steps, full, atol=1e-5) and cache.length == 5


def test_local_attention_equals_banded_full_attention():
    x = torch.randn(2, 11, 8)
    i = torch.arange(11)
    band = (i[None] - i[:, None]).abs() <= 2
    ref = torch.softmax((x @ x.transpose(1, 2) / math.sqrt(8)).masked_fill(~band, float("-inf")), -1) @ x
    assert torch.allclose(C.RestrictedSelfAttention(4)(x), ref, atol=1e-5)
    with pytest.raises(ValueError, match="even"):
        C.RestrictedSelfAttention(3)


def test_measure_table1_flops_memory_and_steps():
    att = [C.measure_layer("self_attention", n, 16, repeats=1) for n in (16, 32)]
    rnn = [C.measure_layer("recurrent", n, 16, repeats=1) for n in (16, 32)]
    assert att[1]["flops"] == 4 * att[0]["flops"] and rnn[1]["flops"] == 2 * rnn[0]["flops"]
    assert att[0]["flops"] == rnn[0]["flops"]  # n = d: 4 n² d = 4 n d²
    assert att[1]["memory_bytes"] == pytest.approx(4 * att[0]["memory_bytes"], rel=0.2)
    assert [m["steps"] for m in rnn] == [16.0, 32.0]


def test_sequential_operations_measured_by_counting_kernels():
    """Table 1's "sequential operations": the kernels one forward runs, counted. Parallel layers run the same
    number for every n (O(1)); the recurrent layer's count grows by the same amount per position (O(n))."""
    counts = {kind: [C.measure_layer(kind, n, 8, k=3, r=4, repeats=1)["operations"] for n in (8, 16, 32)]
              for kind in C.KINDS}
    for kind in ("self_attention", "convolutional", "restricted"):
        assert len(set(counts[kind])) == 1, f"{kind}: {counts[kind]}"
    small, medium, large = counts["recurrent"]
    per_step = (medium - small) / 8
    assert per_step >= 1 and large - medium == 16 * per_step


def test_peak_tensor_bytes_counts_new_tensors_only():
    x = torch.randn(100, 100)
    assert peak_tensor_bytes(lambda: x @ x, x) == 100 * 100 * 4
    assert peak_tensor_bytes(lambda: x.view(-1), x) == 0


def test_markdown_table():
    text = markdown_table([{"a": 1, "b": 0.123456}, {"a": 2, "b": "x"}])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| 1 | 0.1235 |", "| 2 | x |"]
