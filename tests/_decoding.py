"""The small models and padded source batches the decoding tests share (tests/test_decode*.py)."""

from __future__ import annotations

import torch
from torch import nn

from workbench import RNNConfig, build_model, build_rnn, preset

VOCAB = 40  # source and target vocabulary of the test models


def tiny_translator(kind: str = "transformer") -> nn.Module:
    """A seeded, untrained tiny Transformer (``"transformer"``) or recurrent baseline (``"rnn"``), in eval mode."""
    torch.manual_seed(0)
    if kind == "rnn":
        return build_rnn(RNNConfig(d_model=32, n_layers=2, max_len=64), VOCAB, VOCAB).eval()
    return build_model(preset("tiny", max_len=64), VOCAB, VOCAB).eval()


def padded_src(lengths: list[int], seed: int) -> torch.Tensor:
    """(B, max(lengths)) random source ids in 4..VOCAB-1, row b padded (id 0) after its ``lengths[b]`` tokens."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(4, VOCAB, (len(lengths), max(lengths)), generator=g)
    for row, n in enumerate(lengths):
        s[row, n:] = 0
    return s
