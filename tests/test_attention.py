"""Scaled dot-product and multi-head attention: reference equivalence, both paths, masking edge cases."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from workbench.model.attention import (
    KVCache,
    MultiHeadAttention,
    attention_weights,
    scaled_dot_product_attention,
)
from workbench.model.masks import attention_mask, causal_mask, padding_mask, to_nn_mask


def _qkv(B=2, H=3, Tq=5, Tk=7, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, Tq, D, generator=g), torch.randn(B, H, Tk, D, generator=g), torch.randn(B, H, Tk, D, generator=g))


def test_explicit_matches_formula_and_fused():
    q, k, v = _qkv()
    out, w = scaled_dot_product_attention(q, k, v, need_weights=True)
    ref_w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    torch.testing.assert_close(w, ref_w)
    torch.testing.assert_close(out, ref_w @ v)
    fused, none = scaled_dot_product_attention(q, k, v)
    assert none is None
    torch.testing.assert_close(fused, out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(fused, F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("is_causal", [False, True])
def test_paths_agree_with_padding_and_causal(is_causal):
    q, k, v = _qkv(Tq=6, Tk=6)
    pad = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    mask = attention_mask(pad)
    out_e, w = scaled_dot_product_attention(q, k, v, mask=mask, is_causal=is_causal, need_weights=True)
    out_f, _ = scaled_dot_product_attention(q, k, v, mask=mask, is_causal=is_causal)
    torch.testing.assert_close(out_e, out_f, atol=1e-6, rtol=1e-5)
    assert torch.all(w[1, :, :, 3:] == 0)  # padded keys get exactly zero weight
    if is_causal:
        assert torch.all(w.triu(1) == 0)  # no weight on the future
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


def test_fully_masked_rows_give_zeros_not_nan():
    q, k, v = _qkv(B=2, Tq=4, Tk=4)
    pad = torch.tensor([[True, True, False, False], [False, False, False, False]])
    for need in (True, False):
        out, w = scaled_dot_product_attention(q, k, v, mask=attention_mask(pad), need_weights=need)
        assert torch.isfinite(out).all()
        assert torch.all(out[1] == 0)
        if need:
            assert torch.all(w[1] == 0) and torch.isfinite(w).all()
    w = attention_weights(q, k, attention_mask(pad))
    torch.testing.assert_close(w[0].sum(-1), torch.ones(3, 4))


def test_minus_inf_gives_exact_zeros_after_softmax():
    q, k, _ = _qkv(Tq=5, Tk=5)
    w = attention_weights(q, k, is_causal=True)
    assert (w.triu(1) == 0).all()  # exactly 0.0, not merely small


def _copy_from_nn(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        ours.in_proj_weight.copy_(ref.in_proj_weight)
        ours.in_proj_bias.copy_(ref.in_proj_bias)
        ours.out_proj.weight.copy_(ref.out_proj.weight)
        ours.out_proj.bias.copy_(ref.out_proj.bias)


@pytest.mark.parametrize("self_attention", [True, False])
def test_multi_head_attention_equals_torch_nn(self_attention):
    torch.manual_seed(0)
    d_model, n_heads, B, Tq, Tk = 32, 4, 3, 6, 9
    ref = nn.MultiheadAttention(d_model, n_heads, batch_first=True).eval()
    ours = MultiHeadAttention(d_model, n_heads).eval()
    _copy_from_nn(ours, ref)
    x = torch.randn(B, Tq, d_model)
    mem = x if self_attention else torch.randn(B, Tk, d_model)
    lengths = torch.tensor([mem.shape[1], 4, 2])
    keep = torch.arange(mem.shape[1])[None, :] < lengths[:, None]  # (B, Tk) True = real
    ref_out, ref_w = ref(x, mem, mem, key_padding_mask=to_nn_mask(keep), average_attn_weights=False)
    out, w = ours(x, None if self_attention else mem, mask=attention_mask(keep), need_weights=True)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=1e-5)
    fused, _ = ours(x, None if self_attention else mem, mask=attention_mask(keep))
    torch.testing.assert_close(fused, ref_out, atol=1e-5, rtol=1e-5)


def test_causal_multi_head_equals_torch_nn_with_converted_mask():
    torch.manual_seed(1)
    ref = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    ours = MultiHeadAttention(16, 2).eval()
    _copy_from_nn(ours, ref)
    x = torch.randn(2, 5, 16)
    ref_out, _ = ref(x, x, x, attn_mask=to_nn_mask(causal_mask(5)))
    out, _ = ours(x, is_causal=True)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)


def test_kv_cache_incremental_equals_full_causal():
    torch.manual_seed(2)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 7, 16)
    full, _ = mha(x, is_causal=True)
    cache = KVCache()
    prefix, _ = mha(x[:, :3], is_causal=True, cache=cache)  # prefill three tokens at once
    steps = [mha(x[:, t : t + 1], is_causal=True, cache=cache)[0] for t in range(3, 7)]
    torch.testing.assert_close(torch.cat([prefix, *steps], 1), full, atol=1e-6, rtol=1e-5)
    assert cache.length == 7
    cache.reorder(torch.tensor([1, 1, 0]))
    assert cache.k.shape[0] == 3


def test_static_cache_computes_cross_keys_once():
    mha = MultiHeadAttention(16, 4).eval()
    mem = torch.randn(2, 5, 16)
    cache = KVCache(static=True)
    mha(torch.randn(2, 1, 16), mem, cache=cache)
    k0 = cache.k
    mha(torch.randn(2, 1, 16), torch.zeros_like(mem), cache=cache)  # memory ignored once cached
    assert cache.k is k0


def test_masks_helpers():
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    assert padding_mask(tokens, 0).tolist() == [[True, True, False], [True, False, False]]
    c = causal_mask(3, 5, offset=2)
    assert c.tolist() == [[True, True, True, False, False], [True, True, True, True, False], [True] * 5]
    m = attention_mask(padding_mask(tokens, 0), causal=True, Tq=3)
    assert m.shape == (2, 1, 3, 3)
    assert m[1, 0].tolist() == [[True, False, False], [True, False, False], [True, False, False]]
    assert attention_mask() is None
    assert torch.equal(to_nn_mask(to_nn_mask(m)), m)


def test_value_width_apart_from_key_width_matches_the_formula():
    """Paper Table 3 row (B) varies d_k alone: queries and keys d_k wide, values d_v wide, W^O (h d_v, d_model).
    The block must equal the formula head by head, on the fused and explicit paths, with and without a cache."""
    torch.manual_seed(3)
    d_model, h, d_k, d_v = 24, 3, 4, 8
    mha = MultiHeadAttention(d_model, h, d_head=d_k, d_v=d_v).eval()
    assert mha.in_proj_weight.shape == (2 * h * d_k + h * d_v, d_model) and mha.out_proj.weight.shape == (d_model, h * d_v)
    x, mem = torch.randn(2, 6, d_model), torch.randn(2, 5, d_model)
    Wq, Wk, Wv = mha.in_proj_weight.split([h * d_k, h * d_k, h * d_v])
    bq, bk, bv = mha.in_proj_bias.split([h * d_k, h * d_k, h * d_v])
    for query, source in ((x, None), (x, mem)):
        keys = query if source is None else source
        heads = []
        for i in range(h):
            q = query @ Wq[i * d_k:(i + 1) * d_k].T + bq[i * d_k:(i + 1) * d_k]  # (B, Tq, d_k)
            k = keys @ Wk[i * d_k:(i + 1) * d_k].T + bk[i * d_k:(i + 1) * d_k]  # (B, Tk, d_k)
            v = keys @ Wv[i * d_v:(i + 1) * d_v].T + bv[i * d_v:(i + 1) * d_v]  # (B, Tk, d_v)
            heads.append(torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d_k), -1) @ v)  # (B, Tq, d_v)
        expected = mha.out_proj(torch.cat(heads, -1))
        fused, _ = mha(query, source)
        explicit, weights = mha(query, source, need_weights=True)
        torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=1e-5)
        assert weights.shape == (2, h, query.shape[1], keys.shape[1])
    full, _ = mha(x, is_causal=True)
    cache = KVCache()
    steps = [mha(x[:, t:t + 1], is_causal=True, cache=cache)[0] for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.k.shape[-1] == d_k and cache.v.shape[-1] == d_v
