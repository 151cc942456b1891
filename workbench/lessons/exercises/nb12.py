"""Exercises of notebook 12 (the paper's Table 3): the verdict on one trend against a noise yardstick, and the
paired verdict of one row from per-seed numbers, checked against :func:`workbench.lessons.verdicts.verdict` and
:func:`workbench.lessons.table3.judge_seeded`."""

from __future__ import annotations

import functools
import math
import statistics

from workbench.lessons.exercises.core import Case, Exercise, Mistake, register
from workbench.lessons.table3 import SPREAD_FACTOR, judge_seeded
from workbench.lessons.verdicts import verdict

PACKAGE = ("workbench.lessons.verdicts.verdict", "workbench.lessons.verdicts.judge_claims",
           "workbench.lessons.table3.judge_seeded")
# the paired verdict may use the verdict (the student's own, from the exercise before, or the package's)
ROW_PACKAGE = ("workbench.lessons.table3.judge_seeded", "workbench.lessons.table3.paired_differences",
               "workbench.lessons.verdicts.judge_claims")


def over_trends(fn, rows: list[tuple[float, int, float]]) -> list[str]:
    """``fn(delta, direction, margin)`` on every row."""
    return [fn(*row) for row in rows]


def _verdict_cases() -> list[Case]:
    rows = [(d, direction, m) for direction in (1, -1, 0) for d in (0.5, -0.5, 0.05, -0.05, 0.2, 0.0)
            for m in (0.1, 0.0)]
    return [Case("every direction, inside and outside the margin", (rows,)),
            Case("a margin of 0 and a tie at the margin", ([(0.1, 1, 0.1), (-0.1, -1, 0.1), (0.1, 0, 0.1)],))]


def _verdict_draw(rng) -> Case:
    rows = [(round(rng.uniform(-1, 1), 3), rng.choice([-1, 0, 1]), round(rng.uniform(0, 0.5), 3)) for _ in range(12)]
    return Case("12 random (delta, direction, margin)", (rows,))


def _v(delta, direction, margin, against_margin=True, signed=True, opposite=True, zero_as_up=False):
    """A parametrised verdict, for writing the planted mistakes (each setting off is one mistake)."""
    if zero_as_up and direction == 0:
        direction = 1
    if direction == 0:
        return "agrees" if abs(delta) <= margin else "differs"
    trend = direction * delta if signed else abs(delta)
    if not against_margin:  # the sign alone: any trend the other way is "opposite"
        return "agrees" if trend > 0 else "opposite"
    if trend > margin:
        return "agrees"
    return "opposite" if opposite and trend < -margin else "within noise"


register(Exercise(
    "12.verdict", "agrees, opposite, within noise (or differs) for one trend against a yardstick", verdict,
    _verdict_cases, driver=over_trends, draw=_verdict_draw, package=PACKAGE,
    mistakes=(
        Mistake("margin ignored", "a trend counts only when it is larger than the noise: compare direction * delta "
                "with the margin, not with 0", functools.partial(_v, against_margin=False)),
        Mistake("direction ignored", "a trend agrees when it goes the claim's way: multiply delta by the direction "
                "(a drop of 0.5 does not agree with 'higher')", functools.partial(_v, signed=False)),
        Mistake("opposite never said", "a trend that goes the other way by more than the margin is 'opposite', not "
                "'within noise'", functools.partial(_v, opposite=False)),
        Mistake("'no difference' judged as 'higher'", "direction 0 claims no difference: it agrees when |delta| <= "
                "margin and differs otherwise", functools.partial(_v, zero_as_up=True)),
    )))


# -- the paired verdict of one row -------------------------------------------------------------------------------
def paired_verdict(base: list[float], variant: list[float], direction: int, factor: float = SPREAD_FACTOR
                   ) -> tuple[float, float, str]:
    """The verdict on one Table 3 row from per-seed figures (``base[i]``, ``variant[i]`` share seed i): the mean
    paired difference (variant - base), the margin ``factor`` standard errors of that mean, and the verdict."""
    runs = [{"row": r, "seed": s, "x": v} for r, vals in (("base", base), ("variant", variant))
            for s, v in enumerate(vals)]
    j = judge_seeded(runs, {"claim": ("variant", direction)}, "x", base="base", factor=factor)["claim"]
    return j["delta"], j["margin"], j["verdict"]


