"""The helpers behind the teaching notebooks, checked on small inputs: score functions (02), positional
diagnostics (03), causality probes (04), measurement probes and Markdown tables (02, 04, 06)."""

from __future__ import annotations

import math

import pytest
import torch

import workbench as wb
from workbench import complexity as C
from workbench.figures import markdown_table
from workbench.masks import decoder_dependency, future_leak_check, incremental_logits
from workbench.measure import counted_flops, peak_tensor_bytes
from workbench.positional import (
    cosine_matrix,
    distance_matrix,
    offset_profile,
    offset_spread,
    sinusoidal_table,
)
from workbench.scores import additive_scores, dot_scores, scaling_study, score_cost, softmax_jacobian_norm


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
    one_hot_like = torch.tensor([[100.0, 0.0, 0.0]])
    assert float(softmax_jacobian_norm(one_hot_like)) < 1e-6  # saturated: no gradient


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


def test_peak_tensor_bytes_counts_new_tensors_only():
    x = torch.randn(100, 100)
    assert peak_tensor_bytes(lambda: x @ x, x) == 100 * 100 * 4
    assert peak_tensor_bytes(lambda: x.view(-1), x) == 0


def test_markdown_table():
    text = markdown_table([{"a": 1, "b": 0.123456}, {"a": 2, "b": "x"}])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| 1 | 0.1235 |", "| 2 | x |"]
