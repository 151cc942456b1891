"""Exercises of notebook 02 (scaled dot-product attention): the attention weights softmax(QKᵀ/√d_k) with a
boolean mask, and the attention output, checked against :func:`workbench.model.attention.attention_weights` and
:func:`workbench.model.attention.scaled_dot_product_attention`."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Mistake, register
from workbench.lessons.exercises.predictions import Prediction, register_prediction
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
    banded = torch.tensor([[True, True, False], [False, True, True], [True, False, True]])  # 2-D, not causal
    return {"padding": padding, "fully masked row": full, "causal": causal, "banded": banded}


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
        Case("a (Tq, Tk) mask that is not causal", (*_qkv(1, 2, 3, 3, 4, 3, 7), m["banded"])),
        Case("large scores (exp overflows unless the row's maximum is taken off first)", _large_scores()),
    ]


def _large_scores() -> tuple:
    """Scores in the hundreds, with padding: exp() of them overflows float32 (past about 88)."""
    q, k, v = _qkv(2, 2, 3, 4, 16, 5, 8)
    return q * 8, k * 8, v, P.key_mask([4, 3], 4)[:, None, None, :]


def draw(rng) -> Case:
    """A random (q, k, v, mask): sizes, dtype and a mask of one of four kinds (none, key padding with ragged
    lengths, causal, or arbitrary with some fully masked rows)."""
    B, H, Tq, Tk = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 6), rng.randint(1, 7)
    dk, dv, dt = rng.randint(1, 9), rng.randint(1, 6), P.dtype(rng)
    kind = rng.choice(["none", "padding", "causal", "rows"])
    if kind == "causal":
        Tk = Tq
    q, k, v = (P.randn(rng, B, H, Tq, dk, dtype=dt, scale=1.5), P.randn(rng, B, H, Tk, dk, dtype=dt, scale=1.5),
               P.randn(rng, B, H, Tk, dv, dtype=dt))
    if kind == "none":
        mask = None
    elif kind == "padding":
        mask = P.key_mask(P.lengths(rng, B, Tk), Tk)[:, None, None, :]  # (B, 1, 1, Tk)
    elif kind == "causal":
        mask = torch.ones(Tq, Tq, dtype=torch.bool).tril()
    else:
        mask = torch.rand(B, 1, Tq, Tk, generator=P.gen(rng)) < 0.6
        mask[0, 0, rng.randrange(Tq)] = False  # at least one query that may see nothing
    return Case(f"B={B}, H={H}, Tq={Tq}, Tk={Tk}, d_k={dk}, {kind} mask, {dt}", (q, k, v, mask))


def _ragged_case() -> Case:
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(4, 2, 5, 4, generator=g), torch.randn(4, 2, 5, 4, generator=g),
               torch.randn(4, 2, 5, 3, generator=g))
    return Case("batch 4, every row a different length", (q, k, v, P.key_mask([5, 2, 4, 1], 5)[:, None, None, :]))


PACKAGE = ("workbench.model.attention.attention_weights", "workbench.model.attention.scaled_dot_product_attention")
WEIGHT_INVARIANTS = (P.no_nan(), P.rows_sum_to_one(2), P.masked_weights_zero(2))


def _masked_after_softmax(q, k, mask):
    """The mistake of notebook 01 again: softmax over every key, then blocked weights set to 0 (rows no longer sum
    to 1)."""
    w = torch.softmax((q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]), -1)
    return w if mask is None else w * mask


MASKED_AFTER_SOFTMAX = ("masked after the softmax (as in notebook 01)", "zeroing blocked weights after the softmax "
                        "leaves rows that no longer sum to 1: fill blocked scores with -inf before the softmax")


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
    lambda: [Case(c.name, (c.args[0], c.args[1], c.args[3])) for c in [*cases(), _ragged_case()]],
    draw=lambda rng: (lambda c: Case(c.name, (c.args[0], c.args[1], c.args[3])))(draw(rng)),
    differentiable=True, package=(*PACKAGE, "torch.nn.functional.scaled_dot_product_attention",
             "torch._C._nn.scaled_dot_product_attention"),  # (on identity
    invariants=WEIGHT_INVARIANTS,  # values it returns the weights)
    mistakes=(*WEIGHT_MISTAKES, Mistake(*MASKED_AFTER_SOFTMAX, _masked_after_softmax)),
))


# -- attention ----------------------------------------------------------------------------------------------------
def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V, masked; a query with no key gets a zero output.

    Shapes: q (B, H, Tq, d_k), k (B, H, Tk, d_k), v (B, H, Tk, d_v) -> (B, H, Tq, d_v)
    """
    return package_attention(q, k, v, mask=mask)[0]


register(Exercise(
    "02.attention", "the attention output softmax(QKᵀ/√d_k) V", attention, lambda: [*cases(), _ragged_case()],
    draw=draw, differentiable=True, invariants=(P.no_nan(),),
    package=(*PACKAGE[1:], "torch.nn.functional.scaled_dot_product_attention",
             "torch._C._nn.scaled_dot_product_attention"),  # written by hand in this lesson
    mistakes=(
        Mistake(*MASKED_AFTER_SOFTMAX, lambda q, k, v, mask: _masked_after_softmax(q, k, mask) @ v),
        Mistake("fully masked rows give NaN", "a query with no allowed key must give a zero output, not NaN: zero "
                "the weights of such rows", lambda q, k, v, mask: _nan_rows(q, k, mask) @ v),
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


# -- the prediction ------------------------------------------------------------------------------------------------
register_prediction(Prediction(
    "02.variance_factor", "by what factor does Var(q·k) grow when d_k doubles?", "PREDICT_VARIANCE_FACTOR", "number",
    tolerance=0.1,
    wrong=(("the standard deviation's factor sqrt(2)", math.sqrt(2)), ("squared: 4", 4.0), ("no growth", 1.0)),
    expected=lambda params: 2.0))  # Var(Σ_{i≤d_k} q_i k_i) = d_k for independent unit-variance entries
