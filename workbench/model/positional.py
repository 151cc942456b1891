"""Positional encodings (paper section 3.5): the sinusoidal table and a learned alternative. What the lessons
measure of them (distances, offsets, the rotation between positions) is in :mod:`workbench.lessons.positional`."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def sinusoidal_table(max_len: int, d_model: int, base: float = 10000.0, layout: str = "interleaved") -> Tensor:
    """The paper's table: PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(p / base^(2i/d)).

    Works for odd ``d_model`` too (the last column is a sine). ``layout="halves"`` moves the same columns into
    the order Marian (opus-mt), fairseq and tensor2tensor use: every sine first, then every cosine,
    ``[PE[:, 0::2], PE[:, 1::2]]``.

    Shapes:
        -> (max_len, d_model) float32
    """
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),)
    angle = position / base ** (two_i / d_model)  # (T, ceil(D/2))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    if layout == "halves":
        table = torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)  # (T, ceil(D/2)) sines, (T, D//2) cosines
    elif layout != "interleaved":
        raise ValueError(f"unknown sinusoidal layout {layout!r}: choose 'interleaved' (the paper's) or 'halves'")
    return table.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table (a non-persistent buffer, so checkpoints stay small)."""

    def __init__(self, d_model: int, max_len: int, layout: str = "interleaved") -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_table(max_len, d_model, layout=layout), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Shapes: x (B, T, D) -> (B, T, D); positions offset..offset+T-1."""
        T = x.shape[1]
        if offset + T > self.table.shape[0]:
            raise ValueError(
                f"sequence of {offset + T} positions exceeds max_len={self.table.shape[0]}: "
                "shorten the input or build the model with a larger max_len"
            )
        return x + self.table[offset : offset + T].to(x.dtype)


class LearnedPositionalEncoding(nn.Module):
    """Adds a trained embedding per position (paper Table 3, row E)."""

    def __init__(self, d_model: int, max_len: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)

    @property
    def table(self) -> Tensor:
        return self.embedding.weight

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Shapes: x (B, T, D) -> (B, T, D)."""
        T = x.shape[1]
        if offset + T > self.embedding.num_embeddings:
            raise ValueError(
                f"sequence of {offset + T} positions exceeds max_len={self.embedding.num_embeddings}: "
                "shorten the input or build the model with a larger max_len"
            )
        return x + self.embedding.weight[offset : offset + T].to(x.dtype)
