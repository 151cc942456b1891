"""Exercise of notebook 15 (patching over many pairs): the percentile bootstrap interval of a mean over pairs,
corrected for the number of cells tested (Bonferroni), from given resamples, checked against
:func:`workbench.lessons.pronoun_pairs.resampled_interval` (what :func:`workbench.lessons.pronoun_study.findings`
computes for every cell)."""

from __future__ import annotations

import torch
from torch import Tensor

from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Invariant, register, variants
from workbench.lessons.pronoun_pairs import resampled_interval

PACKAGE = ("workbench.lessons.pronoun_pairs.resampled_interval", "workbench.lessons.pronoun_pairs.bootstrap_ci",
           "workbench.lessons.pronoun_study.summarise", "workbench.lessons.pronoun_study.findings")


def corrected_interval(scores: Tensor, resamples: Tensor, m: int, alpha: float = 0.05) -> tuple[Tensor, Tensor, Tensor]:
    """The mean score over pairs and its Bonferroni-corrected percentile bootstrap interval: (mean, low, high).

    Resample r takes the pairs ``resamples[r]`` (with repeats); its mean over pairs is one bootstrap mean. With
    ``m`` cells tested at once at family-wise level ``alpha``, the interval runs from the ``alpha / (2 m)`` to the
    ``1 - alpha / (2 m)`` quantile of the R bootstrap means (linear interpolation, as ``torch.quantile``).

    Shapes:
        scores (N, L), resamples (R, N) long -> three tensors (L,), in the dtype of ``scores``
    """
    mean, low, high = resampled_interval(scores.detach().cpu().double().numpy(), resamples.cpu().numpy(),
                                         level=1 - alpha / m)
    return tuple(torch.as_tensor(v, dtype=torch.float64).to(scores.dtype) for v in (mean, low, high))


def _case(name: str, N: int, L: int, R: int, m: int, alpha: float, seed: int, dtype=torch.float64) -> Case:
    g = torch.Generator().manual_seed(seed)
    # a score per pair and layer: restored shares around a layer's effect, with pair-to-pair spread
    effect = torch.rand(L, generator=g, dtype=torch.float64)
    scores = (effect + 0.3 * torch.randn(N, L, generator=g, dtype=torch.float64)).to(dtype)  # (N, L)
    resamples = torch.randint(0, N, (R, N), generator=g)  # (R, N)
    return Case(name, (scores, resamples, m, alpha))


def _cases() -> list[Case]:
    return [_case("12 pairs, 4 layers, 400 resamples, 6 cells tested", 12, 4, 400, 6, 0.05, 1),
            _case("one cell tested (no correction to make)", 20, 3, 300, 1, 0.05, 2),
            _case("float32 scores, 40 cells, alpha 0.1", 30, 2, 1000, 40, 0.1, 3, dtype=torch.float32),
            _case("2 pairs, 1 layer, 50 resamples", 2, 1, 50, 3, 0.05, 4),
            _case("many cells: a tail below one resample", 8, 5, 200, 200, 0.05, 5)]


def _draw(rng) -> Case:
    N, L, R, m = rng.randint(2, 40), rng.randint(1, 6), rng.randint(20, 600), rng.randint(2, 60)
    alpha, dt = rng.choice([0.05, 0.1, 0.01]), P.dtype(rng)
    return _case(f"N={N}, L={L}, R={R}, m={m}, alpha {alpha}, {dt}", N, L, R, m, alpha, rng.randrange(2**31), dt)


def _wrong(scores: Tensor, resamples: Tensor, m: int, alpha: float = 0.05, tail=lambda a, m: a / (2 * m),
           of: str = "resampled means", interpolation: str = "linear", centre: str = "scores",
           normal: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """A parametrised corrected interval, for writing the planted mistakes (each setting changed is one mistake)."""
    x = scores.detach().double()
    means = x[resamples].mean(dim=1)  # (R, L)
    sample = means if of == "resampled means" else x
    t = min(tail(alpha, m), 0.5)
    if normal:
        z = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(1 - t, dtype=torch.float64))
        sd = means.std(dim=0)
        low, high = x.mean(0) - z * sd, x.mean(0) + z * sd
    else:
        q = torch.tensor([t, 1 - t], dtype=torch.float64)
        low, high = torch.quantile(sample, q, dim=0, interpolation=interpolation)
    centre_value = x.mean(0) if centre == "scores" else means.mean(0)
    return tuple(v.to(scores.dtype) for v in (centre_value, low, high))


def _ordered(args: tuple, output) -> str | None:
    try:
        mean, low, high = output
        bad = (low > high + 1e-6).nonzero()
    except Exception:  # noqa: BLE001 (a wrong type or shape is reported elsewhere)
        return None
    if len(bad):
        i = int(bad[0, 0])
        return f"at layer {i} the low end {float(low[i]):.4f} lies above the high end {float(high[i]):.4f}"
    return None


def _inside_range(args: tuple, output) -> str | None:
    scores = args[0]
    try:
        _, low, high = output
        lo_bound, hi_bound = scores.double().min(0).values, scores.double().max(0).values
        bad = ((low.double() < lo_bound - 1e-6) | (high.double() > hi_bound + 1e-6)).nonzero()
    except Exception:  # noqa: BLE001
        return None
    if len(bad):
        i = int(bad[0, 0])
        return (f"at layer {i} the interval [{float(low[i]):.4f}, {float(high[i]):.4f}] leaves the range of the "
                f"scores [{float(lo_bound[i]):.4f}, {float(hi_bound[i]):.4f}]: a mean of resampled scores cannot")
    return None


register(Exercise(
    "15.corrected_interval", "a mean over pairs and its Bonferroni-corrected percentile bootstrap interval",
    corrected_interval, _cases, draw=_draw, package=PACKAGE,
    invariants=(Invariant("the low end lies at or below the high end", _ordered),
                Invariant("the interval lies within the range of the scores", _inside_range)),
    mistakes=(
        *variants(
            _wrong,
            ("no correction", "with m cells tested, each interval is taken at level 1 - alpha / m: the tails are "
             "alpha / (2 m), not alpha / 2", {"tail": lambda a, m: a / 2}),
            ("alpha / m in each tail", "the corrected level 1 - alpha / m leaves alpha / m outside the interval, split "
             "between the two tails: alpha / (2 m) each", {"tail": lambda a, m: a / m}),
            ("correction multiplied", "Bonferroni divides alpha by the number of tests (a wider interval), it does not "
             "multiply it", {"tail": lambda a, m: a * m / 2}),
            ("quantiles of the scores", "the interval is of the mean: take the quantiles of the R resampled means "
             "(scores[resamples].mean(1)), not of the pairs' scores", {"of": "scores"}),
            ("quantile by sorting and indexing", "take the quantiles with linear interpolation between the two "
             "nearest resampled means (torch.quantile's default), not the nearest lower one",
             {"interpolation": "lower"}),
            ("mean of the resampled means", "the point estimate is the mean of the scores themselves; the resampled "
             "means give only the interval", {"centre": "resampled means"}),
            ("a normal interval", "a percentile interval reads the quantiles of the resampled means; mean +- z * their "
             "standard deviation is the normal approximation", {"normal": True}),
        ),
    )))

