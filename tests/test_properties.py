"""Property tests (hypothesis) for masks and attention over random shapes, padding and causal settings."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import build_model, preset
from workbench.model.attention import scaled_dot_product_attention
from workbench.model.masks import attention_mask


@st.composite
def attention_case(draw):
    B, H = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    Tq, Tk, D = draw(st.integers(1, 7)), draw(st.integers(1, 7)), draw(st.sampled_from([2, 4, 8]))
    lengths = draw(st.lists(st.integers(0, Tk), min_size=B, max_size=B))
    causal = draw(st.booleans()) and Tq == Tk
    seed = draw(st.integers(0, 10_000))
    return B, H, Tq, Tk, D, lengths, causal, seed


@settings(max_examples=60, deadline=None)
@given(attention_case())
def test_rows_sum_to_one_or_zero_and_paths_agree(case):
    B, H, Tq, Tk, D, lengths, causal, seed = case
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, t, D, generator=g) for t in (Tq, Tk, Tk))
    keep = torch.arange(Tk)[None, :] < torch.tensor(lengths)[:, None]  # (B, Tk)
    mask = attention_mask(keep, causal=causal, Tq=Tq)
    out_e, w = scaled_dot_product_attention(q, k, v, mask=mask, need_weights=True)
    out_f, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    full = mask.expand(B, H, Tq, Tk)
    allowed_any = full.any(-1)
    sums = w.sum(-1)
    assert torch.isfinite(w).all() and torch.isfinite(out_f).all()
    torch.testing.assert_close(sums[allowed_any], torch.ones_like(sums[allowed_any]))
    assert torch.all(w[~full] == 0)  # masked keys get exactly zero
    assert torch.all(sums[~allowed_any] == 0) and torch.all(out_f[~allowed_any] == 0)
    torch.testing.assert_close(out_e, out_f, atol=1e-5, rtol=1e-4)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.integers(0, 5), st.integers(0, 1000))
def test_padding_invariance(real_len, extra_pad, seed):
    torch.manual_seed(0)
    model = build_model(preset("tiny"), 20, 20).eval()
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 20, (1, real_len), generator=g)
    tgt = torch.randint(4, 20, (1, 4), generator=g)
    padded = torch.cat([src, torch.zeros(1, extra_pad, dtype=torch.long)], 1)
    torch.testing.assert_close(model(src, tgt), model(padded, tgt), atol=1e-5, rtol=1e-4)
