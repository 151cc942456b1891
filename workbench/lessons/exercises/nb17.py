"""Exercise of notebook 17 (a production translator): Marian's (opus-mt's) sinusoidal position table, the paper's
angles with every sine in the first half of the vector and every cosine in the second, checked against
:func:`workbench.model.positional.sinusoidal_table` with ``layout="halves"`` (the layout the Hugging Face bridge
converts)."""

from __future__ import annotations

import torch
from torch import Tensor

from workbench.lessons.exercises.core import Case, Exercise, Mistake, register, variants
from workbench.lessons.exercises.nb04 import _table
from workbench.model.positional import sinusoidal_table

PACKAGE = ("workbench.model.positional.sinusoidal_table", "workbench.model.positional.SinusoidalPositionalEncoding.forward",
           "workbench.lessons.positional.rotation_matrix")


def marian_positions(max_len: int, d_model: int) -> Tensor:
    """Marian's table: M[p, i] = sin(p / 10000^(2i/d)) for i < ceil(d/2), M[p, ceil(d/2) + i] = cos(p / 10000^(2i/d)).

    Shapes:
        -> (max_len, d_model) float32
    """
    return sinusoidal_table(max_len, d_model, layout="halves")


def _cases() -> list[Case]:
    return [Case("40 positions, d_model 16", (40, 16)), Case("length 1", (1, 6)),
            Case("odd d_model 7", (12, 7)), Case("d_model 2", (5, 2))]


def _halves_column_exponent(max_len: int, d_model: int) -> Tensor:
    """Within each half, the column number i (not 2i) in the exponent."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    n_sin, n_cos = (d_model + 1) // 2, d_model // 2
    i = torch.arange(n_sin, dtype=torch.float64)
    angle = position / 10000 ** (i / d_model)
    return torch.cat([torch.sin(angle), torch.cos(angle[:, :n_cos])], dim=1).float()


register(Exercise(
    "17.marian_positions", "Marian's sinusoidal table: every sine first, then every cosine", marian_positions, _cases,
    draw=lambda rng: (lambda T, D: Case(f"{T} positions, d_model {D}", (T, D)))(rng.randint(1, 64), rng.randint(1, 40)),
    package=PACKAGE,
    mistakes=(
        *variants(
            _table,
            ("interleaved (the paper's layout)", "Marian puts every sine in the first half and every cosine in the "
             "second: [sin(angles), cos(angles)], not alternating columns", {"order": "interleaved"}),
            ("cosines first", "the first half holds the sines, the second the cosines", {"order": "halves",
                                                                                          "swap": True}),
            ("positions counted from 1", "the first position is p = 0 (its row is all sines 0, then all cosines 1)",
             {"order": "halves", "first": 1}),
        ),
        Mistake("column number i in the exponent", "pair i has the angle p / 10000^(2i/d): the exponent is 2i/d, "
                "twice the column number within a half", _halves_column_exponent),
    )))
