"""Exercise of notebook 16 (one sentence end to end): re-ranking the finished beam hypotheses with the GNMT length
penalty, log P(Y) / lp(Y), lp(Y) = ((5 + |Y|) / 6) ** alpha (the rule :func:`workbench.translation.decode_trace.rerank`
and :func:`~workbench.translation.decode.beam_search` apply), checked on drawn beams where alpha changes the winner."""

from __future__ import annotations

import torch
from torch import Tensor

from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Mistake, register
from workbench.translation.decode import length_penalty

PACKAGE = ("workbench.translation.decode.length_penalty", "workbench.translation.decode_trace.rerank")


def rerank_finished(logp: Tensor, lengths: Tensor, alpha: float) -> tuple[Tensor, int]:
    """The normalised scores log P(Y) / ((5 + |Y|) / 6) ** alpha of N finished hypotheses and the index of the
    best (|Y|: generated tokens, eos included, the start token not).

    Shapes:
        logp (N,) float, lengths (N,) long -> ((N,), int)
    """
    normalised = logp / length_penalty(lengths, alpha)  # (N,)
    return normalised, int(normalised.argmax())


def _case(name: str, N: int, alpha: float, seed: int, dtype=torch.float32, long_better: bool = True) -> Case:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 25, (N,), generator=g)
    per_token = -(torch.rand(N, generator=g, dtype=torch.float64) * 0.6 + 0.2)  # log P per token, longer = lower
    logp = (per_token * lengths - torch.rand(N, generator=g, dtype=torch.float64)).to(dtype)
    return Case(name, (logp, lengths, alpha))


def _cases() -> list[Case]:
    return [_case("4 hypotheses, alpha 0.6", 4, 0.6, 14), _case("8 hypotheses, float64, alpha 0", 8, 0.0, 15,
                                                                  dtype=torch.float64),
            Case("1 hypothesis, alpha 1.0", (torch.tensor([-3.2], dtype=torch.float64), torch.tensor([4]), 1.0)),
            Case("alpha changes the winner: short -2.0 (2 tokens) or long -3.1 (6 tokens), alpha 1.5",
                 (torch.tensor([-2.0, -3.1]), torch.tensor([2, 6]), 1.5)),
            Case("a tie: hypotheses 1 and 2 score the same (the first of them wins, as in the search), alpha 0.6",
                 (torch.tensor([-5.0, -2.0, -2.0, -4.0]), torch.tensor([3, 3, 3, 3]), 0.6)),
            Case("two ties: hypotheses 0 and 1, then 2 and 3, alpha 1.0",
                 (torch.tensor([-2.0, -2.0, -9.0, -9.0]), torch.tensor([4, 4, 4, 4]), 1.0))]


def _draw(rng) -> Case:
    N, alpha, dt = rng.randint(1, 10), rng.choice([0.0, 0.2, 0.6, 1.0, 2.0, 3.0]), P.dtype(rng)
    return _case(f"{N} hypotheses, alpha {alpha}, {dt}", N, alpha, rng.randrange(2**31), dtype=dt)


def _lp(lengths: Tensor, alpha: float) -> Tensor:
    return ((5.0 + lengths) / 6.0) ** alpha


register(Exercise(
    "16.rerank_finished", "the finished hypotheses' scores log P / lp(|Y|) and the winner", rerank_finished, _cases,
    draw=_draw, package=PACKAGE, differentiable=True,
    # ((5 + lengths) / 6) on a long tensor is float32 whatever logp's dtype: float64 scores are judged to 1e-6
    atol_float64=1e-6, rtol_float64=1e-6,
    mistakes=(
        Mistake("start token counted in |Y|", "|Y| counts the generated tokens (eos included), not the start token "
                "the decoder was fed", lambda lp, n, a: (lambda s: (s, int(s.argmax())))(lp / _lp(n + 1, a))),
        Mistake("multiplied by the penalty", "divide the log-probability by lp(|Y|): multiplying makes long "
                "hypotheses lose more", lambda lp, n, a: (lambda s: (s, int(s.argmax())))(lp * _lp(n, a))),
        Mistake("lowest score wins", "log-probabilities are negative: the best hypothesis has the highest (least "
                "negative) normalised score", lambda lp, n, a: (lambda s: (s, int(s.argmin())))(lp / _lp(n, a))),
        Mistake("the last of tied hypotheses wins", "on a tie the first of the tied hypotheses wins, as torch.argmax "
                "and the search choose", lambda lp, n, a: (lambda s: (s, len(s) - 1 - int(s.flip(0).argmax())))(
                    lp / _lp(n, a))),
        Mistake("divided by the plain length", "the GNMT penalty is ((5 + |Y|) / 6) ** alpha, not |Y| ** alpha",
                lambda lp, n, a: (lambda s: (s, int(s.argmax())))(lp / n.to(lp.dtype) ** a)),
    )))
