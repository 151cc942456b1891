"""Exercises of notebook 06 (the Transformer layer): LayerNorm, the residual sub-layer post-LN and pre-LN, the
position-wise feed-forward network, the scaled input embedding and the tied output projection, checked against
:func:`torch.nn.functional.layer_norm`, :func:`workbench.model.transformer.sublayer_connection`,
:class:`~workbench.model.transformer.FeedForward` and :class:`~workbench.model.transformer.Embedding`'s scaling."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Mistake, register, variants
from workbench.lessons.exercises.predictions import Prediction, register_prediction
from workbench.model.transformer import FeedForward, sublayer_connection


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- layer_norm ---------------------------------------------------------------------------------------------------
def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the features: (x - mean) / sqrt(var + eps) * gamma + beta, with the biased variance.

    Shapes: x (B, T, D), gamma and beta (D,) -> (B, T, D)
    """
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)


def _ln_case(B: int, T: int, D: int, seed: int, dtype: torch.dtype = torch.float32, constant_row: bool = False,
             eps: float = 1e-5) -> tuple:
    g = _gen(seed)
    x = torch.randn(B, T, D, generator=g, dtype=dtype) * 3 + 1
    if constant_row:
        x[0, 0] = 2.0  # zero variance: only eps keeps the division finite
    return x, 1 + torch.randn(D, generator=g, dtype=dtype) * 0.5, torch.randn(D, generator=g, dtype=dtype), eps


def _ln_far_from_zero() -> tuple:
    x, gamma, beta, eps = _ln_case(2, 4, 8, 5)
    return x + 1000, gamma, beta, eps


def _ln(x, gamma, beta, eps, dim=-1, unbiased=False, eps_outside=False, affine=True):
    mean = x.mean(dim, keepdim=True)
    var = x.var(dim, keepdim=True, unbiased=unbiased)
    y = (x - mean) / (var.sqrt() + eps) if eps_outside else (x - mean) / (var + eps).sqrt()
    return y * gamma + beta if affine else y


def _ln_draw(rng) -> Case:
    B, T, D, dt = rng.randint(1, 3), rng.randint(1, 5), rng.randint(2, 12), P.dtype(rng)
    eps = rng.choice([1e-5, 1e-3, 0.1])
    return Case(f"B={B}, T={T}, D={D}, eps {eps}, {dt}", _ln_case(B, T, D, rng.randrange(10**6), dt, eps=eps))


register(Exercise(
    "06.layer_norm", "LayerNorm over the features", layer_norm, draw=_ln_draw, differentiable=True,
    package=("torch.nn.functional.layer_norm", "torch.layer_norm", "torch.nn.LayerNorm.forward",
             "torch.nn.functional.group_norm"),
    cases=lambda: [Case("batch 2, 5 positions, D=8", _ln_case(2, 5, 8, 0)),
             Case("batch 1, length 1", _ln_case(1, 1, 6, 1)),
             Case("a constant row, eps 0.1", _ln_case(2, 3, 4, 2, constant_row=True, eps=0.1)),
             Case("float64", _ln_case(2, 4, 5, 3, torch.float64)),
             Case("features around 1000 (E[x²] - E[x]² loses the variance to rounding)", _ln_far_from_zero())],
    atol=1e-4,
    mistakes=variants(
        _ln,
        ("normalised over the positions", "LayerNorm normalises each position's feature vector: mean and variance "
         "over the last axis (dim=-1)", {"dim": -2}),
        ("unbiased variance", "LayerNorm divides by D, not D - 1: x.var(-1, unbiased=False)", {"unbiased": True}),
        ("eps added outside the square root", "add eps to the variance, then take the root: sqrt(var + eps)",
         {"eps_outside": True}),
        ("gamma and beta left out", "finish with * gamma + beta (the learned gain and bias)", {"affine": False}),
    )))


