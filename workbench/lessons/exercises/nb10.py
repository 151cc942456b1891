"""Exercises of notebook 10 (what the heads do): two head statistics over a batch of attention weights, the mean
entropy of each head's rows and the share of weight a head puts at a fixed offset (the previous token), checked
against :func:`workbench.inspect.heads.head_entropy` and :func:`~workbench.inspect.heads.positional_score`."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from workbench.inspect.heads import head_entropy, positional_score
from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Invariant, register, variants

PACKAGE = ("workbench.inspect.heads.head_entropy", "workbench.inspect.heads.head_confidence",
           "workbench.inspect.heads.positional_score")


def _weights(B: int, H: int, T: int, lens: list[int], gen: torch.Generator, dtype: torch.dtype = torch.float32,
             causal: bool = False, sharp: float = 2.0) -> tuple[Tensor, Tensor]:
    """Self-attention weights (B, H, T, T) of a ragged batch (keys past a row's length get 0) and its (B, T) query
    mask: the lesson's inputs, drawn."""
    scores = torch.randn(B, H, T, T, generator=gen, dtype=torch.float64) * sharp
    mask = P.key_mask(lens, T)  # (B, T)
    allowed = mask[:, None, None, :].expand(B, H, T, T)
    if causal:
        allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()
    w = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    return w.to(dtype), mask


def _cases(offset: bool) -> list[Case]:
    g = torch.Generator().manual_seed(9)
    w1, m1 = _weights(2, 4, 6, [6, 3], g)
    w2, m2 = _weights(3, 2, 5, [5, 2, 4], g, dtype=torch.float64, causal=True)
    w3, _ = _weights(1, 3, 4, [4], g)
    w4, m4 = _weights(2, 2, 1, [1, 1], g, dtype=torch.float64)
    w5 = w1.clone()
    w5[0, :, 2] = 0.0  # a real query whose keys were all masked: a row of zeros (the workbench's convention)
    w5[1, 1:, 0] = 0.0
    w6 = w3.clone()
    w6[0, 0, 1] = 0.0
    w7 = w1.clone()
    w7[:, 1] = 0.0  # a head none of whose rows attends to anything: no row counts, its score is 0
    extra = (-1,) if offset else ()
    return [Case("ragged batch of 2, 4 heads", (w1, *extra, m1)),
            Case("causal, float64, 3 sentences", (w2, *extra, m2)),
            Case("batch 1, no query mask", (w3, *extra, None)),
            Case("length 1, float64", (w4, *extra, m4)),
            Case("real queries that attend to nothing (rows of zeros)", (w5, *extra, m1)),
            Case("a row of zeros, no query mask", (w6, *extra, None)),
            Case("a head with no row that counts", (w7, *extra, m1))]


def _draw(offset: bool):
    def draw(rng) -> Case:
        B, H, T, dt = rng.randint(1, 4), rng.randint(1, 5), rng.randint(1, 9), P.dtype(rng)
        lens = P.lengths(rng, B, T)
        w, m = _weights(B, H, T, lens, P.gen(rng), dtype=dt, causal=rng.random() < 0.5, sharp=rng.choice([0.5, 3.0]))
        if rng.random() < 0.25:
            m = None
        extra = (rng.choice([-2, -1, 0, 1]),) if offset else ()
        return Case(f"B={B}, H={H}, T={T}, lengths {lens}, {dt}" + (f", offset {extra[0]}" if offset else ""),
                    (w, *extra, m))

    return draw


# -- head_entropy ------------------------------------------------------------------------------------------------
def _entropy(weights: Tensor, query_mask: Tensor | None = None, base: float = math.e, mask_queries: bool = True,
             mean: bool = True, sign: float = -1.0) -> Tensor:
    """A parametrised head entropy, for writing the planted mistakes."""
    ent = sign * (weights * weights.clamp_min(1e-12).log()).sum(-1) / math.log(base)  # (B, H, Tq)
    valid = weights.sum(-1) > 0
    if query_mask is not None and mask_queries:
        valid = valid & query_mask[:, None, :]
    total = (ent * valid).sum((0, 2))
    return total / valid.sum((0, 2)).clamp_min(1) if mean else total


def _entropy_bounds(args: tuple, out: Any) -> str | None:
    if not isinstance(out, Tensor) or not out.is_floating_point():
        return None
    top = math.log(args[0].shape[-1]) + 1e-6
    bad = (out < -1e-6) | (out > top) | out.isnan()
    if bool(bad.any()):
        h = int(bad.nonzero()[0][0])
        return f"head {h} has entropy {out[h].item():.4g}, outside [0, log Tk = {top:.4g}]"
    return None


# not differentiable as a check: the gradient of w log w at a weight of exactly 0 (a masked key) is not defined,
# and two right answers (clamping, xlogy) give different ones there
register(Exercise(
    "10.head_entropy", "the mean entropy (nats) of each head's attention rows, real queries only", head_entropy,
    lambda: _cases(offset=False), draw=_draw(offset=False), package=PACKAGE,
    invariants=(Invariant("a head's mean entropy lies between 0 and log Tk", _entropy_bounds),),
    mistakes=variants(
        _entropy,
        ("entropy in bits", "use the natural logarithm (nats), as the lesson's figures do: torch.log, not log2",
         {"base": 2.0}),
        ("padding queries averaged in", "average only over real query rows: combine the rows that attend to "
         "something with query_mask (B, Tq)", {"mask_queries": False}),
        ("summed over rows, not averaged", "divide the summed entropy of each head by the number of real rows it "
         "has", {"mean": False}),
        ("minus sign forgotten", "H = -Σ w log w: the log of a weight is negative, so the sum needs the minus",
         {"sign": 1.0}),
    )))


# -- positional_score -------------------------------------------------------------------------------------------
def _positional(weights: Tensor, offset: int, query_mask: Tensor | None = None, flip: bool = False,
                every_row: bool = False, mask_queries: bool = True) -> Tensor:
    """A parametrised positional score, for writing the planted mistakes."""
    B, H, Tq, Tk = weights.shape
    offset = -offset if flip else offset
    q = torch.arange(Tq)
    k = q + offset
    ok = (k >= 0) & (k < Tk)
    picked = weights[:, :, q[ok], k[ok]]  # (B, H, n)
    valid_all = weights.sum(-1) > 0  # (B, H, Tq)
    if query_mask is not None and mask_queries:
        valid_all = valid_all & query_mask[:, None, :]
    valid = valid_all[:, :, q[ok]]
    count = valid_all if every_row else valid
    return (picked * valid).sum((0, 2)) / count.sum((0, 2)).clamp_min(1)


def _share_bounds(args: tuple, out: Any) -> str | None:
    if not isinstance(out, Tensor) or not out.is_floating_point():
        return None
    bad = (out < -1e-6) | (out > 1 + 1e-6) | out.isnan()
    if bool(bad.any()):
        h = int(bad.nonzero()[0][0])
        return f"head {h} has a mean weight {out[h].item():.4g}, outside [0, 1]"
    return None


register(Exercise(
    "10.positional_score", "the mean weight each head puts on the key at position i + offset", positional_score,
    lambda: _cases(offset=True), draw=_draw(offset=True), package=PACKAGE, differentiable=True,
    invariants=(Invariant("a mean weight lies between 0 and 1", _share_bounds),),
    mistakes=variants(
        _positional,
        ("offset the wrong way", "query i looks at key i + offset: offset -1 is the previous token (the diagonal "
         "just below the main one)", {"flip": True}),
        ("rows without such a key counted", "a query whose key i + offset falls outside 0..T-1 (query 0 for the "
         "previous token) has no such key: leave it out of the mean, do not count it as 0 (a padding key inside "
         "0..T-1 does count, with its weight of 0)", {"every_row": True}),
        ("padding queries averaged in", "average only over real query rows (query_mask)", {"mask_queries": False}),
    )))
