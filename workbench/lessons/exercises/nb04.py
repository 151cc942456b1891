"""Exercises of notebook 04 (positional encoding): the sinusoidal table and the distance matrix between its rows,
checked against :func:`workbench.model.positional.sinusoidal_table` and :func:`~workbench.lessons.positional.distance_matrix`."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from workbench.lessons.exercises import properties as P
from workbench.lessons.exercises.core import Case, Exercise, Invariant, Mistake, register, variants
from workbench.lessons.exercises.predictions import Prediction, register_prediction
from workbench.lessons.positional import distance_matrix
from workbench.model.positional import sinusoidal_table


def _table(max_len: int, d_model: int, order: str = "interleaved", exponent: str = "2i/d", first: int = 0,
           swap: bool = False) -> Tensor:
    """A parametrised sinusoidal table, for writing the planted mistakes (computed in float64, as the package)."""
    position = torch.arange(first, first + max_len, dtype=torch.float64)[:, None]  # (T, 1)
    n_sin, n_cos = (d_model + 1) // 2, d_model // 2
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),)
    if exponent == "2i/d":
        angle = position / 10000 ** (two_i / d_model)
        angle_cos = angle[:, :n_cos]
    elif exponent == "2i":
        angle = position / 10000 ** two_i
        angle_cos = angle[:, :n_cos]
    else:  # "j/d": the column number j in the exponent, so the cosine columns use 2i+1
        angle = position / 10000 ** (two_i / d_model)
        angle_cos = position / 10000 ** ((two_i[:n_cos] + 1) / d_model)
    sin, cos = torch.sin(angle), torch.cos(angle_cos)
    if swap:
        sin, cos = torch.cos(angle), torch.sin(angle_cos)
    if order == "halves":
        return torch.cat([sin, cos], dim=1).float()
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = sin[:, :n_sin], cos
    return table.float()


def _table_cases() -> list[Case]:
    return [Case("50 positions, d_model 16", (50, 16)), Case("length 1", (1, 4)),
            Case("odd d_model 7", (20, 7)), Case("d_model 2", (10, 2))]


register(Exercise(
    "04.sinusoidal_table", "the sinusoidal table PE[p, 2i] = sin(p/10000^(2i/d)), PE[p, 2i+1] = cos(...)",
    sinusoidal_table, _table_cases, atol=1e-5,
    draw=lambda rng: (lambda T, D: Case(f"{T} positions, d_model {D}", (T, D)))(rng.randint(1, 64), rng.randint(1, 40)),
    package=("workbench.model.positional.SinusoidalPositionalEncoding.forward",
             "workbench.lessons.positional.rotation_matrix"),
    mistakes=variants(
        _table,
        ("sin and cos swapped", "even columns (2i) hold the sines, odd columns (2i+1) the cosines", {"swap": True}),
        ("sines and cosines in two halves", "interleave them: column 2i is sin, column 2i+1 is cos of the same angle "
         "(all sines first is another layout, e.g. Marian's)", {"order": "halves"}),
        ("exponent not divided by d_model", "the wavelength grows as 10000^(2i/d_model): divide 2i by d_model",
         {"exponent": "2i"}),
        ("column number in the cosines' exponent", "sin and cos of pair i share the angle p/10000^(2i/d): use 2i (the "
         "even column) for both, not 2i+1", {"exponent": "j/d"}),
        ("positions counted from 1", "the first position is p = 0 (its row is 0, 1, 0, 1, ...)", {"first": 1}),
    )))


FLOAT64_ATOL = 5e-7  # distance_matrix on float64 rows: the diagonal and every entry (see the register below)


def _dist_cases() -> list[Case]:
    g = torch.Generator().manual_seed(4)
    return [Case("sinusoidal table, 20 x 16", (sinusoidal_table(20, 16),)),
            Case("random 6 x 3, float64", (torch.randn(6, 3, generator=g, dtype=torch.float64),)),
            Case("length 1", (torch.randn(1, 4, generator=g),)),
            Case("random 8 x 5", (torch.randn(8, 5, generator=g),))]


def _dist_draw(rng) -> Case:
    T, D, dt = rng.randint(1, 12), rng.randint(1, 8), P.dtype(rng)
    return Case(f"random {T} x {D}, {dt}", (P.randn(rng, T, D, dtype=dt, scale=2.0),))


def _zero_to_itself(args: tuple, out: object) -> str | None:
    """On float64 rows the distance of a row to itself is 0 up to rounding (5e-7 allows |a|² + |b|² - 2 a·b on the
    checks' rows, about 1e-7 there); in float32 that cancellation alone can leave 2e-3, so only float64 inputs are
    judged."""
    (rows,) = args
    if not (isinstance(out, Tensor) and isinstance(rows, Tensor) and rows.dtype == torch.float64
            and out.dim() == 2 and out.shape[0] == out.shape[1] == rows.shape[0] and out.dtype.is_floating_point):
        return None
    diag = out.detach().double().diagonal().abs()
    if diag.numel() and float(diag.nan_to_num(nan=math.inf).max()) > FLOAT64_ATOL:
        i = int(diag.nan_to_num(nan=math.inf).argmax())
        return (f"the distance of row {i} to itself is {float(out[i, i]):.3g}, not 0: a row is at distance 0 from "
                "itself (nothing added under the square root)")
    return None


# not differentiable as a check: the distance of a row to itself is sqrt(0), whose gradient is undefined.
# atol: a right answer by |a|² + |b|² - 2 a·b (how torch.cdist computes large inputs) loses about sqrt(eps |x|²) to
# cancellation where two rows are close; in float32, with these rows, up to about 2e-3 on the diagonal. On float64
# rows the same cancellation costs about 1e-7, so there atol_float64 = 5e-7 (an epsilon of 1e-12 under the root, a
# float32 torch.cdist cast back to float64, fail)
register(Exercise(
    "04.distance_matrix", "the Euclidean distance between every pair of position vectors", distance_matrix,
    _dist_cases, atol=5e-3, atol_float64=FLOAT64_ATOL, draw=_dist_draw,
    package=("workbench.lessons.positional.cosine_matrix",),
    invariants=(Invariant("a row is at distance 0 from itself (float64 inputs)", _zero_to_itself),),
    mistakes=(
        Mistake("squared distances", "take the square root of the summed squared differences",
                lambda t: ((t[:, None, :] - t[None, :, :]) ** 2).sum(-1)),
        Mistake("dot products instead of distances", "a distance is ‖PE_i - PE_j‖, not the dot product PE_i · PE_j",
                lambda t: t @ t.T),
        Mistake("L1 distance", "sum the squared differences and take the square root (Euclidean), not the absolute "
                "differences", lambda t: (t[:, None, :] - t[None, :, :]).abs().sum(-1)),
        Mistake("distances between dimensions", "compare rows (positions), not columns: the result is (T, T)",
                lambda t: ((t.T[:, None, :] - t.T[None, :, :]) ** 2).sum(-1).sqrt()),
    )))


# -- the prediction ------------------------------------------------------------------------------------------------
D_MODEL = 512  # notebook 04's default D_MODEL (a test compares it with the notebook's parameters cell)

register_prediction(Prediction(
    "04.row_norm", "what is the norm of one row of the D_MODEL-wide sinusoidal table?", "PREDICT_ROW_NORM", "number",
    tolerance=0.02,
    wrong=(("the squared norm D_MODEL/2", D_MODEL / 2), ("unit rows", 1.0), ("sqrt(D_MODEL)", math.sqrt(D_MODEL))),
    expected=lambda params: math.sqrt(params.get("D_MODEL", D_MODEL) / 2)))  # D/2 (sin, cos) pairs of length 1
