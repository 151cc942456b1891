"""Exercises of notebook 02 (scaled dot-product attention): the attention weights softmax(QKᵀ/√d_k) with a
boolean mask, and the attention output, checked against :func:`workbench.model.attention.attention_weights` and
:func:`workbench.model.attention.scaled_dot_product_attention`."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from workbench.lessons.exercises.core import Case, Exercise, Mistake, register
from workbench.model.attention import attention_weights as package_weights
from workbench.model.attention import scaled_dot_product_attention as package_attention

NEG_INF = float("-inf")


def _qkv(B: int, H: int, Tq: int, Tk: int, dk: int, dv: int, seed: int, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, Tq, dk, generator=g, dtype=dtype), torch.randn(B, H, Tk, dk, generator=g, dtype=dtype),
            torch.randn(B, H, Tk, dv, generator=g, dtype=dtype))


def _masks() -> dict[str, Tensor]:
    padding = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    padding[1, ..., -2:] = False  # the second sentence's last two keys are padding
    full = torch.ones(2, 1, 4, 6, dtype=torch.bool)
    full[0, 0, 2] = False  # query 2 of sentence 0 may attend to no key
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    return {"padding": padding, "fully masked row": full, "causal": causal}


def cases() -> list[Case]:
    """Inputs (q, k, v, mask) shared by both exercises; v is dropped for the weights."""
    m = _masks()
    return [
        Case("batch 2, 3 heads, padding mask", (*_qkv(2, 3, 5, 5, 8, 6, 0), m["padding"])),
        Case("no mask", (*_qkv(2, 2, 4, 4, 4, 4, 1), None)),
        Case("batch 1, 1 head, causal mask", (*_qkv(1, 1, 3, 3, 4, 5, 2), m["causal"])),
        Case("fully masked row", (*_qkv(2, 3, 4, 6, 8, 8, 3), m["fully masked row"])),
        Case("length 1", (*_qkv(2, 5, 1, 1, 4, 4, 4), None)),
        Case("cross-attention Tq != Tk, float64", (*_qkv(2, 1, 3, 7, 16, 2, 5, torch.float64), None)),
    ]


# -- attention_weights --------------------------------------------------------------------------------------------
def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
    """softmax(Q Kᵀ / √d_k) over the keys; masked keys (mask False) get 0, a query with no key gets all zeros.

    Shapes: q (B, H, Tq, d_k), k (B, H, Tk, d_k), mask broadcastable to (B, H, Tq, Tk) -> (B, H, Tq, Tk)
    """
    return package_weights(q, k, mask)


def _weights(q: Tensor, k: Tensor, mask: Tensor | None, scale: float | None = None, dim: int = -1,
             fill: float = NEG_INF, invert: bool = False, zero_empty_rows: bool = True) -> Tensor:
    """A parametrised attention-weights computation for writing the planted mistakes."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(mask if invert else ~mask, fill)
    w = torch.softmax(scores, dim=dim)
    if mask is not None and zero_empty_rows:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return w


def _no_scale(q, k, mask):
    return _weights(q, k, mask, scale=1.0)


def _by_dk(q, k, mask):
    return _weights(q, k, mask, scale=1 / q.shape[-1])


def _wrong_axis(q, k, mask):
    return _weights(q, k, mask, dim=-2)


def _inverted(q, k, mask):
    return _weights(q, k, mask, invert=True, zero_empty_rows=False)


def _zero_fill(q, k, mask):
    return _weights(q, k, mask, fill=0.0)


def _nan_rows(q, k, mask):
    return _weights(q, k, mask, zero_empty_rows=False)


WEIGHT_MISTAKES = (
    Mistake("forgot to divide by sqrt(d_k)", "scale the scores: Q Kᵀ / √d_k, where d_k = q.shape[-1]", _no_scale),
    Mistake("divided by d_k instead of sqrt(d_k)", "divide by the square root of d_k (math.sqrt(d_k)), not by d_k",
            _by_dk),
    Mistake("softmax over the wrong axis", "take the softmax over the keys (dim=-1): each query's row of weights "
            "sums to 1", _wrong_axis),
    Mistake("mask convention inverted", "mask True means 'may attend': fill the scores where the mask is False "
            "(~mask), as scaled_dot_product_attention does", _inverted),
    Mistake("masked with 0 instead of -inf", "a score of 0 still gets weight after the softmax: fill masked scores "
            "with float('-inf')", _zero_fill),
    Mistake("fully masked rows give NaN", "a query with no allowed key is all -inf, and softmax gives NaN: set such "
            "rows to 0 (weights.masked_fill(~mask.any(-1, keepdim=True), 0))", _nan_rows),
)

register(Exercise(
    "02.attention_weights", "the attention weights softmax(QKᵀ/√d_k) with a mask", attention_weights,
    lambda: [Case(c.name, (c.args[0], c.args[1], c.args[3])) for c in cases()],
    mistakes=WEIGHT_MISTAKES,
))


# -- attention ----------------------------------------------------------------------------------------------------
def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V, masked; a query with no key gets a zero output.

    Shapes: q (B, H, Tq, d_k), k (B, H, Tk, d_k), v (B, H, Tk, d_v) -> (B, H, Tq, d_v)
    """
    return package_attention(q, k, v, mask=mask)[0]


register(Exercise(
    "02.attention", "the attention output softmax(QKᵀ/√d_k) V", attention, cases,
    mistakes=(
        Mistake("weights applied to the keys", "the output is the weighted sum of the values: weights @ v, not "
                "weights @ k", lambda q, k, v, mask: _weights(q, k, mask) @ k),
        Mistake("forgot to divide by sqrt(d_k)", "scale the scores by 1/√d_k before the softmax",
                lambda q, k, v, mask: _no_scale(q, k, mask) @ v),
        Mistake("softmax over the wrong axis", "take the softmax over the keys (dim=-1)",
                lambda q, k, v, mask: _wrong_axis(q, k, mask) @ v),
        Mistake("values not weighted (plain average)", "use the attention weights: weights @ v",
                lambda q, k, v, mask: v.mean(-2, keepdim=True).expand(*q.shape[:-1], v.shape[-1])),
    ),
))