def _pv(base, variant, direction, factor=SPREAD_FACTOR, paired=True, se=True, ddof=1, flip=False):
    """A parametrised paired verdict, for writing the planted mistakes."""
    diffs = [v - b for b, v in zip(base, variant, strict=True)]
    if flip:
        diffs = [-d for d in diffs]
    mean = statistics.fmean(diffs)
    if paired:
        sd = statistics.stdev(diffs) if ddof == 1 else statistics.pstdev(diffs)
    else:  # the spread of each row on its own, as if the seeds were not shared
        sd = math.sqrt(statistics.variance(base) + statistics.variance(variant))
    margin = factor * sd / (math.sqrt(len(diffs)) if se else 1.0)
    return mean, margin, verdict(mean, direction, margin)


def _pv_cases() -> list[Case]:
    return [Case("3 seeds, a clear drop claimed", ([4.10, 4.32, 3.95], [3.90, 4.15, 3.71], -1, 2.0)),
            Case("3 seeds, seeds move the base more than the variant does", ([4.0, 4.6, 3.5], [4.1, 4.7, 3.62], 1, 2.0)),
            Case("2 seeds, a 'no difference' claim", ([20.1, 21.3], [20.4, 21.2], 0, 2.0)),
            Case("5 seeds, factor 1", ([1.0, 1.2, 0.9, 1.1, 1.05], [1.1, 1.1, 1.0, 1.3, 1.0], 1, 1.0)),
            Case("4 seeds, a rise past 2 standard errors but inside 2 standard deviations",
                 ([1.0, 2.0, 3.0, 4.0], [1.1, 2.3, 3.2, 4.4], 1, 2.0)),
            Case("4 seeds, a 'no difference' claim between 2 standard errors and 2 standard deviations",
                 ([1.0, 2.0, 3.0, 4.0], [1.1, 2.3, 3.2, 4.4], 0, 2.0))]


def _pv_draw(rng) -> Case:
    n = rng.randint(2, 6)
    base = [round(rng.gauss(4.0, 0.4), 3) for _ in range(n)]
    shift, noise = rng.choice([-0.3, -0.05, 0.0, 0.05, 0.3]), rng.choice([0.02, 0.1, 0.3])
    variant = [round(b + shift + rng.gauss(0, noise), 3) for b in base]
    return Case(f"{n} seeds, shift {shift}, noise {noise}", (base, variant, rng.choice([-1, 0, 1]),
                                                            rng.choice([1.0, 2.0, 3.0])))


register(Exercise(
    "12.paired_verdict", "mean paired difference, its margin (factor x standard error) and the verdict of one row",
    paired_verdict, _pv_cases, draw=_pv_draw, package=ROW_PACKAGE, atol=1e-6, rtol=1e-5,  # float32 arithmetic is right too
    mistakes=(
        Mistake("seeds not paired", "the seeds are shared: take the differences seed by seed and their spread, not "
                "each row's own spread (which holds the seed-to-seed noise the pairing cancels)",
                lambda b, v, d, f=SPREAD_FACTOR: _pv(b, v, d, f, paired=False)),
        Mistake("standard deviation, not standard error", "the margin is factor x sd / sqrt(number of seeds): the "
                "mean of n differences is sqrt(n) times steadier than one", lambda b, v, d, f=SPREAD_FACTOR:
                _pv(b, v, d, f, se=False)),
        Mistake("population standard deviation", "the spread of a sample divides by n - 1 (statistics.stdev), not n",
                lambda b, v, d, f=SPREAD_FACTOR: _pv(b, v, d, f, ddof=0)),
        Mistake("base minus variant", "a row's trend is variant - base: a variant that lowers the loss has a negative "
                "delta", lambda b, v, d, f=SPREAD_FACTOR: _pv(b, v, d, f, flip=True)),
    )))