# -- post_ln / pre_ln ---------------------------------------------------------------------------------------------
class _Sublayer(nn.Module):
    """A stand-in sub-layer (a small random affine map and a tanh) for the residual exercises."""

    def __init__(self, D: int, seed: int, dtype: torch.dtype) -> None:
        super().__init__()
        g = _gen(seed)
        self.w = torch.randn(D, D, generator=g, dtype=dtype) / math.sqrt(D)
        self.b = torch.randn(D, generator=g, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(x @ self.w + self.b)


def _norm(D: int, seed: int, dtype: torch.dtype) -> nn.LayerNorm:
    g = _gen(seed + 100)
    norm = nn.LayerNorm(D).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(1 + torch.randn(D, generator=g, dtype=dtype) * 0.5)
        norm.bias.copy_(torch.randn(D, generator=g, dtype=dtype))
    return norm


def _res_cases() -> list[Case]:
    def case(B, T, D, seed, dtype=torch.float32):
        return (torch.randn(B, T, D, generator=_gen(seed), dtype=dtype) * 2, _Sublayer(D, seed, dtype), _norm(D, seed, dtype))

    return [Case("batch 2, 5 positions, D=8", case(2, 5, 8, 0)), Case("batch 1, length 1", case(1, 1, 6, 1)),
            Case("float64", case(2, 3, 4, 2, torch.float64))]


def post_ln(x: Tensor, sublayer, norm) -> Tensor:
    """The paper's residual sub-layer (post-LN): LayerNorm(x + Sublayer(x)) (dropout left out).

    Shapes: x (B, T, D) -> (B, T, D)
    """
    return sublayer_connection(x, sublayer, norm, nn.Identity(), norm_first=False)


def pre_ln(x: Tensor, sublayer, norm) -> Tensor:
    """The pre-LN residual sub-layer: x + Sublayer(LayerNorm(x)) (dropout left out).

    Shapes: x (B, T, D) -> (B, T, D)
    """
    return sublayer_connection(x, sublayer, norm, nn.Identity(), norm_first=True)


def _res_draw(rng) -> Case:
    B, T, D, dt = rng.randint(1, 3), rng.randint(1, 5), rng.randint(2, 10), P.dtype(rng)
    seed = rng.randrange(10**6)
    return Case(f"B={B}, T={T}, D={D}, {dt}", (torch.randn(B, T, D, generator=_gen(seed), dtype=dt) * 2,
                                               _Sublayer(D, seed, dt), _norm(D, seed, dt)))


RESIDUAL_PACKAGE = ("workbench.model.transformer.sublayer_connection", "workbench.model.transformer.ResidualLayer.forward")

register(Exercise(
    "06.post_ln", "the residual sub-layer, post-LN: LayerNorm(x + Sublayer(x))", post_ln, _res_cases,
    draw=_res_draw, differentiable=True, package=RESIDUAL_PACKAGE,
    mistakes=(
        Mistake("LayerNorm placed before instead of after (pre-LN)", "the paper normalises the sum: "
                "norm(x + sublayer(x)); x + sublayer(norm(x)) is the pre-LN variant",
                lambda x, sub, norm: x + sub(norm(x))),
        Mistake("no residual connection", "add the input back before normalising: norm(x + sublayer(x))",
                lambda x, sub, norm: norm(sub(x))),
        Mistake("normalised the input, not the sum", "LayerNorm applies to x + sublayer(x), not to x alone",
                lambda x, sub, norm: norm(x) + sub(x)),
    )))

register(Exercise(
    "06.pre_ln", "the residual sub-layer, pre-LN: x + Sublayer(LayerNorm(x))", pre_ln, _res_cases,
    draw=_res_draw, differentiable=True, package=RESIDUAL_PACKAGE,
    mistakes=(
        Mistake("LayerNorm placed after instead of before (post-LN)", "pre-LN normalises the sub-layer's input: "
                "x + sublayer(norm(x)); norm(x + sublayer(x)) is the paper's post-LN",
                lambda x, sub, norm: norm(x + sub(x))),
        Mistake("residual taken from the normalised input", "add the raw x: x + sublayer(norm(x)), so the residual "
                "path stays an identity", lambda x, sub, norm: norm(x) + sub(norm(x))),
        Mistake("no residual connection", "add x back: x + sublayer(norm(x))", lambda x, sub, norm: sub(norm(x))),
    )))


# -- feed_forward -------------------------------------------------------------------------------------------------
def feed_forward(x: Tensor, W1: Tensor, b1: Tensor, W2: Tensor, b2: Tensor) -> Tensor:
    """FFN(x) = max(0, x W1 + b1) W2 + b2 at every position: the package's :class:`FeedForward` with these weights.

    Shapes: x (B, T, D), W1 (D, d_ff), b1 (d_ff,), W2 (d_ff, D), b2 (D,) -> (B, T, D)
    """
    ffn = FeedForward(W1.shape[0], W1.shape[1]).to(x.dtype).eval()
    weights = {"linear1.weight": W1.T, "linear1.bias": b1, "linear2.weight": W2.T, "linear2.bias": b2}
    return torch.func.functional_call(ffn, weights, (x,))  # differentiable in the weights too


def _ffn_case(B, T, D, d_ff, seed, dtype=torch.float32):
    g = _gen(seed)
    return (torch.randn(B, T, D, generator=g, dtype=dtype), torch.randn(D, d_ff, generator=g, dtype=dtype) / math.sqrt(D),
            torch.randn(d_ff, generator=g, dtype=dtype), torch.randn(d_ff, D, generator=g, dtype=dtype) / math.sqrt(d_ff),
            torch.randn(D, generator=g, dtype=dtype))


def _ffn_large() -> tuple:
    x, *rest = _ffn_case(2, 4, 8, 16, 3)
    return (x * 5, *rest)


def _ffn_draw(rng) -> Case:
    B, T, D, d_ff, dt = rng.randint(1, 3), rng.randint(1, 5), rng.randint(1, 8), rng.randint(1, 24), P.dtype(rng)
    return Case(f"B={B}, T={T}, D={D}, d_ff={d_ff}, {dt}", _ffn_case(B, T, D, d_ff, rng.randrange(10**6), dt))


register(Exercise(
    "06.feed_forward", "the position-wise feed-forward network max(0, xW1 + b1)W2 + b2", feed_forward,
    draw=_ffn_draw, differentiable=True, package=("workbench.model.transformer.FeedForward.forward",),
    cases=lambda: [Case("batch 2, D=8, d_ff=32", _ffn_case(2, 5, 8, 32, 0)), Case("batch 1, length 1", _ffn_case(1, 1, 4, 16, 1)),
             Case("float64", _ffn_case(2, 3, 6, 24, 2, torch.float64)),
             Case("large inputs (hidden units well above 6)", _ffn_large())],
    mistakes=(
        Mistake("no ReLU", "apply max(0, ·) between the two linear maps, or the FFN is one linear map",
                lambda x, W1, b1, W2, b2: (x @ W1 + b1) @ W2 + b2),
        Mistake("ReLU after the second layer too", "the output of W2 + b2 is not rectified: only the hidden layer is",
                lambda x, W1, b1, W2, b2: torch.relu(torch.relu(x @ W1 + b1) @ W2 + b2)),
        Mistake("biases left out", "add b1 before the ReLU and b2 at the end",
                lambda x, W1, b1, W2, b2: torch.relu(x @ W1) @ W2),
    )))


# -- scaled_embedding / tied_logits -------------------------------------------------------------------------------
def scaled_embedding(tokens: Tensor, table: Tensor) -> Tensor:
    """The input embedding of the paper (3.4): look up each token's row and multiply by √d_model, as
    :class:`~workbench.model.transformer.Embedding` does before adding positions.

    Shapes: tokens (B, T) ids, table (V, d_model) -> (B, T, d_model)
    """
    return F.embedding(tokens, table) * math.sqrt(table.shape[-1])


def _emb_cases() -> list[Case]:
    g = _gen(5)
    return [Case("batch 2, V=10, d_model=16", (torch.randint(0, 10, (2, 6), generator=g), torch.randn(10, 16, generator=g) / 4)),
            Case("batch 1, length 1", (torch.tensor([[3]]), torch.randn(5, 4, generator=g))),
            Case("float64", (torch.randint(0, 7, (2, 3), generator=g), torch.randn(7, 9, generator=g, dtype=torch.float64)))]


def _emb_draw(rng) -> Case:
    V, D, B, T, dt = rng.randint(2, 20), rng.randint(1, 12), rng.randint(1, 3), rng.randint(1, 6), P.dtype(rng)
    tokens = torch.randint(0, V, (B, T), generator=P.gen(rng))
    return Case(f"V={V}, d_model={D}, B={B}, T={T}, {dt}", (tokens, P.randn(rng, V, D, dtype=dt, scale=0.5)))


register(Exercise(
    "06.scaled_embedding", "the token embedding times √d_model", scaled_embedding, _emb_cases,
    draw=_emb_draw, differentiable=True, package=("workbench.model.transformer.Embedding.forward",),
    mistakes=(
        Mistake("not scaled by sqrt(d_model)", "multiply the looked-up rows by √d_model (paper section 3.4)",
                lambda tokens, table: table[tokens]),
        Mistake("divided by sqrt(d_model)", "multiply by √d_model, do not divide", lambda tokens, table: table[tokens] / math.sqrt(table.shape[-1])),
        Mistake("scaled by d_model", "the factor is the square root of d_model", lambda tokens, table: table[tokens] * table.shape[-1]),
    )))


def tied_logits(h: Tensor, table: Tensor) -> Tensor:
    """The pre-softmax projection tied to the target embedding (3.4): logits = h Eᵀ, one score per vocabulary entry.

    Shapes: h (B, T, d_model), table (V, d_model) -> (B, T, V)
    """
    return F.linear(h, table)  # as Transformer.generator with tie_output=True


def _tied_cases() -> list[Case]:
    g = _gen(6)
    return [Case("batch 2, V=10, d_model=16", (torch.randn(2, 4, 16, generator=g), torch.randn(10, 16, generator=g))),
            Case("batch 1, length 1", (torch.randn(1, 1, 4, generator=g), torch.randn(6, 4, generator=g))),
            Case("float64", (torch.randn(2, 3, 5, generator=g, dtype=torch.float64), torch.randn(7, 5, generator=g, dtype=torch.float64)))]


def _tied_draw(rng) -> Case:
    V, D, B, T, dt = rng.randint(2, 20), rng.randint(1, 12), rng.randint(1, 3), rng.randint(1, 6), P.dtype(rng)
    return Case(f"V={V}, d_model={D}, B={B}, T={T}, {dt}", (P.randn(rng, B, T, D, dtype=dt), P.randn(rng, V, D, dtype=dt)))


register(Exercise(
    "06.tied_logits", "the output projection tied to the embedding: logits = h Eᵀ", tied_logits, _tied_cases,
    draw=_tied_draw, differentiable=True,
    mistakes=(
        Mistake("scaled by sqrt(d_model) like the input", "only the input embedding is multiplied by √d_model; the "
                "output projection is h Eᵀ", lambda h, table: h @ table.T * math.sqrt(table.shape[-1])),
        Mistake("softmax applied (probabilities, not logits)", "return the raw scores: the loss (cross-entropy) takes "
                "logits and applies the softmax itself", lambda h, table: torch.softmax(h @ table.T, -1)),
    )))


# -- the prediction ------------------------------------------------------------------------------------------------
def _ffn_share(d_model: int = 512, d_ff: int = 2048) -> float:
    """The feed-forward network's share of one encoder layer's parameters (attention with biases, two LayerNorms)."""
    ffn = 2 * d_model * d_ff + d_ff + d_model
    attention = 4 * d_model * d_model + 4 * d_model
    return ffn / (ffn + attention + 2 * 2 * d_model)


register_prediction(Prediction(
    "06.ffn_share", "what fraction of one base encoder layer's parameters sits in the feed-forward network?",
    "PREDICT_FFN_SHARE", "number", tolerance=0.05,
    wrong=(("one half (as if d_ff = d_model)", 0.5), ("attention's share, one third", 1 / 3),
           ("four fifths (one d × d attention matrix)", 0.8)),
    expected=lambda params: _ffn_share()))
