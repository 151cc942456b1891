"""Exercises of notebook 03 (multi-head attention): split the width into heads, merge them back, and the whole
MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, checked against :class:`workbench.model.attention.MultiHeadAttention`
(its ``_split``, its reshape before ``out_proj``, and its forward pass with the same weights)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Mistake, register, variants
from workbench.lessons.exercises.predictions import Prediction, register_prediction
from workbench.model.attention import MultiHeadAttention


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- split_heads --------------------------------------------------------------------------------------------------
def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Cut the feature axis into ``n_heads`` slices of width d_head = D / n_heads, heads before positions.

    Shapes: x (B, T, D) -> (B, H, T, D/H)
    """
    mha = MultiHeadAttention(x.shape[-1], n_heads)
    return mha._split(x)  # the package's own split: view (B, T, H, d_head), transpose(1, 2)


def _split_cases() -> list[Case]:
    g = _gen(0)
    return [Case("batch 2, 5 positions, D=12, 3 heads", (torch.randn(2, 5, 12, generator=g), 3)),
            Case("batch 1, length 1, 2 heads", (torch.randn(1, 1, 8, generator=g), 2)),
            Case("1 head", (torch.randn(2, 3, 4, generator=g), 1)),
            Case("5 heads, float64", (torch.randn(2, 4, 10, generator=g, dtype=torch.float64), 5))]


