"""Boolean attention masks. One convention everywhere: ``True`` means *may attend*.

This is the convention of :func:`torch.nn.functional.scaled_dot_product_attention`. ``torch.nn.MultiheadAttention``
and ``torch.nn.Transformer*`` use the opposite (``True`` = blocked): convert with :func:`to_nn_mask` at that
boundary only.

The causality probes at the end check a model's masks from the outside: :func:`future_leak_check` (changing
future target tokens leaves past logits bit-for-bit equal), :func:`decoder_dependency` (which decoder inputs
each output depends on, by autograd) and :func:`incremental_logits` (decoding one token at a time with the
key/value cache gives the full pass's logits).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """True at real tokens, False at padding.

    Shapes:
        tokens: (B, T) integer ids -> (B, T) bool
    """
    return tokens != pad_id


def causal_mask(Tq: int, Tk: int | None = None, offset: int = 0, device: torch.device | None = None) -> Tensor:
    """Lower-triangular mask: query i may attend to keys j <= i + offset.

    ``offset`` is the number of keys already cached before the first query (incremental decoding).

    Shapes:
        -> (Tq, Tk) bool, with Tk = Tq + offset by default
    """
    Tk = Tq + offset if Tk is None else Tk
    q = torch.arange(Tq, device=device).unsqueeze(1) + offset  # (Tq, 1)
    k = torch.arange(Tk, device=device).unsqueeze(0)  # (1, Tk)
    return k <= q


def attention_mask(
    key_padding: Tensor | None = None,
    causal: bool = False,
    Tq: int | None = None,
    Tk: int | None = None,
    offset: int = 0,
) -> Tensor | None:
    """Combine a key-padding mask and a causal mask into one broadcastable boolean mask.

    Args:
        key_padding: (B, Tk) True at real keys, or None.
        causal: add a causal (lower-triangular) constraint; needs ``Tq``.
        Tq, Tk: query/key lengths (Tk defaults to key_padding's length, or Tq + offset).
        offset: keys cached before the first query.

    Shapes:
        -> (B, 1, 1, Tk) for padding only, (1, 1, Tq, Tk) for causal only, (B, 1, Tq, Tk) for both, or None.
    """
    mask = None
    if key_padding is not None:
        mask = key_padding[:, None, None, :]  # (B, 1, 1, Tk)
    if causal:
        if Tq is None:
            raise ValueError("attention_mask(causal=True) needs Tq, the number of queries")
        if Tk is None:
            Tk = key_padding.shape[-1] if key_padding is not None else Tq + offset
        device = key_padding.device if key_padding is not None else None
        c = causal_mask(Tq, Tk, offset=offset, device=device)[None, None]  # (1, 1, Tq, Tk)
        mask = c if mask is None else mask & c  # (B, 1, Tq, Tk)
    return mask


def to_nn_mask(mask: Tensor) -> Tensor:
    """Convert our mask (True = may attend) to torch.nn's (True = blocked), or back: it is an involution."""
    return ~mask


# -- causality probes ------------------------------------------------------------------------------------------------
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
