"""Greedy decoding you can watch: the top-k next-token probabilities and the cross-attention row of every generated
token (lesson 16's step-by-step view and the inspector's generation panel).

It runs the package's own loop (:func:`~workbench.translation.decode.greedy_decode`), listening through its
``on_step`` argument, with the capture side door open on the decoder's cross-attention
(:func:`~workbench.inspect.capture.capture_attention`), so what is drawn is what
:func:`~workbench.translation.decode.translate` computes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from workbench.errors import DecodingError
from workbench.inspect.capture import capture_attention
from workbench.translation.decode import greedy_decode
from workbench.translation.decode_trace import _single_src

__all__ = ["GreedyTrace", "trace_greedy"]


@dataclass
class GreedyTrace:
    """Greedy decoding of one sentence, step by step.

    Shapes: ``top_ids``, ``top_probs`` (T, k); ``cross`` (T, L, H, S): at step t, the cross-attention weights of the
    decoder position that produced ``tokens[t]``, in every layer and head."""

    tokens: list[int]  # the emitted ids, eos included
    top_ids: Tensor  # (T, k) the k most probable next tokens at each step, most probable first
    top_probs: Tensor  # (T, k) their probabilities
    cross: Tensor  # (T, L, H, S)


@torch.no_grad()
def trace_greedy(model: Any, src: Tensor, k: int = 5, bos_id: int = 2, eos_id: int = 3, max_extra: int = 50,
                 max_len: int | None = None, use_cache: bool = True) -> GreedyTrace:
    """Run :func:`greedy_decode` on one sentence, recording each step's top-``k`` next-token probabilities and,
    through :func:`workbench.capture_attention`, the cross-attention row of each generated token.

    Shapes: src (1, S) -> a :class:`GreedyTrace`.
    """
    _single_src(model, src)
    if not isinstance(k, int) or k < 1:
        raise DecodingError(f"k={k!r} next tokens to record: use an integer >= 1 (the lesson uses 5)")
    probs: list[Tensor] = []
    tokens: list[int] = []

    def on_step(t: int, logits: Tensor, token: Tensor) -> None:
        probs.append(torch.softmax(logits[0].float(), dim=-1).cpu())  # (V,)
        tokens.append(int(token[0]))

    with capture_attention(model, kinds=["dec.cross"]) as cache:
        greedy_decode(model, src, bos_id=bos_id, eos_id=eos_id, max_extra=max_extra, max_len=max_len,
                      use_cache=use_cache, on_step=on_step)
    n_layers = len(cache.layers("dec.cross"))
    # each call of a cross block saw the positions fed at that step: the last one is the new token's query
    cross = torch.stack([torch.stack([cache.calls("dec.cross", layer)[t][0, :, -1, :] for layer in range(n_layers)])
                         for t in range(len(tokens))])  # (T, L, H, S)
    top_probs, top_ids = torch.stack(probs).topk(min(k, probs[0].shape[-1]), dim=-1)  # (T, k)
    return GreedyTrace(tokens, top_ids, top_probs, cross)
