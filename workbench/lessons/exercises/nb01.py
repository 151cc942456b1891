"""Exercises of notebook 01 (seq2seq attention): the dot-product score, the attention distribution over a padded
source, and the context vector (the three steps of Luong's attention, as :class:`workbench.model.rnn.DotProductAttention`
computes them; :func:`package_step` runs that module for comparison)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Mistake, register
from workbench.lessons.exercises.predictions import Prediction, register_prediction
from workbench.model.rnn import DotProductAttention

PACKAGE = ("workbench.model.rnn.DotProductAttention.forward",)  # unavailable while a student's function runs


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _states(B: int, S: int, D: int, seed: int, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    g = _gen(seed)
    return torch.randn(B, D, generator=g, dtype=dtype), torch.randn(B, S, D, generator=g, dtype=dtype)


# -- dot_score ----------------------------------------------------------------------------------------------------
def dot_score(s: Tensor, H: Tensor) -> Tensor:
    """e_i = s · h_i for every source position. Shapes: s (B, D), H (B, S, D) -> (B, S)."""
    return (H @ s[:, :, None]).squeeze(-1)  # (B, S, 1) -> (B, S)


def _score_cases() -> list[Case]:
    return [Case("batch 3, 5 source states of width 4", _states(3, 5, 4, 0)),
            Case("batch 1", _states(1, 6, 8, 1)),
            Case("length 1", _states(2, 1, 4, 2)),
            Case("float64", _states(2, 4, 3, 3, torch.float64))]


def _score_draw(rng) -> Case:
    B, S, D, dt = rng.randint(1, 4), rng.randint(1, 7), rng.randint(1, 9), P.dtype(rng)
    return Case(f"batch {B}, {S} states of width {D}, {dt}", (P.randn(rng, B, D, dtype=dt), P.randn(rng, B, S, D, dtype=dt)))


register(Exercise(
    "01.dot_score", "the dot-product score e_i = s_t · h_i", dot_score, _score_cases,
    draw=_score_draw, differentiable=True, package=PACKAGE,
    mistakes=(
        Mistake("divided by sqrt(d)", "Luong's score s_t·h_i is not scaled; the 1/sqrt(d_k) belongs to the "
                "Transformer's attention (notebook 02)", lambda s, H: (H @ s[:, :, None]).squeeze(-1) / math.sqrt(s.shape[-1])),
        Mistake("normalised too early", "return the raw scores e_i: the softmax is the next step, not part of the score",
                lambda s, H: torch.softmax((H @ s[:, :, None]).squeeze(-1), -1)),
        Mistake("products not summed", "sum the element-wise products over the feature axis (the last one): "
                "e_i = Σ_d s_d h_{i,d}", lambda s, H: H * s[:, None, :]),
        Mistake("summed over source positions", "sum over the features (last axis), not over the source positions "
                "(axis 1): one score per position", lambda s, H: (H * s[:, None, :]).sum(1)),
    )))


# -- attention_distribution --------------------------------------------------------------------------------------
def attention_distribution(e: Tensor, mask: Tensor) -> Tensor:
    """alpha = softmax(e) over the real source positions; padding (mask False) gets weight 0.

    Shapes: e (B, S), mask (B, S) bool, True = real token -> (B, S)
    """
    return torch.softmax(e.masked_fill(~mask, float("-inf")), dim=-1)


def _dist_cases() -> list[Case]:
    g = _gen(10)
    e = torch.randn(3, 6, generator=g) * 2
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True] * 2 + [False] * 4])
    e1 = torch.randn(1, 5, generator=g, dtype=torch.float64)
    return [Case("batch 3 with padding", (e, mask)),
            Case("batch 1, float64, no padding", (e1, torch.ones(1, 5, dtype=torch.bool))),
            Case("one real position", (torch.randn(2, 4, generator=g), torch.tensor([[True, False, False, False]] * 2))),
            Case("length 1", (torch.randn(2, 1, generator=g), torch.ones(2, 1, dtype=torch.bool))),
            Case("padding not at the end", (torch.randn(2, 4, generator=g),
                                            torch.tensor([[False, True, True, False], [True, False, True, True]]))),
            Case("large scores (exp overflows unless the row's maximum is taken off first)",
                 (torch.tensor([[100.0, 0.0, -50.0, 3.0], [80.0, 90.0, 0.0, 1.0]]),
                  torch.tensor([[True, True, True, False], [True, True, True, True]]))),
            Case("a padded position with the largest score by far",
                 (torch.tensor([[0.0, 200.0, 1.0], [-3.0, 150.0, 150.0]]),
                  torch.tensor([[True, False, True], [True, False, True]])))]


def _dist_draw(rng) -> Case:
    B, S, dt = rng.randint(1, 5), rng.randint(1, 8), P.dtype(rng)
    lens = P.lengths(rng, B, S)
    return Case(f"batch {B}, lengths {lens}, {dt}", (P.randn(rng, B, S, dtype=dt, scale=2.0), P.key_mask(lens, S)))


def _ragged_cases() -> list[Case]:
    return [*_dist_cases(), Case("batch 4, every row a different length", _dist_draw_fixed())]


def _dist_draw_fixed() -> tuple:
    g = _gen(11)
    return torch.randn(4, 5, generator=g) * 3, P.key_mask([5, 3, 1, 4], 5)


register(Exercise(
    "01.attention_distribution", "alpha = softmax(e) over the real source positions", attention_distribution,
    _ragged_cases, draw=_dist_draw, differentiable=True, package=PACKAGE,
    invariants=(P.rows_sum_to_one(1, fully_masked_zero=False), P.masked_weights_zero(1)),
    mistakes=(
        Mistake("padding not masked", "padding positions got weight: fill their scores with -inf before the softmax",
                lambda e, mask: torch.softmax(e, -1)),
        Mistake("mask convention inverted", "mask True means a real token (may attend): fill where the mask is "
                "False (~mask), not where it is True", lambda e, mask: torch.softmax(e.masked_fill(mask, float("-inf")), -1)),
        Mistake("softmax over the wrong axis", "normalise over the source positions (dim=-1): each sentence's "
                "weights sum to 1", lambda e, mask: torch.softmax(e.masked_fill(~mask, float("-inf")), 0)),
        Mistake("padding zeroed after the softmax", "the weights no longer sum to 1: mask the scores with -inf "
                "before the softmax instead of zeroing weights after it", lambda e, mask: torch.softmax(e, -1) * mask),
    )))


# -- context_vector -----------------------------------------------------------------------------------------------
def context_vector(alpha: Tensor, H: Tensor) -> Tensor:
    """a_t = Σ_i alpha_i h_i, as :class:`~workbench.model.rnn.DotProductAttention` computes it.

    Shapes: alpha (B, S), H (B, S, D) -> (B, D)
    """
    return (alpha[:, None, :] @ H).squeeze(1)  # (B, 1, S) @ (B, S, D) -> (B, D)


def _ctx_cases() -> list[Case]:
    g = _gen(20)

    def case(B: int, S: int, D: int, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        alpha = torch.softmax(torch.randn(B, S, generator=g, dtype=dtype) * 2, -1)
        return alpha, torch.randn(B, S, D, generator=g, dtype=dtype)

    return [Case("batch 3, 5 states of width 4", case(3, 5, 4)), Case("batch 1", case(1, 7, 6)),
            Case("length 1", case(2, 1, 4)), Case("float64", case(2, 4, 3, torch.float64))]


def _ctx_draw(rng) -> Case:
    B, S, D, dt = rng.randint(1, 4), rng.randint(1, 7), rng.randint(1, 9), P.dtype(rng)
    alpha = torch.softmax(P.randn(rng, B, S, dtype=dt, scale=2.0), -1)
    return Case(f"batch {B}, {S} states of width {D}, {dt}", (alpha, P.randn(rng, B, S, D, dtype=dt)))


register(Exercise(
    "01.context_vector", "the context vector a_t = Σ_i alpha_i h_i", context_vector, _ctx_cases,
    draw=_ctx_draw, differentiable=True, package=PACKAGE,
    mistakes=(
        Mistake("weights ignored (plain average)", "every state got the same weight: multiply each h_i by its "
                "alpha_i before summing", lambda alpha, H: H.mean(1)),
        Mistake("hard attention (argmax state)", "you returned only the state with the largest weight: attention "
                "mixes all states, weighted by alpha", lambda alpha, H: H[torch.arange(H.shape[0]), alpha.argmax(-1)]),
        Mistake("weighted states not summed", "sum the weighted states over the source positions (axis 1): "
                "one vector per sentence", lambda alpha, H: alpha[:, :, None] * H),
        Mistake("summed over the features", "sum over the source positions (axis 1), not over the features "
                "(last axis)", lambda alpha, H: (alpha[:, :, None] * H).sum(-1)),
    )))



def package_step(s: Tensor, H: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """The three steps composed, and the package's :class:`DotProductAttention` on the same input: both
    (context, alpha), for the lesson to compare. Shapes: s (B, D), H (B, S, D), mask (B, S) -> (B, D), (B, S)."""
    ctx, w = DotProductAttention()(s[:, None], H, mask)  # (B, 1, D), (B, 1, S)
    return ctx[:, 0], w[:, 0]


# -- the prediction ------------------------------------------------------------------------------------------------
WORKED_H = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])  # the lesson's h_1..h_3
WORKED_S = torch.tensor([0.5, 1.0, 0.0, -0.5])  # the lesson's decoder state s_t

register_prediction(Prediction(
    "01.largest_state", "which encoder state of the worked example gets the largest weight (1, 2 or 3)?",
    "PREDICT_LARGEST_STATE", "choice", choices=(1, 2, 3),
    wrong=(("the first state", 1), ("the state with the largest entries (h_3)", 3)),
    expected=lambda params: int((WORKED_H @ WORKED_S).argmax()) + 1))