def _split_no_transpose(x, n_heads):
    B, T, D = x.shape
    return x.reshape(B, n_heads, T, D // n_heads)


def _split_strided(x, n_heads):
    B, T, D = x.shape
    return x.reshape(B, T, D // n_heads, n_heads).permute(0, 3, 1, 2)


def _split_not_moved(x, n_heads):
    B, T, D = x.shape
    return x.reshape(B, T, n_heads, D // n_heads)


def _split_draw(rng) -> Case:
    B, T, H, dh, dt = rng.randint(1, 3), rng.randint(1, 6), rng.randint(1, 5), rng.randint(1, 4), P.dtype(rng)
    return Case(f"B={B}, T={T}, {H} heads of width {dh}, {dt}", (P.randn(rng, B, T, H * dh, dtype=dt), H))


register(Exercise(
    "03.split_heads", "split (B, T, D) into heads (B, H, T, D/H)", split_heads, _split_cases, name="to_heads",
    draw=_split_draw, differentiable=True, package=("workbench.model.attention.MultiHeadAttention._split",),
    mistakes=(
        Mistake("reshaped straight to (B, H, T, d_head)", "that mixes positions into heads: reshape to "
                "(B, T, H, d_head) first (the features split), then move H forward with transpose(1, 2)",
                _split_no_transpose),
        Mistake("heads take every H-th feature", "head h owns the contiguous slice h·d_head ... (h+1)·d_head - 1: "
                "view as (B, T, H, d_head), not (B, T, d_head, H)", _split_strided),
        Mistake("head axis not moved before positions", "after the view (B, T, H, d_head), transpose(1, 2) so that "
                "attention runs over T within each head: (B, H, T, d_head)", _split_not_moved),
    )))


# -- merge_heads --------------------------------------------------------------------------------------------------
def merge_heads(z: Tensor) -> Tensor:
    """Concatenate the heads' outputs along the features: Concat(head_1, ..., head_h) at every position.

    Shapes: z (B, H, T, d_v) -> (B, T, H·d_v)
    """
    B, H, T, Dv = z.shape
    return z.transpose(1, 2).reshape(B, T, H * Dv)  # as MultiHeadAttention.forward before out_proj


def _merge_cases() -> list[Case]:
    g = _gen(1)
    return [Case("batch 2, 3 heads, 5 positions", (torch.randn(2, 3, 5, 4, generator=g),)),
            Case("batch 1, length 1", (torch.randn(1, 2, 1, 4, generator=g),)),
            Case("1 head", (torch.randn(2, 1, 3, 4, generator=g),)),
            Case("5 heads, float64", (torch.randn(2, 5, 4, 2, generator=g, dtype=torch.float64),))]


def _merge_draw(rng) -> Case:
    B, H, T, dv, dt = rng.randint(1, 3), rng.randint(1, 5), rng.randint(1, 6), rng.randint(1, 4), P.dtype(rng)
    return Case(f"B={B}, {H} heads, T={T}, d_v={dv}, {dt}", (P.randn(rng, B, H, T, dv, dtype=dt),))


MHA_PACKAGE = ("workbench.model.attention.MultiHeadAttention.forward",
               "workbench.model.attention.scaled_dot_product_attention",
               "torch.nn.functional.multi_head_attention_forward")

register(Exercise(
    "03.merge_heads", "merge the heads back: (B, H, T, d_v) -> (B, T, H·d_v)", merge_heads, _merge_cases,
    draw=_merge_draw, differentiable=True, package=MHA_PACKAGE[:1],
    mistakes=(
        Mistake("heads merged in the wrong order", "a reshape without the transpose mixes positions of one head into "
                "one row: transpose(1, 2) to (B, T, H, d_v) first, then reshape",
                lambda z: z.reshape(z.shape[0], z.shape[2], -1)),
        Mistake("heads interleaved feature by feature", "concatenate whole heads: (B, T, H, d_v) -> (B, T, H·d_v), "
                "not (B, T, d_v, H)", lambda z: z.permute(0, 2, 3, 1).reshape(z.shape[0], z.shape[2], -1)),
        Mistake("heads summed instead of concatenated", "the heads are concatenated (width H·d_v), then W^O mixes "
                "them", lambda z: z.sum(1)),
        Mistake("heads averaged instead of concatenated", "the heads are concatenated (width H·d_v), not averaged",
                lambda z: z.mean(1)),
    )))


# -- multi_head_attention -----------------------------------------------------------------------------------------
def multi_head_attention(x: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor, W_o: Tensor, n_heads: int,
                         mask: Tensor | None = None) -> Tensor:
    """Self-attention with ``n_heads`` heads: Q = x W_q, K = x W_k, V = x W_v, split into heads, scaled
    dot-product attention per head (mask True = may attend), heads concatenated, times W_o. The package's
    :class:`MultiHeadAttention` with these weights (no biases).

    Shapes: x (B, T, D), W_* (D, D), mask (B, 1, 1, T) or None -> (B, T, D)
    """
    D = x.shape[-1]
    mha = MultiHeadAttention(D, n_heads, bias=False).to(x.dtype).eval()
    weights = {"in_proj_weight": torch.cat([W_q, W_k, W_v], dim=1).T,  # rows: W^Q, W^K, W^V (as nn.Linear)
               "out_proj.weight": W_o.T}
    # differentiable in the weights too; the explicit path, whose gradients are exact enough to judge by (the fused
    # kernel's float32 backward loses a saturated softmax's tiny gradients on some CPUs)
    return torch.func.functional_call(mha, weights, (x,), {"mask": mask, "need_weights": True})[0]


def _mha_case(B: int, T: int, D: int, H: int, seed: int, dtype: torch.dtype = torch.float32,
              pad: bool = False) -> tuple:
    g = _gen(seed)
    x = torch.randn(B, T, D, generator=g, dtype=dtype)
    Ws = [torch.randn(D, D, generator=g, dtype=dtype) / math.sqrt(D) for _ in range(4)]
    mask = None
    if pad:
        mask = torch.ones(B, 1, 1, T, dtype=torch.bool)
        mask[-1, ..., -2:] = False
    return (x, *Ws, H, mask)


def _mha_ragged() -> tuple:
    x, *Ws, H, _ = _mha_case(4, 5, 8, 2, 6)
    return (x, *Ws, H, P.key_mask([5, 1, 3, 4], 5)[:, None, None, :])


def _mha_draw(rng) -> Case:
    B, T, H, dh, dt = rng.randint(1, 4), rng.randint(1, 6), rng.randint(1, 4), rng.randint(1, 4), P.dtype(rng)
    D = H * dh
    Ws = [P.randn(rng, D, D, dtype=dt, scale=D ** -0.5) for _ in range(4)]
    mask = P.key_mask(P.lengths(rng, B, T), T)[:, None, None, :] if rng.random() < 0.7 else None
    return Case(f"B={B}, T={T}, {H} heads of width {dh}, {'padding' if mask is not None else 'no mask'}, {dt}",
                (P.randn(rng, B, T, D, dtype=dt), *Ws, H, mask))


def _mha_cases() -> list[Case]:
    return [Case("batch 2, D=12, 3 heads, padding", _mha_case(2, 5, 12, 3, 2, pad=True)),
            Case("batch 4, every row a different length", _mha_ragged()),
            Case("batch 1, length 1, 2 heads", _mha_case(1, 1, 8, 2, 3)),
            Case("1 head", _mha_case(2, 4, 6, 1, 4)),
            Case("5 heads, float64", _mha_case(2, 4, 10, 5, 5, torch.float64, pad=True)),
            Case("large scores (exp overflows unless the row's maximum is taken off first)", _mha_large()),
            Case("real keys scoring about -800 (a finite fill such as -100 lets the padded key through)",
                 _mha_far_below())]


def _mha_far_below() -> tuple:
    """Identity projections, 1 head: position 0 is padding, and against its query every real key scores about -800
    (rows of opposite signs), so a fill of -50, -100 or -500 lets the padded key through where -inf does not."""
    a = torch.full((4,), 20.0)
    x = torch.stack([a, -a, -a * 1.01, -a * 0.99])[None]  # (1, 4, 4)
    eye = torch.eye(4)
    mask = torch.tensor([False, True, True, True])[None, None, None, :]
    return (x, eye, eye, eye, eye, 1, mask)


def _mha_large() -> tuple:
    """Inputs of size 5 through near-identity projections: scores in the hundreds, past exp()'s float32 range."""
    x, *Ws, H, mask = _mha_case(2, 4, 8, 2, 7, pad=True)
    return (x * 5, *[W * 0.3 + torch.eye(8) for W in Ws], H, mask)


def _mha(x, W_q, W_k, W_v, W_o, n_heads, mask, scale_by="d_head", merge="right", project=True, split=True,
         mask_after=False):
    B, T, D = x.shape
    H = n_heads if split else 1
    q, k, v = (t.reshape(B, T, H, D // H).transpose(1, 2) for t in (x @ W_q, x @ W_k, x @ W_v))  # (B, H, T, d)
    scale = 1 / math.sqrt(D if scale_by == "d_model" else q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None and not mask_after:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, -1)
    z = (w * mask if mask is not None and mask_after else w) @ v  # (B, H, T, d)
    z = z.transpose(1, 2).reshape(B, T, D) if merge == "right" else z.reshape(B, T, D)
    return z @ W_o if project else z


register(Exercise(
    "03.multi_head_attention", "MultiHead(Q, K, V) = Concat(head_1..head_h) W^O", multi_head_attention,
    _mha_cases, atol=1e-5, draw=_mha_draw, differentiable=True, package=MHA_PACKAGE,
    mistakes=variants(
        _mha,
        ("masked after the softmax (as in notebook 01)", "zeroing blocked weights after the softmax leaves rows that "
         "no longer sum to 1: fill blocked scores with -inf before the softmax", {"mask_after": True}),
        ("no output projection W^O", "multiply the concatenated heads by W_o at the end", {"project": False}),
        ("scaled by sqrt(d_model) instead of sqrt(d_head)", "each head's scores are divided by √d_head (its own key "
         "width D/H), not √D", {"scale_by": "d_model"}),
        ("one head of width d_model", "split Q, K and V into n_heads heads before attending", {"split": False}),
        ("heads merged in the wrong order", "transpose (B, H, T, d) to (B, T, H, d) before the reshape to (B, T, D)",
         {"merge": "wrong"}),
    )))


# -- the prediction ------------------------------------------------------------------------------------------------
def _params_ratio(d_model: int = 64) -> float:
    """Parameters of an 8-head block over those of a 1-head block of the same width."""
    def count(n_heads: int) -> int:
        return sum(p.numel() for p in MultiHeadAttention(d_model, n_heads).parameters())

    return count(8) / count(1)


register_prediction(Prediction(
    "03.params_ratio", "how many times more parameters has a block of 8 heads than a block of 1 head?",
    "PREDICT_PARAMS_RATIO", "number", tolerance=0.01,
    wrong=(("8 heads, 8 times the weights", 8.0), ("one eighth", 0.125), ("twice", 2.0)),
    expected=lambda params: _params_ratio()))
