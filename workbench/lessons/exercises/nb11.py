"""Exercises of notebook 11 (Table 1): the multiply-adds of one layer of each kind and the layers a signal needs to
cross a sequence, checked against :func:`workbench.lessons.complexity.layer_macs` and
:func:`~workbench.lessons.complexity.analytic_path_length`."""

from __future__ import annotations

import math

from workbench.lessons.complexity import KINDS, analytic_path_length, layer_macs
from workbench.lessons.exercises.core import Case, Exercise, Mistake, register

PACKAGE = ("workbench.lessons.complexity.layer_macs", "workbench.lessons.complexity.table1",
           "workbench.lessons.complexity.analytic_path_length", "workbench.lessons.complexity.ceil_log")


def over_rows(fn, rows: list[tuple]) -> list[int]:
    """``fn(*row)`` for every row, as integers (a float that is a whole number counts)."""
    out = []
    for row in rows:
        v = fn(*row)
        out.append(int(v) if isinstance(v, float) and v.is_integer() else v)
    return out


# -- layer_macs --------------------------------------------------------------------------------------------------
def _macs_cases() -> list[Case]:
    base = [(kind, n, d, 3, 8) for kind in KINDS for n, d in ((10, 512), (512, 512), (1024, 64))]
    return [Case("every kind at n < d, n = d, n > d", (base,)),
            Case("n = 1, d = 1, kernel 5, window 4", ([(kind, 1, 1, 5, 4) for kind in KINDS],)),
            Case("the crossing n = d = 64 and n = 2d", ([("self_attention", 64, 64, 3, 8), ("recurrent", 64, 64, 3, 8),
                                                        ("self_attention", 128, 64, 3, 8), ("recurrent", 128, 64, 3, 8)],))]


def _macs_draw(rng) -> Case:
    rows = [(rng.choice(KINDS), rng.randint(1, 2048), rng.randint(1, 1024), rng.randint(2, 7), rng.randint(1, 32))
            for _ in range(8)]
    return Case("8 random (kind, n, d, k, r)", (rows,))


def _macs(kind: str, n: int, d: int, k: int = 3, r: int = 8, att: int = 2, rnn: int = 2, swap: bool = False,
          conv: int = 1, restricted: int = 2) -> int:
    """A parametrised count, for writing the planted mistakes."""
    if kind == "self_attention":
        return att * n * d * d if swap else att * n * n * d
    if kind == "recurrent":
        return rnn * n * d * d
    if kind == "convolutional":
        return conv * k * n * d * d
    return restricted * r * n * d


register(Exercise(
    "11.layer_macs", "Table 1's multiply-adds of one layer: 2n²d, 2nd², knd², 2rnd", layer_macs, _macs_cases,
    driver=over_rows, draw=_macs_draw, package=PACKAGE, atol=0, rtol=0,
    mistakes=(
        Mistake("one product of attention counted", "attention does two products over n x n: QK^T (n²d) and the "
                "weights times V (n²d): 2n²d", lambda kind, n, d, k=3, r=8: _macs(kind, n, d, k, r, att=1)),
        Mistake("n and d swapped in attention", "self-attention grows with n² (every query meets every key), "
                "the recurrent layer with d²", lambda kind, n, d, k=3, r=8: _macs(kind, n, d, k, r, swap=True)),
        Mistake("one product of the recurrent cell counted", "each step does W_x x_t and W_h h_(t-1), two d x d "
                "products: 2nd²", lambda kind, n, d, k=3, r=8: _macs(kind, n, d, k, r, rnn=1)),
        Mistake("restricted attention over every key", "restricted attention sees r keys per query, not n: 2rnd",
                lambda kind, n, d, k=3, r=8: 2 * n * n * d if kind == "restricted" else _macs(kind, n, d, k, r)),
    )))


