"""Causality probes (lesson 05): a model's masks checked from the outside.

:func:`future_leak_check` (changing future target tokens leaves past logits bit-for-bit equal),
:func:`decoder_dependency` (which decoder inputs each output depends on, by autograd) and
:func:`incremental_logits` (decoding one token at a time with the key/value cache gives the full pass's logits).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


@torch.no_grad()
def future_leak_check(model: nn.Module, src: Tensor, tgt_in: Tensor, position: int,
                      generator: torch.Generator | None = None) -> dict[str, Any]:
    """Replace every target token after ``position`` with random ids and compare the decoder's logits.

    With a correct causal mask, the logits at positions 0..position are bit-for-bit unchanged.

    Returns:
        ``past_identical`` (torch.equal on positions <= position), ``past_max_diff``, ``future_max_diff``
        (positions > position, which should move) and the perturbed input ``tgt_changed``.

    Shapes:
        src (B, S), tgt_in (B, T)
    """
    model.eval()
    low = 4 if model.tgt_vocab_size > 5 else 0  # keep clear of the special ids when the vocabulary allows
    changed = tgt_in.clone()
    tail = changed[:, position + 1 :]
    fresh = torch.randint(low, model.tgt_vocab_size, tail.shape, generator=generator)
    same = fresh == tail  # make sure every later token really changes
    fresh[same] = (fresh[same] + 1 - low) % (model.tgt_vocab_size - low) + low
    changed[:, position + 1 :] = fresh
    a, b = model(src, tgt_in), model(src, changed)  # (B, T, V)
    return {
        "past_identical": bool(torch.equal(a[:, : position + 1], b[:, : position + 1])),
        "past_max_diff": float((a[:, : position + 1] - b[:, : position + 1]).abs().max()),
        "future_max_diff": float((a[:, position + 1 :] - b[:, position + 1 :]).abs().max()),
        "tgt_changed": changed,
    }


def decoder_dependency(model: nn.Module, src: Tensor, tgt_in: Tensor) -> Tensor:
    """Which decoder inputs each output position depends on, measured with autograd.

    Entry [t, s] is the norm of d(logits at position t) / d(decoder input vector at position s), summed over the
    batch. With causal masking the upper triangle (s > t) is exactly zero.

    Shapes:
        src (B, S), tgt_in (B, T) -> (T, T)
    """
    model.eval()
    captured: dict[str, Tensor] = {}

    def keep(_module: nn.Module, _args: Any, output: Tensor) -> None:
        captured["x"] = output  # (B, T, d_model): token embedding + position, the decoder's input

    handle = model.tgt_embed.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            logits = model(src, tgt_in)  # (B, T, V)
            rows = [torch.autograd.grad(logits[:, t].sum(), captured["x"], retain_graph=True)[0].norm(dim=-1).sum(0)
                    for t in range(tgt_in.shape[1])]  # each (T,)
    finally:
        handle.remove()
    return torch.stack(rows).detach()  # (T, T)


@torch.no_grad()
def incremental_logits(model: nn.Module, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Any]:
    """Decoder logits computed one target token at a time with the key/value cache (as at inference).

    Returns:
        The logits, comparable with ``model(src, tgt_in)``, and the filled cache (``cache.length`` tokens fed;
        per layer ``cache.layers[i].self_attn`` grew one key per step, ``cross_attn`` was computed once).

    Shapes:
        src (B, S), tgt_in (B, T) -> logits (B, T, V)
    """
    model.eval()
    src_mask = model.src_mask(src)
    memory = model.encode(src, src_mask)
    cache = model.init_cache(memory, src_mask)
    steps = [model.decode(tgt_in[:, t : t + 1], memory, src_mask, cache) for t in range(tgt_in.shape[1])]
    return torch.cat(steps, dim=1), cache  # (B, T, V)