# -- analytic_path_length ------------------------------------------------------------------------------------------
def _path_cases() -> list[Case]:
    rows = [(kind, n, 3, 8, False) for kind in KINDS for n in (1, 2, 9, 10, 50)]
    # 244 and 1001: math.log(243, 3) and math.log(1000, 10) come out just under 5 and 3
    powers = [("convolutional", n, k, 8, True) for k, n in ((3, 27), (3, 28), (5, 125), (5, 126), (2, 1), (7, 343),
                                                           (3, 243), (3, 244), (10, 1000), (10, 1001))]
    even_odd = [(kind, n, k, r, False) for kind in ("convolutional", "restricted") for n in (2, 9, 10, 33)
                for k, r in ((4, 5), (6, 3), (4, 3))]  # an even kernel and an odd window: the floors show
    # exact powers where a logarithm in floating point (log, log10, log2 or their ratios) lands just above the
    # integer, and one past a large power, where a logarithm rounded to a few digits lands on it
    float_logs = [("convolutional", n, k, 8, True) for k, n in (
        (3, 19683), (3, 59049), (3, 1594323), (5, 3125), (5, 15625), (5, 1953125), (6, 216), (6, 46656), (7, 16807),
        (8, 512), (8, 262144), (8, 2097152), (9, 59049), (11, 1331), (11, 14641), (12, 248832), (10, 10**7 + 1),
        (3, 3**15 + 1), (2, 2**24 + 1),
        # just past powers of 2 beyond float32 and float64 precision of log2: a fudge term (log - eps) misses these
        (2, 2**31 + 1), (2, 2**32 + 1), (2, 2**41 + 1), (2, 2**53 + 1), (4, 4**20 + 1), (8, 8**17 + 1))]
    return [Case("every kind, n = 1, 2, 9, 10, 50", (rows,)), Case("dilated, n at exact powers of k", (powers,)),
            Case("dilated, powers where floating-point logarithms round the wrong way", (float_logs,)),
            Case("even kernel widths and odd windows", (even_odd,))]


def _path_draw(rng) -> Case:
    rows = []
    for _ in range(10):
        kind = rng.choice(KINDS)
        k = rng.choice([3, 4, 5, 6, 7])
        n = k ** rng.randint(1, 6) + rng.choice([-1, 0, 0, 1]) if rng.random() < 0.5 else rng.randint(1, 400)
        rows.append((kind, max(n, 1), k, rng.choice([2, 3, 4, 5, 8, 16]), kind == "convolutional" and rng.random() < 0.6))
    return Case("10 random (kind, n, k, r, dilated)", (rows,))


def _path_float_log(kind, n, k=3, r=8, dilated=False):
    if kind == "convolutional" and dilated and n > 1:
        return math.ceil(math.log(n, k))
    return analytic_path_length(kind, n, k, r, dilated)


def _path_full_kernel(kind, n, k=3, r=8, dilated=False):
    if kind == "convolutional" and not dilated and n > 1:
        return -(-(n - 1) // (k - 1))
    if kind == "restricted" and n > 1:
        return -(-(n - 1) // r)
    return analytic_path_length(kind, n, k, r, dilated)


def _path_recurrent_one(kind, n, k=3, r=8, dilated=False):
    return 1 if kind == "recurrent" else analytic_path_length(kind, n, k, r, dilated)


def _path_floor(kind, n, k=3, r=8, dilated=False):
    if kind == "convolutional" and not dilated and n > 1:
        return (n - 1) // ((k - 1) // 2)
    if kind == "restricted" and n > 1:
        return (n - 1) // (r // 2)
    return analytic_path_length(kind, n, k, r, dilated)


def _path_half_kernel(kind, n, k=3, r=8, dilated=False):
    if kind == "convolutional" and not dilated and n > 1:
        return -(-(n - 1) // (k // 2))
    return analytic_path_length(kind, n, k, r, dilated)


def _path_half_window(kind, n, k=3, r=8, dilated=False):
    if kind == "restricted" and n > 1:
        return math.ceil((n - 1) / (r / 2))
    return analytic_path_length(kind, n, k, r, dilated)


register(Exercise(
    "11.path_length", "the layers before output n-1 depends on input 0 (Table 1's last column)", analytic_path_length,
    _path_cases, driver=over_rows, draw=_path_draw, package=PACKAGE, atol=0, rtol=0, name="path_length",
    mistakes=(
        Mistake("log in floating point", "math.ceil(math.log(n, k)) is one too many at some exact powers of k "
                "(math.log(125, 5) = 3.0000000000000004): count the layers in integers, multiplying the reach by k",
                _path_float_log),
        Mistake("a kernel reaches k - 1 to one side", "a centred kernel of width k reaches (k - 1) // 2 positions to "
                "each side (a window of r keys, r // 2)", _path_full_kernel),
        Mistake("recurrent path of one layer", "unrolled in time, the recurrent layer is n applications of its cell: "
                "the signal from position 0 crosses n of them", _path_recurrent_one),
        Mistake("rounded down", "a last partial step still needs a layer: round the division up", _path_floor),
        Mistake("half the kernel width", "a centred kernel of width k reaches (k - 1) // 2 positions to each side: "
                "k // 2 is one too many for an even k (the middle position is the query's own)", _path_half_kernel),
        Mistake("half a window in floating point", "a window of r keys reaches r // 2 positions to each side, a whole "
                "number: r / 2 counts half a position for an odd r", _path_half_window),
    )))
